"""Iluvatar detection and usage monitor over IXML (supplement §1.6, §2.7, §4.5).

Failure semantics: no Iluvatar function on the bus, no ``libixml.so`` or an IXML that will not
initialise → ``Detected([])``; the device count failing after a good init → ``Unmeasured``; a GPU
whose uuid or name cannot be read → dropped with a warning.

Logical slicing is advertised (§1.6: Iluvatar reuses HAMi-core on corex — "the pairing is advertised
and injected, and unvalidated in hardware"): the same 128-slice pool with compute overcommit the
HAMi-core NVIDIA path publishes, since the enforcer is the same library (an SM duty-cycle limit).
``physical_indexes`` is the device minor number (``/dev/iluvatar<N>``), the enumeration index when the
driver does not answer for it. The runtime version is the CUDA-compatible driver version corex
reports (``nvmlSystemGetCudaDriverVersion``), the compute capability its CUDA one.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from gpustack_operator.host.libs import LibraryLoadError, LibrarySpec, find_library, load_library
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
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
from gpustack_operator.manufacturers.iluvatar.ixml import Ixml, IxmlError, cuda_version_string
from gpustack_operator.manufacturers.pcibackend import accelerator_devices

log = logging.getLogger(__name__)

LIBRARY = LibrarySpec(
    names=("libixml.so",),
    env_roots=("COREX_HOME",),
    default_dirs=("/usr/local/corex/lib64", "/usr/local/corex/lib"),
)
HAMI_SLICES = 128


def pci_gate(ctx: DetectContext) -> tuple[DetectOutcome | None, str | None]:
    """The PCI check: ``(outcome to return at once, why the scan cannot vouch for this vendor)``."""
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if not accelerator_devices(ctx):
        log.debug("iluvatar: no Iluvatar accelerator on the PCI bus; IXML not loaded")
        return Detected([]), None
    return None, None


@contextmanager
def ixml_session(ctx: DetectContext) -> Iterator[Ixml | str]:
    """An initialised IXML, or the reason there is none; shut down afterwards."""
    path = find_library(ctx.host, LIBRARY)
    if path is None:
        yield "libixml.so not found (COREX_HOME, LD_LIBRARY_PATH, /usr/local/corex/lib64)"
        return
    try:
        ix = Ixml(load_library(path))
        ix.init()
    except (LibraryLoadError, IxmlError) as exc:
        yield f"IXML at {path} did not initialise: {exc}"
        return
    try:
        yield ix
    finally:
        try:
            ix.shutdown()
        except IxmlError as exc:
            log.debug("iluvatar: %s", exc)


def _identity(ix: Ixml, index: int) -> tuple[ctypes.c_void_p, str, str] | None:
    try:
        handle = ix.handle(index)
        uuid = ix.uuid(handle)
        name = ix.name(handle)
    except IxmlError as exc:
        log.warning("iluvatar: GPU %d dropped, its identity could not be read: %s", index, exc)
        return None
    if not uuid or not name:
        log.warning("iluvatar: GPU %d dropped, IXML reports no uuid/name (%r, %r)", index, uuid, name)
        return None
    return handle, uuid, name


def _system(ix: Ixml) -> tuple[str | None, str | None]:
    try:
        driver: str | None = ix.driver_version() or None
    except IxmlError as exc:
        log.info("iluvatar: driver version unreadable: %s", exc)
        driver = None
    try:
        runtime = cuda_version_string(ix.cuda_driver_version())
    except IxmlError as exc:
        log.info("iluvatar: CUDA-compatible driver version unreadable: %s", exc)
        runtime = None
    return driver, runtime


def read_found(ix: Ixml, ctx: DetectContext) -> list[Found]:
    count = ix.device_count()
    driver, runtime = _system(ix)
    found: list[Found] = []
    for index in range(count):
        ident = _identity(ix, index)
        if ident is None:
            continue
        handle, uuid, name = ident
        try:
            total, _ = ix.memory_bytes(handle)
        except IxmlError as exc:
            log.warning("iluvatar: GPU %d (%s) dropped, its memory could not be read: %s", index, uuid, exc)
            continue
        try:
            bus = normalize_bus_id(ix.pci_bus_id(handle))
        except IxmlError as exc:
            log.warning("iluvatar: GPU %d (%s) has no PCI address: %s", index, uuid, exc)
            bus = ""
        try:
            physical = [ix.minor_number(handle)]
        except IxmlError:
            physical = [index]
        try:
            major, minor = ix.compute_capability(handle)
            cc: str | None = f"{major}.{minor}" if major > 0 else None
        except IxmlError:
            cc = None
        found.append(
            Found(
                uuid=uuid,
                name=name,
                memory_mib=total >> 20,
                pci_bus_id=bus,
                physical_indexes=physical,
                driver_version=driver,
                runtime_version=runtime,
                compute_capability=cc,
                logical_sliced=AcceleratorLogicalSliced(count=HAMI_SLICES, cores_percentage_overcommit=True),
            )
        )
    return found


def detect(ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return early
    with ixml_session(ctx) as ix:
        if isinstance(ix, str):
            log.info("iluvatar: %s", ix)
            return Unmeasured(f"{scan_problem}; and {ix}") if scan_problem else Detected([])
        try:
            found = read_found(ix, ctx)
        except IxmlError as exc:
            return Unmeasured(f"IXML initialised but could not enumerate the GPUs: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings))


def _sample(ix: Ixml, index: int) -> AcceleratorMetrics | None:
    ident = _identity(ix, index)
    if ident is None:
        return None
    handle, uuid, _ = ident
    try:
        total_b, used_b = ix.memory_bytes(handle)
    except IxmlError as exc:
        log.warning("iluvatar: GPU %d (%s) not sampled, memory unreadable: %s", index, uuid, exc)
        return None
    total, used = total_b >> 20, used_b >> 20
    sample = AcceleratorMetrics(
        id=uuid, memory=total, memory_usage=used, memory_utilization=round(used * 100 / total) if total else None
    )
    try:
        sample.cores_utilization = ix.gpu_utilization(handle)
    except IxmlError as exc:
        log.debug("iluvatar: GPU %d utilization unreadable: %s", index, exc)
    try:
        sample.temperature = ix.temperature(handle)
    except IxmlError as exc:
        log.debug("iluvatar: GPU %d temperature unreadable: %s", index, exc)
    try:
        sample.power_usage = ix.power_mw(handle) // 1000
    except IxmlError as exc:
        log.debug("iluvatar: GPU %d power unreadable: %s", index, exc)
    return sample


def monitor(ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return Measured([])
    with ixml_session(ctx) as ix:
        if isinstance(ix, str):
            return Unmeasured(f"{scan_problem}; and {ix}") if scan_problem else Measured([])
        try:
            count = ix.device_count()
        except IxmlError as exc:
            return Unmeasured(f"IXML initialised but could not enumerate the GPUs: {exc}")
        samples = [s for i in range(count) if (s := _sample(ix, i)) is not None]
    return Measured(samples)
