"""The stale-container sweep: before a run starts anything, remove every container an earlier run left
behind (supplement §2.5 "a run first sweeps containers with that label", §2.8 sweep rows and "Not every
unhappy sweep is one of these").

API (what ``preflight/run.py`` wires, after :func:`gpustack_operator.preflight.lock.acquire` and
before any probe; never under ``--dry-run``, which removes nothing)::

    others = other_runtimes(host.root, resolution)     # the node's other container runtimes
    result = sweep(host.exec, resolution, others)      # never raises
    if (reason := failure_reason(result)) is not None:
        rows = stale_rows(accelerator_ids, reason)     # one ``stale-container-sweep`` row each

What is swept, and how
----------------------
Every probe container carries the label :data:`LABEL` (``gpustack.ai/preflight=true``); the sweep lists
by that label, then removes each container the listing named, one call per container (so a failure
names the container that would not go). Every call runs the host's own CLI through the host root
with the existing chroot runner (:class:`~gpustack_operator.preflight.hostexec.HostExec`), each with a
timeout (:data:`SWEEP_TIMEOUT`). Per CLI:

* docker: ``docker ps -aq --filter label=gpustack.ai/preflight=true``, then ``docker rm -f <id>``;
* nerdctl: ``nerdctl [--address <socket>] --namespace gpustack-preflight ps -aq --filter label=…``,
  then ``nerdctl … rm -f <id>`` (``--address`` is the resolved containerd socket, §2.5: "the CLI is
  pointed at the socket that was resolved rather than at its own default");
* ctr: ``ctr [--address <socket>] --namespace gpustack-preflight containers ls -q
  'labels."gpustack.ai/preflight"==true'`` -- ``ctr containers list`` takes containerd filter
  expressions as positional arguments, and a label key holding ``.`` or ``/`` must be a quoted
  field-path component; then ``ctr … tasks rm -f <id>`` (kills and deletes a running task; its failure
  alone -- typically "no such task" for a container that never started -- is not counted) and
  ``ctr … containers rm <id>`` (deletes the container and its snapshot), which is the removal that
  counts.

The runtimes asked are the one this run drives (the :class:`RuntimeResolution` the run resolved) and
the node's others (:func:`other_runtimes`: docker when it is not the driven CLI, and containerd at each
standard socket present and not already the driven one, through nerdctl, or ctr where nerdctl is
absent) -- an earlier run may have been driven elsewhere (``--runtime``). One containerd socket is
asked once. A driven resolution with nothing to drive (no runtime, or no CLI on the host: every
container step is emitted) is not listed, and that is not a failure: the run starts nothing there.

How an unhappy sweep is reported (the spec's table)
---------------------------------------------------
=============  ===========================  =====================================================
What failed    On which runtime             Reported as
=============  ===========================  =====================================================
the removal    any                          a failure (container seen, would not go)
the listing    the one this run drives      a failure (can't ask the runtime what it holds)
the listing    any other                    nothing -- logged (no earlier run could have used it)
=============  ===========================  =====================================================

So a node carrying nerdctl beside a containerd that is not listening stays green. Two decisions of
this implementation beside the table:

* **Output that is not container ids** is never executed: each line of a listing must be one id
  (docker and nerdctl print lower-case hex, 12 to 64 digits; ctr prints containerd identifiers,
  ``[A-Za-z0-9]+([._-][A-Za-z0-9]+)*``, at most 76 characters). The ids among it are still removed;
  the rest counts as a failed listing (a failure on the driven runtime, nothing elsewhere), since what
  the runtime holds is then not known.
* **A container already gone** when it is removed (docker/nerdctl "No such container", ctr's
  ``container "<id>" in namespace "<ns>": not found``: its own ``--rm`` got there first) is not a
  failure: nothing holds the accelerator.

:func:`failure_reason` is the text of every ``stale-container-sweep`` row: the spec's sentence, what
failed (the runtime's own words, which step, on which runtime, the command), and the manual cleanup
command for each runtime that failed (§2.8: "Clear the leftovers by hand …, then run it again").
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.models import Check, State
from gpustack_operator.preflight.runtime import (
    CONTAINERD_CLIS,
    CONTAINERD_NAMESPACE,
    CONTAINERD_SOCKETS,
    LABEL,
    LABEL_KEY,
    RuntimeName,
    RuntimeResolution,
    which,
)

log = logging.getLogger(__name__)

CTR_FILTER = f'labels."{LABEL_KEY}"==true'
CAPABILITY = "stale-container-sweep"
SWEEP_TIMEOUT = 30.0  # seconds, per CLI call

_HEX_ID = re.compile(r"[0-9a-f]{12,64}")
_CONTAINERD_ID = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
CONTAINERD_ID_MAX = 76  # containerd's identifiers.Validate
# The container is already gone (docker/nerdctl "No such container: <id>", ctr
# 'container "<id>" in namespace "<ns>": not found'); a task that is not there (ctr "no running task found").
_GONE = re.compile(r'no such container|container "[^"]*" in namespace "[^"]*": not found', re.IGNORECASE)
_NO_TASK = re.compile(r"no running task found|not found", re.IGNORECASE)
SHOWN = 3  # garbled lines quoted in a reason
SHOWN_CHARS = 60

REASON = (
    "the stale-container sweep could not be completed, so a container an earlier run left behind may still "
    "be holding this accelerator and every answer measured against it here is unsafe to trust: {what}; clear "
    "the leftovers by hand ({manual}), then run it again"
)


class Step(StrEnum):
    LIST = "listing"
    REMOVE = "removal"


@dataclass(frozen=True)
class Target:
    """One runtime the sweep asks: its CLI (``binary``, the host path when resolved) and, for a
    containerd CLI, the socket and namespace it is pointed at."""

    runtime: RuntimeName
    binary: str
    socket: str | None = None
    namespace: str | None = None
    driven: bool = False

    @property
    def key(self) -> tuple[str, str | None]:
        """Which daemon this is: docker, or containerd at one socket (nerdctl and ctr share it)."""
        if self.runtime in CONTAINERD_CLIS:
            return ("containerd", self.socket)
        return (self.runtime.value, None)

    def globals(self) -> list[str]:
        if self.runtime not in CONTAINERD_CLIS:
            return []
        address = ["--address", self.socket] if self.socket else []
        return [*address, "--namespace", self.namespace or CONTAINERD_NAMESPACE]

    def list_args(self) -> list[str]:
        if self.runtime is RuntimeName.CTR:
            return [*self.globals(), "containers", "ls", "-q", CTR_FILTER]
        return [*self.globals(), "ps", "-aq", "--filter", f"label={LABEL}"]

    def remove_args(self, container: str) -> list[list[str]]:
        """The calls that remove one container; the last is the one whose failure counts."""
        if self.runtime is RuntimeName.CTR:
            return [[*self.globals(), "tasks", "rm", "-f", container], [*self.globals(), "containers", "rm", container]]
        return [[*self.globals(), "rm", "-f", container]]

    def describe(self) -> str:
        if self.runtime not in CONTAINERD_CLIS:
            return self.runtime.value
        at = f"against {self.socket}" if self.socket else "against its default socket"
        return f"{self.runtime.value} {at}, namespace {self.namespace or CONTAINERD_NAMESPACE}"

    def manual(self) -> str:
        """The cleanup to run by hand on the node (the CLI by name, as a person types it)."""
        name = self.runtime.value
        listing = shlex.join([name, *self.list_args()])
        if self.runtime is RuntimeName.CTR:
            base = shlex.join([name, *self.globals()])
            return f"{listing}, then {base} tasks rm -f <id> and {base} containers rm <id> for each id it prints"
        return f"{listing}, then {shlex.join([name, *self.globals(), 'rm', '-f'])} <id> for each id it prints"


@dataclass(frozen=True)
class Listing:
    """A listing's output read: the container ids, and the lines that are not one (never acted on)."""

    ids: tuple[str, ...] = ()
    garbled: tuple[str, ...] = ()


def parse_listing(output: str, runtime: RuntimeName) -> Listing:
    """Each non-blank line must be exactly one id of ``runtime``'s shape; never raises. Duplicates are
    kept once, in order."""
    ids: dict[str, None] = {}
    garbled: list[str] = []
    for raw in output.splitlines():
        line = raw.strip()
        if not line:
            continue
        if is_id(line, runtime):
            ids.setdefault(line, None)
        else:
            garbled.append(line)
    return Listing(ids=tuple(ids), garbled=tuple(garbled))


def is_id(text: str, runtime: RuntimeName) -> bool:
    if runtime is RuntimeName.CTR:
        return len(text) <= CONTAINERD_ID_MAX and _CONTAINERD_ID.fullmatch(text) is not None
    return _HEX_ID.fullmatch(text) is not None


@dataclass(frozen=True)
class Removed:
    target: Target
    container: str


@dataclass(frozen=True)
class Failure:
    """One step that did not go through: ``error`` is the runtime's own words (or what was wrong with
    its output), ``command`` what ran."""

    target: Target
    step: Step
    error: str
    command: str
    container: str | None = None

    @property
    def counts(self) -> bool:
        """The spec's table: a removal anywhere, a listing on the runtime this run drives."""
        return self.step is Step.REMOVE or self.target.driven

    def words(self) -> str:
        where = self.target.describe()
        if self.step is Step.REMOVE:
            return (
                f"{self.error} (removing container {self.container} from {where}, which listed it as labelled "
                f"{LABEL}: {self.command})"
            )
        runs = "the runtime this run drives" if self.target.driven else "not the runtime this run drives"
        return f"{self.error} (listing the containers labelled {LABEL} on {where}, {runs}: {self.command})"


@dataclass(frozen=True)
class SweepResult:
    swept: tuple[Target, ...] = ()  # what was listed, driven first
    removed: tuple[Removed, ...] = ()
    failures: tuple[Failure, ...] = ()  # what makes the sweep fail (the table's first two rows)
    ignored: tuple[Failure, ...] = ()  # listings on another runtime that failed: logged, not reported
    skipped: str | None = None  # why the driven runtime was not listed (nothing to drive)

    @property
    def ok(self) -> bool:
        return not self.failures


def target_of(resolution: RuntimeResolution, *, driven: bool) -> Target | None:
    """The runtime a resolution names, or ``None`` when it names nothing the host carries."""
    if resolution.runtime is None or resolution.binary is None:
        return None
    containerd = resolution.runtime in CONTAINERD_CLIS
    return Target(
        runtime=resolution.runtime,
        binary=resolution.binary,
        socket=resolution.socket if containerd else None,
        namespace=(resolution.namespace or CONTAINERD_NAMESPACE) if containerd else None,
        driven=driven,
    )


def targets(runtime: RuntimeResolution, others: Iterable[RuntimeResolution]) -> list[Target]:
    """The driven runtime first, then the others; each daemon (docker, containerd at one socket) once."""
    found: list[Target] = []
    seen: set[tuple[str, str | None]] = set()
    candidates = [target_of(runtime, driven=True), *(target_of(o, driven=False) for o in others)]
    for target in candidates:
        if target is not None and target.key not in seen:
            seen.add(target.key)
            found.append(target)
    return found


def other_runtimes(host: HostRoot, driven: RuntimeResolution) -> list[RuntimeResolution]:
    """The node's container runtimes other than the driven one, for the sweep: docker when the host
    carries it and it is not the driven CLI; containerd at each of :data:`CONTAINERD_SOCKETS` present
    on the host (one socket reached by two paths, ``/var/run`` being a link to ``/run``, once) and not
    the driven socket, through nerdctl, or ctr where nerdctl is absent."""
    found: list[RuntimeResolution] = []
    if driven.runtime is not RuntimeName.DOCKER and (docker := which(host, RuntimeName.DOCKER)) is not None:
        found.append(RuntimeResolution(runtime=RuntimeName.DOCKER, source="sweep", binary=docker))
    cli = next(
        ((name, path) for name in (RuntimeName.NERDCTL, RuntimeName.CTR) if (path := which(host, name)) is not None),
        None,
    )
    if cli is None:
        return found
    drives_containerd = driven.runtime in CONTAINERD_CLIS and driven.binary is not None
    seen = {_canonical(host, driven.socket)} if drives_containerd and driven.socket else set()
    for socket in CONTAINERD_SOCKETS:
        if not host.exists(socket):
            continue
        canonical = _canonical(host, socket)
        if canonical is None or canonical in seen:
            continue
        seen.add(canonical)
        found.append(
            RuntimeResolution(
                runtime=cli[0], source="sweep", binary=cli[1], socket=socket, namespace=CONTAINERD_NAMESPACE
            )
        )
    return found


def _canonical(host: HostRoot, path: str) -> str | None:
    try:
        return host.canonical(path)
    except HostPathError:
        return None


def sweep(
    host: HostExec,
    runtime: RuntimeResolution,
    others: Sequence[RuntimeResolution] = (),
    *,
    timeout: float = SWEEP_TIMEOUT,
) -> SweepResult:
    """List and remove every labelled container on each runtime (see the module docstring). Never
    raises: whatever a CLI does or prints ends up in the result."""
    runner = dataclasses.replace(host, timeout=timeout)
    swept = targets(runtime, others)
    skipped = None
    if not swept or not swept[0].driven:
        skipped = f"the runtime this run drives was not listed: {runtime.reason or 'no container CLI was resolved'}"
    removed: list[Removed] = []
    failures: list[Failure] = []
    for target in swept:
        _sweep_one(runner, target, removed, failures)
    counted = tuple(f for f in failures if f.counts)
    ignored = tuple(f for f in failures if not f.counts)
    for item in removed:
        log.info("sweep: removed the stale preflight container %s from %s", item.container, item.target.describe())
    for f in ignored:
        log.info("sweep: not counted (no earlier run could have used this runtime): %s", f.words())
    for f in counted:
        log.warning("sweep: %s", f.words())
    return SweepResult(swept=tuple(swept), removed=tuple(removed), failures=counted, ignored=ignored, skipped=skipped)


def _sweep_one(runner: HostExec, target: Target, removed: list[Removed], failures: list[Failure]) -> None:
    args = target.list_args()
    command = runner.shell(target.binary, *args)
    output, error = _call(runner, target, args)
    if error is not None:
        failures.append(Failure(target, Step.LIST, error, command))
        return
    listing = parse_listing(output or "", target.runtime)
    if listing.garbled:
        shown = ", ".join(repr(line[:SHOWN_CHARS]) for line in listing.garbled[:SHOWN])
        more = f" and {len(listing.garbled) - SHOWN} more" if len(listing.garbled) > SHOWN else ""
        error = (
            f"{target.runtime.value}'s listing printed {len(listing.garbled)} line(s) that are not container ids, "
            f"so what it holds is not known and they were not acted on: {shown}{more}"
        )
        failures.append(Failure(target, Step.LIST, error, command))
    for container in listing.ids:
        _remove(runner, target, container, removed, failures)


def _remove(runner: HostExec, target: Target, container: str, removed: list[Removed], failures: list[Failure]) -> None:
    calls = target.remove_args(container)
    earlier: list[str] = []
    for args in calls[:-1]:  # ctr's task removal: its failure alone does not count
        _, error = _call(runner, target, args)
        if error is not None and not _NO_TASK.search(error):
            earlier.append(error)
    args = calls[-1]
    _, error = _call(runner, target, args)
    if error is None or _GONE.search(error):
        removed.append(Removed(target, container))
        return
    if earlier:
        error += f" (before it: {'; '.join(earlier)})"
    failures.append(Failure(target, Step.REMOVE, error, runner.shell(target.binary, *args), container))


def _call(runner: HostExec, target: Target, args: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None), or (None, the failure in words, named for the runtime as the spec words it:
    ``docker: exit status 1: permission denied``)."""
    try:
        return runner.run(target.binary, *args), None
    except HostExecError as exc:
        text = str(exc)
    except (OSError, ValueError) as exc:  # defensive: an argv the OS refuses
        text = f"{target.binary}: {exc}"
    if target.binary != target.runtime.value and text.startswith(target.binary):
        text = target.runtime.value + text[len(target.binary) :]
    return None, text


def failure_reason(result: SweepResult) -> str | None:
    """The reason on every ``stale-container-sweep`` row, or ``None`` when the sweep did not fail."""
    if result.ok:
        return None
    what = "; ".join(f.words() for f in result.failures)
    manual: dict[tuple[str, str | None], str] = {}
    for f in result.failures:
        manual.setdefault((f.target.runtime.value, f.target.socket), f.target.manual())
    return REASON.format(what=what, manual="; ".join(manual.values()))


def stale_rows(accelerators: Iterable[str], reason: str) -> list[Check]:
    """One ``stale-container-sweep`` row per accelerator, ``unavailable`` (§2.8)."""
    return [Check(accelerator=a, capability=CAPABILITY, state=State.UNAVAILABLE, reason=reason) for a in accelerators]


__all__ = [
    "CAPABILITY",
    "LABEL",
    "Failure",
    "Listing",
    "Removed",
    "Step",
    "SweepResult",
    "Target",
    "failure_reason",
    "other_runtimes",
    "parse_listing",
    "stale_rows",
    "sweep",
    "targets",
]
