"""Which parts of the preload-library tree a node needs (spec: "Where the preload libraries come
from", "One driver stack per node"; reference rules §5 and §9).

The tree under ``/var/lib/gpustack/operator/lib`` has one directory per manufacturer that slices
through a preload library:

========== ================================ ==================================================
NVIDIA     ``nvidia/cuda-<major>``          HAMi-core per CUDA major; default major 12 when the
                                            runtime version is unknown (reference rules §5)
Ascend     ``ascend/cann-<major>-<family>`` vcann-rt per CANN major and SoC family (lowercase);
                                            default major 8 (reference rules §9); no family →
                                            nothing to stage
AMD        ``amd``                          one artifact for every ROCm version; none on arm64
Iluvatar   ``iluvatar``                     the NVIDIA CUDA 12 HAMi-core build, in one flat
                                            directory of its own (the spec: "one flat directory,
                                            no runtime-version subdivision")
T-Head     ``thead``                        built from the operator's own sources; none on arm64
========== ================================ ==================================================

Cambricon, Hygon, MetaX and MThreads enforce slices in the host driver or the hardware and take no
preload library. The result is pure: it depends only on the groups and the CPU architecture.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.ledger.models import DevicesGroup

NVIDIA_DEFAULT_CUDA_MAJOR = 12
ASCEND_DEFAULT_CANN_MAJOR = 8
ARM64 = frozenset({"arm64", "aarch64"})

NO_PRELOAD_LIBRARY = {
    "cambricon": "Cambricon slices with cnDev sMLU profiles in the driver; it takes no preload library",
    "hygon": "Hygon slices through the host DTK/hyhal runtime (vdev.conf); it takes no preload library",
    "metax": "MetaX slices with sysfs sgpu subdevices; it takes no preload library",
    "mthreads": "MThreads slices with the host sGPU kernel module; it takes no preload library",
}


class SkippedGroup(BaseModel):
    """A detected group whose manufacturer gets nothing staged on this node, and why."""

    model_config = ConfigDict(extra="forbid")

    manufacturer: str
    group: str | None = None
    reason: str


class Layout(BaseModel):
    """The subtrees to stage (sorted, unique), the groups that get none, and the defaults taken."""

    model_config = ConfigDict(extra="forbid")

    subtrees: list[str] = Field(default_factory=list)
    skipped: list[SkippedGroup] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)


_MAJOR = re.compile(r"(\d+)")


def runtime_major(version: str | None) -> int | None:
    """The major of a runtime version: ``12.4`` → 12, ``8.0.RC2`` → 8, ``v9.1.0`` → 9.

    A bare integer of four digits or more is NVML's encoding (``12040`` → 12). ``None`` when the
    version is missing or carries no number."""
    if version is None:
        return None
    match = _MAJOR.search(version)
    if match is None:
        return None
    number = int(match.group(1))
    if version.strip().isdigit() and number >= 1000:
        return number // 1000
    return number


def _ascend_family(family: str | None) -> str | None:
    """``910B`` → ``910b``; ``Ascend910B`` → ``910b`` (the ``Ascend`` prefix is optional)."""
    if family is None:
        return None
    value = family.strip().lower()
    value = value.removeprefix("ascend")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", value):
        return None
    return value


def _major_or_default(group: DevicesGroup, default: int, what: str, assumptions: list[str]) -> int:
    major = runtime_major(group.runtime_version)
    if major is not None:
        return major
    seen = "unknown" if group.runtime_version is None else f"{group.runtime_version!r} (no major)"
    assumptions.append(f"{group.manufacturer} group {group.id}: {what} version {seen}; assuming major {default}")
    return default


def wanted_subtrees(groups: list[DevicesGroup], arch: str) -> Layout:
    """The preload-library subtrees a node with ``groups`` on a CPU of ``arch`` needs.

    ``arch`` is the detection's ``cpu.arch`` (``amd64``, ``arm64``; ``aarch64`` is taken as
    ``arm64``; anything else, ``unknown`` included, excludes nothing)."""
    wanted: set[str] = set()
    skipped: list[SkippedGroup] = []
    assumptions: list[str] = []
    on_arm64 = arch.strip().lower() in ARM64

    def skip(group: DevicesGroup, reason: str) -> None:
        entry = SkippedGroup(manufacturer=group.manufacturer, group=group.id, reason=reason)
        if entry not in skipped:
            skipped.append(entry)

    for group in groups:
        manufacturer = group.manufacturer
        if manufacturer == "nvidia":
            major = _major_or_default(group, NVIDIA_DEFAULT_CUDA_MAJOR, "CUDA", assumptions)
            wanted.add(f"nvidia/cuda-{major}")
        elif manufacturer == "ascend":
            family = _ascend_family(group.family)
            if family is None:
                skip(
                    group,
                    "no Ascend SoC family detected"
                    + ("" if group.family is None else f" (unusable family {group.family!r})")
                    + ": the library directory is cann-<major>-<family>, so none is staged",
                )
                continue
            major = _major_or_default(group, ASCEND_DEFAULT_CANN_MAJOR, "CANN", assumptions)
            wanted.add(f"ascend/cann-{major}-{family}")
        elif manufacturer == "amd":
            if on_arm64:
                skip(group, "ROCm publishes no aarch64 user space: the arm64 image carries no AMD shim")
                continue
            wanted.add("amd")
        elif manufacturer == "thead":
            if on_arm64:
                skip(group, "the PPU SDK is x86_64-only: the arm64 image carries no T-Head shim")
                continue
            wanted.add("thead")
        elif manufacturer == "iluvatar":
            wanted.add("iluvatar")
        else:
            skip(group, NO_PRELOAD_LIBRARY.get(manufacturer, f"{manufacturer} takes no preload library"))
    return Layout(subtrees=sorted(wanted), skipped=skipped, assumptions=assumptions)
