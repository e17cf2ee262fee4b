"""Which parts of the preload-library tree a node needs (spec: "Where the preload libraries come
from", "One driver stack per node"; reference rules §5 and §9).

The tree under ``/var/lib/gpustack/operator/lib`` has one directory per manufacturer that slices
through a preload library. Each manufacturer declares its own in its identity
(``manufacturers/<vendor>/identity.py``, :class:`~gpustack_operator.manufacturers.base.PreloadLibrary`),
which gives today:

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
preload library (their identities say so, and why). A group whose accelerators are offered no
logical slicing takes none either (see :func:`wanted_subtrees`). The result is pure: it depends only
on the groups and the CPU architecture.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import PreloadLibrary

ARM64 = frozenset({"arm64", "aarch64"})


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


_MAJOR = re.compile(r"([0-9]+)", re.ASCII)


def runtime_major(version: str | None) -> int | None:
    """The major of a runtime version: ``12.4`` → 12, ``8.0.RC2`` → 8, ``v9.1.0`` → 9.

    A bare integer of four digits or more is NVML's encoding (``12040`` → 12). ``None`` when the
    version is missing or carries no number."""
    if version is None:
        return None
    match = _MAJOR.search(version)
    if match is None:
        return None
    if len(match.group(1)) > 9:  # no runtime major has ten digits; int() of 4300+ would raise
        return None
    number = int(match.group(1))
    if version.strip().isdigit() and number >= 1000:
        return number // 1000
    return number


def _family_dir(manufacturer: str, family: str | None) -> str | None:
    """A SoC family as a directory-name part: ``910B`` → ``910b``; ``Ascend910B`` → ``910b`` (the
    manufacturer's own name as a prefix is optional). ``None`` when there is none, or it is unusable."""
    if family is None:
        return None
    value = family.strip().lower().removeprefix(manufacturer)
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


def _subtree(
    group: DevicesGroup, rule: PreloadLibrary, skip: Callable[[DevicesGroup, str], None], assumptions: list[str]
) -> str | None:
    """The subtree ``rule`` gives ``group`` (``None``, after ``skip``, when it cannot be named)."""
    if rule.runtime is None or rule.default_major is None:
        return rule.directory
    subdir = rule.runtime
    suffix = ""
    if rule.per_family:
        family = _family_dir(group.manufacturer, group.family)
        if family is None:
            brand = REGISTRY[group.manufacturer].identity.display_name
            skip(
                group,
                f"no {brand} SoC family detected"
                + ("" if group.family is None else f" (unusable family {group.family!r})")
                + f": the library directory is {subdir}-<major>-<family>, so none is staged",
            )
            return None
        suffix = f"-{family}"
    major = _major_or_default(group, rule.default_major, rule.runtime.upper(), assumptions)
    return f"{rule.directory}/{subdir}-{major}{suffix}"


def _offers_logical_slices(accelerator: Accelerator) -> bool:
    sliced = accelerator.status.logical_sliced
    return sliced is not None and sliced.count > 0


def _not_sliced(group: DevicesGroup) -> str:
    what = ", ".join(
        f"{label} {value}"
        for label, value in (("family", group.family), ("runtime", group.runtime_version))
        if value is not None
    )
    return (
        "none of its accelerators is offered logical slicing"
        + (f" ({what})" if what else "")
        + ": the preload library serves logical slices only, so none is staged"
    )


def wanted_subtrees(groups: list[DevicesGroup], arch: str) -> Layout:
    """The preload-library subtrees a node with ``groups`` on a CPU of ``arch`` needs.

    ``arch`` is the detection's ``cpu.arch`` (``amd64``, ``arm64``; ``aarch64`` is taken as
    ``arm64``; anything else, ``unknown`` included, excludes nothing).

    A group none of whose accelerators the detection offered logical slicing (``logicalSliced``
    absent or count 0) needs none: an Ascend family/CANN pair the image ships no vcann-rt build
    for (``ascend/soc.py``; reference rules §9), cards in MIG mode, cards whose mode could not be
    read. Demanding its subtree would fail the whole node's staging on a directory that was never
    built, for slices nobody is offered. A group carrying no accelerators at all says nothing
    about slicing and is laid out by its rule alone."""
    wanted: set[str] = set()
    skipped: list[SkippedGroup] = []
    assumptions: list[str] = []
    on_arm64 = arch.strip().lower() in ARM64

    def skip(group: DevicesGroup, reason: str) -> None:
        entry = SkippedGroup(manufacturer=group.manufacturer, group=group.id, reason=reason)
        if entry not in skipped:
            skipped.append(entry)

    for group in groups:
        entry = REGISTRY.get(group.manufacturer)
        rule = entry.identity.preload if entry is not None else None
        if not isinstance(rule, PreloadLibrary):
            skip(group, rule or f"{group.manufacturer} takes no preload library")
            continue
        if on_arm64 and rule.no_arm64:
            skip(group, rule.no_arm64)
            continue
        if group.accelerators and not any(_offers_logical_slices(a) for a in group.accelerators):
            skip(group, _not_sliced(group))
            continue
        subtree = _subtree(group, rule, skip, assumptions)
        if subtree is not None:
            wanted.add(subtree)
    return Layout(subtrees=sorted(wanted), skipped=skipped, assumptions=assumptions)
