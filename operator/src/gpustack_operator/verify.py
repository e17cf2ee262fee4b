"""``verify`` (issue 19): the host's view of a node against the cluster's, as a list of differences.

Pure: the host's view is the detection document ``accelerator_facts`` returns (``dm detect``'s facts:
``node.labels``, ``groups``, ``manufacturers``), the cluster's a
:class:`~gpustack_operator.kube.clusterview.ClusterView` read from the API server; :func:`compare`
returns one :class:`Difference` per thing an operator can act on, each one line. An empty list is a
node whose cluster view agrees with its host.

What is compared (the manufacturers the host was asked about and could measure; an ``unmeasured`` one is
itself a difference -- its absence from the cluster could not be told from drift):

* **labels** -- the Device Manager's own labels (``acceleratable.feature.gpustack.ai/*`` and
  ``feature.gpustack.ai/*``, never NFD's predictions nor NFD's ``acceleratable: "false"``) the host's
  detection gives against the NodeFeature ``${NODE}-gpustack-device-manager``'s ``spec.labels``
  (``kube/publish.py``): the driver/runtime versions worded as such ("nvidia driver 550.54.15 on the
  host, 535.104.05 in the NodeFeature labels"), a label missing, or one the host no longer gives;
* **accelerators** -- the ids on the host against the ``Devices`` spec groups ("GPU-x is on the host but
  not in Devices", "Devices advertises GPU-y the host no longer has"), each group's driver version, and
  the ``Devices`` status (the ledger) tracking an accelerator the host no longer has;
* **allocatable** -- each manufacturer's exclusive resource (``nvidia.com/gpu``) on the Node against the
  host's accelerators the kubelet would count (healthy, not in a partitioning mode -- spec "The
  device-plugin allocator", ``allocator/resources.py`` ``tokens_per_card``), less those the ledger shows
  held shared or sliced (Unhealthy for the exclusive family while held);
* **the Device Manager** -- a Pod of the manufacturer's DaemonSet ``gpustack-operator-device-manager-<m>``
  running and ready on a node where the host has that manufacturer's accelerators.

A part of the cluster that could not be read is one difference naming it (its comparisons are skipped);
a Node, NodeFeature or ``Devices`` absent is one difference when the host has accelerators.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gpustack_operator.discovery.labels import ACCELERATABLE_PREFIX, FEATURE_PREFIX, NODE_ACCELERATABLE
from gpustack_operator.kube.clusterview import DAEMONSET_PREFIX, ClusterView, DevicePod
from gpustack_operator.manufacturers import REGISTRY

NODE_FEATURE = "NodeFeature labels"
HELD_OTHERWISE = frozenset({"shared", "sliced"})  # ledger modes that take a card out of the exclusive pool
_MANUFACTURER = re.compile(r"[a-z0-9]+")
_VERSION_KEYS = {".driver-version": "driver", ".runtime-version": "runtime"}
# The order a node's differences are listed in, the most telling first (the console shows the first):
# a card gone says more than the count label and the allocatable it also moves.
ORDER = ("unread", "absent", "unmeasured", "accelerator", "driver", "device-manager", "allocatable", "label")


def said(value: object, limit: int = 200) -> str:
    """A value from the host or the cluster as it goes into a line: control characters escaped (a
    hand-edited object's newline never splits a difference in two), cut at ``limit`` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value)[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FactsError(ValueError):
    """The host facts are not a detection document (one line saying what is wrong)."""


@dataclass(frozen=True)
class Difference:
    """One way the cluster's view disagrees with the host's. ``kind``: ``unread``, ``absent``,
    ``unmeasured``, ``label``, ``driver``, ``accelerator``, ``allocatable``, ``device-manager``."""

    kind: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class HostCard:
    id: str
    manufacturer: str
    group: str
    healthy: bool
    partitioning: bool


@dataclass(frozen=True)
class HostView:
    """The parts of the facts document verify compares."""

    labels: dict[str, str]  # the Device Manager's own labels
    manufacturers: dict[str, str]  # asked about -> state
    unmeasured: dict[str, str]  # manufacturer -> reason
    cards: list[HostCard]
    drivers: dict[tuple[str, str], str]  # (manufacturer, group) -> driver version

    def compared(self, manufacturer: str) -> bool:
        """Asked about and measured (its cluster state is comparable)."""
        return manufacturer in self.manufacturers and manufacturer not in self.unmeasured


# -- reading the facts ---------------------------------------------------------------------------------


def device_manager_label(key: str, value: str) -> bool:
    """Is this label the Device Manager's own (what its NodeFeature carries)? NFD's ``acceleratable:
    "false"`` prediction for a node without accelerators is not."""
    if key == NODE_ACCELERATABLE:
        return value == "true"
    return key.startswith((ACCELERATABLE_PREFIX, FEATURE_PREFIX))


def label_manufacturer(key: str) -> str | None:
    """The manufacturer an ``acceleratable.feature.gpustack.ai/<m>...`` label is about, else ``None``
    (a node-wide label: ``feature.gpustack.ai/acceleratable``, the RDMA labels)."""
    if not key.startswith(ACCELERATABLE_PREFIX):
        return None
    match = _MANUFACTURER.match(key[len(ACCELERATABLE_PREFIX) :])
    return match.group(0) if match else None


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FactsError(f"{where} is not a mapping (it is {type(value).__name__})")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise FactsError(f"{where} is not a list (it is {type(value).__name__})")
    return value


def host_view(facts: Any) -> HostView:
    """The facts document (``accelerator_facts``' ``gpustack_accelerators``) as a :class:`HostView`.
    Raises :class:`FactsError` naming the first part that is not what the detection returns."""
    doc = _mapping(facts, "the host facts")
    node = _mapping(doc.get("node"), "the host facts' node")
    labels = _mapping(node.get("labels") or {}, "node.labels")
    manufacturers = _mapping(doc.get("manufacturers"), "the host facts' manufacturers")
    unmeasured = _mapping(node.get("unmeasured") or {}, "node.unmeasured")
    cards: list[HostCard] = []
    drivers: dict[tuple[str, str], str] = {}
    for i, raw in enumerate(_list(doc.get("groups"), "the host facts' groups")):
        group = _mapping(raw, f"groups[{i}]")
        maker, gid = str(group.get("manufacturer") or ""), str(group.get("id") or "")
        if group.get("driverVersion"):
            drivers[(maker, gid)] = str(group["driverVersion"])
        for j, card in enumerate(_list(group.get("accelerators") or [], f"groups[{i}].accelerators")):
            card = _mapping(card, f"groups[{i}].accelerators[{j}]")
            status = card.get("status")
            status = status if isinstance(status, Mapping) else {}
            if not card.get("id"):
                raise FactsError(f"groups[{i}].accelerators[{j}] has no id")
            cards.append(
                HostCard(
                    str(card["id"]),
                    maker,
                    gid,
                    healthy=not status.get("unhealthy"),
                    partitioning=status.get("physicalSliced") is not None,
                )
            )
    states = {str(k): str(_mapping(v, f"manufacturers.{k}").get("state") or "") for k, v in manufacturers.items()}
    return HostView(
        labels={str(k): str(v) for k, v in labels.items() if device_manager_label(str(k), str(v))},
        manufacturers=states,
        unmeasured={str(k): str(v) for k, v in unmeasured.items()},
        cards=cards,
        drivers=drivers,
    )


# -- the comparisons -------------------------------------------------------------------------------------


def _count(cards: Iterable[HostCard], manufacturer: str | None = None) -> int:
    return sum(1 for c in cards if manufacturer is None or c.manufacturer == manufacturer)


def _label_in_scope(host: HostView, key: str) -> bool:
    maker = label_manufacturer(key)
    return maker is None or host.compared(maker)


def compare_labels(host: HostView, cluster: Mapping[str, str]) -> list[Difference]:
    """The Device Manager's labels: the host's detection against the NodeFeature's ``spec.labels``."""
    out: list[Difference] = []
    wanted = {k: v for k, v in host.labels.items() if _label_in_scope(host, k)}
    have = {k: v for k, v in cluster.items() if device_manager_label(k, v) and _label_in_scope(host, k)}
    for key in sorted(set(wanted) | set(have)):
        mine, theirs = wanted.get(key), have.get(key)
        if mine == theirs:
            continue
        version = next((w for s, w in _VERSION_KEYS.items() if key.endswith(s)), None)
        k, a, b = said(key), said(mine), said(theirs)
        if version and mine is not None and theirs is not None:
            maker = label_manufacturer(key) or "?"
            out.append(Difference("driver", f"{maker} {version} {a} on the host, {b} in the {NODE_FEATURE}"))
        elif theirs is None:
            out.append(Difference("label", f"label {k}={a} on the host is missing from the {NODE_FEATURE}"))
        elif mine is None:
            out.append(Difference("label", f"the {NODE_FEATURE} carry {k}={b}, which the host no longer gives"))
        else:
            out.append(Difference("label", f"label {k} is {a} on the host, {b} in the {NODE_FEATURE}"))
    return out


def _cards(group: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A cluster group's accelerators that are objects (a hand-edited object may carry anything)."""
    cards = group.get("accelerators")
    return [c for c in cards if isinstance(c, Mapping)] if isinstance(cards, list) else []


def _cluster_cards(groups: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Accelerator id -> (manufacturer, group) over ``Devices`` spec or status groups."""
    out: dict[str, tuple[str, str]] = {}
    for group in groups:
        maker, gid = str(group.get("manufacturer") or ""), str(group.get("id") or "")
        for card in _cards(group):
            if card.get("id"):
                out[str(card["id"])] = (maker, gid)
    return out


def compare_devices(
    host: HostView, spec: list[dict[str, Any]], status: list[dict[str, Any]] | None
) -> list[Difference]:
    """The accelerators (and each group's driver version) on the host against the ``Devices`` spec
    groups, and the ``Devices`` status tracking accelerators the host no longer has."""
    out: list[Difference] = []
    mine = {c.id: c for c in host.cards if host.compared(c.manufacturer)}
    theirs = {k: v for k, v in _cluster_cards(spec).items() if host.compared(v[0])}
    for card_id in sorted(set(mine) - set(theirs)):
        card = mine[card_id]
        out.append(
            Difference(
                "accelerator",
                f"{said(card_id)} ({said(card.manufacturer)} {said(card.group)}) is on the host but not in Devices",
            )
        )
    for card_id in sorted(set(theirs) - set(mine)):
        maker, gid = theirs[card_id]
        out.append(
            Difference(
                "accelerator", f"Devices advertises {said(card_id)} ({said(maker)} {said(gid)}) the host no longer has"
            )
        )
    for group in spec:
        key = (str(group.get("manufacturer") or ""), str(group.get("id") or ""))
        driver = group.get("driverVersion")
        if key in host.drivers and host.compared(key[0]) and driver and str(driver) != host.drivers[key]:
            out.append(
                Difference(
                    "driver",
                    f"{said(key[0])} {said(key[1])} driver {said(host.drivers[key])} on the host, "
                    f"{said(driver)} in Devices",
                )
            )
    tracked = {k: v for k, v in _cluster_cards(status or []).items() if host.compared(v[0])}
    for card_id in sorted(set(tracked) - set(mine) - set(theirs)):
        maker, gid = tracked[card_id]
        out.append(
            Difference(
                "accelerator",
                f"the Devices status tracks {said(card_id)} ({said(maker)} {said(gid)}) the host no longer has",
            )
        )
    return out


def resource_name(manufacturer: str, overrides: Mapping[str, str] | None = None) -> str:
    """The manufacturer's exclusive resource: ``overrides`` (the node's
    ``GPUSTACK_<M>_ACCELERATABLE_RESOURCE_NAME``, supplement §4.4), else the registry's default."""
    if overrides and overrides.get(manufacturer):
        return overrides[manufacturer]
    return REGISTRY[manufacturer].identity.resource_name if manufacturer in REGISTRY else f"{manufacturer}/unknown"


def _quantity(text: str) -> Decimal | None:
    suffixes = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(k|M|G|Ki|Mi|Gi)?", text.strip()) if len(text) <= 64 else None
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * suffixes[match.group(2) or ""]
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        return None


def compare_allocatable(
    host: HostView,
    allocatable: Mapping[str, str],
    status: list[dict[str, Any]] | None,
    overrides: Mapping[str, str] | None = None,
) -> list[Difference]:
    """Each compared manufacturer's exclusive resource on the Node against what the host's cards give."""
    held = {
        str(card.get("id"))
        for group in status or ()
        for card in _cards(group)
        if str(card.get("mode") or "") in HELD_OTHERWISE
    }
    out: list[Difference] = []
    for maker in sorted(host.manufacturers):
        if not host.compared(maker):
            continue
        name = resource_name(maker, overrides)
        usable = [c for c in host.cards if c.manufacturer == maker and c.healthy and not c.partitioning]
        expected = sum(1 for c in usable if c.id not in held)
        others = len(usable) - expected
        held_note = f" ({others} of its {len(usable)} held shared or sliced)" if others else ""
        raw = allocatable.get(name)
        if raw is None:
            if expected:
                out.append(Difference("allocatable", f"allocatable has no {name}, the host has {expected}{held_note}"))
            continue
        value = _quantity(raw)
        if value is None:
            out.append(Difference("allocatable", f"allocatable {name} {said(repr(raw))} is not a quantity"))
        elif value != expected:
            out.append(Difference("allocatable", f"allocatable {name} {said(raw)}, the host has {expected}{held_note}"))
    return out


def compare_pods(host: HostView, pods: list[DevicePod]) -> list[Difference]:
    """A running, ready Device Manager Pod for each manufacturer the host has accelerators of."""
    out: list[Difference] = []
    for maker in sorted({c.manufacturer for c in host.cards if host.compared(c.manufacturer)}):
        daemonset = DAEMONSET_PREFIX + maker
        mine = [p for p in pods if p.manufacturer == maker or p.daemonset == daemonset]
        count = _count(host.cards, maker)
        if not mine:
            out.append(
                Difference(
                    "device-manager",
                    f"no device-manager pod (DaemonSet {daemonset}) on a node with {count} {maker} accelerators",
                )
            )
        elif not any(p.phase == "Running" and p.ready for p in mine):
            words = ", ".join(
                f"{said(p.namespace)}/{said(p.name)} is {said(p.phase)}{'' if p.ready else ', not ready'}" for p in mine
            )
            out.append(Difference("device-manager", f"the device-manager pod is not serving: {words}"))
    return out


def compare(facts: Any, cluster: ClusterView, overrides: Mapping[str, str] | None = None) -> list[Difference]:
    """Every difference between the host's facts and the cluster's view of the node (the module
    docstring); ``[]`` when they agree. Raises :class:`FactsError` when ``facts`` is no detection document.
    ``overrides``: manufacturer -> exclusive resource name, where the node overrides it."""
    host = host_view(facts)
    out: list[Difference] = []
    for part, error in cluster.errors.items():  # in the order read: Node, NodeFeature, Devices, Pods
        out.append(
            Difference("unread", f"the {part} of node {said(cluster.node)} could not be read: {said(error, 400)}")
        )
    for maker, reason in sorted(host.unmeasured.items()):
        if maker in host.manufacturers:
            out.append(
                Difference(
                    "unmeasured", f"{said(maker)} could not be measured on the host ({said(reason)}): not compared"
                )
            )
    cards = _count(c for c in host.cards if host.compared(c.manufacturer))
    if "Node" in cluster.absent:
        out.append(Difference("absent", f"node {cluster.node} is not in the cluster (no Node object)"))
    if "NodeFeature" in cluster.absent and cards:
        out.append(
            Difference(
                "absent", f"no NodeFeature {cluster.node}-gpustack-device-manager for a node with {cards} accelerators"
            )
        )
    if "Devices" in cluster.absent and cards:
        out.append(Difference("absent", f"no Devices {cluster.node} for a node with {cards} accelerators"))
    if cluster.node_feature_labels is not None:
        out += compare_labels(host, cluster.node_feature_labels)
    if cluster.devices_groups is not None:
        out += compare_devices(host, cluster.devices_groups, cluster.devices_status)
    if cluster.allocatable is not None:
        out += compare_allocatable(host, cluster.allocatable, cluster.devices_status, overrides)
    if cluster.pods is not None and "Node" not in cluster.absent:
        out += compare_pods(host, cluster.pods)
    return sorted(out, key=lambda d: ORDER.index(d.kind))  # stable: each kind keeps its own order


def agreeing_view(facts: Any, node: str, overrides: Mapping[str, str] | None = None) -> ClusterView:
    """The cluster view that agrees with ``facts`` (what the Device Manager and the kubelet would have
    published for them): :func:`compare` of the two is ``[]``. For tests and for seeding a stand-in."""
    host = host_view(facts)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for card in host.cards:
        group = groups.setdefault(
            (card.manufacturer, card.group), {"id": card.group, "manufacturer": card.manufacturer, "accelerators": []}
        )
        if (card.manufacturer, card.group) in host.drivers:
            group["driverVersion"] = host.drivers[(card.manufacturer, card.group)]
        group["accelerators"].append({"id": card.id})
    allocatable = {
        resource_name(m, overrides): str(
            sum(1 for c in host.cards if c.manufacturer == m and c.healthy and not c.partitioning)
        )
        for m in sorted(host.manufacturers)
        if host.compared(m)
    }
    pods = [
        DevicePod(f"{DAEMONSET_PREFIX}{m}-x", "gpustack-system", DAEMONSET_PREFIX + m, "Running", True, m)
        for m in sorted({c.manufacturer for c in host.cards})
    ]
    return ClusterView(
        node,
        node_labels={},
        allocatable=allocatable,
        node_feature_labels=dict(host.labels),
        devices_groups=list(groups.values()),
        devices_status=[],
        pods=pods,
    )


__all__ = [
    "Difference",
    "FactsError",
    "HostView",
    "agreeing_view",
    "compare",
    "device_manager_label",
    "host_view",
    "label_manufacturer",
    "resource_name",
]
