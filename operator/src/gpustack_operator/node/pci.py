"""The PCI scan of ``/sys/bus/pci/devices`` (spec: Stage 1 Job 1; supplement §1.2, §7.1).

On a real host every entry is a relative symlink into ``/sys/devices/pci<dom>:<bus>/…``; it is
resolved inside the host root (see :class:`~gpustack_operator.host.HostRoot`), and the resolved path
gives the bridge chain the device sits behind (``pciRootId`` = the outermost bridge,
``pciSwitches`` = the bridges innermost first).

The scan never guesses. An entry it cannot read is recorded as an error next to the devices it could
read, and a listing that fails is a failed scan: "could not measure" is never reported as "no
hardware".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.settings import SettingsError

PCI_DEVICES = "/sys/bus/pci/devices"

BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HEX_ID = re.compile(r"^(0x)?([0-9a-fA-F]{1,8})$")
_NUMA_NODE = re.compile(r"-?[0-9]{1,10}")  # the kernel's "%d"; int() would also take "+1", "1_0", "٣"


class PciDevice(BaseModel):
    """One PCI function, as sysfs describes it. Ids are lowercase hex without ``0x``."""

    bus_id: str
    vendor: str
    device: str
    class_code: str  # six hex digits: class, subclass, prog-if ("030200")
    subsystem_vendor: str | None = None
    subsystem_device: str | None = None
    numa_node: int | None = None  # None when the kernel reports -1 or nothing
    local_cpulist: str | None = None
    driver: str | None = None
    sysfs_path: str = ""
    bridges: list[str] = Field(default_factory=list)  # outermost first

    def class_matches(self, prefixes: tuple[str, ...]) -> bool:
        return any(self.class_code.startswith(p) for p in prefixes)

    @property
    def root_id(self) -> str:
        """The outermost PCI bridge above this device (not the root complex); ``""`` if none."""
        return self.bridges[0] if self.bridges else ""

    @property
    def switches(self) -> list[str]:
        """The bridges between this device and its root, innermost first."""
        return list(reversed(self.bridges))


@dataclass(frozen=True)
class PciClaim:
    """What one manufacturer's accelerators look like on the bus -- its PCI ``vendor`` id, the
    ``classes`` they present as, the kernel ``drivers`` they bind to -- the evidence that scopes an
    entry the scan could not read (:meth:`PciReadError.affects`)."""

    vendor: str
    classes: tuple[str, ...]
    drivers: tuple[str, ...] = ()


class PciReadError(BaseModel):
    """An entry that could not be read completely. ``message`` names it (its BDF) and what failed;
    ``vendor``, ``class_code`` and ``driver`` (the name its ``driver`` link gives) are what could
    still be read of it, ``None`` each when that failed too."""

    bus_id: str
    vendor: str | None = None
    class_code: str | None = None
    driver: str | None = None
    message: str

    def affects(self, vendor: str, claims: Sequence[PciClaim]) -> bool:
        """Could this entry be one of ``vendor``'s accelerators? The first evidence that was read
        decides: a readable vendor id (only that vendor); a readable class that no manufacturer's
        accelerators present as (none); a driver link naming a manufacturer's kernel driver (that
        manufacturer only); nothing readable of the three -- every manufacturer."""
        if self.vendor is not None:
            return self.vendor == vendor
        if self.class_code is not None and not any(
            self.class_code.startswith(prefix) for claim in claims for prefix in claim.classes
        ):
            return False
        if self.driver is not None:
            owners = {claim.vendor for claim in claims if self.driver in claim.drivers}
            if owners:
                return vendor in owners
        return True


class PciScan(BaseModel):
    """The result of one scan. ``failure`` set means the listing itself failed."""

    devices: list[PciDevice] = Field(default_factory=list)
    errors: list[PciReadError] = Field(default_factory=list)
    failure: str | None = None

    def unreadable_for(self, vendor: str, claims: Sequence[PciClaim] | None = None) -> list[str]:
        """Why this scan cannot vouch for ``vendor``'s devices (empty when it can): a listing that
        failed, or each unreadable entry that could be one of them (:meth:`PciReadError.affects`,
        against ``claims``; by default every registered manufacturer's, overrides applied) -- so
        one bad entry leaves unmeasured only the manufacturers it could belong to."""
        if self.failure:
            return [self.failure]
        if not self.errors:
            return []
        scope = manufacturer_claims() if claims is None else claims
        return [e.message for e in self.errors if e.affects(vendor, scope)]


def manufacturer_claims() -> tuple[PciClaim, ...]:
    """Every registered manufacturer's :class:`PciClaim`, its PCI vendor override applied (the
    default id when the override is malformed: that manufacturer's pass reports the override)."""
    from gpustack_operator.manufacturers import REGISTRY  # noqa: PLC0415 -- the registry imports this module
    from gpustack_operator.manufacturers.base import resolve  # noqa: PLC0415

    claims = []
    for entry in REGISTRY.values():
        identity = entry.identity
        try:
            vendor = resolve(identity).pci.vendor
        except SettingsError:
            vendor = identity.pci_vendor_id.lower()
        claims.append(PciClaim(vendor, identity.accelerator_classes, identity.kernel_drivers))
    return tuple(claims)


def parse_hex_id(text: str, what: str, width: int) -> str:
    """``"0x10de\\n"`` → ``"10de"``, always ``width`` digits; anything that is not a hex id, or one
    too wide for the field (a vendor id is 16 bits), raises ``ValueError``."""
    match = _HEX_ID.match(text.strip())
    if not match or int(match.group(2), 16) >= 16**width:
        raise ValueError(f"{what} holds {text.strip()[:40]!r}, not a hex PCI id")
    return f"{int(match.group(2), 16):0{width}x}"


def parse_numa_node(text: str | None) -> int | None:
    """``numa_node``: a node number, or ``-1`` (no affinity) → ``None``; anything that is not a
    decimal the kernel could have written (at most 10 digits) raises ``ValueError``."""
    if text is None:
        return None
    value = text.strip()
    if not _NUMA_NODE.fullmatch(value):
        raise ValueError(f"numa_node holds {value[:40]!r}, not a number")
    node = int(value)
    return node if node >= 0 else None


def _bridges_from_path(canonical: str, bus_id: str) -> list[str]:
    parts = [p for p in canonical.split("/") if BDF.match(p)]
    if parts and parts[-1] == bus_id:
        parts = parts[:-1]
    return parts


def read_device(host: HostRoot, bus_id: str) -> PciDevice:
    """Read one ``/sys/bus/pci/devices/<bdf>`` entry. Raises :class:`PciEntryError` naming the entry
    and what failed, carrying what of it could still be read (vendor, class, driver)."""
    link = f"{PCI_DEVICES}/{bus_id}"
    try:
        canonical = host.canonical(link)
    except HostPathError as exc:
        raise PciEntryError(f"{bus_id}: the entry does not resolve: {exc}") from None
    failed: list[str] = []

    def field(name: str, read: Callable[[], str | None]) -> str | None:
        try:
            return read()
        except (ValueError, HostPathError) as exc:
            failed.append(f"{name} unreadable ({exc})")
            return None

    vendor = field("vendor", lambda: parse_hex_id(host.read_text(f"{canonical}/vendor"), "vendor", 4))
    device = field("device", lambda: parse_hex_id(host.read_text(f"{canonical}/device"), "device", 4))
    class_code = field("class", lambda: parse_hex_id(host.read_text(f"{canonical}/class"), "class", 6))
    driver_target = field("driver link", lambda: host.readlink(f"{canonical}/driver"))
    driver = driver_target.rstrip("/").rsplit("/", 1)[-1] if driver_target else None
    sub_vendor_raw = field("subsystem_vendor", lambda: host.read_optional(f"{canonical}/subsystem_vendor"))
    sub_device_raw = field("subsystem_device", lambda: host.read_optional(f"{canonical}/subsystem_device"))
    numa = field("numa_node", lambda: host.read_optional(f"{canonical}/numa_node"))
    cpulist = field("local_cpulist", lambda: host.read_optional(f"{canonical}/local_cpulist"))
    if not failed:
        try:
            return PciDevice(
                bus_id=bus_id,
                vendor=vendor or "",
                device=device or "",
                class_code=class_code or "",
                subsystem_vendor=parse_hex_id(sub_vendor_raw, "subsystem_vendor", 4) if sub_vendor_raw else None,
                subsystem_device=parse_hex_id(sub_device_raw, "subsystem_device", 4) if sub_device_raw else None,
                numa_node=parse_numa_node(numa),
                local_cpulist=cpulist.strip() if cpulist else None,
                driver=driver,
                sysfs_path=canonical,
                bridges=_bridges_from_path(canonical, bus_id),
            )
        except ValueError as exc:
            failed.append(str(exc))
    raise PciEntryError(f"{bus_id}: {'; '.join(failed)}", vendor=vendor, class_code=class_code, driver=driver)


class PciEntryError(ValueError):
    """One PCI entry could not be read completely: the message names it and what failed; the
    fields are what could still be read of it."""

    def __init__(
        self, message: str, *, vendor: str | None = None, class_code: str | None = None, driver: str | None = None
    ) -> None:
        super().__init__(message)
        self.vendor = vendor
        self.class_code = class_code
        self.driver = driver


def scan_pci(host: HostRoot) -> PciScan:
    """Scan every PCI function on the host."""
    try:
        entries = host.listdir(PCI_DEVICES)
    except HostPathError as exc:
        return PciScan(failure=f"the PCI bus could not be listed: {exc}")
    scan = PciScan()
    for name in entries:
        if not BDF.match(name):
            scan.errors.append(PciReadError(bus_id=name, message=f"{PCI_DEVICES}/{name}: not a PCI address"))
            continue
        try:
            scan.devices.append(read_device(host, name))
        except PciEntryError as exc:
            scan.errors.append(
                PciReadError(
                    bus_id=name,
                    vendor=exc.vendor,
                    class_code=exc.class_code,
                    driver=exc.driver,
                    message=f"PCI entry {exc}",
                )
            )
    return scan
