"""Minimal ctypes binding of Moore Threads MTML (``libmtml.so``): only the calls detection and the
usage monitor need.

Sources: Moore Threads' ``mtml.h`` (MTML API reference: ``MtmlReturn MTML_API mtmlLibraryInit(MtmlLibrary
**lib)``, ``mtmlLibraryCountDevice(const MtmlLibrary *, unsigned int *)``,
``mtmlLibraryInitDeviceByIndex``, ``mtmlLibraryInitSystem``, ``mtmlSystemGetDriverVersion``,
``mtmlDeviceGetPowerUsage`` in mW, ``mtmlLibraryFreeDevice`` deprecated "not required anymore") and the
official ``mthreads-ml-py`` 2.4.3 binding (``c_mtmlPciInfo_t``: 32-byte ``sbdf`` then ``segment, bus,
device, pciDeviceId, pciSubsystemId, busWidth``, two floats, four uints, ``int rsvd[6]``; buffer sizes
name/uuid 32/48, driver version 80; ``MTML_ERROR_*`` codes).

Why not that package itself: it loads ``libmtml.so.2``/``libmtml.so`` by soname into process-global
state, so the library a host root holds cannot be the one it uses (``host/libs.py`` loads by path).
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpustack_operator.host.libs import Binding, LibraryCallError, MissingEntryPointError, c_text

MTML_SUCCESS = 0
NAME_BUFFER_SIZE = 32
UUID_BUFFER_SIZE = 48
DRIVER_VERSION_BUFFER_SIZE = 80

RETURN_NAMES = {
    0: "MTML_SUCCESS",
    1: "MTML_ERROR_DRIVER_NOT_LOADED",
    2: "MTML_ERROR_DRIVER_FAILURE",
    3: "MTML_ERROR_INVALID_ARGUMENT",
    4: "MTML_ERROR_NOT_SUPPORTED",
    5: "MTML_ERROR_NO_PERMISSION",
    6: "MTML_ERROR_INSUFFICIENT_SIZE",
    7: "MTML_ERROR_NOT_FOUND",
    8: "MTML_ERROR_INSUFFICIENT_MEMORY",
    9: "MTML_ERROR_DRIVER_TOO_OLD",
    10: "MTML_ERROR_DRIVER_TOO_NEW",
    11: "MTML_ERROR_TIMEOUT",
    999: "MTML_ERROR_UNKNOWN",
}


class MtmlError(LibraryCallError):
    return_names = RETURN_NAMES
    return_type = "MtmlReturn"
    library = "libmtml"


class MissingSymbolError(MissingEntryPointError, MtmlError):
    pass


class _PciInfo(ctypes.Structure):
    _fields_ = [
        ("sbdf", ctypes.c_char * 32),
        ("segment", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubsystemId", ctypes.c_uint),
        ("busWidth", ctypes.c_uint),
        ("pciMaxSpeed", ctypes.c_float),
        ("pciCurSpeed", ctypes.c_float),
        ("pciMaxWidth", ctypes.c_uint),
        ("pciCurWidth", ctypes.c_uint),
        ("pciMaxGen", ctypes.c_uint),
        ("pciCurGen", ctypes.c_uint),
        ("rsvd", ctypes.c_int * 6),
    ]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_PUINT = ctypes.POINTER(ctypes.c_uint)
_PULL = ctypes.POINTER(ctypes.c_ulonglong)


class Mtml(Binding):
    """One loaded ``libmtml``; :meth:`init` opens the library object every other call hangs off."""

    error = MtmlError
    missing = MissingSymbolError

    def __init__(self, lib: ctypes.CDLL) -> None:
        super().__init__(lib)
        self._handle = ctypes.c_void_p()

    def _out(self, name: str, parent: ctypes.c_void_p, *head: Any) -> ctypes.c_void_p:
        obj = ctypes.c_void_p()
        argtypes = (_P, *[ctypes.c_uint for _ in head], _PP)
        self._call(name, argtypes, parent, *head, ctypes.byref(obj))
        return obj

    def _string(self, name: str, obj: ctypes.c_void_p, size: int) -> str:
        buf = ctypes.create_string_buffer(size)
        self._call(name, (_P, ctypes.c_char_p, ctypes.c_uint), obj, buf, size)
        return c_text(buf.raw)

    # MtmlReturn mtmlLibraryInit(MtmlLibrary **lib)
    def init(self) -> None:
        self._call("mtmlLibraryInit", (_PP,), ctypes.byref(self._handle))

    # MtmlReturn mtmlLibraryShutDown(MtmlLibrary *lib)
    def shutdown(self) -> None:
        self._call("mtmlLibraryShutDown", (_P,), self._handle)

    # MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary *lib, unsigned int *count)
    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("mtmlLibraryCountDevice", (_P, _PUINT), self._handle, ctypes.byref(count))
        return int(count.value)

    # MtmlReturn mtmlLibraryInitSystem(const MtmlLibrary *lib, MtmlSystem **sys)
    # MtmlReturn mtmlSystemGetDriverVersion(const MtmlSystem *sys, char *version, unsigned int length)
    def driver_version(self) -> str:
        system = self._out("mtmlLibraryInitSystem", self._handle)
        return self._string("mtmlSystemGetDriverVersion", system, DRIVER_VERSION_BUFFER_SIZE)

    # MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary *lib, unsigned int index, MtmlDevice **dev)
    def device(self, index: int) -> ctypes.c_void_p:
        return self._out("mtmlLibraryInitDeviceByIndex", self._handle, index)

    # MtmlReturn mtmlDeviceGetUUID(const MtmlDevice *dev, char *uuid, unsigned int length)
    def uuid(self, device: ctypes.c_void_p) -> str:
        return self._string("mtmlDeviceGetUUID", device, UUID_BUFFER_SIZE)

    # MtmlReturn mtmlDeviceGetName(const MtmlDevice *dev, char *name, unsigned int length)
    def name(self, device: ctypes.c_void_p) -> str:
        return self._string("mtmlDeviceGetName", device, NAME_BUFFER_SIZE)

    # MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice *dev, MtmlPciInfo *pci)
    def pci_sbdf(self, device: ctypes.c_void_p) -> str:
        info = _PciInfo()
        self._call("mtmlDeviceGetPciInfo", (_P, ctypes.POINTER(_PciInfo)), device, ctypes.byref(info))
        return c_text(info.sbdf) or f"{info.segment:04x}:{info.bus:02x}:{info.device:02x}.0"

    def _uint(self, name: str, obj: ctypes.c_void_p) -> int:
        value = ctypes.c_uint()
        self._call(name, (_P, _PUINT), obj, ctypes.byref(value))
        return int(value.value)

    def _ull(self, name: str, obj: ctypes.c_void_p) -> int:
        value = ctypes.c_ulonglong()
        self._call(name, (_P, _PULL), obj, ctypes.byref(value))
        return int(value.value)

    # MtmlReturn mtmlDeviceCountGpuCores(const MtmlDevice *device, unsigned int *numCores)
    def gpu_cores(self, device: ctypes.c_void_p) -> int:
        return self._uint("mtmlDeviceCountGpuCores", device)

    # MtmlReturn mtmlDeviceGetPowerUsage(const MtmlDevice *dev, unsigned int *power); mW
    def power_mw(self, device: ctypes.c_void_p) -> int:
        return self._uint("mtmlDeviceGetPowerUsage", device)

    # MtmlReturn mtmlDeviceInitMemory(const MtmlDevice *dev, MtmlMemory **mem)
    # MtmlReturn mtmlMemoryGetTotal/GetUsed(const MtmlMemory *mem, unsigned long long *bytes)
    def memory_bytes(self, device: ctypes.c_void_p) -> tuple[int, int]:
        memory = self._out("mtmlDeviceInitMemory", device)
        return self._ull("mtmlMemoryGetTotal", memory), self._ull("mtmlMemoryGetUsed", memory)

    # MtmlReturn mtmlDeviceInitGpu(const MtmlDevice *dev, MtmlGpu **gpu)
    def gpu(self, device: ctypes.c_void_p) -> ctypes.c_void_p:
        return self._out("mtmlDeviceInitGpu", device)

    # MtmlReturn mtmlGpuGetUtilization(const MtmlGpu *gpu, unsigned int *utilization)
    def gpu_utilization(self, gpu: ctypes.c_void_p) -> int:
        return self._uint("mtmlGpuGetUtilization", gpu)

    # MtmlReturn mtmlGpuGetTemperature(const MtmlGpu *gpu, unsigned int *temp); °C
    def gpu_temperature(self, gpu: ctypes.c_void_p) -> int:
        return self._uint("mtmlGpuGetTemperature", gpu)
