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

from gpustack_operator.host.libs import LibrarySpec
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, MonitorOutcome
from gpustack_operator.manufacturers.groups import Found, normalize_bus_id
from gpustack_operator.manufacturers.libbackend import Device, Figure, Versions, optional, pci_address
from gpustack_operator.manufacturers.mthreads.mtml import Mtml, MtmlError

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


class MtmlBackend:
    """MTML as the shared library pass (:mod:`~gpustack_operator.manufacturers.libbackend`) reads it.
    Utilisation and temperature hang off the device's GPU object (``mtmlDeviceInitGpu``)."""

    logger = log
    vendor = "mthreads"
    brand = "Moore Threads"
    api = "MTML"
    unit = "GPU"
    library = LIBRARY
    not_found = "libmtml.so not found (LD_LIBRARY_PATH, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib)"
    error = MtmlError
    figures: tuple[Figure[Mtml, ctypes.c_void_p], ...] = (
        Figure("cores_utilization", "utilization", lambda mt, d: mt.gpu_utilization(mt.gpu(d.handle))),
        Figure("temperature", "temperature", lambda mt, d: mt.gpu_temperature(mt.gpu(d.handle))),
        Figure("power_usage", "power", lambda mt, d: mt.power_mw(d.handle) // 1000),
    )

    def open(self, lib: ctypes.CDLL) -> Mtml:
        mt = Mtml(lib)
        mt.init()
        return mt

    def close(self, mt: Mtml) -> None:
        mt.shutdown()

    def count(self, mt: Mtml) -> int:
        return mt.device_count()

    def identify(self, mt: Mtml, index: int) -> Device[ctypes.c_void_p]:
        device = mt.device(index)
        return Device(index, device, mt.uuid(device), mt.name(device))

    def memory_mib(self, mt: Mtml, device: Device[ctypes.c_void_p]) -> tuple[int, int]:
        total, used = mt.memory_bytes(device.handle)
        return total >> 20, used >> 20

    def versions(self, mt: Mtml, ctx: DetectContext) -> Versions:
        return Versions(driver=optional(self, lambda: mt.driver_version() or None, "driver version"))

    def found(
        self, mt: Mtml, ctx: DetectContext, device: Device[ctypes.c_void_p], memory_mib: int, versions: Versions
    ) -> Found:
        bus = pci_address(self, device, lambda: normalize_bus_id(mt.pci_sbdf(device.handle)))
        return Found(
            uuid=device.uuid,
            name=device.name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            physical_indexes=[device.index],
            cores=optional(self, lambda: mt.gpu_cores(device.handle)),
            driver_version=versions.driver,
            logical_sliced=AcceleratorLogicalSliced(count=SGPU_SLICES, cores_percentage_overcommit=False),
        )


BACKEND = MtmlBackend()


def detect(ctx: DetectContext) -> DetectOutcome:
    return libbackend.detect(BACKEND, ctx)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return libbackend.monitor(BACKEND, ctx)
