"""Minimal ctypes bindings for ``libdcmi.so``, both DCMI API generations.

No Python binding for DCMI exists on PyPI, so the few entry points the detector, the monitor and the
container-share mode need are declared here by hand. Where each signature and layout comes from:

* ``dcmi_interface_api.h`` of Huawei's open-source driver tree (``src/custom/include/``, 2025, CANN
  Open Software License 2.0; public mirrors on GitHub, e.g. ``verylucky01/driver``), which declares
  both generations side by side: the V1 ``dcmi_*(card_id, device_id, …)`` calls and the V2
  ``dcmiv2_*(dev_id, …)`` calls (documented there in Chinese, "芯片逻辑ID" = the logic id), the
  structs (``dcmi_chip_info`` with three 32-byte ``unsigned char`` arrays and ``aicore_cnt``,
  ``dcmi_chip_info_v2`` adding ``npu_name``, ``dcmi_die_id`` of five ``unsigned int``,
  ``dcmi_hbm_info``, ``dcmi_memory_info``, ``dcmi_get_memory_info_stru``, ``dcmi_pcie_info``,
  ``dcmi_pcie_info_all``), the ``dcmi_die_type`` enum (``NDIE, VDIE, DDIE``), the unit types
  (``NPU_TYPE = 0``), ``DCMI_UTILIZATION_RATE_AICORE = 2`` and the error codes
  (``DCMI_ERROR_CODE_BASE = -8000``; ``NOT_SUPPORT = base - 255 = -8255``);
* the same header as vendored by gpustack/gpustack-operator (``binding/dcmi/dcmi_interface_api.h``)
  and that project's ``binding/dcmi/library_device.go`` for the call order: the die is read as VDIE
  through ``dcmi_get_device_die_v2`` with ``dcmi_get_device_die`` as the older fallback, and on V2 as
  VDIE then DDIE (the die type the vendor names as the A5 chip's uuid); the physical id is
  ``dcmi_get_device_logic_id`` → ``dcmi_get_device_phyid_from_logicid`` on V1 and
  ``dcmiv2_get_chip_phy_id_by_dev_id`` on V2;
* units from the driver's own implementation: HBM sizes are MB (``dcmi_get_npu_hbm_info`` divides
  the DSMI KB figure by 1024), power is in 0.1 W.

The two generations address a device differently: V1 by (card id, device-in-card), V2 by one device
id with no card level. :class:`DeviceRef` carries the V1 pair; on V2 the device id is presented as a
card holding one device (``card == dev id``, device-in-card always 0) and any other second coordinate
is refused — the translation gpustack-operator's binding makes (supplement §1.3).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpustack_operator.host.libs import LibraryLoadError, LibrarySpec, find_library, load_library
from gpustack_operator.host.root import HostRoot
from gpustack_operator.manufacturers.ascend.versions import DEFAULT_CANN_HOME, cann_home

log = logging.getLogger(__name__)

ApiVersion = Literal["v1", "v2"]

# -- constants (dcmi_interface_api.h) -----------------------------------------------------------

OK = 0
ERROR_CODE_BASE = -8000
ERR_INVALID_PARAMETER = ERROR_CODE_BASE - 1
ERR_OPER_NOT_PERMITTED = ERROR_CODE_BASE - 2
ERR_INNER_ERR = ERROR_CODE_BASE - 5
ERR_TIME_OUT = ERROR_CODE_BASE - 6
ERR_INVALID_DEVICE_ID = ERROR_CODE_BASE - 7
ERR_DEVICE_NOT_EXIST = ERROR_CODE_BASE - 8
ERR_NOT_READY = ERROR_CODE_BASE - 12
ERR_NOT_SUPPORT_IN_CONTAINER = ERROR_CODE_BASE - 13
ERR_NOT_SUPPORT = ERROR_CODE_BASE - 255  # -8255

ERROR_NAMES = {
    ERROR_CODE_BASE - 1: "INVALID_PARAMETER",
    ERROR_CODE_BASE - 2: "OPER_NOT_PERMITTED",
    ERROR_CODE_BASE - 3: "MEM_OPERATE_FAIL",
    ERROR_CODE_BASE - 4: "SECURE_FUN_FAIL",
    ERROR_CODE_BASE - 5: "INNER_ERR",
    ERROR_CODE_BASE - 6: "TIME_OUT",
    ERROR_CODE_BASE - 7: "INVALID_DEVICE_ID",
    ERROR_CODE_BASE - 8: "DEVICE_NOT_EXIST",
    ERROR_CODE_BASE - 9: "IOCTL_FAIL",
    ERROR_CODE_BASE - 10: "SEND_MSG_FAIL",
    ERROR_CODE_BASE - 11: "RECV_MSG_FAIL",
    ERROR_CODE_BASE - 12: "NOT_REDAY",
    ERROR_CODE_BASE - 13: "NOT_SUPPORT_IN_CONTAINER",
    ERROR_CODE_BASE - 14: "FILE_OPERATE_FAIL",
    ERROR_CODE_BASE - 15: "RESET_FAIL",
    ERROR_CODE_BASE - 16: "ABORT_OPERATE",
    ERROR_CODE_BASE - 17: "IS_UPGRADING",
    ERROR_CODE_BASE - 20: "RESOURCE_OCCUPIED",
    ERROR_CODE_BASE - 22: "PARTITION_NOT_RIGHT",
    ERROR_CODE_BASE - 23: "CONFIG_INFO_NOT_EXIST",
    ERR_NOT_SUPPORT: "NOT_SUPPORT",
}

MAX_CHIP_NAME_LEN = 32
DIE_ID_COUNT = 5
MAX_VER_LEN = 255
MAX_CARD_NUM = 64
NPU_TYPE = 0  # enum dcmi_unit_type
NDIE, VDIE, DDIE = 0, 1, 2  # enum dcmi_die_type
UTILIZATION_RATE_AICORE = 2
MAIN_CMD_CHIP_INF = 12  # enum dcmi_main_cmd
CHIP_INF_SUB_CMD_SPOD_INFO = 1


# -- structs -------------------------------------------------------------------------------------

_Name = ctypes.c_ubyte * MAX_CHIP_NAME_LEN


class ChipInfo(ctypes.Structure):
    """``struct dcmi_chip_info``."""

    _fields_ = (
        ("chip_type", _Name),
        ("chip_name", _Name),
        ("chip_ver", _Name),
        ("aicore_cnt", ctypes.c_uint),
    )


class ChipInfoV2(ctypes.Structure):
    """``struct dcmi_chip_info_v2`` (what ``dcmiv2_get_device_chip_info`` fills)."""

    _fields_ = (
        ("chip_type", _Name),
        ("chip_name", _Name),
        ("chip_ver", _Name),
        ("aicore_cnt", ctypes.c_uint),
        ("npu_name", _Name),
    )


class DieId(ctypes.Structure):
    """``struct dcmi_die_id`` (same layout as V1's ``struct dcmi_soc_die_stru``)."""

    _fields_ = (("soc_die", ctypes.c_uint * DIE_ID_COUNT),)


class HbmInfo(ctypes.Structure):
    """``struct dcmi_hbm_info``; sizes in MB."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    )


class MemoryInfo(ctypes.Structure):
    """``struct dcmi_memory_info`` (``dcmi_get_device_memory_info_v2``); size in MB."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("utiliza", ctypes.c_uint),
    )


class MemoryInfoV3(ctypes.Structure):
    """``struct dcmi_get_memory_info_stru`` (``dcmi_get_device_memory_info_v3``); sizes in MB."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("memory_available", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 60),
    )


class PcieInfo(ctypes.Structure):
    """``struct dcmi_pcie_info`` (no PCI domain)."""

    _fields_ = (
        ("deviceid", ctypes.c_uint),
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
    )


class PcieInfoAll(ctypes.Structure):
    """``struct dcmi_pcie_info_all`` (64 bytes, with the PCI domain)."""

    _fields_ = (
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    )


class SpodInfo(ctypes.Structure):
    """``struct dcmi_spod_info`` (48 bytes): the super pod a chip sits in."""

    _fields_ = (
        ("sdid", ctypes.c_uint),
        ("super_pod_size", ctypes.c_uint),
        ("super_pod_id", ctypes.c_uint),
        ("server_index", ctypes.c_uint),
        ("chassis_id", ctypes.c_uint),
        ("super_pod_type", ctypes.c_uint),
        ("reserve", ctypes.c_uint * 6),
    )


_int_p = ctypes.POINTER(ctypes.c_int)
_uint_p = ctypes.POINTER(ctypes.c_uint)
_int, _uint, _str = ctypes.c_int, ctypes.c_uint, ctypes.c_char_p

# Every entry point this module calls, with its C argument types (all return ``int``).
SIGNATURES: dict[str, tuple[Any, ...]] = {
    # V1
    "dcmi_init": (),
    "dcmi_get_card_list": (_int_p, _int_p, _int),
    "dcmi_get_card_num_list": (_int_p, _int_p, _int),
    "dcmi_get_device_num_in_card": (_int, _int_p),
    "dcmi_get_device_type": (_int, _int, _int_p),
    "dcmi_get_device_logic_id": (_int_p, _int, _int),
    "dcmi_get_device_phyid_from_logicid": (_uint, _uint_p),
    "dcmi_get_device_chip_info": (_int, _int, ctypes.POINTER(ChipInfo)),
    "dcmi_get_device_die_v2": (_int, _int, _int, ctypes.POINTER(DieId)),
    "dcmi_get_device_die": (_int, _int, ctypes.POINTER(DieId)),
    "dcmi_get_device_hbm_info": (_int, _int, ctypes.POINTER(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (_int, _int, ctypes.POINTER(MemoryInfoV3)),
    "dcmi_get_device_memory_info_v2": (_int, _int, ctypes.POINTER(MemoryInfo)),
    "dcmi_get_device_pcie_info_v2": (_int, _int, ctypes.POINTER(PcieInfoAll)),
    "dcmi_get_device_pcie_info": (_int, _int, ctypes.POINTER(PcieInfo)),
    "dcmi_get_driver_version": (_str, _uint),
    "dcmi_get_dcmi_version": (_str, _uint),
    "dcmi_get_device_utilization_rate": (_int, _int, _int, _uint_p),
    "dcmi_get_device_temperature": (_int, _int, _int_p),
    "dcmi_get_device_power_info": (_int, _int, _int_p),
    "dcmi_get_device_share_enable": (_int, _int, _int_p),
    "dcmi_set_device_share_enable": (_int, _int, _int),
    # V2
    "dcmiv2_init": (),
    "dcmiv2_get_device_list": (_int_p, _int_p, _int),
    "dcmiv2_get_device_type": (_int, _int_p),
    "dcmiv2_get_device_chip_info": (_int, ctypes.POINTER(ChipInfoV2)),
    "dcmiv2_get_device_die_id": (_int, _int, ctypes.POINTER(DieId)),
    "dcmiv2_get_device_hbm_info": (_int, ctypes.POINTER(HbmInfo)),
    "dcmiv2_get_chip_phy_id_by_dev_id": (_int, _uint_p),
    "dcmiv2_get_device_pcie_info": (_int, ctypes.POINTER(PcieInfoAll)),
    "dcmiv2_get_dcmi_version": (_str, _uint),
    "dcmiv2_get_device_utilization_rate": (_int, _int, _uint_p),
    "dcmiv2_get_device_temperature": (_int, _int_p),
    "dcmiv2_get_device_power_info": (_int, _int_p),
    "dcmiv2_get_mainboard_id": (_int, _uint_p),
    "dcmiv2_get_device_info": (_int, _int, _uint, ctypes.c_void_p, _uint_p),
}

V1_SHARE_ENTRY_POINTS = ("dcmi_get_device_share_enable", "dcmi_set_device_share_enable")


# -- errors --------------------------------------------------------------------------------------


class DcmiError(Exception):
    """A DCMI call failed (``code``), or the library does not export it (``code is None``)."""

    def __init__(self, call: str, code: int | None) -> None:
        self.call = call
        self.code = code
        if code is None:
            text = f"{call} is not exported by libdcmi"
        else:
            text = f"{call} returned {code} ({ERROR_NAMES.get(code, 'unknown error')})"
        super().__init__(text)

    @property
    def missing(self) -> bool:
        return self.code is None

    @property
    def refused(self) -> bool:
        """The driver does not serve this call: NOT_SUPPORT, or the entry point is missing."""
        return self.code is None or self.code == ERR_NOT_SUPPORT


class DcmiUnavailableError(Exception):
    """libdcmi is absent, will not load, or neither generation initialises (an empty answer)."""


# -- the library ---------------------------------------------------------------------------------


def library_spec(environ: dict[str, str] | None = None) -> LibrarySpec:
    """Where ``libdcmi.so`` may be (supplement §4.5): ``LD_LIBRARY_PATH``, then
    ``<CANN_HOME>/driver/lib64/driver`` (``CANN_HOME`` defaulting to ``/usr/local/Ascend``), then the
    driver's other install locations."""
    home = cann_home(environ)
    return LibrarySpec(
        names=("libdcmi.so",),
        default_dirs=(
            f"{home}/driver/lib64/driver",
            "/usr/local/dcmi",
            f"{DEFAULT_CANN_HOME}/driver/lib64/driver",
            f"{DEFAULT_CANN_HOME}/driver/lib64",
        ),
    )


class Library:
    """A loaded libdcmi: entry points resolved lazily, a missing one reported as such."""

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self._cdll = cdll
        self.path = path
        self._fns: dict[str, Callable[..., int] | None] = {}

    def has(self, name: str) -> bool:
        return self._fn(name) is not None

    def _fn(self, name: str) -> Callable[..., int] | None:
        if name not in self._fns:
            try:
                fn = getattr(self._cdll, name)
            except AttributeError:
                self._fns[name] = None
            else:
                fn.argtypes = list(SIGNATURES[name])
                fn.restype = ctypes.c_int
                self._fns[name] = fn
        return self._fns[name]

    def call(self, name: str, *args: Any) -> None:
        """Call ``name``; raises :class:`DcmiError` when it is missing or does not return 0."""
        fn = self._fn(name)
        if fn is None:
            raise DcmiError(name, None)
        rc = int(fn(*args))
        if rc != OK:
            raise DcmiError(name, rc)


def load(host: HostRoot, environ: dict[str, str] | None = None) -> Library:
    """Find and load libdcmi for ``host``; :class:`DcmiUnavailableError` when absent or unloadable."""
    spec = library_spec(environ)
    path = find_library(host, spec, environ)
    if path is None:
        where = ", ".join(spec.default_dirs)
        raise DcmiUnavailableError(f"libdcmi.so not found (looked in LD_LIBRARY_PATH and {where})")
    try:
        return Library(load_library(path), path)
    except LibraryLoadError as exc:
        raise DcmiUnavailableError(f"libdcmi.so would not load: {exc}") from None


# -- readings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRef:
    """A device as V1 addresses it; on V2 ``card`` is the device id and ``device`` is 0."""

    card: int
    device: int


@dataclass(frozen=True)
class Chip:
    chip_type: str
    chip_name: str
    chip_ver: str
    aicore_cnt: int


@dataclass(frozen=True)
class Memory:
    total_mib: int
    used_mib: int | None


def _text(raw: Sequence[int]) -> str:
    data = bytes(raw)
    return data.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


def die_string(die: DieId) -> str:
    """The die as the reference prints it: each word as 8 upper-case hex digits, space separated
    (``%08X`` joined by " "), so ids are fixed-width and stable."""
    return " ".join(f"{word:08X}" for word in die.soc_die)


def bus_id(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


class Dcmi:
    """An initialised libdcmi, speaking the generation that answered (``api``)."""

    def __init__(self, lib: Library, api: ApiVersion) -> None:
        self.lib = lib
        self.api: ApiVersion = api

    # -- enumeration --------------------------------------------------------------------------

    def cards(self) -> list[int]:
        """V1: the card ids; V2: the device ids, each a card holding one device."""
        ids = (ctypes.c_int * MAX_CARD_NUM)()
        num = ctypes.c_int(0)
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_list", ids, ctypes.byref(num), MAX_CARD_NUM)
            call = "dcmiv2_get_device_list"
        else:
            call = "dcmi_get_card_list" if self.lib.has("dcmi_get_card_list") else "dcmi_get_card_num_list"
            self.lib.call(call, ctypes.byref(num), ids, MAX_CARD_NUM)
        if not 0 <= num.value <= MAX_CARD_NUM:
            raise DcmiError(f"{call} (count {num.value})", ERR_INVALID_PARAMETER)
        return list(ids[: num.value])

    def devices_in_card(self, card: int) -> int:
        if self.api == "v2":
            return 1
        num = ctypes.c_int(0)
        self.lib.call("dcmi_get_device_num_in_card", card, ctypes.byref(num))
        return num.value

    def _dev_id(self, ref: DeviceRef) -> int:
        if ref.device != 0:
            raise DcmiError(f"device {ref.device} of V2 device {ref.card}", ERR_INVALID_DEVICE_ID)
        return ref.card

    # -- identity -------------------------------------------------------------------------------

    def device_type(self, ref: DeviceRef) -> int:
        value = ctypes.c_int(0)
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_type", self._dev_id(ref), ctypes.byref(value))
        else:
            self.lib.call("dcmi_get_device_type", ref.card, ref.device, ctypes.byref(value))
        return value.value

    def chip(self, ref: DeviceRef) -> Chip:
        info: ChipInfo | ChipInfoV2
        if self.api == "v2":
            info = ChipInfoV2()
            self.lib.call("dcmiv2_get_device_chip_info", self._dev_id(ref), ctypes.byref(info))
        else:
            info = ChipInfo()
            self.lib.call("dcmi_get_device_chip_info", ref.card, ref.device, ctypes.byref(info))
        return Chip(_text(info.chip_type), _text(info.chip_name), _text(info.chip_ver), int(info.aicore_cnt))

    def die(self, ref: DeviceRef) -> str:
        """The identity die (the accelerator's uuid). V1: VDIE via ``dcmi_get_device_die_v2``, then the
        older ``dcmi_get_device_die``; V2: VDIE, then DDIE (the A5 uuid)."""
        die = DieId()
        if self.api == "v2":
            dev = self._dev_id(ref)
            try:
                self.lib.call("dcmiv2_get_device_die_id", dev, VDIE, ctypes.byref(die))
            except DcmiError:
                self.lib.call("dcmiv2_get_device_die_id", dev, DDIE, ctypes.byref(die))
            return die_string(die)
        try:
            self.lib.call("dcmi_get_device_die_v2", ref.card, ref.device, VDIE, ctypes.byref(die))
        except DcmiError as first:
            try:
                self.lib.call("dcmi_get_device_die", ref.card, ref.device, ctypes.byref(die))
            except DcmiError as second:
                # The older call refused outright says nothing; the newer call's failure is the one.
                raise (first if second.refused else second) from None
        return die_string(die)

    def logic_id(self, ref: DeviceRef) -> int:
        if self.api == "v2":
            return self._dev_id(ref)
        value = ctypes.c_int(0)
        self.lib.call("dcmi_get_device_logic_id", ctypes.byref(value), ref.card, ref.device)
        return value.value

    def physical_id(self, ref: DeviceRef) -> int:
        value = ctypes.c_uint(0)
        if self.api == "v2":
            self.lib.call("dcmiv2_get_chip_phy_id_by_dev_id", self._dev_id(ref), ctypes.byref(value))
        else:
            self.lib.call("dcmi_get_device_phyid_from_logicid", self.logic_id(ref), ctypes.byref(value))
        return value.value

    def pci_bus_id(self, ref: DeviceRef) -> str:
        info = PcieInfoAll()
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_pcie_info", self._dev_id(ref), ctypes.byref(info))
            return bus_id(info.domain, info.bdf_busid, info.bdf_deviceid, info.bdf_funcid)
        try:
            self.lib.call("dcmi_get_device_pcie_info_v2", ref.card, ref.device, ctypes.byref(info))
            return bus_id(info.domain, info.bdf_busid, info.bdf_deviceid, info.bdf_funcid)
        except DcmiError:
            old = PcieInfo()
            self.lib.call("dcmi_get_device_pcie_info", ref.card, ref.device, ctypes.byref(old))
            return bus_id(0, old.bdf_busid, old.bdf_deviceid, old.bdf_funcid)

    # -- memory and usage --------------------------------------------------------------------------

    def hbm(self, ref: DeviceRef) -> Memory:
        info = HbmInfo()
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_hbm_info", self._dev_id(ref), ctypes.byref(info))
        else:
            self.lib.call("dcmi_get_device_hbm_info", ref.card, ref.device, ctypes.byref(info))
        return Memory(int(info.memory_size), int(info.memory_usage))

    def memory(self, ref: DeviceRef) -> Memory:
        """HBM when the device has it; on V1 the detailed memory info otherwise (v3, then v2). V2
        declares no detailed memory call: its memory comes from the HBM query alone."""
        if self.api == "v2":
            return self.hbm(ref)
        try:
            hbm = self.hbm(ref)
        except DcmiError as exc:
            if not (exc.refused or exc.code == ERR_NOT_SUPPORT_IN_CONTAINER):
                raise
        else:
            if hbm.total_mib > 0:
                return hbm
        try:
            v3 = MemoryInfoV3()
            self.lib.call("dcmi_get_device_memory_info_v3", ref.card, ref.device, ctypes.byref(v3))
            return Memory(int(v3.memory_size), int(v3.memory_size) - int(v3.memory_available))
        except DcmiError:
            v2 = MemoryInfo()
            self.lib.call("dcmi_get_device_memory_info_v2", ref.card, ref.device, ctypes.byref(v2))
            return Memory(int(v2.memory_size), int(v2.memory_size) * int(v2.utiliza) // 100)

    def aicore_utilization(self, ref: DeviceRef) -> int:
        value = ctypes.c_uint(0)
        if self.api == "v2":
            dev = self._dev_id(ref)
            self.lib.call("dcmiv2_get_device_utilization_rate", dev, UTILIZATION_RATE_AICORE, ctypes.byref(value))
        else:
            self.lib.call(
                "dcmi_get_device_utilization_rate", ref.card, ref.device, UTILIZATION_RATE_AICORE, ctypes.byref(value)
            )
        return value.value

    def temperature(self, ref: DeviceRef) -> int:
        value = ctypes.c_int(0)
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_temperature", self._dev_id(ref), ctypes.byref(value))
        else:
            self.lib.call("dcmi_get_device_temperature", ref.card, ref.device, ctypes.byref(value))
        return value.value

    def power_deciwatts(self, ref: DeviceRef) -> int:
        """Power draw in units of 0.1 W."""
        value = ctypes.c_int(0)
        if self.api == "v2":
            self.lib.call("dcmiv2_get_device_power_info", self._dev_id(ref), ctypes.byref(value))
        else:
            self.lib.call("dcmi_get_device_power_info", ref.card, ref.device, ctypes.byref(value))
        return value.value

    def mainboard_id(self, ref: DeviceRef) -> int:
        """V2 only (the A5 product type is an A5 fact)."""
        value = ctypes.c_uint(0)
        self.lib.call("dcmiv2_get_mainboard_id", self._dev_id(ref), ctypes.byref(value))
        return value.value

    def super_pod_type(self, ref: DeviceRef) -> int:
        """V2 only: ``dcmiv2_get_device_info(CHIP_INF, SPOD_INFO)`` → ``dcmi_spod_info.super_pod_type``."""
        info = SpodInfo()
        size = ctypes.c_uint(ctypes.sizeof(info))
        self.lib.call(
            "dcmiv2_get_device_info",
            self._dev_id(ref),
            MAIN_CMD_CHIP_INF,
            CHIP_INF_SUB_CMD_SPOD_INFO,
            ctypes.byref(info),
            ctypes.byref(size),
        )
        return int(info.super_pod_type)

    # -- versions and modes ------------------------------------------------------------------------

    def driver_version(self) -> str:
        """V1 only: V2 declares no driver version call (the ledger lacks it there)."""
        if self.api == "v2":
            raise DcmiError("dcmi_get_driver_version (DCMI V2)", ERR_NOT_SUPPORT)
        buf = ctypes.create_string_buffer(MAX_VER_LEN + 1)
        self.lib.call("dcmi_get_driver_version", buf, MAX_VER_LEN)
        return _text(buf.raw)

    def share_enabled(self, ref: DeviceRef) -> bool:
        """Container-share flag (V1 only: V2 declares no such query)."""
        value = ctypes.c_int(0)
        self.lib.call("dcmi_get_device_share_enable", ref.card, ref.device, ctypes.byref(value))
        return value.value != 0

    def set_share_enabled(self, ref: DeviceRef, enabled: bool) -> None:
        self.lib.call("dcmi_set_device_share_enable", ref.card, ref.device, 1 if enabled else 0)


def _v1_answers(lib: Library) -> DcmiError | None:
    """``None`` when the V1 API serves this driver, else the refusal. A V2 driver exports the V1
    symbols but answers NOT_SUPPORT (at init, or at the first enumeration); a missing symbol is a
    refusal too. Any other failure after a successful init is V1's to report."""
    try:
        lib.call("dcmi_init")
        Dcmi(lib, "v1").cards()
    except DcmiError as exc:
        if exc.refused or exc.call == "dcmi_init":
            return exc
    return None


def open_dcmi(host: HostRoot, environ: dict[str, str] | None = None) -> Dcmi:
    """Load libdcmi and initialise it, V1 first, V2 when the driver refuses V1.

    Raises :class:`DcmiUnavailableError` when the library is absent, will not load, or neither generation
    initialises — the "library that will not initialise" of the detection-failure rules."""
    lib = load(host, environ)
    v1_error = _v1_answers(lib)
    if v1_error is None:
        log.debug("ascend: %s answered the DCMI V1 API", lib.path)
        return Dcmi(lib, "v1")
    try:
        lib.call("dcmiv2_init")
    except DcmiError as v2_error:
        raise DcmiUnavailableError(
            f"libdcmi at {lib.path} would not initialise: V1 {v1_error}; V2 {v2_error}"
        ) from None
    log.info("ascend: %s answered the DCMI V2 API (V1 refused: %s)", lib.path, v1_error)
    return Dcmi(lib, "v2")


__all__ = [
    "ERR_NOT_SUPPORT",
    "SIGNATURES",
    "Chip",
    "Dcmi",
    "DcmiError",
    "DcmiUnavailableError",
    "DeviceRef",
    "Library",
    "Memory",
    "library_spec",
    "load",
    "open_dcmi",
]
