"""The NVML-shaped C API two vendor libraries mirror — once, for both.

Iluvatar's ``libixml.so`` exports NVML's own entry-point names (``nvmlInit_v2``, …) and T-Head's
``libhgml.so`` the same API under an ``hgml`` prefix (``hgmlInit_v2``, …), each with NVML's signatures,
return codes and struct layouts (``<p>PciInfo_t``: 16-byte legacy bus id, five ``unsigned int``,
32-byte bus id; ``<p>Memory_t``: total, free, used in bytes; ``<p>Utilization_t``). Power is in mW,
temperature in °C (``<P>_TEMPERATURE_GPU = 0``). :class:`NvmlShaped` binds the calls both use; each
vendor's binding (``iluvatar/ixml.py``, ``thead/hgml.py``) names its prefix, its error classes and the
entry points where the two differ (PCI info version, runtime version, compute capability), and adds
its own calls. Nothing here is NVIDIA's NVML itself, which goes through nvidia-ml-py
(``nvidia/nvml.py``).
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

from gpustack_operator.host.libs import Binding, c_text

BUFFER_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE / UUID_V2 (>= every name and uuid length)
DRIVER_VERSION_BUFFER_SIZE = 80
TEMPERATURE_GPU = 0

# <p>Return_t names (NVML's codes, which both libraries keep).
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


class NvmlShaped(Binding):
    """One loaded NVML-shaped library. Device handles are opaque pointers (``<p>Device_t``).

    ``prefix`` is the entry points' prefix; the three entry points whose names differ between the two
    libraries are named by the subclass.
    """

    prefix: ClassVar[str]  # "nvml", "hgml"
    runtime_version_call: ClassVar[str]  # <p>SystemGet{Cuda,Hggc}DriverVersion(int *version)
    compute_capability_call: ClassVar[str]  # <p>DeviceGet{Cuda,Hggc}ComputeCapability(device, int *, int *)

    def _p(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def pci_info_call(self) -> str:
        """``<p>DeviceGetPciInfo_v3`` unless the vendor's library names it otherwise."""
        return self._p("DeviceGetPciInfo_v3")

    def _string(self, name: str, handle: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(BUFFER_SIZE)
        self._call(name, (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint), handle, buf, BUFFER_SIZE)
        return c_text(buf.raw)

    def _uint(self, name: str, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        self._call(name, (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)), handle, ctypes.byref(value))
        return int(value.value)

    # <p>Return_t <p>Init_v2(void)
    def init(self) -> None:
        self._call(self._p("Init_v2"), ())

    # <p>Return_t <p>Shutdown(void)
    def shutdown(self) -> None:
        self._call(self._p("Shutdown"), ())

    # <p>Return_t <p>SystemGetDriverVersion(char *version, unsigned int length)
    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(DRIVER_VERSION_BUFFER_SIZE)
        argtypes = (ctypes.c_char_p, ctypes.c_uint)
        self._call(self._p("SystemGetDriverVersion"), argtypes, buf, DRIVER_VERSION_BUFFER_SIZE)
        return c_text(buf.raw)

    # <p>Return_t <runtime_version_call>(int *version); 1000*major + 10*minor
    def runtime_driver_version(self) -> int:
        value = ctypes.c_int()
        self._call(self.runtime_version_call, (ctypes.POINTER(ctypes.c_int),), ctypes.byref(value))
        return int(value.value)

    # <p>Return_t <p>DeviceGetCount_v2(unsigned int *deviceCount)
    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call(self._p("DeviceGetCount_v2"), (ctypes.POINTER(ctypes.c_uint),), ctypes.byref(count))
        return int(count.value)

    # <p>Return_t <p>DeviceGetHandleByIndex_v2(unsigned int index, <p>Device_t *device)
    def handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        argtypes = (ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call(self._p("DeviceGetHandleByIndex_v2"), argtypes, index, ctypes.byref(handle))
        return handle

    # <p>Return_t <p>DeviceGetUUID(<p>Device_t device, char *uuid, unsigned int length)
    def uuid(self, handle: ctypes.c_void_p) -> str:
        return self._string(self._p("DeviceGetUUID"), handle)

    # <p>Return_t <p>DeviceGetName(<p>Device_t device, char *name, unsigned int length)
    def name(self, handle: ctypes.c_void_p) -> str:
        return self._string(self._p("DeviceGetName"), handle)

    # <p>Return_t <pci_info_call>(<p>Device_t device, <p>PciInfo_t *pci)
    def pci_bus_id(self, handle: ctypes.c_void_p) -> str:
        info = _PciInfo()
        self._call(self.pci_info_call(), (ctypes.c_void_p, ctypes.POINTER(_PciInfo)), handle, ctypes.byref(info))
        return c_text(info.busId) or f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.0"

    # <p>Return_t <p>DeviceGetMemoryInfo(<p>Device_t device, <p>Memory_t *memory); bytes
    def memory_bytes(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        info = _Memory()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_Memory))
        self._call(self._p("DeviceGetMemoryInfo"), argtypes, handle, ctypes.byref(info))
        return int(info.total), int(info.used)

    # <p>Return_t <p>DeviceGetMinorNumber(<p>Device_t device, unsigned int *minorNumber)
    def minor_number(self, handle: ctypes.c_void_p) -> int:
        return self._uint(self._p("DeviceGetMinorNumber"), handle)

    # <p>Return_t <p>DeviceGetPowerUsage(<p>Device_t device, unsigned int *power); mW
    def power_mw(self, handle: ctypes.c_void_p) -> int:
        return self._uint(self._p("DeviceGetPowerUsage"), handle)

    # <p>Return_t <compute_capability_call>(<p>Device_t device, int *major, int *minor)
    def compute_capability(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
        self._call(self.compute_capability_call, argtypes, handle, ctypes.byref(major), ctypes.byref(minor))
        return int(major.value), int(minor.value)

    # <p>Return_t <p>DeviceGetUtilizationRates(<p>Device_t device, <p>Utilization_t *utilization)
    def gpu_utilization(self, handle: ctypes.c_void_p) -> int:
        info = _Utilization()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_Utilization))
        self._call(self._p("DeviceGetUtilizationRates"), argtypes, handle, ctypes.byref(info))
        return int(info.gpu)

    # <p>Return_t <p>DeviceGetTemperature(<p>Device_t device, <p>TemperatureSensors_t sensor, unsigned int *temp)
    def temperature(self, handle: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint))
        self._call(self._p("DeviceGetTemperature"), argtypes, handle, TEMPERATURE_GPU, ctypes.byref(value))
        return int(value.value)


def version_string(value: int) -> str | None:
    """``10020`` → ``"10.2"`` (``1000 * major + 10 * minor``, as NVML's CUDA version); non-positive → ``None``."""
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
