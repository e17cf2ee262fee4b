"""The node capacity keys (supplement §5.2) on the Node's ``status.capacity`` and ``status.allocatable``.

:class:`NodeCapacityWriter` keeps the Node's capacity keys equal to what
:func:`~gpustack_operator.allocator.capacity.node_capacity` computed. Each :meth:`~NodeCapacityWriter.sync`
reads the Node (one GET) and, only when one of *our* keys differs -- a value changed, a key to add, a key
of ours the desired set no longer holds -- sends one merge patch to ``/api/v1/nodes/<node>/status``
setting the changed keys in both maps and removing the stale ones (``null``). Values are compared as
quantities (the API server stores ``1600000`` as ``1600k``). Keys that are not ours -- cpu, memory, the
device-plugin families the kubelet advertises, anyone else's extended resources -- are never written.

*Ours* is every ``<base>.sliced.*`` and ``<base>.partitioned.*`` key of the manufacturers this Device
Manager is asked about (:func:`~gpustack_operator.allocator.capacity.is_capacity_key`), so an accelerator
or a whole manufacturer gone takes its budget with it.

The read is repeated on every call on purpose: a kubelet that re-registers its Node zeroes the
extended resources it does not serve itself, and the next sync puts them back. Every call is bounded by
``timeout``; a failure raises :class:`~gpustack_operator.kube.rest.KubeRequestError` and leaves the
writer's state as it was, so the caller's next period retries.

Usage (what ``serve``'s loop calls after each detection pass and each ledger change)::

    from gpustack_operator.allocator.capacity import ManufacturerCapacity, names_of, node_capacity
    from gpustack_operator.kube.nodestatus import NodeCapacityWriter

    writer = NodeCapacityWriter(api_client, node_name, bases=[names_of(r).base for r in req.resolved.values()])
    desired = node_capacity(
        ManufacturerCapacity(a.names, groups[m], {p.family for p in a.pools()}, a.status())
        for m, a in allocators.items()
    )
    writer.sync(desired)   # True when it patched the Node
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import kubernetes.client

from gpustack_operator.allocator.budget import parse_quantity
from gpustack_operator.allocator.capacity import is_capacity_key
from gpustack_operator.kube.rest import MERGE_PATCH, REQUEST_TIMEOUT, request
from gpustack_operator.manufacturers.respond import RefusedError

log = logging.getLogger(__name__)

MAPS = ("capacity", "allocatable")


def _quantity(value: object) -> Decimal | None:
    """A quantity as a number, ``None`` when it is none (a hand-edited value we then overwrite)."""
    if not isinstance(value, str):
        return None
    try:
        return parse_quantity(value, "capacity")
    except RefusedError:
        return None


def capacity_patch(node: Mapping[str, Any], desired: Mapping[str, str], bases: Iterable[str]) -> dict[str, Any] | None:
    """The merge patch that makes ``node``'s capacity and allocatable hold exactly ``desired`` among our
    keys (``None``: nothing to change). Pure: the Node as read, the keys wanted, the bases we own."""
    owned = list(bases)
    status = node.get("status") or {}
    patch: dict[str, dict[str, str | None]] = {}
    for name in MAPS:
        current = status.get(name) or {}
        if not isinstance(current, Mapping):
            current = {}
        changes: dict[str, str | None] = {}
        for key, value in desired.items():
            want = _quantity(value)
            if key not in current or _quantity(current[key]) != want:
                changes[key] = value
        for key in current:
            if key not in desired and is_capacity_key(str(key), owned):
                changes[str(key)] = None
        if changes:
            patch[name] = dict(sorted(changes.items()))
    return {"status": patch} if patch else None


class NodeCapacityWriter:
    """Keeps one Node's capacity keys in step (see the module docstring)."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        node: str,
        bases: Iterable[str],
        *,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        if not node:
            raise ValueError("the node name is empty: pass --node-name or set KUBERNETES_NODE_NAME")
        self.client = client
        self.node = node
        self.bases = sorted(set(bases))
        self.timeout = timeout
        self.written: dict[str, str] | None = None  # what the last successful sync left on the Node

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{quote(self.node, safe='')}"

    def sync(self, desired: Mapping[str, str]) -> bool:
        """Make the Node carry ``desired``; ``True`` when a patch was sent. Raises
        :class:`~gpustack_operator.kube.rest.KubeRequestError` (nothing remembered: the next call
        retries)."""
        for key in desired:
            if not is_capacity_key(key, self.bases):
                raise ValueError(f"{key} is not a capacity key of {', '.join(self.bases) or 'any manufacturer'}")
        node = request(self.client, "GET", self.path, timeout=self.timeout)
        patch = capacity_patch(node, desired, self.bases)
        if patch is not None:
            request(
                self.client,
                "PATCH",
                self.path + "/status",
                body=patch,
                content_type=MERGE_PATCH,
                timeout=self.timeout,
            )
            log.info("node %s: capacity keys set: %s", self.node, _describe(patch))
        self.written = dict(desired)
        return patch is not None


def _describe(patch: Mapping[str, Any]) -> str:
    changes = (patch.get("status") or {}).get("capacity") or (patch.get("status") or {}).get("allocatable") or {}
    return ", ".join(f"{k}={'(removed)' if v is None else v}" for k, v in sorted(changes.items()))


__all__ = ["NodeCapacityWriter", "capacity_patch"]
