"""Verify scenario `deploy`: the release the role installed (after converge, the idempotence run and the
check run: still revision 1), its objects in the API server, and the chart's own render -- `helm
template` of the default values, and of the release's values, which must name exactly the objects the
release holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE.parent / "shared"))

import cluster  # noqa: E402

CHART = cluster.REPO / "operator" / "chart" / "gpustack-operator"
RELEASE: dict[str, Any] = yaml.safe_load((HERE / "vars" / "release.yml").read_text(encoding="utf-8"))
NAME, NS = RELEASE["deploy_release_name"], RELEASE["deploy_namespace"]
PREFIX = RELEASE["deploy_values"]["fullnameOverride"]
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """helm (tests/tools/helm.sh) with homes of its own, on the scenario's cluster."""
    proc = subprocess.run(
        ["bash", str(cluster.REPO / "tests/tools/helm.sh")], capture_output=True, text=True, check=True
    )
    home = tmp_path_factory.mktemp("helm")
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        os.environ[var] = str(home / var.lower())
    return [proc.stdout.strip().splitlines()[-1], f"--kubeconfig={cluster.kubeconfig()}"]


def run(helm: list[str], *args: str) -> str:
    proc = subprocess.run([*helm, *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def objects(manifest: str) -> set[tuple[str, str]]:
    """(kind, name) of every object of a rendered manifest."""
    return {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(manifest) if d}


def test_the_release_is_deployed_once_idempotence_and_check_changed_nothing(helm: list[str]) -> None:
    listed = json.loads(run(helm, "list", "-n", NS, "-o", "json"))
    assert [(r["name"], r["status"], r["revision"]) for r in listed] == [(NAME, "deployed", "1")], listed
    assert listed[0]["chart"].startswith("gpustack-operator-"), listed


def test_the_role_gave_the_chart_its_variables_as_values(helm: list[str]) -> None:
    values = json.loads(run(helm, "get", "values", NAME, "-n", NS, "-o", "json"))
    assert values["fullnameOverride"] == PREFIX
    assert values["deviceManager"] == {"enabled": False, "createRuntimeClasses": False}
    assert values["worker"] == {"enabled": True, "replicas": 0}
    assert values["image"] == RELEASE["deploy_image"]


def test_the_release_holds_exactly_the_charts_render_of_its_values(helm: list[str], tmp_path: Path) -> None:
    values = tmp_path / "values.json"
    values.write_text(run(helm, "get", "values", NAME, "-n", NS, "-o", "json"))
    rendered = run(helm, "template", NAME, str(CHART), "-n", NS, "-f", str(values))
    held = run(helm, "get", "manifest", NAME, "-n", NS)
    assert objects(held) == objects(rendered)
    assert objects(held) == {
        ("ServiceAccount", f"{PREFIX}-worker"),
        ("ClusterRole", f"{PREFIX}-worker"),
        ("ClusterRoleBinding", f"{PREFIX}-worker"),
        ("Role", f"{PREFIX}-worker"),
        ("RoleBinding", f"{PREFIX}-worker"),
        ("Deployment", f"{PREFIX}-worker"),
    }


def test_the_objects_are_in_the_api_server() -> None:
    c = cluster.client()
    worker = f"{PREFIX}-worker"
    for path in (
        f"{cluster.CRD_PATH}/devices.worker.gpustack.ai",  # the chart's crds/ (or another user's copy)
        f"/api/v1/namespaces/{NS}/serviceaccounts/{worker}",
        f"{RBAC}/clusterroles/{worker}",
        f"{RBAC}/clusterrolebindings/{worker}",
        f"{RBAC}/namespaces/{NS}/roles/{worker}",
        f"{RBAC}/namespaces/{NS}/rolebindings/{worker}",
    ):
        assert cluster.get(c, path) is not None, path
    deployment = cluster.get(c, f"/apis/apps/v1/namespaces/{NS}/deployments/{worker}")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 0
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "localhost/pause:1"
    assert cluster.get(c, f"/api/v1/namespaces/{NS}/serviceaccounts/{PREFIX}-device-manager") is None


def test_the_charts_default_render_has_every_component(helm: list[str]) -> None:
    """`helm template` with the chart's own defaults: the worker, one Device Manager DaemonSet per enabled
    manufacturer row of values.yaml, both accounts with their least-privilege RBAC."""
    rendered = objects(run(helm, "template", "gpustack-operator", str(CHART), "-n", "gpustack-system"))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    enabled = sorted(m for m, row in defaults["global"]["manufacturers"].items() if row["enabled"])
    assert enabled, defaults["global"]["manufacturers"]
    daemonsets = {name for kind, name in rendered if kind == "DaemonSet"}
    assert daemonsets == {f"gpustack-operator-device-manager-{m}" for m in enabled}
    for account in ("gpustack-operator-worker", "gpustack-operator-device-manager"):
        assert ("ServiceAccount", account) in rendered
        assert ("ClusterRole", account) in rendered
        assert ("ClusterRoleBinding", account) in rendered
    assert ("Deployment", "gpustack-operator-worker") in rendered
    assert {kind for kind, _ in rendered} >= {"RuntimeClass", "Role", "RoleBinding"}
