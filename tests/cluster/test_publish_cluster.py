"""Publishing against the real API server and scheduler (tests/tools/kube_cluster.py, Kubernetes 1.20.2):

* the generated ``Devices`` CRD is accepted and becomes Established; the object ``serve`` writes -- a
  fixture node's detection with a ledger in every mode -- is stored exactly as written (nothing
  pruned, nothing defaulted), its status through the subresource, owned by the real Node;
* the NodeFeature lands in the system namespace with NFD's node-name label, owned by the Node;
* the node capacity keys make the real scheduler place a Pod that requests a slice budget: without
  them it stays Pending (``Insufficient nvidia.com/gpu.sliced.memory-percentage``, issue 18), with
  them it is bound and runs, and the kubelet's own status updates keep them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator import api
from gpustack_operator.allocator.capacity import ManufacturerCapacity, names_of, node_capacity
from gpustack_operator.allocator.ledger import Claim, Ledger
from gpustack_operator.kube import crds
from gpustack_operator.kube.nodestatus import NodeCapacityWriter
from gpustack_operator.kube.publish import NODE_NAME_LABEL, Outcome, Publisher
from gpustack_operator.kube.rest import KubeRequestError, request
from gpustack_operator.manufacturers.respond import Family, PartitionInstance

from tests.conftest import host
from tests.tools.kube_cluster import KubeCluster, pod_manifest

NS = "gpustack-system"

# NFD's own CRD is not part of the cluster; a minimal stand-in of its shape (interfaces.md §7) lets the
# API server store our NodeFeature as it would with NFD installed.
NODE_FEATURE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io"},
    "spec": {
        "group": "nfd.k8s-sigs.io",
        "names": {
            "kind": "NodeFeature",
            "listKind": "NodeFeatureList",
            "plural": "nodefeatures",
            "singular": "nodefeature",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "features": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def client_of(cluster: KubeCluster) -> kubernetes.client.ApiClient:
    return cluster.core().api_client  # type: ignore[no-any-return]


def apply_crd(client: kubernetes.client.ApiClient, crd: dict[str, Any]) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        request(client, "POST", path, body=crd)
    except KubeRequestError as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = request(client, "GET", f"{path}/{crd['metadata']['name']}")
        conditions = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            return
        assert conditions.get("NamesAccepted") != "False", got["status"]
        time.sleep(0.5)
    raise AssertionError(f"{crd['metadata']['name']} never became Established")


@pytest.fixture(scope="module")
def detected() -> tuple[Any, Any]:
    result = api.run_detect(api.make_request(str(host("a100-mig")), ["nvidia"]))
    return result.groups, result.interfaces


@pytest.fixture
def client(cluster: KubeCluster) -> Iterator[kubernetes.client.ApiClient]:
    c = client_of(cluster)
    apply_crd(c, crds.devices_crd())
    apply_crd(c, NODE_FEATURE_CRD)
    try:
        request(c, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    except KubeRequestError as exc:
        assert exc.status == 409, exc
    yield c
    for path in (
        f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}",
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures/{cluster.node_name}-gpustack-device-manager",
    ):
        try:
            request(c, "DELETE", path)
        except KubeRequestError as exc:
            assert exc.status == 404, exc


def busy_status(groups: list[Any]) -> list[Any]:
    ledger = Ledger.of("nvidia", groups)
    plain = [a for g in groups for a in g.accelerators if a.status.physical_sliced is None]
    mig = [a for g in groups for a in g.accelerators if a.status.physical_sliced is not None]
    inst = PartitionInstance(accelerator=mig[0].id, profile="3g.40gb", uuid="MIG-1", start=0, size=4)
    for claim in (
        Claim("u1", "ns", "ex", "main", Family.EXCLUSIVE, (plain[0].id,)),
        Claim("u2", "ns", "sl", "main", Family.SLICED, (plain[1].id,), units=400_000),
        Claim("u3", "ns", "sh", "main", Family.SHARED, (plain[2].id,)),
        Claim(
            "u4", "ns", "pt", "main", Family.PARTITIONED, (mig[0].id,), units=800_000, partition=inst, profile="3g.40gb"
        ),
    ):
        ledger.claims[claim.key] = claim
    return ledger.status(groups)


def test_the_real_api_server_stores_what_serve_writes_unpruned(
    cluster: KubeCluster, client: kubernetes.client.ApiClient, detected: tuple[Any, Any]
) -> None:
    groups, interfaces = detected
    status = busy_status(groups)
    publisher = Publisher(client, cluster.node_name, namespace=NS)
    assert publisher.publish(groups, interfaces, status) == (Outcome.WROTE, Outcome.WROTE), publisher.errors
    stored = request(client, "GET", f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}")
    written = publisher._devices.last
    assert written is not None
    assert stored["spec"] == written["spec"]  # nothing pruned, nothing defaulted
    assert stored["status"] == written["status"]
    modes = {a["mode"] for g in stored["status"]["groups"] for a in g["accelerators"]}
    assert {"exclusive", "sliced", "shared", "partitioned", "free"} <= modes
    node_uid = cluster.node().metadata.uid
    (ref,) = stored["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Node", cluster.node_name, node_uid)
    assert stored["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    nf = request(
        client,
        "GET",
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures/{cluster.node_name}-gpustack-device-manager",
    )
    assert nf["metadata"]["labels"] == {NODE_NAME_LABEL: cluster.node_name}
    assert nf["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a100-sxm4-80gb.count"] == "8"
    assert nf["metadata"]["ownerReferences"][0]["uid"] == node_uid
    # unchanged: no write; a ledger change: the status only, and the real server keeps it
    rv = stored["metadata"]["resourceVersion"]
    assert publisher.publish(groups, interfaces, status) == (Outcome.UNCHANGED, Outcome.UNCHANGED)
    assert publisher.publish_devices(groups, interfaces, Ledger.of("nvidia", groups).status(groups)) is Outcome.WROTE
    after = request(client, "GET", f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}")
    assert (
        after["metadata"]["resourceVersion"] != rv
        and after["metadata"]["generation"] == stored["metadata"]["generation"]
    )
    assert {a["mode"] for g in after["status"]["groups"] for a in g["accelerators"]} == {"free"}


@pytest.mark.parametrize("fixture", ["h100-sxm-8x", "rtx4090", "mixed-nvidia-mellanox"])
def test_unknown_values_are_left_out_so_the_real_api_server_takes_the_object(
    cluster: KubeCluster, client: kubernetes.client.ApiClient, fixture: str
) -> None:
    """Nodes whose detection has unknown values (``""``: an interface without a PCI id or RDMA device,
    an accelerator without a NUMA node): kube-apiserver 1.20.2 as built here refuses ``""`` in a
    string field as ``null``, so the writer leaves those fields out -- the models read them back as
    ``""`` -- and the object is stored unpruned, its status with it."""
    result = api.run_detect(api.make_request(str(host(fixture)), None))
    publisher = Publisher(client, cluster.node_name, namespace=NS)
    status = Ledger.of(result.groups[0].manufacturer, result.groups).status(result.groups)
    assert publisher.publish(result.groups, result.interfaces, status) == (Outcome.WROTE, Outcome.WROTE), (
        publisher.errors
    )
    stored = request(client, "GET", f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}")
    written = publisher._devices.last
    assert written is not None and stored["spec"] == written["spec"] and stored["status"] == written["status"]
    # what is read back is what was detected, the unknowns "" again
    assert crds.DevicesSpec.model_validate(stored["spec"]) == crds.DevicesSpec(
        groups=list(result.groups),
        interfaces=list(result.interfaces.interfaces) if hasattr(result.interfaces, "interfaces") else None,
    )
    request(client, "DELETE", f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}")


def test_the_real_api_server_refuses_an_object_outside_the_schema(
    cluster: KubeCluster, client: kubernetes.client.ApiClient, detected: tuple[Any, Any]
) -> None:
    """The schema is enforced, not decorative: a mode outside the enum is 422."""
    groups, interfaces = detected
    publisher = Publisher(client, cluster.node_name, namespace=NS)
    publisher.publish_devices(groups, interfaces, Ledger.of("nvidia", groups).status(groups))
    path = f"/apis/worker.gpustack.ai/v1alpha1/devices/{cluster.node_name}"
    current = request(client, "GET", path)
    bad = copy.deepcopy(current)
    bad["status"]["groups"][0]["accelerators"][0]["mode"] = "Visibility"
    with pytest.raises(KubeRequestError) as err:
        request(client, "PUT", f"{path}/status", body=bad)
    assert err.value.status == 422 and "Unsupported value" in str(err.value)


def sliced_pod(name: str) -> dict[str, Any]:
    return pod_manifest(name, {"nvidia.com/gpu.sliced.memory-percentage": "50", "nvidia.com/gpu.sliced.units": "800k"})


def test_the_scheduler_places_a_slice_once_the_capacity_keys_are_set(
    cluster: KubeCluster, client: kubernetes.client.ApiClient, detected: tuple[Any, Any]
) -> None:
    groups, _ = detected
    req = api.make_request(str(host("a100-mig")), ["nvidia"])
    names = names_of(req.resolved["nvidia"])
    writer = NodeCapacityWriter(client, cluster.node_name, [names.base])
    core = cluster.core()
    try:
        writer.sync({})
        core.create_namespaced_pod("default", sliced_pod("slice-before"))
        pending = cluster.wait(
            "the scheduler's verdict on slice-before",
            lambda: next(
                (
                    c
                    for c in (core.read_namespaced_pod("slice-before", "default").status.conditions or [])
                    if c.type == "PodScheduled" and c.status == "False"
                ),
                None,
            ),
        )
        assert "Insufficient nvidia.com/gpu.sliced" in pending.message
        core.delete_namespaced_pod("slice-before", "default", grace_period_seconds=0)

        desired = node_capacity([ManufacturerCapacity(names, groups, set(Family))])
        assert writer.sync(desired) is True
        core.create_namespaced_pod("default", sliced_pod("slice-after"))
        pod = cluster.wait(
            "slice-after Running",
            lambda: (p := core.read_namespaced_pod("slice-after", "default")).status.phase == "Running" and p,
        )
        assert pod.spec.node_name == cluster.node_name
        allocatable = cluster.node().status.allocatable
        assert allocatable["nvidia.com/gpu.sliced.memory-percentage"] == "400"
        assert allocatable["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "8"
        # the kubelet's status updates kept them, and a second sync finds nothing to change
        assert writer.sync(desired) is False
    finally:
        writer.sync({})
    allocatable = cluster.node().status.allocatable
    assert not any(k.startswith("nvidia.com/gpu.sliced.") for k in allocatable)
