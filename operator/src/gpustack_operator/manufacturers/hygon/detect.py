"""Hygon DCU detection and monitor, from the hydcu driver's sysfs.

Hygon's DCU driver (``hydcu``, ``hycu`` on newer releases) is a fork of ``amdgpu`` and publishes the
same KFD topology and DRM device files, so the shared reader (:mod:`..kfd`) serves it unchanged.
What is Hygon's own: the product names (by PCI device id), where the driver and DTK versions are
recorded, the logical-slicing offer, and the node's partition ("MIG") mode, which decides between the
two families (:mod:`.partition`, read through ``libhydmi_mig``, :mod:`.dmi`).
"""

from __future__ import annotations

import logging

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import AcceleratorLogicalSliced, AcceleratorPhysicalSlicedProfile, DevicesGroup
from gpustack_operator.manufacturers import kfd, migprofiles
from gpustack_operator.manufacturers.base import DetectContext, Detected, DetectOutcome, MonitorOutcome
from gpustack_operator.manufacturers.hygon import partition

log = logging.getLogger(__name__)

# hy-virtual slicing (vdev.conf + DTK/hyhal): at most 4 slices per DCU (the product default,
# reference rules §9 / supplement §1.3), and each slice gets a disjoint CU bitmask, so compute is
# partitioned rather than overcommitted.
LOGICAL_SLICED = AcceleratorLogicalSliced(count=4, cores_percentage_overcommit=False)

# The driver module is hydcu, renamed hycu in newer DCU driver releases.
DRIVER_VERSION_FILES = ["/sys/module/hycu/version", "/sys/module/hydcu/version"]

# DTK is installed at /opt/dtk (a link to /opt/dtk-<release>); its env.sh exports ROCM_PATH.
DTK_VARIABLES = ("ROCM_HOME", "ROCM_PATH")
DTK_DEFAULT = ("/opt/dtk", "/opt/rocm")


def name_of(ctx: DetectContext, acc: kfd.KfdAccelerator) -> str:
    """The manufacturer's product table by PCI device id, then the board's ``product_name``."""
    device = f"{acc.gpu.device_id:04x}"
    return ctx.manufacturer.identity.products.get(device) or acc.drm.product_name or ""


def driver_version(host: HostRoot) -> str | None:
    return kfd.first_line(host, DRIVER_VERSION_FILES)


def runtime_version(host: HostRoot) -> str | None:
    """The DTK release from ``<ROCM_HOME|ROCM_PATH|/opt/dtk|/opt/rocm>/.info/version``, ``major.minor``."""
    return kfd.info_version(host, kfd.toolkit_homes(DTK_VARIABLES, DTK_DEFAULT))


VENDOR = kfd.KfdVendor(
    name_of=name_of,
    family_of=kfd.family_name,
    driver_version=driver_version,
    runtime_version=runtime_version,
    logical_sliced=LOGICAL_SLICED,
    # the reference samples RSMI's current temperature of the first sensor (edge)
    temperature_labels=("edge", "junction"),
)


def detect(ctx: DetectContext) -> DetectOutcome:
    """The KFD pass (:func:`kfd.detect`), then the node's partition mode applied to what it found
    (:mod:`.partition`): the mode is read only when there is a DCU to apply it to."""
    outcome = kfd.detect(ctx, VENDOR)
    if isinstance(outcome, Detected) and any(g.accelerators for g in outcome.groups):
        apply_partition_mode(outcome.groups, partition.read_mode(ctx.view))
    return outcome


def apply_partition_mode(groups: list[DevicesGroup], mode: partition.NodeMode) -> None:
    """Set what each DCU offers by the node's mode (in place): not partitioned -- the logical slicing
    the KFD pass gave it; partitioned -- ``logicalSliced.count 0`` and its partition profiles, the
    group's cores from the profiles; mode unknown -- neither (fail closed)."""
    if mode.known and not mode.enabled:
        log.debug("hygon: %s; logical slicing", mode.reason)
        return
    if not mode.known or mode.dmi is None:
        log.error("hygon: %s; its DCUs offer neither logical slices nor partitions until it can be read", mode.reason)
        for accelerator in (a for g in groups for a in g.accelerators):
            accelerator.status.logical_sliced = None
            accelerator.status.physical_sliced = None
        return
    log.info("hygon: %s; the DCUs offer partitions only", mode.reason)
    for group in groups:
        profile_cores = []
        for accelerator in group.accelerators:
            card = partition.card_partitions(mode.dmi, accelerator.topology.pci_bus_id)
            accelerator.status.logical_sliced = AcceleratorLogicalSliced(count=0)
            accelerator.status.physical_sliced = card.sliced
            if card.cores:
                profile_cores.append(card.cores)
        if profile_cores:  # the card's compute units as its profiles state them (see .partition)
            group.cores = max(profile_cores)
        withhold_divergent_profiles(group)


def withhold_divergent_profiles(group: DevicesGroup) -> None:
    """A profile name the DCUs of one group do not agree on is withheld from all of them: a group
    publishes one offer per profile name, which would describe neither card."""
    first: dict[str, AcceleratorPhysicalSlicedProfile] = {}
    divergent: set[str] = set()
    for accelerator in group.accelerators:
        sliced = accelerator.status.physical_sliced
        for profile in sliced.profiles if sliced is not None else []:
            if first.setdefault(profile.name, profile) != profile:
                divergent.add(profile.name)
    if not divergent:
        return
    log.warning(
        "hygon: group %s: profiles %s differ between its DCUs; withheld", group.id, ", ".join(sorted(divergent))
    )
    for accelerator in group.accelerators:
        sliced = accelerator.status.physical_sliced
        if sliced is not None:
            kept = [p for p in sliced.profiles if p.name not in divergent]
            accelerator.status.physical_sliced = migprofiles.physical_sliced(kept)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return kfd.monitor(ctx, VENDOR)
