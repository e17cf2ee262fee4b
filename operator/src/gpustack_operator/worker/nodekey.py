"""Controller (a): the general (CPU) node key, published on the worker's NodeFeature.

From a Node's NFD labels (``feature.node.kubernetes.io/cpu-model.vendor_id`` / ``.family`` / ``.id``)
and the ``gpustack-cpu-info`` rule's ``feature.gpustack.ai/cpu-name`` annotation, the key is computed
by :func:`gpustack_operator.node.cpu.general_node_key` -- the one function detection uses
(``detect``'s ``generalNodeKey``), so the worker and the host never disagree on a node's key.

Published (reference rules §1, ``ConstructNodeCapacityLabels``) on the NodeFeature
``<node>-gpustack-worker`` in the system namespace, labelled ``nfd.node.kubernetes.io/node-name``
and owned by the Node (garbage-collected with it)::

    gpustack.ai/managed: <the Node's own value; else "true" unless manual node management is on>
    general.feature.gpustack.ai/<cpuManufacturer>: "true"
    general.feature.gpustack.ai/<key>: "true"
    general.feature.gpustack.ai/<key>.count: <the Node's CPU capacity, whole cores>

The managed mark: a Node carrying ``gpustack.ai/managed`` (any value) has it echoed; otherwise it is
``"true"`` while manual node management is off (``GPUSTACK_NODE_MANAGEMENT_MANUAL`` unset or false,
read once at worker start and passed in) and absent while it is on. NFD puts the NodeFeature's labels
on the Node, so an auto-marked Node then carries ``"true"`` itself (echoed from then on), and
controller (b) (``managed.py``) copies it onto the Node's ``Devices``.

Written only on change: the object last written per node is remembered and a Node event that leaves
the labels as they were makes no API call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpustack_operator.discovery.labels import FEATURE_PREFIX, NFD_PREFIX
from gpustack_operator.kube.apply import NFD_API_VERSION, apply, node_features_collection
from gpustack_operator.kube.rest import owner_reference
from gpustack_operator.node.cpu import general_node_key
from gpustack_operator.worker.managed import MANAGED

if TYPE_CHECKING:  # the client is imported by gpustack_operator.kube alone
    import kubernetes.client

log = logging.getLogger(__name__)

GENERAL_PREFIX = "general." + FEATURE_PREFIX
NODE_FEATURE_SUFFIX = "-gpustack-worker"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
CPU_NAME_ANNOTATION = FEATURE_PREFIX + "cpu-name"
CPU_MODEL_LABELS = tuple(f"{NFD_PREFIX}cpu-model.{part}" for part in ("vendor_id", "family", "id"))


def _strings(obj: Mapping[str, Any], key: str) -> dict[str, str]:
    meta = obj.get("metadata")
    found = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str)}


def node_key(node: Mapping[str, Any]) -> str:
    """The Node's general node key from its NFD labels and annotations."""
    labels = _strings(node, "labels")
    annotations = _strings(node, "annotations")
    vendor_id, family, model_id = (labels.get(key) for key in CPU_MODEL_LABELS)
    return general_node_key(vendor_id, family, model_id, annotations.get(CPU_NAME_ANNOTATION))


def _cpu_count(node: Mapping[str, Any]) -> int | None:
    """The Node's CPU capacity in whole cores (``"8"`` or ``"8000m"``); ``None`` when unreadable."""
    status = node.get("status")
    capacity = status.get("capacity") if isinstance(status, Mapping) else None
    value = capacity.get("cpu") if isinstance(capacity, Mapping) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith("m") and text[:-1].isdigit():
        return int(text[:-1]) // 1000
    return int(text) if text.isdigit() else None


def managed_mark(node: Mapping[str, Any], *, manual: bool) -> str | None:
    """The ``gpustack.ai/managed`` value published for ``node``: the Node's own, else ``"true"``
    unless manual node management is on (then none)."""
    own = _strings(node, "labels").get(MANAGED)
    if own is not None:
        return own
    return None if manual else "true"


def worker_labels(node: Mapping[str, Any], *, manual: bool = False) -> dict[str, str]:
    """The labels the worker publishes for one Node (see the module docstring); ``manual``:
    ``GPUSTACK_NODE_MANAGEMENT_MANUAL``."""
    labels = _strings(node, "labels")
    key = node_key(node)
    manufacturer = general_node_key(labels.get(CPU_MODEL_LABELS[0]), None, None, None)
    out = {f"{GENERAL_PREFIX}{manufacturer}": "true", f"{GENERAL_PREFIX}{key}": "true"}
    mark = managed_mark(node, manual=manual)
    if mark is not None:
        out[MANAGED] = mark
    count = _cpu_count(node)
    if count is not None:
        out[f"{GENERAL_PREFIX}{key}.count"] = str(count)
    return dict(sorted(out.items()))


def node_feature_name(node: str) -> str:
    return f"{node}{NODE_FEATURE_SUFFIX}"


def node_feature(node: Mapping[str, Any], namespace: str, *, manual: bool = False) -> dict[str, Any]:
    """The worker's NodeFeature for ``node`` (a Node as read from the API server)."""
    name = str((node.get("metadata") or {}).get("name", ""))
    return {
        "apiVersion": NFD_API_VERSION,
        "kind": "NodeFeature",
        "metadata": {
            "name": node_feature_name(name),
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: name},
            "ownerReferences": [owner_reference(node)],
        },
        "spec": {
            "features": {"flags": {}, "attributes": {}, "instances": {}},
            "labels": worker_labels(node, manual=manual),
        },
    }


class NodeKeyController:
    """Keeps each Node's worker NodeFeature equal to :func:`node_feature` (written only on change);
    ``manual``: ``GPUSTACK_NODE_MANAGEMENT_MANUAL`` as read at worker start."""

    name = "node-key"

    def __init__(self, client: kubernetes.client.ApiClient, namespace: str, *, manual: bool = False) -> None:
        self.client = client
        self.namespace = namespace
        self.manual = manual
        self.collection = node_features_collection(namespace)
        self._written: dict[str, dict[str, Any]] = {}

    def reconcile(self, name: str, node: dict[str, Any] | None, devices: dict[str, Any] | None) -> None:
        """Raises ``KubeRequestError`` when the write failed (the caller retries)."""
        del devices
        if node is None:
            self._written.pop(name, None)  # the NodeFeature goes with the Node (its ownerReference)
            return
        desired = node_feature(node, self.namespace, manual=self.manual)
        if self._written.get(name) == desired:
            return
        outcome = apply(self.client, self.collection, desired)
        self._written[name] = desired
        if outcome != "unchanged":
            log.info("node %s: NodeFeature %s %s (key %s)", name, desired["metadata"]["name"], outcome, node_key(node))


__all__ = [
    "CPU_MODEL_LABELS",
    "CPU_NAME_ANNOTATION",
    "GENERAL_PREFIX",
    "NodeKeyController",
    "managed_mark",
    "node_feature",
    "node_feature_name",
    "node_key",
    "worker_labels",
]
