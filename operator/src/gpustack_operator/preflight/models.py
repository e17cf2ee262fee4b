"""The preflight report document (supplement §2.8, §3.8): one YAML document on stdout."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from gpustack_operator.discovery.network import NetworkCheck
from gpustack_operator.ledger.models import CamelModel
from gpustack_operator.preflight.runtime import RuntimeResolution


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
    """Question 1's answer for one manufacturer. ``reason`` is set exactly when state is not ok.

    ``driver_version`` / ``runtime_version``: what the detected groups report (distinct values joined
    by ``, ``), on an ``ok`` answer only -- the fleet report shows them beside the model and count."""

    state: State
    depth: Depth = Depth.DECLARED
    accelerators: int = 0
    detail: str | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    reason: str | None = None
    host: HostView | None = None


# The modes the management and sliced rows answer for (supplement §2.7, "The four capability rows"):
# sidecar-visibility is the visibility mode's on every accelerator, partition-backed ones included
# (only its depth differs there); co-tenancy is a sliced or a partitioned accelerator's.
ROW_MODES: dict[str, frozenset[str]] = {
    "sidecar-visibility": frozenset({"visibility"}),
    "sliced-runtime-loaded": frozenset({"sliced"}),
    "sliced-quota-in-force": frozenset({"sliced"}),
    "co-tenancy": frozenset({"sliced", "partitioned"}),
}


def row_shape_problem(state: State, detail: str | None, reason: str | None, capability: str, mode: str) -> str | None:
    """Why a row is not of the spec's shape, or ``None`` (supplement §2.8 and §3.8: an ``ok`` row carries
    ``detail``, an ``unavailable`` row ``reason``; ``not-declared`` says why in ``detail`` as ``ok`` does).
    Exactly one of the two carries the row's words, and never an empty one: a row with no words is a
    silent answer, and one with both reads as passing and failing at once."""
    words, other = ("reason", "detail") if state is State.UNAVAILABLE else ("detail", "reason")
    said = reason if state is State.UNAVAILABLE else detail
    if said is None or not said.strip():
        return f"a {state.value} {capability} row must say why in its {words}"
    if (detail if state is State.UNAVAILABLE else reason) is not None:
        return f"a {state.value} {capability} row carries its words in {words}, never in {other}"
    modes = ROW_MODES.get(capability)
    if modes is not None and mode not in modes:
        return f"a {capability} row answers for the {' or '.join(sorted(modes))} mode, not {mode!r}"
    return None


class Check(CamelModel):
    """One precondition read on one accelerator.

    Only a row of the spec's shape can exist (:func:`row_shape_problem`): the model refuses any other
    one, built, assigned to or copied -- and a document read back (the fleet report's reading) with
    one in it."""

    model_config = ConfigDict(validate_assignment=True)

    accelerator: str
    capability: str
    mode: str = "unnamed"
    state: State
    depth: Depth = Depth.DECLARED
    detail: str | None = None
    reason: str | None = None
    command: str | None = None
    evidence: str | None = None

    @model_validator(mode="after")
    def _spec_shape(self) -> Self:
        problem = row_shape_problem(self.state, self.detail, self.reason, self.capability, self.mode)
        if problem is not None:
            raise ValueError(problem)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, validated like any other row (pydantic's own copy skips validation)."""
        copied = super().model_copy(update=update, deep=deep)
        return self.model_validate(copied.model_dump())


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


class TopologyPolicy(StrEnum):
    """The kubelet's TopologyManager policies (§2.8), and ``unknown`` for a policy nothing named."""

    SINGLE_NUMA_NODE = "single-numa-node"
    RESTRICTED = "restricted"
    BEST_EFFORT = "best-effort"
    NONE = "none"
    UNKNOWN = "unknown"


class Topology(CamelModel):
    """What this node's kubelet does with a NUMA hint (§2.8 ``topology``): ``timestamp``, ``policy``,
    ``depth``, optional ``note``.

    The depth is always ``declared``: the policy is read out of declared configuration and nothing is
    run. ``unknown`` always carries a note naming which of the four reasons applies; a named policy
    carries none. Never affects the exit code (see :meth:`Report.failures`).
    """

    timestamp: str
    policy: TopologyPolicy
    depth: Depth = Depth.DECLARED
    note: str | None = None


class Report(CamelModel):
    """The whole document: ``accelerators``, ``network``, ``topology`` (§2.8), in that order.

    ``runtime`` and ``probe_image`` travel with the report to its callers (the CLI logs the first,
    the Ansible module returns both) but are not part of the document: §2.8 names three sections,
    and the fleet report re-reads documents as this model. They are the resolution this pass made,
    from the same read of the kubelet the topology section came from — returned with it rather than
    re-resolved by a second read that could see a different process table.
    """

    accelerators: list[Group] = Field(default_factory=list)
    network: NetworkSection | None = None
    topology: Topology | None = None
    runtime: RuntimeResolution | None = Field(default=None, exclude=True)
    probe_image: str | None = Field(default=None, exclude=True)

    def summary(self) -> dict[str, object]:
        """The compact reading: per manufacturer state/depth/accelerators, counts by state, the
        topology policy and the runtime resolved (``None`` when nothing could be driven)."""
        states = {s.value: 0 for s in State}
        manufacturers: dict[str, dict[str, object]] = {}
        for g in self.accelerators:
            d = g.detection
            states[d.state.value] += 1
            manufacturers[g.manufacturer] = {
                "state": d.state.value,
                "depth": d.depth.value,
                "accelerators": d.accelerators,
            }
        return {
            "manufacturers": manufacturers,
            "states": states,
            "topology": self.topology.policy.value if self.topology else None,
            "runtime": self.runtime.runtime.value if self.runtime and self.runtime.runtime else None,
        }

    def failures(self) -> list[str]:
        """Every ``unavailable`` accelerator answer, in words: non-empty means a non-zero exit.

        Only accelerator answers count (§2.8): not the ``network`` section, and not ``topology``,
        whatever it says — the policy decides which placements the kubelet admits, not what this node
        can hand out."""
        failed: list[str] = []
        for group in self.accelerators:
            if group.detection.state is State.UNAVAILABLE:
                failed.append(f"{group.manufacturer}: detection: {group.detection.reason}")
            for check in group.checks or []:
                if check.state is State.UNAVAILABLE:
                    failed.append(f"{group.manufacturer}: {check.capability} on {check.accelerator}: {check.reason}")
        return failed
