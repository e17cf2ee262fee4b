"""How far apart two devices sit on the bus, as an ordered word (supplement §7.3; reference §10).

The vocabulary is the one the GPUStack runtime publishes and an operator reads out of a vendor
topology matrix: ``SELF LINK PIX PXB PHB NODE SYS UNK``, smaller meaning closer. The numbers are
spaced (0, 5, 10, 20, ...) so a level found later can be slotted between two without renumbering
anything persisted, and ``UNK`` is far from every real level so "could not tell" is never read as
"far apart".

:func:`bus_distance` answers from PCI coordinates only, which bounds what it can say:

* never ``LINK`` (an accelerator's own interconnect is invisible on the bus) and never ``SELF`` (an
  accelerator is never the NIC it is measured against);
* never ``PHB``: telling PHB from NODE needs the host bridge, and the coordinates stop at the
  outermost PCI bridge, so where the two are indistinguishable the further (``NODE``) is reported —
  the value feeds a proximity claim, and overclaiming closeness is the error nothing downstream
  catches;
* a missing coordinate gives ``UNK``, never a distance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum


class TopologyDistance(IntEnum):
    """An ordered distance level; compare with ``<`` ("at least this close")."""

    SELF = 0
    LINK = 5
    PIX = 10  # at most one PCIe bridge between the two
    PXB = 20  # several PCIe bridges, without crossing the host bridge
    PHB = 30  # crosses the PCIe host bridge
    NODE = 40  # crosses between host bridges within one NUMA node
    SYS = 50  # crosses the interconnect between NUMA nodes
    UNK = 100  # no answer

    @property
    def word(self) -> str:
        """The label value: the matrix word (``PIX``, ``UNK``, ...)."""
        return self.name


@dataclass(frozen=True)
class BusCoordinates:
    """Where a device sits: its bus id, the outermost bridge above it, the bridges innermost first,
    and its NUMA node (``""`` = the kernel gave none)."""

    pci_bus_id: str = ""
    pci_root_id: str = ""
    pci_switches: Sequence[str] = field(default_factory=tuple)
    numa_affinity: str = ""

    @property
    def root(self) -> str:
        """The outermost bridge; a function hanging directly off the root complex has no bridge, and
        its own address stands in for one (as the reference's topology resolver reports it), so two
        such functions fall through to the NUMA comparison instead of to ``UNK``."""
        return self.pci_root_id or self.pci_bus_id


def bus_distance(accelerator: BusCoordinates, interface: BusCoordinates) -> TopologyDistance:
    """The distance between an accelerator and a network interface, from bus coordinates alone.

    ``PIX`` when both sit behind the same innermost bridge; ``PXB`` when they share the outermost
    bridge only; past the bridge subtree only NUMA is left: ``NODE`` on the same node, ``SYS`` on
    different ones, ``UNK`` when either node is unknown (an unknown node is not node 0). A device
    without a PCI address (an interface on a non-PCI bus) gives ``UNK``.
    """
    if not accelerator.pci_bus_id or not interface.pci_bus_id:
        return TopologyDistance.UNK
    if accelerator.pci_switches and interface.pci_switches and accelerator.pci_switches[0] == interface.pci_switches[0]:
        return TopologyDistance.PIX
    if accelerator.root == interface.root:
        return TopologyDistance.PXB
    if not accelerator.numa_affinity or not interface.numa_affinity:
        return TopologyDistance.UNK
    if accelerator.numa_affinity == interface.numa_affinity:
        return TopologyDistance.NODE
    return TopologyDistance.SYS


def closest_distance(
    accelerators: Sequence[BusCoordinates], interfaces: Sequence[BusCoordinates]
) -> TopologyDistance | None:
    """The tightest distance over every (accelerator, interface) pair; ``None`` when there is no
    pair to measure (no accelerator or no interface) — a distance is a statement about a pair."""
    distances = [bus_distance(a, i) for a in accelerators for i in interfaces]
    return min(distances) if distances else None
