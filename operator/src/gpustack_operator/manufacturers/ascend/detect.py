"""Ascend detection and usage sampling through DCMI (device-discovery "Ascend: two DCMI API
generations", supplement §1.3).

The pass: the PCI check (no Ascend accelerator on the bus → nothing, no library loaded), then
libdcmi — V1 tried first, V2 when the driver refuses V1 — then every NPU the driver enumerates, in its
order. V1 walks cards × devices-in-card; V2 enumerates devices flat, each presented as a card holding
one device. ``physical_indexes`` is the driver's own addressing, in the slot order every consumer
reads it by: ``[physical id, dcmi card id (the device id on V2), device-in-card (0 on V2)]``.

Failure semantics (the detection-failure rules): no library, a library that will not load, or one
neither generation initialises is an empty answer; a failing enumeration after initialisation is
"could not measure". A device whose identity die cannot be read is dropped with a warning, never
identified by its PCI address (which repeats on every node); so is one whose PCI address, chip
name, memory or physical id cannot be read, as in the reference implementation.

On V2 the driver version is not read at all (V2 declares no such call; the ledger lacks it there,
even when the driver's ``version.info`` is on disk), and memory comes from the HBM query alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.ascend import soc
from gpustack_operator.manufacturers.ascend.dcmi import (
    NPU_TYPE,
    Dcmi,
    DcmiError,
    DcmiUnavailableError,
    DeviceRef,
    open_dcmi,
)
from gpustack_operator.manufacturers.ascend.versions import (
    normalize_version,
    read_cann_version,
    read_driver_version,
)
from gpustack_operator.manufacturers.base import (
    AcceleratorMetrics,
    DetectContext,
    Detected,
    DetectOutcome,
    Dropped,
    Measured,
    MonitorOutcome,
    Unmeasured,
)
from gpustack_operator.manufacturers.groups import Found, build_groups

log = logging.getLogger(__name__)


def pci_gate(ctx: DetectContext) -> DetectOutcome | None:
    """The PCI check (:func:`libbackend.pci_gate`): an answer when the bus already settles it, ``None``
    to go on to DCMI. A scan that cannot vouch for the vendor is ``Unmeasured`` here, DCMI unasked."""
    early, scan_problem = libbackend.pci_gate(ctx, log, "Ascend", "libdcmi")
    return Unmeasured(scan_problem) if scan_problem else early


def iter_npus(dcmi: Dcmi) -> Iterator[DeviceRef]:
    """Every NPU the driver enumerates, in its order. A card whose device count cannot be read is
    skipped with a warning; a device whose type reads as something other than an NPU (a card's MCU)
    is skipped, one whose type cannot be read is kept. The card list failing raises."""
    for card in dcmi.cards():
        try:
            count = dcmi.devices_in_card(card)
        except DcmiError as exc:
            log.warning("ascend: card %d skipped: its device count cannot be read: %s", card, exc)
            continue
        for device in range(count):
            ref = DeviceRef(card, device)
            try:
                unit = dcmi.device_type(ref)
            except DcmiError:
                unit = NPU_TYPE
            if unit != NPU_TYPE:
                log.debug("ascend: card %d device %d is not an NPU (type %d)", card, device, unit)
                continue
            yield ref


def identify(dcmi: Dcmi, ref: DeviceRef, drops: list[Dropped] | None = None) -> str | None:
    """The accelerator id (its identity die), or ``None`` — the device is then dropped (and recorded
    in ``drops``)."""
    try:
        return dcmi.die(ref)
    except DcmiError as exc:
        log.warning(
            "ascend: card %d device %d dropped: its identity die cannot be read (%s); an accelerator is "
            "never identified by its PCI address",
            ref.card,
            ref.device,
            exc,
        )
        if drops is not None:
            drops.append(
                Dropped(f"DCMI card {ref.card} device {ref.device}", f"its identity die could not be read: {exc}")
            )
        return None


@dataclass(frozen=True)
class Versions:
    driver: str | None
    runtime: str | None  # major.minor
    cann: str | None  # as the toolkit records it


def read_versions(ctx: DetectContext, dcmi: Dcmi) -> Versions:
    """CANN from the toolkit files; the driver from DCMI (V1 only), else the driver's version.info
    (V1 only: on V2 the driver version is absent by the spec, whatever is on disk)."""
    cann = read_cann_version(ctx.view)
    driver: str | None = None
    if dcmi.api == "v1":
        try:
            driver = dcmi.driver_version() or None
        except DcmiError as exc:
            log.debug("ascend: driver version from DCMI: %s; reading version.info", exc)
        if driver is None:
            driver = read_driver_version(ctx.view)
    return Versions(driver=driver, runtime=normalize_version(cann), cann=cann)


def a5_product(dcmi: Dcmi, ref: DeviceRef) -> tuple[str, int] | None:
    """The A5 product type (reference rules §9) of a V2 device, ``None`` when it cannot be read."""
    try:
        mainboard = dcmi.mainboard_id(ref)
        if mainboard in (soc.MAINBOARD_CARD_1P, soc.MAINBOARD_CARD_4P):
            return soc.a5_product(mainboard, None)
        return soc.a5_product(mainboard, dcmi.super_pod_type(ref))
    except DcmiError as exc:
        log.debug("ascend: card %d A5 product type: %s", ref.card, exc)
        return None


def read_found(
    dcmi: Dcmi, ref: DeviceRef, uuid: str, versions: Versions, drops: list[Dropped] | None = None
) -> Found | None:
    """One identified NPU as the ledger carries it, or ``None`` (dropped, with a warning, recorded in
    ``drops``)."""
    what = "its PCI address"
    try:
        bus = dcmi.pci_bus_id(ref)
        what = "its chip name"
        chip = dcmi.chip(ref)
        what = "its memory"
        memory = dcmi.memory(ref)
        what = "its physical id"
        physical = dcmi.physical_id(ref)
    except DcmiError as exc:
        log.warning("ascend: card %d device %d (%s) dropped: %s", ref.card, ref.device, uuid, exc)
        if drops is not None:
            drops.append(
                Dropped(f"DCMI card {ref.card} device {ref.device} ({uuid})", f"{what} could not be read: {exc}")
            )
        return None
    family = soc.family(chip.chip_name)
    extra: dict[str, object] = {
        "dcmi_api": dcmi.api,
        "soc_name": soc.soc_name(chip.chip_name),
        "chip_name": chip.chip_name,
        "chip_type": chip.chip_type,
        "chip_version": chip.chip_ver,
        "cann_version": versions.cann,
    }
    if dcmi.api == "v2" and family == "950":
        product = a5_product(dcmi, ref)
        if product is not None:
            extra["product_type"], extra["product_code"] = product
    return Found(
        uuid=uuid,
        name=soc.product_name(chip.chip_name),
        memory_mib=memory.total_mib,
        pci_bus_id=bus,
        physical_indexes=[physical, ref.card, ref.device],
        cores=chip.aicore_cnt or None,
        driver_version=versions.driver,
        runtime_version=versions.runtime,
        family=family or None,
        logical_sliced=soc.logical_sliced(family, versions.runtime),
        extra=extra,
    )


def enumerate_found(ctx: DetectContext, dcmi: Dcmi, drops: list[Dropped] | None = None) -> list[Found]:
    """Every NPU that could be identified and read, in the driver's order (the dropped ones recorded
    in ``drops``). Raises :class:`DcmiError` when the enumeration itself fails."""
    versions = read_versions(ctx, dcmi)
    found: list[Found] = []
    for ref in iter_npus(dcmi):
        uuid = identify(dcmi, ref, drops)
        if uuid is None:
            continue
        item = read_found(dcmi, ref, uuid, versions, drops)
        if item is not None:
            found.append(item)
    return found


def found_npus(ctx: DetectContext, drops: list[Dropped] | None = None) -> tuple[str | None, list[Found], str | None]:
    """``(generation, found, why none)`` — ``(None, [], reason)`` when the library is absent or will
    not initialise. Raises :class:`DcmiError` when an initialised library cannot enumerate."""
    try:
        dcmi = open_dcmi(ctx.view)
    except DcmiUnavailableError as exc:
        log.info("ascend: %s", exc)
        return None, [], str(exc)
    return dcmi.api, enumerate_found(ctx, dcmi, drops), None


def detect(ctx: DetectContext) -> DetectOutcome:
    gate = pci_gate(ctx)
    if gate is not None:
        return gate
    drops: list[Dropped] = []
    try:
        api, found, unavailable = found_npus(ctx, drops)
    except DcmiError as exc:
        return Unmeasured(f"DCMI could not enumerate the NPUs: {exc}")
    if api is not None:
        log.info("ascend: %d NPU(s) through the DCMI %s API", len(found), api.upper())
    groups = build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings)
    return Detected(groups, driver=unavailable, dropped=tuple(drops))


# -- monitor -------------------------------------------------------------------------------------


def _optional(what: str, ref: DeviceRef, read: Callable[[DeviceRef], int]) -> int | None:
    """A reading the driver may not serve: ``None`` (never zero) when it does not."""
    try:
        return read(ref)
    except DcmiError as exc:
        log.debug("ascend: card %d device %d %s: %s", ref.card, ref.device, what, exc)
        return None


def sample(dcmi: Dcmi, ref: DeviceRef, uuid: str) -> AcceleratorMetrics | None:
    """One NPU's usage: HBM used/total, AI core utilisation, temperature, power (W). A figure the
    driver does not report is ``None``; a device whose memory cannot be read is left out."""
    try:
        memory = dcmi.memory(ref)
    except DcmiError as exc:
        log.warning("ascend: card %d device %d (%s) memory cannot be read: %s", ref.card, ref.device, uuid, exc)
        return None
    used = memory.used_mib
    utilization = int(used / memory.total_mib * 100) if used is not None and memory.total_mib > 0 else None
    cores = _optional("AI core utilisation", ref, dcmi.aicore_utilization)
    temperature = _optional("temperature", ref, dcmi.temperature)
    power = _optional("power", ref, dcmi.power_deciwatts)
    return AcceleratorMetrics(
        id=uuid,
        memory=memory.total_mib,
        memory_usage=used,
        memory_utilization=utilization,
        cores_utilization=cores,
        temperature=temperature,
        power_usage=power // 10 if power is not None else None,
    )


def monitor(ctx: DetectContext) -> MonitorOutcome:
    gate = pci_gate(ctx)
    if isinstance(gate, Unmeasured):
        return gate
    if gate is not None:
        return Measured([])
    try:
        dcmi = open_dcmi(ctx.view)
    except DcmiUnavailableError as exc:
        log.info("ascend: %s", exc)
        return Measured([])
    samples: list[AcceleratorMetrics] = []
    try:
        for ref in iter_npus(dcmi):
            uuid = identify(dcmi, ref)
            if uuid is None:
                continue
            metrics = sample(dcmi, ref, uuid)
            if metrics is not None:
                samples.append(metrics)
    except DcmiError as exc:
        return Unmeasured(f"DCMI could not enumerate the NPUs: {exc}")
    return Measured(samples)


__all__ = ["detect", "enumerate_found", "found_npus", "identify", "iter_npus", "monitor", "pci_gate"]
