"""Stage what one detected node needs: detection → :func:`wanted_subtrees` → plan → apply.

This is what ``gpustack.accelerators.preload_libraries`` runs on a target; the module only maps
options and results."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.preload.layout import SkippedGroup, wanted_subtrees
from gpustack_operator.preload.stage import apply, plan


class NodeStaging(BaseModel):
    """The result document. Paths in ``added`` / ``replaced`` / ``removed`` are relative to
    ``destination`` (the lib tree) and start with their subtree; directories end in ``/``."""

    model_config = ConfigDict(extra="forbid")

    changed: bool
    destination: str
    staged: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    not_staged: list[SkippedGroup] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    replaced: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    diff: list[dict[str, str]] = Field(default_factory=list)


def stage_node(detection: NodeDetection, source: Path, dest_root: Path, *, check: bool) -> NodeStaging:
    """Stage (or, with ``check``, only plan) the subtrees ``detection`` calls for.

    A manufacturer that could not be measured is reported under ``not_staged``, never guessed at.
    Raises :class:`~gpustack_operator.preload.stage.StageError`."""
    arch = detection.cpu.arch if detection.cpu is not None else "unknown"
    layout = wanted_subtrees(detection.groups, arch)
    skipped = list(layout.skipped)
    for manufacturer, reason in sorted(detection.unmeasured.items()):
        skipped.append(
            SkippedGroup(manufacturer=manufacturer, reason=f"could not be measured, nothing staged: {reason}")
        )
    with plan(source, dest_root, layout.subtrees) as staging:
        if not check:
            apply(staging)
        changed = [s for s in staging.subtrees if s.changed]
        return NodeStaging(
            changed=bool(changed),
            destination=staging.lib_dir,
            staged=[s.subtree for s in staging.subtrees],
            updated=[s.subtree for s in changed],
            not_staged=skipped,
            assumptions=layout.assumptions,
            added=[f"{s.subtree}/{p}" for s in changed for p in s.added],
            replaced=[s.subtree if p == "." else f"{s.subtree}/{p}" for s in changed for p in s.replaced],
            removed=[f"{s.subtree}/{p}" for s in changed for p in s.removed],
            diff=staging.diff(),
        )
