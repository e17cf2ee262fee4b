"""Preload-library staging: which subtrees a node needs (:mod:`.layout`), copying them onto the host
safely and idempotently (:mod:`.stage`), and the one call the Ansible module makes (:mod:`.node`)."""

from gpustack_operator.preload.layout import Layout, SkippedGroup, wanted_subtrees
from gpustack_operator.preload.node import NodeStaging, stage_node
from gpustack_operator.preload.stage import LIB_DIR, PODS_DIR, StageError, StagePlan, StageResult, apply, plan

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
