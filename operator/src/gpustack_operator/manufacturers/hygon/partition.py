"""Hygon DCU partitioning ("DCU MIG"): the node's partition mode and each DCU's partition profiles.

What is established (public sources: the Hygon MIG Operations page and the detector of
gpustack/gpustack-operator, gpustack/runtime's ``pydmi``; see :mod:`.dmi` for the library calls):

* The mode belongs to the **node**: ``hy-smi -mig 1`` takes no device and the library's query
  (``nvmlGetSystemMigMode``) no handle, so it is read once per pass and every DCU of the node answers
  alike. A partitioned node serves only partitions: with the mode on, a container given the device
  nodes but no instance finds no device at all, so its DCUs advertise neither whole-card capacity
  nor logical slices -- ``logicalSliced.count 0`` and the partition profiles (``physicalSliced``),
  as NVIDIA's MIG cards (``hygon.com/dcu.partitioned.mig-2g.15gb``).
* The profiles are the driver's, never computed: per DCU (reached by its PCI address) the
  GPU-instance profile of each width 1..4 slices, with the legal placements of each on an empty
  card. A width the card does not offer is an ordinary gap (measured cards offer 1, 2 and 4 slices).
  A profile is published only with at least one placement of positive length (its memory-slice
  span is that length -- the driver's answer, never derived); a profile whose name cannot be a
  resource-name segment, or two that normalise to one name but disagree, are withheld. Measured on
  a 4-slice, 80 CU, 65520 MiB card: ``2g.15gb`` (1 slice, 20 CU, 16380 MiB, 4 per card, placements
  0:1 1:1 2:1 3:1), ``4g.31gb`` (2 slices, 40 CU, 32760 MiB, 2, 0:2 2:2), ``8g.63gb`` (4, 80, 65520,
  1, 0:4).
* While the mode is on the HSA runtime shows a process at most one partition, so the card's
  compute-unit count is taken from its profiles: an instance's CUs times the instances that fill the
  card (every profile of a measured card agreed), the largest product.
* A node whose driver has no Multi-Instance library (the ordinary Hygon node: it ships only with a
  driver installed with virtualization support) is not partitioned -- an answer, not a failure.

What is decided here, where the sources leave it open:

* **A mode that cannot be read fails closed**: every DCU of the node offers neither logical slices
  nor partitions, logged (the reference detector does the same: both wrong guesses cost a workload,
  and "neither" leaves a pending Pod rather than a failing one). ``NOT_SUPPORTED`` -- the header's
  "no device in the system supports MIG mode" -- is an answer: not partitioned, logical slicing as
  before (the reference treats it as unreadable; the header says what it means).
* A DCU the library cannot reach by its PCI address, or that offers no publishable profile, on a
  partitioned node: ``logicalSliced.count 0`` and no partition capability (it can serve nothing).
* ``/etc/dmi_mig_config`` (the driver's registry: ``dev<N>`` one PCI address per card, ``gi/``,
  ``ci/`` one file per live instance) is the allocator's -- it is where a partition's identity
  lives and what a container is given -- and is not read by detection: the mode and the profiles
  come from the library, as in the reference detector. The DaemonSet mounts it writable because the
  library writes it when it creates an instance (supplement §2.3).
* The library's profile names are taken to carry NVML's ``"MIG "`` prefix when they do (stripped
  either way), as the reference's normalisation does.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

from gpustack_operator.host import HostRoot
from gpustack_operator.host.libs import LibraryLoadError, find_library, load_library
from gpustack_operator.ledger.models import (
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
)
from gpustack_operator.manufacturers import migprofiles
from gpustack_operator.manufacturers.hygon.dmi import (
    ABSENT,
    API_UNAVAILABLE,
    DEVICE_MIG_ENABLE,
    ERROR_NOT_SUPPORTED,
    GPU_INSTANCE_PROFILE_COUNT,
    LIBRARY,
    Dmi,
    DmiError,
    GpuInstanceProfile,
    MissingSymbolError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeMode:
    """The node's partition mode: ``enabled`` when ``known``; ``reason`` says how it was read, or why
    it could not be."""

    known: bool
    enabled: bool
    reason: str
    dmi: Dmi | None = None  # the loaded library, when the mode is on


@dataclass(frozen=True)
class CardPartitions:
    """What one DCU offers on a partitioned node: its partition capability (``None``: none) and the
    compute units its profiles imply (``None``: they imply none)."""

    sliced: AcceleratorPhysicalSliced | None
    cores: int | None


def read_mode(view: HostRoot) -> NodeMode:
    """The node's mode, read through ``libhydmi_mig`` found in the node view (never raises)."""
    path = find_library(view, LIBRARY)
    if path is None:
        return NodeMode(True, False, "no libhydmi_mig.so (the driver has no Multi-Instance support)")
    try:
        dmi = Dmi(load_library(path))
    except LibraryLoadError as exc:
        return NodeMode(True, False, f"the Multi-Instance library would not load ({exc})")
    try:
        current, _pending = dmi.system_mig_mode()
    except MissingSymbolError:
        return NodeMode(True, False, f"{path} exports no nvmlGetSystemMigMode")
    except DmiError as exc:
        if exc.code in API_UNAVAILABLE:
            return NodeMode(True, False, f"the Multi-Instance API is unavailable: {exc}")
        if exc.code == ERROR_NOT_SUPPORTED:
            return NodeMode(True, False, f"no DCU of this node supports MIG mode ({exc})")
        return NodeMode(False, False, f"the node's MIG mode could not be read: {exc}")
    if current == DEVICE_MIG_ENABLE:
        return NodeMode(True, True, f"MIG mode is on ({path})", dmi)
    return NodeMode(True, False, f"MIG mode is off (current mode {current})")


def card_partitions(dmi: Dmi, bus_id: str) -> CardPartitions:
    """One DCU's partition profiles, reached by its PCI address (never raises; what it withholds is
    logged)."""
    try:
        handle = dmi.handle_by_pci_bus_id(bus_id)
    except DmiError as exc:
        log.error(
            "hygon: the DCU at %s cannot be reached through the Multi-Instance library (%s): it offers no "
            "partition even though the node is in MIG mode",
            bus_id,
            exc,
        )
        return CardPartitions(None, None)
    probed = probe_profiles(dmi, handle, bus_id)
    profiles = []
    for info in probed:
        profile = publishable(dmi, handle, info, bus_id)
        if profile is not None:
            profiles.append(profile)
    kept, divergent = migprofiles.unique_by_name(profiles)
    for name in divergent:
        log.warning("hygon: %s: two profiles named %s disagree; both withheld", bus_id, name)
    cores = max((p.compute_units * p.instances for p in probed), default=0)
    return CardPartitions(migprofiles.physical_sliced(kept), cores or None)


def probe_profiles(dmi: Dmi, handle: ctypes.c_void_p, bus_id: str) -> list[GpuInstanceProfile]:
    """The profile of each width the card offers; a width it disclaims is skipped, one it could not
    answer for is logged (the card's inventory is then short)."""
    probed = []
    for index in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            probed.append(dmi.gpu_instance_profile(handle, index))
        except DmiError as exc:
            if exc.code not in ABSENT:
                log.error(
                    "hygon: %s: the %d-slice profile could not be read (%s); it is not offered", bus_id, index + 1, exc
                )
    return probed


def publishable(
    dmi: Dmi, handle: ctypes.c_void_p, info: GpuInstanceProfile, bus_id: str
) -> AcceleratorPhysicalSlicedProfile | None:
    """The published form of one profile, or ``None`` (logged) when it cannot be requested: its name
    is no resource-name segment, its placements cannot be read, or it has none of positive length."""
    name = migprofiles.profile_name(info.name)
    if name is None:
        log.info("hygon: %s: profile %d named %r yields no resource name; not offered", bus_id, info.id, info.name)
        return None
    try:
        placements = dmi.gpu_instance_placements(handle, info.id)
    except DmiError as exc:
        log.error("hygon: %s: profile %s withheld, its placements are unreadable: %s", bus_id, name, exc)
        return None
    if not placements or placements[0][1] <= 0:
        log.info("hygon: %s: profile %s has no legal placement, so its memory-slice span is unknown", bus_id, name)
        return None
    return AcceleratorPhysicalSlicedProfile(
        name=name,
        memory_mib=info.memory_mib,
        compute_slices=info.slices,
        memory_slices=placements[0][1],
        count=info.instances,
        placements=[AcceleratorPlacement(start=s, length=n) for s, n in placements],
    )
