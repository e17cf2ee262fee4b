"""Detection from the PCI scan alone — the backend every manufacturer starts from.

It names a device from the manufacturer's own product table (``Identity.products``); a device the
table does not know stays unnamed, which the preflight reports as "found accelerators it could not
name" rather than inventing a name. Until a manufacturer's vendor backend (NVML, DCMI, …) replaces it,
the accelerator id is the PCI bus id: the only identity sysfs gives without the vendor library.
"""

from __future__ import annotations

from collections import OrderedDict

from gpustack_operator.ledger.models import Accelerator, DevicesGroup, DeviceTopology
from gpustack_operator.manufacturers.base import DetectContext, Detected, DetectOutcome, Unmeasured
from gpustack_operator.node.naming import group_id
from gpustack_operator.node.pci import PciDevice


def accelerator_devices(ctx: DetectContext) -> list[PciDevice]:
    """This manufacturer's accelerators on the bus, in bus order (the enumeration order)."""
    m = ctx.manufacturer
    return sorted(
        (d for d in ctx.pci.devices if m.matches(d, ctx.settings.class_prefixes)),
        key=lambda d: d.bus_id,
    )


def topology_of(device: PciDevice) -> DeviceTopology:
    return DeviceTopology(
        pci_bus_id=device.bus_id,
        pci_root_id=device.root_id or None,
        pci_class=device.class_code,
        numa_affinity="" if device.numa_node is None else str(device.numa_node),
        cpu_affinity=device.local_cpulist or "",
        pci_switches=device.switches or None,
    )


def detect_from_pci(ctx: DetectContext) -> DetectOutcome:
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return Unmeasured("; ".join(problems))
    products = ctx.manufacturer.identity.products
    by_name: OrderedDict[str, list[PciDevice]] = OrderedDict()
    for device in accelerator_devices(ctx):
        by_name.setdefault(products.get(device.device, ""), []).append(device)
    groups: list[DevicesGroup] = []
    index = 0
    for name, devices in by_name.items():
        accelerators = []
        for device in devices:
            accelerators.append(
                Accelerator(
                    id=device.bus_id,
                    index=index,
                    physical_indexes=[index],
                    topology=topology_of(device),
                )
            )
            index += 1
        groups.append(
            DevicesGroup(
                id=group_id(ctx.manufacturer.name, name, 0, ctx.settings.group_id_with_memory) if name else "",
                manufacturer=ctx.manufacturer.name,
                name=name,
                accelerators=accelerators,
            )
        )
    return Detected(groups)
