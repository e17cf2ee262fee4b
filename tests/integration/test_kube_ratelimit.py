"""``--kube-conn-qps`` / ``--kube-conn-burst`` over real loopback HTTP (issue 18, supplement §3.5): the
arrival times of the requests at the API-server stand-in (tests/kube/apiserver.py) have the token
bucket's shape -- ``burst`` at once, then ``qps`` per second -- whichever caller makes them (the pod
list, the annotation patch, a REST round trip, the watch, ``serve`` itself).

Timing assertions are one-sided bounds the bucket guarantees (N requests take at least
``(N - burst) / qps`` seconds; no window holds more than ``burst + qps * window`` of them, one more for
jitter) with generous slack the other way; never a tight equality."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION, PodsUnavailableError
from gpustack_operator.kube.annotations import AnnotationPatcher
from gpustack_operator.kube.pods import NodePods, make_api_client, pod_from_json
from gpustack_operator.kube.podwatch import PodWatch
from gpustack_operator.kube.rest import request

from tests.conftest import host
from tests.integration import test_kubelet_e2e as e2e
from tests.integration.test_kubelet_e2e import NVIDIA_RESOURCES, Node
from tests.kube.apiserver import APIServerStandIn, pod_manifest

NODE = "node-a"
QPS = 5.0
BURST = 2
SLACK = 0.9  # the lower bounds are the bucket's own; 10 % for the clocks (monotonic vs the stand-in's wall)
serve_node = e2e.serve_node  # the fixture: the Device Manager in-process on a fixture node


@pytest.fixture(autouse=True)
def no_proxy_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.fixture
def api() -> Iterator[APIServerStandIn]:
    with APIServerStandIn() as server:
        yield server


def arrivals(api: APIServerStandIn, since: float = 0.0) -> list[float]:
    with api._lock:
        return sorted(r.at for r in api.requests if r.at >= since)


def crowded_windows(times: list[float], qps: float, burst: int) -> list[tuple[int, float]]:
    """Every run of requests that more arrived in than the bucket lets through (one for jitter)."""
    crowded = []
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            count, window = j - i + 1, times[j] - first
            if count > burst + qps * window + 1:
                crowded.append((count, round(window, 3)))
    return crowded


def test_requests_from_every_caller_arrive_in_the_buckets_shape(api: APIServerStandIn) -> None:
    api.add_pod(pod_manifest("train-0", node_name=NODE, containers=[("main", {"nvidia.com/gpu": "1"})]))
    pod = pod_from_json(api.get("default", "train-0"))
    client = make_api_client(None, api.url, qps=QPS, burst=BURST)
    lister = NodePods(client, NODE, timeout=10)
    patcher = AnnotationPatcher(client, timeout=10)
    calls: list[Callable[[], object]] = [
        lister.list,
        lambda: patcher.record(pod, '{"main": {}}'),
        lambda: request(client, "GET", "/api/v1/namespaces/default/pods/train-0", timeout=10),
    ]
    per_caller = 4
    total = per_caller * len(calls)
    failures: list[BaseException] = []
    start = time.time()

    def run(call: Callable[[], object]) -> None:
        try:
            for _ in range(per_caller):
                call()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert api.get("default", "train-0")["metadata"]["annotations"][ALLOCATED_ANNOTATION] == '{"main": {}}'
    times = arrivals(api, start)
    assert len(times) == total
    # the burst goes at once (generously: within a second), the third waits for a refill
    assert times[BURST - 1] - start < 1.0
    assert times[BURST] - start >= SLACK / QPS
    # N requests take at least (N - burst) / qps, and not much longer: about qps per second
    spread = times[-1] - start
    assert spread >= SLACK * (total - BURST) / QPS
    assert spread < (total - BURST) / QPS + 5.0
    assert crowded_windows(times, QPS, BURST) == []


def test_a_watch_is_one_request_when_opened_and_its_events_take_no_token(api: APIServerStandIn) -> None:
    """A bucket of two that refills once a minute: the list and the watch take both tokens; Pods
    created afterwards still reach the view on the open watch, and the next request is refused at
    once, naming the rate limit, without reaching the server."""
    client = make_api_client(None, api.url, qps=1 / 60, burst=2)
    watch = PodWatch(client, NODE, list_timeout=1.0, backoff_initial=0.05, backoff_max=0.2)
    watch.start()
    try:
        assert watch.wait_synced(20)
        for _ in range(200):
            if api.count("GET", "/api/v1/pods") == 2:  # the list and the watch
                break
            time.sleep(0.05)
        for n in range(5):
            api.add_pod(pod_manifest(f"p{n}", node_name=NODE, containers=[("main", {"nvidia.com/gpu": "1"})]))
        version = watch.version
        for _ in range(200):
            if len(watch.node_pods()) == 5:
                break
            version = watch.wait_change(version, 0.1)
        assert sorted(p.name for p in watch.node_pods()) == [f"p{n}" for n in range(5)]
        assert (watch.lists, watch.watches) == (1, 1)
        with pytest.raises(PodsUnavailableError, match="rate limit"):
            NodePods(client, NODE, timeout=1.0).list()
        assert api.count() == 2
    finally:
        watch.stop()


def test_serve_passes_its_flags_to_the_client(
    serve_node: Callable[[Path, str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dm serve`` with qps 5 and burst 2: its start (the list, the watch, the node status, the
    published objects) is spread out by the bucket, and it still registers."""
    monkeypatch.setattr(e2e, "LOOPBACK", replace(e2e.LOOPBACK, kube_conn_qps=QPS, kube_conn_burst=BURST))
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    time.sleep(2.0)  # let the first pass's writes come in
    times = arrivals(node.api)
    assert len(times) > BURST + 2, [(r.method, r.path) for r in node.api.requests]
    assert crowded_windows(times, QPS, BURST) == []
    assert times[-1] - times[0] >= SLACK * (len(times) - BURST) / QPS
