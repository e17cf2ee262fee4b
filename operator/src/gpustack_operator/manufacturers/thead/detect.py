"""T-Head (PPU) detection and usage monitor over HGML (supplement §1.6, §2.7, §4.5, §5.1).

Failure semantics: no T-Head function on the bus, no ``libhgml.so`` or an HGML that will not
initialise → ``Detected([])``; the device count failing after a good init → ``Unmeasured``; a PPU whose
uuid or name cannot be read → dropped with a warning.

Logical and physical slicing are mutually exclusive per accelerator (§5.1): a PPU whose current MIG
mode is on reports only its MIG-named partition profiles (``physicalSliced``; none at all when the
driver offers no usable profile), a PPU whose mode is off or not supported (``NOT_SUPPORTED``, or an
HGML without the MIG API) advertises logical slicing through the ``hggc_quota.so`` preload pair: a
128-slice pool with compute overcommit (the cap is a duty-cycle window), as the reference detector
publishes. A mode that could not be read for any other reason fails closed: that PPU offers neither
(logged), since advertising logical slices on a partitioned PPU sells capacity it cannot serve. On an
arm64 node there is no PPU at all (:mod:`..arch`). Profiles whose
name carries a ``+`` (media-engine/graphics variants) or cannot be a resource-name segment are not
offered; a profile whose placements cannot be read is withheld. ``physical_indexes`` is the device
minor number (``/dev/alixpu_ppu<N>``); when the driver cannot answer for it the enumeration index is
used and a warning logged (the contract's ``Found`` has no "absent" form).
"""

from __future__ import annotations

import ctypes
import logging

from gpustack_operator.host.libs import LibrarySpec
from gpustack_operator.ledger.models import (
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
)
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.arch import absent_on_arm64
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, Measured, MonitorOutcome
from gpustack_operator.manufacturers.groups import Found, normalize_bus_id
from gpustack_operator.manufacturers.libbackend import Device, Figure, Versions, optional, pci_address
from gpustack_operator.manufacturers.migprofiles import profile_name
from gpustack_operator.manufacturers.thead.hgml import (
    GPU_INSTANCE_PROFILE_COUNT,
    GpuInstanceProfile,
    Hgml,
    HgmlError,
    MissingSymbolError,
    runtime_version_string,
)

log = logging.getLogger(__name__)

LIBRARY = LibrarySpec(
    names=("libhgml.so",),
    env_roots=("PPU_HOME",),
    default_dirs=("/usr/local/PPU_SDK/lib", "/usr/local/PPU_SDK/lib64"),
)
LOGICAL_SLICES = 128
CARD_MEMORY_SLICES = 8  # fallback divisor when the driver enumerates no placement
NOT_SUPPORTED = 3


def sliced_profile(
    info: GpuInstanceProfile, placements: list[tuple[int, int]], card_mib: int
) -> AcceleratorPhysicalSlicedProfile | None:
    name = profile_name(info.name)
    if name is None:
        return None
    per_slice = card_mib // CARD_MEMORY_SLICES
    memory_slices = (
        placements[0][1]
        if placements and placements[0][1] > 0
        else ((info.memory_mib + per_slice // 2) // per_slice if per_slice else 0)
    )
    return AcceleratorPhysicalSlicedProfile(
        name=name,
        memory_mib=info.memory_mib,
        compute_slices=info.slice_count,
        memory_slices=memory_slices,
        count=info.instance_count,
        placements=[AcceleratorPlacement(start=s, length=n) for s, n in placements],
    )


def read_profiles(hg: Hgml, handle: ctypes.c_void_p, card_mib: int) -> list[AcceleratorPhysicalSlicedProfile]:
    profiles: dict[str, AcceleratorPhysicalSlicedProfile] = {}
    for pid in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = hg.gpu_instance_profile(handle, pid)
        except HgmlError:
            continue  # an id this PPU does not offer
        try:
            placements = hg.gpu_instance_placements(handle, pid)
        except HgmlError as exc:
            log.warning("thead: profile %d (%s) withheld, its placements are unreadable: %s", pid, info.name, exc)
            continue
        profile = sliced_profile(info, placements, card_mib)
        if profile is None:
            log.debug("thead: profile %d %r is not offered", pid, info.name)
            continue
        if profile.name in profiles and profiles[profile.name] != profile:
            log.warning("thead: two profiles named %s disagree; both withheld", profile.name)
            profiles[profile.name] = AcceleratorPhysicalSlicedProfile(name="")
            continue
        profiles[profile.name] = profile
    return [p for p in profiles.values() if p.name]


def slicing(
    hg: Hgml, handle: ctypes.c_void_p, uuid: str, card_mib: int
) -> tuple[AcceleratorLogicalSliced | None, AcceleratorPhysicalSliced | None]:
    try:
        mig_on, _pending = hg.mig_mode(handle)
    except MissingSymbolError:
        mig_on = False  # an HGML without the MIG API: a PPU that cannot be partitioned
    except HgmlError as exc:
        if exc.code != NOT_SUPPORTED:
            # fail closed: which family the PPU can serve is what the unread mode decides, so it
            # offers neither until the mode reads again (a pending Pod, not a failing one)
            log.error(
                "thead: the partitioning mode of %s could not be read (%s); it offers neither logical slices "
                "nor partitions until it can be read",
                uuid,
                exc,
            )
            return None, None
        mig_on = False
    if not mig_on:
        return AcceleratorLogicalSliced(count=LOGICAL_SLICES, cores_percentage_overcommit=True), None
    profiles = read_profiles(hg, handle, card_mib)
    if not profiles:
        return None, None
    return None, AcceleratorPhysicalSliced(profiles=profiles, count=max(p.count for p in profiles))


class HgmlBackend:
    """HGML as the shared library pass (:mod:`~gpustack_operator.manufacturers.libbackend`) reads it."""

    logger = log
    vendor = "thead"
    brand = "T-Head"
    api = "HGML"
    unit = "PPU"
    library = LIBRARY
    not_found = "libhgml.so not found (PPU_HOME, LD_LIBRARY_PATH, /usr/local/PPU_SDK/lib)"
    error = HgmlError
    figures: tuple[Figure[Hgml, ctypes.c_void_p], ...] = (
        # a PPU in MIG mode reports no utilisation
        Figure("cores_utilization", "utilization", lambda hg, d: hg.gpu_utilization(d.handle)),
        Figure("temperature", "temperature", lambda hg, d: hg.temperature(d.handle)),
        Figure("power_usage", "power", lambda hg, d: hg.power_mw(d.handle) // 1000),
    )

    def open(self, lib: ctypes.CDLL) -> Hgml:
        hg = Hgml(lib)
        hg.init()
        return hg

    def close(self, hg: Hgml) -> None:
        hg.shutdown()

    def count(self, hg: Hgml) -> int:
        return hg.device_count()

    def identify(self, hg: Hgml, index: int) -> Device[ctypes.c_void_p]:
        handle = hg.handle(index)
        return Device(index, handle, hg.uuid(handle), hg.name(handle))

    def memory_mib(self, hg: Hgml, device: Device[ctypes.c_void_p]) -> tuple[int, int]:
        total, used = hg.memory_bytes(device.handle)
        return total >> 20, used >> 20

    def versions(self, hg: Hgml, ctx: DetectContext) -> Versions:
        driver = optional(self, lambda: hg.driver_version() or None, "driver version")
        runtime = optional(self, lambda: runtime_version_string(hg.runtime_driver_version()), "HGGC driver version")
        return Versions(driver=driver, runtime=runtime)

    def found(
        self, hg: Hgml, ctx: DetectContext, device: Device[ctypes.c_void_p], memory_mib: int, versions: Versions
    ) -> Found:
        handle, index, uuid = device.handle, device.index, device.uuid
        bus = pci_address(self, device, lambda: normalize_bus_id(hg.pci_bus_id(handle)))
        try:
            physical = [hg.minor_number(handle)]
        except HgmlError as exc:
            log.warning(
                "thead: PPU %d (%s) has no minor number (%s); its enumeration index stands in", index, uuid, exc
            )
            physical = [index]
        cc = optional(self, lambda: hg.compute_capability(handle))
        cores = optional(self, lambda: hg.gpu_cores(handle))
        logical, physical_sliced = slicing(hg, handle, uuid, memory_mib)
        return Found(
            uuid=uuid,
            name=device.name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            physical_indexes=physical,
            cores=cores,
            driver_version=versions.driver,
            runtime_version=versions.runtime,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc and cc[0] > 0 else None,
            logical_sliced=logical,
            physical_sliced=physical_sliced,
        )


BACKEND = HgmlBackend()


# supplement "Where the preload libraries come from": a PPU only exists in an x86_64 host (see ..arch)
NOT_ON_ARM64 = "the PPU SDK is x86_64-only (a PPU only exists in an x86_64 host)"


def detect(ctx: DetectContext) -> DetectOutcome:
    return absent_on_arm64(ctx, NOT_ON_ARM64) or libbackend.detect(BACKEND, ctx)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    if absent_on_arm64(ctx, NOT_ON_ARM64) is not None:
        return Measured([])
    return libbackend.monitor(BACKEND, ctx)
