"""The chart installed by a real helm into the suite's real API server (tests/tools/kube_cluster.py):
what `helm template` cannot show (docs/chart.md).

* `helm install` creates every object (the CRD from crds/, both ServiceAccounts, the RBAC, the worker
  Deployment, the nine Device Manager DaemonSets);
* the RBAC through the API server's own authorizer (SubjectAccessReview as each ServiceAccount): what
  each needs is allowed, a sample of what it does not need is denied;
* the RuntimeClass guard: a class of the same name that the release does not own is left alone (without
  the `lookup` guard the install fails on it), the others are created and removed with the release;
* `helm upgrade`: an env switch set, then put back with null (`--reset-then-reuse-values`; what
  `--reuse-values` does instead is pinned), and null over whole sections under `--reuse-values`.

The DaemonSets are installed with `deviceManager.securityContext.privileged=false` (nothing here needs
more; the cluster's API server would take either); the image is not in the cluster (pullPolicy Never: no
Pod pulls anything), and the node carries no NFD label, so no Device Manager Pod is scheduled. No Pod is
expected to run; the objects are the subject.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from tests.tools.helm import Helm, HelmUnavailableError, provide
from tests.tools.kube_cluster import KubeCluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "operator" / "chart" / "gpustack-operator"
NS = "gpustack-chart-test"  # not the system namespace other cluster tests use
RELEASE = "gpustack-operator"
PREFIX = "chart-test"  # fullnameOverride: cluster-scoped names of their own
BASE = ["--set", f"fullnameOverride={PREFIX}", "--set", "image.pullPolicy=Never"]
UNPRIVILEGED = ["--set", "deviceManager.securityContext.privileged=false"]
FOREIGN_CLASS = "nvidia"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory, kube_cluster: KubeCluster) -> Helm:
    try:
        tool = provide(tmp_path_factory.mktemp("helm-home"))
    except HelmUnavailableError as exc:
        pytest.skip(f"helm is not available: npm cannot fetch it ({exc})")
    return Helm(tool.path, {**tool.env, "KUBECONFIG": str(kube_cluster.kubeconfig)})


def ok(proc: Any) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return str(proc.stdout)


@pytest.fixture(scope="module")
def release(helm: Helm, kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The release installed, with a foreign RuntimeClass ``nvidia`` there before it; everything removed
    afterwards (the release, the namespace, the foreign class)."""
    node = kubernetes.client.NodeV1Api(kube_cluster.core().api_client)
    node.create_runtime_class(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": FOREIGN_CLASS}, "handler": "x"}
    )
    try:
        ok(helm.run("install", RELEASE, str(CHART), "-n", NS, "--create-namespace", *BASE, *UNPRIVILEGED))
        yield kube_cluster
    finally:
        helm.run("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "60s")
        kube_cluster.core().delete_namespace(NS)
        node.delete_runtime_class(FOREIGN_CLASS)


def daemonset_env(cluster: KubeCluster, manufacturer: str) -> dict[str, str | None]:
    apps = kubernetes.client.AppsV1Api(cluster.core().api_client)
    ds = apps.read_namespaced_daemon_set(f"{PREFIX}-device-manager-{manufacturer}", NS)
    return {e.name: e.value for e in ds.spec.template.spec.containers[0].env}


def test_install_creates_every_object(release: KubeCluster) -> None:
    client = release.core().api_client
    apps = kubernetes.client.AppsV1Api(client)
    names = sorted(d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items)
    assert len(names) == 9 and all(n.startswith(f"{PREFIX}-device-manager-") for n in names)
    assert [d.metadata.name for d in apps.list_namespaced_deployment(NS).items] == [f"{PREFIX}-worker"]
    accounts = {a.metadata.name for a in release.core().list_namespaced_service_account(NS).items}
    assert {f"{PREFIX}-worker", f"{PREFIX}-device-manager"} <= accounts
    ext = kubernetes.client.ApiextensionsV1Api(client)
    assert ext.read_custom_resource_definition("devices.worker.gpustack.ai").spec.group == "worker.gpustack.ai"


def test_runtime_classes_leave_a_foreign_one_alone(release: KubeCluster, helm: Helm) -> None:
    node = kubernetes.client.NodeV1Api(release.core().api_client)
    classes = {c.metadata.name: c for c in node.list_runtime_class().items}
    foreign = classes[FOREIGN_CLASS]
    assert foreign.handler == "x" and not (foreign.metadata.annotations or {})
    for name in ("ascend", "iluvatar", "mthreads"):
        annotations = classes[name].metadata.annotations or {}
        assert annotations.get("meta.helm.sh/release-name") == RELEASE, f"RuntimeClass {name} is not the release's"
    assert "amd" not in classes  # no runtimeInjects* fact
    # the release's manifest holds no nvidia class: the guard left it out rather than fight over it
    manifest = ok(helm.run("get", "manifest", RELEASE, "-n", NS))
    assert "name: nvidia\nhandler: nvidia" not in manifest
    assert "kind: RuntimeClass" in manifest


def allowed(cluster: KubeCluster, account: str, verb: str, group: str, resource: str, namespace: str = "") -> bool:
    resource, _, subresource = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NS}:{PREFIX}-{account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
            },
        },
    }
    api = kubernetes.client.AuthorizationV1Api(cluster.core().api_client)
    return bool(api.create_subject_access_review(review).status.allowed)


NEEDED = {
    "device-manager": [
        ("list", "", "pods", ""),
        ("watch", "", "pods", ""),
        ("patch", "", "pods", ""),
        ("get", "", "nodes", ""),
        ("patch", "", "nodes/status", ""),
        ("create", "nfd.k8s-sigs.io", "nodefeatures", NS),
        ("update", "worker.gpustack.ai", "devices", ""),
        ("update", "worker.gpustack.ai", "devices/status", ""),
    ],
    "worker": [
        ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
        ("update", "nfd.k8s-sigs.io", "nodefeaturerules", ""),
        ("watch", "", "nodes", ""),
        ("delete", "worker.gpustack.ai", "devices", ""),
        ("update", "nfd.k8s-sigs.io", "nodefeatures", NS),
        ("update", "coordination.k8s.io", "leases", NS),
    ],
}
DENIED = {
    "device-manager": [
        ("delete", "", "pods", ""),
        ("get", "", "pods", ""),  # the watch lists; no Pod is read alone
        ("patch", "worker.gpustack.ai", "devices/status", ""),
        ("get", "", "secrets", NS),
        ("patch", "", "nodes", ""),
        ("delete", "worker.gpustack.ai", "devices", ""),
        ("create", "nfd.k8s-sigs.io", "nodefeatures", "default"),  # only in the release namespace
        ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ],
    "worker": [
        ("patch", "", "pods", ""),
        ("update", "", "nodes", ""),
        ("get", "", "secrets", NS),
        ("update", "coordination.k8s.io", "leases", "kube-system"),
        ("update", "worker.gpustack.ai", "devices", ""),  # the managed mark is a patch
        ("create", "", "events", NS),  # the worker writes no Events
        ("delete", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ],
}


@pytest.mark.parametrize("account", sorted(NEEDED))
def test_rbac_through_the_authorizer(release: KubeCluster, account: str) -> None:
    for verb, group, resource, namespace in NEEDED[account]:
        assert allowed(release, account, verb, group, resource, namespace), f"{account} may not {verb} {resource}"
    for verb, group, resource, namespace in DENIED[account]:
        assert not allowed(release, account, verb, group, resource, namespace), f"{account} may {verb} {resource}"


def test_upgrades_set_and_null(release: KubeCluster, helm: Helm) -> None:
    """An env switch set, then put back with null (supplement §4.3). With --reset-then-reuse-values the
    null reverts it. With --reuse-values helm 4.1.4 takes the previous release's computed values as the
    chart's defaults, so a null cannot remove what the previous release's values set -- the value stays
    (pinned here, docs/chart.md) -- while nulls over whole sections are accepted and render the defaults."""
    gate = "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE"
    upgrade = ["upgrade", RELEASE, str(CHART), "-n", NS]
    ok(helm.run(*upgrade, "--reuse-values", "--set-string", f"deviceManager.env.{gate}=false"))
    assert daemonset_env(release, "nvidia")[gate] == "false"
    ok(helm.run(*upgrade, "--reuse-values", "--set", f"deviceManager.env.{gate}=null"))
    assert daemonset_env(release, "nvidia")[gate] == "false"  # helm's --reuse-values, not the chart
    ok(helm.run(*upgrade, "--reset-then-reuse-values", "--set", f"deviceManager.env.{gate}=null"))
    assert gate not in daemonset_env(release, "nvidia")
    # nulls over whole sections: stored as given, validated against the schema by the next upgrade
    ok(helm.run(*upgrade, "--reuse-values", "--set", "worker=null", "--set", "ledgerReleaseTerminatedPods=null"))
    stored = json.loads(ok(helm.run("get", "values", RELEASE, "-n", NS, "-o", "json")))
    assert stored.get("worker", "absent") is None
    ok(helm.run(*upgrade, "--reuse-values", "--set", "global.manufacturers.nvidia.partitionKind=null"))
    env = daemonset_env(release, "nvidia")
    assert env["GPUSTACK_NVIDIA_PARTITION_KIND"] == "mig"
    assert env["GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"] == "true"
    apps = kubernetes.client.AppsV1Api(release.core().api_client)
    assert apps.read_namespaced_deployment(f"{PREFIX}-worker", NS).spec.replicas == 1
