"""Controller (b): the ``gpustack.ai/managed`` mark, synced from a Node onto its same-named ``Devices``.

device-discovery "Stage 2": the per-node Device Manager never asserts a node-management decision it
does not own -- the worker copies the Node's ``gpustack.ai/managed`` label onto the ``Devices`` named
after it, and removes it there when the Node no longer carries it. Both objects are read from the
worker's watch caches; the one API call is a merge patch of that single label, made only when the two
differ (the Device Manager's publisher keeps labels it does not own, so the mark survives its writes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpustack_operator.kube.apply import patch_devices_label

if TYPE_CHECKING:  # the client is imported by gpustack_operator.kube alone
    import kubernetes.client

log = logging.getLogger(__name__)

MANAGED = "gpustack.ai/managed"


def _mark(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels")
    value = labels.get(MANAGED) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else None


class ManagedMarkController:
    name = "managed-mark"

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.client = client

    def reconcile(self, name: str, node: dict[str, Any] | None, devices: dict[str, Any] | None) -> None:
        """Raises ``KubeRequestError`` when the patch failed (the caller retries)."""
        if node is None or devices is None:
            return  # nothing to copy from, or nothing to copy onto (yet)
        want, have = _mark(node), _mark(devices)
        if want == have:
            return
        patch_devices_label(self.client, name, MANAGED, want)
        log.info("Devices %s: %s %s", name, MANAGED, f"set to {want!r}" if want is not None else "removed")


__all__ = ["MANAGED", "ManagedMarkController"]
