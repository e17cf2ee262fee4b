"""The node capacity keys (supplement §5.2): what the Node's ``status.capacity`` / ``status.allocatable``
carry beside the device-plugin resources, so the scheduler can place sliced and partitioned Pods.

The kubelet advertises the device-plugin families itself (``<base>``, ``.shared``, ``.sliced``,
``.partitioned``, visibility: Σ healthy tokens). The budget keys a container's *request* carries beside
its family token are nobody's tokens, so the Device Manager writes them onto the Node as node capacity,
each the Σ of a per-accelerator budget over the accelerators that serve the family:

==========================================  ===================================  =================================
key                                          accelerators                         per-accelerator budget
==========================================  ===================================  =================================
``<base>.sliced.units``                      logically sliceable                  D = 1,600,000
``<base>.sliced.cores-percentage``           logically sliceable                  100 (× its slice count when its
                                                                                  ``coresPercentageOvercommit``)
``<base>.sliced.memory-percentage``          logically sliceable                  100
``<base>.sliced.memory-mib``                 logically sliceable                  its VRAM (the group's ``memory``)
``<base>.partitioned.units``                 partitioning                         D
``<base>.partitioned.<kind>-<profile>``      partitioning, offering the profile   allocated + remaining instances
==========================================  ===================================  =================================

*Logically sliceable*: not in a partitioning mode and ``status.logicalSliced.count > 0``, with the sliced
family served. *Partitioning*: ``status.physicalSliced`` set, with the partitioned family served (one
accelerator is never both, supplement §5.1). An unhealthy accelerator contributes nothing, as an
accelerator gone from detection contributes nothing: its budget goes with it.

Cores overcommit: a slice asks ``.sliced.cores-percentage`` in (0, 100] of *one* accelerator (100 when
omitted). Where the accelerator's slicing lets compute percentages sum past 100
(``coresPercentageOvercommit``: NVIDIA, AMD, Ascend, Iluvatar, T-Head), each of its ``count`` slices may
take up to 100, so its budget is 100 × count; elsewhere the percentages share one accelerator's 100.
(The spec says only "Σ per-accelerator budget"; this is our reading of the overcommit flag.)

``.partitioned.<kind>-<profile>`` follows the ledger (the ``Devices`` status): per accelerator the
instances of the profile allocated plus those still placeable around them; without a status entry for
an accelerator, the instances placeable on it empty. The same value goes into capacity and allocatable
(the kubelet copies capacity into allocatable on its own status updates, so a lower allocatable would
not stay).

Pure: no API server (``kube/nodestatus.py`` writes the result).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from gpustack_operator.allocator import placement
from gpustack_operator.allocator.ledger import AcceleratorAllocation, D, DevicesAllocationGroup
from gpustack_operator.allocator.resources import DEFAULT_PARTITION_KIND, ResourceNames, partitioning
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import Family

PERCENT = 100


@dataclass(frozen=True)
class ManufacturerCapacity:
    """What one manufacturer's capacity keys are computed from: its resource names, the groups the
    detection (or the loop's carried-forward state) reports, the families its allocator serves
    (``{pool.family for pool in allocator.pools()}``) and, optionally, the ledger's status."""

    names: ResourceNames
    groups: Sequence[DevicesGroup]
    families: Collection[Family]
    status: Sequence[DevicesAllocationGroup] = ()


def is_capacity_key(key: str, bases: Iterable[str]) -> bool:
    """Is ``key`` one of the node-capacity keys of a manufacturer whose base resource is in ``bases``
    (``<base>.sliced.*`` / ``<base>.partitioned.*``)? The device-plugin keys themselves (``<base>``,
    ``.shared``, ``.sliced``, ``.partitioned``, visibility) are the kubelet's and never match."""
    return any(key.startswith((f"{base}.sliced.", f"{base}.partitioned.")) for base in bases)


def logically_sliceable(accelerator: Accelerator) -> bool:
    sliced = accelerator.status.logical_sliced
    return not partitioning(accelerator) and sliced is not None and sliced.count > 0


def _cores_budget(accelerator: Accelerator) -> int:
    sliced = accelerator.status.logical_sliced
    if sliced is not None and sliced.cores_percentage_overcommit:
        return PERCENT * max(sliced.count, 1)
    return PERCENT


def _allocations(status: Sequence[DevicesAllocationGroup]) -> dict[str, AcceleratorAllocation]:
    return {a.id: a for group in status for a in group.accelerators}


def _profile_instances(accelerator: Accelerator, allocation: AcceleratorAllocation | None) -> dict[str, int]:
    """Per profile the accelerator offers: allocated + remaining instances."""
    physical = accelerator.status.physical_sliced
    if physical is None:
        return {}
    allocated = {p.name: p.count for p in allocation.allocated_profiles} if allocation is not None else {}
    remaining = {p.name: p.count for p in allocation.remaining_profiles} if allocation is not None else None
    out: dict[str, int] = {}
    for profile in physical.profiles:
        left = remaining.get(profile.name, 0) if remaining is not None else placement.placeable_count(profile, [])
        out[profile.name] = out.get(profile.name, 0) + max(allocated.get(profile.name, 0), 0) + max(left, 0)
    return out


def manufacturer_capacity(part: ManufacturerCapacity) -> dict[str, int]:
    """One manufacturer's capacity keys as whole numbers (a key with no accelerator behind it is
    absent, never 0: see :func:`node_capacity`)."""
    names = part.names
    allocations = _allocations(part.status)
    out: dict[str, int] = {}

    def add(key: str, value: int) -> None:
        out[key] = out.get(key, 0) + value

    sliced = Family.SLICED in part.families
    partitioned = Family.PARTITIONED in part.families
    for group in part.groups:
        for accelerator in group.accelerators:
            if accelerator.status.unhealthy:
                continue
            if sliced and logically_sliceable(accelerator):
                add(names.sliced_units, D)
                add(names.sliced_cores_percentage, _cores_budget(accelerator))
                add(names.sliced_memory_percentage, PERCENT)
                add(names.sliced_memory_mib, max(group.memory, 0))
            elif partitioned and partitioning(accelerator):
                add(names.partitioned_units, D)
                for profile, count in _profile_instances(accelerator, allocations.get(accelerator.id)).items():
                    add(names.partitioned_profile(profile), count)
    return out


def node_capacity(parts: Iterable[ManufacturerCapacity]) -> dict[str, str]:
    """Every manufacturer's capacity keys as Kubernetes quantity strings (plain integers), sorted.

    A key whose accelerators are all gone is *absent* from the result: the writer removes it from the
    Node (``kube/nodestatus.py``), which is how an accelerator gone takes its budget with it. A key
    whose sum is 0 (a partition profile with no room on any accelerator, a group whose VRAM is
    unknown) is kept at ``"0"``: the accelerators are there, they hold no room."""
    total: dict[str, int] = {}
    for part in parts:
        for key, value in manufacturer_capacity(part).items():
            total[key] = total.get(key, 0) + value
    return {key: str(value) for key, value in sorted(total.items())}


def capacity_bases(names: Iterable[ResourceNames]) -> list[str]:
    """The base resources whose capacity keys a writer owns (every manufacturer asked about, served or
    not, so a manufacturer that went away has its keys removed)."""
    return sorted({n.base for n in names})


def names_of(resolved: Resolved) -> ResourceNames:
    """A manufacturer's resource names with the node's overrides applied (as the allocator builds them)."""
    return ResourceNames(resolved.resource_name, resolved.name, resolved.partition_kind or DEFAULT_PARTITION_KIND)
