"""Publishing: the NodeFeature and the ``Devices`` object of one node, written only on change.

What is written (device-discovery "Stage 2", supplement §1.3, §9, interfaces.md §7):

* the NodeFeature ``${NODE}-gpustack-device-manager`` (``nfd.k8s-sigs.io/v1alpha1``, in the system
  namespace ``KUBERNETES_POD_NAMESPACE``, default ``gpustack-system``), labelled
  ``nfd.node.kubernetes.io/node-name: ${NODE}`` (NFD reads only NodeFeatures carrying it), whose
  ``spec.labels`` are the Device Manager's own labels for the detection -- the accelerator feature
  labels and the RDMA labels (:func:`device_manager_labels`; never NFD's own predictions);
* the cluster-scoped ``Devices`` ``${NODE}`` (``worker.gpustack.ai/v1alpha1``, see ``kube/crds.py``):
  ``spec`` the detection (:class:`~gpustack_operator.kube.crds.DevicesSpec`), ``status`` the ledger per
  accelerator (:class:`~gpustack_operator.kube.crds.DevicesStatus`: mode, allocated, remaining,
  allocatedSlices, allocated/remaining profiles) written through the ``status`` subresource, and
  stamped with the flavour selector labels: each group's feature key
  ``acceleratable.feature.gpustack.ai/<manufacturer>-<group>: "true"`` and the Node's
  ``kubernetes.io/os`` / ``kubernetes.io/arch``.

Both carry an ownerReference to their Node (its uid read from the API server), so the garbage collector
removes them with it. Labels and ownerReferences others put on the objects (the worker's
``gpustack.ai/managed`` mark) are kept: only our own label keys are set or removed.

When (:class:`Publisher`): each ``publish_*`` call compares what it would write with what it last
wrote and makes no API call at all when they are equal (``force=True`` re-reads and repairs, for a
periodic resync). Otherwise it reads the object, creates it when absent, else updates it with the
``resourceVersion`` it read -- only the parts that differ (metadata/spec, then status) -- and on 409
Conflict re-reads and tries again (:data:`CONFLICT_RETRIES` times). Any other API error, or conflicts
that do not settle, leave the last written state as it was and put that object in backoff (1 s
doubling to 60 s): calls before the backoff ends return ``BACKING_OFF`` without an API call, and the
first call after it retries the newest desired state. Every round trip is bounded by ``timeout``.

Usage (what ``serve``'s loop calls once the first pass may be published -- see docs/publishing.md)::

    from gpustack_operator.kube.publish import Publisher

    publisher = Publisher(api_client, node_name)           # namespace from KUBERNETES_POD_NAMESPACE
    publisher.publish(groups, interfaces, status)           # after each pass and each ledger change
    # groups: list[DevicesGroup] (every manufacturer, carried forward as the loop decides)
    # interfaces: InterfaceInventory | None (the pass's ``result.interfaces``)
    # status: list[DevicesAllocationGroup] (``[*a.status() for a in allocators.values()]``)
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import kubernetes.client

from gpustack_operator.allocator.ledger import DevicesAllocationGroup
from gpustack_operator.discovery.labels import ACCELERATABLE_PREFIX, acceleratable_labels
from gpustack_operator.discovery.network import DeviceInterface, InterfaceInventory, InventoryOk, rdma_labels
from gpustack_operator.kube import crds
from gpustack_operator.kube.rest import CONFLICT, NOT_FOUND, REQUEST_TIMEOUT, KubeRequestError, owner_reference, request
from gpustack_operator.ledger.models import DevicesGroup

log = logging.getLogger(__name__)

NFD_API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_FEATURE_KIND = "NodeFeature"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
NODE_FEATURE_SUFFIX = "-gpustack-device-manager"
DEFAULT_NAMESPACE = "gpustack-system"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
CONFLICT_RETRIES = 3
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0


class Outcome(StrEnum):
    WROTE = "wrote"  # created or updated
    UNCHANGED = "unchanged"  # nothing differed (no API call unless forced)
    FAILED = "failed"  # the API refused or did not answer: kept for a retry after the backoff
    BACKING_OFF = "backing-off"  # an earlier failure's backoff has not ended: no API call


def system_namespace() -> str:
    """``KUBERNETES_POD_NAMESPACE`` (supplement §4.6), default ``gpustack-system``."""
    return os.environ.get("KUBERNETES_POD_NAMESPACE", "").strip() or DEFAULT_NAMESPACE


def node_feature_name(node: str) -> str:
    return f"{node}{NODE_FEATURE_SUFFIX}"


def device_manager_labels(groups: Sequence[DevicesGroup], interfaces: InterfaceInventory | None) -> dict[str, str]:
    """The labels the Device Manager publishes for one detection: the accelerator feature labels and,
    when the network inventory was read, the RDMA labels."""
    labels = acceleratable_labels(groups)
    if isinstance(interfaces, InventoryOk):
        topologies = [a.topology for g in groups for a in g.accelerators]
        labels.update(rdma_labels(interfaces, topologies))
    return dict(sorted(labels.items()))


def flavor_labels(groups: Sequence[DevicesGroup], node: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``Devices`` selector labels: each group's feature key and the Node's os/arch."""
    labels = {f"{ACCELERATABLE_PREFIX}{g.manufacturer}-{g.id}": "true" for g in groups if g.accelerators and g.id}
    node_labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    for key in (OS_LABEL, ARCH_LABEL):
        if isinstance(node_labels.get(key), str):
            labels[key] = node_labels[key]
    return dict(sorted(labels.items()))


def _ours_on_devices(key: str) -> bool:
    return key.startswith(ACCELERATABLE_PREFIX) or key in (OS_LABEL, ARCH_LABEL)


def _ours_on_node_feature(key: str) -> bool:
    return key == NODE_NAME_LABEL


def node_feature_object(node: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The NodeFeature as written (without its ownerReference, added from the Node read)."""
    return {
        "apiVersion": NFD_API_VERSION,
        "kind": NODE_FEATURE_KIND,
        "metadata": {"name": node_feature_name(node), "namespace": namespace, "labels": {NODE_NAME_LABEL: node}},
        "spec": {"features": {"flags": {}, "attributes": {}, "instances": {}}, "labels": dict(sorted(labels.items()))},
    }


def devices_object(
    node: str,
    groups: Sequence[DevicesGroup],
    interfaces: InterfaceInventory | Sequence[DeviceInterface] | None,
    status: Sequence[DevicesAllocationGroup],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The ``Devices`` object as written (without its ownerReference)."""
    listed: list[DeviceInterface] | None
    if isinstance(interfaces, InventoryOk):
        listed = list(interfaces.interfaces)
    elif interfaces is None or not isinstance(interfaces, Sequence):
        listed = None  # not read (or the enumeration failed): absent, no claim
    else:
        listed = list(interfaces)
    spec = crds.DevicesSpec(groups=list(groups), interfaces=listed)
    schema = _devices_schema()
    return {
        "apiVersion": crds.API_VERSION,
        "kind": crds.KIND,
        "metadata": {"name": node, "labels": dict(labels)},
        "spec": crds.without_empty_strings(spec.wire(), schema["properties"]["spec"]),
        "status": crds.without_empty_strings(
            crds.DevicesStatus(groups=list(status)).wire(), schema["properties"]["status"]
        ),
    }


@functools.cache
def _devices_schema() -> dict[str, Any]:
    """The ``Devices`` CRD's schema, generated once per process."""
    return crds.openapi_schema()


@dataclass
class _Tracked:
    """One published object: what was last written, the failure backoff."""

    last: dict[str, Any] | None = None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass(frozen=True)
class _Kind:
    collection: str  # the collection path
    status: bool  # has the status subresource
    ours: Callable[[str], bool]  # our label keys


def _merge_metadata(current: Mapping[str, Any], desired: Mapping[str, Any], kind: _Kind) -> dict[str, Any]:
    """``current``'s metadata with our labels set (ours no longer wanted removed) and the Node's
    ownerReference present (a reference to an earlier Node of the same name replaced)."""
    meta = dict(current.get("metadata") or {})
    want = desired.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not kind.ours(k)}
    labels.update(want.get("labels") or {})
    meta["labels"] = dict(sorted(labels.items()))
    refs = [dict(r) for r in (meta.get("ownerReferences") or [])]
    for ref in want.get("ownerReferences") or []:
        refs = [r for r in refs if not (r.get("kind") == ref["kind"] and r.get("name") == ref["name"])]
        refs.append(dict(ref))
    if refs:
        meta["ownerReferences"] = refs
    return meta


class Publisher:
    """Writes one node's NodeFeature and ``Devices`` (see the module docstring)."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        node: str,
        *,
        namespace: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not node:
            raise ValueError("the node name is empty: pass --node-name or set KUBERNETES_NODE_NAME")
        self.client = client
        self.node = node
        self.namespace = namespace or system_namespace()
        self.timeout = timeout
        self.clock = clock
        self.node_object: dict[str, Any] | None = None
        self._node_feature = _Tracked()
        self._devices = _Tracked()
        ns = quote(self.namespace, safe="")
        self._nf_kind = _Kind(f"/apis/{NFD_API_VERSION}/namespaces/{ns}/nodefeatures", False, _ours_on_node_feature)
        self._dev_kind = _Kind(f"/apis/{crds.API_VERSION}/{crds.PLURAL}", True, _ours_on_devices)

    # -- the API calls --------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        return request(self.client, method, path, body=body, timeout=self.timeout)

    def _read_node(self, force: bool) -> dict[str, Any]:
        if self.node_object is None or force:
            self.node_object = self._call("GET", f"/api/v1/nodes/{quote(self.node, safe='')}")
        return self.node_object

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", path)
        except KubeRequestError as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def _apply(self, kind: _Kind, desired: dict[str, Any]) -> bool:
        """Create or update one object to ``desired``; ``True`` when something was written. Raises
        :class:`KubeRequestError` (a conflict that does not settle included)."""
        name = desired["metadata"]["name"]
        path = f"{kind.collection}/{quote(name, safe='')}"
        wrote = False
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self._get(path)
                if current is None:
                    body = {k: v for k, v in desired.items() if k != "status" or not kind.status}
                    current = self._call("POST", kind.collection, body)
                    wrote = True
                else:
                    merged = dict(current)
                    merged["metadata"] = _merge_metadata(current, desired, kind)
                    merged["spec"] = desired["spec"]
                    if merged["metadata"] != current.get("metadata") or merged["spec"] != current.get("spec"):
                        current = self._call("PUT", path, merged)
                        wrote = True
                if kind.status and desired.get("status") != current.get("status"):
                    body = dict(current)
                    body["status"] = desired["status"]
                    self._call("PUT", f"{path}/status", body)
                    wrote = True
                return wrote
            except KubeRequestError as exc:
                if exc.status != CONFLICT:
                    raise
                log.info("%s %s: conflict, reading it again (%s)", desired["kind"], name, exc)
        raise KubeRequestError(CONFLICT, f"{desired['kind']} {name}: still conflicting after {CONFLICT_RETRIES} tries")

    def _publish(
        self, tracked: _Tracked, kind: _Kind, build: Callable[[dict[str, Any]], dict[str, Any]], force: bool
    ) -> Outcome:
        now = self.clock()
        if tracked.failures and now < tracked.retry_at and not force:
            return Outcome.BACKING_OFF
        try:
            node = self._read_node(force or tracked.failures > 0)
            desired = build(node)
            desired["metadata"]["ownerReferences"] = [owner_reference(node)]
            if tracked.last == desired and not force:
                return Outcome.UNCHANGED
            wrote = self._apply(kind, desired)
        except KubeRequestError as exc:
            tracked.failures += 1
            delay = min(BACKOFF_FIRST * 2 ** (tracked.failures - 1), BACKOFF_MAX)
            tracked.retry_at = now + delay
            tracked.last_error = str(exc)
            log.warning("publishing for node %s failed (retrying in %.0f s): %s", self.node, delay, exc)
            return Outcome.FAILED
        tracked.last = desired
        tracked.failures, tracked.retry_at, tracked.last_error = 0, 0.0, ""
        return Outcome.WROTE if wrote else Outcome.UNCHANGED

    # -- what serve calls --------------------------------------------------------------------------

    def publish_node_feature(self, labels: Mapping[str, str], *, force: bool = False) -> Outcome:
        """The NodeFeature with ``labels`` as its ``spec.labels``."""
        wanted = dict(labels)
        return self._publish(
            self._node_feature,
            self._nf_kind,
            lambda _node: node_feature_object(self.node, self.namespace, wanted),
            force,
        )

    def publish_devices(
        self,
        groups: Sequence[DevicesGroup],
        interfaces: InterfaceInventory | Sequence[DeviceInterface] | None,
        status: Sequence[DevicesAllocationGroup],
        *,
        force: bool = False,
    ) -> Outcome:
        """The ``Devices`` object: spec from the detection, status from the ledger."""
        groups, status = list(groups), list(status)
        return self._publish(
            self._devices,
            self._dev_kind,
            lambda node: devices_object(self.node, groups, interfaces, status, flavor_labels(groups, node)),
            force,
        )

    def publish(
        self,
        groups: Sequence[DevicesGroup],
        interfaces: InterfaceInventory | None,
        status: Iterable[DevicesAllocationGroup],
        *,
        force: bool = False,
    ) -> tuple[Outcome, Outcome]:
        """Both objects for one state (NodeFeature, then Devices)."""
        listed = list(groups)
        return (
            self.publish_node_feature(device_manager_labels(listed, interfaces), force=force),
            self.publish_devices(listed, interfaces, list(status), force=force),
        )

    @property
    def errors(self) -> dict[str, str]:
        """The last failure of each object still failing (for /readyz and the logs)."""
        out = {}
        if self._node_feature.failures:
            out["nodefeature"] = self._node_feature.last_error
        if self._devices.failures:
            out["devices"] = self._devices.last_error
        return out


__all__ = [
    "DEFAULT_NAMESPACE",
    "NODE_NAME_LABEL",
    "Outcome",
    "Publisher",
    "device_manager_labels",
    "devices_object",
    "flavor_labels",
    "node_feature_name",
    "node_feature_object",
]
