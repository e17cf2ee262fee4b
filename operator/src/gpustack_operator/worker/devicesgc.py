"""Controller (c): a departed node's ``Devices`` deleted directly.

The ``Devices`` object is owned by its Node, so the garbage collector removes it eventually; the
worker deletes it sooner (device-discovery "Stage 2", supplement §1.3 ``NodeDevicesReconciler``) so a
departed node's ledger stops counting its cards. It deletes only on an *uncached* read: a ``Devices``
whose Node the watch cache lacks is deleted when a GET of the Node on the API server itself answers
404 -- a cache that is behind (a Node just created, a relist in flight) never costs a ledger.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gpustack_operator.kube.apply import delete_devices, get_node

if TYPE_CHECKING:  # the client is imported by gpustack_operator.kube alone
    import kubernetes.client

log = logging.getLogger(__name__)


class DevicesGcController:
    name = "devices-gc"

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.client = client

    def reconcile(self, name: str, node: dict[str, Any] | None, devices: dict[str, Any] | None) -> None:
        """Raises ``KubeRequestError`` when a read or the delete failed (the caller retries)."""
        if devices is None or node is not None:
            return
        if get_node(self.client, name) is not None:
            return  # the cache is behind: the Node exists
        if delete_devices(self.client, name):
            log.info("Devices %s deleted: its Node is gone", name)


__all__ = ["DevicesGcController"]
