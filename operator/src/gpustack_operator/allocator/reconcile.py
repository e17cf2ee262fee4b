"""The release side of an :class:`~gpustack_operator.allocator.core.Allocator` (issue 18): what Pods
gone from the node held is reclaimed (reservations dropped, partitions destroyed, the responder's own
reclaim, ``<pods_dir>/<uid>`` removed), finished Pods stop charging, and claims the durable annotation
records but no reservation holds charge again. ``Allocate`` runs :meth:`ReconcileMixin._sync` first
under the node lock; the periodic :meth:`ReconcileMixin.reconcile` also sweeps the records a restart
left unclaimed. Kept apart from ``core.py`` so the decision path reads alone.

:class:`ReconcileMixin` is mixed into ``Allocator``; it uses the allocator's state and the few methods
named under ``TYPE_CHECKING`` below (defined in ``core.py``, ``claims.py`` and ``durable.py``).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gpustack_operator.allocator import recovery
from gpustack_operator.allocator.durable import AllocatedRecord
from gpustack_operator.allocator.ledger import AllocatedEntry, Ledger
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION, PodSpec
from gpustack_operator.host import HostPathError
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import (
    Family,
    PartitionInstance,
    RefusedError,
    RespondContext,
    Responder,
    record_problem,
)

log = logging.getLogger("gpustack_operator.allocator.core")  # one logger for the whole allocator


class ReconcileMixin:
    """See the module docstring."""

    if TYPE_CHECKING:  # what core.Allocator provides
        manufacturer: Resolved
        _lock: threading.RLock
        _ledger: Ledger
        _ctx: RespondContext
        _responder: Responder
        _parsed: dict[str, tuple[str, dict[str, AllocatedEntry]]]
        _stale: dict[str, str]

        def _node_pods(self) -> list[PodSpec]: ...

        def _bump(self) -> None: ...

        def _destroy(self, instance: PartitionInstance) -> None: ...

        def _entries(self, pod: PodSpec) -> dict[str, AllocatedEntry]: ...

    def reconcile(self) -> None:
        """Reclaim what Pods gone from the node held, and stop charging finished ones; a node whose
        Pods cannot be read reclaims nothing (a failed read is no evidence that a Pod is gone)."""
        with self._lock:
            try:
                pods = self._node_pods()
            except RefusedError as exc:
                log.warning("%s: %s", self.manufacturer.name, exc.message)
                return
            if self._sync(pods, sweep=True):
                self._bump()

    def _sync(self, pods: list[PodSpec], sweep: bool = False) -> bool:
        by_uid = {p.uid: p for p in pods}
        changed = False
        gone_uids: set[str] = set()
        for key, claim in list(self._ledger.claims.items()):
            if claim.pod_uid in by_uid:
                continue
            del self._ledger.claims[key]
            gone_uids.add(claim.pod_uid)
            if claim.family is Family.PARTITIONED and claim.partition is not None:
                self._destroy(claim.partition)
            changed = True
        changed |= self._mark_finished(pods)
        changed |= self._recover(pods)
        if sweep:
            gone_uids |= self._unclaimed_records(set(by_uid))
        for uid in sorted(gone_uids):
            if not self._reclaim(uid):
                continue  # what the driver still holds is recorded there: kept, retried at the next sweep
            try:
                self._ctx.host.remove_tree(self._ctx.pod_dir(uid))
            except HostPathError as exc:
                log.error(
                    "%s: the working directory of gone Pod %s could not be removed: %s",
                    self.manufacturer.name,
                    uid,
                    exc,
                )
        return changed

    def _mark_finished(self, pods: list[PodSpec]) -> bool:
        """Each claim's ``terminal`` follows its Pod's phase (a finished Pod's claims stop charging by
        :meth:`Ledger.charging`); claims of Pods gone are :meth:`_sync`'s. True when one changed."""
        by_uid = {p.uid: p for p in pods}
        changed = False
        for key, claim in list(self._ledger.claims.items()):
            pod = by_uid.get(claim.pod_uid)
            if pod is None:
                continue
            marked = claim.with_terminal(pod.terminal)
            if marked is not claim:
                self._ledger.claims[key] = marked
                changed = True
        return changed

    def _reclaim(self, uid: str) -> bool:
        """The responder's own reclaim of a gone Pod (:class:`~..respond.Reclaimer`); False when it
        could not destroy everything."""
        reclaim = getattr(self._responder, "reclaim", None)
        if reclaim is None:
            return True
        try:
            for line in reclaim(uid, self._ctx):
                log.info("%s: %s", self.manufacturer.name, line)
        except RefusedError as exc:
            log.error("%s: gone Pod %s: %s; its working directory is kept", self.manufacturer.name, uid, exc.message)
            return False
        except Exception:
            log.exception(
                "%s: reclaiming gone Pod %s failed; its working directory is kept", self.manufacturer.name, uid
            )
            return False
        return True

    def _unclaimed_records(self, live: set[str]) -> set[str]:
        """Pod directories whose record names this manufacturer and whose Pod is gone (a restart lost
        their reservation); other manufacturers' directories are theirs to reclaim."""
        host, root = self._ctx.host, self._ctx.pods_dir.rstrip("/")
        try:
            if not host.is_dir(root):
                return set()
            uids = host.listdir(root)
        except HostPathError:
            return set()
        out = set()
        for uid in uids:
            if uid in live:
                continue
            path = f"{root}/{uid}/allocation.json"
            try:
                raw = host.read_optional(path)
                record = AllocatedRecord.model_validate_json(raw) if raw else None
            except (HostPathError, ValidationError) as exc:  # not a file, not a record: no manufacturer's
                why = record_problem(exc) if isinstance(exc, ValidationError) else str(exc)
                log.warning("%s: %s is not an allocation record (%s); left alone", self.manufacturer.name, path, why)
                record = None
            if record is not None and record.manufacturer == self.manufacturer.name:
                out.add(uid)
        return out

    def _recover(self, pods: list[PodSpec]) -> bool:
        """Claims the durable annotation records and no reservation holds (a restarted Device
        Manager): they charge again, a sidecar re-finds its owner, a retried partition its accelerator."""
        changed = False
        if len(self._parsed) > 2 * len(pods) + 64:  # Pods gone: their parsed annotations go too
            live = {p.uid for p in pods}
            self._parsed = {uid: v for uid, v in self._parsed.items() if uid in live}
        for pod in pods:
            entries = self._entries(pod)
            if not entries or self._stale.get(pod.uid) == pod.annotations.get(ALLOCATED_ANNOTATION):
                continue  # nothing recorded, or a record of what a failed patch gave back
            for claim in recovery.claims_from_entries(pod, entries, self.manufacturer.name, self._ledger.claims):
                self._ledger.claims[claim.key] = claim
                changed = True
        return changed


__all__ = ["ReconcileMixin"]
