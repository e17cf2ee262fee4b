"""An API-server stand-in for Pods: real HTTP on 127.0.0.1 that the official ``kubernetes`` client
talks to unchanged (``Configuration(host=apiserver.url)``).

Served (core ``v1`` Pods only, JSON only)::

    GET    /version  /api  /api/v1  /apis                       discovery
    GET    /api/v1/pods                                         all namespaces
    GET    /api/v1/namespaces/{ns}/pods                         fieldSelector, labelSelector, watch
    POST   /api/v1/namespaces/{ns}/pods                         201 + uid, creationTimestamp, resourceVersion
    GET    /api/v1/namespaces/{ns}/pods/{name}[/status]
    PUT    /api/v1/namespaces/{ns}/pods/{name}[/status]         409 on a stale metadata.resourceVersion
    PATCH  /api/v1/namespaces/{ns}/pods/{name}[/status]         json-patch, merge-patch, strategic-merge-patch
    DELETE /api/v1/namespaces/{ns}/pods/{name}                  200 + the Pod

What follows the real API server, so a test proves something:

* Errors are ``Status`` objects with the real reasons and messages (``NotFound`` 404,
  ``AlreadyExists`` / ``Conflict`` 409, ``BadRequest`` 400, ``UnsupportedMediaType`` 415), so the
  client raises ``ApiException`` with the same ``status`` and ``reason``.
* ``resourceVersion`` is one counter for every write; a list carries it in ``metadata``; list items
  carry no ``kind`` / ``apiVersion`` (as the server omits them); ``creationTimestamp`` is whole seconds
  (RFC 3339, ``Z``).
* PATCH honours the Content-Type: ``application/json-patch+json`` takes an RFC 6902 operation list
  (a JSON object there is refused 400, as by the real server; the official client itself switches
  a dict body to strategic merge); ``merge-patch+json`` is RFC 7386;
  ``strategic-merge-patch+json`` is a merge patch that merges lists of objects by
  ``name`` (containers, env, volumes -- the ``patchMergeKey`` of those fields) and honours
  ``$patch: delete``/``replace``. A patch that names ``metadata.resourceVersion`` is checked like PUT.
  Updating the main resource ignores ``status``; ``/status`` changes only ``status``.
* ``fieldSelector`` supports the fields the server supports for Pods that matter here
  (``metadata.name``, ``metadata.namespace``, ``spec.nodeName``, ``status.phase``,
  ``spec.restartPolicy``, ``spec.schedulerName``, ``spec.serviceAccountName``, ``status.podIP``,
  ``status.nominatedNodeName``) with ``=``, ``==``, ``!=``; any other field is 400 ``field label
  not supported``. ``labelSelector`` supports ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in
  (..)``, ``k notin (..)``.
* ``watch=true`` streams ``ADDED`` / ``MODIFIED`` / ``DELETED`` events (newline-delimited JSON, chunked)
  after ``resourceVersion`` (all current pods as ``ADDED`` when it is absent or ``"0"``), filtered by
  the same selectors, until ``timeoutSeconds``; a ``resourceVersion`` older than the kept history (or,
  once, one :meth:`~APIServerStandIn.expire` compacted) is 410 ``Expired`` -- as the real server does, an
  HTTP 200 whose one event is ``ERROR`` carrying the 410 ``Status`` (``expired_as_event=False``: a
  plain HTTP 410). :meth:`~APIServerStandIn.drop_watches` cuts every open watch connection mid-stream
  (no terminating chunk: a dropped connection, not a server timeout).

Not modelled: authentication, admission, defaulting and validation beyond the above (a Pod is
stored as given), graceful deletion unless asked for (:meth:`APIServerStandIn.delete` with
``graceful=True`` only sets ``deletionTimestamp``), other resources, protobuf/CBOR/YAML.

Test helpers: :meth:`~APIServerStandIn.add_pod`, :meth:`~APIServerStandIn.set_phase`,
:meth:`~APIServerStandIn.stall` (answer late), :meth:`~APIServerStandIn.inject` (a raw watch event),
:meth:`~APIServerStandIn.expire` / :meth:`~APIServerStandIn.drop_watches` (410, a cut watch),
:meth:`~APIServerStandIn.delete`, :meth:`~APIServerStandIn.get`, the :attr:`~APIServerStandIn.requests`
log (one :class:`Request` per round trip), and :meth:`~APIServerStandIn.fail` to make the next
requests answer an error (an API server that is down or overloaded).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes.client

JSON = "application/json"
POD_FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.restartPolicy": ("spec", "restartPolicy"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
    "status.nominatedNodeName": ("status", "nominatedNodeName"),
}
HISTORY = 10_000  # watch events kept (older resourceVersions are 410 Expired)


def now_rfc3339(at: float | None = None) -> str:
    """Whole seconds, UTC, as the API server writes metav1.Time."""
    moment = dt.datetime.fromtimestamp(int(time.time() if at is None else at), tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_manifest(
    name: str,
    *,
    containers: Sequence[tuple[str, Mapping[str, str]] | dict[str, Any]] = (),
    init_containers: Sequence[tuple[str, Mapping[str, str]] | dict[str, Any]] = (),
    namespace: str = "default",
    uid: str | None = None,
    node_name: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, Mapping[str, str]] | None = None,
    runtime_class: str | None = None,
) -> dict[str, Any]:
    """A Pod manifest. ``containers`` are ``(name, {resource: quantity})`` pairs (the quantities set
    as limits, as extended resources require) or whole container dicts; ``env`` maps a container
    name to its literal ``env:`` entries."""

    def container(c: tuple[str, Mapping[str, str]] | dict[str, Any]) -> dict[str, Any]:
        if isinstance(c, dict):
            return copy.deepcopy(c)
        cname, limits = c
        out: dict[str, Any] = {"name": cname, "image": "busybox"}
        if limits:
            out["resources"] = {"limits": dict(limits), "requests": dict(limits)}
        if env and cname in env:
            out["env"] = [{"name": k, "value": v} for k, v in env[cname].items()]
        return out

    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    spec: dict[str, Any] = {"containers": [container(c) for c in containers]}
    if init_containers:
        spec["initContainers"] = [container(c) for c in init_containers]
    if node_name:
        spec["nodeName"] = node_name
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class ApiError(Exception):
    """Answered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out


def not_found(name: str) -> ApiError:
    return ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})


def conflict(name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on pods "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "kind": "pods"},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


# --- selectors -------------------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    cur: Any = obj
    for part in path:
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return "" if cur is None else str(cur)


def field_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    terms: list[tuple[tuple[str, ...], str, bool]] = []
    for raw in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", raw)
        if not m:
            raise bad_request(f'invalid selector: "{selector}"; can\'t understand "{raw}"')
        key, op, value = m.group(1), m.group(2), m.group(3)
        if key not in POD_FIELDS:
            raise bad_request(f'field label not supported: "{key}"')
        terms.append((POD_FIELDS[key], value, op != "!="))
    return lambda pod: all((_get(pod, path) == value) is eq for path, value, eq in terms)


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def _requirement(term: str) -> tuple[str, str, frozenset[str]]:
    """One label requirement as (key, operator, values); operators: in, notin, exists, !exists."""
    if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
        return m.group(1), m.group(2), frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
    if m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", term):
        return m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset({m.group(3)})
    if m := re.fullmatch(r"!\s*([^=!\s]+)", term):
        return m.group(1), "!exists", frozenset()
    if re.fullmatch(r"[^=!\s(),]+", term):
        return term, "exists", frozenset()
    raise bad_request(f'unable to parse requirement: "{term}"')


def label_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    reqs = [_requirement(term) for term in _split_terms(selector)]

    def holds(labels: Mapping[str, str], key: str, op: str, values: frozenset[str]) -> bool:
        if op == "in":
            return labels.get(key) in values
        if op == "notin":
            return labels.get(key) not in values
        return (key in labels) is (op == "exists")

    def match(pod: Mapping[str, Any]) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return all(holds(labels, *req) for req in reqs)

    return match


# --- patches ---------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch whose lists of objects with a ``name`` merge by name (the ``patchMergeKey``
    of containers, initContainers, env, volumes, volumeMounts, ports...); ``$patch: delete`` /
    ``$patch: replace`` directives on a map or list element."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key == "$patch":
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and _named(value) and isinstance(out.get(key), list) and _named(out[key]):
            out[key] = _merge_named(out[key], value)
        else:
            out[key] = strategic_merge_patch(out.get(key), value)
    return out


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _merge_named(current: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        idx = next((n for n, cur in enumerate(out) if cur.get("name") == item["name"]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the json patch path {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


class _JsonPatch:
    """RFC 6902 over a copy of one document."""

    def __init__(self, doc: Any) -> None:
        self.doc = copy.deepcopy(doc)

    def parent(self, path: str) -> tuple[Any, str]:
        parts = _pointer(path)
        if not parts:
            raise bad_request("the json patch cannot address the whole document")
        cur = self.doc
        for part in parts[:-1]:
            if isinstance(cur, list):
                try:
                    cur = cur[int(part)]
                except (ValueError, IndexError):
                    raise bad_request(f"the json patch path {path!r} does not exist") from None
            elif isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                raise bad_request(f"doc is missing path: {path!r}")
        return cur, parts[-1]

    def get(self, path: str) -> Any:
        cont, key = self.parent(path)
        try:
            return cont[int(key)] if isinstance(cont, list) else cont[key]
        except (KeyError, ValueError, IndexError, TypeError):
            raise bad_request(f"doc is missing path: {path!r}") from None

    def remove(self, path: str) -> Any:
        cont, key = self.parent(path)
        try:
            return cont.pop(int(key)) if isinstance(cont, list) else cont.pop(key)
        except (KeyError, ValueError, IndexError, TypeError, AttributeError):
            raise bad_request(f"unable to remove nonexistent key: {key}: missing value") from None

    def add(self, path: str, value: Any) -> None:
        cont, key = self.parent(path)
        if isinstance(cont, list):
            try:
                cont.append(value) if key == "-" else cont.insert(int(key), value)
            except ValueError:
                raise bad_request(f"the json patch path {path!r} is not a list index") from None
        elif isinstance(cont, dict):
            cont[key] = value
        else:
            raise bad_request(f"doc is missing path: {path!r}")

    def apply(self, op: Any) -> None:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            self.add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            self.remove(path)
        elif kind == "replace":
            self.remove(path)
            self.add(path, copy.deepcopy(op.get("value")))
        elif kind == "test":
            if self.get(path) != op.get("value"):
                raise ApiError(422, "Invalid", f"testing value {path} failed")
        elif kind == "move":
            self.add(path, self.remove(op.get("from", "")))
        elif kind == "copy":
            self.add(path, copy.deepcopy(self.get(op.get("from", ""))))
        else:
            raise bad_request(f"Unexpected kind: {kind}")


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, test, move, copy)."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    patch = _JsonPatch(doc)
    for op in ops:
        patch.apply(op)
    return patch.doc


PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}


# --- the server --------------------------------------------------------------------------------------


@dataclass
class Request:
    """One round trip as the stand-in answered it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    status: int = 0
    at: float = field(default_factory=time.time)


class _DroppedError(Exception):
    """drop_watches(): the handler cuts the connection."""


@dataclass
class _Event:
    rv: int
    type: str
    pod: Any  # the Pod; for inject(), the raw event


class APIServerStandIn:
    """See the module docstring. ``with APIServerStandIn() as api: api.url``"""

    def __init__(self, version: str = "v1.33.0") -> None:
        self.version = version
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._rv = 1
        self._events: list[_Event] = []
        self.requests: list[Request] = []
        self._faults: list[tuple[Callable[[Request], bool], int, str]] = []
        self._stalls: list[tuple[Callable[[Request], bool], float]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._compacted = 0  # the next watch from this resourceVersion or older is 410 Expired (expire())
        self._expire_next = False
        self._drops = 0  # drop_watches() generation
        self.expired_as_event = True

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> APIServerStandIn:
        if self._server is None:
            self._closing.clear()
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            self._server.daemon_threads = True
            self._thread = threading.Thread(target=self._server.serve_forever, name="apiserver-standin", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> APIServerStandIn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the API server stand-in is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configuration(self) -> kubernetes.client.Configuration:
        return kubernetes.client.Configuration(host=self.url)

    def client(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(self.configuration()))

    # --- test helpers ------------------------------------------------------------------------------------

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _event(self, kind: str, pod: dict[str, Any]) -> None:
        self._events.append(_Event(int(pod["metadata"]["resourceVersion"]), kind, copy.deepcopy(pod)))
        del self._events[:-HISTORY]
        self._cond.notify_all()

    def add_pod(self, manifest: Mapping[str, Any], *, created: float | None = None) -> dict[str, Any]:
        """Store a Pod as a create would (uid, creationTimestamp, resourceVersion, phase Pending);
        a uid or creationTimestamp already in the manifest is kept. The stored Pod."""
        pod = copy.deepcopy(dict(manifest))
        meta = pod.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("a Pod manifest needs metadata.name")
        meta.setdefault("namespace", "default")
        with self._cond:
            key = (meta["namespace"], meta["name"])
            if key in self._pods:
                raise ApiError(409, "AlreadyExists", f'pods "{meta["name"]}" already exists', {"name": meta["name"]})
            meta.setdefault("uid", str(uuid.uuid4()))
            if created is not None or "creationTimestamp" not in meta:
                meta["creationTimestamp"] = now_rfc3339(created)
            meta["resourceVersion"] = self._bump()
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            pod.setdefault("spec", {})
            pod.setdefault("status", {}).setdefault("phase", "Pending")
            self._pods[key] = pod
            self._event("ADDED", pod)
            return copy.deepcopy(pod)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            pod = self._pods.get((namespace, name))
            return copy.deepcopy(pod) if pod else None

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            for pod in self._pods.values():
                if pod["metadata"].get("uid") == uid:
                    return copy.deepcopy(pod)
        return None

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(p) for p in self._pods.values()]

    def update(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``change`` to the stored Pod in place (a new resourceVersion, a MODIFIED event)."""
        with self._cond:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise not_found(name)
            change(pod)
            pod["metadata"]["resourceVersion"] = self._bump()
            self._event("MODIFIED", pod)
            return copy.deepcopy(pod)

    def set_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        return self.update(namespace, name, lambda p: p.setdefault("status", {}).__setitem__("phase", phase))

    def pod_status(self, pod: Mapping[str, Any], phase: str, reason: str = "", message: str = "") -> None:
        """The kubelet's status update of ``pod`` (a manifest naming namespace and name; a Pod no
        longer stored is ignored, as a status write for a deleted Pod fails): ``phase``, and
        ``reason`` / ``message`` when given. Fits ``KubeletStandIn(pod_status=...)``."""
        meta = pod.get("metadata") or {}

        def change(stored: dict[str, Any]) -> None:
            status = stored.setdefault("status", {})
            status["phase"] = phase
            for key, value in (("reason", reason), ("message", message)):
                if value:
                    status[key] = value
                else:
                    status.pop(key, None)

        try:
            self.update(meta.get("namespace") or "default", meta.get("name", ""), change)
        except ApiError:
            return

    def bind(self, namespace: str, name: str, node: str) -> dict[str, Any]:
        """What the scheduler's binding does: ``spec.nodeName``."""
        return self.update(namespace, name, lambda p: p.setdefault("spec", {}).__setitem__("nodeName", node))

    def delete(self, namespace: str, name: str, *, graceful: bool = False) -> dict[str, Any] | None:
        """Remove the Pod (a DELETED event); with ``graceful`` only set ``deletionTimestamp`` (the
        kubelet has not confirmed yet). The Pod as it was, or None when there was none."""
        with self._cond:
            pod = self._pods.get((namespace, name))
            if pod is None:
                return None
            if graceful:
                pod["metadata"]["deletionTimestamp"] = now_rfc3339()
                pod["metadata"]["deletionGracePeriodSeconds"] = 30
                pod["metadata"]["resourceVersion"] = self._bump()
                self._event("MODIFIED", pod)
                return copy.deepcopy(pod)
            del self._pods[(namespace, name)]
            pod["metadata"]["resourceVersion"] = self._bump()
            self._event("DELETED", pod)
            return copy.deepcopy(pod)

    def fail(
        self,
        status: int = 503,
        *,
        count: int = 1,
        when: Callable[[Request], bool] | None = None,
        reason: str = "ServiceUnavailable",
    ) -> None:
        """Answer the next ``count`` requests matching ``when`` (default: every request) with an
        error ``Status`` of ``status`` (``count=-1``: until :meth:`heal`)."""
        with self._lock:
            self._faults.append((when or (lambda r: True), count, f"{status} {reason}"))

    def expire(self) -> None:
        """Compact the history and cut the open watches: the next watch resuming from any version up
        to now is 410 Expired (once: a list then gives a version to watch from)."""
        with self._cond:
            self._compacted = self._rv
            self._expire_next = True
            self._drops += 1
            self._cond.notify_all()

    def inject(self, event: Any) -> None:
        """Send ``event`` (any JSON value) as-is, as one line, on every open watch (a malformed or
        hostile event, which the real server never sends)."""
        with self._cond:
            self._events.append(_Event(int(self._bump()), "RAW", event))
            self._cond.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch connection (the client sees its stream end without the last chunk)."""
        with self._cond:
            self._drops += 1
            self._cond.notify_all()

    def stall(self, seconds: float, *, when: Callable[[Request], bool] | None = None) -> None:
        """Answer the requests matching ``when`` (default: every request) only after ``seconds`` (an
        overloaded server; :meth:`heal` ends it)."""
        with self._lock:
            self._stalls.append((when or (lambda r: True), seconds))

    def heal(self) -> None:
        with self._lock:
            self._faults.clear()
            self._stalls.clear()

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """Requests answered, optionally only this method and/or path prefix."""
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (method is None or r.method == method) and (path is None or r.path.startswith(path))
            )

    def _fault(self, req: Request) -> ApiError | None:
        with self._lock:
            for n, (when, count, what) in enumerate(self._faults):
                if when(req):
                    if count > 0:
                        count -= 1
                        if count == 0:
                            self._faults.pop(n)
                        else:
                            self._faults[n] = (when, count, what)
                    code, reason = what.split(" ", 1)
                    return ApiError(int(code), reason, f"the API server stand-in was told to fail ({what})")
        return None

    # --- request handling --------------------------------------------------------------------------------

    def discovery(self, path: str) -> dict[str, Any] | None:
        major, minor = self.version.lstrip("v").split(".")[:2]
        docs: dict[str, dict[str, Any]] = {
            "/version": {
                "major": major,
                "minor": minor,
                "gitVersion": self.version,
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            },
            "/api": {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
            },
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
            "/api/v1": {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    {
                        "name": "pods",
                        "singularName": "pod",
                        "namespaced": True,
                        "kind": "Pod",
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                        "shortNames": ["po"],
                    },
                    {
                        "name": "pods/status",
                        "singularName": "",
                        "namespaced": True,
                        "kind": "Pod",
                        "verbs": ["get", "patch", "update"],
                    },
                ],
            },
        }
        return docs.get(path)

    def _select(self, namespace: str | None, query: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
        fields = field_matcher(query.get("fieldSelector", ""))
        labels = label_matcher(query.get("labelSelector", ""))
        return lambda pod: (
            (namespace is None or pod["metadata"].get("namespace") == namespace) and fields(pod) and labels(pod)
        )

    def list_pods(self, namespace: str | None, query: Mapping[str, str]) -> dict[str, Any]:
        match = self._select(namespace, query)
        with self._lock:
            items = []
            for key in sorted(self._pods):
                pod = self._pods[key]
                if match(pod):
                    item = copy.deepcopy(pod)
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                    items.append(item)
            return {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            }

    def watch(self, namespace: str | None, query: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        match = self._select(namespace, query)
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        rv_text = query.get("resourceVersion", "")
        with self._lock:
            if rv_text in ("", "0"):
                since = self._rv
                initial = [copy.deepcopy(p) for _, p in sorted(self._pods.items()) if match(p)]
            else:
                try:
                    since = int(rv_text)
                except ValueError:
                    raise bad_request(f"invalid resource version: {rv_text!r}") from None
                oldest = self._events[0].rv if self._events else self._rv
                compacted = self._expire_next and since <= self._compacted
                if compacted or (since < oldest - 1 and len(self._events) >= HISTORY):
                    self._expire_next = False
                    expired = ApiError(
                        410, "Expired", f"too old resource version: {since} ({max(oldest, self._compacted)})"
                    )
                    if not self.expired_as_event:
                        raise expired
                    return iter([{"type": "ERROR", "object": expired.status()}])
                initial = []
        return self._events_after(match, since, initial, deadline, self._drops)

    def _events_after(
        self,
        match: Callable[[Mapping[str, Any]], bool],
        since: int,
        initial: list[dict[str, Any]],
        deadline: float,
        drops: int = 0,
    ) -> Iterator[dict[str, Any]]:
        for pod in initial:
            yield {"type": "ADDED", "object": pod}
        while not self._closing.is_set():
            with self._cond:
                if self._drops != drops:
                    raise _DroppedError
                pending = [e for e in self._events if e.rv > since]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(min(left, 0.5))
                    continue
            for event in pending:
                since = event.rv
                if event.type == "RAW":
                    yield event.pod
                elif match(event.pod):
                    yield {"type": event.type, "object": copy.deepcopy(event.pod)}

    def create(self, namespace: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of a create is not a Pod object")
        meta = body.setdefault("metadata", {})
        if meta.get("namespace") not in (None, namespace):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(
                    422, "Invalid", "Pod is invalid: metadata.name: Required value: name or generateName is required"
                )
        meta["namespace"] = namespace
        meta.pop("uid", None)
        meta.pop("resourceVersion", None)
        meta.pop("creationTimestamp", None)
        return self.add_pod(body)

    def replace(self, namespace: str, name: str, body: Any, *, status: bool) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of an update is not a Pod object")
        with self._cond:
            current = self._pods.get((namespace, name))
            if current is None:
                raise not_found(name)
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise conflict(name)
            if (body.get("metadata") or {}).get("name", name) != name:
                raise bad_request("the name of the object does not match the name on the URL")
            return self._store(namespace, name, current, body, status=status)

    def patch(self, namespace: str, name: str, content_type: str, body: Any, *, status: bool) -> dict[str, Any]:
        patcher = PATCHERS.get(content_type)
        if patcher is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCHERS)}",
            )
        with self._cond:
            current = self._pods.get((namespace, name))
            if current is None:
                raise not_found(name)
            if content_type != "application/json-patch+json" and not isinstance(body, dict):
                raise bad_request("the patch is not a JSON object")
            merged = patcher(copy.deepcopy(current), body)
            if not isinstance(merged, dict):
                raise bad_request("the patched object is not a Pod")
            rv = (merged.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise conflict(name)
            return self._store(namespace, name, current, merged, status=status)

    def _store(
        self, namespace: str, name: str, current: dict[str, Any], new: dict[str, Any], *, status: bool
    ) -> dict[str, Any]:
        new = copy.deepcopy(new)
        if status:  # the status subresource changes status only
            stored = copy.deepcopy(current)
            stored["status"] = new.get("status") or {}
        else:  # the main resource ignores status; immutable identity fields are kept
            stored = new
            stored["status"] = copy.deepcopy(current.get("status") or {})
            meta = stored.setdefault("metadata", {})
            for keep in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
                if keep in current["metadata"]:
                    meta[keep] = current["metadata"][keep]
        stored.setdefault("apiVersion", "v1")
        stored.setdefault("kind", "Pod")
        if stored == current:  # a no-op write keeps its resourceVersion (and sends no event)
            return copy.deepcopy(current)
        stored["metadata"]["resourceVersion"] = self._bump()
        self._pods[(namespace, name)] = stored
        self._event("MODIFIED", stored)
        return copy.deepcopy(stored)

    def remove(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.delete(namespace, name)
        if pod is None:
            raise not_found(name)
        return pod


_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(/status)?)?$")


def _handler(api: APIServerStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "apiserver-standin"
        # headers and body go out as separate writes: with Nagle on, the body waits for the client's
        # delayed ACK (~40 ms per answer on Linux loopback), which a real API server never costs
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, code: int, doc: Any) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", JSON)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body: Any = None
            req = Request(method, parts.path, query, content_type, None)
            with api._lock:
                api.requests.append(req)
            try:
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        raise bad_request("the request body is not JSON") from None
                req.body = body
                with api._lock:
                    stall = max((d for when, d in api._stalls if when(req)), default=0.0)
                if stall:
                    api._closing.wait(stall)
                fault = api._fault(req)
                if fault is not None:
                    raise fault
                self._route(method, parts.path, query, content_type, body, req)
            except ApiError as err:
                req.status = err.code
                self._send(err.code, err.status())
            except (BrokenPipeError, ConnectionResetError):
                return

        def _route(
            self, method: str, path: str, query: dict[str, str], content_type: str, body: Any, req: Request
        ) -> None:
            def ok(code: int, doc: Any) -> None:
                req.status = code
                self._send(code, doc)

            path = path.rstrip("/") or "/"
            if method == "GET" and (doc := api.discovery(path)) is not None:
                return ok(200, doc)
            if path == "/api/v1/pods":
                if method != "GET":
                    raise ApiError(
                        405,
                        "MethodNotAllowed",
                        f"the server does not allow this method on the requested resource ({method})",
                    )
                if query.get("watch") in ("true", "1"):
                    return self._watch(None, query, req)
                return ok(200, api.list_pods(None, query))
            m = _POD_PATH.match(path)
            if not m:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            namespace, name, status = m.group(1), m.group(2), bool(m.group(3))
            if name is None:
                if method == "GET":
                    if query.get("watch") in ("true", "1"):
                        return self._watch(namespace, query, req)
                    return ok(200, api.list_pods(namespace, query))
                if method == "POST":
                    return ok(201, api.create(namespace, body))
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})",
                )
            if method == "GET":
                pod = api.get(namespace, name)
                if pod is None:
                    raise not_found(name)
                return ok(200, pod)
            if method == "PUT":
                return ok(200, api.replace(namespace, name, body, status=status))
            if method == "PATCH":
                return ok(200, api.patch(namespace, name, content_type, body, status=status))
            if method == "DELETE" and not status:
                return ok(200, api.remove(namespace, name))
            raise ApiError(
                405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
            )

        def _watch(self, namespace: str | None, query: dict[str, str], req: Request) -> None:
            events = api.watch(namespace, query)  # a bad or expired resourceVersion raises here
            req.status = 200
            self.send_response(200)
            self.send_header("Content-Type", JSON)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    self._chunk(event)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except _DroppedError:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

        def _chunk(self, event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    return Handler
