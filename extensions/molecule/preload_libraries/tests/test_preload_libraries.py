"""Verify scenario `preload_libraries`: on each node exactly the subtrees its accelerators need are
staged under /var/lib/gpustack/operator/lib, byte for byte and mode for mode the controller's source;
what was there before and is not the node's (the pod records, an older CANN subtree) is untouched;
no work directory or shipped copy of the source is left; and the package in the container, asked
again, finds nothing to change."""

from __future__ import annotations

import json
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.preload import LIB_DIR, wanted_subtrees

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller import BUILD, VENV, container, controller_listing, detect, listing, sha256
from source_tree import subtree_of

# Both nodes live in one container (the Atlas node's inventory host reaches the same one). Addressed
# with testinfra's own podman backend (through molecule's inventory testinfra would fall back to one
# ad-hoc `ansible` run per command for the podman connection).
testinfra_hosts = ["podman://" + container("gpustack-preload-libraries")]  # this run's container

SCENARIO = Path(__file__).resolve().parents[1]
# host -> {root, fixture, manufacturer, untouched}: the table prepare.yml used
NODES: dict[str, dict[str, Any]] = yaml.safe_load((SCENARIO / "vars" / "nodes.yml").read_text(encoding="utf-8"))[
    "molecule_nodes"
]
OUT = BUILD / SCENARIO.name  # what prepare.yml built on the controller (source_tree.py)
SOURCE = OUT / "source"
NEXT = OUT / "source-next"
TARBALL_COPY = "/root/preload-source.tar.gz"  # prepare.yml copied the tarball here for this verifier
# path, type, mode, owner, link target of every entry under a directory (the module's own terms)
ENTRIES = "find {top} -mindepth 1 -printf '%P\\t%y\\t%m\\t%u\\t%l\\n'"
SHA256 = "cd {top} && find . -type f -exec sha256sum {{}} +"


def wanted(fixture: str) -> list[str]:
    """The subtrees a node needs, by the controller's package: its detection of the fixture, then
    the package's own layout rule."""
    doc = detect(fixture)
    groups = [DevicesGroup.model_validate(g) for g in doc["groups"]]
    arch = (doc["node"].get("cpu") or {}).get("arch", "unknown")
    return wanted_subtrees(groups, arch).subtrees


def lib(host_name: str) -> str:
    return f"{NODES[host_name]['root']}/{LIB_DIR}"


def untouched_in_lib(host_name: str) -> list[str]:
    """The paths under the lib tree prepare.yml put there for converge to leave alone."""
    prefix = f"{LIB_DIR}/"
    return [p.removeprefix(prefix) for p in NODES[host_name]["untouched"] if p.startswith(prefix)]


def source_subtrees() -> set[str]:
    """<manufacturer>[/<runtime-subdir>] directories of the controller's tree."""
    return {subtree_of(str(p.relative_to(SOURCE))) for p in SOURCE.rglob("*") if p.is_file()}


def entries(host: Any, top: str) -> dict[str, tuple[str, str, str, str]]:
    out = {}
    for line in host.check_output(ENTRIES.format(top=shlex.quote(top))).splitlines():
        path, kind, mode, owner, target = (line.split("\t") + [""] * 5)[:5]
        out[path] = (kind, mode, owner, target)
    return out


def checksums(text: str) -> dict[str, str]:
    return {name.removeprefix("./"): digest for digest, name in (line.split(maxsplit=1) for line in text.splitlines())}


@pytest.fixture(scope="module", params=sorted(NODES))
def node(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_each_node_needs_one_runtime_subdir_among_several_in_the_source(node):
    need = wanted(NODES[node]["fixture"])
    assert len(need) == 1 and "/" in need[0], need  # nvidia/cuda-<major>, ascend/cann-<major>-<family>
    manufacturer = need[0].split("/")[0]
    assert manufacturer == NODES[node]["manufacturer"]
    siblings = {s for s in source_subtrees() if s.startswith(f"{manufacturer}/")}
    assert need[0] in siblings and len(siblings) > 1, siblings  # the choice matters


def test_exactly_the_needed_subtrees_are_staged(host, node):
    need = wanted(NODES[node]["fixture"])
    inside = listing(host.check_output(f"find {lib(node)} -mindepth 1 -printf '%P\\t%y\\t%l\\n'"))
    kept = untouched_in_lib(node)
    assert all(any(p == k or p.startswith(f"{k}/") for p, _, _ in inside) for k in kept), kept
    staged = {e for e in inside if not any(e[0] == k or e[0].startswith(f"{k}/") for k in kept)}
    expected = set()
    for subtree in need:
        parts = subtree.split("/")
        expected |= {("/".join(parts[: i + 1]), "d", "") for i in range(len(parts))}
        expected |= {(f"{subtree}/{p}", kind, target) for p, kind, target in controller_listing(SOURCE / subtree)}
    assert staged == expected, sorted(staged ^ expected)
    for other in source_subtrees() - set(need):  # other runtime majors, families, manufacturers
        assert not host.file(f"{lib(node)}/{other}").exists, other


def test_every_file_mode_and_link_is_the_controllers(host, node):
    for subtree in wanted(NODES[node]["fixture"]):
        top, src = f"{lib(node)}/{subtree}", SOURCE / subtree
        inside = entries(host, top)
        expected = {}
        for path in [src, *src.rglob("*")]:
            rel = str(path.relative_to(src))
            st = path.lstat()
            kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
            # staging writes a file or directory with its source's mode (a link has none of its own)
            mode = "777" if kind == "l" else f"{stat.S_IMODE(st.st_mode):o}"
            target = str(path.readlink()) if kind == "l" else ""
            if rel != ".":
                expected[rel] = (kind, mode, "root", target)
        assert inside == expected
        # the subtree directory itself takes the source's mode too
        assert host.file(top).mode == stat.S_IMODE(src.stat().st_mode)
        digests = checksums(host.check_output(SHA256.format(top=shlex.quote(top))))
        assert digests == {
            str(p.relative_to(src)): sha256(p) for p in src.rglob("*") if p.is_file() and not p.is_symlink()
        }
        assert len(set(digests.values())) == len(digests)  # every file its own content


def test_the_lib_path_is_real_directories(host, node):
    path = NODES[node]["root"]
    for part in LIB_DIR.parts:
        path = f"{path}/{part}"
        f = host.file(path)
        assert f.is_directory and not f.is_symlink, path


def test_no_work_directory_or_shipped_source_is_left(host, node):
    # the killed run's .cuda-12.staging-* / .cuda-12.old-* (prepare.yml) are swept, and none of
    # converge's own remain
    assert host.check_output(f"find {lib(node)} -name '.*'") == ""
    # the module's extraction directories and the action plugin's copies of the source
    assert host.check_output("find /tmp -maxdepth 1 -name 'gpustack-preload-*'") == ""
    assert host.check_output("find /root/.ansible -name 'preload-source*' 2>/dev/null || true") == ""


def test_check_mode_left_the_next_release_unstaged(host, node):
    (subtree,) = wanted(NODES[node]["fixture"])
    changes = json.loads((OUT / "source-next.json").read_text(encoding="utf-8"))[subtree]
    for path in changes["added"]:
        assert not host.file(f"{lib(node)}/{path}").exists, path
    for path in changes["replaced"]:
        now = host.file(f"{lib(node)}/{path}").sha256sum
        assert now == sha256(SOURCE / path) != sha256(NEXT / path), path
    for path in changes["removed"]:
        staged = host.file(f"{lib(node)}/{path}")
        assert staged.is_directory if path.endswith("/") else staged.sha256sum == sha256(SOURCE / path), path


def test_pod_records_and_the_older_subtree_are_untouched(host, node):
    # path, type, size, mode, owner, mtime and sha256 of every entry, as prepare.yml recorded them
    check = host.run(f"untouched check /root/untouched-{node}.state")
    assert check.rc == 0, check.stdout + check.stderr
    recorded = host.file(f"/root/untouched-{node}.state").content_string
    assert "allocation.json" in recorded
    pods = OUT / "pods" / node
    for record in pods.rglob("allocation.json"):
        inside = host.file(f"{NODES[node]['root']}/var/lib/gpustack/operator/pods/{record.relative_to(pods)}")
        assert inside.sha256sum == sha256(record)


PACKAGE_VIEW = """
import json, sys
from pathlib import Path
from gpustack_operator import api
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.podrecords import read_pod_records
from gpustack_operator.preload import stage_node
root, source = sys.argv[1:3]
detection = api.run_detect(api.make_request(root, None))
outcome = stage_node(detection, Path(source), Path(root), check=True)
pods = [r.model_dump() for r in read_pod_records(HostRoot(root))]
print(json.dumps({"staging": outcome.model_dump(mode="json"), "pods": pods}))
"""


def test_the_package_in_the_container_finds_nothing_to_change(host, node):
    """The package's own view, in the container: detection there, the layout it calls for, and a
    plan against the same tree (as the tarball: /host was staged from the directory) that changes
    nothing."""
    root = NODES[node]["root"]
    out = host.check_output(f"{VENV}/bin/python -c {shlex.quote(PACKAGE_VIEW)} {shlex.quote(root)} {TARBALL_COPY}")
    doc = json.loads(out)
    staging = doc["staging"]
    assert staging["staged"] == wanted(NODES[node]["fixture"])
    assert staging["destination"] == lib(node)
    assert staging["changed"] is False and staging["updated"] == []
    assert staging["added"] == staging["replaced"] == staging["removed"] == []
    (record,) = doc["pods"]
    expected = json.loads(next((OUT / "pods" / node).rglob("allocation.json")).read_text(encoding="utf-8"))
    assert record["pod"] == expected["pod"] and record["accelerators"] == expected["accelerators"]
    assert record["manufacturer"] == NODES[node]["manufacturer"] and record["problem"] is None


def test_the_container_has_no_network(host):
    # podman's network none: only the loopback interface, nothing leaves the machine
    assert host.check_output("ls /sys/class/net") == "lo"
