"""Publishing the NodeFeature and the Devices object against the API-server stand-in
(tests/kube/routes_publish.py, with the generated CRD schema enforced and pruning): create, no write
when unchanged, update on change, the ownerReference to the Node, the status subresource, others'
labels kept, 409 re-read and retried, API errors backed off with the state kept for the retry."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from gpustack_operator import api
from gpustack_operator.allocator.ledger import Claim, DevicesAllocationGroup, Ledger
from gpustack_operator.discovery.network import InterfaceInventory
from gpustack_operator.kube import crds
from gpustack_operator.kube.pods import make_api_client
from gpustack_operator.kube.publish import (
    NODE_NAME_LABEL,
    Outcome,
    Publisher,
    device_manager_labels,
    system_namespace,
)
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.respond import Family

from tests.conftest import host
from tests.kube.routes_publish import PublishStandIn

NS = "gpustack-system"
NF_PATH = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"
DEV_PATH = "/apis/worker.gpustack.ai/v1alpha1/devices"


@functools.cache
def detected(fixture: str = "mixed-nvidia-mellanox") -> tuple[list[DevicesGroup], InterfaceInventory | None]:
    """Detected once, before a stand-in thread runs (detection forks)."""
    result = api.run_detect(api.make_request(str(host(fixture)), ["nvidia"]))
    assert result.groups
    return result.groups, result.interfaces


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server() -> Iterator[PublishStandIn]:
    detected()
    with PublishStandIn(schema=crds.openapi_schema()) as stand_in:
        stand_in.add_node("node-a", labels={"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"})
        yield stand_in


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def publisher(server: PublishStandIn, clock: Clock) -> Publisher:
    return Publisher(make_api_client(None, server.url), "node-a", namespace=NS, timeout=5, clock=clock)


def ledger_with(groups: list[DevicesGroup], *claims: Claim) -> list[DevicesAllocationGroup]:
    ledger = Ledger.of("nvidia", groups)
    for claim in claims:
        ledger.claims[claim.key] = claim
    return ledger.status(groups)


def writes(server: PublishStandIn) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in server.requests if r.method in ("POST", "PUT", "PATCH", "DELETE")]


def node_uid(server: PublishStandIn) -> str:
    node = server.obj("nodes", "node-a")
    assert node is not None
    return str(node["metadata"]["uid"])


def test_first_publish_creates_both_objects_owned_by_the_node(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    assert publisher.publish(groups, interfaces, ledger_with(groups)) == (Outcome.WROTE, Outcome.WROTE)
    nf = server.obj("nodefeatures", "node-a-gpustack-device-manager", NS)
    dev = server.obj("devices", "node-a")
    assert nf is not None and dev is not None
    owner = {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": node_uid(server)}
    for obj in (nf, dev):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert {k: ref[k] for k in owner} == owner
    # the NodeFeature: NFD's node-name label, the Device Manager's labels (never NFD's own predictions)
    assert nf["metadata"]["labels"] == {NODE_NAME_LABEL: "node-a"}
    assert nf["spec"]["labels"] == device_manager_labels(groups, interfaces)
    assert nf["spec"]["labels"]["feature.gpustack.ai/acceleratable"] == "true"
    assert "acceleratable.feature.gpustack.ai/nvidia-l40s.count" in nf["spec"]["labels"]
    assert not any(k.startswith("feature.node.kubernetes.io/") for k in nf["spec"]["labels"])
    # the Devices: spec from detection, status per accelerator from the ledger, selector labels
    assert dev["spec"]["groups"] == [g.wire() for g in groups]
    assert dev["spec"]["interfaces"]
    (status_group,) = dev["status"]["groups"]
    assert [a["mode"] for a in status_group["accelerators"]] == ["free"] * 4
    assert status_group["accelerators"][0]["remaining"] == 1_600_000
    assert dev["metadata"]["labels"] == {
        "acceleratable.feature.gpustack.ai/nvidia-l40s": "true",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    assert server.pruned == []  # the generated schema kept every field written
    # the status went through the subresource: a create with the status subresource drops status
    assert ("PUT", f"{DEV_PATH}/node-a/status") in writes(server)


def test_no_api_call_when_nothing_changed(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    before = len(server.requests)
    assert publisher.publish(groups, interfaces, ledger_with(groups)) == (Outcome.UNCHANGED, Outcome.UNCHANGED)
    assert len(server.requests) == before


def test_a_ledger_change_updates_only_the_status(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    generation = server.obj("devices", "node-a")["metadata"]["generation"]  # type: ignore[index]
    first = [a.id for a in groups[0].accelerators]
    status = ledger_with(
        groups,
        Claim("u1", "ns", "train", "main", Family.EXCLUSIVE, (first[0],)),
        Claim("u2", "ns", "infer", "main", Family.SLICED, (first[1],), units=400_000),
        Claim("u3", "ns", "infer2", "main", Family.SLICED, (first[1],), units=200_000),
    )
    n = len(writes(server))
    assert publisher.publish(groups, interfaces, status) == (Outcome.UNCHANGED, Outcome.WROTE)
    assert writes(server)[n:] == [("PUT", f"{DEV_PATH}/node-a/status")]
    dev = server.obj("devices", "node-a")
    assert dev is not None and dev["metadata"]["generation"] == generation  # spec untouched
    accs = {a["id"]: a for a in dev["status"]["groups"][0]["accelerators"]}
    assert accs[first[0]]["mode"] == "exclusive" and accs[first[0]]["remaining"] == 0
    assert accs[first[1]]["mode"] == "sliced" and accs[first[1]]["allocatedSlices"] == 2
    assert accs[first[1]]["allocated"] == 600_000 and accs[first[1]]["remaining"] == 1_000_000
    # who holds each card (beyond supplement §9.2; restart recovery's third source)
    assert sorted((h["pod"], h["units"]) for h in accs[first[1]]["holders"]) == [
        ("ns/infer", 400_000),
        ("ns/infer2", 200_000),
    ]
    assert [(h["podUid"], h["mode"]) for h in accs[first[0]]["holders"]] == [("u1", "exclusive")]


def test_a_detection_change_updates_spec_labels_and_node_feature(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    fewer = [g.model_copy(deep=True) for g in groups]
    fewer[0].accelerators = fewer[0].accelerators[:3]
    assert publisher.publish(fewer, interfaces, ledger_with(fewer)) == (Outcome.WROTE, Outcome.WROTE)
    nf = server.obj("nodefeatures", "node-a-gpustack-device-manager", NS)
    dev = server.obj("devices", "node-a")
    assert nf is not None and dev is not None
    assert nf["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-l40s.count"] == "3"
    assert len(dev["spec"]["groups"][0]["accelerators"]) == 3
    assert len(dev["status"]["groups"][0]["accelerators"]) == 3
    assert dev["metadata"]["generation"] == 2
    # all accelerators gone: the labels and selector labels go with them
    assert publisher.publish([], interfaces, []) == (Outcome.WROTE, Outcome.WROTE)
    nf = server.obj("nodefeatures", "node-a-gpustack-device-manager", NS)
    dev = server.obj("devices", "node-a")
    assert nf is not None and dev is not None
    assert not any(k.startswith("acceleratable.") for k in nf["spec"]["labels"])
    assert dev["spec"]["groups"] == [] and dev["status"] == {"groups": []}
    assert dev["metadata"]["labels"] == {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}


def test_others_labels_and_owner_references_are_kept(server: PublishStandIn, publisher: Publisher) -> None:
    """The worker syncs gpustack.ai/managed onto the Devices: a publish never removes it."""
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))

    def mark(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["labels"]["gpustack.ai/managed"] = "true"
        obj["metadata"]["ownerReferences"].append({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"})
        return obj

    server.write_object("devices", "", "node-a", mark, status=False, status_subresource=True)
    fewer = [g.model_copy(deep=True) for g in groups]
    fewer[0].accelerators = fewer[0].accelerators[:2]
    assert publisher.publish_devices(fewer, interfaces, ledger_with(fewer)) is Outcome.WROTE
    dev = server.obj("devices", "node-a")
    assert dev is not None
    assert dev["metadata"]["labels"]["gpustack.ai/managed"] == "true"
    assert [r["kind"] for r in dev["metadata"]["ownerReferences"]] == ["ConfigMap", "Node"]


def test_a_conflict_is_read_again_and_retried(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    first = groups[0].accelerators[0].id
    busy = ledger_with(groups, Claim("u1", "ns", "p", "main", Family.EXCLUSIVE, (first,)))
    server.fail(409, count=1, when=lambda r: r.method == "PUT" and r.path.endswith("/status"), reason="Conflict")
    assert publisher.publish_devices(groups, interfaces, busy) is Outcome.WROTE
    status_writes = [w for w in writes(server) if w == ("PUT", f"{DEV_PATH}/node-a/status")]
    assert len(status_writes) == 3  # the create's, the conflicted one, the retry after a fresh read
    assert server.obj("devices", "node-a")["status"]["groups"][0]["accelerators"][0]["mode"] == "exclusive"  # type: ignore[index]


def test_a_stale_resource_version_is_a_real_conflict(server: PublishStandIn, publisher: Publisher) -> None:
    """Someone writes between our read and our update: the stand-in answers 409, we read and retry."""
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    original = server.write_object
    raced: list[int] = []

    def racing(resource: str, namespace: str, name: str, change: Any, **kw: Any) -> dict[str, Any]:
        if resource == "devices" and kw.get("status") and not raced:
            raced.append(1)
            original(
                resource,
                namespace,
                name,
                lambda o: {**o, "metadata": {**o["metadata"], "labels": {**o["metadata"]["labels"], "x": "y"}}},
                status=False,
                status_subresource=True,
            )
        return original(resource, namespace, name, change, **kw)

    server.write_object = racing  # type: ignore[method-assign]
    first = groups[0].accelerators[0].id
    busy = ledger_with(groups, Claim("u1", "ns", "p", "main", Family.SHARED, (first,)))
    assert publisher.publish_devices(groups, interfaces, busy) is Outcome.WROTE
    assert raced
    dev = server.obj("devices", "node-a")
    assert dev is not None and dev["metadata"]["labels"]["x"] == "y"
    assert dev["status"]["groups"][0]["accelerators"][0]["mode"] == "shared"


def test_api_errors_back_off_and_the_newest_state_is_retried(
    server: PublishStandIn, publisher: Publisher, clock: Clock
) -> None:
    groups, interfaces = detected()
    server.fail(503, count=-1, when=lambda r: r.path.startswith(DEV_PATH))
    assert publisher.publish(groups, interfaces, ledger_with(groups)) == (Outcome.WROTE, Outcome.FAILED)
    assert "HTTP 503" in publisher.errors["devices"]
    calls = len(server.requests)
    clock.now += 0.5
    assert publisher.publish_devices(groups, interfaces, ledger_with(groups)) is Outcome.BACKING_OFF
    assert len(server.requests) == calls  # no call while backing off
    clock.now += 1.0
    assert publisher.publish_devices(groups, interfaces, ledger_with(groups)) is Outcome.FAILED  # second failure
    clock.now += 1.5
    assert publisher.publish_devices(groups, interfaces, ledger_with(groups)) is Outcome.BACKING_OFF  # now 2 s
    server.heal()
    clock.now += 1.0
    first = groups[0].accelerators[0].id
    newest = ledger_with(groups, Claim("u1", "ns", "p", "main", Family.EXCLUSIVE, (first,)))
    assert publisher.publish_devices(groups, interfaces, newest) is Outcome.WROTE
    assert publisher.errors == {}
    dev = server.obj("devices", "node-a")
    assert dev is not None and dev["status"]["groups"][0]["accelerators"][0]["mode"] == "exclusive"


def test_force_repairs_an_object_deleted_behind_our_back(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    server.delete_object("nodefeatures", "node-a-gpustack-device-manager", NS)
    assert publisher.publish(groups, interfaces, ledger_with(groups))[0] is Outcome.UNCHANGED  # no call, no read
    assert publisher.publish(groups, interfaces, ledger_with(groups), force=True)[0] is Outcome.WROTE
    assert server.obj("nodefeatures", "node-a-gpustack-device-manager", NS) is not None


def test_a_recreated_node_gets_the_new_owner_reference(server: PublishStandIn, publisher: Publisher) -> None:
    groups, interfaces = detected()
    publisher.publish(groups, interfaces, ledger_with(groups))
    server.objects.pop(("nodes", "", "node-a"))
    server.add_node("node-a")
    assert publisher.publish(groups, interfaces, ledger_with(groups), force=True) == (Outcome.WROTE, Outcome.WROTE)
    dev = server.obj("devices", "node-a")
    assert dev is not None
    (ref,) = dev["metadata"]["ownerReferences"]
    assert ref["uid"] == node_uid(server)


def test_a_missing_node_is_a_named_failure(server: PublishStandIn, clock: Clock) -> None:
    other = Publisher(make_api_client(None, server.url), "node-b", namespace=NS, timeout=5, clock=clock)
    groups, interfaces = detected()
    assert other.publish(groups, interfaces, []) == (Outcome.FAILED, Outcome.FAILED)
    assert 'nodes "node-b" not found' in other.errors["nodefeature"]
    assert server.obj("devices", "node-b") is None


def test_the_namespace_comes_from_the_pod_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_POD_NAMESPACE", raising=False)
    assert system_namespace() == "gpustack-system"
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", "ops")
    assert system_namespace() == "ops"
    with pytest.raises(ValueError, match="node name is empty"):
        Publisher(make_api_client(None, "http://127.0.0.1:1"), "")
