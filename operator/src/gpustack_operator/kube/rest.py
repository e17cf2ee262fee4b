"""One JSON round trip to the API server through the official client's own steps, bounded by a timeout.

The writers (``nodestatus.py``, ``publish.py``) speak to a handful of paths -- a Node and its status, a
NodeFeature, a ``Devices`` object and its status -- so, like ``pods.py``, they go through
``ApiClient.param_serialize`` (the bearer token, the query) and ``call_api`` with a timeout rather than
import the generated API classes (``core_v1_api`` alone is ~21 MiB; the custom-objects API brings the
dynamic machinery). The answer is read as plain JSON: the writers compare dicts, never models.

Every failure is :class:`KubeRequestError`, one line naming the method, the path, the endpoint and the
status or the transport error; ``status`` is the HTTP status (0 for a transport failure) so callers can
tell 404 (absent), 409 (conflict: re-read and retry) and the rest (back off, keep the state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

REQUEST_TIMEOUT = 10.0  # seconds for one round trip (connect + read)
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
NOT_FOUND = 404
CONFLICT = 409


class KubeRequestError(Exception):
    """An API round trip that did not answer 2xx (``status``) or did not complete (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _status_message(data: bytes) -> str:
    """The ``message`` of a ``Status`` body, else the first 200 characters of the body."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])[:300]
    return data[:200].decode("utf-8", "replace").strip()


def request(
    client: kubernetes.client.ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = JSON,
    query: Sequence[tuple[str, str]] = (),
    timeout: float = REQUEST_TIMEOUT,
) -> dict[str, Any]:
    """``method path`` with ``body`` (JSON); the answer as a dict. Raises :class:`KubeRequestError`."""
    headers: dict[str, str] = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    where = f"{method} {path} at {client.configuration.host}"
    try:
        serialized = client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*serialized, _request_timeout=timeout)
        data: bytes = response.read() or b""  # type: ignore[no-untyped-call]
    except ApiException as exc:  # the client's own transport refusals (status 0)
        raise KubeRequestError(int(exc.status or 0), f"{where}: {exc.reason or exc}") from None
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise KubeRequestError(0, f"{where}: {type(exc).__name__}: {first[:200]}") from None
    status = int(response.status)
    if not 200 <= status < 300:
        raise KubeRequestError(status, f"{where}: HTTP {status}: {_status_message(data)}")
    try:
        doc = json.loads(data) if data else {}
    except (ValueError, RecursionError):
        raise KubeRequestError(status, f"{where}: the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise KubeRequestError(status, f"{where}: the answer is not a JSON object")
    return doc


def meta_field(obj: Any, key: str) -> str:
    """``obj.metadata.<key>`` when it is a string, else ``""`` (whatever shape the API server sent)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else ""


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to a Node object as read from the API server (its name and uid), so what
    carries it is garbage-collected with the Node."""
    meta = node.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "blockOwnerDeletion": False,
        "controller": False,
    }


__all__ = [
    "CONFLICT",
    "MERGE_PATCH",
    "NOT_FOUND",
    "REQUEST_TIMEOUT",
    "KubeRequestError",
    "meta_field",
    "owner_reference",
    "request",
]
