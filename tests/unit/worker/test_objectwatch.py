"""kube/objectwatch.py: the list+watch cache the worker's controllers read, against the stand-in."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator.kube.objectwatch import ObjectWatch

from tests.kube.routes_publish import PublishStandIn
from tests.unit.worker.standin import WorkerStandIn

Change = tuple[str, dict[str, Any] | None, dict[str, Any] | None]


def wait_for(what: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


@pytest.fixture
def watch(api: WorkerStandIn) -> Iterator[tuple[ObjectWatch, list[Change]]]:
    changes: list[Change] = []
    lock = threading.Lock()

    def record(name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        with lock:
            changes.append((name, old, new))

    w = ObjectWatch(
        kubernetes.client.ApiClient(api.configuration()), "/api/v1/nodes", backoff_initial=0.05, backoff_max=0.1
    )
    w.subscribe(record)
    yield w, changes
    w.stop()


def test_list_then_events(api: WorkerStandIn, watch: tuple[ObjectWatch, list[Change]]) -> None:
    w, changes = watch
    api.add_node("a")
    assert not w.synced and w.get("a") is None
    w.start()
    assert w.wait_synced(5)
    assert w.names() == ["a"] and changes[0][0] == "a" and changes[0][1] is None
    api.add_node("b")
    api.update_node("a", lambda n: n["metadata"]["labels"].update({"x": "1"}))
    api.remove_node("b")
    wait_for(lambda: len(changes) == 4)
    assert [(c[0], c[1] is None, c[2] is None) for c in changes[1:]] == [
        ("b", True, False),
        ("a", False, False),
        ("b", False, True),
    ]
    assert w.get("a")["metadata"]["labels"]["x"] == "1"  # type: ignore[index]
    assert w.names() == ["a"]


def test_a_failed_first_list_is_retried_and_nothing_is_synced_meanwhile(
    api: WorkerStandIn, watch: tuple[ObjectWatch, list[Change]]
) -> None:
    w, _ = watch
    api.add_node("a")
    api.fail(503, count=3, when=lambda r: r.path == "/api/v1/nodes" and "watch" not in r.query)
    w.start()
    assert not w.wait_synced(0.05)
    assert w.wait_synced(5)
    assert w.lists == 1 and w.names() == ["a"]


def test_a_dropped_watch_resumes_without_a_list(api: WorkerStandIn, watch: tuple[ObjectWatch, list[Change]]) -> None:
    w, changes = watch
    w.start()
    assert w.wait_synced(5)
    api.drop_watches()
    api.add_node("late")
    wait_for(lambda: w.get("late") is not None)
    assert w.lists == 1
    assert [c[0] for c in changes] == ["late"]


def test_410_lists_again_and_reports_what_the_gap_removed(
    api: WorkerStandIn, watch: tuple[ObjectWatch, list[Change]]
) -> None:
    w, changes = watch
    api.add_node("a")
    api.add_node("gone")
    w.start()
    assert w.wait_synced(5)
    PublishStandIn.delete_object(api, "nodes", "gone")  # removed with no event: a compacted gap
    api.fail(410, count=1, when=lambda r: r.query.get("watch") == "true", reason="Expired")
    api.drop_watches()
    wait_for(lambda: w.lists == 2)
    assert w.names() == ["a"]
    assert ("gone", True) in [(c[0], c[2] is None) for c in changes]


def test_keep_trims_and_an_unkept_change_is_no_change(api: WorkerStandIn) -> None:
    seen: list[str] = []
    w = ObjectWatch(
        kubernetes.client.ApiClient(api.configuration()),
        "/api/v1/nodes",
        keep=lambda o: {"metadata": {"name": o["metadata"]["name"], "labels": o["metadata"].get("labels")}},
    )
    w.subscribe(lambda name, old, new: seen.append(name))
    api.add_node("a", labels={"k": "v"})
    w.start()
    try:
        assert w.wait_synced(5)
        assert w.get("a") == {"metadata": {"name": "a", "labels": {"k": "v"}}}
        api.update_node("a", lambda n: n["metadata"].update({"annotations": {"not": "kept"}}))
        api.update_node("a", lambda n: n["metadata"]["labels"].update({"k": "w"}))
        wait_for(lambda: len(seen) == 2)
        time.sleep(0.1)
        assert seen == ["a", "a"]  # the first list, then the label change alone
    finally:
        w.stop()
