"""Building ``Devices`` groups from what a vendor backend enumerated — once, for every vendor.

A backend produces one :class:`Found` per accelerator it could identify, in its own enumeration
order; :func:`build_groups` assigns logical indexes (ascending, the order positional injection uses),
groups accelerators of one model (same name and memory), computes the group ids (one rule,
:func:`~gpustack_operator.node.naming.group_ids`: two groups of a manufacturer never share one --
colliding groups carry their memory, as ``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`` would), and fills
topology from the PCI scan by bus id (NUMA node, CPU affinity, bridges) where the backend did not.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorStatus,
    DevicesGroup,
    DeviceTopology,
)
from gpustack_operator.node.naming import group_ids
from gpustack_operator.node.pci import PciScan
from gpustack_operator.settings import Settings


@dataclass
class Found:
    """One accelerator as a vendor backend read it."""

    uuid: str
    name: str
    memory_mib: int
    pci_bus_id: str = ""  # "0000:18:00.0" (lowercase, 4-digit domain); joins the PCI scan
    physical_indexes: list[int] = field(default_factory=list)  # the driver's own numbering
    cores: int | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    compute_capability: str | None = None
    family: str | None = None
    unhealthy: bool = False
    logical_sliced: AcceleratorLogicalSliced | None = None
    physical_sliced: AcceleratorPhysicalSliced | None = None
    numa_affinity: str | None = None  # overrides the PCI scan's value when the vendor reports it
    cpu_affinity: str | None = None
    # Anything else a backend wants to carry to the preflight / allocator (gfx target, XCC count…).
    extra: dict[str, object] = field(default_factory=dict)


def normalize_bus_id(raw: str) -> str:
    """``00000000:18:00.0`` / ``0000:18:00.0`` / ``18:00.0`` → ``0000:18:00.0`` (lowercase)."""
    text = raw.strip().lower()
    if text.count(":") == 1:
        text = "0000:" + text
    domain, _, rest = text.partition(":")
    if len(domain) > 4:
        domain = domain[-4:]
    return f"{domain.zfill(4)}:{rest}"


def build_groups(manufacturer: str, found: list[Found], pci: PciScan, settings: Settings) -> list[DevicesGroup]:
    by_bus = {d.bus_id: d for d in pci.devices}
    groups: OrderedDict[tuple[str, int], DevicesGroup] = OrderedDict()
    for index, item in enumerate(found):
        bus = normalize_bus_id(item.pci_bus_id) if item.pci_bus_id else ""
        device = by_bus.get(bus)
        topology = DeviceTopology(
            pci_bus_id=bus,
            pci_root_id=(device.root_id or None) if device else None,
            pci_class=device.class_code if device else None,
            numa_affinity=item.numa_affinity
            if item.numa_affinity is not None
            else ("" if device is None or device.numa_node is None else str(device.numa_node)),
            cpu_affinity=item.cpu_affinity
            if item.cpu_affinity is not None
            else ((device.local_cpulist or "") if device else ""),
            pci_switches=(device.switches or None) if device else None,
        )
        accelerator = Accelerator(
            id=item.uuid,
            index=index,
            physical_indexes=item.physical_indexes or [index],
            topology=topology,
            status=AcceleratorStatus(
                unhealthy=item.unhealthy,
                logical_sliced=item.logical_sliced,
                physical_sliced=item.physical_sliced,
            ),
        )
        key = (item.name, item.memory_mib)
        if key not in groups:
            groups[key] = DevicesGroup(
                id="",  # assigned below, once every group of the pass is known
                manufacturer=manufacturer,
                name=item.name,
                memory=item.memory_mib,
                cores=item.cores,
                driver_version=item.driver_version or None,
                runtime_version=item.runtime_version or None,
                compute_capability=item.compute_capability or None,
                family=item.family or None,
            )
        groups[key].accelerators.append(accelerator)
    for group, ident in zip(
        groups.values(), group_ids(manufacturer, list(groups), settings.group_id_with_memory), strict=True
    ):
        group.id = ident
    return list(groups.values())
