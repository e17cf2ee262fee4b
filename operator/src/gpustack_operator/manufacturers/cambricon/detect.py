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

import ctypes
import logging
import os
import re
from contextlib import AbstractContextManager

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.libs import LibrarySpec
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, MonitorOutcome
from gpustack_operator.manufacturers.cambricon.cndev import CnDev, CndevError
from gpustack_operator.manufacturers.groups import Found
from gpustack_operator.manufacturers.libbackend import Device, Figure, Versions, optional, pci_address

log = logging.getLogger(__name__)

NEUWARE_DEFAULT = "/usr/local/neuware"
LIBRARY = LibrarySpec(
    names=("libcndev.so",),
    env_roots=("NEUWARE_HOME",),
    default_dirs=(f"{NEUWARE_DEFAULT}/lib64", f"{NEUWARE_DEFAULT}/lib"),
)
SMLU_SLICES = 16

_VERSION = re.compile(r"(?<![0-9])([0-9]{1,9})\.([0-9]{1,9})\.([0-9]{1,9})(?![0-9])", re.ASCII)


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


class CnDevBackend:
    """CNDev as the shared library pass (:mod:`~gpustack_operator.manufacturers.libbackend`) reads it."""

    logger = log
    vendor = "cambricon"
    brand = "Cambricon"
    api = "CNDev"
    unit = "card"
    library = LIBRARY
    not_found = "libcndev.so not found (NEUWARE_HOME, LD_LIBRARY_PATH, /usr/local/neuware/lib64)"
    error = CndevError
    figures: tuple[Figure[CnDev, int], ...] = (
        Figure("cores_utilization", "cores_utilization", lambda cn, d: cn.core_utilization(d.handle)),
        Figure("temperature", "temperature", lambda cn, d: cn.chip_temperature(d.handle)),
        Figure("power_usage", "power_usage", lambda cn, d: cn.power_watts(d.handle)),
    )

    def open(self, lib: ctypes.CDLL) -> CnDev:
        cn = CnDev(lib)
        cn.init()
        return cn

    def close(self, cn: CnDev) -> None:
        cn.release()

    def count(self, cn: CnDev) -> int:
        return cn.device_count()

    def identify(self, cn: CnDev, index: int) -> Device[int] | None:
        handle = cn.handle(index)
        uuid = cn.uuid(handle)
        name = cn.card_name(handle)
        if not uuid or not name or name == "Unknown":  # the name CNDev gives a card it cannot name
            log.warning("cambricon: card %d dropped, CNDev reports no uuid/name (%r, %r)", index, uuid, name)
            return None
        return Device(index, handle, mlu_id(uuid), name)

    def memory_mib(self, cn: CnDev, device: Device[int]) -> tuple[int, int]:
        return cn.memory_mib(device.handle)

    def versions(self, cn: CnDev, ctx: DetectContext) -> Versions:
        # the driver version is per card (cndevGetVersionInfo takes a device), read in found()
        return Versions(runtime=read_neuware_version(ctx.view, os.environ.get("NEUWARE_HOME")))

    def found(self, cn: CnDev, ctx: DetectContext, device: Device[int], memory_mib: int, versions: Versions) -> Found:
        bus = pci_address(self, device, lambda: cn.pci_bus_id(device.handle))
        driver = optional(self, lambda: cn.driver_version(device.handle), f"card {device.index} driver version")
        return Found(
            uuid=device.uuid,
            name=device.name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            physical_indexes=[device.index],
            driver_version=f"{driver[0]}.{driver[1]}" if driver else None,
            runtime_version=versions.runtime,
            logical_sliced=AcceleratorLogicalSliced(count=SMLU_SLICES, cores_percentage_overcommit=False),
        )


BACKEND = CnDevBackend()


def cndev_session(ctx: DetectContext) -> AbstractContextManager[CnDev | str]:
    """An initialised CNDev, or the reason there is none (absent, unloadable, init refused)."""
    return libbackend.session(BACKEND, ctx)


def detect(ctx: DetectContext) -> DetectOutcome:
    return libbackend.detect(BACKEND, ctx)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return libbackend.monitor(BACKEND, ctx)
