"""Running preflight: today question 1 (are the devices detected), reusing the detect pass, plus the
``network`` and ``topology`` sections and the container-runtime resolution (supplement §2.4, §2.8).

Questions 2 and 3 (slicing, management while sliced) are answered by later stages; until then each
group says so in its note rather than leaving an empty list that reads as a pass. No container is
started by this version, so the resolved runtime and a ``--probe-image`` are recorded on the report
for its callers, and the notes say plainly that no probe ran.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.discovery.network import preflight_rows
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import Detected, DetectOutcome, Unmeasured
from gpustack_operator.preflight.crosscheck import cross_check
from gpustack_operator.preflight.hostexec import HostExec
from gpustack_operator.preflight.imageref import ImageRef
from gpustack_operator.preflight.kubelet import KubeletReading, read_kubelet
from gpustack_operator.preflight.models import Depth, Detection, Group, NetworkSection, Report, State
from gpustack_operator.preflight.runtime import RuntimeName, resolve_runtime, unusable_root_resolution
from gpustack_operator.preflight.topology import not_read, topology_section

log = logging.getLogger(__name__)

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
NOTE_PROBE_IMAGE = "the probe image {image} was accepted, but this version starts no probe container"


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


def preflight_group(
    manufacturer: str, outcome: DetectOutcome, host: HostExec | None = None, probe_image: ImageRef | None = None
) -> Group:
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
        if probe_image is not None:
            note += "; " + NOTE_PROBE_IMAGE.format(image=probe_image)
    return Group(manufacturer=manufacturer, timestamp=now(), detection=detection, note=note)


def preflight(
    result: NodeDetection,
    host: HostExec | None = None,
    *,
    root: HostRoot | None = None,
    runtime: RuntimeName | None = None,
    probe_image: ImageRef | None = None,
) -> Report:
    """The report for every manufacturer the pass was asked about (none is ever left out).

    ``host`` enters the host root to cross-check detection against the host's own vendor CLI;
    ``root`` is read for the kubelet's configuration, which gives both the ``topology`` section and
    the runtime resolution (``runtime`` is ``--runtime``, which overrides the resolution).
    """
    rows = preflight_rows(result.interfaces) if result.interfaces is not None else None
    network = NetworkSection(timestamp=now(), checks=rows.checks, note=rows.note) if rows is not None else None
    topology, resolution = None, None
    if root is not None:
        kubelet = read_kubelet(root)
        log_kubelet(kubelet)
        topology = topology_section(kubelet, now())
        resolution = resolve_runtime(root, kubelet, runtime)
        log.debug("topology: %s%s", topology.policy.value, f" -- {topology.note}" if topology.note else "")
        log.debug("%s", resolution.line())
    return Report(
        accelerators=[preflight_group(m, o, host, probe_image) for m, o in sorted(result.outcomes.items())],
        network=network,
        topology=topology,
        runtime=resolution,
        probe_image=str(probe_image) if probe_image is not None else None,
    )


def log_kubelet(kubelet: KubeletReading) -> None:
    """Per-decision lines at ``-vv``: which kubelet, and what was read."""
    if kubelet.process is not None:
        log.debug("kubelet: pid %d: %s", kubelet.process.pid, " ".join(kubelet.process.argv))
    elif kubelet.process_table:
        log.debug("kubelet: none running; reading kubeadm-flags.env, config.yaml and the distribution trees instead")
    for source in kubelet.sources:
        named = ", ".join(f"{k.value}={v}" for k, v in source.values.items()) or "names neither setting"
        log.debug(
            "kubelet: read %s (%s): %s",
            source.path,
            source.kind.value,
            f"unreadable: {source.error}" if source.error else named,
        )


def unusable_root_report(
    manufacturers: list[str],
    reason: str,
    *,
    runtime: RuntimeName | None = None,
    probe_image: ImageRef | None = None,
) -> Report:
    """Every manufacturer ``unavailable`` when the host root itself cannot be read; the topology
    section ``unknown`` ("not read") and no runtime resolved, with the reason."""
    groups = [
        Group(
            manufacturer=m,
            timestamp=now(),
            detection=Detection(state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: {reason}"),
            note=NOTE_UNMEASURED,
        )
        for m in manufacturers
    ]
    return Report(
        accelerators=groups,
        topology=not_read(now(), f"the host root could not be used: {reason}"),
        runtime=unusable_root_resolution(reason, runtime),
        probe_image=str(probe_image) if probe_image is not None else None,
    )


__all__ = ["Detected", "preflight", "unusable_root_report"]
