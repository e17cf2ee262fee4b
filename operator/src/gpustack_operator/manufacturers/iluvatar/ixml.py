"""Minimal ctypes binding of Iluvatar IXML (``libixml.so``): only the calls detection and the usage
monitor need.

IXML is NVML-compatible: ``libixml.so`` exports NVML-named entry points with NVML's signatures and
struct layouts. Sources: gpustack/gpustack-operator ``binding/ixml`` (which symbols and versions it
resolves: ``nvmlInit_v2``, ``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``,
``nvmlDeviceGetPciInfo_v3``, ``nvmlSystemGetCudaDriverVersion``, ``nvmlDeviceGetMinorNumber``, ...);
the layouts are NVML's (``nvmlPciInfo_t``: 16-byte legacy bus id, five ``unsigned int``, 32-byte bus
id; ``nvmlMemory_t``: total, free, used in bytes; ``nvmlUtilization_t``), **assumed** identical in
IXML since no IXML header is public. Power is in mW, temperature in °C (``NVML_TEMPERATURE_GPU = 0``).
"""

from __future__ import annotations

import ctypes
from typing import Any

SUCCESS = 0
BUFFER_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE / UUID_V2 (>= every name and uuid length)
DRIVER_VERSION_BUFFER_SIZE = 80
TEMPERATURE_GPU = 0

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


class IxmlError(Exception):
    def __init__(self, call: str, code: int) -> None:
        self.call = call
        self.code = code
        super().__init__(f"{call} returned {RETURN_NAMES.get(code, 'nvmlReturn_t')} ({code})")


class MissingSymbolError(IxmlError):
    def __init__(self, call: str) -> None:
        Exception.__init__(self, f"{call} is not exported by this libixml")
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


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


class Ixml:
    """One loaded ``libixml``. Device handles are opaque pointers (``nvmlDevice_t``)."""

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
            raise IxmlError(name, code)

    def _string(self, name: str, handle: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(BUFFER_SIZE)
        self._call(name, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint), handle, buf, BUFFER_SIZE)
        return _text(buf.raw)

    # nvmlReturn_t nvmlInit_v2(void)
    def init(self) -> None:
        self._call("nvmlInit_v2", ())

    # nvmlReturn_t nvmlShutdown(void)
    def shutdown(self) -> None:
        self._call("nvmlShutdown", ())

    # nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(DRIVER_VERSION_BUFFER_SIZE)
        self._call("nvmlSystemGetDriverVersion", (ctypes.c_char_p, ctypes.c_uint), buf, DRIVER_VERSION_BUFFER_SIZE)
        return _text(buf.raw)

    # nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion); 1000*major + 10*minor
    def cuda_driver_version(self) -> int:
        value = ctypes.c_int()
        self._call("nvmlSystemGetCudaDriverVersion", (ctypes.POINTER(ctypes.c_int),), ctypes.byref(value))
        return int(value.value)

    # nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", (ctypes.POINTER(ctypes.c_uint),), ctypes.byref(count))
        return int(count.value)

    # nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
    def handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call(
            "nvmlDeviceGetHandleByIndex_v2",
            (ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)),
            index,
            ctypes.byref(handle),
        )
        return handle

    # nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
    def uuid(self, handle: ctypes.c_void_p) -> str:
        return self._string("nvmlDeviceGetUUID", handle)

    # nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
    def name(self, handle: ctypes.c_void_p) -> str:
        return self._string("nvmlDeviceGetName", handle)

    # nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
    def pci_bus_id(self, handle: ctypes.c_void_p) -> str:
        info = _PciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", (ctypes.c_void_p, ctypes.POINTER(_PciInfo)), handle, ctypes.byref(info))
        return _text(info.busId) or f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.0"

    # nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory); bytes
    def memory_bytes(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        info = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", (ctypes.c_void_p, ctypes.POINTER(_Memory)), handle, ctypes.byref(info))
        return int(info.total), int(info.used)

    def _uint(self, name: str, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        self._call(name, (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)), handle, ctypes.byref(value))
        return int(value.value)

    # nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
    def minor_number(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetMinorNumber", handle)

    # nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power); mW
    def power_mw(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetPowerUsage", handle)

    # nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
    def compute_capability(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
        self._call("nvmlDeviceGetCudaComputeCapability", argtypes, handle, ctypes.byref(major), ctypes.byref(minor))
        return int(major.value), int(minor.value)

    # nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
    def gpu_utilization(self, handle: ctypes.c_void_p) -> int:
        info = _Utilization()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_Utilization))
        self._call("nvmlDeviceGetUtilizationRates", argtypes, handle, ctypes.byref(info))
        return int(info.gpu)

    # nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp)
    def temperature(self, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint))
        self._call("nvmlDeviceGetTemperature", argtypes, handle, TEMPERATURE_GPU, ctypes.byref(value))
        return int(value.value)


def cuda_version_string(value: int) -> str | None:
    """``10020`` → ``"10.2"`` (NVML's ``1000 * major + 10 * minor``); non-positive → ``None``."""
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
