"""A watch-backed cache of one collection (the worker's Nodes): list once, then watch from the list's
``resourceVersion``, resumed the way ``podwatch.py`` resumes the node's Pods:

- a watch the server ends (its ``timeoutSeconds``) is resumed at once from the last version seen;
- a failed list or watch (refused, dropped, a 5xx, an unreadable answer) is retried after a bounded
  exponential backoff (``backoff_initial`` doubling up to ``backoff_max``), one log line each;
- ``410 Gone`` (an HTTP 410 or an ``ERROR`` event carrying 410) lists again; every object the gap
  removed is reported as deleted.

:attr:`ObjectWatch.synced` turns true only once the first list has been merged: a controller must
never act on an unsynced cache (NFD's own label wipe after a partial sync is the warning, issue 19).
:meth:`ObjectWatch.subscribe` registers a callback ``(name, old, new)`` called on the watch thread,
outside the cache's lock, for every change (``new`` is ``None`` for a deletion, ``old`` ``None`` for
an addition); a list after a 410 reports the difference with what the cache held.

A list is read in pages (``limit``, then ``continue``, as client-go's reflector does; a server that
does not page answers everything at once) and each page is decoded one item at a time, each item
trimmed by ``keep`` before the next is decoded: the list's whole document never exists as Python
objects, so listing 1,000 Nodes of ~13 KB each costs the page's text, not the ~40 MiB of dicts a
``json.loads`` of the list would build (and leave the heap fragmented by, issue 19's 80 MiB). An expired
``continue`` token (410) lists again from the start.

``keep`` trims each object before it is cached (the worker keeps a Node's metadata and CPU capacity,
not its images and conditions): the cache of 1,000 Nodes stays small, and a change outside what is
kept (the kubelet's status heartbeats) is no change at all -- no callback, no reconcile.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_operator.kube.rest import REQUEST_TIMEOUT, meta_field

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 300
READ_SLACK = 30.0
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0
HTTP_GONE = 410
LIST_PAGE = 500  # client-go's reflector page size
_BLANK = " \t\n\r"
_DECODER = json.JSONDecoder()

Change = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]


class _ExpiredError(Exception):
    """The watch's resourceVersion was compacted (410): list again."""


class WatchFailedError(Exception):
    """A list or watch that did not answer usably (one line naming the collection and the cause)."""


def _name(obj: Any) -> str:
    return meta_field(obj, "name")


def _version(obj: Any) -> str:
    return meta_field(obj, "resourceVersion")


class ObjectWatch:
    """See the module docstring. ``path`` is a collection (``/api/v1/nodes``)."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        path: str,
        *,
        list_timeout: float = REQUEST_TIMEOUT,
        watch_timeout: int = WATCH_TIMEOUT,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        list_page: int = LIST_PAGE,
    ) -> None:
        self.client = client
        self.keep = keep
        self.list_page = max(0, int(list_page))  # 0: one unpaged list
        self.path = path
        self.list_timeout = list_timeout
        self.watch_timeout = max(1, int(watch_timeout))
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.last_error: str | None = None
        self.lists = 0
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._rv = ""
        self._callbacks: list[Change] = []
        self._thread: threading.Thread | None = None
        self._watch: Any = None

    # -- the view ----------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(max(0.0, timeout))

    def subscribe(self, callback: Change) -> None:
        self._callbacks.append(callback)

    def get(self, name: str) -> dict[str, Any] | None:
        """A copy of the cached object (``None`` when absent or not yet synced)."""
        with self._lock:
            found = self._objects.get(name)
            return copy.deepcopy(found) if found is not None else None

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._objects)

    # -- the loop ----------------------------------------------------------------------------------

    def start(self) -> ObjectWatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.path}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self.backoff_initial
        while not self._stop.is_set():
            try:
                if not self._rv:
                    self._relist()
                self._watch_once()
                delay = self.backoff_initial
                self.last_error = None
            except _ExpiredError as exc:
                log.info("the watch of %s expired (%s); listing again", self.path, exc)
                self._rv = ""
            except Exception as exc:  # never a dead watch: one line, then the backoff
                self.last_error = f"the watch of {self.path} failed: {_describe(exc)}"
                if self._stop.is_set():
                    break
                log.warning("%s; retrying in %.1fs", self.last_error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)
                if isinstance(exc, (KeyError, TypeError, AttributeError)):
                    self._rv = ""  # an event the reader could not read: resuming would read it again

    def _request(self, query: list[tuple[str, Any]], timeout: Any) -> Any:
        serialized = self.client.param_serialize(
            method="GET",
            resource_path=self.path,
            query_params=query or None,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(*serialized, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            body = response.read()  # type: ignore[no-untyped-call]
            raise ApiException(status=response.status, reason=body[:200].decode("utf-8", "replace"))
        return response

    def _relist(self) -> None:
        fresh: dict[str, dict[str, Any]] = {}
        version, token = "", ""
        while True:
            query: list[tuple[str, Any]] = [("limit", self.list_page)] if self.list_page else []
            if token:
                query.append(("continue", token))
            try:
                response = self._request(query, self.list_timeout)
            except ApiException as exc:
                if exc.status == HTTP_GONE and token:
                    raise _ExpiredError(f"the list's continue token: HTTP 410 {exc.reason}".strip()) from None
                raise
            meta = decode_list(response.read(), lambda item: self._keep_item(item, fresh))
            version, token = _list_meta(meta)
            if not token:
                break
        changes: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        with self._lock:
            for name, gone in self._objects.items():
                if name not in fresh:
                    changes.append((name, gone, None))
            for name, new in fresh.items():
                old = self._objects.get(name)
                if old != new:
                    changes.append((name, old, new))
            self._objects = fresh
        self._rv = version or "0"
        self.lists += 1
        self._synced.set()
        self._notify(changes)

    def _keep_item(self, item: Any, into: dict[str, dict[str, Any]]) -> None:
        if isinstance(item, dict) and (name := _name(item)):
            into[name] = self._kept(item)

    def _watch_once(self) -> None:
        from kubernetes.watch import Watch  # noqa: PLC0415 -- the watch module only where it is used

        watch: Any = Watch()  # type: ignore[no-untyped-call]
        self._watch = watch
        started = time.monotonic()
        events = 0
        try:
            stream: Iterator[dict[str, Any]] = watch.stream(
                self._watch_call,
                resource_version=self._rv,
                timeout_seconds=self.watch_timeout,
                allow_watch_bookmarks=True,
            )
            for event in stream:
                if self._stop.is_set():
                    break
                self._apply(event)
                events += 1
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise _ExpiredError(f"HTTP 410 {exc.reason}".strip()) from None
            raise
        finally:
            self._watch = None
        if not events and time.monotonic() - started < 1.0 and not self._stop.is_set():
            raise WatchFailedError("the watch ended at once without an event")

    def _watch_call(self, **kwargs: Any) -> Any:
        query: list[tuple[str, Any]] = [("watch", "true"), ("timeoutSeconds", self.watch_timeout)]
        if kwargs.get("resource_version"):
            query.append(("resourceVersion", kwargs["resource_version"]))
        query.append(("allowWatchBookmarks", "true"))
        response = self._request(query, (self.list_timeout, self.watch_timeout + READ_SLACK)).response
        if self._stop.is_set():
            response.close()
            raise OSError("the watch is stopping")
        return response

    def _apply(self, event: Any) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("raw_object", event.get("object")) if isinstance(event, dict) else None
        version = _version(obj)
        if version:
            self._rv = version
        name = _name(obj)
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not name or not isinstance(obj, dict):
            return  # BOOKMARK (its version kept above) or an event without an object
        with self._lock:
            old = self._objects.get(name)
            if kind == "DELETED":
                self._objects.pop(name, None)
                new = None
            else:
                new = self._kept(obj)
                self._objects[name] = new
        if old != new:
            self._notify([(name, old, new)])

    def _kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.keep(obj) if self.keep is not None else obj

    def _notify(self, changes: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]) -> None:
        for name, old, new in changes:
            for callback in list(self._callbacks):
                try:
                    callback(name, old, new)
                except Exception:
                    log.exception("handling a change of %s %s failed", self.path, name)


def _list_meta(meta: dict[str, Any]) -> tuple[str, str]:
    """A list page's ``(resourceVersion, continue)`` from its ``metadata``."""
    found = meta.get("metadata")
    if not isinstance(found, dict):
        return "", ""
    version, token = found.get("resourceVersion"), found.get("continue")
    return (version if isinstance(version, str) else ""), (token if isinstance(token, str) else "")


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _BLANK:
        at += 1
    return at


def _expect(text: str, at: int, char: str) -> int:
    at = _skip(text, at)
    if at >= len(text) or text[at] != char:
        raise WatchFailedError(f"the list is not JSON (expected {char!r} at offset {at})")
    return _skip(text, at + 1)


def _items(text: str, at: int, each: Callable[[Any], None]) -> int:
    """The ``items`` array from ``at`` (its ``[``), each element handed to ``each`` once decoded;
    the offset after its ``]``."""
    at = _expect(text, at, "[")
    if text.startswith("]", at):
        return at + 1
    while True:
        item, at = _DECODER.raw_decode(text, at)
        each(item)
        at = _skip(text, at)
        if text.startswith("]", at):
            return at + 1
        at = _expect(text, at, ",")


def decode_list(data: bytes | str, each: Callable[[Any], None]) -> dict[str, Any]:
    """Decode a list answer (``{"metadata": ..., "items": [...]}``) one item at a time: each element
    of ``items`` is handed to ``each`` as soon as it is decoded (and can be dropped before the next),
    the other top-level members are returned. Raises :class:`WatchFailedError` when the answer is not
    a JSON object with an ``items`` array."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        members: dict[str, Any] = {}
        seen_items = False
        at = _expect(text, 0, "{")
        while not text.startswith("}", at):
            key, at = _DECODER.raw_decode(text, at)
            if not isinstance(key, str):
                raise WatchFailedError("the list is not JSON (a member name is not a string)")
            at = _expect(text, at, ":")
            if key == "items" and text.startswith("[", at):
                at, seen_items = _items(text, at, each), True
            else:
                members[key], at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            if not text.startswith("}", at):
                at = _expect(text, at, ",")
        if _skip(text, at + 1) != len(text):
            raise WatchFailedError("the list is not JSON (text after its end)")
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise WatchFailedError("the list is not JSON") from None
    if not seen_items:
        raise WatchFailedError("the answer is not a list")
    return members


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
    return f"{type(exc).__name__}: {str(exc)[:200]}"


__all__ = ["ObjectWatch", "WatchFailedError", "decode_list"]
