"""Manufacturers that have no accelerator on an arm64 node (spec: "Where the preload libraries come
from").

Two manufacturers' stacks are x86_64-only, and the spec draws the consequence for detection itself,
not only for the preload tree: ROCm publishes no aarch64 user space, "so the arm64 operator image
carries no AMD shim, and no AMD node either: the detector's libraries do not load there"; the PPU SDK
is x86_64-only, "on the ground that a PPU only exists in an x86_64 host". So on arm64 the AMD and
T-Head detectors answer ``Detected([])`` -- a measurement, "nothing of ours here" -- whatever the
amdgpu sysfs (the kernel driver does exist for arm64) or a stray library would otherwise suggest, with
the reason in ``Detected.driver`` and the log.

The architecture is the node's CPU as ``/proc/cpuinfo`` of the node view states it
(:attr:`~gpustack_operator.node.cpu.CpuIdentity.arch`, the value the detect document prints);
a cpuinfo that cannot be read decides nothing, and detection goes on as on any node.
"""

from __future__ import annotations

import logging

from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import DetectContext, Detected
from gpustack_operator.node.cpu import CpuInfoError, read_cpu_identity

log = logging.getLogger(__name__)

ARM64 = "arm64"


def node_arch(view: HostRoot) -> str:
    """``amd64``, ``arm64``, or ``unknown`` (cpuinfo unreadable or of another architecture)."""
    try:
        return read_cpu_identity(view).arch
    except CpuInfoError as exc:
        log.debug("the CPU architecture could not be read: %s", exc)
        return "unknown"


def absent_on_arm64(ctx: DetectContext, why: str) -> Detected | None:
    """``Detected([])`` carrying ``why`` when the node is arm64; ``None`` (detect as usual) otherwise."""
    if node_arch(ctx.view) != ARM64:
        return None
    reason = f"this node is arm64 and {why}, so it has no {ctx.manufacturer.identity.display_name} accelerator"
    log.info("%s: %s", ctx.manufacturer.name, reason)
    return Detected([], driver=reason)
