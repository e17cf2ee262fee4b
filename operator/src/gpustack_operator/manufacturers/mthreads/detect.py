"""Moore Threads detection and usage monitor over MTML (supplement §1.6, §2.7, §6.1).

Failure semantics: no Moore Threads function on the bus, no ``libmtml.so`` or an MTML that will not
initialise → ``Detected([])``; the device count failing after a good init → ``Unmeasured``; a GPU whose
uuid or name cannot be read → dropped with a warning.

Logical slicing is advertised on every GPU through the host sGPU kernel module (``MTHREADS_QOS_*``,
§1.6): 16 slices per GPU, and no compute overcommit — the compute share is a scheduling weight, not a
hard cap, so there is nothing to overcommit (the reference detector's figures). ``physical_indexes``
is the MTML enumeration index (the number ``MTHREADS_VISIBLE_DEVICES`` takes). There is no toolkit
path variable for MTML in §4.5: the library comes with the driver (and the ``mthreads`` container
runtime), so the search is ``LD_LIBRARY_PATH`` then the distribution library directories (assumed).
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
from gpustack_operator.manufacturers.mthreads.mtml import Mtml, MtmlError
from gpustack_operator.manufacturers.pcibackend import accelerator_devices

log = logging.getLogger(__name__)

LIBRARY = LibrarySpec(
    names=("libmtml.so", "libmtml.so.2", "libmtml.so.1"),
    default_dirs=(
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/musa/lib",
    ),
)
SGPU_SLICES = 16


def pci_gate(ctx: DetectContext) -> tuple[DetectOutcome | None, str | None]:
    """The PCI check: ``(outcome to return at once, why the scan cannot vouch for this vendor)``."""
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if not accelerator_devices(ctx):
        log.debug("mthreads: no Moore Threads accelerator on the PCI bus; MTML not loaded")
        return Detected([]), None
    return None, None


@contextmanager
def mtml_session(ctx: DetectContext) -> Iterator[Mtml | str]:
    """An initialised MTML library object, or the reason there is none; shut down afterwards."""
    path = find_library(ctx.host, LIBRARY)
    if path is None:
        yield "libmtml.so not found (LD_LIBRARY_PATH, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib)"
        return
    try:
        mt = Mtml(load_library(path))
        mt.init()
    except (LibraryLoadError, MtmlError) as exc:
        yield f"MTML at {path} did not initialise: {exc}"
        return
    try:
        yield mt
    finally:
        try:
            mt.shutdown()
        except MtmlError as exc:
            log.debug("mthreads: %s", exc)


def _identity(mt: Mtml, index: int) -> tuple[ctypes.c_void_p, str, str] | None:
    try:
        device = mt.device(index)
        uuid = mt.uuid(device)
        name = mt.name(device)
    except MtmlError as exc:
        log.warning("mthreads: GPU %d dropped, its identity could not be read: %s", index, exc)
        return None
    if not uuid or not name:
        log.warning("mthreads: GPU %d dropped, MTML reports no uuid/name (%r, %r)", index, uuid, name)
        return None
    return device, uuid, name


def read_found(mt: Mtml, ctx: DetectContext) -> list[Found]:
    count = mt.device_count()
    try:
        driver: str | None = mt.driver_version() or None
    except MtmlError as exc:
        log.info("mthreads: driver version unreadable: %s", exc)
        driver = None
    found: list[Found] = []
    for index in range(count):
        ident = _identity(mt, index)
        if ident is None:
            continue
        device, uuid, name = ident
        try:
            total, _ = mt.memory_bytes(device)
        except MtmlError as exc:
            log.warning("mthreads: GPU %d (%s) dropped, its memory could not be read: %s", index, uuid, exc)
            continue
        try:
            bus = normalize_bus_id(mt.pci_sbdf(device))
        except MtmlError as exc:
            log.warning("mthreads: GPU %d (%s) has no PCI address: %s", index, uuid, exc)
            bus = ""
        try:
            cores: int | None = mt.gpu_cores(device)
        except MtmlError:
            cores = None
        found.append(
            Found(
                uuid=uuid,
                name=name,
                memory_mib=total >> 20,
                pci_bus_id=bus,
                physical_indexes=[index],
                cores=cores,
                driver_version=driver,
                logical_sliced=AcceleratorLogicalSliced(count=SGPU_SLICES, cores_percentage_overcommit=False),
            )
        )
    return found


def detect(ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return early
    with mtml_session(ctx) as mt:
        if isinstance(mt, str):
            log.info("mthreads: %s", mt)
            return Unmeasured(f"{scan_problem}; and {mt}") if scan_problem else Detected([])
        try:
            found = read_found(mt, ctx)
        except MtmlError as exc:
            return Unmeasured(f"MTML initialised but could not enumerate the GPUs: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings))


def _sample(mt: Mtml, index: int) -> AcceleratorMetrics | None:
    ident = _identity(mt, index)
    if ident is None:
        return None
    device, uuid, _ = ident
    try:
        total_b, used_b = mt.memory_bytes(device)
    except MtmlError as exc:
        log.warning("mthreads: GPU %d (%s) not sampled, memory unreadable: %s", index, uuid, exc)
        return None
    total, used = total_b >> 20, used_b >> 20
    sample = AcceleratorMetrics(
        id=uuid, memory=total, memory_usage=used, memory_utilization=round(used * 100 / total) if total else None
    )
    try:
        gpu = mt.gpu(device)
        sample.cores_utilization = mt.gpu_utilization(gpu)
        sample.temperature = mt.gpu_temperature(gpu)
    except MtmlError as exc:
        log.debug("mthreads: GPU %d utilization/temperature unreadable: %s", index, exc)
    try:
        sample.power_usage = mt.power_mw(device) // 1000
    except MtmlError as exc:
        log.debug("mthreads: GPU %d power unreadable: %s", index, exc)
    return sample


def monitor(ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return Measured([])
    with mtml_session(ctx) as mt:
        if isinstance(mt, str):
            return Unmeasured(f"{scan_problem}; and {mt}") if scan_problem else Measured([])
        try:
            count = mt.device_count()
        except MtmlError as exc:
            return Unmeasured(f"MTML initialised but could not enumerate the GPUs: {exc}")
        samples = [s for i in range(count) if (s := _sample(mt, i)) is not None]
    return Measured(samples)
