"""The worker against the API-server stand-in (standin.py) over real loopback HTTP: the startup steps,
the three controllers, the synced-cache rule and leader election (issue 19, "The worker")."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator.kube.apply import RULE_COLLECTION
from gpustack_operator.kube.crds import CRD_NAME
from gpustack_operator.settings import PciVendorMatch
from gpustack_operator.worker.nodekey import GENERAL_PREFIX
from gpustack_operator.worker.run import Worker, WorkerOptions

from tests.unit.worker.standin import WorkerStandIn

NS = "gpustack-system"
NF = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"
AMD_LABELS = {
    "kubernetes.io/os": "linux",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
    "feature.node.kubernetes.io/cpu-model.family": "25",
    "feature.node.kubernetes.io/cpu-model.id": "1",
}


def wait_for(what: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


def options(identity: str = "w1", **kw: Any) -> WorkerOptions:
    base: dict[str, Any] = {
        "namespace": NS,
        "vendors": [PciVendorMatch(vendor="10de")],
        "identity": identity,
        "leader_election": False,
        "retry_delay": 0.1,
        "backoff_max": 0.2,
        "retry_period": 0.1,
        "renew_deadline": 0.5,
        "lease_duration": 1.0,
    }
    base.update(kw)
    return WorkerOptions(**base)


class Running:
    def __init__(self, api: WorkerStandIn, opts: WorkerOptions) -> None:
        self.worker = Worker(kubernetes.client.ApiClient(api.configuration()), opts)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def start(self) -> Running:
        self.worker.start()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


@pytest.fixture
def run(api: WorkerStandIn) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def go(**kw: Any) -> Running:
        r = Running(api, options(**kw)).start()
        started.append(r)
        return r

    yield go
    for r in started:
        if r.thread.is_alive():
            r.stop()


def node_feature(api: WorkerStandIn, node: str) -> dict[str, Any] | None:
    return api.obj("nodefeatures", f"{node}-gpustack-worker", NS)


def test_startup_applies_the_crd_and_the_rule(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    r = run()
    crd = api.obj("crds", CRD_NAME)
    assert crd is not None and crd["spec"]["group"] == "worker.gpustack.ai"
    wait_for(r.worker.rule.applied.is_set)
    rule = api.obj("nodefeaturerules", "gpustack-cpu-info")
    assert rule is not None
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/part-of": "gpustack-operator"}
    r.stop()
    # a second replica (or a restart) changes nothing: idempotent
    writes = api.count("PUT") + api.count("POST")
    r2 = run(identity="w2")
    wait_for(r2.worker.rule.applied.is_set)
    assert api.obj("nodefeaturerules", "gpustack-cpu-info") == rule
    assert api.count("POST", RULE_COLLECTION) == 1
    assert api.count("PUT") + api.count("POST") - writes == 0


def test_the_rule_waits_for_nfds_crd_with_one_log_line(
    api: WorkerStandIn, run: Callable[..., Running], caplog: pytest.LogCaptureFixture
) -> None:
    api.nfd_rules = False
    caplog.set_level(logging.INFO)
    r = run()
    wait_for(lambda: r.worker.rule.attempts >= 3)
    assert not r.worker.rule.applied.is_set()
    absent = [m for m in caplog.messages if "NodeFeatureRule CRD" in m and "not installed" in m]
    assert len(absent) == 1, caplog.messages
    api.nfd_rules = True  # NFD installed later
    wait_for(r.worker.rule.applied.is_set)
    assert api.obj("nodefeaturerules", "gpustack-cpu-info") is not None


def test_node_key_published_and_updated_on_label_change(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    node = api.add_node("n1", capacity={"cpu": "128"}, labels=AMD_LABELS)
    run()
    nf = wait_for(lambda: node_feature(api, "n1"))
    assert nf["spec"]["labels"] == {
        "gpustack.ai/managed": "true",  # auto-injected: manual node management is off by default
        f"{GENERAL_PREFIX}amd": "true",
        f"{GENERAL_PREFIX}amd-25-1": "true",
        f"{GENERAL_PREFIX}amd-25-1.count": "128",
    }
    assert nf["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "n1"}
    ref = nf["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Node", "n1", node["metadata"]["uid"])

    started = time.monotonic()
    api.update_node(
        "n1",
        lambda n: (
            n["metadata"]
            .setdefault("annotations", {})
            .update({"feature.gpustack.ai/cpu-name": "AMD EPYC 7763 64-Core Processor"})
        ),
    )
    wait_for(lambda: f"{GENERAL_PREFIX}amd-epyc-7763" in (node_feature(api, "n1") or {})["spec"]["labels"])
    assert time.monotonic() - started < 1.0  # issue 19: label change -> NodeFeature updated within 1 s
    labels = node_feature(api, "n1")["spec"]["labels"]  # type: ignore[index]
    assert f"{GENERAL_PREFIX}amd-25-1" not in labels


def test_a_node_change_that_leaves_the_key_makes_no_write(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
    r = run()
    wait_for(lambda: node_feature(api, "n1"))
    before = api.count(path=NF)
    seen = r.worker.reconciled
    api.update_node("n1", lambda n: n["metadata"]["labels"].update({"unrelated": "1"}))
    wait_for(lambda: r.worker.reconciled > seen)
    time.sleep(0.2)
    assert api.count(path=NF) == before


def test_a_status_heartbeat_wakes_no_controller(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    """The cache keeps what the controllers read: the kubelet's status writes are no change at all."""
    api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
    r = run()
    wait_for(lambda: node_feature(api, "n1"))
    time.sleep(0.2)
    seen = r.worker.reconciled
    for beat in range(3):
        api.write_object(
            "nodes",
            "",
            "n1",
            lambda n, beat=beat: {
                **n,
                "status": {**n["status"], "conditions": [{"type": "Ready", "reason": str(beat)}]},
            },
            status=True,
            status_subresource=True,
        )
    api.update_node("n1", lambda n: n["metadata"]["labels"].update({"after": "1"}))
    wait_for(lambda: r.worker.reconciled > seen)
    time.sleep(0.2)
    assert r.worker.reconciled == seen + 1  # the label change alone
    assert r.worker.nodes.get("n1") == {
        "metadata": {
            "name": "n1",
            "uid": api.obj("nodes", "n1")["metadata"]["uid"],  # type: ignore[index]
            "labels": {**AMD_LABELS, "after": "1"},
        },
        "status": {"capacity": {"cpu": "8"}},
    }


def test_an_unreported_cpu_name_falls_back_and_no_identity_is_generic(
    api: WorkerStandIn, run: Callable[..., Running]
) -> None:
    api.add_node("bare", labels={"kubernetes.io/os": "linux"})
    api.add_node("tmpl", labels=AMD_LABELS)
    api.update_node(
        "tmpl", lambda n: n["metadata"].update({"annotations": {"feature.gpustack.ai/cpu-name": "@cpu.model.name"}})
    )
    run()
    bare = wait_for(lambda: node_feature(api, "bare"))
    assert bare["spec"]["labels"] == {"gpustack.ai/managed": "true", f"{GENERAL_PREFIX}generic": "true"}
    tmpl = wait_for(lambda: node_feature(api, "tmpl"))
    assert f"{GENERAL_PREFIX}amd-25-1" in tmpl["spec"]["labels"]


def test_the_managed_mark_is_synced_onto_devices(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", labels={**AMD_LABELS, "gpustack.ai/managed": "true"})
    api.add_devices("n1", labels={"kubernetes.io/os": "linux"})
    run()

    def mark() -> str | None:
        return ((api.obj("devices", "n1") or {})["metadata"].get("labels") or {}).get("gpustack.ai/managed")

    wait_for(lambda: mark() == "true")
    assert api.obj("devices", "n1")["metadata"]["labels"]["kubernetes.io/os"] == "linux"  # type: ignore[index]
    api.update_node("n1", lambda n: n["metadata"]["labels"].update({"gpustack.ai/managed": "false"}))
    wait_for(lambda: mark() == "false")
    api.update_node("n1", lambda n: n["metadata"]["labels"].pop("gpustack.ai/managed"))
    wait_for(lambda: mark() is None and "labels" in api.obj("devices", "n1")["metadata"])  # type: ignore[index]
    # Devices created after the Node (the Device Manager's first publish) get the mark too
    api.add_node("n2", labels={"gpustack.ai/managed": "true"})
    api.add_devices("n2")
    wait_for(lambda: (api.obj("devices", "n2")["metadata"].get("labels") or {}).get("gpustack.ai/managed") == "true")  # type: ignore[index]


def test_a_departed_nodes_devices_are_deleted_after_an_uncached_read(
    api: WorkerStandIn, run: Callable[..., Running]
) -> None:
    api.add_node("n1")
    api.add_node("n2")
    api.add_devices("n1")
    api.add_devices("n2")
    api.add_devices("never-a-node")  # a ledger whose Node left before the worker started
    run()
    wait_for(lambda: api.obj("devices", "never-a-node") is None)
    api.remove_node("n1")
    wait_for(lambda: api.obj("devices", "n1") is None)
    assert api.count("GET", "/api/v1/nodes/n1") >= 1  # the uncached read before the delete
    time.sleep(0.2)
    assert api.obj("devices", "n2") is not None


def test_a_devices_whose_node_exists_is_kept_though_the_cache_lacks_it(api: WorkerStandIn) -> None:
    from gpustack_operator.worker.devicesgc import DevicesGcController

    api.add_node("n1")
    api.add_devices("n1")
    gc = DevicesGcController(kubernetes.client.ApiClient(api.configuration()))
    gc.reconcile("n1", None, {"metadata": {"name": "n1"}})  # the cache is behind: no Node cached
    assert api.obj("devices", "n1") is not None
    api.remove_node("n1")
    gc.reconcile("n1", None, {"metadata": {"name": "n1"}})
    assert api.obj("devices", "n1") is None


def test_nothing_is_written_before_the_node_cache_synced(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", labels=AMD_LABELS)
    api.add_devices("gone")
    api.fail(503, count=-1, when=lambda req: req.path == "/api/v1/nodes" and req.method == "GET")
    r = run()
    time.sleep(0.6)
    assert not r.worker.nodes.synced
    assert node_feature(api, "n1") is None
    assert api.obj("devices", "gone") is not None  # an unsynced cache lacks every Node: never a delete
    api.heal()
    wait_for(lambda: node_feature(api, "n1"))
    wait_for(lambda: api.obj("devices", "gone") is None)


def test_a_failed_write_is_retried(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", labels=AMD_LABELS)
    api.fail(500, count=2, when=lambda req: req.path.startswith(NF) and req.method == "POST")
    run()
    wait_for(lambda: node_feature(api, "n1"))
    assert api.count("POST", NF) == 3


def test_only_the_leader_acts_and_a_stop_hands_over(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", labels=AMD_LABELS)
    a = run(identity="a", leader_election=True)
    wait_for(lambda: a.worker.elector.leading)
    b = run(identity="b", leader_election=True)
    wait_for(lambda: node_feature(api, "n1"))
    time.sleep(0.4)
    assert not b.worker.elector.leading
    assert api.obj("leases", "worker.gpustack.ai", NS)["spec"]["holderIdentity"] == "a"  # type: ignore[index]
    b_before = b.worker.reconciled
    api.update_node("n1", lambda n: n["metadata"]["labels"].update({"x": "1"}))
    time.sleep(0.3)
    assert b.worker.reconciled == b_before  # the follower never reconciles
    a.stop()  # SIGTERM path: releases the Lease
    assert api.obj("leases", "worker.gpustack.ai", NS)["spec"]["holderIdentity"] == ""  # type: ignore[index]
    wait_for(lambda: b.worker.elector.leading, timeout=3.0)
    api.update_node("n1", lambda n: n["metadata"]["labels"].update({"gpustack.ai/managed": "true"}))
    api.add_devices("n1")
    wait_for(lambda: (api.obj("devices", "n1")["metadata"].get("labels") or {}).get("gpustack.ai/managed") == "true")  # type: ignore[index]
