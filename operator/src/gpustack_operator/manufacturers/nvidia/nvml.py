"""NVML through the nvidia-ml-py binding (``import pynvml``), bound to the node's own library.

``pynvml`` keeps module-global state: the loaded library (``pynvml.nvmlLib``), a cache of function
pointers resolved from it, and an init refcount. It would load ``libnvidia-ml.so.1`` by name — the
copy the dynamic linker picks, not necessarily the node's. So every use goes through
:func:`open_nvml`, which, under one process-wide lock:

1. finds the library under the host root (supplement §4.5: ``LD_LIBRARY_PATH``, then the default
   library directories) and loads it by path (:func:`~gpustack_operator.host.libs.load_library`);
2. points ``pynvml.nvmlLib`` at that handle and empties the function-pointer cache whenever the path
   differs from the one bound before (two fixture nodes in one process stay two libraries);
3. runs ``nvmlInit`` and, when the pass is over, ``nvmlShutdown`` — nothing stays initialised
   between passes, so a driver reloaded under a running Device Manager is seen fresh.

:class:`Nvml` wraps the calls the backend makes: it returns plain Python values and turns every
``pynvml.NVMLError`` into :class:`NvmlError` (code + NVML's own error string). A symbol the library
does not export surfaces as ``NVML_ERROR_FUNCTION_NOT_FOUND`` — the same "not supported" answer an
older driver gives.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pynvml  # type: ignore[import-untyped]

from gpustack_operator.host import HostRoot
from gpustack_operator.host.libs import LibraryLoadError, LibrarySpec, find_library, load_library

log = logging.getLogger(__name__)

NVML_LIBRARY = LibrarySpec(
    names=("libnvidia-ml.so.1", "libnvidia-ml.so"),
    default_dirs=(
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ),
)

# NVML return codes the backend branches on (nvml.h).
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_RESET_REQUIRED = 16
ERROR_IN_USE = 19
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_UNKNOWN = 999

# "This device/driver does not offer the query" — an answer, not a failure.
UNSUPPORTED = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})

GPU_INSTANCE_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT: probe indexes 0..0x11

Handle = Any  # pynvml's c_nvmlDevice_t (an opaque pointer)


class NvmlUnavailableError(Exception):
    """NVML is not usable on this node: library absent, not loadable, or ``nvmlInit`` refused.

    The detection-failure rules make each of these "nothing here" (``Detected([])``), never an error.
    """

    def __init__(self, reason: str, code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class NvmlError(Exception):
    """One NVML call failed; ``code`` is the ``nvmlReturn_t``, the message NVML's own string."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call}: {message} (NVML error {code})")
        self.call = call
        self.code = code
        self.message = message

    @property
    def unsupported(self) -> bool:
        return self.code in UNSUPPORTED


@dataclass(frozen=True)
class MemoryInfo:
    total: int  # bytes
    used: int  # bytes; v2 excludes the driver-reserved part, v1 includes it


@dataclass(frozen=True)
class PciInfo:
    bus_id: str  # as NVML reports it ("00000000:1B:00.0")
    bus_id_legacy: str  # "0000:1B:00.0"
    domain: int
    bus: int
    device: int


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One ``nvmlDeviceGetGpuInstanceProfileInfo(V)`` answer."""

    probe_index: int  # the NVML_GPU_INSTANCE_PROFILE_* value it was asked for
    id: int  # the profile id (what nvidia-smi -lgip shows, and placements are asked by)
    name: str  # "" when only the v1 call (no name field) answered
    slice_count: int
    instance_count: int
    memory_mib: int


_LOCK = threading.RLock()


class _Bound:
    """The library path ``pynvml.nvmlLib`` was last pointed at (guarded by ``_LOCK``)."""

    path: str | None = None


def _bind(path: str) -> None:
    """Make pynvml use the library at ``path`` (caller holds ``_LOCK``)."""
    if _Bound.path == path and pynvml.nvmlLib is not None:
        return
    try:
        lib = load_library(path)
    except LibraryLoadError as exc:
        raise NvmlUnavailableError(f"NVML library could not be loaded: {exc}") from None
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
    _Bound.path = path


@contextmanager
def open_nvml(host: HostRoot, environ: dict[str, str] | None = None) -> Iterator[Nvml]:
    """One NVML session on ``host``'s library; raises :class:`NvmlUnavailableError` when there is none."""
    path = find_library(host, NVML_LIBRARY, environ)
    if path is None:
        raise NvmlUnavailableError(
            "libnvidia-ml.so.1 was not found (searched LD_LIBRARY_PATH and "
            + ", ".join(NVML_LIBRARY.default_dirs)
            + "): the NVIDIA driver is not installed, or this container was not given its library "
            "(the NVIDIA container runtime injects it)"
        )
    with _LOCK:
        _bind(path)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailableError(
                f"nvmlInit failed on {path}: {exc} (NVML error {exc.value})", code=int(exc.value)
            ) from None
        try:
            yield Nvml(path)
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("nvmlShutdown on %s: %s", path, exc)


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """The NVML calls this backend makes, on an initialised session (see :func:`open_nvml`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @staticmethod
    def _call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise NvmlError(name, int(exc.value), str(exc)) from None

    # -- system ------------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion_v2``, falling back to the v1 call (older drivers)."""
        try:
            return int(self._call("nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2))
        except NvmlError as exc:
            if not exc.unsupported:
                raise
        return int(self._call("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion))

    def error_string(self, code: int) -> str:
        return _text(self._call("nvmlErrorString", pynvml.nvmlErrorString, code))

    # -- handles -----------------------------------------------------------------------------

    def handle(self, index: int) -> Handle:
        return self._call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)

    def handle_by_uuid(self, uuid: str) -> Handle:
        return self._call("nvmlDeviceGetHandleByUUID", pynvml.nvmlDeviceGetHandleByUUID, uuid)

    # -- identity ----------------------------------------------------------------------------

    def name(self, h: Handle) -> str:
        return _text(self._call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, h))

    def uuid(self, h: Handle) -> str:
        return _text(self._call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, h))

    def index(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetIndex", pynvml.nvmlDeviceGetIndex, h))

    def minor_number(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, h))

    def pci_info(self, h: Handle) -> PciInfo:
        info = self._call("nvmlDeviceGetPciInfo_v3", pynvml.nvmlDeviceGetPciInfo_v3, h)
        return PciInfo(
            bus_id=_text(info.busId),
            bus_id_legacy=_text(info.busIdLegacy),
            domain=int(info.domain),
            bus=int(info.bus),
            device=int(info.device),
        )

    def memory(self, h: Handle) -> MemoryInfo:
        """``nvmlDeviceGetMemoryInfo_v2``, falling back to v1 (drivers before R510)."""
        try:
            info = self._call("nvmlDeviceGetMemoryInfo_v2", pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2)
        except NvmlError as exc:
            if not (exc.unsupported or exc.code == ERROR_ARGUMENT_VERSION_MISMATCH):
                raise
            info = self._call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, h)
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def compute_capability(self, h: Handle) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, h)
        return int(major), int(minor)

    def architecture(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture, h))

    def num_cores(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetNumGpuCores", pynvml.nvmlDeviceGetNumGpuCores, h))

    def memory_bus_width(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetMemoryBusWidth", pynvml.nvmlDeviceGetMemoryBusWidth, h))

    def ecc_mode(self, h: Handle) -> tuple[int, int]:
        current, pending = self._call("nvmlDeviceGetEccMode", pynvml.nvmlDeviceGetEccMode, h)
        return int(current), int(pending)

    def uncorrected_volatile_dram_errors(self, h: Handle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetMemoryErrorCounter",
                pynvml.nvmlDeviceGetMemoryErrorCounter,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
                pynvml.NVML_MEMORY_LOCATION_DRAM,
            )
        )

    # -- usage -------------------------------------------------------------------------------

    def utilization(self, h: Handle) -> tuple[int, int]:
        """(gpu %, memory-controller %) over the driver's last sample period."""
        util = self._call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, h)
        return int(util.gpu), int(util.memory)

    def temperature(self, h: Handle) -> int:
        """GPU core temperature (°C): ``nvmlDeviceGetTemperatureV``, else the deprecated call."""
        try:
            return int(
                self._call(
                    "nvmlDeviceGetTemperatureV", pynvml.nvmlDeviceGetTemperatureV, h, pynvml.NVML_TEMPERATURE_GPU
                )
            )
        except NvmlError as exc:
            if not (exc.unsupported or exc.code == ERROR_ARGUMENT_VERSION_MISMATCH):
                raise
        return int(
            self._call("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        )

    def power_usage_mw(self, h: Handle) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, h))

    # -- MIG ---------------------------------------------------------------------------------

    def mig_mode(self, h: Handle) -> tuple[int, int]:
        """(current, pending): ``NVML_DEVICE_MIG_ENABLE`` = 1, ``_DISABLE`` = 0."""
        current, pending = self._call("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, h)
        return int(current), int(pending)

    def set_mig_mode(self, h: Handle, enabled: bool) -> int:
        """Returns the activation status: ``SUCCESS`` when the mode is in force, otherwise the code
        of why it is only pending (e.g. ``ERROR_IN_USE``: applied at the next GPU reset)."""
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return int(self._call("nvmlDeviceSetMigMode", pynvml.nvmlDeviceSetMigMode, h, mode))

    def gpu_instance_profile(self, h: Handle, probe_index: int) -> GpuInstanceProfile:
        """The v2 (named) profile info, falling back to v1 (no name) on drivers without the V call."""
        try:
            info = self._call(
                "nvmlDeviceGetGpuInstanceProfileInfoV",
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                h,
                probe_index,
                2,
            )
            name = _text(info.name)
        except NvmlError as exc:
            if exc.code not in (ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                raise
            info = self._call(
                "nvmlDeviceGetGpuInstanceProfileInfo",
                pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                h,
                probe_index,
                1,
            )
            name = ""
        return GpuInstanceProfile(
            probe_index=probe_index,
            id=int(info.id),
            name=name,
            slice_count=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            memory_mib=int(info.memorySizeMB),
        )

    def gpu_instance_placements(self, h: Handle, profile_id: int) -> list[tuple[int, int]]:
        """Every legal (start, size) of a profile on an empty card, in memory slices."""
        name = "nvmlDeviceGetGpuInstancePossiblePlacements_v2"
        fn = pynvml.nvmlDeviceGetGpuInstancePossiblePlacements
        count = ctypes.c_uint(0)
        self._call(name, fn, h, profile_id, None, ctypes.byref(count))
        slots = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        self._call(name, fn, h, profile_id, slots, ctypes.byref(count))
        return [(int(slots[i].start), int(slots[i].size)) for i in range(count.value)]
