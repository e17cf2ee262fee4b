"""The one object ``deviceplugin/`` talks to: one manufacturer's pools, reservations, health and the
responder call (spec "The device-plugin allocator" .. end; supplement §1.4, §1.7-§1.9).

Every method is synchronous and thread-safe; the gRPC edge calls them from its worker threads.

Where it lives
--------------
``Allocator`` is one class, its parts mixed in from files kept apart so each reads alone (issue 18);
its API and the import paths below are unchanged:

- ``core.py`` (this file) -- the decision path: ``allocate`` (identify, reserve, respond, give back),
  the node lock, ``update`` and the change counter ListAndWatch waits on, the views for the edge;
  :class:`Pool`, :class:`DeviceState`, :func:`parse_numa` and :class:`CdiResolverLike` are
  re-exported here;
- ``listing.py`` -- what is advertised (``pools``, ``devices``) and the hint (``preferred``);
- ``claims.py`` -- the per-family claim builders, partition packing, the visibility owner, the
  :class:`~gpustack_operator.manufacturers.respond.Grant` and the node-local ``allocation.json``;
- ``reconcile.py`` -- release: Pods gone reclaimed, finished Pods uncharged, annotated claims
  recovered on every read (``reconcile``, ``_sync``);
- ``durable.py`` -- the durable annotation, its give-back, restart recovery (``recover``).

How an allocation is decided
----------------------------
``allocate(resource, requests)`` runs, under ONE node-wide lock shared by every :class:`Allocator` of
the process (:data:`NODE_LOCK`, supplement §1.8 rule 5), *identify → cross-mode check → reserve*,
then the responder:

1. The node's Pods are read (``PodSource.node_pods``). Pods gone from the node are reclaimed first
   (reservations dropped, partitions destroyed, ``<pods_dir>/<uid>`` removed); finished Pods stop
   charging exclusive, shared and logical-slice claims (``release_terminated_pods``).
2. Each container request is matched to its container (:mod:`.identify`): the kubelet's answer when it
   names exactly one, else the oldest feasible pending container holding no reservation; a container
   already reserved with the same device ids is the call retried and gets the same grant again,
   never a second charge.
3. The tokens become accelerators and the family's rules apply: the cross-mode invariant (an
   accelerator another mode holds is refused), distinct accelerators for shared, the sliced gate
   (a free slot and enough units, excluding the container's own reservation), packing for a
   partition (the most-occupied accelerator with a free placement; a retried container reuses its
   accelerator, and its live instance), and the owner's grant for visibility.
4. The reservation is written, the :class:`~gpustack_operator.manufacturers.respond.Grant` built
   (accelerators in ascending index, the container's own env and the Pod's runtime class, the
   budget, the CDI channel) and handed to the responder, with the Pods whose per-slice host records
   are live (``RespondContext.live_pods``: the ledger's own charging rule over the Pods this call
   read, so a responder places against exactly the slices the hint and the gate count). A refusal
   from it gives the reservation back on the spot (a prior claim is restored); any other exception is
   contained as ``INTERNAL``.
   Sliced and partitioned grants write ``<pods_dir>/<uid>/allocation.json`` (ledger/podrecords.py;
   its ``allocated`` map is the node-local ownership record restart recovery reads).
5. Outside the lock, before the answer, the grant is recorded on the Pod: the durable annotation
   (:meth:`annotation_value`, written by the ``AnnotationRecorder`` the edge passes in). A failed
   patch gives every reservation of the call back and refuses ``UNAVAILABLE`` (supplement §1.8
   rules 5, 6, 8). :meth:`recover` rebuilds the claims after a restart (``allocator/recovery.py``).

Reading a refusal (the kubelet fails the Pod with ``UnexpectedAdmissionError`` carrying it)
-----------------------------------------------------------------------------------------------
- ``UNAVAILABLE`` "the node's Pods cannot be read: ..." -- the pod view never synced with the API
  server, so the container could not be identified; never guessed. The kubelet retries.
- ``UNAVAILABLE`` "... the allocation could not be recorded on the Pod (...)" -- the annotation patch
  failed or timed out; the reservation is given back.
- ``NOT_FOUND`` "no container on this node waits for N <resource>" -- no live Pod bound here requests
  that quantity (deleted meanwhile, or the API server lags); or "device <id> is not one this plugin
  advertises" -- a token from an earlier detection; or "<resource> is not served here".
- ``FAILED_PRECONDITION`` "accelerator <id> (<group> index <i>) is held <mode> by <ns>/<pod> container
  <c>" -- the cross-mode invariant: another mode (or another exclusive tenant) holds it; the tokens of
  such an accelerator are advertised Unhealthy, so this is a race with that allocation.
- ``FAILED_PRECONDITION`` "... two <resource> tokens on accelerator <id>" -- a shared (or sliced) grant
  names distinct accelerators; the node has too few free ones.
- ``FAILED_PRECONDITION`` "accelerator <id> has no free slice slot (n of n hosted)" / "needs U units,
  R remain" -- the sliced gate; the hint reads the same room, so no candidate fits that accelerator.
  ``GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE=false`` allocates anyway (remaining clamps at 0).
- ``FAILED_PRECONDITION`` "no <manufacturer> accelerator on this node can place a <profile> partition"
  -- every partitioning accelerator is full for that profile or held otherwise.
- ``FAILED_PRECONDITION`` "<sidecar>: no other container of this Pod holds ..." / "... is not live" --
  the visibility sidecar's owner cannot be substantiated; it fails closed rather than widen the grant.
- ``INVALID_ARGUMENT`` -- a request value the budget cannot read (neither memory key on a slice, a
  partition naming no profile or a profile key other than 1, a malformed quantity); the message names
  the key. Also a ``.sliced`` or ``.partitioned`` request of more than one (supplement §5.3 rules 2,
  3): the webhook refuses those on the scheduling chain, a Pod outside it is refused here.
- ``INTERNAL`` "<manufacturer> responder failed ...: <error>" -- a bug in a responder (traceback logged).
- anything else is the responder's own refusal, passed through.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator import identify as ident
from gpustack_operator.allocator.claims import CdiDecisionLike, CdiResolverLike, ClaimsMixin
from gpustack_operator.allocator.durable import Done, DurableMixin, kill_point
from gpustack_operator.allocator.ledger import (
    AllocatedEntry,
    Claim,
    ClaimKey,
    DevicesAllocationGroup,
    Ledger,
    render_allocated,
)
from gpustack_operator.allocator.listing import FAMILY_ORDER, DeviceState, ListingMixin, Pool, parse_numa
from gpustack_operator.allocator.pods import (
    AnnotationRecorder,
    KubeletPod,
    PodSource,
    PodSpec,
    PodsUnavailableError,
)
from gpustack_operator.allocator.reconcile import ReconcileMixin
from gpustack_operator.allocator.resources import DEFAULT_PARTITION_KIND, ResourceNames
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import (
    Code,
    Family,
    Injection,
    PartitionInstance,
    RefusedError,
    RespondContext,
    Responder,
    live_slice_pods,
)

log = logging.getLogger(__name__)

NODE_LOCK = threading.RLock()
"""The node-wide allocation lock every :class:`Allocator` of the process shares by default."""


@dataclass(frozen=True)
class FamilyOptions:
    """``--no-shared --no-sliced --no-partitioned`` (exclusive and visibility are never gated)."""

    shared: bool = True
    sliced: bool = True
    partitioned: bool = True

    def enabled(self, family: Family) -> bool:
        if family is Family.SHARED:
            return self.shared
        if family is Family.SLICED:
            return self.sliced
        if family is Family.PARTITIONED:
            return self.partitioned
        return True


class Allocator(ListingMixin, ClaimsMixin, ReconcileMixin, DurableMixin):
    """One manufacturer's device-plugin allocator (see the module docstring). The advertised view
    (``listing.py``), the claim builders and the grant (``claims.py``), the release side
    (``reconcile.py``) and the durable side (``durable.py``) are mixed in; the decision is here."""

    def __init__(
        self,
        manufacturer: Resolved,
        groups: list[DevicesGroup],
        *,
        responder: Responder,
        ctx: RespondContext,
        pods: PodSource,
        options: FamilyOptions = FamilyOptions(),
        cdi: CdiResolverLike | None = None,
        lock: threading.RLock | None = None,
        node_name: str | None = None,
        recorder: AnnotationRecorder | None = None,
    ) -> None:
        self.manufacturer = manufacturer
        self.names = ResourceNames(
            manufacturer.resource_name, manufacturer.name, manufacturer.partition_kind or DEFAULT_PARTITION_KIND
        )
        self._responder = responder
        self._ctx = ctx
        self._pods = pods
        self._options = options
        self._cdi = cdi
        self._lock: threading.RLock = lock if lock is not None else NODE_LOCK
        self._node = node_name
        self._recorder = recorder
        self._parsed: dict[str, tuple[str, dict[str, AllocatedEntry]]] = {}  # uid -> (annotation, entries)
        self._patch_lock = threading.Lock()
        self._stale: dict[str, str] = {}  # uid -> an annotation value a failed patch may have left
        self._cond = threading.Condition()
        self._version = 0
        self._groups: list[DevicesGroup] = [g.model_copy(deep=True) for g in groups]
        self._ledger = Ledger.of(manufacturer.name, self._groups, ctx.settings.release_terminated_pods)
        # Token ids are stable between detections, and every ListAndWatch stream asks for its list on
        # each change: the token -> card map and each resource's list (keyed by the version it was
        # computed at; visibility, which no claim changes, by the detection alone) are kept.
        self._token_cards: dict[str, str | None] = {}
        self._device_lists: dict[str, tuple[int, list[DeviceState]]] = {}
        self._generation = 0  # bumped by update()

    def _serves(self, family: Family) -> bool:
        """Whether this allocator serves ``family`` (registered by ``pools``, granted by ``allocate``)."""
        return self._options.enabled(family) and family in self._responder.families

    # -- allocation ---------------------------------------------------------------------------------

    def allocate(self, resource: str, requests: list[list[str]]) -> list[Injection]:
        """One ``AllocateRequest``: a device-id list per container, in the kubelet's order. Raises
        :class:`~gpustack_operator.manufacturers.respond.RefusedError`."""
        family = self.names.family_of(resource)
        if family is None or not self._serves(family):
            raise RefusedError(f"{resource} is not served here ({self.manufacturer.name} allocator)", Code.NOT_FOUND)
        if not requests:
            return []
        self._single(family, resource, requests)
        try:
            injections, done = self._allocate_locked(family, resource, requests, refreshable=self._refreshable())
        except _NotInViewError as miss:
            # the kubelet can be a few milliseconds ahead of a watch-backed view: list once, try again
            if not self._refresh_view():
                raise miss.refusal from None
            injections, done = self._allocate_locked(family, resource, requests, refreshable=False)
        self._record(done)
        kill_point("before-answer")
        return injections

    def _refreshable(self) -> bool:
        return callable(getattr(self._pods, "refresh", None))

    def _refresh_view(self) -> bool:
        refresh = getattr(self._pods, "refresh", None)
        try:
            return bool(refresh()) if callable(refresh) else False
        except Exception as exc:  # a failed refresh is the same "cannot tell": the first refusal stands
            log.warning("%s: the pod view could not be refreshed: %s", self.manufacturer.name, exc)
            return False

    def _allocate_locked(
        self, family: Family, resource: str, requests: list[list[str]], *, refreshable: bool
    ) -> tuple[list[Injection], list[Done]]:
        with self._lock:
            pods = self._node_pods()
            self._sync(pods)
            ctx = self._call_context(pods)
            try:
                targets = ident.identify(
                    resource,
                    [list(ids) for ids in requests],
                    pods=pods,
                    kubelet=self._kubelet_pods(),
                    reserved=self._reserved(family),
                    feasible=lambda c, ids: self._feasible(family, c, ids),
                    node=self._node,
                )
            except RefusedError as exc:
                if refreshable and exc.code is Code.NOT_FOUND:
                    raise _NotInViewError(exc) from None
                raise
            kill_point("after-identify")
            done: list[Done] = []
            injections = []
            try:
                for ids, target in zip(requests, targets, strict=True):
                    injection, (key, prior, created) = self._allocate_one(family, list(ids), target, ctx)
                    injections.append(injection)
                    done.append(Done(key, prior, created, target.pod))
            except BaseException:
                for entry in reversed(done):
                    self._give_back(entry.key, entry.prior, entry.created)
                self._given_back(done)
                self._bump()
                raise
            self._bump()
            kill_point("after-reserve")
            return injections, done

    @staticmethod
    def _single(family: Family, resource: str, requests: list[list[str]]) -> None:
        """A ``.sliced`` and a ``.partitioned`` request is always exactly 1 (supplement §5.3 rules 2
        and 3). The Pod webhook says so for Pods on the scheduling chain; a Pod outside it reaches
        this call unchecked, so the rule is kept here too rather than granting a multi-accelerator
        slice the responders do not model."""
        why = {
            Family.SLICED: "a logical slice request is always a single accelerator; multi-accelerator logical "
            "slicing is not supported yet",
            Family.PARTITIONED: "a partition request is always a single accelerator; request one Pod per instance",
        }.get(family)
        if why is None:
            return
        for ids in requests:
            if len(ids) != 1:
                raise RefusedError(f'{resource}: Invalid value: "{len(ids)}": {why}', Code.INVALID_ARGUMENT)

    def _call_context(self, pods: list[PodSpec]) -> RespondContext:
        """The responder's context for one call: the Pods whose per-slice host records are live, by the
        rule the ledger charges by (:func:`~..respond.live_slice_pods`), from the Pods this call read --
        so a responder's neighbour read sees exactly the slices the hint and the room check count."""
        finished = {p.uid: p.terminal for p in pods}
        live = live_slice_pods(self.manufacturer.name, finished, self._ledger.release_terminated)
        return replace(self._ctx, live_pods=live)

    def _node_pods(self) -> list[PodSpec]:
        try:
            return list(self._pods.node_pods())
        except PodsUnavailableError as exc:
            raise RefusedError(
                f"the node's Pods cannot be read ({exc}), so the container this allocation serves cannot be "
                "identified; it is refused rather than guessed (the kubelet retries)",
                Code.UNAVAILABLE,
            ) from None

    def _kubelet_pods(self) -> list[KubeletPod] | None:
        if not self._ctx.settings.identify_by_kubelet:
            return None
        try:
            return self._pods.kubelet_pods()
        except Exception as exc:  # the edge should answer None; an error is the same "cannot ask"
            log.warning(
                "%s: the kubelet's pod resources could not be read (%s); matching Pods instead",
                self.manufacturer.name,
                exc,
            )
            return None

    def _reserved(self, family: Family) -> dict[tuple[str, str], tuple[str, ...]]:
        return {(c.pod_uid, c.container): c.devices for c in self._ledger.claims.values() if c.family is family}

    def _feasible(self, family: Family, candidate: ident.Candidate, ids: list[str]) -> bool:
        """Could this call serve ``candidate``? (disambiguates identification, never gates it)"""
        key: ClaimKey = (candidate.pod.uid, candidate.container.name, family.value)
        if family is Family.VISIBILITY:
            return self._owner(candidate.pod.uid, candidate.container.name) is not None
        if family is Family.PARTITIONED:
            profile = budgets.partition_profile(self.names, candidate.container.resources)
            return self._place(profile, key, None) is not None
        cards = [self._ledger.cards[c] for c in (self._card_of(t) for t in ids) if c is not None]
        if any(self._ledger.conflict(card.id, family, key) is not None for card in cards):
            return False
        if family is Family.SLICED:
            for card in cards:
                need = budgets.slice_budget(self.names, candidate.container.resources, card.group.memory).units
                if self._ctx.settings.sliced_allocate_gate and self._room_problem(card, need, key) is not None:
                    return False
        return True

    def _allocate_one(
        self, family: Family, ids: list[str], target: ident.Target, ctx: RespondContext
    ) -> tuple[Injection, tuple[ClaimKey, Claim | None, PartitionInstance | None]]:
        key: ClaimKey = (target.pod.uid, target.container.name, family.value)
        prior = self._ledger.claims.get(key)
        label = f"{target.pod.namespace}/{target.pod.name} container {target.container.name}"
        notes = [f"{label}: identified by {target.how}" + (" (already reserved: not charged again)" if prior else "")]
        created: PartitionInstance | None = None
        if prior is not None and set(prior.devices) == set(ids) and self._still_valid(prior):
            claim = prior  # the call retried: the same grant, no second charge
        elif prior is not None and family is Family.PARTITIONED and self._still_valid(prior):
            claim = replace(prior, devices=tuple(ids))  # fungible tokens: the live instance is the grant
        elif family is Family.VISIBILITY:
            claim = self._visibility_claim(target, ids, label)
        elif family is Family.PARTITIONED:
            claim, created = self._partition_claim(target, ids, label, prior)
        else:
            claim = self._card_claim(family, target, ids, label, notes)
        self._ledger.claims[key] = claim
        undo = (key, prior, created)
        try:
            grant = self._grant(claim, target, notes)
            injection = self._responder.respond(grant, ctx)
        except RefusedError as exc:
            log.info(
                "%s: the %s responder refused %s: %s; reservation given back",
                self.manufacturer.name,
                family,
                label,
                exc.message,
            )
            self._give_back(*undo)
            raise
        except Exception as exc:
            log.exception("%s: the responder failed on %s", self.manufacturer.name, label)
            self._give_back(*undo)
            raise RefusedError(
                f"{self.manufacturer.name} responder failed on {label}: {type(exc).__name__}: {exc}", Code.INTERNAL
            ) from None
        injection.log.extend(notes)
        for line in notes:
            log.info("%s", line)
        if family in (Family.SLICED, Family.PARTITIONED):
            self._write_record(target.pod)
        return injection, undo

    def _still_valid(self, claim: Claim) -> bool:
        if claim.family is Family.PARTITIONED:
            return claim.partition is not None and self._live(claim.partition)
        return True

    def _give_back(self, key: ClaimKey, prior: Claim | None, created: PartitionInstance | None) -> None:
        """The early give-back (supplement §1.8 rule 8): the entry goes, a prior claim is restored, and
        a partition this call materialised is destroyed."""
        if prior is None:
            self._ledger.claims.pop(key, None)
        else:
            self._ledger.claims[key] = prior
        if created is not None and (prior is None or prior.partition != created):
            self._destroy(created)

    # -- views for the edge -------------------------------------------------------------------------

    def annotation(self, pod_uid: str) -> str | None:
        """The ``device.gpustack.ai/accelerator.allocated`` value for a Pod (JSON map keyed by container
        name) the edge patches after a grant, outside the lock; ``None`` when it holds nothing here."""
        with self._lock:
            entries = {
                c.container: AllocatedEntry.of(c, self.manufacturer.name)
                for c in self._ledger.claims.values()
                if c.pod_uid == pod_uid and c.family is not Family.VISIBILITY
            }
            return render_allocated(entries) if entries else None

    def status(self) -> list[DevicesAllocationGroup]:
        """The per-accelerator ledger (what the ``Devices`` status carries)."""
        with self._lock:
            return self._ledger.status(self._groups)

    def claims(self) -> list[Claim]:
        with self._lock:
            return sorted(self._ledger.claims.values(), key=lambda c: (c.namespace, c.pod, c.container, c.family.value))

    def update(self, groups: list[DevicesGroup]) -> None:
        """A re-detection: new accelerators, health and modes (claims are kept)."""
        with self._lock:
            self._groups = [g.model_copy(deep=True) for g in groups]
            self._ledger.set_groups(self._groups)
            self._token_cards.clear()
            self._device_lists.clear()
            self._generation += 1
        self._bump()

    @property
    def version(self) -> int:
        """Bumped on every health or ledger change."""
        with self._cond:
            return self._version

    def wait_change(self, version: int, timeout: float) -> int:
        """Block until :attr:`version` differs from ``version`` (or ``timeout``); the new version."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=max(timeout, 0.0))
            return self._version

    def _bump(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()


class _NotInViewError(Exception):
    """No container in the pod view fits the call (the view may lag): refresh it, then try again."""

    def __init__(self, refusal: RefusedError) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


__all__ = [
    "FAMILY_ORDER",
    "NODE_LOCK",
    "Allocator",
    "CdiDecisionLike",
    "CdiResolverLike",
    "DeviceState",
    "FamilyOptions",
    "Pool",
    "parse_numa",
]
