"""Cambricon detection and usage monitor over CNDev (supplement §1.6, §2.7, §4.5).

Failure semantics (spec "Detection-failure rules"): no Cambricon function on the bus, no
``libcndev.so`` or a library that will not initialise → ``Detected([])``; the device count failing
after a good init → ``Unmeasured``; one card whose uuid or name cannot be read → dropped with a
warning (never identified by its PCI address).

What is advertised: logical slicing on every card (sMLU capacity is advertised even with sMLU mode
off, so the allocator can turn the mode on, §1.6): 16 slices per card — the per-card sMLU instance
cap the reference detector publishes ("operationally confirmed") — and no compute overcommit, because
sMLU partitions the MLU cores spatially. ``physical_indexes`` is the cnDev enumeration position, the
number ``cnmon -c`` and the ``/dev/cambricon_dev<N>`` nodes are expected to use (§1.4 positional
order: "Cambricon enumeration position").
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from gpustack_operator.host import HostPathError, HostRoot
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
from gpustack_operator.manufacturers.cambricon.cndev import CnDev, CndevError
from gpustack_operator.manufacturers.groups import Found, build_groups
from gpustack_operator.manufacturers.pcibackend import accelerator_devices

log = logging.getLogger(__name__)

NEUWARE_DEFAULT = "/usr/local/neuware"
LIBRARY = LibrarySpec(
    names=("libcndev.so",),
    env_roots=("NEUWARE_HOME",),
    default_dirs=(f"{NEUWARE_DEFAULT}/lib64", f"{NEUWARE_DEFAULT}/lib"),
)
SMLU_SLICES = 16

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_neuware_version(text: str) -> str | None:
    """The first ``x.y.z`` in Neuware's ``version.txt`` (its exact wording is not pinned; assumed)."""
    match = _VERSION.search(text)
    return ".".join(str(int(p)) for p in match.groups()) if match else None


def read_neuware_version(host: HostRoot, environ_home: str | None) -> str | None:
    """The host's Neuware toolkit version, read through the host root (``$NEUWARE_HOME/version.txt``)."""
    for home in dict.fromkeys([environ_home or "", NEUWARE_DEFAULT]):
        if not home:
            continue
        try:
            text = host.read_optional(f"{home.rstrip('/')}/version.txt")
        except HostPathError as exc:
            log.debug("cambricon: %s", exc)
            continue
        if text is not None:
            return parse_neuware_version(text)
    return None


def mlu_id(raw_uuid: str) -> str:
    """cnDev reports the bare uuid; the accelerator id is ``MLU-<uuid>`` (the reference binding's form)."""
    return raw_uuid if raw_uuid.startswith("MLU-") else f"MLU-{raw_uuid}"


def pci_gate(ctx: DetectContext) -> tuple[DetectOutcome | None, str | None]:
    """The PCI check: ``(outcome to return at once, why the scan cannot vouch for this vendor)``.

    A scan that cannot vouch does not answer "no hardware": the library is asked instead, and if it
    cannot answer either, the pass is unmeasured rather than empty.
    """
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if not accelerator_devices(ctx):
        log.debug("cambricon: no Cambricon accelerator on the PCI bus; CNDev not loaded")
        return Detected([]), None
    return None, None


@contextmanager
def cndev_session(ctx: DetectContext) -> Iterator[CnDev | str]:
    """An initialised CNDev, or the reason there is none (absent, unloadable, init refused)."""
    path = find_library(ctx.host, LIBRARY)
    if path is None:
        yield "libcndev.so not found (NEUWARE_HOME, LD_LIBRARY_PATH, /usr/local/neuware/lib64)"
        return
    try:
        cn = CnDev(load_library(path))
        cn.init()
    except (LibraryLoadError, CndevError) as exc:
        yield f"CNDev at {path} did not initialise: {exc}"
        return
    try:
        yield cn
    finally:
        try:
            cn.release()
        except CndevError as exc:
            log.debug("cambricon: %s", exc)


def _read_one(cn: CnDev, index: int) -> tuple[int, str, str] | None:
    """(handle, accelerator id, name), or ``None`` when the card's identity cannot be read."""
    try:
        handle = cn.handle(index)
        uuid = cn.uuid(handle)
        name = cn.card_name(handle)
    except CndevError as exc:
        log.warning("cambricon: card %d dropped, its identity could not be read: %s", index, exc)
        return None
    if not uuid or not name or name == "Unknown":
        log.warning("cambricon: card %d dropped, CNDev reports no uuid/name (%r, %r)", index, uuid, name)
        return None
    return handle, mlu_id(uuid), name


def read_found(cn: CnDev, ctx: DetectContext) -> list[Found]:
    """Every card CNDev enumerates, in its order. Raises :class:`CndevError` if the count fails."""
    count = cn.device_count()
    runtime = read_neuware_version(ctx.host, os.environ.get("NEUWARE_HOME"))
    found: list[Found] = []
    for index in range(count):
        ident = _read_one(cn, index)
        if ident is None:
            continue
        handle, uuid, name = ident
        try:
            memory_mib, _ = cn.memory_mib(handle)
        except CndevError as exc:
            log.warning("cambricon: card %d (%s) dropped, its memory could not be read: %s", index, uuid, exc)
            continue
        try:
            bus = cn.pci_bus_id(handle)
        except CndevError as exc:
            log.warning("cambricon: card %d (%s) has no PCI address: %s", index, uuid, exc)
            bus = ""
        try:
            major, minor, _build = cn.driver_version(handle)
            driver: str | None = f"{major}.{minor}"
        except CndevError as exc:
            log.info("cambricon: card %d driver version unreadable: %s", index, exc)
            driver = None
        found.append(
            Found(
                uuid=uuid,
                name=name,
                memory_mib=memory_mib,
                pci_bus_id=bus,
                physical_indexes=[index],
                driver_version=driver,
                runtime_version=runtime,
                logical_sliced=AcceleratorLogicalSliced(count=SMLU_SLICES, cores_percentage_overcommit=False),
            )
        )
    return found


def detect(ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return early
    with cndev_session(ctx) as cn:
        if isinstance(cn, str):
            log.info("cambricon: %s", cn)
            return Unmeasured(f"{scan_problem}; and {cn}") if scan_problem else Detected([])
        try:
            found = read_found(cn, ctx)
        except CndevError as exc:
            return Unmeasured(f"CNDev initialised but could not enumerate the cards: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings))


def _sample(cn: CnDev, index: int) -> AcceleratorMetrics | None:
    ident = _read_one(cn, index)
    if ident is None:
        return None
    handle, uuid, _name = ident
    try:
        total, used = cn.memory_mib(handle)
    except CndevError as exc:
        log.warning("cambricon: card %d (%s) not sampled, memory unreadable: %s", index, uuid, exc)
        return None
    sample = AcceleratorMetrics(
        id=uuid,
        memory=total,
        memory_usage=used,
        memory_utilization=round(used * 100 / total) if total > 0 else None,
    )
    for field, read in (
        ("cores_utilization", cn.core_utilization),
        ("temperature", cn.chip_temperature),
        ("power_usage", cn.power_watts),
    ):
        try:
            setattr(sample, field, read(handle))
        except CndevError as exc:
            log.debug("cambricon: card %d %s unreadable: %s", index, field, exc)
    return sample


def monitor(ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return Measured([])
    with cndev_session(ctx) as cn:
        if isinstance(cn, str):
            return Unmeasured(f"{scan_problem}; and {cn}") if scan_problem else Measured([])
        try:
            count = cn.device_count()
        except CndevError as exc:
            return Unmeasured(f"CNDev initialised but could not enumerate the cards: {exc}")
        samples = [s for i in range(count) if (s := _sample(cn, i)) is not None]
    return Measured(samples)
