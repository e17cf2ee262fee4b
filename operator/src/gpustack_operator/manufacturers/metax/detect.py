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

import ctypes
import logging
import re

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.libs import LibrarySpec
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, MonitorOutcome
from gpustack_operator.manufacturers.groups import Found, normalize_bus_id
from gpustack_operator.manufacturers.libbackend import Device, Figure, Versions, optional
from gpustack_operator.manufacturers.metax.mxsml import DeviceInfo, Mxsml, MxsmlError

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


def _version(text: str) -> str | None:
    return text.strip().removeprefix("v") or None


class MxsmlBackend:
    """MXSML as the shared library pass (:mod:`~gpustack_operator.manufacturers.libbackend`) reads it.
    Devices are addressed by their MXSML index; the handle is the device info read at identification."""

    logger = log
    vendor = "metax"
    brand = "MetaX"
    api = "MXSML"
    unit = "GPU"
    library = LIBRARY
    not_found = "libmxsml.so not found (MACA_HOME, LD_LIBRARY_PATH, /opt/maca/lib)"
    error = MxsmlError
    figures: tuple[Figure[Mxsml, DeviceInfo], ...] = (
        Figure("cores_utilization", "usage", lambda mx, d: mx.xcore_usage(d.index)),
        Figure("temperature", "temperature", lambda mx, d: mx.hotspot_centidegrees(d.index) // 100),
        Figure("power_usage", "power", lambda mx, d: sum(mx.board_power_mw(d.index)) // 1000),
    )

    def open(self, lib: ctypes.CDLL) -> Mxsml:
        mx = Mxsml(lib)
        mx.init()
        return mx

    def close(self, mx: Mxsml) -> None:
        """MXSML has no shutdown call."""

    def count(self, mx: Mxsml) -> int:
        return mx.device_count()

    def identify(self, mx: Mxsml, index: int) -> Device[DeviceInfo] | None:
        info = mx.device_info(index)
        if info.virtual_function:
            log.info("metax: GPU %d (%s) is a virtual function, skipped", index, info.uuid)
            return None
        return Device(index, info, info.uuid, info.name)

    def memory_mib(self, mx: Mxsml, device: Device[DeviceInfo]) -> tuple[int, int]:
        total_kib, used_kib = mx.memory_kib(device.index)
        return total_kib >> 10, used_kib >> 10

    def versions(self, mx: Mxsml, ctx: DetectContext) -> Versions:
        driver = optional(self, lambda: _version(mx.driver_version()), "driver version")
        return Versions(driver=driver, runtime=optional(self, lambda: _version(mx.maca_version()), "MACA version"))

    def found(
        self, mx: Mxsml, ctx: DetectContext, device: Device[DeviceInfo], memory_mib: int, versions: Versions
    ) -> Found:
        bus = normalize_bus_id(device.handle.bdf) if device.handle.bdf else ""
        return Found(
            uuid=device.uuid,
            name=device.name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            physical_indexes=(drm_indexes(ctx.view, bus) if bus else []) or [device.index],
            driver_version=versions.driver,
            runtime_version=versions.runtime,
            family=metax_family(device.name),
            logical_sliced=AcceleratorLogicalSliced(count=SGPU_SLICES, cores_percentage_overcommit=False),
        )


BACKEND = MxsmlBackend()


def detect(ctx: DetectContext) -> DetectOutcome:
    return libbackend.detect(BACKEND, ctx)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return libbackend.monitor(BACKEND, ctx)
