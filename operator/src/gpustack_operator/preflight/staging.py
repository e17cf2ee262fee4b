"""Preflight's own staging of the preload-library tree (supplement §2.5 host write 1, §2.6 cases 1-2).

The first of the four host writes: the manufacturer's preload-library tree, copied from the image to
``/var/lib/gpustack/operator/lib/<manufacturer>`` through the host root -- where the device-manager's
init container would have put it, and never removed (real allocations mount it). It is the same code
the ``preload_libraries`` module runs (:func:`gpustack_operator.preload.layout.wanted_subtrees`, then
:func:`gpustack_operator.preload.stage.plan` / :func:`~gpustack_operator.preload.stage.apply`), so the
tree preflight stages and the tree the module stages cannot differ.

``source`` is the tree as this container carries it (``--preload-source``, default
:data:`DEFAULT_SOURCE`, the operator image's ``lib`` directory): read in the container's own view, never
through the host root. Under ``--dry-run`` the plan is made and nothing is written (the responder then
reads the planned tree from the source, so what it renders is what the staged run would render). A tarball
source is read member by member and never extracted to plan, so ``--dry-run`` writes nothing in
``$TMPDIR`` either, and a hostile one (a member placed through a symlink, a link leaving the archive, a
sparse or oversized member) is an ``error`` naming it, before anything is written (issue 16).

A tree that could not be staged is a reason every container step is emitted (§2.6 case 2: "the command,
naming what could not be written; not runnable until fixed"), not a row of its own: whether an
allocation can be served is then what the host already carries, which the responder checks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.preload.layout import wanted_subtrees
from gpustack_operator.preload.stage import StageError, apply, plan

log = logging.getLogger(__name__)

DEFAULT_SOURCE = "/opt/gpustack/lib"


@dataclass(frozen=True)
class Staged:
    """What staging did: the subtrees it staged (or, dry, would stage), which of them changed, and --
    when it could not -- the error naming what could not be written and the remedy."""

    subtrees: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    error: str | None = None
    dry_run: bool = False
    source: str = DEFAULT_SOURCE
    # every path the plan stages (or, dry, would stage), relative to the lib tree: ``nvidia/cuda-12``,
    # ``nvidia/cuda-12/libvgpu.so`` -- what the tree holds afterwards, whatever the source's form (a
    # directory or an archive, which is never extracted to plan)
    planned: frozenset[str] = frozenset()

    def blocked(self) -> str | None:
        """Why the container steps cannot be taken as printed (§2.6 cases 1 and 2), or ``None``."""
        if self.dry_run:
            todo = ", ".join(self.subtrees) if self.subtrees else "nothing (no subtree is needed)"
            return (
                "--dry-run: nothing was started or written; before running it, stage the library tree "
                f"(/var/lib/gpustack/operator/lib/: {todo}, from {self.source}) and let the responder render "
                "its files under /var/lib/gpustack/operator/preflight/ -- a run without --dry-run does both"
            )
        if self.error is not None:
            return (
                f"the preload-library tree could not be staged ({self.error}), so this is not runnable until "
                "that is fixed"
            )
        return None


def stage(groups: list[DevicesGroup], arch: str, host_root: str | None, source: str, *, dry_run: bool) -> Staged:
    """Stage (``dry_run``: plan) what ``groups`` need from ``source`` under ``host_root``. Never raises."""
    layout = wanted_subtrees(groups, arch)
    subtrees = layout.subtrees
    if not subtrees:
        return Staged(dry_run=dry_run, source=source)
    if host_root is None:
        return Staged(subtrees, error="there is no host root to stage it through", dry_run=dry_run, source=source)
    if not os.path.isdir(source) and not os.path.isfile(source):
        return Staged(
            subtrees,
            error=f"the source {source} is not in this container (the operator image carries its tree at "
            f"{DEFAULT_SOURCE}; point --preload-source at another)",
            dry_run=dry_run,
            source=source,
        )
    try:
        with plan(Path(source), Path(host_root), subtrees) as staging:
            changed = [s.subtree for s in staging.subtrees if s.changed]
            planned = frozenset(
                path for s in staging.subtrees for path in (s.subtree, *(f"{s.subtree}/{p}" for p in s.paths()))
            )
            if not dry_run:
                apply(staging)
                log.info("preflight: staged %s from %s (%s changed)", ", ".join(subtrees), source, len(changed))
    except StageError as exc:
        return Staged(subtrees, error=str(exc), dry_run=dry_run, source=source)
    except OSError as exc:
        return Staged(
            subtrees, error=f"{exc.filename or source}: {exc.strerror or exc}", dry_run=dry_run, source=source
        )
    return Staged(subtrees, changed, dry_run=dry_run, source=source, planned=planned)


__all__ = ["DEFAULT_SOURCE", "Staged", "stage"]
