"""A healthy simulated fleet for the verify role (issue 19 "Numbers"): what a healthy Device Manager and
kubelet would have published for each fixture host, put into an API server.

The same approach as ``tests/integration/test_verify_role.py`` -- each fixture host's own detection
published by the real :class:`~gpustack_operator.kube.publish.Publisher` (its NodeFeature and Devices),
the Node with the exclusive resources the host's cards give (``verify.agreeing_view``), a Running,
Ready Device Manager Pod labelled as the chart labels it for every manufacturer with cards -- but with
no drift anywhere: ``cluster_verify`` finds every node ``ok``. Two sinks: the API-server stand-in in
process (:func:`seed_standin`) and any API server over REST (:func:`seed_api`, e.g. kube-local).

Used by ``bench/deploy_bench.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpustack_operator import api
from gpustack_operator.discovery.detect import facts_document
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import DAEMONSET_PREFIX
from gpustack_operator.kube.publish import Publisher, device_manager_labels, devices_object, flavor_labels
from gpustack_operator.kube.rest import MERGE_PATCH, KubeRequestError, request
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.verify import agreeing_view, host_view

REPO = Path(__file__).resolve().parents[2]
FIXTURE_HOSTS = REPO / "tests" / "fixtures" / "hosts"
NS = "gpustack-system"
# bench/ansible_bench.py's simulated-fleet shapes whose detection succeeds for every manufacturer
# (nvidia-driver-broken and unreadable-sysfs are unmeasured: verify reports them, by design)
HEALTHY_FIXTURES = (
    "h100-sxm-8x",
    "mixed-nvidia-mellanox",
    "a100-mig",
    "rtx4090",
    "mi300x-8x",
    "ascend-910b-8x",
    "ascend-950pr-v2",
    "mlu370-x8",
    "mixed-cambricon-metax",
    "hygon-k100",
    "metax-c500",
    "iluvatar-bi150",
    "mthreads-s4000",
    "thead-ppu",
    "cpu-only-vm",
    "hygon-cpu-only",
    "ampere-altra-cpu-only",
)
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@dataclass
class NodeSeed:
    """One simulated node: its inventory host, Kubernetes node name, fixture and what it publishes."""

    host: str
    node: str
    fixture: str
    groups: list[DevicesGroup]
    interfaces: Any
    allocatable: dict[str, str]
    manufacturers: list[str] = field(default_factory=list)  # those with cards: one Device Manager Pod each


def fleet_hosts(count: int, fixtures: Sequence[str] = HEALTHY_FIXTURES) -> dict[str, tuple[str, str]]:
    """``count`` hosts ``node-000``... round-robin over ``fixtures``: host -> (fixture, node name)."""
    return {f"node-{i:03d}": (fixtures[i % len(fixtures)], f"k8s-node-{i:03d}") for i in range(count)}


def fleet_seeds(hosts: Mapping[str, tuple[str, str]], manufacturers: list[str] | None = None) -> list[NodeSeed]:
    """Detect each fixture once (before any server thread: detection forks) and build every node's seed."""
    detected: dict[str, tuple[list[DevicesGroup], Any, dict[str, object]]] = {}
    for fixture, _node in hosts.values():
        if fixture not in detected:
            result = api.run_detect(api.make_request(str(FIXTURE_HOSTS / fixture), manufacturers))
            detected[fixture] = (list(result.groups), result.interfaces, facts_document(result))
    seeds = []
    for name, (fixture, node) in hosts.items():
        groups, interfaces, facts = detected[fixture]
        allocatable = {k: v for k, v in (agreeing_view(facts, node).allocatable or {}).items() if v != "0"}
        makers = sorted({c.manufacturer for c in host_view(facts).cards})
        seeds.append(NodeSeed(name, node, fixture, groups, interfaces, allocatable, makers))
    return seeds


def node_object(seed: NodeSeed) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **seed.allocatable}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": seed.node, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": seed.node}},
        "spec": {"unschedulable": True},  # no kubelet runs it: nothing else is scheduled there
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def dm_pod(seed: NodeSeed, manufacturer: str) -> dict[str, Any]:
    """The manufacturer's Device Manager Pod on the node, labelled and owned as the chart makes it;
    tolerating every taint for good (a node no kubelet heartbeats is tainted unreachable)."""
    daemonset = DAEMONSET_PREFIX + manufacturer
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{daemonset}-{seed.node}",
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/name": "gpustack-operator",
                "app.kubernetes.io/component": f"device-manager-{manufacturer}",
                "gpustack.ai/manufacturer": manufacturer,
            },
        },
        "spec": {
            "nodeName": seed.node,
            "containers": [{"name": "device-manager", "image": "localhost/pause:1", "imagePullPolicy": "Never"}],
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": False,
        },
        "status": dict(READY),
    }


class SeedError(RuntimeError):
    """The API server refused an object of the fleet (the message names the node and the answer)."""


def _published(publisher: Publisher, node: str) -> None:
    if publisher.errors:
        raise SeedError(f"publishing for {node} failed: {publisher.errors}")


def seed_standin(server: Any, seeds: Iterable[NodeSeed], client: Any) -> None:
    """Into a :class:`tests.kube.routes_publish.PublishStandIn` (started; ``client`` reaches it)."""
    for seed in seeds:
        server.add_node(seed.node, capacity=node_object(seed)["status"]["capacity"])
        if seed.groups:
            publisher = Publisher(client, seed.node, namespace=NS, timeout=10)
            publisher.publish(seed.groups, seed.interfaces, [])
            _published(publisher, seed.node)
        for maker in seed.manufacturers:
            server.add_pod(dm_pod(seed, maker))


def without_empty(value: Any) -> Any:
    """``value`` with every null or empty-string member of an object dropped, at any depth."""
    if isinstance(value, dict):
        return {k: without_empty(v) for k, v in value.items() if v is not None and v != ""}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def devices_for_api(seed: NodeSeed, node: Mapping[str, Any]) -> dict[str, Any]:
    """The node's ``Devices`` as the Publisher builds it, its empty strings dropped: Kubernetes 1.20.2's
    CRD validation refuses ``""`` in a ``type: string`` field as ``Invalid value: "null"`` (go-openapi
    takes a zero value for null unless the schema says ``nullable``), and the models write ``""`` for an
    unknown value -- an interface's PCI ids, RDMA device and affinities (h100-sxm-8x, mi300x-8x,
    mixed-nvidia-mellanox), an accelerator's ``topology.numaAffinity`` (rtx4090). The comparison reads
    none of them. (What a Device Manager publishes on such a node is refused there as is.)"""
    body = devices_object(seed.node, seed.groups, seed.interfaces, [], flavor_labels(seed.groups, node))
    body.pop("status", None)
    return without_empty(body)  # type: ignore[no-any-return]


def _post(client: Any, path: str, body: dict[str, Any], attempts: int = 60) -> None:
    """POST, an existing object kept; retried while the namespace's default ServiceAccount is not made yet."""
    for attempt in range(attempts):
        try:
            request(client, "POST", path, body=body)
            return
        except KubeRequestError as exc:
            if exc.status == 409:
                return
            if exc.status != 403 or attempt == attempts - 1:
                raise
            time.sleep(0.5)


def mark_pods_ready(client: Any, seeds: Iterable[NodeSeed]) -> None:
    """Every Device Manager Pod Running and Ready again (the node lifecycle controller marks a Pod on a
    node no kubelet heartbeats not ready)."""
    for seed in seeds:
        for maker in seed.manufacturers:
            name = quote(dm_pod(seed, maker)["metadata"]["name"], safe="")
            path = f"/api/v1/namespaces/{NS}/pods/{name}/status"
            request(client, "PATCH", path, body={"status": READY}, content_type=MERGE_PATCH)


def seed_api(client: Any, seeds: Iterable[NodeSeed]) -> None:
    """Into a real API server over REST (its NodeFeature and Devices CRDs established, namespace ``NS``
    made): each Node (its status written through the status subresource too), the Publisher's
    NodeFeature, the Devices (:func:`devices_for_api`), the Pods (their status patched: creation resets
    it)."""
    seeds = list(seeds)
    for seed in seeds:
        node = node_object(seed)
        _post(client, "/api/v1/nodes", node)
        path = f"/api/v1/nodes/{quote(seed.node, safe='')}/status"
        request(client, "PATCH", path, body={"status": node["status"]}, content_type=MERGE_PATCH)
        if seed.groups:
            publisher = Publisher(client, seed.node, namespace=NS, timeout=10)
            publisher.publish_node_feature(device_manager_labels(seed.groups, seed.interfaces))
            _published(publisher, seed.node)
            _post(client, f"/apis/{crds.API_VERSION}/{crds.PLURAL}", devices_for_api(seed, node))
        for maker in seed.manufacturers:
            _post(client, f"/api/v1/namespaces/{NS}/pods", dm_pod(seed, maker))
    mark_pods_ready(client, seeds)


__all__ = [
    "HEALTHY_FIXTURES",
    "NS",
    "NodeSeed",
    "SeedError",
    "devices_for_api",
    "dm_pod",
    "fleet_hosts",
    "fleet_seeds",
    "mark_pods_ready",
    "node_object",
    "seed_api",
    "seed_standin",
    "without_empty",
]
