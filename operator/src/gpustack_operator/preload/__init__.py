"""Preload-library staging: which subtrees a node needs (:mod:`.layout`), copying them onto the host
safely and idempotently (:mod:`.stage`), and the one call the Ansible module makes (:mod:`.node`)."""

from typing import TYPE_CHECKING

from gpustack_operator.preload.layout import Layout, SkippedGroup, wanted_subtrees
from gpustack_operator.preload.stage import LIB_DIR, PODS_DIR, StageError, StagePlan, StageResult, apply, plan

if TYPE_CHECKING:
    from gpustack_operator.preload.node import NodeStaging, stage_node


def __getattr__(name: str) -> object:
    """:mod:`.node` (the preload_libraries module's call) loads when one of its names is asked for:
    preflight, which stages through ``preflight/staging.py`` on every host of a fleet, never pays for it."""
    if name in ("NodeStaging", "stage_node"):
        from gpustack_operator.preload import node  # noqa: PLC0415

        return getattr(node, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LIB_DIR",
    "PODS_DIR",
    "Layout",
    "NodeStaging",
    "SkippedGroup",
    "StageError",
    "StagePlan",
    "StageResult",
    "apply",
    "plan",
    "stage_node",
    "wanted_subtrees",
]
