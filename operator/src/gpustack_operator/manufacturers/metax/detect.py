"""MetaX detection and usage monitor over MXSML (supplement §1.6, §2.7, §4.5).

Failure semantics: no MetaX function on the bus, no ``libmxsml.so``, or an MXSML that will not
initialise → ``Detected([])``; an initialised MXSML without ``mxSmlGetDeviceCount`` → ``Unmeasured``
(MXSML's count itself cannot fail: it returns the number); a GPU whose device info (uuid, name, BDF)
cannot be read → dropped with a warning. A virtual function (``mode == VF``) is not an accelerator of
this node and is skipped, as in the reference detector.

``physical_indexes`` are the DRM ``card<N>`` and ``renderD<N>`` numbers under the metax driver's
sysfs node (``/sys/module/metax/drivers/pci:metax/<BDF>/drm``): MetaX injects ``/dev/dri`` nodes
itself (§6.1), so those numbers are what travels. Logical slicing is advertised on every GPU (16 sGPU
subdevices per card, the driver's ``DefaultDevCnt``; compute is partitioned, not overcommitted).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
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
from gpustack_operator.manufacturers.groups import Found, build_groups, normalize_bus_id
from gpustack_operator.manufacturers.metax.mxsml import DeviceInfo, Mxsml, MxsmlError
from gpustack_operator.manufacturers.pcibackend import accelerator_devices

log = logging.getLogger(__name__)

LIBRARY = LibrarySpec(
    names=("libmxsml.so",),
    env_roots=("MACA_HOME",),
    default_dirs=("/opt/maca/lib", "/opt/maca/lib64", "/opt/mxdriver/lib"),
)
SGPU_SLICES = 16
DRM_DIRS = ("/sys/module/metax/drivers/pci:metax", "/sys/module/metax/drivers/pci:METAX")

_CARD = re.compile(r"^card(\d+)$")
_RENDER = re.compile(r"^renderD(\d+)$")
_FAMILY = re.compile(r"([CNG])\d{2,4}", re.IGNORECASE)


def parse_drm_nodes(entries: list[str]) -> list[int]:
    """``["card3", "renderD130", "controlD67"]`` → ``[3, 130]``; ``[]`` when there is no card node."""
    card = next((int(m.group(1)) for e in entries if (m := _CARD.match(e))), None)
    render = next((int(m.group(1)) for e in entries if (m := _RENDER.match(e))), None)
    if card is None:
        return []
    return [card] if render is None else [card, render]


def metax_family(name: str) -> str | None:
    """``MXC500`` → ``MXC``, ``MXN100`` → ``MXN``: the product series letter after the model prefix."""
    match = _FAMILY.search(name)
    return f"MX{match.group(1).upper()}" if match else None


def drm_indexes(host: HostRoot, bdf: str) -> list[int]:
    for base in DRM_DIRS:
        try:
            return parse_drm_nodes(host.listdir(f"{base}/{bdf}/drm"))
        except HostPathError:
            continue
    return []


def pci_gate(ctx: DetectContext) -> tuple[DetectOutcome | None, str | None]:
    """The PCI check: ``(outcome to return at once, why the scan cannot vouch for this vendor)``."""
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if not accelerator_devices(ctx):
        log.debug("metax: no MetaX accelerator on the PCI bus; MXSML not loaded")
        return Detected([]), None
    return None, None


@contextmanager
def mxsml_session(ctx: DetectContext) -> Iterator[Mxsml | str]:
    """An initialised MXSML, or the reason there is none."""
    path = find_library(ctx.host, LIBRARY)
    if path is None:
        yield "libmxsml.so not found (MACA_HOME, LD_LIBRARY_PATH, /opt/maca/lib)"
        return
    try:
        mx = Mxsml(load_library(path))
        mx.init()
    except (LibraryLoadError, MxsmlError) as exc:
        yield f"MXSML at {path} did not initialise: {exc}"
        return
    yield mx


def _identity(mx: Mxsml, index: int) -> DeviceInfo | None:
    try:
        info = mx.device_info(index)
    except MxsmlError as exc:
        log.warning("metax: GPU %d dropped, its identity could not be read: %s", index, exc)
        return None
    if info.virtual_function:
        log.info("metax: GPU %d (%s) is a virtual function, skipped", index, info.uuid)
        return None
    if not info.uuid or not info.name:
        log.warning("metax: GPU %d dropped, MXSML reports no uuid/name (%r, %r)", index, info.uuid, info.name)
        return None
    return info


def _optional(read: Callable[[], str], what: str) -> str | None:
    try:
        value = read()
    except MxsmlError as exc:
        log.info("metax: %s unreadable: %s", what, exc)
        return None
    return str(value).strip().removeprefix("v") or None


def read_found(mx: Mxsml, ctx: DetectContext) -> list[Found]:
    count = mx.device_count()
    driver = _optional(mx.driver_version, "driver version")
    runtime = _optional(mx.maca_version, "MACA version")
    found: list[Found] = []
    for index in range(count):
        info = _identity(mx, index)
        if info is None:
            continue
        try:
            total_kib, _ = mx.memory_kib(index)
        except MxsmlError as exc:
            log.warning("metax: GPU %d (%s) dropped, its memory could not be read: %s", index, info.uuid, exc)
            continue
        bus = normalize_bus_id(info.bdf) if info.bdf else ""
        found.append(
            Found(
                uuid=info.uuid,
                name=info.name,
                memory_mib=total_kib >> 10,
                pci_bus_id=bus,
                physical_indexes=(drm_indexes(ctx.host, bus) if bus else []) or [index],
                driver_version=driver,
                runtime_version=runtime,
                family=metax_family(info.name),
                logical_sliced=AcceleratorLogicalSliced(count=SGPU_SLICES, cores_percentage_overcommit=False),
            )
        )
    return found


def detect(ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return early
    with mxsml_session(ctx) as mx:
        if isinstance(mx, str):
            log.info("metax: %s", mx)
            return Unmeasured(f"{scan_problem}; and {mx}") if scan_problem else Detected([])
        try:
            found = read_found(mx, ctx)
        except MxsmlError as exc:
            return Unmeasured(f"MXSML initialised but could not enumerate the GPUs: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings))


def _sample(mx: Mxsml, index: int) -> AcceleratorMetrics | None:
    info = _identity(mx, index)
    if info is None:
        return None
    try:
        total_kib, used_kib = mx.memory_kib(index)
    except MxsmlError as exc:
        log.warning("metax: GPU %d (%s) not sampled, memory unreadable: %s", index, info.uuid, exc)
        return None
    total, used = total_kib >> 10, used_kib >> 10
    sample = AcceleratorMetrics(
        id=info.uuid,
        memory=total,
        memory_usage=used,
        memory_utilization=round(used * 100 / total) if total > 0 else None,
    )
    try:
        sample.cores_utilization = mx.xcore_usage(index)
    except MxsmlError as exc:
        log.debug("metax: GPU %d usage unreadable: %s", index, exc)
    try:
        sample.temperature = mx.hotspot_centidegrees(index) // 100
    except MxsmlError as exc:
        log.debug("metax: GPU %d temperature unreadable: %s", index, exc)
    try:
        sample.power_usage = sum(mx.board_power_mw(index)) // 1000
    except MxsmlError as exc:
        log.debug("metax: GPU %d power unreadable: %s", index, exc)
    return sample


def monitor(ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx)
    if early is not None:
        return Measured([])
    with mxsml_session(ctx) as mx:
        if isinstance(mx, str):
            return Unmeasured(f"{scan_problem}; and {mx}") if scan_problem else Measured([])
        try:
            count = mx.device_count()
        except MxsmlError as exc:
            return Unmeasured(f"MXSML initialised but could not enumerate the GPUs: {exc}")
        samples = [s for i in range(count) if (s := _sample(mx, i)) is not None]
    return Measured(samples)
