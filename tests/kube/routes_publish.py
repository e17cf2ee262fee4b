"""The API-server stand-in (apiserver.py) with the objects the Device Manager publishes: Nodes (and
their ``status`` subresource), NFD NodeFeatures (namespaced) and ``Devices`` (cluster-scoped, with the
``status`` subresource). A subclass: apiserver.py is unchanged, its Pod routes still answer.

Served (JSON only)::

    GET, PATCH                /api/v1/nodes/{name}[/status]
    GET, POST                 /apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{ns}/nodefeatures
    GET, PUT, PATCH, DELETE   /apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{ns}/nodefeatures/{name}
    GET, POST                 /apis/worker.gpustack.ai/v1alpha1/devices
    GET, PUT, PATCH, DELETE   /apis/worker.gpustack.ai/v1alpha1/devices/{name}[/status]

As the real API server: ``AlreadyExists`` 409 on a second create, ``Conflict`` 409 on a write whose
``metadata.resourceVersion`` is stale, ``NotFound`` 404; on a resource with the ``status`` subresource
a create and an update of the main resource ignore ``status`` and a ``/status`` write changes only
``status``; ``metadata.generation`` counts spec changes; uid, creationTimestamp and resourceVersion are
set by the server; a write that changes nothing keeps its resourceVersion. PATCH takes the three
content types of apiserver.py.

With ``schema`` (the CRD's ``openAPIV3Schema``), a ``Devices`` write that the schema refuses is 422
``Invalid``, and one with a field the schema does not name is stored *pruned*, as the real server does
-- so a test that reads back what was written sees what a cluster would keep.

Not modelled: garbage collection by ownerReference (the references are stored and asserted on),
admission, other kinds.
"""

from __future__ import annotations

import copy
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.kube.apiserver import PATCHERS, ApiError, APIServerStandIn, Request, _handler, bad_request, now_rfc3339
from tests.kube.structural import prune, validate

NODE = re.compile(r"^/api/v1/nodes/([^/]+)(/status)?$")
NODE_FEATURES = re.compile(r"^/apis/nfd\.k8s-sigs\.io/v1alpha1/namespaces/([^/]+)/nodefeatures(?:/([^/]+))?$")
DEVICES = re.compile(r"^/apis/worker\.gpustack\.ai/v1alpha1/devices(?:/([^/]+)(/status)?)?$")

Key = tuple[str, str, str]  # (resource, namespace, name)


def _missing(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def _conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; please apply your '
        "changes to the latest version and try again",
        {"name": name, "kind": resource},
    )


class PublishStandIn(APIServerStandIn):
    """See the module docstring. ``schema``: the Devices CRD's ``openAPIV3Schema`` to enforce."""

    def __init__(self, version: str = "v1.33.0", *, schema: Mapping[str, Any] | None = None) -> None:
        super().__init__(version)
        self.objects: dict[Key, dict[str, Any]] = {}
        self.schema = schema
        self.pruned: list[tuple[str, list[str]]] = []  # (name, paths) the schema pruned from a write

    def start(self) -> PublishStandIn:
        if self._server is None:
            self._closing.clear()
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _routes(self))
            self._server.daemon_threads = True
            self._thread = threading.Thread(target=self._server.serve_forever, name="apiserver-standin", daemon=True)
            self._thread.start()
        return self

    def __enter__(self) -> PublishStandIn:
        return self.start()

    # -- test helpers -----------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        capacity: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {"kubernetes.io/os": "linux"})},
            "spec": {},
            "status": {"capacity": dict(capacity or {}), "allocatable": dict(capacity or {})},
        }
        return self.create_object("nodes", "", node, status_subresource=True, keep_status=True)

    def obj(self, resource: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            found = self.objects.get((resource, namespace, name))
            return copy.deepcopy(found) if found else None

    def delete_object(self, resource: str, name: str, namespace: str = "") -> None:
        with self._lock:
            self.objects.pop((resource, namespace, name), None)

    # -- storage ----------------------------------------------------------------------------------

    def _stamp(self, stored: dict[str, Any]) -> None:
        stored["metadata"]["resourceVersion"] = self._bump()

    def create_object(
        self,
        resource: str,
        namespace: str,
        body: Any,
        *,
        status_subresource: bool,
        keep_status: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request(f"the body of a create is not a {resource} object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{resource} is invalid: metadata.name: Required value")
        if namespace and meta.get("namespace") not in (None, namespace):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if namespace:
            meta["namespace"] = namespace
        if status_subresource and not keep_status:
            obj.pop("status", None)
        obj = self._admit(resource, obj)
        with self._lock:
            key = (resource, namespace, name)
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', {"name": name})
            meta = obj["metadata"]
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            meta.pop("resourceVersion", None)
            self._stamp(obj)
            self.objects[key] = obj
            return copy.deepcopy(obj)

    def _admit(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """The schema's refusal (422) and pruning, for Devices when a schema is set."""
        if resource != "devices" or self.schema is None:
            return obj
        kept: dict[str, Any]
        kept, removed = prune(self.schema, obj)
        if removed:
            self.pruned.append((str(obj["metadata"].get("name")), removed))
        problems = validate(self.schema, kept)
        if problems:
            raise ApiError(
                422,
                "Invalid",
                f'Devices.worker.gpustack.ai "{obj["metadata"].get("name")}" is invalid: ' + "; ".join(problems[:5]),
            )
        return kept

    def write_object(
        self,
        resource: str,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        status: bool,
        status_subresource: bool,
    ) -> dict[str, Any]:
        with self._lock:
            key = (resource, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise _missing(resource, name)
            new = change(copy.deepcopy(current))
            if not isinstance(new, dict):
                raise bad_request(f"the result is not a {resource} object")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise _conflict(resource, name)
            if (new.get("metadata") or {}).get("name", name) != name:
                raise bad_request("the name of the object does not match the name on the URL")
            if status:
                stored = copy.deepcopy(current)
                stored["status"] = new.get("status") or {}
            else:
                stored = new
                if status_subresource:
                    if "status" in current:
                        stored["status"] = copy.deepcopy(current["status"])
                    else:
                        stored.pop("status", None)
                meta = stored.setdefault("metadata", {})
                for keep in ("uid", "creationTimestamp", "name", "namespace", "generation"):
                    if keep in current["metadata"]:
                        meta[keep] = current["metadata"][keep]
                if stored.get("spec") != current.get("spec"):
                    meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
            stored["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            stored = self._admit(resource, stored)
            if stored == current:
                return copy.deepcopy(current)
            self._stamp(stored)
            self.objects[key] = stored
            return copy.deepcopy(stored)


def _routes(api: PublishStandIn) -> type[BaseHTTPRequestHandler]:
    base = _handler(api)

    class Handler(base):  # type: ignore[valid-type,misc]
        def _ok(self, code: int, doc: Any) -> None:
            self._send(code, doc)

        def _route(
            self, method: str, path: str, query: dict[str, str], content_type: str, body: Any, req: Request
        ) -> None:
            path = path.rstrip("/") or "/"
            target = _target(path)
            if target is None:
                super()._route(method, path, query, content_type, body, req)
                return None
            resource, namespace, name, status, subresource = target
            req.status = 200
            if name is None:
                if method == "GET":
                    items = [
                        copy.deepcopy(o)
                        for (r, ns, _), o in sorted(api.objects.items())
                        if r == resource and ns == namespace
                    ]
                    return self._ok(200, {"kind": "List", "apiVersion": "v1", "items": items})
                if method == "POST" and resource != "nodes":
                    req.status = 201
                    return self._ok(201, api.create_object(resource, namespace, body, status_subresource=subresource))
                raise _not_allowed(method)
            if method == "GET":
                found = api.obj(resource, name, namespace)
                if found is None:
                    raise _missing(resource, name)
                return self._ok(200, found)
            if method == "PUT" and resource != "nodes":
                replacement = body

                def replace(_current: dict[str, Any]) -> dict[str, Any]:
                    if not isinstance(replacement, dict):
                        raise bad_request(f"the body of an update is not a {resource} object")
                    return copy.deepcopy(replacement)

                return self._ok(
                    200,
                    api.write_object(resource, namespace, name, replace, status=status, status_subresource=subresource),
                )
            if method == "PATCH":
                patcher = PATCHERS.get(content_type)
                if patcher is None:
                    raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
                if content_type != "application/json-patch+json" and not isinstance(body, dict):
                    raise bad_request("the patch is not a JSON object")
                return self._ok(
                    200,
                    api.write_object(
                        resource,
                        namespace,
                        name,
                        lambda current: patcher(current, body),
                        status=status,
                        status_subresource=subresource,
                    ),
                )
            if method == "DELETE" and not status and resource != "nodes":
                found = api.obj(resource, name, namespace)
                if found is None:
                    raise _missing(resource, name)
                api.delete_object(resource, name, namespace)
                return self._ok(200, found)
            raise _not_allowed(method)

    return Handler


def _not_allowed(method: str) -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
    )


def _target(path: str) -> tuple[str, str, str | None, bool, bool] | None:
    """(resource, namespace, name, status subresource asked, resource has a status subresource)."""
    if m := NODE.match(path):
        return "nodes", "", m.group(1), bool(m.group(2)), True
    if m := NODE_FEATURES.match(path):
        return "nodefeatures", m.group(1), m.group(2), False, False
    if m := DEVICES.match(path):
        return "devices", "", m.group(1), bool(m.group(2)), True
    return None
