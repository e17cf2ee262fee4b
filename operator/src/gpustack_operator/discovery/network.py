"""The network interface inventory and the RDMA link verdicts (supplement §7, §9.1; reference §10).

``Devices.spec.interfaces`` lists every kernel interface, read from ``/sys/class/net``. Interfaces
are enumerated first and each one's device is resolved as an attribute — a PCI-rooted walk would
miss an interface on a non-PCI bus, which reports its ``bus`` with empty PCI fields instead. Virtual
functions are nested under their physical function; the list is sorted by name, the functions by
bus id.

What a failed read may claim is the centre of this module:

* the listing of ``/sys/class/net`` failing, an entry that cannot be classified, a device link that
  is there but will not resolve, or a physical function whose functions cannot be listed ends the
  pass as :class:`InventoryFailed` — the caller keeps the previous list and labels; a partial list
  would publish an absence nobody measured. A pass that succeeds and finds nothing is an empty
  :class:`InventoryOk`;
* an unreadable *attribute* (mtu, NUMA node, ...) only degrades its field to "unknown" (``0``,
  ``""``): that is true, where dropping the interface would not be;
* a link verdict is ``failed`` only when every port of the RDMA device was read and none carries the
  link. Anything unreadable gives ``unverified`` (``failed`` withholds ``rdma.capable``, and a label
  must never be withheld because a file could not be opened).

Every read goes through the host root, is capped at 64 KiB, and is refused when its resolved path
leaves ``/sys`` (the host root already keeps links inside the node's tree; this keeps them inside its
sysfs).
"""

from __future__ import annotations

import errno
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from gpustack_operator.discovery.topology_distance import BusCoordinates, closest_distance
from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.ledger.models import CamelModel, DeviceTopology
from gpustack_operator.node.naming import sanitize_label_value
from gpustack_operator.node.pci import BDF, parse_numa_node

log = logging.getLogger(__name__)

SYSFS = "/sys"
NET_CLASS = "/sys/class/net"
INFINIBAND_CLASS = "/sys/class/infiniband"
DEVICES = "/sys/devices"
VIRTUAL_DEVICES = "/sys/devices/virtual"

IFF_UP = 0x1

RDMA_LABEL_PREFIX = "feature.gpustack.ai/rdma."
RDMA_CAPABLE_LABEL = RDMA_LABEL_PREFIX + "capable"
RDMA_NUMA_LABEL = RDMA_LABEL_PREFIX + "numa"
RDMA_DISTANCE_LABEL = RDMA_LABEL_PREFIX + "distance"
RDMA_NUMA_SEPARATOR = "_"  # a comma is not a label-value character: the sanitizer would drop it

NO_LINK_RECORD = "the inventory carries no link state for this interface"
PORT_ACTIVE = "ACTIVE"
PHYS_LINK_UP = "LinkUp"


# -- the Devices.spec.interfaces models (supplement §9.1) ---------------------------------------


class LinkState(StrEnum):
    """The RDMA link verdict. ``ok`` and ``unverified`` count as usable; ``failed`` does not."""

    OK = "ok"
    UNVERIFIED = "unverified"
    FAILED = "failed"


class DeviceInterfaceLink(CamelModel):
    """One RDMA device's link verdict. ``reason`` is set exactly when the state is not ``ok``;
    ``first_seen_time`` (RFC 3339, UTC) only while ``failed``."""

    state: LinkState
    reason: str | None = None
    first_seen_time: str | None = None


class DeviceInterfaceVirtualFunction(CamelModel):
    """One SR-IOV virtual function of a physical function. ``name`` is empty when the function has
    no net device; ``pci_bus_id`` is always set (it is the function's identity)."""

    name: str = ""
    pci_bus_id: str = ""
    numa_affinity: str = ""
    cpu_affinity: str = ""
    mtu: int = 0
    up: bool = False
    rdma: bool = False
    rdma_device: str = ""
    link: DeviceInterfaceLink | None = None


class DeviceInterface(CamelModel):
    """One kernel network interface (``spec.interfaces[]``, keyed by ``name``).

    ``pci_vendor``/``pci_device`` are the raw sysfs values (``0x15b3``); ``numa_affinity`` ``""`` is
    unknown; ``mtu`` ``0`` is not read; ``sriov`` says the device is an SR-IOV physical function
    (it carries ``sriov_numvfs``), whether or not functions are configured on it."""

    name: str
    bus: str = ""
    pci_bus_id: str = ""
    pci_root_id: str = ""
    pci_switches: list[str] = Field(default_factory=list)
    pci_vendor: str = ""
    pci_device: str = ""
    numa_affinity: str = ""
    cpu_affinity: str = ""
    mtu: int = 0
    up: bool = False
    virtual: bool = False
    rdma: bool = False
    rdma_device: str = ""
    sriov: bool = False
    virtual_functions: list[DeviceInterfaceVirtualFunction] = Field(default_factory=list)
    link: DeviceInterfaceLink | None = None


@dataclass(frozen=True)
class InventoryOk:
    """The enumeration ran. An empty list is a measurement: this node has no interface."""

    interfaces: list[DeviceInterface]

    @property
    def virtual_function_count(self) -> int:
        return sum(len(i.virtual_functions) for i in self.interfaces)


@dataclass(frozen=True)
class InventoryFailed:
    """The enumeration could not run to the end; it claims nothing (the caller keeps the old list
    and the old ``rdma.`` labels)."""

    reason: str


InterfaceInventory = InventoryOk | InventoryFailed


# -- parsers of sysfs values ---------------------------------------------------------------------

_PORT_ENUM = re.compile(r"^([0-9]{1,10}): ?(\S(?:[^\n]*\S)?)$")  # the ordinal is the kernel's "%d"


@dataclass(frozen=True)
class PortEnum:
    """A port attribute as the RDMA core prints it: ``"<ordinal>: <name>"`` (``4: ACTIVE``)."""

    ordinal: int
    name: str


def parse_port_enum(text: str) -> PortEnum | None:
    """``"4: ACTIVE\\n"`` → ``PortEnum(4, "ACTIVE")``; ``None`` when the value is not in the kernel's
    ``"%d: %s"`` form (garbage is a reading that established nothing, like an unreadable file).

    The name is kept whole, so ``5: ACTIVE_DEFER`` never matches ``ACTIVE`` (reference §10); names
    may hold spaces (``7: Phy Test``)."""
    value = text.strip()
    if not value.isascii() or not value.isprintable():
        return None
    match = _PORT_ENUM.match(value)
    if not match:
        return None
    return PortEnum(int(match.group(1)), match.group(2))


def parse_mtu(text: str) -> int:
    """``mtu``: a decimal number; anything else (or a value no int32 holds) is ``0``, "not read"."""
    value = text.strip()
    if not value.isascii() or not value.isdecimal() or len(value) > 10:  # int() refuses 4300+ digits
        return 0
    mtu = int(value)
    return mtu if mtu <= 0x7FFFFFFF else 0


def parse_flags(text: str) -> int | None:
    """``flags``: the interface flags as ``0x1003``; ``None`` when the value is not a hex number."""
    value = text.strip().lower()
    if not value.startswith("0x") or len(value) > 18:
        return None
    digits = value[2:]
    if not digits or any(c not in "0123456789abcdef" for c in digits):
        return None
    return int(digits, 16)


def parse_numa_affinity(text: str | None) -> str:
    """``numa_node`` as the inventory spells it: the node id, or ``""`` for ``-1``, absent or
    garbled (an unknown node is never node 0)."""
    try:
        node = parse_numa_node(text)
    except ValueError:
        return ""
    return "" if node is None else str(node)


def _port_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isascii() and name.isdecimal() and len(name) <= 18 else (1, name)


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- the sysfs reader ------------------------------------------------------------------------------


class _PassFailedError(Exception):
    """Something the record would have to *claim* could not be read; the pass ends."""


@dataclass
class _InfinibandIndex:
    """One listing of ``/sys/class/infiniband``, answering "which RDMA device points back at this
    PCI device?" for every interface of one pass."""

    listed: bool = False
    present_unlisted: bool = False
    by_device: dict[str, str] = field(default_factory=dict)
    unresolvable: bool = False


class _Sysfs:
    """Reads under ``/sys`` of one host root, validating where every path resolves."""

    def __init__(self, host: HostRoot) -> None:
        self.host = host
        self._index: _InfinibandIndex | None = None

    def resolve(self, path: str) -> str:
        canonical = self.host.canonical(path)
        if canonical != SYSFS and not canonical.startswith(SYSFS + "/"):
            raise HostPathError(path, errno.EXDEV, f"resolves to {canonical}, outside {SYSFS}")
        if not self.host.exists(canonical):  # canonical() keeps a dangling link's target as given
            raise HostPathError(path, errno.ENOENT)
        return canonical

    def attr(self, path: str) -> str:
        return self.host.read_text(self.resolve(path)).strip()

    def attr_or_none(self, path: str) -> str | None:
        try:
            return self.attr(path)
        except HostPathError:
            return None

    def listdir(self, path: str) -> list[str]:
        return self.host.listdir(self.resolve(path))

    def present(self, path: str) -> bool:
        """Is the name there (a dangling or looping link counts), without following it?"""
        try:
            return self.host.readlink(path) is not None or self.host.exists(path)
        except HostPathError:
            return False

    # -- one interface ---------------------------------------------------------------------

    def up(self, netdev: str) -> bool:
        """``operstate`` decides when it names a state; ``unknown`` (drivers that do not track it,
        ``lo``) or an unreadable one falls back to ``IFF_UP`` in ``flags``."""
        operstate = self.attr_or_none(f"{netdev}/operstate")
        if operstate not in (None, "unknown"):
            return operstate == "up"
        flags_text = self.attr_or_none(f"{netdev}/flags")
        flags = parse_flags(flags_text) if flags_text is not None else None
        return flags is not None and bool(flags & IFF_UP)

    def mtu(self, netdev: str) -> int:
        text = self.attr_or_none(f"{netdev}/mtu")
        return parse_mtu(text) if text is not None else 0

    def numa(self, device: str) -> str:
        return parse_numa_affinity(self.attr_or_none(f"{device}/numa_node"))

    def interface(self, name: str) -> tuple[DeviceInterface, bool]:
        """One interface's record, and whether it belongs to a virtual function (collected under its
        physical function instead of at the top level)."""
        entry = f"{NET_CLASS}/{name}"
        iface = DeviceInterface(name=name, mtu=self.mtu(entry), up=self.up(entry))
        try:
            canonical = self.resolve(entry)
        except HostPathError:
            return iface, False  # a name with unknown coordinates, never a missing interface
        iface.bus, iface.virtual = _bus_from_path(canonical)
        if iface.virtual:
            # Every path to an RDMA device here starts at a device directory, which a bond, VLAN or
            # veth does not have (software RDMA on a virtual netdev is out of reach of this reader).
            return iface, False
        if not self.present(f"{entry}/device"):
            return iface, False
        try:
            device = self.resolve(f"{entry}/device")
        except HostPathError as exc:
            # rdma: false with no verdict is what a plain NIC reports; claiming it on an unresolvable
            # link would withdraw rdma.capable on a failed read.
            raise _PassFailedError(f"the device of {name} could not be resolved: {exc}") from None
        if self.present(f"{device}/physfn"):
            return iface, True
        subsystem = self._subsystem(device)
        if subsystem:
            iface.bus = subsystem  # what the device is, where the path says only where it sits
        iface.numa_affinity = self.numa(device)
        iface.cpu_affinity = self.attr_or_none(f"{device}/local_cpulist") or ""
        if iface.bus == "pci":
            bus_id = device.rsplit("/", 1)[-1]
            bridges = pci_bridges(device, bus_id)
            iface.pci_bus_id = bus_id
            iface.pci_root_id = bridges[0] if bridges else ""
            iface.pci_switches = list(reversed(bridges))
            iface.pci_vendor = self.attr_or_none(f"{device}/vendor") or ""
            iface.pci_device = self.attr_or_none(f"{device}/device") or ""
        if self.present(f"{device}/sriov_numvfs"):
            # Presence, not the count: a physical function with no functions configured is still
            # one, and an unreadable count must not turn it into "not a PF".
            iface.sriov = True
            iface.virtual_functions = self.virtual_functions(name, device)
        rdma_dir, tried, read_failed = self.rdma_device(device)
        if rdma_dir is not None:
            iface.rdma, iface.rdma_device = True, rdma_dir.rsplit("/", 1)[-1]
            iface.link = self.link(rdma_dir)
        elif read_failed:
            iface.link = _unreadable_tree(tried)
        return iface, False

    def _subsystem(self, device: str) -> str:
        try:
            return self.resolve(f"{device}/subsystem").rsplit("/", 1)[-1]
        except HostPathError:
            return ""

    def virtual_functions(self, name: str, device: str) -> list[DeviceInterfaceVirtualFunction]:
        """The functions behind ``virtfn<N>``, sorted by bus id. A listing or a link that fails ends
        the pass: "a PF with fewer functions" is a claim, and on a node whose RDMA lives on its
        functions it would withdraw ``rdma.capable``."""
        try:
            entries = self.listdir(device)
        except HostPathError as exc:
            raise _PassFailedError(f"the virtual functions of {name} could not be listed: {exc}") from None
        functions = []
        for entry in entries:
            if not (entry.startswith("virtfn") and entry[6:].isdecimal()):
                continue
            try:
                vf_dir = self.resolve(f"{device}/{entry}")
            except HostPathError as exc:
                raise _PassFailedError(f"{entry} of {name} could not be resolved: {exc}") from None
            functions.append(self.virtual_function(vf_dir))
        return sorted(functions, key=lambda vf: vf.pci_bus_id)

    def virtual_function(self, vf_dir: str) -> DeviceInterfaceVirtualFunction:
        vf = DeviceInterfaceVirtualFunction(
            pci_bus_id=vf_dir.rsplit("/", 1)[-1],
            numa_affinity=self.numa(vf_dir),
            cpu_affinity=self.attr_or_none(f"{vf_dir}/local_cpulist") or "",
        )
        try:
            netdevs = self.listdir(f"{vf_dir}/net")
        except HostPathError:
            netdevs = []
        if netdevs:
            vf.name = netdevs[0]
            netdev = f"{vf_dir}/net/{vf.name}"
            vf.mtu, vf.up = self.mtu(netdev), self.up(netdev)
        rdma_dir, tried, read_failed = self.rdma_device(vf_dir)
        if rdma_dir is not None:
            vf.rdma, vf.rdma_device = True, rdma_dir.rsplit("/", 1)[-1]
            vf.link = self.link(rdma_dir)
        elif read_failed:
            vf.link = _unreadable_tree(tried)
        return vf

    # -- RDMA --------------------------------------------------------------------------------

    def rdma_device(self, device: str) -> tuple[str | None, list[str], bool]:
        """The RDMA device bound to a device directory: ``(its directory, the layouts tried, whether
        a tree was present and could not be read)``. Two layouts: ``<device>/infiniband/<ibdev>``,
        then ``/sys/class/infiniband/*/device`` pointing back at the device."""
        under = f"{device}/infiniband"
        tried = [under]
        read_failed = False
        try:
            names = self.listdir(under)
        except HostPathError:
            names = []
            read_failed = self.present(under)
        if names:
            return f"{under}/{names[0]}", tried, False
        tried.append(INFINIBAND_CLASS)
        index = self.infiniband_index()
        if index.present_unlisted:
            read_failed = True
        elif index.listed:
            match = index.by_device.get(device)
            if match is not None:
                return match, tried, False
            if index.unresolvable:
                read_failed = True  # the entry that would not resolve may have been this one
        return None, tried, read_failed

    def infiniband_index(self) -> _InfinibandIndex:
        if self._index is not None:
            return self._index
        index = _InfinibandIndex()
        try:
            names = self.listdir(INFINIBAND_CLASS)
        except HostPathError:
            index.present_unlisted = self.present(INFINIBAND_CLASS)
            names = []
        else:
            index.listed = True
        for ibdev in names:
            entry = f"{INFINIBAND_CLASS}/{ibdev}"
            try:
                owner = self.resolve(f"{entry}/device")
                directory = self.resolve(entry)
            except HostPathError:
                index.unresolvable = True
                continue
            index.by_device.setdefault(owner, directory)
        self._index = index
        return index

    def link(self, rdma_dir: str) -> DeviceInterfaceLink:
        """The verdict over every port of one RDMA device (reference §10)."""
        ports_dir = f"{rdma_dir}/ports"
        try:
            ports = self.listdir(ports_dir)
        except HostPathError:
            ports = []
        return judge_ports(ports_dir, [(port, self.port(f"{ports_dir}/{port}")) for port in ports])

    def port(self, port_dir: str) -> tuple[PortEnum, PortEnum] | str:
        """Both attributes of one port, or why they could not be established."""
        values: list[PortEnum] = []
        for attribute in ("state", "phys_state"):
            try:
                text = self.attr(f"{port_dir}/{attribute}")
            except HostPathError as exc:
                return f"{attribute}: {exc.strerror}"
            parsed = parse_port_enum(text)
            if parsed is None:
                return f"{attribute} holds {json.dumps(text[:40])}, not a port state"
            values.append(parsed)
        return values[0], values[1]


PortReading = tuple[PortEnum, PortEnum] | str  # (state, phys_state), or why it was not established


def judge_ports(ports_dir: str, readings: Sequence[tuple[str, PortReading]]) -> DeviceInterfaceLink:
    """The link verdict from each port's reading (reference §10).

    ``ok`` when some port is ``ACTIVE`` with its physical link ``LinkUp`` (whole names: an
    ``ACTIVE_DEFER`` port is not carrying traffic); ``failed`` only when every port was read and
    none qualifies, with each port's values verbatim, ports in sorted order; anything unreadable —
    a port, or no port at all — leaves it ``unverified``."""
    observed: list[str] = []
    unreadable: list[str] = []
    for port, reading in sorted(readings, key=lambda r: _port_key(r[0])):
        if isinstance(reading, str):
            unreadable.append(f"port {port} ({reading})")
            continue
        state, phys_state = reading
        if state.name == PORT_ACTIVE and phys_state.name == PHYS_LINK_UP:
            return DeviceInterfaceLink(state=LinkState.OK)
        observed.append(
            f"port {port}: state={_quote(f'{state.ordinal}: {state.name}')} "
            f"phys_state={_quote(f'{phys_state.ordinal}: {phys_state.name}')}"
        )
    if not observed:
        detail = f": {'; '.join(unreadable)}" if unreadable else ""
        return DeviceInterfaceLink(
            state=LinkState.UNVERIFIED,
            reason=f"the RDMA port state could not be read under {_quote(ports_dir)}{detail}",
        )
    if unreadable:
        return DeviceInterfaceLink(
            state=LinkState.UNVERIFIED,
            reason=(f"the RDMA link could not be verified: {'; '.join(observed)}; unreadable: {', '.join(unreadable)}"),
        )
    return DeviceInterfaceLink(state=LinkState.FAILED, reason="the RDMA link is not usable: " + "; ".join(observed))


def _unreadable_tree(tried: Iterable[str]) -> DeviceInterfaceLink:
    return DeviceInterfaceLink(
        state=LinkState.UNVERIFIED,
        reason="the RDMA tree is present but could not be read; tried " + ", ".join(tried),
    )


def _bus_from_path(canonical: str) -> tuple[str, bool]:
    """``(bus, virtual)`` from where an interface sits in ``/sys/devices``."""
    if canonical.startswith(VIRTUAL_DEVICES + "/"):
        return "virtual", True
    if not canonical.startswith(DEVICES + "/"):
        return "", False
    segment = canonical[len(DEVICES) + 1 :].split("/", 1)[0]
    return ("pci" if segment.startswith("pci") else segment), False


def pci_bridges(canonical: str, bus_id: str) -> list[str]:
    """The PCI bridges above a device, outermost first, from its resolved sysfs path (the same rule
    the PCI scan applies to accelerators, so the two sides' coordinates compare equal)."""
    parts = [p for p in canonical.split("/") if BDF.match(p)]
    if parts and parts[-1] == bus_id:
        parts = parts[:-1]
    return parts


# -- the pass ------------------------------------------------------------------------------------


def read_interfaces(
    host: HostRoot,
    previous: Sequence[DeviceInterface] | None = None,
    now: datetime | None = None,
) -> InterfaceInventory:
    """Enumerate ``/sys/class/net`` on ``host`` (supplement §7.1).

    ``previous`` is the inventory last published, from which each ``failed`` link's first-seen time
    is carried while the failure persists; ``None`` (nothing published yet) stamps every failure
    with ``now``."""
    sysfs = _Sysfs(host)
    try:
        entries = sysfs.listdir(NET_CLASS)
    except HostPathError as exc:
        return _failed(f"{NET_CLASS} could not be listed: {exc}")
    interfaces: list[DeviceInterface] = []
    try:
        for name in entries:
            if not _is_interface(sysfs, name):
                continue
            iface, is_vf = sysfs.interface(name)
            if not is_vf:
                interfaces.append(iface)
    except _PassFailedError as exc:
        return _failed(str(exc))
    interfaces.sort(key=lambda i: i.name)
    return InventoryOk(carry_link_first_seen(previous, interfaces, now or datetime.now(UTC)))


def _is_interface(sysfs: _Sysfs, name: str) -> bool:
    """A ``/sys/class/net`` entry that is a directory. A proven non-directory (``bonding_masters``)
    or an entry gone since the listing is skipped; one that cannot be classified ends the pass."""
    try:
        sysfs.listdir(f"{NET_CLASS}/{name}")
    except HostPathError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ENOENT):
            return False
        raise _PassFailedError(f"the {NET_CLASS} entry {name} could not be classified: {exc}") from None
    return True


def _failed(reason: str) -> InventoryFailed:
    log.error("the network interface inventory was not taken: %s", reason)
    return InventoryFailed(reason)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC, second precision (``metav1.Time``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _vf_key(interface: str, vf: DeviceInterfaceVirtualFunction) -> str:
    """A function's identity across passes: its bus id (a function with no netdev has no name)."""
    return f"{interface}/{vf.pci_bus_id or vf.name}"


def carry_link_first_seen(
    previous: Sequence[DeviceInterface] | None,
    detected: Sequence[DeviceInterface],
    now: datetime,
) -> list[DeviceInterface]:
    """``detected`` with each link's first-seen time settled (a new list; the inputs are untouched).

    Only ``failed`` carries one. It is taken from the previous record of the same interface (by
    name; a function by ``<interface>/<bus id>``) when that was ``failed`` too and had one —
    keyed on the state, not the reason, so a second port going down is the same outage — and
    otherwise it is ``now``. Any other state carries none."""
    stamp = format_time(now)
    before: dict[str, DeviceInterfaceLink] = {}
    for iface in previous or []:
        if iface.link is not None:
            before[iface.name] = iface.link
        for vf in iface.virtual_functions:
            if vf.link is not None:
                before[_vf_key(iface.name, vf)] = vf.link
    out = []
    for iface in detected:
        copy = iface.model_copy(deep=True)
        copy.link = _settle(before.get(copy.name), copy.link, stamp)
        for vf in copy.virtual_functions:
            vf.link = _settle(before.get(_vf_key(copy.name, vf)), vf.link, stamp)
        out.append(copy)
    return out


def _settle(
    was: DeviceInterfaceLink | None, link: DeviceInterfaceLink | None, stamp: str
) -> DeviceInterfaceLink | None:
    if link is None:
        return None
    if link.state is not LinkState.FAILED:
        return link.model_copy(update={"first_seen_time": None})
    if was is not None and was.state is LinkState.FAILED and was.first_seen_time:
        return link.model_copy(update={"first_seen_time": was.first_seen_time})
    return link.model_copy(update={"first_seen_time": stamp})


# -- node labels (supplement §7.3; reference §10) -------------------------------------------------


def rdma_usable(rdma: bool, link: DeviceInterfaceLink | None) -> bool:
    """An explicit verdict decides (usable unless ``failed``) — both ways: an ``unverified`` record
    with no device bound counts, a ``failed`` one with a device does not; only with no verdict does
    the ``rdma`` flag decide."""
    if link is not None:
        return link.state is not LinkState.FAILED
    return rdma


def _coordinates(iface: DeviceInterface, numa: str) -> BusCoordinates:
    return BusCoordinates(
        pci_bus_id=iface.pci_bus_id,
        pci_root_id=iface.pci_root_id,
        pci_switches=tuple(iface.pci_switches),
        numa_affinity=numa,
    )


def rdma_endpoints(interfaces: Iterable[DeviceInterface]) -> list[BusCoordinates]:
    """The usable RDMA endpoints: each interface, and each virtual function on its own (a function
    sits behind its parent's bridges, with its own NUMA node when the kernel gave one)."""
    endpoints = []
    for iface in interfaces:
        if rdma_usable(iface.rdma, iface.link):
            endpoints.append(_coordinates(iface, iface.numa_affinity))
        for vf in iface.virtual_functions:
            if rdma_usable(vf.rdma, vf.link):
                endpoints.append(_coordinates(iface, vf.numa_affinity or iface.numa_affinity))
    return endpoints


def accelerator_coordinates(topology: DeviceTopology | BusCoordinates) -> BusCoordinates:
    if isinstance(topology, BusCoordinates):
        return topology
    return BusCoordinates(
        pci_bus_id=topology.pci_bus_id,
        pci_root_id=topology.pci_root_id or "",
        pci_switches=tuple(topology.pci_switches or ()),
        numa_affinity=topology.numa_affinity,
    )


def rdma_labels(
    inventory: InventoryOk | Sequence[DeviceInterface],
    accelerators: Sequence[DeviceTopology | BusCoordinates] = (),
) -> dict[str, str]:
    """The node's ``feature.gpustack.ai/rdma.*`` labels from one successful inventory.

    * ``rdma.capable=true`` when at least one endpoint (interface or function) is usable, so a
      broken NIC beside a working one keeps it; nothing at all otherwise;
    * ``rdma.numa``: the endpoints' NUMA nodes, unique, sorted and joined with ``_``; unknown ones
      skipped; omitted when none is known or when the joined value is not a valid label value (a
      truncated set would be a wrong fact);
    * ``rdma.distance``: the closest bus distance any accelerator has to an endpoint; omitted when
      there is no accelerator.

    Not for a failed inventory: the caller keeps the previous ``rdma.`` labels then (withholding a
    label removes it, so recomputing from nothing would remove them all)."""
    interfaces = inventory.interfaces if isinstance(inventory, InventoryOk) else inventory
    endpoints = rdma_endpoints(interfaces)
    if not endpoints:
        return {}
    labels = {RDMA_CAPABLE_LABEL: "true"}
    # Sorted as strings, as the reference sorts them (identical for nodes 0-9).
    numa = RDMA_NUMA_SEPARATOR.join(sorted({e.numa_affinity for e in endpoints if e.numa_affinity}))
    if numa and sanitize_label_value(numa) == numa:
        labels[RDMA_NUMA_LABEL] = numa
    distance = closest_distance([accelerator_coordinates(a) for a in accelerators], endpoints)
    if distance is not None:
        labels[RDMA_DISTANCE_LABEL] = distance.word
    return {k: sanitize_label_value(v) for k, v in sorted(labels.items())}


def apply_rdma_labels(
    current: Mapping[str, str],
    inventory: InterfaceInventory,
    accelerators: Sequence[DeviceTopology | BusCoordinates] = (),
) -> dict[str, str]:
    """A node's labels after this pass: every ``feature.gpustack.ai/rdma.*`` key replaced by what
    :func:`rdma_labels` computes (a key it no longer reports is removed — withholding a label is
    removing it), or left exactly as it was when the enumeration failed."""
    if isinstance(inventory, InventoryFailed):
        return dict(current)
    kept = {k: v for k, v in current.items() if not k.startswith(RDMA_LABEL_PREFIX)}
    return dict(sorted({**kept, **rdma_labels(inventory, accelerators)}.items()))


# -- the preflight network section (supplement §2.8; reference §8) --------------------------------


class NetworkCheck(CamelModel):
    """One RDMA-capable interface's or function's row. ``state`` is the link vocabulary itself (the
    value the node publishes); ``depth`` is always ``declared`` (no host command is run)."""

    interface: str
    rdma_device: str = ""
    state: LinkState
    depth: Literal["declared"] = "declared"
    reason: str | None = None


class NetworkRows(CamelModel):
    """The rows of the ``network`` section, and the note an empty section carries (the caller adds
    the timestamp)."""

    checks: list[NetworkCheck] | None = None
    note: str | None = None


def _row(name: str, rdma_device: str, link: DeviceInterfaceLink | None) -> NetworkCheck:
    if link is None:
        return NetworkCheck(interface=name, rdma_device=rdma_device, state=LinkState.UNVERIFIED, reason=NO_LINK_RECORD)
    return NetworkCheck(interface=name, rdma_device=rdma_device, state=link.state, reason=link.reason)


def preflight_rows(inventory: InterfaceInventory) -> NetworkRows:
    """One row per interface and per function (``<interface>/<function bus id>``) that has an RDMA
    device or a verdict, in the inventory's order. An entry with neither gets no row (``rdma: false``
    settles it); a verdict with no device is the unreadable-tree case and does get one. An empty
    section says why: the enumeration failed, or no RDMA hardware."""
    if isinstance(inventory, InventoryFailed):
        return NetworkRows(
            note=(
                "the network interfaces could not be enumerated, so nothing is claimed about this "
                f"node's RDMA links: {inventory.reason}"
            )
        )
    checks: list[NetworkCheck] = []
    for iface in inventory.interfaces:
        if iface.rdma or iface.link is not None:
            checks.append(_row(iface.name, iface.rdma_device, iface.link))
        for vf in iface.virtual_functions:
            if vf.rdma or vf.link is not None:
                checks.append(_row(_vf_key(iface.name, vf), vf.rdma_device, vf.link))
    if checks:
        return NetworkRows(checks=checks)
    return NetworkRows(
        note=(
            f"none of the {len(inventory.interfaces)} interfaces on this node, nor any of their "
            f"{inventory.virtual_function_count} virtual functions, has an RDMA device bound, so there "
            "is no link to check; this is an answer about the hardware, not a check that was skipped"
        )
    )
