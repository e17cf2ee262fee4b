"""Minimal ctypes binding of MetaX MXSML (``libmxsml.so``): only the calls detection and the usage
monitor need.

Sources (no vendor header ships with this project): MetaX's own ``pymxsml`` ctypes binding (struct
``c_mxsmlDeviceInfo_t``, ``c_mxsmlMemoryInfo_t`` in KB, ``c_mxSmlBoardWayElectricInfo_t`` in mV/mA/mW,
the ``mxsmlReturn_t`` codes, ``MXSML_VERSION_DRIVER = 1``, ``MXSML_USAGE_XCORE = 4``,
``MXSML_TEMPERATURE_HOTSPOT = 0``, ``unsigned int mxSmlGetDeviceCount(void)``), cross-checked with
gpustack/gpustack-operator ``binding/mxsml`` and MetaX's Go sample, which prints the hotspot
temperature divided by 100 (unit: hundredths of a degree Celsius).

``mxSmlGetDeviceCount`` reports the count itself and cannot fail; a library missing one of these
entry points raises :class:`MissingSymbolError`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from gpustack_operator.host.libs import Binding, LibraryCallError, MissingEntryPointError, c_text

MXSML_SUCCESS = 0
MXSML_INSUFFICIENT_SIZE = 10
MXSML_VERSION_DRIVER = 1
MXSML_USAGE_XCORE = 4
MXSML_TEMPERATURE_HOTSPOT = 0
MXSML_VIRTUALIZATION_MODE_VF = 2
VERSION_INFO_SIZE = 64

RETURN_NAMES = {
    0: "MXSML_SUCCESS",
    1: "MXSML_ERROR_FAILURE",
    2: "MXSML_ERROR_NO_DEVICE",
    3: "MXSML_ERROR_OPERATION_NOT_SUPPORT",
    4: "MXSML_ERROR_SYSFS_ERROR",
    5: "MXSML_ERROR_SYSFS_WRITE_ERROR",
    6: "MXSML_ERROR_INVALID_DEVICE_ID",
    8: "MXSML_ERROR_PERMISSION_DENIED",
    9: "MXSML_ERROR_INVALID_INPUT",
    10: "MXSML_ERROR_INSUFFICIENT_SIZE",
    23: "MXSML_ERROR_BUSY_DEVICE",
    26: "MXSML_ERROR_LOAD_DLL_FAILURE",
}


class MxsmlError(LibraryCallError):
    return_names = RETURN_NAMES
    return_type = "mxSmlReturn_t"
    library = "libmxsml"


class MissingSymbolError(MissingEntryPointError, MxsmlError):
    pass


class _DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("deviceId", ctypes.c_uint),
        ("type", ctypes.c_uint),  # deprecated
        ("bdfId", ctypes.c_char * 32),
        ("gpuId", ctypes.c_uint),
        ("nodeId", ctypes.c_uint),
        ("uuid", ctypes.c_char * 96),
        ("brand", ctypes.c_uint),
        ("mode", ctypes.c_uint),
        ("deviceName", ctypes.c_char * 32),
    ]


class _MemoryInfo(ctypes.Structure):
    _fields_ = [
        ("visVramTotal", ctypes.c_long),
        ("visVramUse", ctypes.c_long),
        ("vramTotal", ctypes.c_long),
        ("vramUse", ctypes.c_long),
        ("xttTotal", ctypes.c_long),
        ("xttUse", ctypes.c_long),
    ]


class _BoardWayElectricInfo(ctypes.Structure):
    _fields_ = [("voltage", ctypes.c_uint), ("current", ctypes.c_uint), ("power", ctypes.c_uint)]


@dataclass(frozen=True)
class DeviceInfo:
    bdf: str
    uuid: str
    name: str
    virtual_function: bool


class Mxsml(Binding):
    """One loaded ``libmxsml``. Devices are addressed by their MXSML index."""

    error = MxsmlError
    missing = MissingSymbolError
    status = ctypes.c_uint

    # mxSmlReturn_t mxSmlInit(void)
    def init(self) -> None:
        self._call("mxSmlInit", ())

    # unsigned int mxSmlGetDeviceCount(void)
    def device_count(self) -> int:
        return int(self._fn("mxSmlGetDeviceCount", ctypes.c_uint)())

    # mxSmlReturn_t mxSmlGetDeviceInfo(unsigned int deviceId, mxSmlDeviceInfo_t *deviceInfo)
    def device_info(self, index: int) -> DeviceInfo:
        info = _DeviceInfo()
        self._call("mxSmlGetDeviceInfo", (ctypes.c_uint, ctypes.POINTER(_DeviceInfo)), index, ctypes.byref(info))
        return DeviceInfo(
            bdf=c_text(info.bdfId),
            uuid=c_text(info.uuid),
            name=c_text(info.deviceName),
            virtual_function=int(info.mode) == MXSML_VIRTUALIZATION_MODE_VF,
        )

    # mxSmlReturn_t mxSmlGetMemoryInfo(unsigned int deviceId, mxSmlMemoryInfo_t *memory); KB
    def memory_kib(self, index: int) -> tuple[int, int]:
        info = _MemoryInfo()
        self._call("mxSmlGetMemoryInfo", (ctypes.c_uint, ctypes.POINTER(_MemoryInfo)), index, ctypes.byref(info))
        return int(info.vramTotal), int(info.vramUse)

    def _version(self, name: str, argtypes: tuple[Any, ...], *head: Any) -> str:
        buf = ctypes.create_string_buffer(VERSION_INFO_SIZE)
        size = ctypes.c_uint(VERSION_INFO_SIZE)
        self._call(name, argtypes, *head, buf, ctypes.byref(size))
        return c_text(buf.raw)

    # mxSmlReturn_t mxSmlGetDeviceVersion(unsigned int deviceId, mxSmlVersionUnit_t unit, char *version,
    #                                     unsigned int *size)
    def driver_version(self, index: int = 0) -> str:
        argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint))
        return self._version("mxSmlGetDeviceVersion", argtypes, index, MXSML_VERSION_DRIVER)

    # mxSmlReturn_t mxSmlGetMacaVersion(char *version, unsigned int *size)
    def maca_version(self) -> str:
        return self._version("mxSmlGetMacaVersion", (ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint)))

    # mxSmlReturn_t mxSmlGetTemperatureInfo(unsigned int deviceId, mxSmlTemperatureSensors_t, int *temp)
    def hotspot_centidegrees(self, index: int) -> int:
        temp = ctypes.c_int()
        argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_int))
        self._call("mxSmlGetTemperatureInfo", argtypes, index, MXSML_TEMPERATURE_HOTSPOT, ctypes.byref(temp))
        return int(temp.value)

    # mxSmlReturn_t mxSmlGetDeviceIpUsage(unsigned int deviceId, mxSmlUsageIp_t ip, int *usage)
    def xcore_usage(self, index: int) -> int:
        usage = ctypes.c_int()
        argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_int))
        self._call("mxSmlGetDeviceIpUsage", argtypes, index, MXSML_USAGE_XCORE, ctypes.byref(usage))
        return int(usage.value)

    # mxSmlReturn_t mxSmlGetBoardPowerInfo(unsigned int deviceId, unsigned int *infoSize,
    #                                      mxSmlBoardWayElectricInfo_t *boardInfo); mW per way
    def board_power_mw(self, index: int) -> list[int]:
        fn = self._fn(
            "mxSmlGetBoardPowerInfo",
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(_BoardWayElectricInfo),
        )
        size = 8
        for _attempt in range(3):
            ways = (_BoardWayElectricInfo * size)()
            count = ctypes.c_uint(size)
            code = int(fn(index, ctypes.byref(count), ways))
            if code == MXSML_INSUFFICIENT_SIZE and count.value > size:
                size = int(count.value)
                continue
            if code != MXSML_SUCCESS:
                raise MxsmlError("mxSmlGetBoardPowerInfo", code)
            return [int(ways[i].power) for i in range(min(int(count.value), size))]
        raise MxsmlError("mxSmlGetBoardPowerInfo", MXSML_INSUFFICIENT_SIZE)
