"""What a preflight task loads on a host (issue 17, the weekly run's speed): every host of a fleet pays
for each module the pass imports, so what the pass does not use stays unloaded -- the API-server and
gRPC clients (``serve`` only), PyYAML (only for a kubelet configuration file to read), the stale sweep
(only with a runtime to sweep), the image-reference parser (only for ``--probe-image``), the labels
(``detect`` only) and the preload module's own entry (``preload_libraries`` only). Each runs in a fresh
interpreter, as the module's task does, through module_utils/gpustack.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_host

NOT_ON_THE_PATH = [
    "kubernetes",
    "grpc",
    "yaml",
    "gpustack_operator.kube",
    "gpustack_operator.deviceplugin",
    "gpustack_operator.host.safeyaml",
    "gpustack_operator.preflight.sweep",
    "gpustack_operator.preflight.imageref",
    "gpustack_operator.preload.node",
    "gpustack_operator.discovery.labels",
]

PASS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack
api = gpustack.gpustack_api
root, image = sys.argv[2], sys.argv[3] or None
report = api.run_preflight(api.make_request(root, None), host_root=root, probe_image=image)
print(json.dumps({"modules": sorted(sys.modules), "groups": len(report.wire()["accelerators"])}))
"""


def loaded(root: Path, probe_image: str = "") -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PASS, str(REPO / "collections"), str(root), probe_image],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["groups"] == 9
    return set(answer["modules"])


@pytest.mark.parametrize("node", ["h100-sxm-8x", "cpu-only-vm", "ascend-910b-8x"])
def test_a_preflight_pass_loads_nothing_it_does_not_use(node: str, tmp_path: Path) -> None:
    modules = loaded(copy_host(node, tmp_path))
    assert "gpustack_operator.preflight.run" in modules
    assert [m for m in NOT_ON_THE_PATH if m in modules] == []


def test_a_probe_image_loads_the_reference_parser(tmp_path: Path) -> None:
    modules = loaded(copy_host("cpu-only-vm", tmp_path), probe_image="registry.example.com:5000/ubuntu:24.04")
    assert "gpustack_operator.preflight.imageref" in modules


def test_a_kubelet_configuration_loads_pyyaml_and_is_read() -> None:
    code = (
        "import sys\n"
        "from gpustack_operator.preflight.kubelet import parse_kubelet_config\n"
        "print('yaml' in sys.modules)\n"
        "text = 'kind: KubeletConfiguration\\ntopologyManagerPolicy: best-effort\\n'\n"
        "print(sorted(str(s.value) for s in parse_kubelet_config(text)), 'yaml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["False", "['topologyManagerPolicy'] True"]


def test_the_preload_package_still_names_its_module_entry() -> None:
    from gpustack_operator import preload
    from gpustack_operator.preload import NodeStaging, stage_node
    from gpustack_operator.preload.node import NodeStaging as Direct
    from gpustack_operator.preload.node import stage_node as direct

    assert NodeStaging is Direct
    assert stage_node is direct
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = preload.nope


FREEZE = """
import gc, sys
import __main__
if sys.argv[2] == "module":  # what AnsiballZ's loader gives the module it runs
    __main__._module_fqn = "ansible_collections.gpustack.accelerators.plugins.modules.preflight"
    __main__._modlib_path = "/nonexistent"
sys.path.insert(0, sys.argv[1])
before = gc.get_freeze_count()  # the interpreter's start may freeze a few already
from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack
print(gc.get_freeze_count() - before > 10_000, gc.isenabled())
"""


@pytest.mark.parametrize(("started", "frozen"), [("module", "True"), ("import", "False")])
def test_the_package_is_frozen_out_of_the_gc_only_in_a_modules_process(started: str, frozen: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREEZE, str(REPO / "collections"), started], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [frozen, "True"]
