"""The durable side of an :class:`~gpustack_operator.allocator.core.Allocator` (issue 18), kept apart
from the decision so each file stays readable: the ``device.gpustack.ai/accelerator.allocated``
annotation written after a grant (supplement §1.8 rules 5, 6, 8), the give-back when it cannot be
written and its background retry (stopped with the Device Manager: :meth:`DurableMixin.stop_retries`,
:func:`stop_retries`), the node-local ownership record's model, restart recovery (``recover``, over the
pure ``allocator/recovery.py``: annotations, node records, the ``Devices`` status the caller read,
the kubelet's ``List``), and the test-only crash seam :func:`kill_point`.

:class:`DurableMixin` is mixed into ``Allocator``; it uses the allocator's state and the few methods
named under ``TYPE_CHECKING`` below (defined by ``Allocator``'s other sides: ``core.py``, ``claims.py``,
``reconcile.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from pydantic import BaseModel, Field, ValidationError

from gpustack_operator.allocator import recovery
from gpustack_operator.allocator.ledger import (
    AllocatedEntry,
    Claim,
    ClaimKey,
    DevicesAllocationGroup,
    Ledger,
    parse_allocated,
    render_allocated,
)
from gpustack_operator.allocator.pods import (
    ALLOCATED_ANNOTATION,
    AnnotationRecorder,
    AnnotationWriteError,
    PodSource,
    PodSpec,
    PodsUnavailableError,
)
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.host import HostPathError
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import (
    Code,
    Family,
    PartitionInstance,
    RefusedError,
    RespondContext,
    record_problem,
)

log = logging.getLogger("gpustack_operator.allocator.core")


@dataclass(frozen=True)
class Done:
    """One container this call reserved for: how to give it back, and its Pod (whose annotation records it)."""

    key: ClaimKey
    prior: Claim | None
    created: PartitionInstance | None
    pod: PodSpec


KILL_AT_ENV = "GPUSTACK_OPERATOR_TEST_KILL_AT"
KILL_POINTS = ("after-identify", "after-reserve", "after-patch", "before-answer")
_KILL_AT = os.environ.get(KILL_AT_ENV, "")


def kill_point(step: str) -> None:
    """A test-only seam, inert unless ``GPUSTACK_OPERATOR_TEST_KILL_AT`` names ``step`` when the process
    starts (one of :data:`KILL_POINTS`): the process then SIGKILLs itself there, as a node losing the
    Device Manager mid-``Allocate`` would. The crash-recovery tests set it; nothing else reads it."""
    if _KILL_AT and step == _KILL_AT:
        log.critical("%s=%s: killing this process (a test of restart recovery)", KILL_AT_ENV, step)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


class AllocatedRecord(BaseModel):
    """``allocation.json``: the fields ``ledger/podrecords.py`` reads, and ``allocated`` -- the Pod's
    sliced and partitioned claims in the annotation's shape, the node-local ownership record restart
    recovery reads (written before the annotation patch, so a partition is never unowned)."""

    pod: str
    manufacturer: str
    mode: str
    accelerators: list[str]
    allocated: dict[str, AllocatedEntry] = Field(default_factory=dict)


RETRY_JOIN_TIMEOUT = 5.0  # how long stopping waits for the give-back retry threads to end


@dataclass
class _Retries:
    """The give-back retry threads of one allocator and the event that ends them."""

    stop: threading.Event = field(default_factory=threading.Event)
    threads: set[threading.Thread] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


_RETRIES_INIT = threading.Lock()  # creates each allocator's _Retries once (core.py's __init__ is not ours)


class DurableMixin:
    """See the module docstring."""

    if TYPE_CHECKING:  # what core.Allocator provides
        manufacturer: Resolved
        names: ResourceNames
        _lock: threading.RLock
        _ledger: Ledger
        _pods: PodSource
        _ctx: RespondContext
        _recorder: AnnotationRecorder | None
        _patch_lock: threading.Lock
        _stale: dict[str, str]
        _parsed: dict[str, tuple[str, dict[str, AllocatedEntry]]]

        def _give_back(self, key: ClaimKey, prior: Claim | None, created: PartitionInstance | None) -> None: ...

        def _bump(self) -> None: ...

        def _write_record(self, pod: PodSpec) -> None: ...

        def _node_pods(self) -> list[PodSpec]: ...

        def _sync(self, pods: list[PodSpec], sweep: bool = False) -> bool: ...

        def _mark_finished(self, pods: list[PodSpec]) -> bool: ...

    def _record(self, done: list[Done]) -> None:
        """The durable annotation of every Pod this call granted to, patched outside the node lock
        (supplement §1.8 rule 5) and before the answer; a failed patch gives the call's reservations
        back (rule 8) and refuses naming the API server's error."""
        if self._recorder is None or not done:
            return
        pods: dict[str, PodSpec] = {}
        for entry in done:
            pods.setdefault(entry.pod.uid, entry.pod)
        for pod in pods.values():
            error = ""
            with self._patch_lock:  # patches of this allocator in the order their values were computed
                value = self.annotation_value(pod)
                if value == pod.annotations.get(ALLOCATED_ANNOTATION):
                    continue  # already recorded (a retried call, or a grant the annotation does not carry)
                try:
                    self._recorder.record(pod, value)
                    self._stale.pop(pod.uid, None)
                except AnnotationWriteError as exc:
                    error = str(exc)
            if error:
                self._record_failed(done, pod, value, error)
            kill_point("after-patch")

    def _record_failed(self, done: list[Done], pod: PodSpec, tried: str | None, error: str) -> NoReturn:
        with self._lock:
            for entry in reversed(done):
                self._give_back(entry.key, entry.prior, entry.created)
            self._given_back(done)
            # a timed-out patch may have landed: that value is never recovered from
            if tried is not None:
                self._stale[pod.uid] = tried
            self._bump()
        log.warning("%s: %s; the allocation is given back", self.manufacturer.name, error)
        if not self._write_given_back(pod):
            self._start_retry(pod)
        labels = ", ".join(sorted({f"{e.pod.key} container {e.key[1]}" for e in done}))
        raise RefusedError(
            f"{labels}: the allocation could not be recorded on the Pod ({error}); the reservation is given back "
            "and the kubelet retries",
            Code.UNAVAILABLE,
        )

    def _write_given_back(self, pod: PodSpec, stop: threading.Event | None = None) -> bool:
        """Write the annotation as it stands after a give-back; False when the patch failed, or was not
        tried because ``stop`` is set (checked under the patch lock, right before the patch)."""
        if self._recorder is None:
            return True
        with self._patch_lock:
            if stop is not None and stop.is_set():
                return False
            after = self.annotation_value(pod)
            try:
                self._recorder.record(pod, after)
            except AnnotationWriteError as exc:
                log.warning("%s: the given-back annotation was not written: %s", self.manufacturer.name, exc)
                return False
            self._stale.pop(pod.uid, None)
            return True

    def _retries(self) -> _Retries:
        state: _Retries | None = getattr(self, "_retry_state", None)
        if state is None:
            with _RETRIES_INIT:
                state = getattr(self, "_retry_state", None)
                if state is None:
                    state = _Retries()
                    self._retry_state = state
        return state

    def _start_retry(self, pod: PodSpec) -> None:
        """A daemon thread retrying ``pod``'s give-back (:meth:`_retry_given_back`), unless stopping."""
        state = self._retries()
        with state.lock:
            state.threads = {t for t in state.threads if t.is_alive()}
            if state.stop.is_set():
                log.warning(
                    "%s: stopping: the given-back annotation of %s is not retried (a restart recovers from the "
                    "ledger's truth: the reservation was given back)",
                    self.manufacturer.name,
                    pod.key,
                )
                return
            thread = threading.Thread(
                target=self._retry_given_back, args=(pod,), name=f"give-back {pod.key}", daemon=True
            )
            state.threads.add(thread)
            thread.start()

    def _retry_given_back(self, pod: PodSpec, initial: float = 0.5, limit: float = 30.0) -> None:
        """Rule 8: the give-back is retried until it lands or the Pod is gone (backoff ``initial``
        doubling to ``limit``) -- or until :meth:`stop_retries`, which wakes the backoff at once; no
        patch is started once it was called."""
        stop = self._retries().stop
        delay = initial
        while not stop.wait(delay):
            delay = min(delay * 2, limit)
            try:
                current = next((p for p in self._pods.node_pods() if p.uid == pod.uid), None)
            except PodsUnavailableError:
                continue
            if current is None:
                with self._lock:
                    self._stale.pop(pod.uid, None)
                log.info("%s: %s is gone; its given-back annotation no longer matters", self.manufacturer.name, pod.key)
                return
            if self._write_given_back(current, stop=stop):
                log.info("%s: the given-back annotation of %s is written", self.manufacturer.name, pod.key)
                return
        log.info("%s: stopping: the give-back of %s is no longer retried", self.manufacturer.name, pod.key)

    def request_stop_retries(self) -> None:
        """Wake every give-back retry thread and end it (no patch starts after this); returns at once."""
        state = self._retries()
        with state.lock:
            state.stop.set()

    def stop_retries(self, timeout: float = RETRY_JOIN_TIMEOUT) -> list[str]:
        """End every give-back retry thread, waiting at most ``timeout`` seconds in all; the names of
        the threads still running then (each inside a patch started before the stop, bounded by the
        recorder's own timeout; it ends after that patch without another). Serve's shutdown calls it
        (or :func:`stop_retries` for every allocator at once) after the plugin servers stopped."""
        self.request_stop_retries()
        return self._join_retries(time.monotonic() + max(timeout, 0.0))

    def _join_retries(self, deadline: float) -> list[str]:
        state = self._retries()
        with state.lock:
            threads = list(state.threads)
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        with state.lock:
            state.threads = {t for t in state.threads if t.is_alive()}
            left = sorted(t.name for t in state.threads)
        for name in left:
            log.warning("%s: %s is still inside a patch after the stop; it ends after it", self.manufacturer.name, name)
        return left

    def annotation_value(self, pod: PodSpec) -> str | None:
        """The annotation ``pod`` should carry: this allocator's claims, beside other manufacturers'
        entries as the view shows them."""
        with self._lock:
            entries = {
                name: entry
                for name, entry in parse_allocated(pod.annotations.get(ALLOCATED_ANNOTATION)).items()
                if entry.manufacturer != self.manufacturer.name
            }
            for claim in self._ledger.claims.values():
                if claim.pod_uid == pod.uid and claim.family is not Family.VISIBILITY:
                    entries[claim.container] = AllocatedEntry.of(claim, self.manufacturer.name)
            return render_allocated(entries) if entries else None

    def _entries(self, pod: PodSpec) -> dict[str, AllocatedEntry]:
        """The Pod's annotation entries, parsed once per annotation value (every call reads every Pod
        of the node: 110 annotations re-parsed per ``Allocate`` cost more than the decision)."""
        raw = pod.annotations.get(ALLOCATED_ANNOTATION)
        if not raw:
            return {}
        cached = self._parsed.get(pod.uid)
        if cached is not None and cached[0] == raw:
            return cached[1]
        entries = parse_allocated(raw)
        self._parsed[pod.uid] = (raw, entries)
        return entries

    def recover(self, status: Sequence[DevicesAllocationGroup] | None = None) -> list[str]:
        """Restart recovery, before the plugins register (``allocator/recovery.py``): the claims of the
        node's Pods' annotations, then of their node-local ownership records, then of the holders the
        node's last published ``Devices`` status names (``status``: the groups the caller read with
        ``kube/devicesread.py::read_devices_status`` before anything was published again -- ``None``
        when it was not read; this allocator never calls the API server), then of what the kubelet's
        pod-resources ``List`` says it holds; one line per claim rebuilt from the last three and per
        holding that could not be rebuilt (each logged). Raises :class:`RefusedError`
        (``UNAVAILABLE``) when the node's Pods cannot be read."""
        with self._lock:
            pods = self._node_pods()
            before = set(self._ledger.claims)
            self._sync(pods)
            from_annotations = len(set(self._ledger.claims) - before)
            lines: list[str] = []
            for pod in pods:
                for claim in recovery.claims_from_entries(
                    pod, self._record_entries(pod.uid), self.manufacturer.name, self._ledger.claims
                ):
                    self._ledger.claims[claim.key] = claim
                    held = ",".join(claim.accelerators)
                    lines.append(f"{claim.label}: {claim.family} on {held} recovered from its node record")
            if status is not None:
                claims, problems = recovery.claims_from_status(
                    status, pods, self.manufacturer.name, self._ledger.cards, self._ledger.claims
                )
                for claim in claims:
                    self._ledger.claims[claim.key] = claim
                    lines.append(
                        f"{claim.label}: {claim.family} on {','.join(claim.accelerators)} recovered from the Devices "
                        "status (no annotation or node record recorded it)"
                    )
                lines.extend(problems)
            kubelet = self._pods.kubelet_pods()
            if kubelet is None:
                lines.append(
                    "the kubelet's pod-resources List could not be asked; recovered from the Pods' records alone"
                )
            else:
                claims, problems = recovery.claims_from_kubelet(
                    kubelet, pods, self.names, self._ledger.cards, self._ledger.claims
                )
                for claim in claims:
                    self._ledger.claims[claim.key] = claim
                    lines.append(
                        f"{claim.label}: {claim.family} on {','.join(claim.accelerators)} recovered from the kubelet's "
                        "pod-resources List (no annotation recorded it)"
                    )
                lines.extend(problems)
            self._mark_finished(pods)
            for line in lines:
                log.warning("%s: %s", self.manufacturer.name, line)
            log.info(
                "%s: restart recovery: %d claims held (%d from the Pods' annotations)",
                self.manufacturer.name,
                len(self._ledger.claims),
                from_annotations,
            )
        self._bump()
        return lines

    def _record_entries(self, uid: str) -> dict[str, AllocatedEntry]:
        """The entries of ``<pods_dir>/<uid>/allocation.json`` when it is this manufacturer's."""
        path = f"{self._ctx.pod_dir(uid)}/allocation.json"
        try:
            raw = self._ctx.host.read_optional(path)
            record = AllocatedRecord.model_validate_json(raw) if raw else None
        except (HostPathError, ValidationError) as exc:
            why = record_problem(exc) if isinstance(exc, ValidationError) else str(exc)
            log.warning(
                "%s: %s is not an allocation record (%s); not recovered from", self.manufacturer.name, path, why
            )
            return {}
        if record is None or record.manufacturer != self.manufacturer.name:
            return {}
        return dict(record.allocated)

    def _forget_record_entries(self, pod: PodSpec) -> None:
        """After a give-back left the Pod nothing sliced or partitioned here: its record keeps naming
        the Pod (the sweep still reclaims the working directory once the Pod is gone) but no longer
        names a claim, so a restart does not recover what was given back."""
        path = f"{self._ctx.pod_dir(pod.uid)}/allocation.json"
        try:
            raw = self._ctx.host.read_optional(path)
            record = AllocatedRecord.model_validate_json(raw) if raw else None
            if record is None or record.manufacturer != self.manufacturer.name or not record.allocated:
                return
            record.allocated = {}
            self._ctx.host.write_text(path, record.model_dump_json(by_alias=True, exclude_none=True) + "\n")
        except (HostPathError, ValidationError) as exc:
            log.error(
                "%s: the allocation record of %s could not be rewritten: %s", self.manufacturer.name, pod.key, exc
            )

    def _given_back(self, done: list[Done]) -> None:
        """The node records of the Pods a give-back touched follow the ledger."""
        for pod in {e.pod.uid: e.pod for e in done}.values():
            self._write_record(pod)  # names what is still held, or nothing (_forget_record_entries)


def stop_retries(allocators: Iterable[DurableMixin], timeout: float = RETRY_JOIN_TIMEOUT) -> list[str]:
    """Wake and end the give-back retry threads of every allocator at once, then wait for them against
    one deadline ``timeout`` seconds away; the names of the threads still inside a patch then. What
    serve's shutdown calls, after the plugin servers stopped (so no ``Allocate`` starts a new one)."""
    listed = list(allocators)
    for allocator in listed:
        allocator.request_stop_retries()
    deadline = time.monotonic() + max(timeout, 0.0)
    return [name for allocator in listed for name in allocator._join_retries(deadline)]


__all__ = [
    "KILL_AT_ENV",
    "KILL_POINTS",
    "RETRY_JOIN_TIMEOUT",
    "AllocatedRecord",
    "Done",
    "DurableMixin",
    "kill_point",
    "stop_retries",
]
