"""NVIDIA MIG partitions through NVML: the :class:`~gpustack_operator.manufacturers.respond.Partitioner`
the allocator materialises a ``.partitioned`` grant with (spec "Partitioned"; issue 10).

The calls are the NVML GPU/compute-instance lifecycle ``nvidia-smi mig -cgi <profile>:<start> -C``
makes, through the nvidia-ml-py binding bound to the node view's own library exactly as detection
binds it (:func:`~gpustack_operator.manufacturers.nvidia.nvml.open_nvml`; one session per call):

* :meth:`NvmlPartitioner.create` -- the GPU-instance profile whose name is ``profile`` (only the
  profiles GPUStack exposes: no ``+me`` / ``+gfx`` variants, :func:`~.values.is_exposed_profile`),
  ``nvmlDeviceCreateGpuInstanceWithPlacement`` at the allocator's ``start`` (which must be one of the
  profile's legal placements), then one compute instance spanning the whole GPU instance (the
  compute profile with the GPU instance's slice count, shared engines -- what ``-C`` creates), and
  the MIG device's UUID (``MIG-…``), which is what visibility names. A failure after the GPU instance
  exists destroys what was made, so a refused allocation leaves no orphan partition behind.
* :meth:`NvmlPartitioner.live` -- the recorded GPU and compute instances still exist, are the ones
  recorded (profile and placement, since NVML reuses ids), and still carry the recorded UUID.
* :meth:`NvmlPartitioner.destroy` -- compute instance, then GPU instance (NVML refuses the reverse
  while one is inside); an instance already gone is not an error.

Every failure is a :class:`RefusedError` naming the accelerator, the profile and NVML's own error.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml  # type: ignore[import-untyped]

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.nvidia import nvml as codes
from gpustack_operator.manufacturers.nvidia.nvml import (
    GPU_INSTANCE_PROFILE_COUNT,
    GpuInstanceProfile,
    Handle,
    Nvml,
    NvmlError,
    NvmlUnavailableError,
    open_nvml,
)
from gpustack_operator.manufacturers.nvidia.values import is_exposed_profile, memory_slices, profile_name_from_geometry
from gpustack_operator.manufacturers.respond import Code, PartitionInstance, RefusedError

ERROR_INVALID_ARGUMENT = 2
ERROR_INSUFFICIENT_RESOURCES = 23
GONE = frozenset({codes.ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT})  # "no such instance (any more)"

# NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _6_SLICE (0x0 .. 0x6); REV1 and NVL variants are not offered
COMPUTE_PROFILES = range(0x7)
ENGINE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


def _call(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise NvmlError(name, int(exc.value), str(exc)) from None


def _remedy(code: int) -> str:
    if code == codes.ERROR_NO_PERMISSION:
        return "the Device Manager needs CAP_SYS_ADMIN to create MIG instances"
    if code == ERROR_INSUFFICIENT_RESOURCES:
        return (
            "the placement is taken or the profile's instances are used up (nvidia-smi mig -lgi lists them); "
            "a partition made by hand outside GPUStack is not supported"
        )
    if code in codes.UNSUPPORTED:
        return "MIG is not enabled on this accelerator (nvidia-smi -i <index> -mig 1, then reset it)"
    return "nvidia-smi mig -lgi / -lci show the accelerator's instances"


class NvmlPartitioner:
    """MIG create / live / destroy on the NVML library found in ``view`` (the Device Manager's own
    view of the node: its ``/`` in production, a fixture tree in tests)."""

    def __init__(self, view: HostRoot, environ: dict[str, str] | None = None) -> None:
        self.view = view
        self.environ = environ

    # -- the Partitioner protocol --------------------------------------------------------------

    def create(self, group: DevicesGroup, accelerator: Accelerator, profile: str, start: int) -> PartitionInstance:
        where = f"MIG {profile} at placement {start} on {accelerator.id}"
        try:
            with open_nvml(self.view, self.environ) as nvml:
                return self._create(nvml, group, accelerator.id, profile, start=start, where=where)
        except NvmlUnavailableError as exc:
            raise RefusedError(f"{where}: NVML is not usable on this node: {exc.reason}", Code.UNAVAILABLE) from None
        except NvmlError as exc:
            raise RefusedError(f"{where}: {exc}; {_remedy(exc.code)}") from None

    def live(self, instance: PartitionInstance) -> bool:
        """False when the instance is gone or is no longer the one recorded; :class:`RefusedError`
        when NVML could not be asked (an unknown answer is not "gone", and not "live" either)."""
        ids = _ids(instance)
        if ids is None:
            return False
        where = f"MIG {instance.profile} ({instance.uuid}) on {instance.accelerator}"
        try:
            with open_nvml(self.view, self.environ) as nvml:
                found = self._find(nvml, instance, *ids)
                if found is None:
                    return False
                device, _, ci = found
                return ci is not None and _mig_uuid(device, *ids) == instance.uuid
        except NvmlUnavailableError as exc:
            raise RefusedError(
                f"{where}: cannot verify the partition, NVML is not usable on this node: {exc.reason}", Code.UNAVAILABLE
            ) from None
        except NvmlError as exc:
            raise RefusedError(f"{where}: cannot verify the partition: {exc}", Code.UNAVAILABLE) from None

    def destroy(self, instance: PartitionInstance) -> None:
        ids = _ids(instance)
        if ids is None:
            return
        where = f"MIG {instance.profile} ({instance.uuid}) on {instance.accelerator}"
        try:
            with open_nvml(self.view, self.environ) as nvml:
                found = self._find(nvml, instance, *ids)
                if found is None:
                    return  # already gone (or its ids now belong to another instance: not ours to remove)
                _, gi, ci = found
                if ci is not None:
                    _call("nvmlComputeInstanceDestroy", pynvml.nvmlComputeInstanceDestroy, ci)
                _call("nvmlGpuInstanceDestroy", pynvml.nvmlGpuInstanceDestroy, gi)
        except NvmlUnavailableError as exc:
            raise RefusedError(f"{where}: NVML is not usable on this node: {exc.reason}", Code.UNAVAILABLE) from None
        except NvmlError as exc:
            raise RefusedError(f"{where}: could not be destroyed: {exc}; {_remedy(exc.code)}") from None

    # -- steps ---------------------------------------------------------------------------------

    @staticmethod
    def _profile(nvml: Nvml, h: Handle, group: DevicesGroup, name: str, where: str) -> GpuInstanceProfile:
        offered: list[str] = []
        for probe in range(GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.gpu_instance_profile(h, probe)
            except NvmlError:
                continue  # this probe index is not a profile of this card
            if not is_exposed_profile(info.name, probe):
                continue
            named = info.name or profile_name_from_geometry(
                info.slice_count, memory_slices(info.memory_mib, group.memory), group.memory
            )
            if named == name:
                return info
            offered.append(named)
        raise RefusedError(
            f"{where}: the accelerator offers no GPU-instance profile named {name!r}"
            + (f" (it offers {', '.join(offered)})" if offered else " (MIG is not enabled on it)")
        )

    def _create(
        self, nvml: Nvml, group: DevicesGroup, uuid: str, profile: str, *, start: int, where: str
    ) -> PartitionInstance:
        h = nvml.handle_by_uuid(uuid)
        info = self._profile(nvml, h, group, profile, where)
        placements = nvml.gpu_instance_placements(h, info.id)
        size = next((s for st, s in placements if st == start), None)
        if size is None:
            legal = ", ".join(str(st) for st, _ in placements) or "none"
            raise RefusedError(f"{where}: {start} is not a legal placement of {profile} (legal starts: {legal})")
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        gi = _call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement,
            h,
            info.id,
            ctypes.byref(placement),
        )
        ci = None
        try:
            gi_id = int(_call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi).id)
            ci_profile = _full_compute_profile(gi, info.slice_count, where)
            ci = _call(
                "nvmlGpuInstanceCreateComputeInstance", pynvml.nvmlGpuInstanceCreateComputeInstance, gi, ci_profile
            )
            ci_id = int(_call("nvmlComputeInstanceGetInfo", pynvml.nvmlComputeInstanceGetInfo, ci).id)
            mig = _mig_uuid(h, gi_id, ci_id)
            if mig is None:
                raise RefusedError(f"{where}: GPU instance {gi_id} / compute instance {ci_id} shows no MIG device")
        except (NvmlError, RefusedError) as exc:
            _undo(ci, gi, exc)
            raise
        return PartitionInstance(
            accelerator=uuid,
            profile=profile,
            uuid=mig,
            start=start,
            size=size,
            handle={
                "gpu_instance_id": gi_id,
                "compute_instance_id": ci_id,
                "gpu_instance_profile_id": info.id,
                "compute_instance_profile_id": ci_profile,
                "parent_uuid": uuid,
            },
        )

    @staticmethod
    def _find(nvml: Nvml, instance: PartitionInstance, gi_id: int, ci_id: int) -> tuple[Handle, Any, Any] | None:
        """(parent, GPU instance, compute instance) when the recorded instance still exists as
        recorded; ``None`` when it is gone. The compute instance alone being gone is ``ci=None``
        for :meth:`destroy` (the GPU instance is still ours to remove) -- and "not live"."""
        try:
            h = nvml.handle_by_uuid(instance.accelerator)
        except NvmlError as exc:
            if exc.code in GONE:
                return None
            raise
        try:
            gi = _call("nvmlDeviceGetGpuInstanceById", pynvml.nvmlDeviceGetGpuInstanceById, h, gi_id)
        except NvmlError as exc:
            if exc.code in GONE or exc.unsupported:  # unsupported: MIG was turned off, so no instance
                return None
            raise
        info = _call("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, gi)
        profile_id = instance.handle.get("gpu_instance_profile_id")
        if int(info.placement.start) != instance.start or (
            isinstance(profile_id, int) and int(info.profileId) != profile_id
        ):
            return None  # the id was reused by another instance
        try:
            ci = _call("nvmlGpuInstanceGetComputeInstanceById", pynvml.nvmlGpuInstanceGetComputeInstanceById, gi, ci_id)
        except NvmlError as exc:
            if exc.code not in GONE:
                raise
            ci = None
        return h, gi, ci


def _ids(instance: PartitionInstance) -> tuple[int, int] | None:
    gi, ci = instance.handle.get("gpu_instance_id"), instance.handle.get("compute_instance_id")
    if isinstance(gi, int) and isinstance(ci, int):
        return gi, ci
    return None


def _full_compute_profile(gi: Any, slices: int, where: str) -> int:
    """The compute profile spanning the whole GPU instance (``nvidia-smi mig -C``'s default)."""
    seen: list[int] = []
    for probe in COMPUTE_PROFILES:
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, probe, ENGINE_SHARED)
        except pynvml.NVMLError as exc:
            if int(exc.value) not in (codes.ERROR_FUNCTION_NOT_FOUND, codes.ERROR_ARGUMENT_VERSION_MISMATCH):
                continue
            try:  # a driver without the V call
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, probe, ENGINE_SHARED, 1)
            except pynvml.NVMLError:
                continue
        seen.append(int(info.sliceCount))
        if int(info.sliceCount) == slices:
            return int(info.id)
    raise RefusedError(
        f"{where}: the GPU instance offers no compute profile of {slices} slices (it offers {sorted(set(seen))})"
    )


def _mig_uuid(parent: Handle, gi_id: int, ci_id: int) -> str | None:
    """The UUID of the MIG device that is compute instance ``ci_id`` of GPU instance ``gi_id``."""
    count = int(_call("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, parent))
    for index in range(count):
        try:
            mig = _call(
                "nvmlDeviceGetMigDeviceHandleByIndex", pynvml.nvmlDeviceGetMigDeviceHandleByIndex, parent, index
            )
        except NvmlError as exc:
            if exc.code in GONE:
                continue
            raise
        if int(_call("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)) != gi_id:
            continue
        if int(_call("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)) != ci_id:
            continue
        value = _call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig)
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def _undo(ci: Any, gi: Any, cause: Exception) -> None:
    """Remove a half-made partition; when that fails too, the refusal names both."""
    try:
        if ci is not None:
            _call("nvmlComputeInstanceDestroy", pynvml.nvmlComputeInstanceDestroy, ci)
        _call("nvmlGpuInstanceDestroy", pynvml.nvmlGpuInstanceDestroy, gi)
    except NvmlError as exc:
        message = cause.message if isinstance(cause, RefusedError) else str(cause)
        raise RefusedError(
            f"{message}; and the half-made GPU instance could not be removed: {exc} "
            "(nvidia-smi mig -dci / -dgi on the node removes it)"
        ) from None


def partitioner(view: HostRoot) -> NvmlPartitioner:
    """The backend's ``partitioner``: NVML's MIG calls bound to the library found in ``view``."""
    return NvmlPartitioner(view)
