"""Minimal ctypes binding of T-Head HGML (``libhgml.so``, the PPU management library): only the calls
detection, the usage monitor and the MIG-named partition profiles need.

HGML mirrors NVML under an ``hgml`` prefix: the calls it shares with IXML are the NVML-shaped binding
(:mod:`gpustack_operator.manufacturers.nvmlshaped`) under that prefix; the MIG calls are its own.
Sources: gpustack/gpustack-operator ``binding/hgml`` (which entry points and versions it resolves:
``hgmlInit_v2``, ``hgmlDeviceGetCount_v2``, ``hgmlDeviceGetHandleByIndex_v2``,
``hgmlDeviceGetPciInfo_v2`` then ``hgmlDeviceGetPciInfo``, ``hgmlSystemGetHggcDriverVersion``,
``hgmlDeviceGetHggcComputeCapability``, ``hgmlDeviceGetNumGpuCores``, ``hgmlDeviceGetMigMode``,
``hgmlDeviceGetGpuInstanceProfileInfoV``) and the pyhgml ctypes binding (``hgmlPciInfo_t`` = NVML's
layout; ``c_hgmlGpuInstanceProfileInfo_v2_t`` with version word ``0x02000098`` (152 bytes) and a
96-byte name; ``HGML_GPU_INSTANCE_PROFILE_COUNT = 0xF``; ``HGML_DEVICE_MIG_ENABLE = 1``).
**Assumed**: the placement call's name and signature
(``hgmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count)``, NVML's),
and that profile names may carry NVML's ``"MIG "`` prefix (stripped when present).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from gpustack_operator.host.libs import LibraryCallError, MissingEntryPointError, c_text
from gpustack_operator.manufacturers.nvmlshaped import RETURN_NAMES, NvmlShaped, version_string

DEVICE_MIG_ENABLE = 1
GPU_INSTANCE_PROFILE_COUNT = 0xF
GPU_INSTANCE_PROFILE_INFO_V2 = 0x02000098  # sizeof(v2 struct) | (2 << 24)


class HgmlError(LibraryCallError):
    return_names = RETURN_NAMES
    return_type = "hgmlReturn_t"
    library = "libhgml"


class MissingSymbolError(MissingEntryPointError, HgmlError):
    pass


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


class Hgml(NvmlShaped):
    """One loaded ``libhgml``. Device handles are opaque pointers (``hgmlDevice_t``)."""

    error = HgmlError
    missing = MissingSymbolError
    prefix = "hgml"
    # hgmlReturn_t hgmlSystemGetHggcDriverVersion(int *version); 1000*major + 10*minor
    runtime_version_call = "hgmlSystemGetHggcDriverVersion"
    # hgmlReturn_t hgmlDeviceGetHggcComputeCapability(hgmlDevice_t device, int *major, int *minor)
    compute_capability_call = "hgmlDeviceGetHggcComputeCapability"

    # hgmlReturn_t hgmlDeviceGetPciInfo_v2(hgmlDevice_t device, hgmlPciInfo_t *pci), else the unversioned one
    def pci_info_call(self) -> str:
        return "hgmlDeviceGetPciInfo_v2" if self.has("hgmlDeviceGetPciInfo_v2") else "hgmlDeviceGetPciInfo"

    # hgmlReturn_t hgmlDeviceGetNumGpuCores(hgmlDevice_t device, unsigned int *numCores)
    def gpu_cores(self, handle: ctypes.c_void_p) -> int:
        return self._uint("hgmlDeviceGetNumGpuCores", handle)

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
            name=c_text(info.name).removeprefix("MIG "),
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
    return version_string(value)


# -- partition calls (create / inspect / destroy a GPU + compute instance) ---------------------------
#
# **Assumed** (no HGML header ships with this project): HGML mirrors NVML's MIG API under the ``hgml``
# prefix with NVML's signatures and struct layouts -- ``hgmlDeviceCreateGpuInstanceWithPlacement``,
# ``hgmlGpuInstanceGetInfo``, ``hgmlGpuInstanceGetComputeInstanceProfileInfo``,
# ``hgmlGpuInstanceCreateComputeInstance``, ``hgmlComputeInstanceGetInfo``,
# ``hgmlDeviceGetGpuInstanceById``, ``hgmlGpuInstanceGetComputeInstanceById``,
# ``hgmlComputeInstanceDestroy``, ``hgmlGpuInstanceDestroy``. Instance handles are opaque pointers.

COMPUTE_INSTANCE_PROFILE_COUNT = 8  # NVML's NVML_COMPUTE_INSTANCE_PROFILE_COUNT
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0


class _GpuInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", _Placement),
    ]


class _ComputeInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("gpuInstance", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", _Placement),
    ]


class _ComputeInstanceProfileInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
    ]


@dataclass(frozen=True)
class GpuInstanceInfo:
    id: int
    profile_id: int
    start: int
    size: int


class HgmlPartitions(Hgml):
    """:class:`Hgml` plus the partition calls (kept apart so detection binds only what it reads)."""

    # hgmlReturn_t hgmlDeviceCreateGpuInstanceWithPlacement(hgmlDevice_t device, unsigned int profileId,
    #     const hgmlGpuInstancePlacement_t *placement, hgmlGpuInstance_t *gpuInstance)
    def create_gpu_instance(self, handle: ctypes.c_void_p, profile: int, start: int, size: int) -> ctypes.c_void_p:
        placement = _Placement(start=start, size=size)
        gi = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_Placement), ctypes.POINTER(ctypes.c_void_p))
        self._call(
            "hgmlDeviceCreateGpuInstanceWithPlacement",
            argtypes,
            handle,
            profile,
            ctypes.byref(placement),
            ctypes.byref(gi),
        )
        return gi

    # hgmlReturn_t hgmlGpuInstanceGetInfo(hgmlGpuInstance_t gpuInstance, hgmlGpuInstanceInfo_t *info)
    def gpu_instance_info(self, gi: ctypes.c_void_p) -> GpuInstanceInfo:
        info = _GpuInstanceInfo()
        self._call(
            "hgmlGpuInstanceGetInfo", (ctypes.c_void_p, ctypes.POINTER(_GpuInstanceInfo)), gi, ctypes.byref(info)
        )
        return GpuInstanceInfo(int(info.id), int(info.profileId), int(info.placement.start), int(info.placement.size))

    # hgmlReturn_t hgmlGpuInstanceGetComputeInstanceProfileInfo(hgmlGpuInstance_t gpuInstance,
    #     unsigned int profile, unsigned int engProfile, hgmlComputeInstanceProfileInfo_t *info)
    def compute_instance_profile(self, gi: ctypes.c_void_p, profile: int) -> tuple[int, int]:
        """(profile id, slice count) of compute-instance profile ``profile`` in ``gi``."""
        info = _ComputeInstanceProfileInfo()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(_ComputeInstanceProfileInfo))
        self._call(
            "hgmlGpuInstanceGetComputeInstanceProfileInfo",
            argtypes,
            gi,
            profile,
            COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            ctypes.byref(info),
        )
        return int(info.id), int(info.sliceCount)

    # hgmlReturn_t hgmlGpuInstanceCreateComputeInstance(hgmlGpuInstance_t gpuInstance, unsigned int profileId,
    #     hgmlComputeInstance_t *computeInstance)
    def create_compute_instance(self, gi: ctypes.c_void_p, profile_id: int) -> ctypes.c_void_p:
        ci = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("hgmlGpuInstanceCreateComputeInstance", argtypes, gi, profile_id, ctypes.byref(ci))
        return ci

    # hgmlReturn_t hgmlComputeInstanceGetInfo(hgmlComputeInstance_t computeInstance, hgmlComputeInstanceInfo_t *info)
    def compute_instance_id(self, ci: ctypes.c_void_p) -> int:
        info = _ComputeInstanceInfo()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_ComputeInstanceInfo))
        self._call("hgmlComputeInstanceGetInfo", argtypes, ci, ctypes.byref(info))
        return int(info.id)

    # hgmlReturn_t hgmlDeviceGetGpuInstanceById(hgmlDevice_t device, unsigned int id, hgmlGpuInstance_t *gpuInstance)
    def gpu_instance_by_id(self, handle: ctypes.c_void_p, gi_id: int) -> ctypes.c_void_p:
        gi = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("hgmlDeviceGetGpuInstanceById", argtypes, handle, gi_id, ctypes.byref(gi))
        return gi

    # hgmlReturn_t hgmlGpuInstanceGetComputeInstanceById(hgmlGpuInstance_t gpuInstance, unsigned int id,
    #     hgmlComputeInstance_t *computeInstance)
    def compute_instance_by_id(self, gi: ctypes.c_void_p, ci_id: int) -> ctypes.c_void_p:
        ci = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("hgmlGpuInstanceGetComputeInstanceById", argtypes, gi, ci_id, ctypes.byref(ci))
        return ci

    # hgmlReturn_t hgmlComputeInstanceDestroy(hgmlComputeInstance_t computeInstance)
    def destroy_compute_instance(self, ci: ctypes.c_void_p) -> None:
        self._call("hgmlComputeInstanceDestroy", (ctypes.c_void_p,), ci)

    # hgmlReturn_t hgmlGpuInstanceDestroy(hgmlGpuInstance_t gpuInstance)
    def destroy_gpu_instance(self, gi: ctypes.c_void_p) -> None:
        self._call("hgmlGpuInstanceDestroy", (ctypes.c_void_p,), gi)
