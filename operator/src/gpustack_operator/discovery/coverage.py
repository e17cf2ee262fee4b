"""What the PCI bus shows against what a manufacturer's driver answered -- one rule, read by both
preflight's question 1 and the ``accelerator_facts`` module.

The ledger keeps the spec's rule (detection-failure rule 1): an absent driver, a library that will
not initialise and a bus with no card are all "empty, no error" to the detect pass. A person bringing
a node up needs the difference, though: eight H100s on the bus and no NVML in this container is not
"no NVIDIA accelerator". So beside every ``Detected`` outcome this module weighs

* ``bus`` -- the manufacturer's accelerator functions the PCI scan shows (physical functions only:
  an SR-IOV virtual function is not what a driver enumerates on the host), or ``None`` when the bus
  was not consulted (``--no-pci-check``, or the scan cannot vouch for this vendor);
* ``answered`` -- the accelerators the driver named, and the bus addresses they sit at;
* ``driver`` -- why the driver answered nothing, in its own words, when it did not;
* ``dropped`` -- accelerators it enumerated but could not name.

An accelerator function on the bus that no named accelerator sits at is *unanswered*. The
comparison runs one way only: a driver answering more than the bus shows (AMD's partition modes
present one PCI function as several KFD nodes) is not a shortfall.

This goes beyond the reference, which reports such a node like an empty one; see
docs/preflight.md ("A half-installed node is never green").
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, Dropped, Resolved
from gpustack_operator.node.pci import PciScan
from gpustack_operator.settings import Settings


@dataclass(frozen=True)
class Coverage:
    """One manufacturer's bus against its driver (see the module docstring)."""

    bus: tuple[str, ...] | None
    answered: int
    missing: int  # bus functions no named accelerator accounts for
    unanswered: tuple[str, ...]  # the bus addresses among which those sit
    driver: str | None
    dropped: tuple[Dropped, ...]

    @property
    def short(self) -> bool:
        """The bus shows accelerators the driver did not name."""
        return self.missing > 0

    def sentence(self) -> str:
        """``the PCI bus shows 8 accelerator(s) ... where its driver named 0 (unanswered: ...)``."""
        bus = len(self.bus or ())
        among = "" if len(self.unanswered) == self.missing else f" {self.missing} of"
        return (
            f"the PCI bus shows {bus} accelerator(s) of this manufacturer where its driver named "
            f"{self.answered} (unanswered:{among} {', '.join(self.unanswered)})"
        )

    def wire(self) -> dict[str, object]:
        """The facts view: ``pci`` (bus count, ``None`` when not consulted), ``unanswered``
        addresses, ``driver`` words and ``dropped`` accelerators."""
        doc: dict[str, object] = {"pci": None if self.bus is None else len(self.bus)}
        if self.missing:
            doc["missing"] = self.missing
            doc["unanswered"] = list(self.unanswered)
        if self.driver:
            doc["driver"] = self.driver
        if self.dropped:
            doc["dropped"] = [{"where": d.where, "what": d.what} for d in self.dropped]
        return doc


def bus_functions(view: HostRoot, pci: PciScan, manufacturer: Resolved, settings: Settings) -> list[str]:
    """This manufacturer's accelerator physical functions on the bus, by address."""
    out = []
    for device in pci.devices:
        if not manufacturer.matches(device, settings.class_prefixes):
            continue
        if device.sysfs_path and view.exists(f"{device.sysfs_path}/physfn"):
            continue  # an SR-IOV virtual function
        out.append(device.bus_id)
    return out


def coverage(
    view: HostRoot,
    pci: PciScan,
    manufacturer: Resolved,
    settings: Settings,
    outcome: Detected,
    *,
    no_pci_check: bool = False,
) -> Coverage:
    """Weigh one ``Detected`` outcome against the bus (``no_pci_check``: the bus is not consulted)."""
    accelerators = [a for g in outcome.groups for a in g.accelerators]
    bus: tuple[str, ...] | None = None
    unanswered: tuple[str, ...] = ()
    missing = 0
    if not no_pci_check and not pci.unreadable_for(manufacturer.pci.vendor):
        bus = tuple(bus_functions(view, pci, manufacturer, settings))
        named = {a.topology.pci_bus_id for a in accelerators if a.topology.pci_bus_id}
        without_address = sum(1 for a in accelerators if not a.topology.pci_bus_id)
        uncovered = [b for b in bus if b not in named]
        # an accelerator the driver named without an address may sit at any uncovered function
        missing = max(0, len(uncovered) - without_address)
        unanswered = tuple(uncovered) if missing else ()
    return Coverage(
        bus=bus,
        answered=len(accelerators),
        missing=missing,
        unanswered=unanswered,
        driver=outcome.driver,
        dropped=outcome.dropped,
    )


__all__ = ["Coverage", "bus_functions", "coverage"]
