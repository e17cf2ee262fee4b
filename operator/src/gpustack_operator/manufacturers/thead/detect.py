"""T-Head (PPU) detection and usage monitor over HGML (supplement §1.6, §2.7, §4.5, §5.1).

Failure semantics: no T-Head function on the bus, no ``libhgml.so`` or an HGML that will not
initialise → ``Detected([])``; the device count failing after a good init → ``Unmeasured``; a PPU whose
uuid or name cannot be read → dropped with a warning.

Logical and physical slicing are mutually exclusive per accelerator (§5.1): a PPU whose current MIG
mode is on reports only its MIG-named partition profiles (``physicalSliced``; none at all when the
driver offers no usable profile), every other PPU — MIG off, unsupported, or unreadable (logged) —
advertises logical slicing through the ``hggc_quota.so`` preload pair: a 128-slice pool with compute
overcommit (the cap is a duty-cycle window), as the reference detector publishes. Profiles whose
name carries a ``+`` (media-engine/graphics variants) or cannot be a resource-name segment are not
offered; a profile whose placements cannot be read is withheld. ``physical_indexes`` is the device
minor number (``/dev/alixpu_ppu<N>``); when the driver cannot answer for it the enumeration index is
used and a warning logged (the contract's ``Found`` has no "absent" form).
"""

from __future__ import annotations

import ctypes
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from gpustack_operator.host.libs import LibraryLoadError, LibrarySpec, find_library, load_library
from gpustack_operator.ledger.models import (
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
)
from gpustack_operator.manufacturers.base import (
    AcceleratorMetrics,
    DetectContext,
    Detected,
    DetectOutcome,
    Measured,
    MonitorOutcome,
    Unmeasured,
)
from gpustack_operator.manufacturers.groups import Found, build_groups, normalize_bus_id
from gpustack_operator.manufacturers.pcibackend import accelerator_devices
from gpustack_operator.manufacturers.thead.hgml import (
    GPU_INSTANCE_PROFILE_COUNT,
    GpuInstanceProfile,
    Hgml,
    HgmlError,
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

_SEGMENT = re.compile(r"^[a-z0-9]([a-z0-9.\-]*[a-z0-9])?$")


def profile_name(raw: str) -> str | None:
    """The requestable name of a GPU-instance profile (``"MIG 1g.12gb"`` → ``"1g.12gb"``), or ``None``
    for a media/graphics variant (``+``) or a name that cannot be a resource-name segment."""
    name = raw.strip().removeprefix("MIG ").strip().lower()
    if not name or "+" in name or len(name) > 63 or not _SEGMENT.match(name):
        return None
    return name


def pci_gate(ctx: DetectContext) -> tuple[DetectOutcome | None, str | None]:
    """The PCI check: ``(outcome to return at once, why the scan cannot vouch for this vendor)``."""
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if not accelerator_devices(ctx):
        log.debug("thead: no T-Head accelerator on the PCI bus; HGML not loaded")
        return Detected([]), None
    return None, None


@contextmanager
def hgml_session(ctx: DetectContext) -> Iterator[Hgml | str]:
    """An initialised HGML, or the reason there is none; shut down afterwards."""
    path = find_library(ctx.host, LIBRARY)
    if path is None:
        yield "libhgml.so not found (PPU_HOME, LD_LIBRARY_PATH, /usr/local/PPU_SDK/lib)"
        return
    try:
        hg = Hgml(load_library(path))
        hg.init()
    except (LibraryLoadError, HgmlError) as exc:
        yield f"HGML at {path} did not initialise: {exc}"
        return
    try:
        yield hg
    finally:
        try:
            hg.shutdown()
        except HgmlError as exc:
            log.debug("thead: %s", exc)


def _identity(hg: Hgml, index: int) -> tuple[ctypes.c_void_p, str, str] | None:
    try:
        handle = hg.handle(index)
        uuid = hg.uuid(handle)
        name = hg.name(handle)
    except HgmlError as exc:
        log.warning("thead: PPU %d dropped, its identity could not be read: %s", index, exc)
        return None
    if not uuid or not name:
        log.warning("thead: PPU %d dropped, HGML reports no uuid/name (%r, %r)", index, uuid, name)
        return None
    return handle, uuid, name


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
    except HgmlError as exc:
        if exc.code != NOT_SUPPORTED:
            log.error(
                "thead: the partitioning mode of %s could not be read (%s); reported as not partitioned — if it "
                "is in fact on, the PPU advertises logical slicing it cannot serve",
                uuid,
                exc,
            )
        mig_on = False
    if not mig_on:
        return AcceleratorLogicalSliced(count=LOGICAL_SLICES, cores_percentage_overcommit=True), None
    profiles = read_profiles(hg, handle, card_mib)
    if not profiles:
        return None, None
    return None, AcceleratorPhysicalSliced(profiles=profiles, count=max(p.count for p in profiles))


def read_found(hg: Hgml, ctx: DetectContext) -> list[Found]:
    count = hg.device_count()
    try:
        driver: str | None = hg.driver_version() or None
    except HgmlError as exc:
        log.info("thead: driver version unreadable: %s", exc)
        driver = None
    try:
        runtime = runtime_version_string(hg.hggc_driver_version())
    except HgmlError as exc:
        log.info("thead: HGGC driver version unreadable: %s", exc)
        runtime = None
    found: list[Found] = []
    for index in range(count):
        ident = _identity(hg, index)
        if ident is None:
            continue
        handle, uuid, name = ident
        try:
            total, _ = hg.memory_bytes(handle)
        except HgmlError as exc:
            log.warning("thead: PPU %d (%s) dropped, its memory could not be read: %s", index, uuid, exc)
            continue
        memory_mib = total >> 20
        try:
            bus = normalize_bus_id(hg.pci_bus_id(handle))
        except HgmlError as exc:
            log.warning("thead: PPU %d (%s) has no PCI address: %s", index, uuid, exc)
            bus = ""
        try:
            physical = [hg.minor_number(handle)]
        except HgmlError as exc:
            log.warning(
                "thead: PPU %d (%s) has no minor number (%s); its enumeration index stands in", index, uuid, exc
            )
            physical = [index]
        try:
            major, minor = hg.compute_capability(handle)
            cc: str | None = f"{major}.{minor}" if major > 0 else None
        except HgmlError:
            cc = None
        try:
            cores: int | None = hg.gpu_cores(handle)
        except HgmlError:
            cores = None
        logical, physical_sliced = slicing(hg, handle, uuid, memory_mib)
        found.append(
            Found(
                uuid=uuid,
                name=name,
                memory_mib=memory_mib,
                pci_bus_id=bus,
                physical_indexes=physical,
                cores=cores,
                driver_version=driver,
                runtime_version=runtime,
                compute_capability=cc,
                logical_sliced=logical,
                physical_sliced=physical_sliced,
            )
        )
    return found


def detect(ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return early
    with hgml_session(ctx) as hg:
        if isinstance(hg, str):
            log.info("thead: %s", hg)
            return Unmeasured(f"{scan_problem}; and {hg}") if scan_problem else Detected([])
        try:
            found = read_found(hg, ctx)
        except HgmlError as exc:
            return Unmeasured(f"HGML initialised but could not enumerate the PPUs: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings))


def _sample(hg: Hgml, index: int) -> AcceleratorMetrics | None:
    ident = _identity(hg, index)
    if ident is None:
        return None
    handle, uuid, _ = ident
    try:
        total_b, used_b = hg.memory_bytes(handle)
    except HgmlError as exc:
        log.warning("thead: PPU %d (%s) not sampled, memory unreadable: %s", index, uuid, exc)
        return None
    total, used = total_b >> 20, used_b >> 20
    sample = AcceleratorMetrics(
        id=uuid, memory=total, memory_usage=used, memory_utilization=round(used * 100 / total) if total else None
    )
    try:
        sample.cores_utilization = hg.gpu_utilization(handle)
    except HgmlError as exc:
        log.debug("thead: PPU %d utilization unreadable (a MIG-mode PPU has none): %s", index, exc)
    try:
        sample.temperature = hg.temperature(handle)
    except HgmlError as exc:
        log.debug("thead: PPU %d temperature unreadable: %s", index, exc)
    try:
        sample.power_usage = hg.power_mw(handle) // 1000
    except HgmlError as exc:
        log.debug("thead: PPU %d power unreadable: %s", index, exc)
    return sample


def monitor(ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return Measured([])
    with hgml_session(ctx) as hg:
        if isinstance(hg, str):
            return Unmeasured(f"{scan_problem}; and {hg}") if scan_problem else Measured([])
        try:
            count = hg.device_count()
        except HgmlError as exc:
            return Unmeasured(f"HGML initialised but could not enumerate the PPUs: {exc}")
        samples = [s for i in range(count) if (s := _sample(hg, i)) is not None]
    return Measured(samples)
