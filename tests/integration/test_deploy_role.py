"""The deploy role's refusals that need no cluster (issue 19): its argument spec, its own checks of the
variables, the chart and kubernetes.core -- each refused before anything reaches an API server, with
the words the README promises. The role against a real cluster is tests/cluster/test_deploy_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO
from tests.tools.kubernetes_core import FETCH_FAILED, KubernetesCoreError, provide

pytestmark = pytest.mark.ansible

CHART = REPO / "operator" / "chart" / "gpustack-operator"
# no API server answers here: a role that got past its refusals would fail on this instead
UNREACHABLE = {"deploy_kubeconfig": "/nonexistent/kubeconfig", "deploy_chart": str(CHART)}


@pytest.fixture(scope="module")
def collections() -> Path:
    try:
        return provide()
    except KubernetesCoreError as exc:
        if exc.code == FETCH_FAILED:
            pytest.skip(f"kubernetes.core could not be fetched: {exc}")
        raise


def run_role(
    tmp_path: Path, variables: dict[str, Any], collections_path: str, *, check: bool = False
) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "deploy.yml"
    play.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "gpustack.accelerators.deploy"}]}]
        )
    )
    inventory = tmp_path / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    (tmp_path / "vars.json").write_text(json.dumps(UNREACHABLE | variables))
    (tmp_path / "home").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "ANSIBLE_", "KUBECONFIG", "K8S_"))}
    env |= {
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "HOME": str(tmp_path / "home"),
        "PATH": f"{BIN}:{env.get('PATH', '')}",
    }
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play), "-e", f"@{tmp_path / 'vars.json'}"]
    return subprocess.run(
        [*argv, *(["--check"] if check else [])], capture_output=True, text=True, env=env, timeout=180, check=False
    )


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    return out


def test_the_argument_spec_refuses_bad_values(tmp_path: Path, collections: Path) -> None:
    bad = {
        "deploy_wait": "perhaps",
        "deploy_image": {"pullPolicy": "Sometimes"},
        "deploy_manufacturers": "nvidia",
        "deploy_api_timeout": "soon",
        "deploy_values": ["not", "a", "map"],
    }
    out = refused(run_role(tmp_path, bad, f"{collections}:{REPO / 'collections'}"))
    assert "Validating arguments against arg spec" in out, out[-3000:]
    for name in ("deploy_wait", "pullPolicy", "deploy_manufacturers", "deploy_api_timeout", "deploy_values"):
        assert name in out, f"{name} not named:\n{out[-3000:]}"
    assert "Sometimes" in out and "Always, IfNotPresent, Never" in out, out[-3000:]
    assert "Read the API server's groups" not in out  # refused before any task ran


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ({"deploy_manufacturers": {"nvidai": {"enabled": True}}}, "deploy_manufacturers names nvidai: its keys are"),
        ({"deploy_manufacturers": {"amd": "off"}}, "deploy_manufacturers names rows that are not maps: amd"),
        ({"deploy_timeout": "5 minutes"}, 'deploy_timeout "5 minutes" is not a Go duration'),
        (
            {"deploy_chart": "/nonexistent/chart"},
            "there is no Helm chart at /nonexistent/chart (no Chart.yaml): this copy of gpustack.accelerators was not"
            " built with `make collection`",
        ),
        ({"deploy_nfd": True}, "does not carry the node-feature-discovery subchart"),
    ],
    ids=["unknown-manufacturer", "row-not-a-map", "timeout", "no-chart", "nfd-subchart-missing"],
)
def test_the_role_refuses_before_reaching_the_cluster(
    tmp_path: Path, collections: Path, variables: dict[str, Any], words: str
) -> None:
    out = refused(run_role(tmp_path, variables, f"{collections}:{REPO / 'collections'}", check=True))
    assert words in " ".join(out.split()), out[-3000:]
    assert "Read the API server's groups" not in out, out[-3000:]


def test_without_kubernetes_core_names_how_to_get_it(tmp_path: Path) -> None:
    out = refused(run_role(tmp_path, {}, str(REPO / "collections")))
    text = " ".join(out.split())
    assert "the kubernetes.core collection is not installed" in text, out[-3000:]
    assert "ansible-galaxy collection install kubernetes.core" in text, out[-3000:]
    assert "the `ansible` package" in text, out[-3000:]


def test_an_unreachable_cluster_is_refused(tmp_path: Path, collections: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    out = refused(run_role(tmp_path, {"deploy_kubeconfig": str(kubeconfig)}, f"{collections}:{REPO / 'collections'}"))
    text = " ".join(out.split())
    assert f"the cluster cannot be reached through {kubeconfig}" in text, out[-3000:]
    assert "Connection refused" in text and "nothing was installed" in text, out[-3000:]
    assert "Install or upgrade the gpustack-operator release" not in out
