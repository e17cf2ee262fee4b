"""Minimal ctypes binding of Cambricon CNDev (``libcndev.so``): only the calls detection, the usage
monitor and the sMLU driver mode need.

Source of every symbol, signature and struct layout below (no vendor header ships with this
project): ``cndev.h`` as vendored in gpustack/gpustack-operator ``binding/cndev/cndev.h`` (the
CNDEV_VERSION_6 generation), cross-checked against Cambricon's cambricon-k8s-device-plugin headers
and its cnDev mock (``cndevInit(int)``, ``cndevGetDeviceHandleByIndex(int, cndevDevice_t *)``,
``cndevGetSMLUMode(cndevSMLUMode_t *, cndevDevice_t)``). Versioned structs carry ``version`` as their
first field, set to ``CNDEV_VERSION_6`` by the caller (cnDev rejects an undeclared layout with
``CNDEV_ERROR_UNSUPPORTED_API_VERSION``). Memory sizes are in MB (MiB) as the header states.

A symbol the loaded library does not export is a :class:`MissingSymbolError` — the "no such API" case the
sMLU mode must tell apart from a driver refusal.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from gpustack_operator.host.libs import Binding, LibraryCallError, MissingEntryPointError, c_text

CNDEV_VERSION_6 = 6
CNDEV_SUCCESS = 0
CNDEV_FEATURE_DISABLED = 0
CNDEV_FEATURE_ENABLED = 1

# cndevRet_t names (cndev.h), for messages when cndevGetErrorString is unavailable.
RETURN_NAMES = {
    0: "CNDEV_SUCCESS",
    1: "CNDEV_ERROR_NO_DRIVER",
    2: "CNDEV_ERROR_LOW_DRIVER_VERSION",
    3: "CNDEV_ERROR_UNSUPPORTED_API_VERSION",
    4: "CNDEV_ERROR_UNINITIALIZED",
    5: "CNDEV_ERROR_INVALID_ARGUMENT",
    6: "CNDEV_ERROR_INVALID_DEVICE_ID",
    7: "CNDEV_ERROR_UNKNOWN",
    8: "CNDEV_ERROR_MALLOC",
    9: "CNDEV_ERROR_INSUFFICIENT_SPACE",
    10: "CNDEV_ERROR_NOT_SUPPORTED",
    11: "CNDEV_ERROR_INVALID_LINK",
    12: "CNDEV_ERROR_NO_DEVICES",
    13: "CNDEV_ERROR_NO_PERMISSION",
    14: "CNDEV_ERROR_NOT_FOUND",
    15: "CNDEV_ERROR_IN_USE",
    16: "CNDEV_ERROR_DUPLICATE",
    17: "CNDEV_ERROR_TIMEOUT",
    18: "CNDEV_ERROR_IN_PROBLEM",
}


class CndevError(LibraryCallError):
    """A CNDev call returned a non-success ``cndevRet_t``."""

    return_names = RETURN_NAMES
    return_type = "cndevRet_t"
    library = "libcndev"


class MissingSymbolError(MissingEntryPointError, CndevError):
    """The loaded library does not export this entry point (an older cnDev / driver)."""


class _CardInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("number", ctypes.c_uint32)]


class _UUID(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("uuid", ctypes.c_uint8 * 37), ("ncsUUID64", ctypes.c_uint64)]


class _MemoryInfoV2(ctypes.Structure):
    _fields_ = [
        ("physicalMemoryTotal", ctypes.c_int64),
        ("physicalMemoryUsed", ctypes.c_int64),
        ("reservedMemory", ctypes.c_int64),
        ("virtualMemoryTotal", ctypes.c_int64),
        ("virtualMemoryUsed", ctypes.c_int64),
        ("globalMemory", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 16),
    ]


class _VersionInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("mcuMajorVersion", ctypes.c_uint32),
        ("mcuMinorVersion", ctypes.c_uint32),
        ("mcuBuildVersion", ctypes.c_uint32),
        ("driverMajorVersion", ctypes.c_uint32),
        ("driverMinorVersion", ctypes.c_uint32),
        ("driverBuildVersion", ctypes.c_uint32),
    ]


class _PCIeInfoV2(ctypes.Structure):
    _fields_ = [
        ("subsystemId", ctypes.c_uint32),
        ("deviceId", ctypes.c_uint32),
        ("vendor", ctypes.c_uint16),
        ("subsystemVendor", ctypes.c_uint16),
        ("domain", ctypes.c_uint32),
        ("bus", ctypes.c_uint32),
        ("device", ctypes.c_uint32),
        ("function", ctypes.c_uint32),
        ("moduleId", ctypes.c_uint16),
        ("slotId", ctypes.c_uint16),
        ("reserved", ctypes.c_uint32 * 8),
    ]


class _DevicePowerInfo(ctypes.Structure):
    _fields_ = [
        ("usage", ctypes.c_int32),
        ("cap", ctypes.c_int32),
        ("machine", ctypes.c_int32),
        ("tdp", ctypes.c_int32),
        ("maxPower", ctypes.c_int32),
        ("reserved", ctypes.c_int32 * 16),
    ]


class _TemperatureInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("board", ctypes.c_int32),
        ("cluster", ctypes.c_int32 * 20),
        ("memoryDie", ctypes.c_int32 * 8),
        ("chip", ctypes.c_int32),
        ("airInlet", ctypes.c_int32),
        ("airOutlet", ctypes.c_int32),
        ("memory", ctypes.c_int32),
        ("videoInput", ctypes.c_int32),
        ("cpu", ctypes.c_int32),
        ("isp", ctypes.c_int32),
    ]


class _UtilizationInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("averageCoreUtilization", ctypes.c_int32),
        ("coreUtilization", ctypes.c_int32 * 80),
    ]


class _SMLUMode(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("smluMode", ctypes.c_int32)]  # cndevEnableStatusEnum_t


class CnDev(Binding):
    """One loaded ``libcndev``. Methods raise :class:`CndevError` / :class:`MissingSymbolError`."""

    error = CndevError
    missing = MissingSymbolError

    # cndevRet_t cndevInit(int reserved)
    def init(self) -> None:
        self._call("cndevInit", (ctypes.c_int,), 0)

    # cndevRet_t cndevRelease(void)
    def release(self) -> None:
        self._call("cndevRelease", ())

    # cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *cardNum)
    def device_count(self) -> int:
        info = _CardInfo(version=CNDEV_VERSION_6)
        self._call("cndevGetDeviceCount", (ctypes.POINTER(_CardInfo),), ctypes.byref(info))
        return int(info.number)

    # cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle)
    def handle(self, index: int) -> int:
        handle = ctypes.c_int32()
        self._call(
            "cndevGetDeviceHandleByIndex", (ctypes.c_int, ctypes.POINTER(ctypes.c_int32)), index, ctypes.byref(handle)
        )
        return int(handle.value)

    # cndevRet_t cndevGetUUID(cndevUUID_t *uuidInfo, cndevDevice_t device)
    def uuid(self, handle: int) -> str:
        info = _UUID(version=CNDEV_VERSION_6)
        self._call("cndevGetUUID", (ctypes.POINTER(_UUID), ctypes.c_int32), ctypes.byref(info), handle)
        return c_text(bytes(info.uuid))

    # const char *cndevGetCardNameStringByDevId(cndevDevice_t device); "Unknown" when unknown
    def card_name(self, handle: int) -> str:
        raw = self._fn("cndevGetCardNameStringByDevId", ctypes.c_char_p, ctypes.c_int32)(handle)
        return c_text(raw or b"")

    # cndevRet_t cndevGetMemoryUsageV2(cndevMemoryInfoV2_t *memInfo, cndevDevice_t device); MB
    def memory_mib(self, handle: int) -> tuple[int, int]:
        """(physical total, physical used) in MiB."""
        info = _MemoryInfoV2()
        self._call("cndevGetMemoryUsageV2", (ctypes.POINTER(_MemoryInfoV2), ctypes.c_int32), ctypes.byref(info), handle)
        return int(info.physicalMemoryTotal), int(info.physicalMemoryUsed)

    # cndevRet_t cndevGetPCIeInfoV2(cndevPCIeInfoV2_t *info, cndevDevice_t device)
    def pci_bus_id(self, handle: int) -> str:
        info = _PCIeInfoV2()
        self._call("cndevGetPCIeInfoV2", (ctypes.POINTER(_PCIeInfoV2), ctypes.c_int32), ctypes.byref(info), handle)
        return f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.{info.function:x}"

    # cndevRet_t cndevGetVersionInfo(cndevVersionInfo_t *versInfo, cndevDevice_t device)
    def driver_version(self, handle: int) -> tuple[int, int, int]:
        info = _VersionInfo(version=CNDEV_VERSION_6)
        self._call("cndevGetVersionInfo", (ctypes.POINTER(_VersionInfo), ctypes.c_int32), ctypes.byref(info), handle)
        return int(info.driverMajorVersion), int(info.driverMinorVersion), int(info.driverBuildVersion)

    # cndevRet_t cndevGetDevicePowerInfo(cndevDevicePowerInfo_t *powerInfo, cndevDevice_t device); W
    def power_watts(self, handle: int) -> int:
        info = _DevicePowerInfo()
        self._call(
            "cndevGetDevicePowerInfo", (ctypes.POINTER(_DevicePowerInfo), ctypes.c_int32), ctypes.byref(info), handle
        )
        return int(info.usage)

    # cndevRet_t cndevGetTemperatureInfo(cndevTemperatureInfo_t *tempInfo, cndevDevice_t device); °C
    def chip_temperature(self, handle: int) -> int:
        info = _TemperatureInfo(version=CNDEV_VERSION_6)
        self._call(
            "cndevGetTemperatureInfo", (ctypes.POINTER(_TemperatureInfo), ctypes.c_int32), ctypes.byref(info), handle
        )
        return int(info.chip)

    # cndevRet_t cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *utilInfo, cndevDevice_t device)
    def core_utilization(self, handle: int) -> int:
        info = _UtilizationInfo(version=CNDEV_VERSION_6)
        self._call(
            "cndevGetDeviceUtilizationInfo",
            (ctypes.POINTER(_UtilizationInfo), ctypes.c_int32),
            ctypes.byref(info),
            handle,
        )
        return int(info.averageCoreUtilization)

    # cndevRet_t cndevGetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device)
    def smlu_mode(self, handle: int) -> bool:
        mode = _SMLUMode(version=CNDEV_VERSION_6)
        self._call("cndevGetSMLUMode", (ctypes.POINTER(_SMLUMode), ctypes.c_int32), ctypes.byref(mode), handle)
        return int(mode.smluMode) == CNDEV_FEATURE_ENABLED

    # cndevRet_t cndevSetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device)
    def set_smlu_mode(self, handle: int, enabled: bool) -> None:
        mode = _SMLUMode(version=CNDEV_VERSION_6, smluMode=CNDEV_FEATURE_ENABLED if enabled else CNDEV_FEATURE_DISABLED)
        self._call("cndevSetSMLUMode", (ctypes.POINTER(_SMLUMode), ctypes.c_int32), ctypes.byref(mode), handle)


# -- sMLU profiles and instances (the sliced allocation) -----------------------------------------------
#
# Names, signatures and layouts as cndev.h declares them (CNDEV_VERSION_6; Cambricon's
# cambricon-k8s-device-plugin headers and its cndev binding, which calls exactly these):
# ``cndevGetSMluProfileIdInfo``, ``cndevGetSMluProfileInfo``, ``cndevCreateSMluProfileInfo``,
# ``cndevCreateSMluInstanceByProfileId``, ``cndevGetAllSMluInstanceInfo``,
# ``cndevDestroySMluInstanceByHandle``. Profile memory sizes are in bytes. **Assumed** (the plugin's
# own reading, not a documented rule): an instance handle is ``instanceId << 8 | card slot``.

SMLU_NAME_SIZE = 100
SMLU_MAX = 0  # cndevSMluItemEnum_t CNDEV_SMLU_MAX: index of the maximum in the [max, usage] pairs


class _SMluSet(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("mluQuota", ctypes.c_uint32), ("memorySize", ctypes.c_uint64)]


class _SMluProfileIdInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("count", ctypes.c_int32), ("profileId", ctypes.c_int32 * 128)]


class _SMluProfileInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("profileId", ctypes.c_int32),
        ("name", ctypes.c_char * SMLU_NAME_SIZE),
        ("totalCapacity", ctypes.c_uint32),
        ("remainCapacity", ctypes.c_uint32),
        ("mluQuota", ctypes.c_uint32 * 2),
        ("memorySize", ctypes.c_uint64 * 2),
    ]


class _SMluInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("profileId", ctypes.c_int32),
        ("instanceId", ctypes.c_int32),
        ("uuid", ctypes.c_uint8 * 37),
        ("domain", ctypes.c_int32),
        ("bus", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("function", ctypes.c_int32),
        ("profileName", ctypes.c_char * SMLU_NAME_SIZE),
        ("instanceName", ctypes.c_char * SMLU_NAME_SIZE),
        ("devNodeName", ctypes.c_char * SMLU_NAME_SIZE),
        ("mluQuota", ctypes.c_uint32 * 2),
        ("memorySize", ctypes.c_uint64 * 2),
        ("reserved", ctypes.c_uint32 * 128),
    ]


@dataclass(frozen=True)
class SmluProfile:
    id: int
    name: str
    quota: int  # percent of the card's MLU cores
    memory_bytes: int
    remain: int


@dataclass(frozen=True)
class SmluInstance:
    profile_id: int
    instance_id: int
    name: str
    dev_node: str
    uuid: str


class CnDevSmlu(CnDev):
    """:class:`CnDev` plus the sMLU profile/instance calls."""

    # cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *profileId, cndevDevice_t device)
    # cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *profileInfo, int profile, cndevDevice_t device)
    def smlu_profiles(self, handle: int) -> list[SmluProfile]:
        ids = _SMluProfileIdInfo(version=CNDEV_VERSION_6)
        argtypes = (ctypes.POINTER(_SMluProfileIdInfo), ctypes.c_int32)
        self._call("cndevGetSMluProfileIdInfo", argtypes, ctypes.byref(ids), handle)
        profiles = []
        for pid in list(ids.profileId)[: max(0, min(int(ids.count), 128))]:
            info = _SMluProfileInfo(version=CNDEV_VERSION_6)
            argtypes2 = (ctypes.POINTER(_SMluProfileInfo), ctypes.c_int, ctypes.c_int32)
            self._call("cndevGetSMluProfileInfo", argtypes2, ctypes.byref(info), pid, handle)
            profiles.append(
                SmluProfile(
                    id=int(pid),
                    name=c_text(bytes(info.name)),
                    quota=int(info.mluQuota[SMLU_MAX]),
                    memory_bytes=int(info.memorySize[SMLU_MAX]),
                    remain=int(info.remainCapacity),
                )
            )
        return profiles

    # cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *profileInfo, int *profileId, cndevDevice_t device)
    def create_smlu_profile(self, handle: int, quota: int, memory_bytes: int) -> int:
        spec = _SMluSet(version=CNDEV_VERSION_6, mluQuota=quota, memorySize=memory_bytes)
        pid = ctypes.c_int()
        argtypes = (ctypes.POINTER(_SMluSet), ctypes.POINTER(ctypes.c_int), ctypes.c_int32)
        self._call("cndevCreateSMluProfileInfo", argtypes, ctypes.byref(spec), ctypes.byref(pid), handle)
        return int(pid.value)

    # cndevRet_t cndevCreateSMluInstanceByProfileId(cndevMluInstance_t *miHandle, unsigned int profileId,
    #                                               cndevDevice_t device, char *instanceName)
    def create_smlu_instance(self, handle: int, profile_id: int, name: str) -> int:
        instance = ctypes.c_int32()
        argtypes = (ctypes.POINTER(ctypes.c_int32), ctypes.c_uint, ctypes.c_int32, ctypes.c_char_p)
        self._call(
            "cndevCreateSMluInstanceByProfileId", argtypes, ctypes.byref(instance), profile_id, handle, name.encode()
        )
        return int(instance.value)

    # cndevRet_t cndevGetAllSMluInstanceInfo(int *count, cndevSMluInfo_t *smluInfo, cndevDevice_t device)
    def smlu_instances(self, handle: int) -> list[SmluInstance]:
        count = ctypes.c_int(128)
        infos = (_SMluInfo * 128)()
        infos[0].version = CNDEV_VERSION_6
        argtypes = (ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_SMluInfo), ctypes.c_int32)
        self._call("cndevGetAllSMluInstanceInfo", argtypes, ctypes.byref(count), infos, handle)
        return [
            SmluInstance(
                profile_id=int(info.profileId),
                instance_id=int(info.instanceId),
                name=c_text(bytes(info.instanceName)),
                dev_node=c_text(bytes(info.devNodeName)),
                uuid=c_text(bytes(info.uuid)),
            )
            for info in list(infos)[: max(0, min(int(count.value), 128))]
        ]

    # cndevRet_t cndevDestroySMluInstanceByHandle(cndevMluInstance_t miHandle)
    def destroy_smlu_instance(self, instance: int) -> None:
        self._call("cndevDestroySMluInstanceByHandle", (ctypes.c_int32,), instance)
