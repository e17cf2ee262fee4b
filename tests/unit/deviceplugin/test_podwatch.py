"""kube/podwatch.py: the watch-backed view of the node's pods, against the HTTP API-server stand-in
(tests/kube/apiserver.py) that the official client's ``Watch`` talks to over real loopback HTTP.

Waits are bounded conditions (never a timed assertion): each test waits for the view to show what the
API server holds, or for a callback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpustack_operator.allocator.pods import PodsUnavailableError
from gpustack_operator.kube.pods import make_api_client
from gpustack_operator.kube.podwatch import PodGone, PodWatch

from tests.kube.apiserver import APIServerStandIn, pod_manifest

NODE = "node-a"
WAIT = 20.0


@pytest.fixture
def api() -> Iterator[APIServerStandIn]:
    with APIServerStandIn() as server:
        yield server


class Watched:
    """A started PodWatch and what its callbacks reported."""

    def __init__(self, api: APIServerStandIn, **kw: Any) -> None:
        kw.setdefault("backoff_initial", 0.05)
        kw.setdefault("backoff_max", 0.2)
        self.watch = PodWatch(make_api_client(None, api.url), NODE, **kw)
        self.notes: list[PodGone] = []
        self._cond = threading.Condition()
        self.watch.subscribe(self._note)

    def _note(self, note: PodGone) -> None:
        with self._cond:
            self.notes.append(note)
            self._cond.notify_all()

    def wait_note(self, name: str, why: str) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(n.pod.name == name and n.why == why for n in self.notes), timeout=WAIT)
        assert ok, f"no {why} note for {name}: {self.notes}"

    def names(self) -> list[str]:
        return sorted(p.name for p in self.watch.node_pods())

    def wait_view(self, check: Callable[[list[str]], bool]) -> list[str]:
        version = -1
        for _ in range(200):
            names = self.names()
            if check(names):
                return names
            version = self.watch.wait_change(version if version >= 0 else self.watch.version, 0.1)
        raise AssertionError(f"the view never showed it: {self.names()}")


@pytest.fixture
def watched(api: APIServerStandIn) -> Iterator[Callable[..., Watched]]:
    started: list[Watched] = []

    def start(**kw: Any) -> Watched:
        w = Watched(api, **kw)
        started.append(w)
        w.watch.start()
        return w

    yield start
    for w in started:
        w.watch.stop()


def add(api: APIServerStandIn, name: str, node: str = NODE, **kw: Any) -> dict[str, Any]:
    return api.add_pod(pod_manifest(name, node_name=node, containers=[("main", {"nvidia.com/gpu": "1"})], **kw))


def watch_requests(api: APIServerStandIn) -> list[Any]:
    return [r for r in list(api.requests) if r.path == "/api/v1/pods" and r.query.get("watch") == "true"]


def list_requests(api: APIServerStandIn) -> list[Any]:
    return [r for r in list(api.requests) if r.path == "/api/v1/pods" and "watch" not in r.query]


def test_the_first_list_fills_the_view_with_this_nodes_pods(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    add(api, "a", annotations={"k": "v"})
    add(api, "b")
    add(api, "elsewhere", node="node-b")
    w = watched()
    assert w.names() == ["a", "b"]
    (listed,) = list_requests(api)
    assert listed.query["fieldSelector"] == f"spec.nodeName={NODE}"
    pod = next(p for p in w.watch.node_pods() if p.name == "a")
    assert pod.annotations == {"k": "v"} and pod.containers[0].resources == {"nvidia.com/gpu": "1"}
    # answered from the cache: no further round trip per read
    before = len(api.requests)
    for _ in range(5):
        w.watch.node_pods()
    assert len(api.requests) == before


def test_added_modified_deleted_events_follow_the_api_server(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    add(api, "a")
    w = watched()
    w.wait_view(lambda n: n == ["a"])
    add(api, "b")
    w.wait_view(lambda n: n == ["a", "b"])
    api.update("default", "b", lambda p: p["metadata"].setdefault("annotations", {}).__setitem__("x", "1"))
    for _ in range(200):
        if next(p for p in w.watch.node_pods() if p.name == "b").annotations.get("x") == "1":
            break
        w.watch.wait_change(w.watch.version, 0.1)
    assert next(p for p in w.watch.node_pods() if p.name == "b").annotations == {"x": "1"}
    api.set_phase("default", "a", "Succeeded")
    w.wait_note("a", "finished")
    api.delete("default", "b")
    w.wait_note("b", "deleted")
    assert w.names() == ["a"]
    assert len(list_requests(api)) == 1  # every change came by the watch


@pytest.mark.parametrize("as_event", [True, False])
def test_410_gone_lists_again_and_reports_what_the_gap_removed(
    api: APIServerStandIn, watched: Callable[..., Watched], as_event: bool
) -> None:
    api.expired_as_event = as_event
    add(api, "a")
    add(api, "b")
    w = watched()
    w.wait_view(lambda n: n == ["a", "b"])
    # the history is compacted while the watch is cut: its resume is 410, a relist follows
    with api._cond:  # one step: expire, then delete b while no watch can see it
        api.expire()
        api.delete("default", "b")
    w.wait_note("b", "deleted")
    assert w.names() == ["a"]
    assert w.watch.lists == 2
    add(api, "c")  # and the watch from the new list's version carries on
    w.wait_view(lambda n: n == ["a", "c"])


def test_a_dropped_watch_resumes_from_the_last_version_without_listing(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    add(api, "a")
    w = watched()
    w.wait_view(lambda n: n == ["a"])
    seen = w.watch._rv
    with api._cond:
        api.drop_watches()
        add(api, "b")  # while no watch is open
    w.wait_view(lambda n: n == ["a", "b"])
    resumed = [r for r in watch_requests(api) if r.query.get("resourceVersion") == seen]
    assert resumed, [r.query for r in watch_requests(api)]
    assert len(list_requests(api)) == 1


def test_server_errors_back_off_exponentially_up_to_the_bound(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    add(api, "a")
    api.fail(500, count=4, when=lambda r: r.query.get("watch") == "true", reason="InternalError")
    w = watched(backoff_initial=0.05, backoff_max=0.2)
    w.wait_view(lambda n: n == ["a"])
    add(api, "b")
    w.wait_view(lambda n: n == ["a", "b"])
    assert w.watch.delays[:4] == [0.05, 0.1, 0.2, 0.2]
    assert sum(1 for r in watch_requests(api) if r.status == 500) == 4


def test_before_the_first_sync_a_read_waits_then_refuses(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    api.fail(503, count=-1)
    w = watched(sync_timeout=0.3)
    with pytest.raises(PodsUnavailableError) as err:
        w.watch.node_pods()
    message = str(err.value)
    assert api.url in message and "has not synced" in message and "503" in message
    api.heal()
    add(api, "a")
    assert w.watch.wait_synced(WAIT)
    assert w.names() == ["a"]


def test_refresh_merges_a_list_without_bringing_back_a_deleted_pod(
    api: APIServerStandIn, watched: Callable[..., Watched]
) -> None:
    add(api, "a")
    w = watched()
    w.wait_view(lambda n: n == ["a"])
    assert w.watch.refresh()
    assert w.names() == ["a"] and w.watch.lists == 2
    api.fail(503, count=1, when=lambda r: "watch" not in r.query)
    assert not w.watch.refresh()


@pytest.mark.parametrize(
    "event",
    [
        {"type": "ERROR", "object": {"kind": "Status"}},  # no code
        {"type": "ADDED"},  # no object
        {"type": "MODIFIED", "object": {"metadata": {"uid": 7}}},  # not a Pod
        {"type": "SURPRISE", "object": {}},
        [1, 2, 3],
        "text",
    ],
)
def test_a_malformed_event_is_no_traceback_and_the_watch_carries_on(
    api: APIServerStandIn, watched: Callable[..., Watched], event: Any, caplog: pytest.LogCaptureFixture
) -> None:
    add(api, "a")
    w = watched()
    w.wait_view(lambda n: n == ["a"])
    api.inject(event)
    add(api, "b")
    w.wait_view(lambda n: n == ["a", "b"])
    assert not any(r.exc_info for r in caplog.records), [r.getMessage() for r in caplog.records]
