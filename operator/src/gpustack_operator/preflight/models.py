"""The preflight report document (supplement §2.8, §3.8): one YAML document on stdout."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from gpustack_operator.discovery.network import NetworkCheck
from gpustack_operator.ledger.models import CamelModel


class State(StrEnum):
    """Exhaustive and mutually exclusive; only ``unavailable`` fails the run."""

    OK = "ok"
    UNAVAILABLE = "unavailable"
    NOT_DECLARED = "not-declared"


class Depth(StrEnum):
    """How far an answer was taken; nothing carries a deeper depth than it earned."""

    DECLARED = "declared"
    SIMULATED = "simulated"
    MEASURED = "measured"


class HostView(CamelModel):
    """What the host's own vendor CLI reported (NVIDIA, Ascend, AMD only)."""

    command: str
    accelerators: int = 0
    detail: str | None = None
    reason: str | None = None
    missing_mounts: list[str] | None = None


class Detection(CamelModel):
    """Question 1's answer for one manufacturer. ``reason`` is set exactly when state is not ok."""

    state: State
    depth: Depth = Depth.DECLARED
    accelerators: int = 0
    detail: str | None = None
    reason: str | None = None
    host: HostView | None = None


class Check(CamelModel):
    """One precondition read on one accelerator."""

    accelerator: str
    capability: str
    mode: str = "unnamed"
    state: State
    depth: Depth = Depth.DECLARED
    detail: str | None = None
    reason: str | None = None
    command: str | None = None
    evidence: str | None = None


class Group(CamelModel):
    """One manufacturer's answers."""

    manufacturer: str
    timestamp: str
    detection: Detection
    checks: list[Check] | None = None
    note: str | None = None


class NetworkSection(CamelModel):
    """The node's RDMA links (belongs to no manufacturer); never affects the exit code."""

    timestamp: str
    checks: list[NetworkCheck] | None = None
    note: str | None = None


class Report(CamelModel):
    """The whole document. ``topology`` (the kubelet's TopologyManager policy) is added by a later
    stage of this implementation; until then it is absent rather than faked."""

    accelerators: list[Group] = Field(default_factory=list)
    network: NetworkSection | None = None

    def failures(self) -> list[str]:
        """Every ``unavailable`` answer, in words: non-empty means a non-zero exit."""
        failed: list[str] = []
        for group in self.accelerators:
            if group.detection.state is State.UNAVAILABLE:
                failed.append(f"{group.manufacturer}: detection: {group.detection.reason}")
            for check in group.checks or []:
                if check.state is State.UNAVAILABLE:
                    failed.append(f"{group.manufacturer}: {check.capability} on {check.accelerator}: {check.reason}")
        return failed
