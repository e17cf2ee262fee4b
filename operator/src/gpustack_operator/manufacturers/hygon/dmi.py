"""Minimal ctypes binding of Hygon's Multi-Instance library, ``libhydmi_mig.so`` (DMI MIG): only the
calls that read the node's partition mode and a DCU's partition profiles.

Sources (public): the vendor header ``dmi_mig.h`` v1.3.1 as vendored by gpustack/gpustack-operator
(``binding/dmi``), that project's Go binding and Hygon detector (``pkg/devicemanager/detector/hygon``),
and gpustack/runtime's ``pydmi`` ctypes binding with its layout tests. What they establish:

* the library is ``libhydmi_mig.so.1`` (then ``libhydmi_mig.so``), shipped in the hyhal tree
  (``/opt/hyhal/lib``, also ``/opt/dtk/lib``), not on the linker's path;
* it exports NVML's *symbol names* with NVML's return codes but its own struct layouts, so it is
  loaded ``RTLD_LOCAL`` (as :func:`~gpustack_operator.host.libs.load_library` always does): globally,
  its ``nvml*`` names would collide with ``libnvidia-ml.so``'s;
* it has no init/shutdown call to make -- loading it is the initialisation;
* ``nvmlGetSystemMigMode(unsigned *current, unsigned *pending)`` -- the mode is the *node's*, not a
  card's (the vendor switch ``hy-smi -mig 1`` takes no device); ``1`` = enabled; ``NOT_SUPPORTED``
  when no DCU of the system supports MIG;
* ``nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *)`` -- the only bridge from a card
  found elsewhere (its own PCI query answers an empty string, it has no UUID call); the address must
  be domain-qualified (``0000:09:00.0``), an address no DCU answers for is ``NOT_FOUND``;
* ``nvmlDeviceGetGpuInstanceProfileInfo(device, unsigned profile, nvmlGpuInstanceProfileInfo_t *)``
  -- ``profile`` is an index into the slice-count enumeration (0 = one slice ... 3 = four slices),
  *not* a profile id, which comes back in the answer; a width the card does not offer answers
  ``NOT_SUPPORTED`` / ``NOT_FOUND`` / ``INVALID_ARGUMENT``;
* ``nvmlGpuInstanceProfileInfo_t`` = ``{unsigned id, gi_count_max, cu_count, gpu_slice_count;
  unsigned long long memory_size_MB; char name[256]}`` (280 bytes on LP64; the "MB" carries MiB);
* ``nvmlDeviceGetGpuInstancePossiblePlacements(device, unsigned profileId,
  nvmlGpuInstancePlacement_t *placements, unsigned *count)`` -- ``count`` in: the buffer's room,
  out: how many were written; ``{unsigned start, size}`` in memory slices.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from gpustack_operator.host.libs import Binding, LibraryCallError, LibrarySpec, MissingEntryPointError, c_text
from gpustack_operator.manufacturers.nvmlshaped import RETURN_NAMES

LIBRARY = LibrarySpec(
    names=("libhydmi_mig.so.1", "libhydmi_mig.so"),
    default_dirs=("/opt/hyhal/lib", "/opt/dtk/lib"),
)

DEVICE_MIG_ENABLE = 1
GPU_INSTANCE_PROFILE_COUNT = 4  # NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _4_SLICE
NAME_BUFFER_SIZE = 256
MAX_PLACEMENTS = 32  # a card has four GPU slices; the headroom is the reference binding's

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_LIB_RM_VERSION_MISMATCH = 18

# The codes that are the library *answering* "nothing at this index" (a profile width the card does
# not offer) rather than failing to answer.
ABSENT = frozenset({ERROR_NOT_SUPPORTED, ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT})
# The codes that say the Multi-Instance API itself is not there: no partitioning on this node.
API_UNAVAILABLE = frozenset(
    {ERROR_LIBRARY_NOT_FOUND, ERROR_FUNCTION_NOT_FOUND, ERROR_DRIVER_NOT_LOADED, ERROR_LIB_RM_VERSION_MISMATCH}
)


class DmiError(LibraryCallError):
    return_names = RETURN_NAMES
    return_type = "nvmlReturn_t"
    library = "libhydmi_mig"


class MissingSymbolError(MissingEntryPointError, DmiError):
    pass


class _GpuInstanceProfileInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint),
        ("gi_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * NAME_BUFFER_SIZE),
    ]


class _Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One GPU-instance profile as the library describes it."""

    id: int
    name: str
    instances: int  # gi_count_max: how many fill the card
    compute_units: int  # cu_count of one instance
    slices: int  # gpu_slice_count
    memory_mib: int  # memory_size_MB, which is MiB


class Dmi(Binding):
    """One loaded ``libhydmi_mig``. Device handles are opaque pointers (``nvmlDevice_t``)."""

    error = DmiError
    missing = MissingSymbolError

    def system_mig_mode(self) -> tuple[int, int]:
        """(current, pending) of the node; ``DEVICE_MIG_ENABLE`` = 1."""
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        argtypes = (ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint))
        self._call("nvmlGetSystemMigMode", argtypes, ctypes.byref(current), ctypes.byref(pending))
        return int(current.value), int(pending.value)

    def handle_by_pci_bus_id(self, bus_id: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        argtypes = (ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
        self._call("nvmlDeviceGetHandleByPciBusId", argtypes, bus_id.encode(), ctypes.byref(handle))
        return handle

    def gpu_instance_profile(self, handle: ctypes.c_void_p, width_index: int) -> GpuInstanceProfile:
        """The profile ``width_index + 1`` GPU slices wide (the vendor's enumeration index)."""
        info = _GpuInstanceProfileInfo()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_GpuInstanceProfileInfo))
        self._call("nvmlDeviceGetGpuInstanceProfileInfo", argtypes, handle, width_index, ctypes.byref(info))
        return GpuInstanceProfile(
            id=int(info.id),
            name=c_text(info.name),
            instances=int(info.gi_count_max),
            compute_units=int(info.cu_count),
            slices=int(info.gpu_slice_count),
            memory_mib=int(info.memory_size_MB),
        )

    def gpu_instance_placements(self, handle: ctypes.c_void_p, profile_id: int) -> list[tuple[int, int]]:
        """Every (start, size) the profile may occupy on an empty card, in memory slices."""
        slots = (_Placement * MAX_PLACEMENTS)()
        count = ctypes.c_uint(MAX_PLACEMENTS)
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_Placement), ctypes.POINTER(ctypes.c_uint))
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements", argtypes, handle, profile_id, slots, ctypes.byref(count)
        )
        written = int(count.value)
        if written > MAX_PLACEMENTS:
            raise DmiError("nvmlDeviceGetGpuInstancePossiblePlacements", 7, f"{written} placements overflow the buffer")
        return [(int(slots[i].start), int(slots[i].size)) for i in range(written)]
