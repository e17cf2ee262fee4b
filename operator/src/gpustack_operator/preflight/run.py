"""Running preflight: today question 1 (are the devices detected), reusing the detect pass.

Questions 2 and 3 (slicing, management while sliced) are answered by later stages; until then each
group says so in its note rather than leaving an empty list that reads as a pass.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.discovery.network import preflight_rows
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import Detected, DetectOutcome, Unmeasured
from gpustack_operator.preflight.crosscheck import cross_check
from gpustack_operator.preflight.hostexec import HostExec
from gpustack_operator.preflight.models import Depth, Detection, Group, NetworkSection, Report, State

DETECTION_NO_ACCELERATOR = "the detect pass found no accelerator of this manufacturer"
DETECTION_UNMEASURED = (
    "the detect pass could not measure this manufacturer, so whether its accelerators are present is unknown"
)
DETECTION_UNNAMED = (
    "the detect pass found accelerators it could not name: the part of this manufacturer's driver "
    "stack that names them did not load, which leaves the group's id empty as well -- and every "
    "resource flavor and instance type on this node is named after that id"
)
NOTE_UNMEASURED = "the detect pass could not measure this manufacturer, so none of its accelerators were preflighted"
NOTE_NO_ACCELERATOR = "no accelerator of this manufacturer was detected"
NOTE_DETECTION_FAILED = (
    "detection failed for this manufacturer, so the remaining questions are unanswerable: whether "
    "these accelerators slice, and what happens to a slice, are questions about accelerators this "
    "report cannot identify -- the detection reason above is the one to fix"
)
NOTE_NOT_YET_ASKED = (
    "only question 1 (detection) is answered by this version; whether these accelerators can be "
    "sliced, and managed while sliced, was not checked"
)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def detection_answer(outcome: DetectOutcome) -> Detection:
    """Question 1 for one manufacturer: its three outcomes are the three states.

    Could not measure → ``unavailable``; nothing found → ``not-declared``; accelerators found →
    ``ok``, unless one group has no name (an id-less group names every flavor after nothing), which
    is ``unavailable`` too.
    """
    if isinstance(outcome, Unmeasured):
        return Detection(state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: {outcome.reason}")
    groups: list[DevicesGroup] = outcome.groups
    count = sum(len(g.accelerators) for g in groups)
    if count == 0:
        return Detection(state=State.NOT_DECLARED, reason=DETECTION_NO_ACCELERATOR)
    if any(not g.name for g in groups if g.accelerators):
        unnamed = [a.id for g in groups if not g.name for a in g.accelerators]
        return Detection(
            state=State.UNAVAILABLE,
            accelerators=count,
            reason=f"{DETECTION_UNNAMED} (unnamed: {', '.join(unnamed)})",
        )
    detail = ", ".join(f"{g.name} x{len(g.accelerators)}" for g in groups if g.accelerators)
    return Detection(state=State.OK, depth=Depth.DECLARED, accelerators=count, detail=detail)


def preflight_group(manufacturer: str, outcome: DetectOutcome, host: HostExec | None = None) -> Group:
    detection = detection_answer(outcome)
    cli = REGISTRY[manufacturer].host_cli
    if host is not None and cli is not None:
        detection = cross_check(host, cli, detection)
    if isinstance(outcome, Unmeasured):
        note = NOTE_UNMEASURED
    elif detection.state is State.NOT_DECLARED:
        note = NOTE_NO_ACCELERATOR
    elif detection.state is State.UNAVAILABLE:
        note = NOTE_DETECTION_FAILED
    else:
        note = NOTE_NOT_YET_ASKED
    return Group(manufacturer=manufacturer, timestamp=now(), detection=detection, note=note)


def preflight(result: NodeDetection, host: HostExec | None = None) -> Report:
    """The report for every manufacturer the pass was asked about (none is ever left out).

    ``host`` enters the host root to cross-check detection against the host's own vendor CLI.
    """
    rows = preflight_rows(result.interfaces) if result.interfaces is not None else None
    network = NetworkSection(timestamp=now(), checks=rows.checks, note=rows.note) if rows is not None else None
    return Report(
        accelerators=[preflight_group(m, o, host) for m, o in sorted(result.outcomes.items())],
        network=network,
    )


def unusable_root_report(manufacturers: list[str], reason: str) -> Report:
    """Every manufacturer ``unavailable`` when the host root itself cannot be read."""
    groups = [
        Group(
            manufacturer=m,
            timestamp=now(),
            detection=Detection(state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: {reason}"),
            note=NOTE_UNMEASURED,
        )
        for m in manufacturers
    ]
    return Report(accelerators=groups)


__all__ = ["Detected", "preflight", "unusable_root_report"]
