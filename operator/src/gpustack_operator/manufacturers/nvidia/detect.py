"""NVIDIA detection over NVML.

The pass (spec "Detection-failure rules"):

* the PCI check first: a scan that cannot vouch for vendor ``10de`` is ``Unmeasured``; a bus with no
  NVIDIA accelerator is ``Detected([])`` without touching the library (``--no-pci-check`` skips
  both);
* no ``libnvidia-ml.so.1``, a library that will not load, or ``nvmlInit`` refusing (e.g. "Driver
  Not Loaded": the user-space driver is installed, the kernel module is not) → ``Detected([])``;
* NVML initialised but the device count failed → ``Unmeasured``: it says nothing about the cards;
* a device whose handle, UUID, name, PCI info or memory cannot be read is dropped with a warning
  (never identified by its PCI address);
* everything else a device may not answer (compute capability, cores, minor number, ECC, MIG) is
  left unset.

Per device, in NVML's enumeration order (always PCI bus order): the UUID is the accelerator id,
``physicalIndexes`` is ``[NVML index]`` (what ``nvidia-smi -i`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
ordinals use), memory is ``total >> 20`` MiB with the GDDR ECC carve-out restored (reference rule), the
runtime version is the CUDA driver API version (``12.4``), the family comes from the compute
capability (``nvmlDeviceGetArchitecture`` when that is unreadable). A card whose MIG mode is
currently enabled is hard-partitioned: it reports its MIG profiles (``physicalSliced``) and a logical
slice count of 0; a card whose MIG mode is off, pending or not supported reports the HAMi-core
logical slicing (128 slices, cores overcommit); a card whose MIG mode could not be read for another
reason reports neither (fail closed, logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpustack_operator.ledger.models import (
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
)
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.base import DetectContext, Detected, DetectOutcome, Dropped, Unmeasured
from gpustack_operator.manufacturers.groups import Found, build_groups
from gpustack_operator.manufacturers.nvidia import values
from gpustack_operator.manufacturers.nvidia.nvml import (
    GPU_INSTANCE_PROFILE_COUNT,
    GpuInstanceProfile,
    Handle,
    Nvml,
    NvmlError,
    NvmlUnavailableError,
    open_nvml,
)

log = logging.getLogger(__name__)

MIG_ENABLED = 1


def pci_gate(ctx: DetectContext) -> DetectOutcome | None:
    """The PCI check (:func:`libbackend.pci_gate`): an outcome when it settles the pass, ``None`` when
    NVML must be asked. A scan that cannot vouch for ``10de`` is ``Unmeasured`` here, NVML unasked."""
    early, scan_problem = libbackend.pci_gate(ctx, log, "NVIDIA", "NVML")
    return Unmeasured(scan_problem) if scan_problem else early


def detect(ctx: DetectContext) -> DetectOutcome:
    gate = pci_gate(ctx)
    if gate is not None:
        return gate
    drops: list[Dropped] = []
    try:
        with open_nvml(ctx.view) as nvml:
            found = enumerate_devices(nvml, drops)
    except NvmlUnavailableError as exc:
        log.info("nvidia: %s; reporting no NVIDIA accelerator", exc.reason)
        return Detected([], driver=exc.reason)
    except NvmlError as exc:
        return Unmeasured(f"NVML initialised but could not enumerate the devices: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings), dropped=tuple(drops))


def enumerate_devices(nvml: Nvml, drops: list[Dropped] | None = None) -> list[Found]:
    """Every identifiable device in enumeration order (the dropped ones recorded in ``drops``);
    :class:`NvmlError` only for the count."""
    count = nvml.device_count()
    driver = _optional(nvml.driver_version)
    cuda = _optional(nvml.cuda_driver_version)
    runtime = values.cuda_version_text(cuda) if cuda is not None else None
    found = []
    for i in range(count):
        item = read_device(nvml, i, driver, runtime, drops)
        if item is not None:
            found.append(item)
    return found


def read_device(
    nvml: Nvml, i: int, driver: str | None, runtime: str | None, drops: list[Dropped] | None = None
) -> Found | None:
    """One device, or ``None`` (logged, recorded in ``drops``) when its identity cannot be read."""
    what = "its handle"
    try:
        h = nvml.handle(i)
        what = "its UUID"
        uuid = nvml.uuid(h)
        what = "its name"
        name = nvml.name(h)
        what = "its PCI info"
        pci = nvml.pci_info(h)
        what = "its memory"
        memory = nvml.memory(h)
    except NvmlError as exc:
        log.warning(
            "nvidia: dropped the device at NVML index %d: %s (a device is never identified by its PCI address)",
            i,
            exc,
        )
        if drops is not None:
            drops.append(Dropped(f"NVML index {i}", f"{what} could not be read: {exc}"))
        return None
    index = _optional(lambda: nvml.index(h))
    memory_mib = _memory_mib(nvml, h, values.mib(memory.total))
    cc = _optional(lambda: nvml.compute_capability(h))
    mig = _optional(lambda: nvml.mig_mode(h))
    minor = _optional(lambda: nvml.minor_number(h))
    found = Found(
        uuid=uuid,
        name=name,
        memory_mib=memory_mib,
        pci_bus_id=values.bus_id_of(pci.bus_id, pci.bus_id_legacy, pci.domain, pci.bus, pci.device),
        physical_indexes=[i if index is None else index],
        cores=_optional(lambda: nvml.num_cores(h)),
        driver_version=driver,
        runtime_version=runtime,
        compute_capability=values.compute_capability_text(*cc) if cc else None,
        family=_family(nvml, h, cc),
        unhealthy=bool(_optional(lambda: nvml.uncorrected_volatile_dram_errors(h))),
        extra={
            "cuda_major": values.cuda_major(runtime),
            "minor_number": minor,
            "mig_mode": None if mig is None else {"current": mig[0], "pending": mig[1]},
        },
    )
    found.logical_sliced, found.physical_sliced = _slicing(nvml, h, memory_mib, mig)
    return found


def _family(nvml: Nvml, h: Handle, cc: tuple[int, int] | None) -> str | None:
    """From the compute capability (the reference rule); the architecture when that is unreadable."""
    family = values.family_of_compute_capability(*cc) if cc else None
    if family is None:
        arch = _optional(lambda: nvml.architecture(h))
        family = values.family_of_architecture(arch) if arch is not None else None
    return family


def _slicing(
    nvml: Nvml, h: Handle, memory_mib: int, mig: tuple[int, int] | None
) -> tuple[AcceleratorLogicalSliced | None, AcceleratorPhysicalSliced | None]:
    """MIG currently on: the MIG profiles and a logical count of 0 (Devices CRD: "0 when MIG
    enabled"). MIG off or pending, or not supported (a card without MIG): HAMi-core logical slicing.
    A MIG mode that could not be read for any other reason fails closed -- neither, logged: which
    family the card can serve is exactly what the unread mode decides, and HAMi-core slices on a card
    in MIG mode are capacity no container can be given."""
    if mig is None:
        failure = _mig_mode_failure(nvml, h)
        if failure is not None:
            log.error(
                "nvidia: the MIG mode of %s could not be read (%s); it offers neither logical slices nor MIG "
                "partitions until it can be read",
                _optional(lambda: nvml.uuid(h)) or "a device",
                failure,
            )
            return None, None
    elif mig[0] == MIG_ENABLED:
        profiles = read_profiles(nvml, h, memory_mib)
        physical = AcceleratorPhysicalSliced(profiles=profiles, count=max((p.count for p in profiles), default=0))
        return AcceleratorLogicalSliced(count=0), physical
    return AcceleratorLogicalSliced(count=values.LOGICAL_SLICE_COUNT, cores_percentage_overcommit=True), None


def _mig_mode_failure(nvml: Nvml, h: Handle) -> NvmlError | None:
    """Why the MIG mode of ``h`` is unreadable, asked again (``read_device`` keeps only "no answer"):
    ``None`` when NVML says the card has no MIG (not supported, or a library without the call)."""
    try:
        nvml.mig_mode(h)
    except NvmlError as exc:
        return None if exc.unsupported else exc
    return None


def read_profiles(nvml: Nvml, h: Handle, card_mib: int) -> list[AcceleratorPhysicalSlicedProfile]:
    """The card's MIG GPU-instance profiles GPUStack offers, in probe order, one per name."""
    probed: list[GpuInstanceProfile] = []
    for probe_index in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            probed.append(nvml.gpu_instance_profile(h, probe_index))
        except NvmlError as exc:
            if not exc.unsupported:
                log.debug("nvidia: GPU instance profile %#x: %s", probe_index, exc)
    return derive_profiles(probed, card_mib, lambda pid: _placements(nvml, h, pid))


def derive_profiles(
    probed: list[GpuInstanceProfile],
    card_mib: int,
    placements_of: Callable[[int], list[tuple[int, int]]] | None = None,
) -> list[AcceleratorPhysicalSlicedProfile]:
    """Filter (supplement §5.6), name and measure the probed profiles; the first of a name wins.

    ``placements_of(profile_id)`` gives a profile's legal empty-card placements (by the probed
    profile id, which tells apart the same-slice-count profiles, e.g. ``1g.10gb`` and ``1g.20gb``).
    """
    seen: set[str] = set()
    profiles = []
    for info in probed:
        if not values.is_exposed_profile(info.name, info.probe_index):
            continue
        mem_slices = values.memory_slices(info.memory_mib, card_mib)
        name = info.name or values.profile_name_from_geometry(info.slice_count, mem_slices, card_mib)
        if name in seen:
            continue
        seen.add(name)
        slots = placements_of(info.id) if placements_of is not None else []
        profiles.append(
            AcceleratorPhysicalSlicedProfile(
                name=name,
                memory_mib=info.memory_mib,
                compute_slices=info.slice_count,
                memory_slices=mem_slices,
                count=info.instance_count,
                placements=[AcceleratorPlacement(start=s, length=n) for s, n in slots],
            )
        )
    return profiles


def _placements(nvml: Nvml, h: Handle, profile_id: int) -> list[tuple[int, int]]:
    try:
        return nvml.gpu_instance_placements(h, profile_id)
    except NvmlError as exc:
        log.debug("nvidia: placements of GPU instance profile %d: %s", profile_id, exc)
        return []


def _memory_mib(nvml: Nvml, h: Handle, reported_mib: int) -> int:
    width = _optional(lambda: nvml.memory_bus_width(h))
    ecc = _optional(lambda: nvml.ecc_mode(h))
    return values.restore_ecc_carveout(reported_mib, width, ecc is not None and ecc[0] == 1)


def _optional[T](read: Callable[[], T]) -> T | None:
    """A reading the device may not offer: ``None`` (logged at debug) when NVML refuses it."""
    try:
        return read()
    except NvmlError as exc:
        if not exc.unsupported:
            log.debug("nvidia: %s", exc)
        return None
