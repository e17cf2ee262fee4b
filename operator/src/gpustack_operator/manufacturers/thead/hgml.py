"""Minimal ctypes binding of T-Head HGML (``libhgml.so``, the PPU management library): only the calls
detection, the usage monitor and the MIG-named partition profiles need.

HGML mirrors NVML under an ``hgml`` prefix. Sources: gpustack/gpustack-operator ``binding/hgml``
(which entry points and versions it resolves: ``hgmlInit_v2``, ``hgmlDeviceGetCount_v2``,
``hgmlDeviceGetHandleByIndex_v2``, ``hgmlDeviceGetPciInfo_v2`` then ``hgmlDeviceGetPciInfo``,
``hgmlSystemGetHggcDriverVersion``, ``hgmlDeviceGetHggcComputeCapability``,
``hgmlDeviceGetNumGpuCores``, ``hgmlDeviceGetMigMode``, ``hgmlDeviceGetGpuInstanceProfileInfoV``) and the
pyhgml ctypes binding (``hgmlPciInfo_t`` = NVML's layout; ``c_hgmlGpuInstanceProfileInfo_v2_t`` with
version word ``0x02000098`` (152 bytes) and a 96-byte name; ``HGML_GPU_INSTANCE_PROFILE_COUNT = 0xF``;
``HGML_DEVICE_MIG_ENABLE = 1``). **Assumed**: the placement call's name and signature
(``hgmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count)``, NVML's),
and that profile names may carry NVML's ``"MIG "`` prefix (stripped when present).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

SUCCESS = 0
BUFFER_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE / UUID_V2 (>= every name and uuid length)
DRIVER_VERSION_BUFFER_SIZE = 80
TEMPERATURE_GPU = 0
DEVICE_MIG_ENABLE = 1
GPU_INSTANCE_PROFILE_COUNT = 0xF
GPU_INSTANCE_PROFILE_INFO_V2 = 0x02000098  # sizeof(v2 struct) | (2 << 24)

RETURN_NAMES = {
    0: "SUCCESS",
    1: "ERROR_UNINITIALIZED",
    2: "ERROR_INVALID_ARGUMENT",
    3: "ERROR_NOT_SUPPORTED",
    4: "ERROR_NO_PERMISSION",
    5: "ERROR_ALREADY_INITIALIZED",
    6: "ERROR_NOT_FOUND",
    7: "ERROR_INSUFFICIENT_SIZE",
    9: "ERROR_DRIVER_NOT_LOADED",
    12: "ERROR_LIBRARY_NOT_FOUND",
    13: "ERROR_FUNCTION_NOT_FOUND",
    15: "ERROR_GPU_IS_LOST",
    18: "ERROR_LIB_RM_VERSION_MISMATCH",
    999: "ERROR_UNKNOWN",
}


class HgmlError(Exception):
    def __init__(self, call: str, code: int) -> None:
        self.call = call
        self.code = code
        super().__init__(f"{call} returned {RETURN_NAMES.get(code, 'hgmlReturn_t')} ({code})")


class MissingSymbolError(HgmlError):
    def __init__(self, call: str) -> None:
        Exception.__init__(self, f"{call} is not exported by this libhgml")
        self.call = call
        self.code = -1


class _PciInfo(ctypes.Structure):
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _GpuInstanceProfileInfoV2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * 96),
    ]


class _Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass(frozen=True)
class GpuInstanceProfile:
    id: int
    name: str
    slice_count: int
    instance_count: int
    memory_mib: int


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


class Hgml:
    """One loaded ``libhgml``. Device handles are opaque pointers (``hgmlDevice_t``)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib

    def _fn(self, name: str, *argtypes: Any) -> Any:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise MissingSymbolError(name) from None
        fn.restype = ctypes.c_int
        fn.argtypes = list(argtypes)
        return fn

    def _call(self, name: str, argtypes: tuple[Any, ...], *args: Any) -> None:
        code = int(self._fn(name, *argtypes)(*args))
        if code != SUCCESS:
            raise HgmlError(name, code)

    def _string(self, name: str, handle: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(BUFFER_SIZE)
        self._call(name, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint), handle, buf, BUFFER_SIZE)
        return _text(buf.raw)

    # hgmlReturn_t hgmlInit_v2(void)
    def init(self) -> None:
        self._call("hgmlInit_v2", ())

    # hgmlReturn_t hgmlShutdown(void)
    def shutdown(self) -> None:
        self._call("hgmlShutdown", ())

    # hgmlReturn_t hgmlSystemGetDriverVersion(char *version, unsigned int length)
    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(DRIVER_VERSION_BUFFER_SIZE)
        self._call("hgmlSystemGetDriverVersion", (ctypes.c_char_p, ctypes.c_uint), buf, DRIVER_VERSION_BUFFER_SIZE)
        return _text(buf.raw)

    # hgmlReturn_t hgmlSystemGetHggcDriverVersion(int *version); 1000*major + 10*minor
    def hggc_driver_version(self) -> int:
        value = ctypes.c_int()
        self._call("hgmlSystemGetHggcDriverVersion", (ctypes.POINTER(ctypes.c_int),), ctypes.byref(value))
        return int(value.value)

    # hgmlReturn_t hgmlDeviceGetCount_v2(unsigned int *deviceCount)
    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("hgmlDeviceGetCount_v2", (ctypes.POINTER(ctypes.c_uint),), ctypes.byref(count))
        return int(count.value)

    # hgmlReturn_t hgmlDeviceGetHandleByIndex_v2(unsigned int index, hgmlDevice_t *device)
    def handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call(
            "hgmlDeviceGetHandleByIndex_v2",
            (ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)),
            index,
            ctypes.byref(handle),
        )
        return handle

    # hgmlReturn_t hgmlDeviceGetUUID(hgmlDevice_t device, char *uuid, unsigned int length)
    def uuid(self, handle: ctypes.c_void_p) -> str:
        return self._string("hgmlDeviceGetUUID", handle)

    # hgmlReturn_t hgmlDeviceGetName(hgmlDevice_t device, char *name, unsigned int length)
    def name(self, handle: ctypes.c_void_p) -> str:
        return self._string("hgmlDeviceGetName", handle)

    # hgmlReturn_t hgmlDeviceGetPciInfo_v2(hgmlDevice_t device, hgmlPciInfo_t *pci), else the unversioned one
    def pci_bus_id(self, handle: ctypes.c_void_p) -> str:
        info = _PciInfo()
        name = "hgmlDeviceGetPciInfo_v2" if hasattr(self._lib, "hgmlDeviceGetPciInfo_v2") else "hgmlDeviceGetPciInfo"
        self._call(name, (ctypes.c_void_p, ctypes.POINTER(_PciInfo)), handle, ctypes.byref(info))
        return _text(info.busId) or f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.0"

    # hgmlReturn_t hgmlDeviceGetMemoryInfo(hgmlDevice_t device, hgmlMemory_t *memory); bytes
    def memory_bytes(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        info = _Memory()
        self._call("hgmlDeviceGetMemoryInfo", (ctypes.c_void_p, ctypes.POINTER(_Memory)), handle, ctypes.byref(info))
        return int(info.total), int(info.used)

    def _uint(self, name: str, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        self._call(name, (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)), handle, ctypes.byref(value))
        return int(value.value)

    # hgmlReturn_t hgmlDeviceGetMinorNumber(hgmlDevice_t device, unsigned int *minorNumber)
    def minor_number(self, handle: ctypes.c_void_p) -> int:
        return self._uint("hgmlDeviceGetMinorNumber", handle)

    # hgmlReturn_t hgmlDeviceGetNumGpuCores(hgmlDevice_t device, unsigned int *numCores)
    def gpu_cores(self, handle: ctypes.c_void_p) -> int:
        return self._uint("hgmlDeviceGetNumGpuCores", handle)

    # hgmlReturn_t hgmlDeviceGetPowerUsage(hgmlDevice_t device, unsigned int *power); mW
    def power_mw(self, handle: ctypes.c_void_p) -> int:
        return self._uint("hgmlDeviceGetPowerUsage", handle)

    # hgmlReturn_t hgmlDeviceGetHggcComputeCapability(hgmlDevice_t device, int *major, int *minor)
    def compute_capability(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
        self._call("hgmlDeviceGetHggcComputeCapability", argtypes, handle, ctypes.byref(major), ctypes.byref(minor))
        return int(major.value), int(minor.value)

    # hgmlReturn_t hgmlDeviceGetUtilizationRates(hgmlDevice_t device, hgmlUtilization_t *utilization)
    def gpu_utilization(self, handle: ctypes.c_void_p) -> int:
        info = _Utilization()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_Utilization))
        self._call("hgmlDeviceGetUtilizationRates", argtypes, handle, ctypes.byref(info))
        return int(info.gpu)

    # hgmlReturn_t hgmlDeviceGetTemperature(hgmlDevice_t device, hgmlTemperatureSensors_t sensor, unsigned int *temp)
    def temperature(self, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint))
        self._call("hgmlDeviceGetTemperature", argtypes, handle, TEMPERATURE_GPU, ctypes.byref(value))
        return int(value.value)

    # hgmlReturn_t hgmlDeviceGetMigMode(hgmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
    def mig_mode(self, handle: ctypes.c_void_p) -> tuple[bool, bool]:
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint))
        self._call("hgmlDeviceGetMigMode", argtypes, handle, ctypes.byref(current), ctypes.byref(pending))
        return int(current.value) == DEVICE_MIG_ENABLE, int(pending.value) == DEVICE_MIG_ENABLE

    # hgmlReturn_t hgmlDeviceGetGpuInstanceProfileInfoV(hgmlDevice_t device, unsigned int profile,
    #                                                   hgmlGpuInstanceProfileInfo_v2_t *info)
    def gpu_instance_profile(self, handle: ctypes.c_void_p, profile: int) -> GpuInstanceProfile:
        info = _GpuInstanceProfileInfoV2(version=GPU_INSTANCE_PROFILE_INFO_V2)
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_GpuInstanceProfileInfoV2))
        self._call("hgmlDeviceGetGpuInstanceProfileInfoV", argtypes, handle, profile, ctypes.byref(info))
        return GpuInstanceProfile(
            id=int(info.id),
            name=_text(info.name).removeprefix("MIG "),
            slice_count=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            memory_mib=int(info.memorySizeMB),
        )

    # hgmlReturn_t hgmlDeviceGetGpuInstancePossiblePlacements_v2(hgmlDevice_t device, unsigned int profileId,
    #                                                            hgmlGpuInstancePlacement_t *placements,
    #                                                            unsigned int *count)   (assumed, NVML's)
    def gpu_instance_placements(self, handle: ctypes.c_void_p, profile: int) -> list[tuple[int, int]]:
        name = "hgmlDeviceGetGpuInstancePossiblePlacements_v2"
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_Placement), ctypes.POINTER(ctypes.c_uint))
        count = ctypes.c_uint(0)
        self._call(name, argtypes, handle, profile, None, ctypes.byref(count))
        slots = (_Placement * max(int(count.value), 1))()
        self._call(name, argtypes, handle, profile, slots, ctypes.byref(count))
        return [(int(slots[i].start), int(slots[i].size)) for i in range(int(count.value))]


def runtime_version_string(value: int) -> str | None:
    """``12030`` → ``"12.3"`` (``1000 * major + 10 * minor``, as NVML's CUDA version); non-positive → ``None``."""
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
