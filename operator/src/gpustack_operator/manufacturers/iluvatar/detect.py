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

from gpustack_operator.host.libs import LibrarySpec
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import libbackend
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, MonitorOutcome
from gpustack_operator.manufacturers.groups import Found, normalize_bus_id
from gpustack_operator.manufacturers.iluvatar.ixml import Ixml, IxmlError, cuda_version_string
from gpustack_operator.manufacturers.libbackend import Device, Figure, Versions, optional, pci_address

log = logging.getLogger(__name__)

LIBRARY = LibrarySpec(
    names=("libixml.so",),
    env_roots=("COREX_HOME",),
    default_dirs=("/usr/local/corex/lib64", "/usr/local/corex/lib"),
)
HAMI_SLICES = 128


class IxmlBackend:
    """IXML as the shared library pass (:mod:`~gpustack_operator.manufacturers.libbackend`) reads it."""

    logger = log
    vendor = "iluvatar"
    brand = "Iluvatar"
    api = "IXML"
    unit = "GPU"
    library = LIBRARY
    not_found = "libixml.so not found (COREX_HOME, LD_LIBRARY_PATH, /usr/local/corex/lib64)"
    error = IxmlError
    figures: tuple[Figure[Ixml, ctypes.c_void_p], ...] = (
        Figure("cores_utilization", "utilization", lambda ix, d: ix.gpu_utilization(d.handle)),
        Figure("temperature", "temperature", lambda ix, d: ix.temperature(d.handle)),
        Figure("power_usage", "power", lambda ix, d: ix.power_mw(d.handle) // 1000),
    )

    def open(self, lib: ctypes.CDLL) -> Ixml:
        ix = Ixml(lib)
        ix.init()
        return ix

    def close(self, ix: Ixml) -> None:
        ix.shutdown()

    def count(self, ix: Ixml) -> int:
        return ix.device_count()

    def identify(self, ix: Ixml, index: int) -> Device[ctypes.c_void_p]:
        handle = ix.handle(index)
        return Device(index, handle, ix.uuid(handle), ix.name(handle))

    def memory_mib(self, ix: Ixml, device: Device[ctypes.c_void_p]) -> tuple[int, int]:
        total, used = ix.memory_bytes(device.handle)
        return total >> 20, used >> 20

    def versions(self, ix: Ixml, ctx: DetectContext) -> Versions:
        driver = optional(self, lambda: ix.driver_version() or None, "driver version")
        runtime = optional(
            self, lambda: cuda_version_string(ix.runtime_driver_version()), "CUDA-compatible driver version"
        )
        return Versions(driver=driver, runtime=runtime)

    def found(
        self, ix: Ixml, ctx: DetectContext, device: Device[ctypes.c_void_p], memory_mib: int, versions: Versions
    ) -> Found:
        handle = device.handle
        bus = pci_address(self, device, lambda: normalize_bus_id(ix.pci_bus_id(handle)))
        minor = optional(self, lambda: ix.minor_number(handle))
        cc = optional(self, lambda: ix.compute_capability(handle))
        return Found(
            uuid=device.uuid,
            name=device.name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            physical_indexes=[device.index if minor is None else minor],
            driver_version=versions.driver,
            runtime_version=versions.runtime,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc and cc[0] > 0 else None,
            logical_sliced=AcceleratorLogicalSliced(count=HAMI_SLICES, cores_percentage_overcommit=True),
        )


BACKEND = IxmlBackend()


def detect(ctx: DetectContext) -> DetectOutcome:
    return libbackend.detect(BACKEND, ctx)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return libbackend.monitor(BACKEND, ctx)
