"""The durable ``device.gpustack.ai/accelerator.allocated`` annotation, written on the Pod.

:class:`AnnotationPatcher` is the allocator's
:class:`~gpustack_operator.allocator.pods.AnnotationRecorder`: one ``PATCH
/api/v1/namespaces/<ns>/pods/<name>`` with ``Content-Type: application/merge-patch+json`` (RFC 7386)
whose body names only ``metadata.annotations["device.gpustack.ai/accelerator.allocated"]`` (``null``
removes it) and ``metadata.uid`` -- a precondition: a Pod deleted and recreated under the same name
is refused (409), never given another Pod's record. The request goes through the client's own
``ApiClient`` steps (bearer token, TLS) with a timeout on the whole call and no retry: the caller's
budget is the ``Allocate`` the kubelet is waiting on. Any failure is
:class:`~gpustack_operator.allocator.pods.AnnotationWriteError` naming the API server and its answer.
"""

from __future__ import annotations

import json
import logging

import kubernetes.client
import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION, AnnotationWriteError, PodSpec

log = logging.getLogger(__name__)

PATCH_TIMEOUT = 5.0  # seconds for one patch (connect + read); the kubelet's Allocate deadline is longer
MERGE_PATCH = "application/merge-patch+json"


def merge_patch_body(pod: PodSpec, value: str | None) -> dict[str, object]:
    """The merge patch for ``value`` (``None`` removes the annotation); ``metadata.uid`` is the
    precondition that it is this Pod."""
    return {"metadata": {"uid": pod.uid, "annotations": {ALLOCATED_ANNOTATION: value}}}


class AnnotationPatcher:
    """See the module docstring."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float | None = None) -> None:
        self.client = api_client
        self.endpoint = str(api_client.configuration.host)
        self.timeout = PATCH_TIMEOUT if timeout is None else timeout
        self.patches = 0

    def record(self, pod: PodSpec, value: str | None) -> None:
        """Raises :class:`AnnotationWriteError`."""
        request = self.client.param_serialize(
            method="PATCH",
            resource_path="/api/v1/namespaces/{namespace}/pods/{name}",
            path_params={"namespace": pod.namespace, "name": pod.name},
            header_params={"Accept": "application/json", "Content-Type": MERGE_PATCH},
            body=merge_patch_body(pod, value),
            auth_settings=["BearerToken"],
        )
        try:
            response = self.client.call_api(*request, _request_timeout=self.timeout)
            body = response.read()  # type: ignore[no-untyped-call]
        except ApiException as exc:
            raise AnnotationWriteError(self._failed(pod, f"HTTP {exc.status} {exc.reason}".strip())) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            lines = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
            raise AnnotationWriteError(self._failed(pod, why)) from None
        if not 200 <= response.status <= 299:
            raise AnnotationWriteError(self._failed(pod, f"HTTP {response.status} {_status_message(body)}".strip()))
        self.patches += 1
        log.debug("annotation %s of %s written (%d bytes)", ALLOCATED_ANNOTATION, pod.key, len(value or ""))

    def _failed(self, pod: PodSpec, reason: str) -> str:
        return (
            f"the {ALLOCATED_ANNOTATION} annotation of pod {pod.key} could not be written to the API server at "
            f"{self.endpoint}: {reason}"
        )


def _status_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(doc, dict):
        return ""
    reason, message = doc.get("reason"), doc.get("message")
    parts = [p for p in (reason, message) if isinstance(p, str) and p]
    return ": ".join(parts)[:300]


__all__ = ["MERGE_PATCH", "PATCH_TIMEOUT", "AnnotationPatcher", "merge_patch_body"]
