"""Minimal ctypes binding of Iluvatar IXML (``libixml.so``): only the calls detection and the usage
monitor need.

IXML is NVML-compatible: ``libixml.so`` exports NVML-named entry points with NVML's signatures and
struct layouts, so the calls themselves are the shared NVML-shaped binding
(:mod:`gpustack_operator.manufacturers.nvmlshaped`) with the ``nvml`` prefix. Sources:
gpustack/gpustack-operator ``binding/ixml`` (which symbols and versions it resolves: ``nvmlInit_v2``,
``nvmlDeviceGetCount_v2``, ``nvmlDeviceGetHandleByIndex_v2``, ``nvmlDeviceGetPciInfo_v3``,
``nvmlSystemGetCudaDriverVersion``, ``nvmlDeviceGetMinorNumber``, ...); the layouts are NVML's,
**assumed** identical in IXML since no IXML header is public.
"""

from __future__ import annotations

from gpustack_operator.host.libs import LibraryCallError, MissingEntryPointError
from gpustack_operator.manufacturers.nvmlshaped import RETURN_NAMES, NvmlShaped, version_string


class IxmlError(LibraryCallError):
    return_names = RETURN_NAMES
    return_type = "nvmlReturn_t"
    library = "libixml"


class MissingSymbolError(MissingEntryPointError, IxmlError):
    pass


class Ixml(NvmlShaped):
    """One loaded ``libixml``. Device handles are opaque pointers (``nvmlDevice_t``)."""

    error = IxmlError
    missing = MissingSymbolError
    prefix = "nvml"
    # nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion); 1000*major + 10*minor
    runtime_version_call = "nvmlSystemGetCudaDriverVersion"
    # nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
    compute_capability_call = "nvmlDeviceGetCudaComputeCapability"


def cuda_version_string(value: int) -> str | None:
    """``10020`` → ``"10.2"`` (NVML's ``1000 * major + 10 * minor``); non-positive → ``None``."""
    return version_string(value)
