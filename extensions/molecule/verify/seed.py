"""The verify scenario's cluster: two fixture hosts' nodes as API objects, published as their Device
Manager would (the package's own Publisher, from each host's own detection), one of them drifting.

    python seed.py seed     # remove what an earlier run left, then create it all (prepare.yml)
    python seed.py clean    # remove it all (destroy.yml)

There is no kubelet for these nodes (the suite's cluster has one node of its own): each Node is created
with its allocatable in its status and no conditions -- a Node that never reported is left alone by the
node lifecycle controller's ``MarkPodsNotReady`` (only a Ready node turning NotReady is) -- and each
Device Manager Pod is bound to its node by ``nodeName``, labelled as the chart labels it, tolerating every
taint (as the chart's DaemonSets do: the lifecycle controller taints a silent node ``unreachable``), its
status set Running and Ready through the status subresource.

The Devices carry no interface inventory (seed_node says why). The drift (``fallen-01``): its
Devices and its Node still advertise a card the host no longer has, the card that fell off (the role's
``Devices advertises ... the host no longer has``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

import cluster
from gpustack_operator import api
from gpustack_operator.kube.publish import Outcome, Publisher, device_manager_labels
from gpustack_operator.kube.rest import MERGE_PATCH, KubeRequestError, request
from gpustack_operator.ledger.models import DevicesGroup

from tests.stubs.build import build_all

HOSTS_DIR = cluster.REPO / "tests" / "fixtures" / "hosts"
NAMESPACE = "gpustack-molecule-verify"
SCENARIO_LABEL = "molecule.gpustack.ai/scenario"
RESOURCE = "nvidia.com/gpu"
# the card the cluster still advertises on fallen-01 (the host lost it)
FALLEN = "GPU-00000000-0000-0000-0000-0000000fa11e"
# inventory host -> (fixture host, Kubernetes node name); molecule.yml names the same
NODES = {
    "good-01": ("h100-sxm-8x", "molecule-verify-good"),
    "fallen-01": ("mixed-nvidia-mellanox", "molecule-verify-fallen"),
}


def detect(fixture: str) -> tuple[list[DevicesGroup], Any]:
    result = api.run_detect(api.make_request(str(HOSTS_DIR / fixture), ["nvidia"]))
    return list(result.groups), result.interfaces


def with_fallen_card(groups: list[DevicesGroup]) -> list[DevicesGroup]:
    """``groups`` plus one more card in the first group: what the cluster still holds after it fell off."""
    first = groups[0]
    gone = first.accelerators[-1].model_copy(update={"id": FALLEN, "index": len(first.accelerators)})
    return [first.model_copy(update={"accelerators": [*first.accelerators, gone]}), *groups[1:]]


def node_object(node: str, usable: int) -> dict[str, Any]:
    resources = {RESOURCE: str(usable), "cpu": "8", "memory": "32Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {SCENARIO_LABEL: "verify", "kubernetes.io/hostname": node}},
        "status": {"capacity": resources, "allocatable": resources},
    }


def device_manager_pod(node: str) -> dict[str, Any]:
    """A Pod the role takes for the node's NVIDIA Device Manager (the chart's labels, clusterview.py)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"device-manager-nvidia-{node}",
            "namespace": NAMESPACE,
            "labels": {
                SCENARIO_LABEL: "verify",
                "app.kubernetes.io/name": "gpustack-operator",
                "app.kubernetes.io/component": "device-manager-nvidia",
                "gpustack.ai/manufacturer": "nvidia",
            },
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": False,
            "containers": [{"name": "device-manager", "image": "localhost/pause:1", "imagePullPolicy": "Never"}],
        },
    }


def seed_node(c: Any, host: str, fixture: str, node: str) -> None:
    groups, interfaces = detect(fixture)
    if host == "fallen-01":
        groups = with_fallen_card(groups)
    usable = sum(1 for g in groups for a in g.accelerators if a.status.physical_sliced is None)
    cluster.create(c, "/api/v1/nodes", node_object(node, usable))
    # the status as given on create is kept, but say it through the status subresource too
    status = node_object(node, usable)["status"]
    request(c, "PATCH", f"/api/v1/nodes/{node}/status", body={"status": status}, content_type=MERGE_PATCH)
    publisher = Publisher(c, node, namespace=NAMESPACE, timeout=10)
    # The Devices without the host's interface inventory: the real API server refuses these fixtures'
    # interfaces (their null PCI ids fail the Devices schema, as bench/worker_bench.py found); the role
    # does not compare them. The NodeFeature's labels are the Device Manager's, interfaces included.
    outcomes = (
        publisher.publish_node_feature(device_manager_labels(groups, interfaces)),
        publisher.publish_devices(groups, None, []),
    )
    if Outcome.FAILED in outcomes:
        raise RuntimeError(f"publishing node {node} failed: {publisher.errors}")
    pod = device_manager_pod(node)
    name = pod["metadata"]["name"]
    cluster.create(c, f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    request(
        c,
        "PATCH",
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
        body={"status": running},
        content_type=MERGE_PATCH,
    )


def clean(c: Any) -> None:
    """Remove every object a run made (each absent already is fine)."""
    for _host, (_fixture, node) in NODES.items():
        try:  # bound to a node without a kubelet: nobody would confirm a graceful deletion
            request(
                c,
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/device-manager-nvidia-{node}",
                query=[("gracePeriodSeconds", "0")],
            )
        except KubeRequestError as exc:
            if exc.status != 404:
                raise
        cluster.delete(c, f"/apis/worker.gpustack.ai/v1alpha1/devices/{node}")
        cluster.delete(c, f"/api/v1/nodes/{node}")
    cluster.remove_namespace(c, NAMESPACE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("seed", "clean"))
    args = parser.parse_args(argv)
    try:
        c = cluster.client()
        clean(c)
        if args.action == "seed":
            build_all()  # the fixtures' vendor-library stand-ins (a no-op once built)
            cluster.apply_crd(c, cluster.crds.devices_crd())
            cluster.apply_crd(c, cluster.NODE_FEATURE_CRD)
            cluster.ensure_namespace(c, NAMESPACE)
            for host, (fixture, node) in NODES.items():
                seed_node(c, host, fixture, node)
        print(f"{args.action}: {', '.join(node for _f, node in NODES.values())} in namespace {NAMESPACE}")
        return 0
    except (cluster.ClusterUnavailableError, KubeRequestError, RuntimeError) as exc:
        print(f"seed.py {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
