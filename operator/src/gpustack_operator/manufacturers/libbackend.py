"""Detection and the usage monitor over a vendor's management library — the pass itself, once for
every manufacturer whose backend is a ctypes binding (Cambricon CNDev, MetaX MXSML, Iluvatar IXML,
Moore Threads MTML, T-Head HGML).

A vendor's ``detect.py`` implements :class:`LibraryBackend`: which library and where it lives, how to
open and close it, count the devices, identify device *i*, read its memory, its ``Found`` fields and
its usage figures. Everything else — the order of the calls and what each failure means — is here
(spec "Detection-failure rules"):

* The PCI check first (``--no-pci-check`` skips it): no accelerator of this manufacturer on the bus is
  ``Detected([])`` without loading the library. A scan that cannot vouch for the manufacturer
  (an unreadable sysfs) does not answer "no hardware": the library is asked instead, and if it cannot
  answer either the pass is ``Unmeasured``, naming both problems.
* No library, a library that will not load, or one that will not initialise → ``Detected([])`` (the
  monitor: an empty sample). The library is closed again after the pass.
* The device count failing after a good init → ``Unmeasured``: it says nothing about the cards.
* A device whose identity (uuid, name) cannot be read or reads empty is dropped with a warning — never
  identified by its PCI address; so is one whose memory cannot be read.
* In the monitor every other figure is read on its own: one the library does not serve stays
  ``None``, never zero, and the rest of the sample stands.

:func:`pci_gate` is also the PCI check of NVIDIA and Ascend, whose libraries (nvidia-ml-py, DCMI's
two generations) do not fit this pass; they answer a scan that cannot vouch with ``Unmeasured`` at once.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gpustack_operator.host.libs import LibraryLoadError, LibrarySpec, find_library, load_library
from gpustack_operator.manufacturers.base import (
    AcceleratorMetrics,
    DetectContext,
    Detected,
    DetectOutcome,
    Dropped,
    Measured,
    MonitorOutcome,
    Unmeasured,
    bus_shows_none,
)
from gpustack_operator.manufacturers.groups import Found, build_groups


@dataclass(frozen=True)
class Device[H]:
    """One device the library identified: its enumeration index, what further calls address it by
    (a handle, or the index itself), its accelerator id and product name."""

    index: int
    handle: H
    uuid: str
    name: str


@dataclass(frozen=True)
class Versions:
    """What the library reports once for the node (read after the count, before the devices)."""

    driver: str | None = None
    runtime: str | None = None


@dataclass(frozen=True)
class Figure[S, H]:
    """One optional usage figure: the sample field it fills, its name in the log, how it is read
    (raising the binding's error when the library does not serve it)."""

    field: Literal["cores_utilization", "temperature", "power_usage"]
    what: str
    read: Callable[[S, Device[H]], int]


class LibraryBackend[S, H](Protocol):
    """What a vendor knows about its library; ``S`` is the opened binding, ``H`` a device handle."""

    @property
    def logger(self) -> logging.Logger:
        """The vendor's own logger (records keep the vendor module's name)."""

    @property
    def vendor(self) -> str:
        """The log prefix: ``"cambricon"``."""

    @property
    def brand(self) -> str:
        """As in "no <brand> accelerator on the PCI bus": ``"Moore Threads"``."""

    @property
    def api(self) -> str:
        """The library's name in messages: ``"CNDev"``."""

    @property
    def unit(self) -> str:
        """What one device is called: ``"card"``, ``"GPU"``, ``"PPU"``."""

    @property
    def library(self) -> LibrarySpec:
        """Where the library may live."""

    @property
    def not_found(self) -> str:
        """The reason given when it is nowhere: names the variables and directories searched."""

    @property
    def error(self) -> type[Exception]:
        """The binding's error (its missing-symbol error derives from it)."""

    @property
    def figures(self) -> Sequence[Figure[S, H]]:
        """The monitor's figures beyond memory, in reading order."""

    def open(self, lib: ctypes.CDLL) -> S:
        """Bind the loaded library and initialise it; raises :attr:`error` when it refuses."""

    def close(self, session: S) -> None:
        """Release / shut the library down (a failure is logged at debug and ignored)."""

    def count(self, session: S) -> int:
        """How many devices the library enumerates; raises :attr:`error` when it cannot say."""

    def identify(self, session: S, index: int) -> Device[H] | None:
        """Device ``index``'s identity; raises :attr:`error` when unreadable. ``None`` skips a device
        that is not an accelerator of this node (the vendor logs why)."""

    def memory_mib(self, session: S, device: Device[H]) -> tuple[int, int]:
        """(total, used) MiB; raises :attr:`error` when unreadable."""

    def versions(self, session: S, ctx: DetectContext) -> Versions:
        """Driver and runtime versions, read once per pass (unreadable → ``None``, logged)."""

    def found(self, session: S, ctx: DetectContext, device: Device[H], memory_mib: int, versions: Versions) -> Found:
        """The ledger's view of one identified device (what it may not answer is left unset)."""


# -- the PCI check ---------------------------------------------------------------------------------


def pci_gate(ctx: DetectContext, log: logging.Logger, brand: str, api: str) -> tuple[Detected | None, str | None]:
    """``(outcome to return at once, why the scan cannot vouch for this manufacturer)``.

    ``Detected([])`` when the bus shows none of this manufacturer's accelerators (``api`` is then never
    loaded); the scan's problem when it cannot vouch; ``(None, None)`` to go on to the library.
    """
    if ctx.no_pci_check:
        return None, None
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return None, "; ".join(problems)
    if bus_shows_none(ctx):  # the one rule the registry also applies before importing a backend
        log.debug("%s: no %s accelerator on the PCI bus; %s not loaded", ctx.manufacturer.name, brand, api)
        return Detected([]), None
    return None, None


# -- the library ---------------------------------------------------------------------------------


@contextmanager
def session[S, H](backend: LibraryBackend[S, H], ctx: DetectContext) -> Iterator[S | str]:
    """The opened library, or the reason there is none (absent, unloadable, init refused); closed
    afterwards."""
    path = find_library(ctx.view, backend.library)
    if path is None:
        yield backend.not_found
        return
    try:
        opened = backend.open(load_library(path))
    except (LibraryLoadError, backend.error) as exc:
        yield f"{backend.api} at {path} did not initialise: {exc}"
        return
    try:
        yield opened
    finally:
        try:
            backend.close(opened)
        except backend.error as exc:
            backend.logger.debug("%s: %s", backend.vendor, exc)


def identify[S, H](
    backend: LibraryBackend[S, H], session: S, index: int, drops: list[Dropped] | None = None
) -> Device[H] | None:
    """Device ``index``, or ``None`` (logged, and recorded in ``drops``) when it is dropped or skipped."""
    where = f"{backend.api} {backend.unit} {index}"
    try:
        device = backend.identify(session, index)
    except backend.error as exc:
        backend.logger.warning(
            "%s: %s %d dropped, its identity could not be read: %s", backend.vendor, backend.unit, index, exc
        )
        if drops is not None:
            drops.append(Dropped(where, f"its identity (uuid, name) could not be read: {exc}"))
        return None
    if device is not None and (not device.uuid or not device.name):
        backend.logger.warning(
            "%s: %s %d dropped, %s reports no uuid/name (%r, %r)",
            backend.vendor,
            backend.unit,
            index,
            backend.api,
            device.uuid,
            device.name,
        )
        if drops is not None:
            missing = " and ".join(w for w, v in (("uuid", device.uuid), ("name", device.name)) if not v)
            drops.append(Dropped(where, f"{backend.api} reports no {missing} for it"))
        return None
    return device


def optional[T](backend: LibraryBackend[Any, Any], read: Callable[[], T], what: str | None = None) -> T | None:
    """A reading the library may not serve: ``None`` when it raises the binding's error — logged at
    INFO as "<what> unreadable" when ``what`` names the reading, silently otherwise."""
    try:
        return read()
    except backend.error as exc:
        if what is not None:
            backend.logger.info("%s: %s unreadable: %s", backend.vendor, what, exc)
        return None


def pci_address[H](backend: LibraryBackend[Any, H], device: Device[H], read: Callable[[], str]) -> str:
    """The device's PCI address as the library reports it; ``""`` (warned) when it cannot say."""
    try:
        return read()
    except backend.error as exc:
        backend.logger.warning(
            "%s: %s %d (%s) has no PCI address: %s", backend.vendor, backend.unit, device.index, device.uuid, exc
        )
        return ""


# -- detection -----------------------------------------------------------------------------------


def read_found[S, H](
    backend: LibraryBackend[S, H], session: S, ctx: DetectContext, drops: list[Dropped] | None = None
) -> list[Found]:
    """Every device the library enumerates and identifies, in its order (the dropped ones recorded in
    ``drops``). Raises the binding's error when the count fails."""
    count = backend.count(session)
    versions = backend.versions(session, ctx)
    found: list[Found] = []
    for index in range(count):
        device = identify(backend, session, index, drops)
        if device is None:
            continue
        try:
            memory_mib, _ = backend.memory_mib(session, device)
        except backend.error as exc:
            backend.logger.warning(
                "%s: %s %d (%s) dropped, its memory could not be read: %s",
                backend.vendor,
                backend.unit,
                index,
                device.uuid,
                exc,
            )
            if drops is not None:
                drops.append(
                    Dropped(
                        f"{backend.api} {backend.unit} {index} ({device.uuid})", f"its memory could not be read: {exc}"
                    )
                )
            continue
        found.append(backend.found(session, ctx, device, memory_mib, versions))
    return found


def detect[S, H](backend: LibraryBackend[S, H], ctx: DetectContext) -> DetectOutcome:
    early, scan_problem = pci_gate(ctx, backend.logger, backend.brand, backend.api)
    if early is not None:
        return early
    with session(backend, ctx) as opened:
        if isinstance(opened, str):
            backend.logger.info("%s: %s", backend.vendor, opened)
            return Unmeasured(f"{scan_problem}; and {opened}") if scan_problem else Detected([], driver=opened)
        drops: list[Dropped] = []
        try:
            found = read_found(backend, opened, ctx, drops)
        except backend.error as exc:
            return Unmeasured(f"{backend.api} initialised but could not enumerate the {backend.unit}s: {exc}")
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings), dropped=tuple(drops))


# -- monitor -------------------------------------------------------------------------------------


def sample[S, H](backend: LibraryBackend[S, H], session: S, index: int) -> AcceleratorMetrics | None:
    """One device's usage, or ``None`` (logged) when it cannot be identified or its memory read."""
    device = identify(backend, session, index)
    if device is None:
        return None
    try:
        total, used = backend.memory_mib(session, device)
    except backend.error as exc:
        backend.logger.warning(
            "%s: %s %d (%s) not sampled, memory unreadable: %s", backend.vendor, backend.unit, index, device.uuid, exc
        )
        return None
    metrics = AcceleratorMetrics(
        id=device.uuid,
        memory=total,
        memory_usage=used,
        memory_utilization=round(used * 100 / total) if total > 0 else None,
    )
    for figure in backend.figures:
        try:
            setattr(metrics, figure.field, figure.read(session, device))
        except backend.error as exc:
            backend.logger.debug("%s: %s %d %s unreadable: %s", backend.vendor, backend.unit, index, figure.what, exc)
    return metrics


def monitor[S, H](backend: LibraryBackend[S, H], ctx: DetectContext) -> MonitorOutcome:
    early, scan_problem = pci_gate(ctx, backend.logger, backend.brand, backend.api)
    if early is not None:
        return Measured([])
    with session(backend, ctx) as opened:
        if isinstance(opened, str):
            return Unmeasured(f"{scan_problem}; and {opened}") if scan_problem else Measured([])
        try:
            count = backend.count(opened)
        except backend.error as exc:
            return Unmeasured(f"{backend.api} initialised but could not enumerate the {backend.unit}s: {exc}")
        samples = [s for i in range(count) if (s := sample(backend, opened, i)) is not None]
    return Measured(samples)
