"""A watch-backed view of the node's Pods: what the allocator identifies containers from.

:class:`PodWatch` lists the Pods bound to one node (``fieldSelector=spec.nodeName=<node>``) once, then
watches them through the official client's :class:`kubernetes.watch.Watch`, resuming each watch from the
last ``resourceVersion`` it saw:

- a watch the server ends (its ``timeoutSeconds``) is resumed at once from that version;
- a watch that fails (connection refused or dropped, a 5xx, a malformed answer) is resumed after a
  bounded exponential backoff (``backoff_initial`` doubling up to ``backoff_max``); a run of watches
  that end at once without an event counts as a failure too, so a server that closes every watch is
  never hammered;
- ``410 Gone`` (the version was compacted: an HTTP 410 or a watch ``ERROR`` event carrying 410) lists
  again and watches from the new list's version, reporting every Pod the gap removed; so does an event
  the client's reader cannot read at all (resuming would read it again), after the backoff.

:meth:`PodWatch.node_pods` answers from the cache without a round trip. Before the first list has
succeeded it waits up to ``sync_timeout`` and then raises
:class:`~gpustack_operator.allocator.pods.PodsUnavailableError` naming the API server and the last
error: an allocation that cannot identify its container is refused, never guessed.

:meth:`PodWatch.subscribe` registers a callback called (on the watch thread, never under the cache's
lock) with a :class:`PodGone` when a Pod is deleted, or turns ``Succeeded`` / ``Failed``: the allocator
releases on the event instead of on its next call.

:meth:`PodWatch.refresh` is the miss path: an ``Allocate`` whose container is not in the view (the
kubelet can be a few milliseconds ahead of this watch) lists once and merges the answer in. Events and
lists are merged by ``resourceVersion`` per Pod (an event no newer than what the cache holds is
ignored, and a Pod a list found gone is not brought back by an older event still in flight).

Each Pod object is read by :func:`~gpustack_operator.kube.pods.pod_from_json` (one unreadable Pod is
logged and skipped, never a dead watch).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_operator.allocator.pods import PodSpec, PodsUnavailableError
from gpustack_operator.kube.pods import LIST_TIMEOUT, POD_LIST_PATH, KubeConfigError, PodParseError, pod_from_json
from gpustack_operator.kube.rest import meta_field

log = logging.getLogger(__name__)

SYNC_TIMEOUT = 10.0  # how long a caller waits for the first list before it is refused
WATCH_TIMEOUT = 300  # timeoutSeconds of one watch request (the server ends it; it is resumed at once)
READ_SLACK = 30.0  # a watch connection silent this long past its timeoutSeconds is dead
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0
QUICK_END = 1.0  # a watch that ends within this without an event is a failure (backoff)
HTTP_GONE = 410


@dataclass(frozen=True)
class PodGone:
    """A Pod that stopped holding what it was granted: ``deleted`` (gone from the API server) or
    ``finished`` (``Succeeded`` / ``Failed``)."""

    pod: PodSpec
    why: str  # "deleted" or "finished"


class _ExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def _rv(text: str) -> int:
    """A resourceVersion as a number for ordering (the API server's are etcd revisions); -1 when it
    is not one, which orders before everything (such an event is always applied)."""
    return int(text) if text.isdigit() and len(text) < 30 else -1


class PodWatch:
    """See the module docstring. :meth:`start` runs the list-and-watch loop on a daemon thread;
    :meth:`stop` ends it (the open watch connection is shut down)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        node: str,
        *,
        sync_timeout: float = SYNC_TIMEOUT,
        list_timeout: float = LIST_TIMEOUT,
        watch_timeout: int = WATCH_TIMEOUT,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        if not node:
            raise KubeConfigError("the node name is empty: pass --node-name or set KUBERNETES_NODE_NAME")
        self.client = api_client
        self.endpoint = str(api_client.configuration.host)
        self.node = node
        self.sync_timeout = sync_timeout
        self.list_timeout = list_timeout
        self.watch_timeout = max(1, int(watch_timeout))
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.last_error: str | None = None
        self.lists = 0  # successful lists (the first sync, each 410, each refresh)
        self.watches = 0  # watch requests made
        self.delays: list[float] = []  # the backoffs taken (the last 100)
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._pods: dict[str, tuple[PodSpec, int]] = {}
        self._gone: dict[str, int] = {}  # uid -> the list version that found it gone (older events ignored)
        self._snapshot: list[PodSpec] | None = None
        self._rv = ""
        self._callbacks: list[Callable[[PodGone], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None  # the Watch while a request is open (stop() shuts its socket)
        self._watcher: Any = None
        self._changed = threading.Condition()
        self.version = 0  # bumped on every change of the view

    # -- the view ----------------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[PodGone], None]) -> None:
        self._callbacks.append(callback)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(max(0.0, timeout))

    def node_pods(self) -> list[PodSpec]:
        """The node's Pods from the cache. Raises :class:`PodsUnavailableError` when the first list has
        not succeeded within ``sync_timeout``."""
        if not self._synced.is_set() and not self._synced.wait(self.sync_timeout):
            why = f": {self.last_error}" if self.last_error else ""
            raise PodsUnavailableError(
                f"the watch of node {self.node}'s pods on the API server at {self.endpoint} has not synced within "
                f"{self.sync_timeout:.0f}s{why}"
            )
        with self._lock:
            if self._snapshot is None:
                self._snapshot = [pod for pod, _ in self._pods.values()]
            return list(self._snapshot)

    def wait_change(self, version: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self.version != version, timeout=max(0.0, timeout))
            return self.version

    def refresh(self) -> bool:
        """List once and merge the answer in (the miss path); False when the list failed."""
        try:
            items, version = self._list()
        except PodsUnavailableError as exc:
            log.warning("%s", exc)
            return False
        self._merge(items, version, replace=False)
        return True

    # -- the loop ----------------------------------------------------------------------------------

    def start(self) -> PodWatch:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"podwatch {self.node}", daemon=True)
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
        quick = 0
        while not self._stop.is_set():
            try:
                if not self._rv or not self._synced.is_set():
                    items, version = self._list()
                    self._merge(items, version, replace=True)
                    self._rv = version
                    self._synced.set()
                started = time.monotonic()
                events = self._watch_once()
                if self._stop.is_set():
                    break
                if events == 0 and time.monotonic() - started < QUICK_END:
                    quick += 1
                    if quick >= 2:
                        raise _QuickEndError("the watch ended at once, twice in a row, without an event")
                else:
                    quick = 0
                delay = self.backoff_initial
                self.last_error = None
            except _ExpiredError as exc:
                log.info("the watch of node %s's pods expired (%s); listing again", self.node, exc)
                self._rv = ""
                continue
            except _MalformedError as exc:  # resuming would read it again: list, then watch past it
                self._rv = ""
                self._backoff(self._failed(f"{exc}; listing again"), delay)
                delay = min(delay * 2, self.backoff_max)
            except (PodsUnavailableError, _QuickEndError) as exc:
                self._backoff(str(exc), delay)
                delay = min(delay * 2, self.backoff_max)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                self._backoff(self._failed(_describe(exc)), delay)
                delay = min(delay * 2, self.backoff_max)
            except Exception as exc:  # never a dead watch: logged with its trace, retried
                log.exception("the watch of node %s's pods failed", self.node)
                self._backoff(self._failed(f"{type(exc).__name__}: {exc}"), delay)
                delay = min(delay * 2, self.backoff_max)
        log.info("the watch of node %s's pods stopped", self.node)

    def _backoff(self, why: str, delay: float) -> None:
        self.last_error = why
        if self._stop.is_set():
            return
        self.delays = [*self.delays[-99:], delay]
        log.warning("%s; retrying in %.1fs", why, delay)
        self._stop.wait(delay)

    def _failed(self, reason: str) -> str:
        return f"the pods of node {self.node} could not be watched on the API server at {self.endpoint}: {reason}"

    # -- one list ----------------------------------------------------------------------------------

    def _request(self, query: list[tuple[str, Any]], timeout: Any) -> Any:
        request = self.client.param_serialize(
            method="GET",
            resource_path=POD_LIST_PATH,
            query_params=[("fieldSelector", f"spec.nodeName={self.node}"), *query],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            body = response.read()  # type: ignore[no-untyped-call]
            status, reason = _status_of(body, response.status, response.reason)
            raise ApiException(status=status, reason=reason)
        return response

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        """The node's Pods as JSON objects and the list's resourceVersion; raises PodsUnavailableError."""
        try:
            response = self._request([], self.list_timeout)
            doc = json.loads(response.read())
        except ApiException as exc:
            raise PodsUnavailableError(self._list_failed(f"HTTP {exc.status} {exc.reason}".strip())) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError, RecursionError) as exc:
            raise PodsUnavailableError(self._list_failed(_describe(exc))) from None
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise PodsUnavailableError(self._list_failed("the answer is not a pod list"))
        meta = doc.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self.lists += 1
        return items, version if isinstance(version, str) else ""

    def _list_failed(self, reason: str) -> str:
        return f"the pods of node {self.node} could not be listed from the API server at {self.endpoint}: {reason}"

    def _merge(self, items: list[Any], version: str, *, replace: bool) -> None:
        """A list's answer into the cache: its Pods where newer; a cached Pod the list lacks is gone
        unless it changed after the list was taken."""
        list_rv = _rv(version)
        seen: dict[str, tuple[PodSpec, int]] = {}
        for item in items:
            pod = self._parse(item)
            if pod is not None:
                seen[pod.uid] = (pod, _rv(_item_rv(item)))
        gone: list[PodGone] = []
        finished: list[PodGone] = []
        with self._lock:
            for uid, (old, old_rv) in list(self._pods.items()):
                if uid in seen:
                    continue
                if replace or list_rv < 0 or old_rv <= list_rv:
                    del self._pods[uid]
                    if list_rv >= 0:
                        self._gone[uid] = list_rv
                    gone.append(PodGone(old, "deleted"))
            for uid, (pod, rv) in seen.items():
                current = self._pods.get(uid)
                if current is not None and rv >= 0 and current[1] > rv:
                    continue
                if current is not None and pod.terminal and not current[0].terminal:
                    finished.append(PodGone(pod, "finished"))
                self._pods[uid] = (pod, rv)
            self._changed_locked()
        self._notify(gone + finished)

    # -- one watch ---------------------------------------------------------------------------------

    def _watch_once(self) -> int:
        """One watch request from the current version; the number of events applied. Raises
        :class:`_ExpiredError` on 410."""
        if self._watcher is None:
            from kubernetes.watch import Watch  # noqa: PLC0415 -- the watch module only where it is used

            self._watcher = Watch()  # type: ignore[no-untyped-call]
        watch = self._watcher
        self._watch = watch
        self.watches += 1
        applied = 0
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
                applied += 1
        except ApiException as exc:
            if exc.status == HTTP_GONE:
                raise _ExpiredError(f"HTTP 410 {exc.reason}".strip()) from None
            raise
        except (KeyError, TypeError, AttributeError) as exc:  # the client's reader on a malformed event
            raise _MalformedError(f"a malformed watch event ({type(exc).__name__}: {exc})") from None
        finally:
            self._watch = None
        return applied

    def _watch_call(self, **kwargs: Any) -> Any:
        """What ``Watch.stream`` calls: the list request with ``watch=true``, streamed (the raw
        urllib3 response, as the generated client's ``_preload_content=False`` gives)."""
        query = [("watch", "true"), ("timeoutSeconds", kwargs.get("timeout_seconds", self.watch_timeout))]
        if kwargs.get("resource_version"):
            query.append(("resourceVersion", kwargs["resource_version"]))
        if kwargs.get("allow_watch_bookmarks"):
            query.append(("allowWatchBookmarks", "true"))
        timeout = (self.list_timeout, self.watch_timeout + READ_SLACK)
        response = self._request(query, timeout).response
        if self._stop.is_set():  # stop() came between the loop's look and this request
            response.close()
            raise OSError("the watch is stopping")
        return response

    def _apply(self, event: Any) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("raw_object", event.get("object")) if isinstance(event, dict) else None
        version = _item_rv(obj)
        if kind == "BOOKMARK":
            if version:
                self._rv = version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("the watch of node %s's pods sent an event of type %r; ignored", self.node, kind)
            return
        if version:
            self._rv = version
        rv = _rv(version)
        pod = self._parse(obj)
        notes: list[PodGone] = []
        with self._lock:
            uid = pod.uid if pod is not None else _item_uid(obj)
            if not uid:
                return
            current = self._pods.get(uid)
            if current is not None and rv >= 0 and current[1] > rv:
                return  # older than what a refresh merged in
            if kind == "DELETED":
                self._gone.pop(uid, None)
                if current is not None:
                    del self._pods[uid]
                    notes.append(PodGone(pod or current[0], "deleted"))
            elif pod is not None:
                gone_at = self._gone.get(uid)
                if gone_at is not None and rv >= 0 and rv <= gone_at:
                    return  # a list already found this Pod gone
                if pod.terminal and (current is None or not current[0].terminal):
                    notes.append(PodGone(pod, "finished"))
                self._pods[uid] = (pod, rv)
            else:
                return
            self._changed_locked()
        self._notify(notes)

    def _parse(self, obj: Any) -> PodSpec | None:
        try:
            return pod_from_json(obj)
        except PodParseError as exc:
            log.warning("an unreadable pod from the API server at %s is skipped: %s", self.endpoint, exc)
            return None

    def _changed_locked(self) -> None:
        self._snapshot = None
        with self._changed:
            self.version += 1
            self._changed.notify_all()

    def _notify(self, notes: list[PodGone]) -> None:
        for note in notes:
            log.info("pod %s (%s) %s", note.pod.key, note.pod.uid, note.why)
            for callback in list(self._callbacks):
                try:
                    callback(note)
                except Exception:
                    log.exception("handling pod %s %s failed", note.pod.key, note.why)


class _MalformedError(Exception):
    """An event the client's watch reader could not read (no type, no object, an ERROR without a code)."""


class _QuickEndError(Exception):
    """Watches that end at once without an event (a server that closes every watch)."""


def _item_rv(obj: Any) -> str:
    return meta_field(obj, "resourceVersion")


def _item_uid(obj: Any) -> str:
    return meta_field(obj, "uid")


def _status_of(body: bytes, status: int, reason: str | None) -> tuple[int, str]:
    """A ``Status`` answer's code and ``reason: message`` (the HTTP status when it is not one)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        message = doc.get("message")
        why = doc.get("reason") or reason or ""
        text = f"{why}: {message}" if isinstance(message, str) and message else str(why)
        code = doc.get("code")
        return (code if isinstance(code, int) and code == status else status), text[:300]
    return status, (reason or "")[:300]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


__all__ = ["SYNC_TIMEOUT", "PodGone", "PodWatch"]
