"""The publishing stand-in (tests/kube/routes_publish.py) with what the worker also needs, as a
subclass (neither apiserver.py nor routes_publish.py is changed):

    GET (list, watch)         /api/v1/nodes                               resourceVersion, watch events
    GET (list, watch)         /apis/worker.gpustack.ai/v1alpha1/devices   resourceVersion, watch events
    GET, POST / GET, PUT      /apis/apiextensions.k8s.io/v1/customresourcedefinitions[/{name}]
    GET, POST / GET, PUT      /apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules[/{name}]
    GET, POST / GET, PUT      /apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]

As the real server: a created CRD is ``Established`` (its condition set by the "server");
``nodefeaturerules`` is a 404 for the collection until :attr:`WorkerStandIn.nfd_rules` is set (NFD's
CRD absent); writes with a stale ``resourceVersion`` are 409; a Node or Devices create, update or
delete is a watch event (``ADDED`` / ``MODIFIED`` / ``DELETED``) after the list's version. Helpers:
:meth:`~WorkerStandIn.update_node`, :meth:`~WorkerStandIn.remove_node`, :meth:`~WorkerStandIn.add_devices`.
Not modelled: garbage collection by ownerReference (a removed Node leaves its Devices, which is
what lets a test see the worker delete them), 410 for these watches.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.kube.apiserver import ApiError, Request, bad_request
from tests.kube.routes_publish import PublishStandIn, _routes

WATCHED = ("nodes", "devices")
EXTRA = {
    re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(?:/([^/]+))?$"): "crds",
    re.compile(r"^/apis/nfd\.k8s-sigs\.io/v1alpha1/nodefeaturerules(?:/([^/]+))?$"): "nodefeaturerules",
}
LEASES = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?$")
COLLECTIONS = {"/api/v1/nodes": "nodes", "/apis/worker.gpustack.ai/v1alpha1/devices": "devices"}


def _not_found(what: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({what})")


class WorkerStandIn(PublishStandIn):
    def __init__(self, version: str = "v1.33.0", *, nfd_rules: bool = True) -> None:
        super().__init__(version)
        self.nfd_rules = nfd_rules
        self.watch_events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, resource, type, object)

    def start(self) -> WorkerStandIn:
        if self._server is None:
            self._closing.clear()
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _worker_routes(self))
            self._server.daemon_threads = True
            self._thread = threading.Thread(target=self._server.serve_forever, name="apiserver-standin", daemon=True)
            self._thread.start()
        return self

    def __enter__(self) -> WorkerStandIn:
        return self.start()

    # -- events -----------------------------------------------------------------------------------

    def _record(self, resource: str, kind: str, obj: Mapping[str, Any]) -> None:
        if resource in WATCHED:
            with self._cond:
                rv = int(obj["metadata"]["resourceVersion"])
                self.watch_events.append((rv, resource, kind, copy.deepcopy(dict(obj))))
                self._cond.notify_all()

    def create_object(self, resource: str, namespace: str, body: Any, **kw: Any) -> dict[str, Any]:
        created = super().create_object(resource, namespace, body, **kw)
        if resource == "crds":
            with self._lock:
                stored = self.objects[(resource, namespace, created["metadata"]["name"])]
                stored["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
                created = copy.deepcopy(stored)
        self._record(resource, "ADDED", created)
        return created

    def write_object(self, resource: str, namespace: str, name: str, change: Any, **kw: Any) -> dict[str, Any]:
        with self._lock:
            before = copy.deepcopy(self.objects.get((resource, namespace, name)))
            written = super().write_object(resource, namespace, name, change, **kw)
            if before is None or before["metadata"]["resourceVersion"] != written["metadata"]["resourceVersion"]:
                self._record(resource, "MODIFIED", written)
            return written

    def delete_object(self, resource: str, name: str, namespace: str = "") -> None:
        with self._lock:
            found = self.objects.get((resource, namespace, name))
            super().delete_object(resource, name, namespace)
            if found is not None:
                gone = copy.deepcopy(found)
                gone["metadata"]["resourceVersion"] = self._bump()
                self._record(resource, "DELETED", gone)

    # -- helpers ----------------------------------------------------------------------------------

    def update_node(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        def apply(current: dict[str, Any]) -> dict[str, Any]:
            change(current)
            return current

        return self.write_object("nodes", "", name, apply, status=False, status_subresource=True)

    def remove_node(self, name: str) -> None:
        self.delete_object("nodes", name)

    def add_devices(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        body = {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Devices",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"groups": []},
        }
        return self.create_object("devices", "", body, status_subresource=True)

    def list_of(self, resource: str) -> dict[str, Any]:
        with self._lock:
            items = [copy.deepcopy(o) for (r, _, _), o in sorted(self.objects.items()) if r == resource]
            return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def watch_of(self, resource: str, query: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        rv_text = query.get("resourceVersion", "")
        with self._lock:
            if rv_text in ("", "0"):
                since = self._rv
                initial = [copy.deepcopy(o) for (r, _, _), o in sorted(self.objects.items()) if r == resource]
            else:
                since, initial = int(rv_text), []
        drops = self._drops
        for obj in initial:
            yield {"type": "ADDED", "object": obj}
        while not self._closing.is_set():
            with self._cond:
                if self._drops != drops:
                    return
                pending = [e for e in self.watch_events if e[0] > since and e[1] == resource]
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(min(left, 0.2))
                    continue
            for rv, _, kind, obj in pending:
                since = rv
                yield {"type": kind, "object": obj}


def _worker_routes(api: WorkerStandIn) -> type[BaseHTTPRequestHandler]:
    base = _routes(api)

    class Handler(base):  # type: ignore[valid-type,misc]
        def _route(
            self, method: str, path: str, query: dict[str, str], content_type: str, body: Any, req: Request
        ) -> None:
            path = path.rstrip("/") or "/"
            resource = COLLECTIONS.get(path)
            if resource is not None and method == "GET":
                req.status = 200
                if query.get("watch") in ("true", "1"):
                    return self._stream(api.watch_of(resource, query))
                return self._send(200, api.list_of(resource))
            for pattern, kind in EXTRA.items():
                if m := pattern.match(path):
                    if kind == "nodefeaturerules" and not api.nfd_rules:
                        raise _not_found(path)
                    return self._generic(kind, "", m.group(1), method, body, req)
            if m := LEASES.match(path):
                return self._generic("leases", m.group(1), m.group(2), method, body, req)
            return super()._route(method, path, query, content_type, body, req)

        def _generic(self, resource: str, ns: str, name: str | None, method: str, body: Any, req: Request) -> None:
            req.status = 200
            if name is None:
                if method == "POST":
                    req.status = 201
                    return self._send(201, api.create_object(resource, ns, body, status_subresource=False))
                if method == "GET":
                    return self._send(200, api.list_of(resource))
            elif method == "GET":
                found = api.obj(resource, name, ns)
                if found is None:
                    raise ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name})
                return self._send(200, found)
            elif method == "PUT":
                if not isinstance(body, dict):
                    raise bad_request("the body of an update is not an object")
                keep_status = resource == "crds"

                def replace(current: dict[str, Any]) -> dict[str, Any]:
                    new = copy.deepcopy(body)
                    if keep_status and "status" in current:
                        new["status"] = current["status"]
                    return dict(new)

                return self._send(
                    200, api.write_object(resource, ns, name, replace, status=False, status_subresource=False)
                )
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")

        def _stream(self, events: Iterator[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler
