"""What keeps the worker's RSS down with 1,000 Nodes cached (issue 19, <= 80 MiB; bench/worker_bench.py):

- kube/objectwatch.py lists in pages (``limit`` / ``continue``) and decodes each page one item at a
  time (``decode_list``), each trimmed before the next is decoded; an expired ``continue`` lists again;
- the worker's caches keep only what its controllers read (worker/run.py ``node_view`` /
  ``devices_view``);
- worker/memory.py pins glibc's mmap threshold, so a freed list page goes back to the system.
"""

from __future__ import annotations

import json
import platform
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator.kube.objectwatch import ObjectWatch, WatchFailedError, decode_list
from gpustack_operator.worker import memory
from gpustack_operator.worker.run import devices_view, node_view

from tests.kube.apiserver import ApiError, Request
from tests.unit.worker.standin import WorkerStandIn, _worker_routes

# -- decode_list -------------------------------------------------------------------------------------


def test_decode_list_hands_each_item_over_in_order_and_returns_the_rest() -> None:
    seen: list[Any] = []
    text = ' { "kind" : "NodeList", "metadata": {"resourceVersion": "7", "continue": "x"},\n "items": [ {"a": 1} ,'
    text += ' {"b": [2, {"c": null}]}, 3 ] , "apiVersion": "v1" } \n'
    members = decode_list(text.encode(), seen.append)
    assert seen == [{"a": 1}, {"b": [2, {"c": None}]}, 3]
    assert members == {"kind": "NodeList", "metadata": {"resourceVersion": "7", "continue": "x"}, "apiVersion": "v1"}
    empty: list[Any] = []
    assert decode_list(b'{"items": []}', empty.append) == {} and empty == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b"[]", "not JSON"),
        (b'{"items": [1, 2}', "not JSON"),
        (b'{"items": [1] "x": 2}', "not JSON"),
        (b'{"items": [1]} trailing', "not JSON"),
        (b'{"items": [1]', "not JSON"),
        (b"\xff\xfe{}", "not JSON"),
        (b'{"items": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "not JSON"),
        (b"{}", "not a list"),
        (b'{"items": null}', "not a list"),
        (b'{"items": {"a": 1}}', "not a list"),
    ],
)
def test_decode_list_refuses_what_is_not_a_list(data: bytes, message: str) -> None:
    with pytest.raises(WatchFailedError, match=message):
        decode_list(data, lambda item: None)


def test_decode_list_never_builds_the_whole_list() -> None:
    """A list of 300 ~13 KB items: decoding it item by item, keeping nothing, peaks at a small part of
    what ``json.loads`` of the same text allocates (the item being decoded, not all 300)."""
    item = {"metadata": {"name": "n", "labels": {f"feature.node.kubernetes.io/flag-{n}": "true" for n in range(300)}}}
    text = json.dumps({"metadata": {"resourceVersion": "1"}, "items": [item] * 300})
    tracemalloc.start()
    try:
        decode_list(text, lambda item: None)
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = json.loads(text)
        _, loaded = tracemalloc.get_traced_memory()
        del whole
    finally:
        tracemalloc.stop()
    assert streamed * 20 < loaded, (streamed, loaded)


# -- paging ------------------------------------------------------------------------------------------


class PagingStandIn(WorkerStandIn):
    """The worker's stand-in whose Node list honours ``limit`` and ``continue`` (the offset as token),
    records each list's query and can answer one ``continue`` with 410 (an expired token)."""

    def __init__(self) -> None:
        super().__init__()
        self.list_queries: list[dict[str, str]] = []
        self.expire_next_continue = False

    def start(self) -> PagingStandIn:
        api = self
        base = _worker_routes(self)

        class Handler(base):  # type: ignore[valid-type,misc]
            def _route(
                self, method: str, path: str, query: dict[str, str], content_type: str, body: Any, req: Request
            ) -> None:
                if method == "GET" and path == "/api/v1/nodes" and query.get("watch") not in ("true", "1"):
                    return self._send(200, api.page(query))  # type: ignore[no-any-return]
                return super()._route(method, path, query, content_type, body, req)  # type: ignore[no-any-return]

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def page(self, query: dict[str, str]) -> dict[str, Any]:
        self.list_queries.append(dict(query))
        if query.get("continue") and self.expire_next_continue:
            self.expire_next_continue = False
            raise ApiError(410, "Expired", "the provided continue parameter is too old")
        whole = self.list_of("nodes")
        start, limit = int(query.get("continue") or 0), int(query.get("limit") or 0)
        end = start + limit if limit else len(whole["items"])
        meta = {"resourceVersion": whole["metadata"]["resourceVersion"]}
        if end < len(whole["items"]):
            meta["continue"] = str(end)
        return {"kind": "NodeList", "apiVersion": "v1", "metadata": meta, "items": whole["items"][start:end]}


@pytest.fixture
def paging() -> Iterator[PagingStandIn]:
    api = PagingStandIn().start()
    try:
        yield api
    finally:
        api.close()


def wait_for(what: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


def watch_of(api: PagingStandIn, page: int) -> ObjectWatch:
    client = kubernetes.client.ApiClient(api.configuration())
    return ObjectWatch(client, "/api/v1/nodes", list_page=page, backoff_initial=0.05, backoff_max=0.1)


def test_the_list_is_read_in_pages_then_watched_from_its_version(paging: PagingStandIn) -> None:
    for n in range(5):
        paging.add_node(f"n{n}")
    w = watch_of(paging, 2).start()
    try:
        assert w.wait_synced(5)
        assert w.names() == [f"n{n}" for n in range(5)]
        assert [(q.get("limit"), q.get("continue")) for q in paging.list_queries] == [
            ("2", None),
            ("2", "2"),
            ("2", "4"),
        ]
        paging.add_node("n5")  # after the list's version: the watch brings it
        wait_for(lambda: w.get("n5"))
        assert len(paging.list_queries) == 3 and w.lists == 1
    finally:
        w.stop()


def test_an_expired_continue_token_lists_again_from_the_start(paging: PagingStandIn) -> None:
    for n in range(3):
        paging.add_node(f"n{n}")
    paging.expire_next_continue = True
    w = watch_of(paging, 2).start()
    try:
        assert w.wait_synced(5)
        assert w.names() == ["n0", "n1", "n2"]
        assert [q.get("continue") for q in paging.list_queries] == [None, "2", None, "2"]
        assert w.lists == 1  # the half-read list was never merged
    finally:
        w.stop()


# -- the caches' views -------------------------------------------------------------------------------


def test_the_node_view_keeps_only_the_annotation_the_key_reads() -> None:
    node: dict[str, Any] = {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "resourceVersion": "9",
            "labels": {"feature.node.kubernetes.io/cpu-model.id": "143", "kubernetes.io/os": "linux"},
            "annotations": {
                "feature.gpustack.ai/cpu-name": "Intel(R) Xeon(R) Platinum 8480+",
                "nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX," * 50,
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "status": {"capacity": {"cpu": "224", "memory": "2Ti"}, "images": [{"names": ["x"]}] * 30},
    }
    assert node_view(node) == {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "labels": {"feature.node.kubernetes.io/cpu-model.id": "143", "kubernetes.io/os": "linux"},
            "annotations": {"feature.gpustack.ai/cpu-name": "Intel(R) Xeon(R) Platinum 8480+"},
        },
        "status": {"capacity": {"cpu": "224"}},
    }
    node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    assert "annotations" not in node_view(node)["metadata"]  # none read: nothing kept


def test_the_devices_view_keeps_only_the_managed_mark() -> None:
    devices: dict[str, Any] = {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "labels": {"gpustack.ai/managed": "true", "acceleratable.feature.gpustack.ai/nvidia": "true"},
        },
        "spec": {"groups": [{"id": "g"}]},
        "status": {"groups": []},
    }
    assert devices_view(devices) == {"metadata": {"name": "n1", "uid": "u1", "labels": {"gpustack.ai/managed": "true"}}}
    devices["metadata"]["labels"] = {"acceleratable.feature.gpustack.ai/nvidia": "true"}
    assert devices_view(devices) == {"metadata": {"name": "n1", "uid": "u1"}}


# -- the mmap threshold ------------------------------------------------------------------------------


class FakeLibc:
    def __init__(self, answer: int) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer
        self.mallopt = self._mallopt

    def _mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def test_the_threshold_is_pinned_at_glibc_s_initial_128_kib(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc(1)
    monkeypatch.setattr("ctypes.CDLL", lambda name: libc)
    assert memory.pin_mmap_threshold() is True
    assert libc.calls == [(-3, 128 * 1024)]  # M_MMAP_THRESHOLD (<malloc.h>), which also stops its raising
    libc.answer = 0
    assert memory.pin_mmap_threshold() is False  # a C library that refuses it (musl's stub)


def test_no_mallopt_is_no_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMallopt:
        pass

    monkeypatch.setattr("ctypes.CDLL", lambda name: NoMallopt())
    assert memory.pin_mmap_threshold() is False

    def unloadable(name: Any) -> Any:
        raise OSError("no such library")

    monkeypatch.setattr("ctypes.CDLL", unloadable)
    assert memory.pin_mmap_threshold() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's M_MMAP_THRESHOLD is glibc's")
def test_glibc_takes_the_pin() -> None:
    assert memory.pin_mmap_threshold() is True
