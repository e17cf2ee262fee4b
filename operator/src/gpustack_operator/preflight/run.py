"""Running preflight: question 1 (are the devices detected), reusing the detect pass, then questions 2
and 3 (:mod:`.capability`, :mod:`.probe`) with the lock, the stale sweep and the library staging around
them, plus the ``network`` and ``topology`` sections and the container-runtime resolution (supplement
§2.4-§2.8). With capabilities off (the module's ``capabilities: false``) each group's note says only
question 1 was asked, rather than leaving an empty list that reads as a pass.

What a run may write is decided once (:func:`withheld`): nothing under ``--dry-run`` or with no host
root to enter; otherwise the four host writes of §2.5 -- the library tree, the responder's rendered
files, the lock, a driver mode asked on and put straight back -- and the probes. Every run that writes
takes the lock first (:func:`will_write`), so a second run refuses before it sweeps, stages or toggles
anything; and no probe starts after a sweep that failed (:func:`probes_blocked`).
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpustack_operator.discovery.coverage import Coverage
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.discovery.network import preflight_rows
from gpustack_operator.host import HostRoot, HostRootError
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import DetectContext, Detected, DetectOutcome, Unmeasured
from gpustack_operator.preflight.capability import DRY_RUN_WHY, capability_rows, declares_slicing
from gpustack_operator.preflight.capability import Env as CapabilityEnv
from gpustack_operator.preflight.crosscheck import cross_check
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.kubelet import KubeletReading, read_kubelet
from gpustack_operator.preflight.lock import HeldLock, LockError, acquire
from gpustack_operator.preflight.models import (
    Check,
    Depth,
    Detection,
    Group,
    HostView,
    NetworkSection,
    Report,
    State,
    Topology,
)
from gpustack_operator.preflight.probe import Door, Prober, Progress
from gpustack_operator.preflight.runtime import (
    RuntimeName,
    RuntimeResolution,
    resolve_runtime,
    unusable_root_resolution,
)
from gpustack_operator.preflight.staging import DEFAULT_SOURCE, Staged, stage
from gpustack_operator.preflight.topology import not_read, topology_section
from gpustack_operator.settings import Settings

if TYPE_CHECKING:
    from gpustack_operator.preflight.imageref import ImageRef

log = logging.getLogger(__name__)


def log_crash(line: str) -> None:
    """A contained crash: one line on the log at error (the document carries the reason too), the trace
    at debug only (``-v=3``) -- a traceback on stderr at the default verbosity is a defect (issue 16)."""
    log.error("%s", line)
    log.debug("the trace of: %s", line, exc_info=True)


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
NOTE_CONTAINER_VIEW = (
    "this manufacturer carries no host CLI to cross-check against, so this zero is this container's own "
    "view, not the host's"
)
NOT_ASKED = "the host's own CLI was not asked: {why}"
NOTE_DETECTION_FAILED = (
    "detection failed for this manufacturer, so the remaining questions are unanswerable: whether "
    "these accelerators slice, and what happens to a slice, are questions about accelerators this "
    "report cannot identify -- the detection reason above is the one to fix"
)
NOTE_NOT_YET_ASKED = (
    "only question 1 (detection) was asked (capabilities off); whether these accelerators can be "
    "sliced, and managed while sliced, was not checked"
)
NOTE_PROBE_IMAGE = "the probe image {image} was accepted, but no probe was started (capabilities off)"
NO_HOST_ROOT_GIVEN = "no host root (--host-root) was given"
AS_A_DRY_RUN = "{problem}, so this run carries on as a dry run, which withholds the ask"
SWEEP_FAILED = "the stale-container sweep could not be completed, so no probe was started on this node"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


DETECTION_UNIDENTIFIED = (
    "the detect pass sees these accelerators but could not identify {n} of them, so they cannot be "
    "allocated or named (what the driver could not read, per accelerator: {drops}); this is the driver "
    "or the card's firmware not answering for them, not this container's view -- check them with the "
    "vendor's own tool on the node"
)
DETECTION_HALF_INSTALLED = (
    "{sentence}; the driver said: {driver}. The accelerators are on the bus, so this is not an empty "
    "node: install and load the vendor driver on the node, and give this container its library (the "
    "vendor mount, or the vendor container runtime, of the preflight command line)"
)
DETECTION_HALF_ENUMERATED = (
    "{sentence}: the driver enumerates fewer accelerators than the bus shows (one fallen off the bus, "
    "or a driver that did not bind every card); check `dmesg` and the vendor's own tool on the node"
)


def detection_answer(outcome: DetectOutcome, cover: Coverage | None = None) -> Detection:
    """Question 1 for one manufacturer.

    Could not measure → ``unavailable``. Accelerators the driver enumerated but could not identify →
    ``unavailable`` naming them and what could not be read (never blaming mounts). The PCI bus
    showing accelerators the driver did not name (library absent, refused to initialise, fewer
    enumerated: a half-installed node) → ``unavailable`` naming the addresses and the driver's own
    words, with the remedy -- a decision beyond the reference, which reports that node like an empty
    one (docs/preflight.md). Nothing found, and nothing on the bus → ``not-declared``. A group with
    no name (an id-less group names every flavor after nothing) → ``unavailable``. Otherwise ``ok``.
    """
    if isinstance(outcome, Unmeasured):
        return Detection(state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: {outcome.reason}")
    groups: list[DevicesGroup] = outcome.groups
    count = sum(len(g.accelerators) for g in groups)
    dropped = outcome.dropped
    if dropped and (cover is None or cover.missing <= len(dropped)):
        drops = "; ".join(str(d) for d in dropped)
        return Detection(
            state=State.UNAVAILABLE,
            accelerators=count,
            reason=DETECTION_UNIDENTIFIED.format(n=len(dropped), drops=drops),
        )
    if cover is not None and cover.short:
        if count == 0 or outcome.driver:
            reason = DETECTION_HALF_INSTALLED.format(sentence=cover.sentence(), driver=outcome.driver or "nothing")
        else:
            reason = DETECTION_HALF_ENUMERATED.format(sentence=cover.sentence())
        if dropped:
            reason += "; and " + DETECTION_UNIDENTIFIED.format(n=len(dropped), drops="; ".join(map(str, dropped)))
        return Detection(state=State.UNAVAILABLE, accelerators=count, reason=reason)
    if count == 0:
        return Detection(state=State.NOT_DECLARED, reason=DETECTION_NO_ACCELERATOR)
    if any(not g.name for g in groups if g.accelerators):
        unnamed = [a.id for g in groups if not g.name for a in g.accelerators]
        return Detection(
            state=State.UNAVAILABLE,
            accelerators=count,
            reason=f"{DETECTION_UNNAMED} (unnamed: {', '.join(unnamed)})",
        )
    named = [g for g in groups if g.accelerators]
    detail = ", ".join(f"{g.name} x{len(g.accelerators)}" for g in named)
    return Detection(
        state=State.OK,
        depth=Depth.DECLARED,
        accelerators=count,
        detail=detail,
        driver_version=", ".join(dict.fromkeys(g.driver_version for g in named if g.driver_version)) or None,
        runtime_version=", ".join(dict.fromkeys(g.runtime_version for g in named if g.runtime_version)) or None,
    )


@dataclass(frozen=True)
class HostContext:
    """The host root preflight enters (``--host-root``, default ``/host``), or why there is none.

    Kept apart from the node view the detect pass reads (``NodeDetection.root``): the host root is
    entered only for the host's own vendor CLI, its container CLI, the kubelet's files and the
    library staging -- never to detect through."""

    root: HostRoot | None
    exec: HostExec | None
    problem: str | None = None  # why there is no host root to enter

    @classmethod
    def enter(cls, path: str) -> HostContext:
        try:
            root = HostRoot(path)
        except HostRootError as exc:
            return cls(None, None, f"no host root to enter: {exc}")
        hostexec = HostExec(str(root.root))
        try:
            hostexec.validate()
        except HostExecError as exc:
            return cls(None, None, str(exc))
        return cls(root, hostexec)


def preflight_group(
    manufacturer: str,
    outcome: DetectOutcome,
    host: HostContext | None = None,
    *,
    probe_image: ImageRef | None = None,
    cover: Coverage | None = None,
    view: HostRoot | None = None,
    capability: CapabilityEnv | None = None,
) -> Group:
    """One manufacturer's group. With ``capability`` (the detect context, host root and switches of
    the pass), an ``ok`` detection goes on to questions 2 and 3 (:mod:`.capability`)."""
    detection = detection_answer(outcome, cover)
    cli = REGISTRY[manufacturer].host_cli
    if cli is not None and host is not None:
        if host.exec is not None:
            detection = cross_check(host.exec, cli, detection, outcome, view)
        else:
            detection = detection.model_copy(
                update={
                    "host": HostView(
                        command=shlex.join([cli.name, *cli.args]), reason=NOT_ASKED.format(why=host.problem)
                    )
                }
            )
    if isinstance(outcome, Unmeasured):
        note = NOTE_UNMEASURED
    elif detection.state is State.NOT_DECLARED:
        note = NOTE_NO_ACCELERATOR
        if cli is None:
            note += "; " + NOTE_CONTAINER_VIEW
    elif detection.state is State.UNAVAILABLE:
        note = NOTE_DETECTION_FAILED
    else:
        note = NOTE_NOT_YET_ASKED
        if capability is not None and isinstance(outcome, Detected):
            rows, note = capability_rows(manufacturer, capability, outcome.groups)
            return Group(
                manufacturer=manufacturer, timestamp=now(), detection=detection, checks=rows or None, note=note
            )
        if probe_image is not None:
            note += "; " + NOTE_PROBE_IMAGE.format(image=probe_image)
    return Group(manufacturer=manufacturer, timestamp=now(), detection=detection, note=note)


def panicked_group(manufacturer: str, outcome: DetectOutcome | None, exc: BaseException) -> Group:
    """The spec's containment (preflight-operations "One manufacturer's crash does not take the others
    down"): the detection block already answered is kept, whatever the crashed pass filled in is
    discarded, one ``preflight-panicked`` row per accelerator, and a note with what the panic said."""
    said = f"{type(exc).__name__}: {exc}"
    detection = (
        detection_answer(outcome)
        if outcome is not None
        else Detection(
            state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: the pass panicked before it answered: {said}"
        )
    )
    ids = [a.id for g in outcome.groups for a in g.accelerators] if isinstance(outcome, Detected) else []
    rows = [
        Check(
            accelerator=acc,
            capability="preflight-panicked",
            state=State.UNAVAILABLE,
            reason="this manufacturer's preflight panicked and was contained, so none of this accelerator's "
            f"preconditions were established: {said}",
        )
        for acc in ids
    ]
    note = (
        "this manufacturer's preflight panicked and was contained: whatever it had established is discarded, "
        "and every accelerator it was asked about is reported unavailable below; the rest of this run is "
        f"unaffected: {said}"
    )
    return Group(manufacturer=manufacturer, timestamp=now(), detection=detection, checks=rows or None, note=note)


def host_sections(
    host: HostContext | None, runtime: RuntimeName | None
) -> tuple[Topology | None, RuntimeResolution | None]:
    """The ``topology`` section and the runtime resolution, from one read of the kubelet through the
    host root; with no host root to enter, both say so (``never looked for``)."""
    if host is None:
        return None, None
    if host.root is None:
        why = host.problem or "no host root"
        return not_read(now(), f"the host root was never looked in ({why})"), unusable_root_resolution(why, runtime)
    try:
        kubelet = read_kubelet(host.root)
        log_kubelet(kubelet)
        topology = topology_section(kubelet, now())
        resolution = resolve_runtime(host.root, kubelet, runtime)
    except Exception as exc:  # contained: the document is still written
        said = f"reading the kubelet's configuration crashed: {type(exc).__name__}: {exc}"
        log_crash(f"preflight: {said}")
        return not_read(now(), said), unusable_root_resolution(said, runtime)
    log.debug("topology: %s%s", topology.policy.value, f" -- {topology.note}" if topology.note else "")
    log.debug("%s", resolution.line())
    return topology, resolution


def preflight(
    result: NodeDetection,
    host: HostContext | None = None,
    *,
    runtime: RuntimeName | None = None,
    probe_image: ImageRef | None = None,
    view: HostRoot | None = None,
    settings: Settings | None = None,
    dry_run: bool = False,
    preload_source: str = DEFAULT_SOURCE,
    progress: Progress | None = None,
) -> Report:
    """The report for every manufacturer the pass was asked about (none is ever left out).

    With ``settings`` (and ``view``), every manufacturer whose detection is ``ok`` is asked questions
    2 and 3 (:mod:`.capability`); ``dry_run`` withholds every host and driver write they would make, and
    so does a run with no host root to enter (:func:`withheld`). A run that writes takes the node's
    lock before anything else, or refuses naming its holder (:func:`will_write`, :func:`locked_report`).

    ``host`` is the host root entered to cross-check detection against the host's own vendor CLI and
    read for the kubelet's configuration, which gives both the ``topology`` section and the runtime
    resolution (``runtime`` is ``--runtime``, which overrides it). ``view`` is the node view the
    detect pass read (for what a remedy names as missing). A crash while answering one manufacturer
    is contained to it (:func:`panicked_group`); the trace goes to the log.
    """
    network = None
    try:
        rows = preflight_rows(result.interfaces) if result.interfaces is not None else None
        network = NetworkSection(timestamp=now(), checks=rows.checks, note=rows.note) if rows is not None else None
    except Exception as exc:
        log_crash(f"preflight: the network section crashed: {type(exc).__name__}: {exc}")
        network = NetworkSection(
            timestamp=now(), note=f"the network section could not be built: {type(exc).__name__}: {exc}"
        )
    topology, resolution = host_sections(host, runtime)
    dry_why = withheld(dry_run, host)
    held: HeldLock | None = None
    if settings is not None and view is not None and dry_why is None and will_write(result):
        assert host is not None and host.root is not None  # withheld() said there is one
        try:
            held = acquire(host.root)
        except LockError as exc:
            return locked_report(result, str(exc), network, topology, resolution, probe_image)
    try:
        groups = answer(
            result,
            host,
            dry_why,
            probe_image=probe_image,
            view=view,
            settings=settings,
            resolution=resolution,
            preload_source=preload_source,
            progress=progress,
        )
    finally:
        if held is not None:
            held.release()
    return Report(
        accelerators=groups,
        network=network,
        topology=topology,
        runtime=resolution,
        probe_image=str(probe_image) if probe_image is not None else None,
    )


def answer(
    result: NodeDetection,
    host: HostContext | None,
    dry_why: str | None,
    *,
    probe_image: ImageRef | None,
    view: HostRoot | None,
    settings: Settings | None,
    resolution: RuntimeResolution | None,
    preload_source: str,
    progress: Progress | None,
) -> list[Group]:
    """Every manufacturer's group; with ``settings``, questions 2 and 3 behind the sweep and staging.
    Called with the lock held wherever the run writes (``dry_why`` is ``None``)."""
    prober: Prober | None = None
    stale: str | None = None
    staged: Staged | None = None
    no_host = host.problem if host is not None else NO_HOST_ROOT_GIVEN
    if settings is not None and view is not None:
        door = Door(runner=host.exec if host is not None else None, resolution=resolution, no_host=no_host)
        if dry_why is None and door.runtime is not None and would_probe(result):
            assert host is not None and host.root is not None and host.exec is not None and resolution is not None
            # the sweep's module loads only where a runtime is there to sweep (a fleet task on every host)
            from gpustack_operator.preflight.sweep import failure_reason, other_runtimes, sweep  # noqa: PLC0415

            say(progress, "sweeping containers an earlier run left behind")
            stale = failure_reason(sweep(host.exec, resolution, other_runtimes(host.root, resolution)))
        staged = stage(
            ok_groups(result),
            result.cpu.arch if result.cpu is not None else "unknown",
            str(host.root.root) if host is not None and host.root is not None else None,
            preload_source,
            dry_run=dry_why is not None,
        )
        prober = Prober(door, probe_image, probes_blocked(stale, staged, host), progress)
    groups = []
    for name, outcome in sorted(result.outcomes.items()):
        try:
            capability = None
            if settings is not None and view is not None and name in result.resolved:
                capability = CapabilityEnv(
                    resolved=result.resolved[name],
                    settings=settings,
                    detect=DetectContext(
                        view=view, pci=result.pci, settings=settings, manufacturer=result.resolved[name]
                    ),
                    host=host.root if host is not None else None,
                    host_problem=no_host,
                    dry_run=dry_why is not None,
                    dry_why=dry_why or DRY_RUN_WHY,
                    prober=prober,
                    lib_source=preload_source if staged is None or staged.dry_run or staged.error else None,
                )
            groups.append(
                preflight_group(
                    name,
                    outcome,
                    host,
                    probe_image=probe_image,
                    cover=result.coverage.get(name),
                    view=view,
                    capability=capability,
                )
            )
        except Exception as exc:  # contained to this manufacturer; the trace goes to the log
            log_crash(f"preflight: the {name} preflight panicked: {type(exc).__name__}: {exc}")
            groups.append(panicked_group(name, outcome, exc))
    if stale is not None:
        groups = [with_stale_rows(g, result.outcomes.get(g.manufacturer), stale) for g in groups]
    return groups


def withheld(dry_run: bool, host: HostContext | None) -> str | None:
    """Why this run writes nothing to the node, or ``None`` when it may write: the one rule every write
    of the run follows (the lock, the sweep, the library tree, the rendered files, a mode asked on, a
    probe). ``--dry-run`` writes nothing (§2.4: "no lib tree, no rendered files, no driver mode"); nor
    does a run with no host root to enter, which "carries on as a dry run rather than stopping"
    (preflight-operations, "The A5 host-state rows") -- a driver mode is not asked on through the node
    view either, since the run that asks it must be the one that holds the node's lock."""
    if dry_run:
        return DRY_RUN_WHY
    if host is None or host.root is None or host.exec is None:
        problem = host.problem if host is not None and host.problem else NO_HOST_ROOT_GIVEN
        return AS_A_DRY_RUN.format(problem=problem)
    return None


def will_write(result: NodeDetection) -> bool:
    """Would questions 2 and 3 write to this node, dry runs aside? They do wherever an accelerator was
    detected: its library tree is staged, its responder renders, its driver mode may be asked on, its
    probes may start -- so that is where the lock is taken (§2.8 "Only one preflight runs on a node at a
    time"), before any of it. A node with no accelerator gets nothing written, not even the lock."""
    return any(isinstance(o, Detected) and any(g.accelerators for g in o.groups) for o in result.outcomes.values())


def probes_blocked(stale: str | None, staged: Staged, host: HostContext | None) -> str | None:
    """Why every probe step of this run is emitted rather than run, or ``None`` (§2.6, §2.8).

    A failed stale-container sweep comes first and overrides everything: no probe starts after it
    (§2.8 "A sweep that could not be completed fails the accelerators it could not clear" -- a leftover
    still holds its accelerator, so a slice measured beside it would come back short and blame the
    card). Then no host root: the step's door says so (§2.6 case 4, naming the marker looked for). Then
    ``--dry-run`` and a tree that could not be staged (§2.6 cases 1 and 2)."""
    if stale is not None:
        return SWEEP_FAILED
    if host is None or host.root is None:
        return None
    return staged.blocked()


def say(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress(text)


def ok_groups(result: NodeDetection) -> list[DevicesGroup]:
    """The groups of every manufacturer whose detect pass answered (what staging lays out)."""
    return [g for o in result.outcomes.values() if isinstance(o, Detected) for g in o.groups]


def would_probe(result: NodeDetection) -> bool:
    """Does any manufacturer with a container probe have an accelerator that can host a logical slice?"""
    for name, outcome in result.outcomes.items():
        if not isinstance(outcome, Detected) or REGISTRY[name].identity.preflight.probe is None:
            continue
        if any(declares_slicing(a) for g in outcome.groups for a in g.accelerators):
            return True
    return False


def locked_report(  # noqa: PLR0917 - the sections a refused run still reports
    result: NodeDetection,
    reason: str,
    network: NetworkSection | None,
    topology: Topology | None,
    resolution: RuntimeResolution | None,
    probe_image: ImageRef | None,
) -> Report:
    """A second run on the node (§2.8): it refuses before it sweeps anything and reports every
    manufacturer unavailable naming the lock."""
    groups = []
    for name, outcome in sorted(result.outcomes.items()):
        count = sum(len(g.accelerators) for g in outcome.groups) if isinstance(outcome, Detected) else 0
        groups.append(
            Group(
                manufacturer=name,
                timestamp=now(),
                detection=Detection(state=State.UNAVAILABLE, accelerators=count, reason=reason),
                note="this run refused before it swept or started anything: " + reason,
            )
        )
    return Report(
        accelerators=groups,
        network=network,
        topology=topology,
        runtime=resolution,
        probe_image=str(probe_image) if probe_image is not None else None,
    )


def with_stale_rows(group: Group, outcome: DetectOutcome | None, reason: str) -> Group:
    """One ``stale-container-sweep`` row per accelerator of the group (§2.8)."""
    if not isinstance(outcome, Detected):
        return group
    ids = [a.id for g in outcome.groups for a in g.accelerators]
    if not ids:
        return group
    from gpustack_operator.preflight.sweep import stale_rows  # noqa: PLC0415 - only after a sweep that failed

    return group.model_copy(update={"checks": [*stale_rows(ids, reason), *(group.checks or [])]})


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
    host: HostContext | None = None,
    *,
    runtime: RuntimeName | None = None,
    probe_image: ImageRef | None = None,
) -> Report:
    """Every manufacturer ``unavailable`` when the node view the detect pass reads cannot be used;
    the host root (when there is one) still answers the ``topology`` section and the runtime."""
    groups = [
        Group(
            manufacturer=m,
            timestamp=now(),
            detection=Detection(state=State.UNAVAILABLE, reason=f"{DETECTION_UNMEASURED}: {reason}"),
            note=NOTE_UNMEASURED,
        )
        for m in manufacturers
    ]
    topology, resolution = host_sections(host, runtime)
    return Report(
        accelerators=groups,
        topology=topology or not_read(now(), f"the node view could not be used: {reason}"),
        runtime=resolution or unusable_root_resolution(reason, runtime),
        probe_image=str(probe_image) if probe_image is not None else None,
    )


__all__ = ["Detected", "HostContext", "preflight", "unusable_root_report"]
