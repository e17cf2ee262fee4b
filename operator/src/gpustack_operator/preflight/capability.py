"""Preflight questions 2 and 3 without a container: the driver-read rows, the injection-simulated
capability rows and Ascend's A5 host-state rows (supplement §1.5, §2.7; reference rules §8).

The rule of the product: preflight drives the allocator's *own* responders with a synthetic
allocation -- a real :class:`~gpustack_operator.allocator.core.Allocator` for one accelerator, the
manufacturer's real responder, an in-memory Pod -- so a preflight answer and the allocation it
predicts cannot disagree. Nothing here reimplements an injection.

Rows, per accelerator (§2.7 tier table and "The full table"):

* the driver-read row, only for a manufacturer that has one: ``mig-partitioning`` (NVIDIA, T-Head;
  mode ``partitioned``), ``container-share`` (Ascend), ``cu-mask-topology`` (AMD), ``smlu-mode``
  (Cambricon), ``sgpu-mode`` (MetaX; all four mode ``sliced``). ``container-share`` and ``smlu-mode``
  are *established*: asked on only where off, put straight back through the mode driver, a failed
  restore reported on the row (``unavailable``: the accelerator is left on and the row is the only
  thing that can send someone to turn it off). Under ``--dry-run`` -- and on a run with no host root
  to enter, which carries on as one -- the ask is withheld: the row reports the mode as read and says
  it was not established. That is an emitted step, an answer and not a failure (preflight-operations
  "Emitted steps"), so the row is ``ok`` at ``declared``; the synthetic slices behind it are simulated
  as if the mode were on (:class:`HeldMode`), and their rows say so (:func:`as_if_on`).
* Which of the four management/slicing rows an accelerator gets is a fact about the accelerator, not
  its manufacturer's tier (§2.7): one declaring logical slicing gets all four, a partition-backed one
  the two management rows (``declared``: reaching its visibility response means creating a
  partition; ``sidecar-visibility`` still answers for the ``visibility`` mode), one declaring neither
  family none of them (:func:`accelerator_rows`).
* ``sidecar-visibility`` (``simulated`` on every tier): owner then ``sshd`` sidecar allocated in the
  kubelet's order; ``ok`` when the sidecar's injection names nothing the owner was not granted.
* ``sliced-runtime-loaded`` / ``sliced-quota-in-force`` / ``co-tenancy``: ``simulated`` -- the
  injection was produced and asserted on -- on every tier; then, on the container-probe tiers,
  ``measured`` by a probe container granted that injection (:mod:`.probe`; :func:`measure`), or
  emitted with the reason it was not run. On the tiers that start no container the detail says the
  tier stops at the injection.
* Ascend A5 (family ``950``): ``ascend-docker-runtime`` and ``hccl-ranktable`` (``declared``), once
  per mode the accelerator serves (:mod:`gpustack_operator.manufacturers.ascend.a5`).

Host writes: the responder's rendered files go to ``/var/lib/gpustack/operator/preflight/render-*``
through the host root (never ``.../operator/pods``) and are removed at the end of the pass; under
``--dry-run``, or with no host root, to a process-private temporary directory instead, the staged
library tree being read (never written) through the host root. Whether a run writes at all is decided
once, by the run (:func:`gpustack_operator.preflight.run.withheld`), and reaches this pass as
:attr:`Env.dry_run` / :attr:`Env.dry_why`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.pods import ContainerSpec, KubeletPod, PodSpec
from gpustack_operator.allocator.resources import ResourceNames, partitioning, tokens
from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.ascend import a5
from gpustack_operator.manufacturers.base import (
    DetectContext,
    ModeChange,
    ModeDriver,
    ModeError,
    ModeState,
    ProbeTraits,
    Resolved,
)
from gpustack_operator.manufacturers.modes import restore
from gpustack_operator.manufacturers.respond import (
    LIB_DIR,
    Family,
    Injection,
    RefusedError,
    RespondContext,
    Responder,
)
from gpustack_operator.preflight import probe
from gpustack_operator.preflight.models import Check, Depth, State
from gpustack_operator.preflight.probe import PRELOAD_FILE, Prober
from gpustack_operator.settings import Settings

log = logging.getLogger(__name__)

PREFLIGHT_DIR = "/var/lib/gpustack/operator/preflight"
SLICED = "sliced"
PARTITIONED = "partitioned"

# §2.7 "The full table" and the tier table, as each manufacturer's identity declares them
# (``Identity.preflight``, manufacturers/<vendor>/identity.py): the driver-read row and its mode, the
# mode driver it reads, which rows establish a mode, who starts a container (its probe is not built
# yet) and who stops at the injection, why a manufacturer has no driver-read row, and the responder
# paths with no seam a synthetic grant could substitute.
_TRAITS = {name: m.identity.preflight for name, m in REGISTRY.items()}
DRIVER_ROW: dict[str, tuple[str, str]] = {
    name: (t.driver_row, t.driver_row_mode or SLICED) for name, t in _TRAITS.items() if t.driver_row
}
MODE_NAME = {name: t.mode_driver for name, t in _TRAITS.items() if t.mode_driver}
ESTABLISHED = frozenset(name for name, t in _TRAITS.items() if t.established)
CONTAINER_TIER = frozenset(name for name, t in _TRAITS.items() if t.container_probe)
NO_DRIVER_READ_NOTE = {name: t.no_driver_read_note for name, t in _TRAITS.items() if t.no_driver_read_note}
NO_SEAM: dict[tuple[str, Family], str] = {
    (name, family): why for name, t in _TRAITS.items() for family, why in t.no_seam.items()
}
NO_SEAM_WHY = (
    "{what}, and that responder offers no driver seam a synthetic allocation could substitute, so "
    "simulating it would change the hardware; this pass did not establish it"
)
PROBE_NOT_BUILT = (
    "the injection was produced by the allocator's own responder and asserted on (simulated); a probe "
    "container granted it answers the row from inside a container (measured) where one can be started"
)
INJECTION_ONLY = (
    "this manufacturer's tier stops at the injection (no container is started for it), so simulated is "
    "the deepest answer"
)
PARTITION_DECLARED = (
    "partition-backed (MIG on): reaching its {what} means driving the capability that also creates a "
    "partition, so it is answered from what the driver declares ({profiles}), not simulated"
)
DRY_RUN_WHY = "--dry-run withholds the ask"
WITHHELD = (
    "{mode} reads off and was not established: {why} (turning it on is a write, however briefly it is "
    "held), so whether the driver accepts it was not asked -- a step withheld is an answer, not a failure; "
    "the slices simulated below assume it on. {remedy} to find out{read}"
)
REMEDY_DRY_RUN = "Run it without --dry-run"
REMEDY_NO_HOST = "Mount the node's / at the host root (-v /:/host) and run it again"
AS_IF_ON = "simulated as if {mode} were on: its driver-read row was not established ({why})"


def declares_slicing(accelerator: Accelerator) -> bool:
    sliced = accelerator.status.logical_sliced
    return not partitioning(accelerator) and sliced is not None and sliced.count > 0


def profile_names(acc: Accelerator) -> str | None:
    sliced = acc.status.physical_sliced
    return ", ".join(p.name for p in sliced.profiles) if sliced is not None and sliced.profiles else None


def served_modes(accelerator: Accelerator) -> list[str]:
    """The allocation modes an accelerator serves (supplement §5.1): a partition-backed one serves
    only ``partitioned`` (and visibility)."""
    if partitioning(accelerator):
        return [PARTITIONED, "visibility"]
    return ["exclusive", "shared", *([SLICED] if declares_slicing(accelerator) else []), "visibility"]


@dataclass(frozen=True)
class Env:
    """What the capability pass may reach: the detection context (driver reads), the host root
    (render files, the staged library tree, the A5 files) and the run's switches."""

    resolved: Resolved
    settings: Settings
    detect: DetectContext | None
    host: HostRoot | None
    host_problem: str | None
    dry_run: bool = False
    # why this run writes nothing, when it does not (--dry-run, or no host root to enter, which carries
    # on as a dry run): what a withheld driver ask names
    dry_why: str = DRY_RUN_WHY
    prober: Prober | None = None
    # where the responder finds the preload-library tree when this run did not stage it onto the host
    # (--dry-run: the tree staging would copy, read from its source; nothing is written)
    lib_source: str | None = None


# -- question 2: the driver-read row ---------------------------------------------------------------


def _row(  # noqa: PLR0917 - one row, six facts
    acc: Accelerator, capability: str, mode: str, state: State, depth: Depth, words: str | None
) -> Check:
    ok = state is not State.UNAVAILABLE
    return Check(
        accelerator=acc.id,
        capability=capability,
        mode=mode,
        state=state,
        depth=depth,
        detail=words if ok else None,
        reason=None if ok else words,
    )


def _one(group: DevicesGroup, acc: Accelerator) -> list[DevicesGroup]:
    return [group.model_copy(update={"accelerators": [acc]})]


def _read_mode(driver: ModeDriver, env: Env, group: DevicesGroup, acc: Accelerator) -> ModeState | str:
    if env.detect is None:
        return "the driver could not be asked: this pass has no detection context for it"
    try:
        (state,) = driver.read(env.detect, _one(group, acc))
    except ModeError as exc:
        return str(exc)
    return state


def mig_row(manufacturer: str, env: Env, group: DevicesGroup, acc: Accelerator) -> Check:
    capability, mode = DRIVER_ROW[manufacturer]
    profiles = acc.status.physical_sliced
    named = profile_names(acc)
    if manufacturer == "thead":  # HGML answered the detect pass; its partition profiles are the declaration
        if profiles is None:
            return _row(acc, capability, mode, State.NOT_DECLARED, Depth.DECLARED, "no physical-slice profile declared")
        return _row(acc, capability, mode, State.OK, Depth.DECLARED, f"declares physical-slice profiles: {named}")
    state = _read_mode(REGISTRY[manufacturer].modes[MODE_NAME[manufacturer]], env, group, acc)
    if isinstance(state, str):
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, state)
    if not state.declared or state.enabled is False:
        why = state.detail or ("MIG is off" if state.declared else "this accelerator has no MIG")
        return _row(acc, capability, mode, State.NOT_DECLARED, Depth.DECLARED, f"no physical-slice profile: {why}")
    if state.enabled is None:
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, state.detail or "MIG mode unreadable")
    words = "MIG is on" + (f"; profiles: {named}" if named else "") + (f" ({state.detail})" if state.detail else "")
    return _row(acc, capability, mode, State.OK, Depth.DECLARED, words)


def established_row(manufacturer: str, env: Env, group: DevicesGroup, acc: Accelerator) -> Check:
    """``container-share`` / ``smlu-mode``: on → ok; off → asked on and put straight back; not declared
    → not-declared; unreadable or refused → unavailable.

    Off on a run that writes nothing (``--dry-run``, or no host root to enter) → the ask is withheld:
    ``ok`` at ``declared``, the mode as read and "not established" (preflight-operations "What the
    driver-read row means": "Under --dry-run the ask is withheld … The row then reports the mode as read
    and says it was not established"; "Emitted steps": an answer, not a failure, which does not affect
    the exit code)."""
    capability, mode = DRIVER_ROW[manufacturer]
    driver = REGISTRY[manufacturer].modes[MODE_NAME[manufacturer]]
    state = _read_mode(driver, env, group, acc)
    if isinstance(state, str):
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, state)
    if not state.declared:
        words = state.detail or f"this accelerator declares no {driver.mode} mode"
        return _row(acc, capability, mode, State.NOT_DECLARED, Depth.DECLARED, words)
    if state.enabled is True:
        return _row(acc, capability, mode, State.OK, Depth.DECLARED, f"{driver.mode} is on" + _also(state.detail))
    if state.enabled is None:
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, state.detail or "unreadable")
    if env.dry_run:
        read = f"; as read: {state.detail}" if state.detail else ""
        remedy = REMEDY_DRY_RUN if env.dry_why == DRY_RUN_WHY else REMEDY_NO_HOST
        words = WITHHELD.format(mode=driver.mode, why=env.dry_why, remedy=remedy, read=read)
        return _row(acc, capability, mode, State.OK, Depth.DECLARED, words)
    if env.detect is None:  # not reached: the read above needs it
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, "this pass has no detection context")
    try:
        change = driver.set(env.detect, state, True)
    except ModeError as exc:
        return _row(
            acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, f"the driver refused turning it on: {exc}"
        )
    if change.after is not True:
        return _row(acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, f"{driver.mode} did not turn on")
    try:
        back = restore(env.detect, driver, _one(group, acc), change)
        if back.after is not False:
            raise ModeError(acc.id, driver.mode, f"it still reads {back.after}")
    except ModeError as exc:
        undo = f"; run `{change.undo_command}` on the host" if change.undo_command else ""
        return _row(
            acc,
            capability,
            mode,
            State.UNAVAILABLE,
            Depth.DECLARED,
            f"RESTORE FAILED: {driver.mode} was off, the driver accepted turning it on, and putting it back off "
            f"failed, so this accelerator is LEFT ON: {exc}{undo}",
        )
    return _row(
        acc,
        capability,
        mode,
        State.OK,
        Depth.DECLARED,
        f"{driver.mode} was off; the driver accepted turning it on ({change.command}) and it was put straight back off",
    )


def _also(detail: str | None) -> str:
    return f" ({detail})" if detail else ""


def sgpu_row(env: Env, group: DevicesGroup, acc: Accelerator) -> Check:
    capability, mode = DRIVER_ROW["metax"]
    state = _read_mode(REGISTRY["metax"].modes[MODE_NAME["metax"]], env, group, acc)
    if isinstance(state, str):
        return _row(
            acc, capability, mode, State.UNAVAILABLE, Depth.DECLARED, f"the registry could not be read: {state}"
        )
    exists = "a subdevice already exists" if state.enabled else "no subdevice exists yet"
    return _row(acc, capability, mode, State.OK, Depth.DECLARED, f"the registry reads: {exists}{_also(state.detail)}")


def cumask_rows(env: Env, groups: list[DevicesGroup]) -> list[Check]:
    from gpustack_operator.manufacturers.amd import cumask  # noqa: PLC0415 - AMD's code only where asked

    capability, mode = DRIVER_ROW["amd"]
    accs = [a for g in groups for a in g.accelerators]
    if env.detect is None:
        why = "HSA topology could not be read: this pass has no detection context for it"
        return [_row(a, capability, mode, State.UNAVAILABLE, Depth.DECLARED, why) for a in accs]
    try:
        topologies = cumask.read_topologies(env.detect)
    except Exception as exc:  # the HSA/KFD read failing is the row's unavailable answer
        why = f"HSA topology could not be read: {type(exc).__name__}: {exc}"
        return [_row(a, capability, mode, State.UNAVAILABLE, Depth.DECLARED, why) for a in accs]
    rows = []
    for acc in accs:
        result = cumask.check(topologies, acc.id)
        state = State.OK if result.ok else State.UNAVAILABLE
        rows.append(_row(acc, capability, mode, state, Depth.DECLARED, result.detail))
    return rows


def driver_rows(manufacturer: str, env: Env, groups: list[DevicesGroup]) -> list[Check]:
    if manufacturer not in DRIVER_ROW:
        return []
    if manufacturer == "amd":
        return cumask_rows(env, groups)
    rows = []
    for group in groups:
        for acc in group.accelerators:
            if manufacturer in ("nvidia", "thead"):
                rows.append(mig_row(manufacturer, env, group, acc))
            elif manufacturer in ESTABLISHED:
                rows.append(established_row(manufacturer, env, group, acc))
            else:
                rows.append(sgpu_row(env, group, acc))
    return rows


# -- question 3 and the sliced rows: the allocator's own responder, a synthetic Pod ----------------


class SyntheticPods:
    """The in-memory :class:`~gpustack_operator.allocator.pods.PodSource`: the synthetic Pods only;
    the kubelet is never asked (the allocator then matches pending Pods itself)."""

    def __init__(self) -> None:
        self.pods: list[PodSpec] = []

    def kubelet_pods(self) -> list[KubeletPod] | None:
        return None

    def node_pods(self) -> list[PodSpec]:
        return list(self.pods)


class _LibOverlay(HostRoot):
    """A private scratch tree for the responder's writes that reads the staged library tree (only
    that, and only to see it is there) through the host root -- ``--dry-run`` writes nothing there."""

    def __init__(self, scratch: str, base: HostRoot | None, lib_dir: str, source: str | None = None) -> None:
        super().__init__(scratch)
        self._base = base
        self._lib = lib_dir.rstrip("/") + "/"
        self._source: HostRoot | None = None
        if source is not None:
            with contextlib.suppress(Exception):
                self._source = HostRoot(source)

    def exists(self, host_path: str) -> bool:
        if host_path.startswith(self._lib):
            # what staging would put there (its source), else what the host already carries
            if self._source is not None and self._source.exists("/" + host_path[len(self._lib) :]):
                return True
            return self._base is not None and self._base.exists(host_path)
        return super().exists(host_path)


@dataclass
class Render:
    """Where one pass renders: the context and how to take it all away again."""

    ctx: RespondContext
    cleanup: Callable[[], None]


@contextlib.contextmanager
def render_context(env: Env, seams: dict[str, object] | None = None) -> Iterator[RespondContext]:
    """The responder context of the pass; everything it rendered is removed on exit. ``modes`` are the
    driver seams (:class:`HeldMode`, :class:`RecordedWrites`) the synthetic allocation calls instead of
    the driver."""
    lib_dir = env.settings.lib_dir or LIB_DIR
    view = env.detect.view if env.detect is not None else HostRoot("/")
    name = f"render-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    held: dict[str, object] = dict(seams or {})
    if env.host is not None and not env.dry_run:
        created = _first_missing(env.host, PREFLIGHT_DIR)
        pods_dir = f"{PREFLIGHT_DIR}/{name}"
        ctx = RespondContext(
            view=view,
            host=env.host,
            settings=env.settings,
            lib_dir=lib_dir,
            pods_dir=pods_dir,
            detect=env.detect,
            seams=held,
        )
        try:
            yield ctx
        finally:
            try:
                env.host.remove_tree(created or pods_dir)
            except (HostPathError, OSError) as exc:
                log.error("preflight: the rendered files under %s could not be removed: %s", pods_dir, exc)
        return
    scratch = tempfile.mkdtemp(prefix="gpustack-preflight-")
    try:
        host = _LibOverlay(scratch, env.host, lib_dir, env.lib_source)
        yield RespondContext(
            view=view,
            host=host,
            settings=env.settings,
            lib_dir=lib_dir,
            pods_dir=f"{PREFLIGHT_DIR}/{name}",
            detect=env.detect,
            seams=held,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _first_missing(host: HostRoot, path: str) -> str | None:
    """The outermost directory of ``path`` that does not exist yet (removed again at the end), or None."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        candidate = "/" + "/".join(parts[:i])
        if not host.exists(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class Driven:
    owner: Injection
    sidecar: Injection | None = None


class Simulation:
    """One fresh Allocator per accelerator, over the pass's render context."""

    def __init__(self, env: Env, responder: Responder, ctx: RespondContext) -> None:
        self.env = env
        self.responder = responder
        self.ctx = ctx
        self.recorder = next((v for v in ctx.seams.values() if isinstance(v, RecordedWrites)), None)
        self.written: list[str] = []  # per slice of two_slices: the driver writes its seam recorded
        self.names = ResourceNames(env.resolved.resource_name, env.resolved.name, env.resolved.partition_kind or "mig")

    def allocator(self, group: DevicesGroup, acc: Accelerator, pods: SyntheticPods) -> Allocator:
        """A fresh Allocator over a render directory of its own: one scenario's rendered files (a Hygon
        vdev record, an Ascend npu_info) are never read as another scenario's neighbours."""
        ctx = dataclasses.replace(self.ctx, pods_dir=f"{self.ctx.pods_dir}/{uuid.uuid4().hex[:8]}")
        return Allocator(
            self.env.resolved,
            [group.model_copy(update={"accelerators": [acc]})],
            responder=self.responder,
            ctx=ctx,
            pods=pods,
            lock=None,
        )

    def pod(self, acc: Accelerator, containers: tuple[ContainerSpec, ...]) -> PodSpec:
        # the runtime class a workload Pod of this manufacturer carries (the chart's RuntimeClass, named
        # for the vendor container runtime): what the responder checks a sliced Pod for
        return PodSpec(
            uid=f"preflight-{uuid.uuid4()}",
            namespace="gpustack-preflight",
            name=f"preflight-{acc.index}",
            created=float(int(time.time())),
            runtime_class=self.env.resolved.runtime_name,
            containers=containers,
        )

    def owner_request(self, acc: Accelerator, sliced: bool) -> tuple[str, dict[str, str]]:
        if sliced:  # supplement §2.7: a probe slice requests half the accelerator (its memory and its cores,
            # so two of them fit one accelerator on every vendor, Hygon's non-overlapping CU windows included)
            return self.names.sliced, {
                self.names.sliced: "1",
                self.names.sliced_memory_percentage: "50",
                self.names.sliced_cores_percentage: "50",
            }
        return self.names.exclusive, {self.names.exclusive: "1"}

    def owner_and_sidecar(self, group: DevicesGroup, acc: Accelerator, sliced: bool) -> Driven:
        """Owner then ``sshd``, in the kubelet's order, through one Allocator."""
        pods = SyntheticPods()
        alloc = self.allocator(group, acc, pods)
        resource, request = self.owner_request(acc, sliced)
        family = Family.SLICED if sliced else Family.EXCLUSIVE
        pods.pods.append(
            self.pod(
                acc,
                (
                    ContainerSpec(name="main", resources=request),
                    ContainerSpec(name="sshd", resources={self.names.visibility: "1"}),
                ),
            )
        )
        (owner,) = alloc.allocate(resource, [[tokens(group.id, acc, family)[0]]])
        (sidecar,) = alloc.allocate(self.names.visibility, [[tokens(group.id, acc, Family.VISIBILITY)[0]]])
        return Driven(owner, sidecar)

    def two_slices(self, group: DevicesGroup, acc: Accelerator) -> tuple[Injection, Injection]:
        """Two Pods, one half-accelerator slice each, on the same accelerator through one Allocator."""
        pods = SyntheticPods()
        alloc = self.allocator(group, acc, pods)
        resource, request = self.owner_request(acc, True)
        ids = tokens(group.id, acc, Family.SLICED)
        self.written = []
        out = []
        for token in (ids[0], ids[1 % len(ids)]):
            pods.pods.append(self.pod(acc, (ContainerSpec(name="main", resources=request),)))
            before = len(self.recorder.writes) if self.recorder is not None else 0
            (injection,) = alloc.allocate(resource, [[token]])
            made = self.recorder.writes[before:] if self.recorder is not None else []
            self.written.append("\n".join(f"{path}: {text}" for path, text in made))
            out.append(injection)
        return out[0], out[1]


def visibility_verdict(owner: Injection, sidecar: Injection, names: frozenset[str] = frozenset()) -> str | None:
    """Why the sidecar names something the owner was not granted, or ``None`` when it does not.

    ``names`` are the owner's accelerator's own names (id, index, physical indexes): a visibility
    variable the owner's injection does not carry (it reached its accelerator through device nodes) is
    fine when every accelerator it names is one of them."""
    owner_devices = {d.host_path for d in owner.devices}
    extra = [d.host_path for d in sidecar.devices if d.host_path not in owner_devices]
    if extra:
        return f"the sidecar is handed device nodes the owner was not: {', '.join(extra)}"
    extra = [d for d in sidecar.cdi_devices if d not in owner.cdi_devices]
    if extra:
        return f"the sidecar is handed CDI devices the owner was not: {', '.join(extra)}"
    for key, value in sidecar.envs.items():
        if key in owner.envs and owner.envs[key] != value:
            return f"the sidecar's {key}={value} names other accelerators than the owner's {key}={owner.envs[key]}"
        if key not in owner.envs and ("VISIBLE" in key or key.endswith("DEVICES")):
            named = {v.strip() for v in value.split(",") if v.strip()}
            if not names or not named or not named <= names:
                return f"the sidecar's {key}={value} names accelerators the owner's injection does not"
    if not (sidecar.envs or sidecar.devices or sidecar.cdi_devices or sidecar.annotations):
        return "the sidecar's injection names no accelerator at all, so it would see nothing the owner holds"
    return None


def _names(injection: Injection) -> str:
    parts = [f"{k}={v}" for k, v in sorted(injection.envs.items())]
    parts += [d.host_path for d in injection.devices]
    parts += list(injection.cdi_devices)
    return ", ".join(parts) or "nothing"


def _rendered(ctx: RespondContext, injection: Injection) -> str:
    """The text of every file the injection mounts from this pass's render tree."""
    texts = []
    for mount in injection.mounts:
        if mount.host_path.startswith(ctx.pods_dir):
            with contextlib.suppress(HostPathError, OSError):
                if not ctx.host.is_dir(mount.host_path):
                    texts.append(ctx.host.read_text(mount.host_path))
                else:
                    for entry in ctx.host.listdir(mount.host_path):
                        with contextlib.suppress(HostPathError, OSError):
                            texts.append(ctx.host.read_text(f"{mount.host_path}/{entry}"))
    return "\n".join(texts)


def carries_quota(ctx: RespondContext, injection: Injection, mib: int, written: str = "") -> bool:
    """Does the slice carry its memory cap -- in MiB or bytes, in an env value, an annotation, a rendered
    file, or the driver write its seam recorded for it (``written``: an sMLU profile, an sGPU create)?"""
    figures = (str(mib), str(mib * 1024 * 1024))
    haystack = [*injection.envs.values(), *injection.annotations.values(), _rendered(ctx, injection), written]
    return any(figure in text for figure in figures for text in haystack)


def half_mib(group: DevicesGroup) -> int:
    return group.memory // 2


def management_rows(manufacturer: str, env: Env, sim: Simulation | None, groups: list[DevicesGroup]) -> list[Check]:
    rows: list[Check] = []
    for group in groups:
        for acc in group.accelerators:
            rows.extend(accelerator_rows(manufacturer, env, sim, group, acc))
    return rows


def _refused(exc: Exception) -> str:
    return exc.message if isinstance(exc, RefusedError) else f"{type(exc).__name__}: {exc}"


def accelerator_rows(
    manufacturer: str, env: Env, sim: Simulation | None, group: DevicesGroup, acc: Accelerator
) -> list[Check]:
    """The management and slicing rows of one accelerator, by the families it declares (§2.7: "How many
    of those rows come back is a fact about the accelerator, not the tier"): logical slicing → all
    four; partition-backed → the two management rows; neither → none of the four ("An absent row is a
    family this accelerator does not offer")."""
    if partitioning(acc):
        return partition_rows(acc)
    if not declares_slicing(acc):
        return []
    deeper = PROBE_NOT_BUILT if manufacturer in CONTAINER_TIER else INJECTION_ONLY
    return [visibility_row(manufacturer, sim, group, acc), *sliced_rows(manufacturer, sim, group, acc, deeper)]


def partition_rows(acc: Accelerator) -> list[Check]:
    """A partition-backed accelerator's two management rows, at ``declared`` (§1.5: "a partition-backed
    accelerator's visibility answered at declared"); ``sidecar-visibility`` answers for the visibility
    mode like everywhere else, ``co-tenancy`` for the partitioned one."""
    named = profile_names(acc) or "its partition profiles"
    return [
        _row(
            acc,
            capability,
            mode,
            State.OK,
            Depth.DECLARED,
            PARTITION_DECLARED.format(what=what, profiles=named),
        )
        for capability, mode, what in (
            ("sidecar-visibility", "visibility", "visibility response"),
            ("co-tenancy", PARTITIONED, "second partition"),
        )
    ]


def visibility_row(manufacturer: str, sim: Simulation | None, group: DevicesGroup, acc: Accelerator) -> Check:
    """``sidecar-visibility`` of a sliceable accelerator: a sliced owner (an exclusive one where the
    sliced path has no seam), then its ``sshd`` sidecar, through one allocator (``simulated``)."""
    owner_family = Family.EXCLUSIVE if (manufacturer, Family.SLICED) in NO_SEAM else Family.SLICED
    seam = NO_SEAM.get((manufacturer, Family.VISIBILITY)) or NO_SEAM.get((manufacturer, owner_family))
    owner_mode = "sliced" if owner_family is Family.SLICED else "exclusive"

    def row(state: State, depth: Depth, words: str) -> Check:
        return _row(acc, "sidecar-visibility", "visibility", state, depth, words)

    if sim is None:
        return row(State.UNAVAILABLE, Depth.SIMULATED, "this manufacturer has no responder to drive")
    if seam is not None:
        return row(State.UNAVAILABLE, Depth.DECLARED, NO_SEAM_WHY.format(what=seam))
    try:
        driven = sim.owner_and_sidecar(group, acc, owner_family is Family.SLICED)
    except Exception as exc:  # a refusal (or a responder bug) is this row's answer
        why = f"the allocator refused the synthetic {owner_mode} owner and sshd sidecar: {_refused(exc)}"
        return row(State.UNAVAILABLE, Depth.SIMULATED, why)
    assert driven.sidecar is not None
    own = frozenset({acc.id, str(acc.index), *(str(i) for i in acc.physical_indexes or [])})
    problem = visibility_verdict(driven.owner, driven.sidecar, own)
    if problem is not None:
        return row(State.UNAVAILABLE, Depth.SIMULATED, problem)
    return row(
        State.OK,
        Depth.SIMULATED,
        f"owner ({owner_mode}) then sshd driven through the allocator in the kubelet's order; the sidecar names "
        f"{_names(driven.sidecar)}, nothing the owner was not granted",
    )


def slicing_runtime(ctx: RespondContext, injection: Injection, mib: int, written: str) -> str | None:
    """What in a slice's injection names the runtime that enforces the slice, in words, or ``None``
    (``sliced-runtime-loaded`` at ``simulated``: §2.7 "every shared object the injection mounts …, or,
    where none is mounted, the driver recorded a slicing instance"). Read off the injection alone, so no
    manufacturer is named here: the preload file (a library of ours, in the address space); else a
    per-slice record the responder rendered for the vendor runtime (Hygon's vdev record); else the
    slicing instance the driver was asked to create (recorded by the seam: an sMLU instance, an sGPU
    subdevice); else the slice's cap handed to the vendor's enforcer in its environment (a kernel
    module behind the vendor container runtime)."""
    if any(m.container_path == PRELOAD_FILE for m in injection.mounts):
        return f"mounts the preload file {PRELOAD_FILE}"
    records = [m.container_path for m in injection.mounts if m.host_path.startswith(ctx.pods_dir + "/")]
    if records:
        return f"mounts the per-slice record the responder rendered for it ({', '.join(records)})"
    if written.strip():
        return f"has the driver create its slicing instance ({written.strip().splitlines()[0]})"
    figures = (str(mib), str(mib * 1024 * 1024))
    carried = sorted(k for k, v in injection.envs.items() if any(f in v for f in figures))
    if carried:
        return f"hands its cap to the vendor's enforcer in {', '.join(carried)} (no library of ours is mounted)"
    return None


def sliced_rows(
    manufacturer: str, sim: Simulation | None, group: DevicesGroup, acc: Accelerator, deeper: str
) -> list[Check]:
    """The two sliced rows and ``co-tenancy`` of a sliceable accelerator, on every tier (§2.7: "The two
    sliced rows are produced only for an accelerator declaring logical slicing" -- a fact about the
    accelerator, not the tier): ``simulated`` with ``deeper`` saying how far its tier goes, then measured
    where a container is started (:func:`measure`)."""
    seam = NO_SEAM.get((manufacturer, Family.SLICED))
    capabilities = ("sliced-runtime-loaded", "sliced-quota-in-force", "co-tenancy")
    if sim is None or seam is not None:
        why = NO_SEAM_WHY.format(what=seam) if seam else "this manufacturer has no responder to drive"
        return [_row(acc, c, SLICED, State.UNAVAILABLE, Depth.DECLARED, why) for c in capabilities]
    try:
        first, second = sim.two_slices(group, acc)
    except Exception as exc:
        why = f"the allocator refused a synthetic half-accelerator slice: {_refused(exc)}"
        return [_row(acc, c, SLICED, State.UNAVAILABLE, Depth.SIMULATED, why) for c in capabilities]
    mib = half_mib(group)
    written = [*sim.written, "", ""][:2]
    runtime = slicing_runtime(sim.ctx, first, mib, written[0])
    rows: list[Check] = []
    if runtime is not None:
        rows.append(_ok(acc, "sliced-runtime-loaded", f"the slice's injection {runtime}; {deeper}"))
    else:
        why = "the slice's injection names no slicing runtime: no preload file, no per-slice record, no instance"
        rows.append(_row(acc, "sliced-runtime-loaded", SLICED, State.UNAVAILABLE, Depth.SIMULATED, why))
    if carries_quota(sim.ctx, first, mib, written[0]):
        rows.append(_ok(acc, "sliced-quota-in-force", f"the slice's injection carries its {mib} MiB cap; {deeper}"))
    else:
        why = f"the slice's injection names no {mib} MiB cap (half of {group.memory} MiB)"
        rows.append(_row(acc, "sliced-quota-in-force", SLICED, State.UNAVAILABLE, Depth.SIMULATED, why))
    # each slice carries its own cap; two injections may be identical (a vendor whose slice names nothing
    # per Pod) and still be two independent slices -- the ledger granted both on one accelerator
    both = carries_quota(sim.ctx, first, mib, written[0]) and carries_quota(sim.ctx, second, mib, written[1])
    if both:
        rows.append(
            _ok(
                acc,
                "co-tenancy",
                f"two half-accelerator slices placed on {acc.id}, each injection carrying its "
                f"own {mib} MiB geometry; {deeper}",
            )
        )
    else:
        why = f"a slice's injection names no {mib} MiB cap"
        rows.append(_row(acc, "co-tenancy", SLICED, State.UNAVAILABLE, Depth.SIMULATED, why))
    traits = REGISTRY[manufacturer].identity.preflight.probe
    if manufacturer in CONTAINER_TIER and traits is not None and sim.env.prober is not None:
        return measure(manufacturer, sim, traits, group, acc, (first, second), rows)
    return rows


# -- the probes: the sliced rows and co-tenancy from inside a real container ----------------------------


def _swap(rows: list[Check], new: Check) -> list[Check]:
    return [new if r.capability == new.capability else r for r in rows]


def _with(row: Check, **update: object) -> Check:
    return row.model_copy(update=update)


def measure(  # noqa: PLR0917 - the rows, and what they were simulated from
    manufacturer: str,
    sim: Simulation,
    traits: ProbeTraits,
    group: DevicesGroup,
    acc: Accelerator,
    slices: tuple[Injection, Injection],
    rows: list[Check],
) -> list[Check]:
    """Take the simulated rows one step deeper where a container can be started (§2.7): one probe
    granted ``first`` (the two sliced rows), then both slices started together (co-tenancy). A row
    whose simulation already failed stays as it is; a step that cannot be taken is emitted (printed
    complete on the row, which keeps its simulated depth); a probe that ran gives ``measured``."""
    prober = sim.env.prober
    assert prober is not None
    first, second = slices
    mib = half_mib(group)
    choice = probe.probe_image(traits, group, prober.image)
    if choice.image is None:
        why = f"no probe container was started, so this goes no deeper than simulated: {choice.why_none}"
        return [_with(r, detail=f"{r.detail}; {why}") if r.state is State.OK else r for r in rows]
    one = probe.step(
        prober.door,
        first,
        name=probe.probe_name(manufacturer, acc.id),
        image=choice.image,
        traits=traits,
        blocked=prober.blocked,
    )
    pair = [
        probe.step(
            prober.door,
            inj,
            name=probe.probe_name(manufacturer, acc.id, tag),
            image=choice.image,
            traits=traits,
            blocked=prober.blocked,
        )
        for tag, inj in (("a", first), ("b", second))
    ]
    simulated_ok = {r.capability for r in rows if r.state is State.OK}
    if one.emitted is not None:
        out = []
        for r in rows:
            command = "\n".join(p.shown for p in pair) if r.capability == "co-tenancy" else one.shown
            if r.state is State.OK:
                r = _with(r, detail=f"{r.detail}; the probe step was emitted, not run: {one.emitted}")
            out.append(_with(r, command=command))
        return out
    loaded, quota = _probe_one(manufacturer, sim, traits, acc, first, mib, one, prober)
    if "sliced-runtime-loaded" in simulated_ok:
        rows = _swap(rows, loaded)
    if "sliced-quota-in-force" in simulated_ok:
        rows = _swap(rows, quota)
    if "co-tenancy" in simulated_ok:
        rows = _swap(rows, _probe_pair(acc, (mib, mib), pair, prober))
    return rows


def _probe_one(  # noqa: PLR0917
    manufacturer: str,
    sim: Simulation,
    traits: ProbeTraits,
    acc: Accelerator,
    injection: Injection,
    mib: int,
    step: probe.Step,
    prober: probe.Prober,
) -> tuple[Check, Check]:
    (ran,) = prober.run([step], f"a half-accelerator slice on {acc.id}")
    command = step.shown
    failure = ran.failure()
    if failure is not None:
        why = (
            f"the probe container did not run to the end, so the slice was not measured ({failure}); the "
            "injection itself was simulated -- check the image can be pulled (--probe-image for air-gapped "
            "nodes) and the container runtime's own log"
        )
        return (
            _with(_row(acc, "sliced-runtime-loaded", SLICED, State.UNAVAILABLE, Depth.SIMULATED, why), command=command),
            _with(_row(acc, "sliced-quota-in-force", SLICED, State.UNAVAILABLE, Depth.SIMULATED, why), command=command),
        )
    evidence = probe.parse_evidence(ran.stdout)
    libraries = probe.preloaded(injection, sim.ctx.host.read_text) or []

    def measured(state: State, words: str) -> Check:
        return _row(acc, "sliced-runtime-loaded", SLICED, state, Depth.MEASURED, words)

    if traits.record is not None:  # Hygon: the driver's per-slice record, not the address space
        if evidence.figures:
            loaded = measured(
                State.OK,
                f"the driver recorded a slicing instance for the probe under {traits.record}",
            )
        else:
            loaded = measured(
                State.UNAVAILABLE,
                f"no per-slice record appeared under {traits.record} for the probe, so the slice was not "
                "established (check the image has mkdir, and that /opt/dtk carries BandwidthTest)",
            )
        shown = evidence.reader_text
    else:
        mapped = set(evidence.maps or [])
        missing = [lib for lib in libraries if lib not in mapped]
        if evidence.maps is None:
            loaded = measured(
                State.UNAVAILABLE,
                "the probe printed no address map (its image lacks sh or cat?), so whether the slicing runtime "
                "loaded is not known",
            )
        elif not libraries or missing:
            what = ", ".join(missing) if missing else "no library at all (the preload file was empty)"
            loaded = measured(
                State.UNAVAILABLE,
                f"the slicing runtime is not in the container's address space: {what} -- the container started "
                "without its limiter, which is a whole accelerator nobody asked for",
            )
        else:
            loaded = measured(
                State.OK,
                "every shared object the injection preloads is in the container's address space: "
                + ", ".join(libraries),
            )
        shown = probe.maps_evidence(evidence, libraries)
    loaded = _with(loaded, command=command, evidence=shown)
    quota = _quota_row(acc, evidence, mib, acc_mib=2 * mib, where=traits.cap)
    return loaded, _with(quota, command=command, evidence=evidence.reader_text or None)


def _quota_row(acc: Accelerator, evidence: probe.Evidence, mib: int, *, acc_mib: int, where: str) -> Check:
    if not evidence.figures:
        said = f" (rc={evidence.reader_rc})" if evidence.reader_rc is not None else ""
        return _row(
            acc,
            "sliced-quota-in-force",
            SLICED,
            State.UNAVAILABLE,
            Depth.MEASURED,
            f"the probe's reader printed no memory figure{said}, so the cap was not observed -- the probe image "
            "must carry the vendor's reader (see the probe table in docs/preflight.md)",
        )
    seen = evidence.figures[0]
    if seen == mib:
        return _row(
            acc,
            "sliced-quota-in-force",
            SLICED,
            State.OK,
            Depth.MEASURED,
            f"the container reported {seen} MiB, the cap the injection set ({where}), not the accelerator's own "
            f"{acc_mib} MiB",
        )
    whole = " -- the accelerator's own figure: the cap is not in force" if seen >= acc_mib else ""
    return _row(
        acc,
        "sliced-quota-in-force",
        SLICED,
        State.UNAVAILABLE,
        Depth.MEASURED,
        f"the container reported {seen} MiB where the injection set a cap of {mib} MiB ({where}){whole}",
    )


def _probe_pair(acc: Accelerator, caps: tuple[int, int], pair: list[probe.Step], prober: probe.Prober) -> Check:
    ran = prober.run(pair, f"two slices together on {acc.id}")
    command = "\n".join(p.shown for p in pair)
    problems = []
    figures = []
    for tag, r, cap in zip(("a", "b"), ran, caps, strict=True):
        failure = r.failure()
        if failure is not None:
            problems.append(f"slice {tag} did not run to the end ({failure})")
            continue
        ev = probe.parse_evidence(r.stdout)
        seen = ev.figures[0] if ev.figures else None
        figures.append(f"{tag}: {seen} MiB")
        if seen != cap:
            problems.append(f"slice {tag} reported {seen if seen is not None else 'no figure'}, not its own {cap} MiB")
    if problems:
        depth = Depth.MEASURED if figures else Depth.SIMULATED
        return _with(
            _row(
                acc,
                "co-tenancy",
                SLICED,
                State.UNAVAILABLE,
                depth,
                "two slices started together on one accelerator did not each see their own quota: "
                + "; ".join(problems),
            ),
            command=command,
        )
    return _with(
        _row(
            acc,
            "co-tenancy",
            SLICED,
            State.OK,
            Depth.MEASURED,
            f"two slices started together on {acc.id}, each reporting its own cap ({', '.join(figures)})",
        ),
        command=command,
    )


def _ok(acc: Accelerator, capability: str, words: str) -> Check:
    return _row(acc, capability, SLICED, State.OK, Depth.SIMULATED, words)


# -- Ascend A5 ---------------------------------------------------------------------------------------


def a5_rows(env: Env, groups: list[DevicesGroup]) -> list[Check]:
    rows: list[Check] = []
    if not any(g.family == a5.A5_FAMILY for g in groups):
        return rows
    runtime = a5.runtime_version(env.host, env.host_problem)
    table = a5.ranktable(env.host, env.host_problem)
    for group in groups:
        if group.family != a5.A5_FAMILY:
            continue
        for acc in group.accelerators:
            for mode in served_modes(acc):
                for capability, fact in (("ascend-docker-runtime", runtime), ("hccl-ranktable", table)):
                    state = State.OK if fact.ok else State.UNAVAILABLE
                    rows.append(_row(acc, capability, mode, state, Depth.DECLARED, fact.words))
    return rows


# -- the pass ----------------------------------------------------------------------------------------


@dataclass
class HeldMode:
    """The driver seam of the synthetic allocation (supplement §1.5 [repo]): a mode the driver-read row
    already established (asked on where off, put straight back) reads as on for the allocation it
    predicts, and is never written a second time; one the row could not establish refuses, with the
    row's own reason -- so the slice rows cannot be greener than the driver-read row."""

    real: ModeDriver
    established: dict[str, Check]  # accelerator id -> its driver-read row
    mode: str = ""
    writable: bool = False
    # accelerators whose mode the driver reads off and this seam answered on, from an ok row: on a run
    # that writes nothing, the slices simulated as if the mode were on (:func:`as_if_on`)
    read_as_on: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.mode = self.real.mode

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]:
        states = []
        for state in self.real.read(ctx, groups):
            row = self.established.get(state.accelerator)
            if row is not None and row.state is State.OK and state.declared:
                if state.enabled is not True:
                    self.read_as_on.add(state.accelerator)
                state = state.model_copy(update={"enabled": True, "detail": row.detail})
            states.append(state)
        return states

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange:
        row = self.established.get(state.accelerator)
        why = row.reason if row is not None and row.reason else "its driver-read row did not establish it"
        raise ModeError(state.accelerator, self.real.mode, f"not established by this pass: {why}")


@dataclass
class RecordedWrites:
    """A driver control-write seam: what the responder would write, recorded (never made)."""

    writes: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, path: str, text: str) -> None:
        self.writes.append((path, text))


def seams_for(manufacturer: str, rows: list[Check]) -> dict[str, object]:
    """The driver seams the synthetic allocation runs through (supplement §1.5 [repo])."""
    seams: dict[str, object] = {}
    traits = REGISTRY[manufacturer].identity.preflight
    if traits.recorded_writes is not None:
        seams[traits.recorded_writes] = RecordedWrites()
    if manufacturer in ESTABLISHED:
        name = MODE_NAME[manufacturer]
        capability = DRIVER_ROW[manufacturer][0]
        by_acc = {r.accelerator: r for r in rows if r.capability == capability}
        seams[name] = HeldMode(REGISTRY[manufacturer].modes[name], by_acc)
    return seams


def capability_rows(manufacturer: str, env: Env, groups: list[DevicesGroup]) -> tuple[list[Check], str]:
    """Every row this version answers for one manufacturer, and the note saying what it does not."""
    rows = driver_rows(manufacturer, env, groups)
    responder = REGISTRY[manufacturer].responder
    seams = seams_for(manufacturer, rows)
    with render_context(env, seams) as ctx:
        sim = Simulation(env, responder, ctx) if responder is not None else None
        simulated = management_rows(manufacturer, env, sim, groups)
    held = next((v for v in seams.values() if isinstance(v, HeldMode)), None)
    if env.dry_run and held is not None:
        simulated = as_if_on(simulated, held, env.dry_why)
    rows.extend(simulated)
    if manufacturer == "ascend":
        rows.extend(a5_rows(env, groups))
    return rows, note_for(manufacturer)


def as_if_on(rows: list[Check], held: HeldMode, why: str) -> list[Check]:
    """On a run that writes nothing, the rows of an accelerator whose mode reads off were simulated as
    if it were on (the ask withheld is an emitted step, not a refusal): each says so."""
    said = AS_IF_ON.format(mode=held.mode, why=why)
    out = []
    for row in rows:
        if row.accelerator in held.read_as_on:
            field_name = "reason" if row.state is State.UNAVAILABLE else "detail"
            row = row.model_copy(update={field_name: f"{getattr(row, field_name)}; {said}"})
        out.append(row)
    return out


def note_for(manufacturer: str) -> str:
    parts = []
    if manufacturer in NO_DRIVER_READ_NOTE:
        parts.append(NO_DRIVER_READ_NOTE[manufacturer])
    if manufacturer in CONTAINER_TIER:
        parts.append(
            "questions 2 and 3: the injection is simulated through the allocator's own responder, then a probe "
            "container granted a half-accelerator slice (and two together, for co-tenancy) measures the sliced "
            "rows; sidecar-visibility is simulated by construction; a row that went no deeper says why"
        )
    else:
        parts.append(
            "questions 2 and 3 are answered up to the injection (simulated), the deepest this manufacturer's "
            "tier reaches: no container is started for it"
        )
    return "; ".join(parts)


__all__ = ["Env", "capability_rows", "visibility_verdict"]
