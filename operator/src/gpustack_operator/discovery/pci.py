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

from pydantic import BaseModel, Field

from gpustack_operator.host import HostPathError, HostRoot

PCI_DEVICES = "/sys/bus/pci/devices"

BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HEX_ID = re.compile(r"^(0x)?([0-9a-fA-F]{1,8})$")


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


class PciReadError(BaseModel):
    """An entry that could not be read; ``vendor`` is set when at least the vendor id was."""

    bus_id: str
    vendor: str | None = None
    message: str


class PciScan(BaseModel):
    """The result of one scan. ``failure`` set means the listing itself failed."""

    devices: list[PciDevice] = Field(default_factory=list)
    errors: list[PciReadError] = Field(default_factory=list)
    failure: str | None = None

    def unreadable_for(self, vendor: str) -> list[str]:
        """Why this scan cannot vouch for ``vendor``'s devices (empty when it can)."""
        if self.failure:
            return [self.failure]
        return [e.message for e in self.errors if e.vendor in (None, vendor)]


def parse_hex_id(text: str, what: str, width: int) -> str:
    """``"0x10de\\n"`` → ``"10de"``; anything that is not a hex id raises ``ValueError``."""
    match = _HEX_ID.match(text.strip())
    if not match:
        raise ValueError(f"{what} holds {text.strip()[:40]!r}, not a hex PCI id")
    return match.group(2).lower().zfill(width)


def parse_numa_node(text: str | None) -> int | None:
    """``numa_node``: a node number, or ``-1`` (no affinity) → ``None``."""
    if text is None:
        return None
    value = text.strip()
    try:
        node = int(value)
    except ValueError:
        raise ValueError(f"numa_node holds {value[:40]!r}, not a number") from None
    return node if node >= 0 else None


def _bridges_from_path(canonical: str, bus_id: str) -> list[str]:
    parts = [p for p in canonical.split("/") if BDF.match(p)]
    if parts and parts[-1] == bus_id:
        parts = parts[:-1]
    return parts


def read_device(host: HostRoot, bus_id: str) -> PciDevice:
    """Read one ``/sys/bus/pci/devices/<bdf>`` entry. Raises ``ValueError``/``HostPathError``."""
    link = f"{PCI_DEVICES}/{bus_id}"
    canonical = host.canonical(link)
    vendor = parse_hex_id(host.read_text(f"{canonical}/vendor"), "vendor", 4)
    try:
        device = parse_hex_id(host.read_text(f"{canonical}/device"), "device", 4)
        class_code = parse_hex_id(host.read_text(f"{canonical}/class"), "class", 6)
        sub_vendor_raw = host.read_optional(f"{canonical}/subsystem_vendor")
        sub_device_raw = host.read_optional(f"{canonical}/subsystem_device")
        numa = parse_numa_node(host.read_optional(f"{canonical}/numa_node"))
        cpulist = host.read_optional(f"{canonical}/local_cpulist")
    except (ValueError, HostPathError) as exc:
        raise _VendorKnownError(vendor, f"{bus_id}: {exc}") from None
    driver_target = host.readlink(f"{canonical}/driver")
    return PciDevice(
        bus_id=bus_id,
        vendor=vendor,
        device=device,
        class_code=class_code,
        subsystem_vendor=parse_hex_id(sub_vendor_raw, "subsystem_vendor", 4) if sub_vendor_raw else None,
        subsystem_device=parse_hex_id(sub_device_raw, "subsystem_device", 4) if sub_device_raw else None,
        numa_node=numa,
        local_cpulist=cpulist.strip() if cpulist else None,
        driver=driver_target.rstrip("/").rsplit("/", 1)[-1] if driver_target else None,
        sysfs_path=canonical,
        bridges=_bridges_from_path(canonical, bus_id),
    )


class _VendorKnownError(ValueError):
    def __init__(self, vendor: str, message: str) -> None:
        super().__init__(message)
        self.vendor = vendor


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
        except _VendorKnownError as exc:
            scan.errors.append(PciReadError(bus_id=name, vendor=exc.vendor, message=str(exc)))
        except (ValueError, HostPathError) as exc:
            scan.errors.append(PciReadError(bus_id=name, message=f"{name}: {exc}"))
    return scan
