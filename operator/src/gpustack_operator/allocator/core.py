"""The one object ``deviceplugin/`` talks to: one manufacturer's pools, reservations, health and the
responder call (spec "The device-plugin allocator" .. end; supplement §1.4, §1.7-§1.9).

Every method is synchronous and thread-safe; the gRPC edge calls them from its worker threads.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from pydantic import ValidationError

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator import identify as ident
from gpustack_operator.allocator import placement, recovery
from gpustack_operator.allocator.durable import AllocatedRecord, Done, DurableMixin, kill_point
from gpustack_operator.allocator.ledger import (
    SHARE_UNITS,
    AllocatedEntry,
    Card,
    Claim,
    ClaimKey,
    DevicesAllocationGroup,
    Ledger,
    render_allocated,
)
from gpustack_operator.allocator.pods import (
    ALLOCATED_ANNOTATION,
    AnnotationRecorder,
    KubeletPod,
    PodSource,
    PodSpec,
    PodsUnavailableError,
)
from gpustack_operator.allocator.resources import (
    DEFAULT_PARTITION_KIND,
    SHARED_TOKENS,
    ResourceNames,
    parse_token,
    partitioning,
    tokens,
    tokens_per_card,
)
from gpustack_operator.host import HostPathError
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import (
    Channel,
    Code,
    ContainerRef,
    Family,
    Grant,
    Granted,
    Injection,
    PartitionInstance,
    RefusedError,
    RespondContext,
    Responder,
    SliceBudget,
    live_slice_pods,
    record_problem,
)

log = logging.getLogger(__name__)

NODE_LOCK = threading.RLock()
"""The node-wide allocation lock every :class:`Allocator` of the process shares by default."""

FAMILY_ORDER = (Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.PARTITIONED, Family.VISIBILITY)


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


@dataclass(frozen=True)
class Pool:
    """One resource the plugin registers: its name, family, and whether it offers a hint."""

    resource: str  # "nvidia.com/gpu.sliced", "device.gpustack.ai/nvidia.visibility"
    family: Family
    preferred_allocation: bool  # GetPreferredAllocation offered (sliced, exclusive, shared)


@dataclass(frozen=True)
class DeviceState:
    """One advertised token, as ListAndWatch sends it."""

    id: str
    healthy: bool
    numa: tuple[int, ...] = ()  # empty: no topology (partitioned, or unknown)


class CdiDecisionLike(Protocol):
    """What the CDI resolver (``allocator/cdi.py``) answers for one container."""

    @property
    def channel(self) -> Channel: ...

    @property
    def kind(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


class CdiResolverLike(Protocol):
    def decide(self, device_ids: list[str], runtime_class: str | None) -> CdiDecisionLike: ...


def parse_numa(text: str) -> tuple[int, ...]:
    """``topology.numaAffinity`` (``"0"``, ``"0,1"``, ``"0-1"``) as NUMA ids; empty when unknown."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return ()
        first, last = int(low), int(high) if sep else int(low)
        if last < first or last - first > 1024:
            return ()
        out.update(range(first, last + 1))
    return tuple(sorted(out))


class Allocator(DurableMixin):
    """One manufacturer's device-plugin allocator (see the module docstring)."""

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

    # -- what is advertised ------------------------------------------------------------------------

    def pools(self) -> list[Pool]:
        """The resources to register (a family with no tokens is not registered)."""
        with self._lock:
            out: list[Pool] = []
            for family in FAMILY_ORDER:
                if not self._serves(family):
                    continue
                if not any(tokens_per_card(a, family) for g in self._groups for a in g.accelerators):
                    continue
                out.append(
                    Pool(
                        resource=self.names.resource(family),
                        family=family,
                        preferred_allocation=family in (Family.EXCLUSIVE, Family.SHARED, Family.SLICED),
                    )
                )
            return out

    def _serves(self, family: Family) -> bool:
        return self._options.enabled(family) and family in self._responder.families

    def devices(self, resource: str) -> list[DeviceState]:
        """The pool's tokens and their health. The same list object is returned until something that
        can change it happened (callers may compare by identity to skip an unchanged send)."""
        family = self.names.family_of(resource)
        if family is None or not self._serves(family):
            return []
        with self._lock:
            key = -1 - self._generation if family is Family.VISIBILITY else self.version
            cached = self._device_lists.get(resource)
            if cached is not None and cached[0] == key:
                return cached[1]
            states = self._compute_devices(family)
            self._device_lists[resource] = (key, states)
            return states

    def _compute_devices(self, family: Family) -> list[DeviceState]:
        with self._lock:
            if family is Family.PARTITIONED:
                return self._partition_devices()
            out: list[DeviceState] = []
            for group in self._groups:
                for accelerator in group.accelerators:
                    numa = parse_numa(accelerator.topology.numa_affinity)
                    healthy = family is Family.VISIBILITY or (
                        not accelerator.status.unhealthy and not self._ledger.other_mode_held(accelerator.id, family)
                    )
                    out.extend(DeviceState(t, healthy, numa) for t in tokens(group.id, accelerator, family))
            return out

    def _partition_devices(self) -> list[DeviceState]:
        """Node-level health over a stable id set (supplement §1.9): ``allocated + remaining`` ids are
        Healthy, the ids live allocations hold always among them (and kept even when re-detection
        dropped their accelerator); no NUMA topology."""
        ids = [t for g in self._groups for a in g.accelerators for t in tokens(g.id, a, Family.PARTITIONED)]
        held: list[str] = []
        for claim in self._ledger.claims.values():
            if claim.family is Family.PARTITIONED and self._ledger.charging(claim):
                held.extend(d for d in claim.devices if d not in held)
        for device in held:
            if device not in ids:
                ids.append(device)
        healthy_count = len(held) + self._ledger.partition_room()
        healthy = set(held)
        for token in ids:
            if len(healthy) >= healthy_count:
                break
            healthy.add(token)
        return [DeviceState(t, t in healthy) for t in ids]

    # -- the hint -----------------------------------------------------------------------------------

    def preferred(self, resource: str, available: list[str], must_include: list[str], size: int) -> list[str]:
        family = self.names.family_of(resource)
        if family is None or family in (Family.VISIBILITY, Family.PARTITIONED) or size <= 0:
            return []
        with self._lock:
            pods = self._hint_pods()
            if pods is not None and self._mark_finished(pods):
                self._bump()  # the room Allocate will read: a finished Pod's claims stop charging now
            rooms = self._rooms()
            card_of = self._card_lookup(available, must_include)
            if family is Family.EXCLUSIVE:
                return placement.preferred_exclusive(available, must_include, size, rooms=rooms, card_of=card_of)
            if family is Family.SHARED:
                return placement.preferred_shared(available, must_include, size, rooms=rooms, card_of=card_of)
            units = self._hint_units(resource, size, pods)
            return placement.preferred_sliced(available, must_include, size, rooms=rooms, card_of=card_of, units=units)

    def _hint_pods(self) -> list[PodSpec] | None:
        """The node's Pods for a hint; ``None`` when they cannot be read (the hint then reads the
        ledger as the last call left it)."""
        try:
            return list(self._pods.node_pods())
        except PodsUnavailableError:
            return None

    def _rooms(self, exclude: ClaimKey | None = None) -> dict[str, placement.CardRoom]:
        return {
            card.id: placement.CardRoom(
                accelerator=card.id,
                position=card.position,
                remaining=self._ledger.remaining(card.id, exclude),
                slices=self._ledger.slices(card.id, exclude),
                slot_limit=card.slot_limit,
                shares=self._ledger.shares(card.id, exclude),
            )
            for card in self._ledger.cards.values()
        }

    def _card_lookup(self, *token_lists: list[str]) -> Callable[[str], str | None]:
        """``token -> card`` for the tokens a hint is asked about: the cache's own ``get`` (C speed
        over 1,024 offered tokens) once each is cached, else :meth:`_card_of` itself."""
        cache = self._token_cards
        missing = [t for offered in token_lists for t in offered if t not in cache]
        for token in missing:
            self._card_of(token)
        if all(t in cache for t in missing):
            return cache.get
        return self._card_of  # the cache is full (a flood of unknown ids): look each up

    def _card_of(self, token: str) -> str | None:
        try:
            return self._token_cards[token]
        except KeyError:
            pass
        parsed = parse_token(token)
        card = parsed[1] if parsed is not None and parsed[1] in self._ledger.cards else None
        if len(self._token_cards) < 1 << 16:  # ids the kubelet offers are ours; a flood is not cached
            self._token_cards[token] = card
        return card

    def _hint_units(self, resource: str, size: int, pods: list[PodSpec] | None) -> dict[str, int | None] | None:
        """The units the container the hint is for needs, per accelerator (its VRAM decides them when
        it requests no ``.sliced.units``); ``None`` when it cannot be identified."""
        if pods is None:
            return None
        placeholder = [f"?{i}" for i in range(size)]
        try:
            target = ident.identify(
                resource,
                [placeholder],
                pods=pods,
                kubelet=self._kubelet_pods(),
                reserved=self._reserved(Family.SLICED),
                feasible=lambda c, i: True,
                node=self._node,
            )[0]
        except RefusedError:
            return None
        units: dict[str, int | None] = {}
        for card in self._ledger.cards.values():
            try:
                units[card.id] = budgets.slice_budget(self.names, target.container.resources, card.group.memory).units
            except RefusedError:
                units[card.id] = None
        return units

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

    # -- per family ---------------------------------------------------------------------------------

    def _cards(self, family: Family, ids: list[str]) -> list[Card]:
        cards: list[Card] = []
        resource = self.names.resource(family)
        for token in ids:
            parsed = parse_token(token)
            card = self._ledger.cards.get(parsed[1]) if parsed is not None else None
            if parsed is None or card is None:
                raise RefusedError(
                    f"device {token} is not one this plugin advertises for {resource} (an accelerator no longer "
                    "detected?); the kubelet re-reads the device list",
                    Code.NOT_FOUND,
                )
            if parsed[2] >= tokens_per_card(card.accelerator, family):
                raise RefusedError(self._where(card) + f" does not serve {resource} (its mode changed?)")
            if card.accelerator.status.unhealthy:
                raise RefusedError(self._where(card) + " is unhealthy; its tokens are withdrawn")
            if card in cards:
                if family is Family.EXCLUSIVE:
                    continue
                raise RefusedError(
                    f"two {resource} tokens on " + self._where(card) + f": a {family} grant of {len(ids)} is "
                    f"{len(ids)} distinct accelerators; this node has too few free ones for it"
                )
            cards.append(card)
        return sorted(cards, key=lambda c: c.accelerator.index)

    def _where(self, card: Card) -> str:
        return f"accelerator {card.id} ({card.group.id} index {card.accelerator.index})"

    def _cross_mode(self, family: Family, cards: Iterable[Card], key: ClaimKey) -> None:
        for card in cards:
            holder = self._ledger.conflict(card.id, family, key)
            if holder is not None:
                raise RefusedError(
                    self._where(card) + f" is held {holder.family} by {holder.label}; a {family} grant cannot "
                    "share it (its tokens are advertised Unhealthy until that Pod is gone)"
                )

    def _room_problem(self, card: Card, units: int, key: ClaimKey) -> str | None:
        """Why a logical slice of ``units`` does not fit ``card`` (the room the hint reads), else None."""
        slices, limit = self._ledger.slices(card.id, key), card.slot_limit
        if slices >= limit:
            return self._where(card) + f" has no free slice slot ({slices} of {limit} hosted)"
        remaining = self._ledger.remaining(card.id, key)
        if remaining < units:
            return self._where(card) + f": the slice needs {units} units, {remaining} remain"
        return None

    def _card_claim(self, family: Family, target: ident.Target, ids: list[str], label: str, notes: list[str]) -> Claim:
        key: ClaimKey = (target.pod.uid, target.container.name, family.value)
        cards = self._cards(family, ids)
        self._cross_mode(family, cards, key)
        units = 0
        slice_budget: SliceBudget | None = None
        if family is Family.SHARED:
            for card in cards:
                if self._ledger.shares(card.id, key) >= SHARED_TOKENS:
                    raise RefusedError(self._where(card) + f" already serves {SHARED_TOKENS} shares")
            units = SHARE_UNITS
        if family is Family.SLICED:
            slice_budget = budgets.slice_budget(self.names, target.container.resources, cards[0].group.memory, label)
            units = slice_budget.units
            for card in cards:
                problem = self._room_problem(card, units, key)
                if problem is None:
                    continue
                if self._ctx.settings.sliced_allocate_gate:
                    raise RefusedError(f"{label}: {problem}; no candidate fits that accelerator")
                notes.append(f"{label}: {problem}; allocated anyway (the sliced allocate gate is off)")
        return Claim(
            pod_uid=target.pod.uid,
            namespace=target.pod.namespace,
            pod=target.pod.name,
            container=target.container.name,
            family=family,
            accelerators=tuple(c.id for c in cards),
            devices=tuple(ids),
            units=units,
            budget=slice_budget,
        )

    def _place(self, profile: str, key: ClaimKey, only: str | None) -> tuple[str, int, int] | None:
        """(accelerator, start, length) for ``profile`` by packing (only ``only`` when given)."""
        cards = []
        for card in self._ledger.cards.values():
            if not partitioning(card.accelerator) or (only is not None and card.id != only):
                continue
            cards.append(
                placement.PartitionCard(
                    accelerator=card.id,
                    position=card.position,
                    occupied=tuple(self._ledger.placed(card.id, key)),
                    profile=self._ledger.profile(card.id, profile),
                    eligible=not card.accelerator.status.unhealthy
                    and self._ledger.conflict(card.id, Family.PARTITIONED, key) is None,
                )
            )
        chosen = placement.choose_partition(cards)
        return None if chosen is None else (chosen[0], chosen[1].start, chosen[1].length)

    def _partition_claim(
        self, target: ident.Target, ids: list[str], label: str, prior: Claim | None
    ) -> tuple[Claim, PartitionInstance | None]:
        key: ClaimKey = (target.pod.uid, target.container.name, Family.PARTITIONED.value)
        profile = budgets.partition_profile(self.names, target.container.resources, label)
        partitioner = self._ctx.partitioner
        if partitioner is None:
            raise RefusedError(
                f"{label}: this {self.manufacturer.name} device manager has no partition capability (no "
                "partitioner was loaded), so a partition cannot be materialised; check its start-up log"
            )
        only = prior.accelerators[0] if prior is not None and prior.accelerators else None
        spot = self._place(profile, key, only)
        if spot is None:
            where = f" on its earlier accelerator {only}" if only else ""
            raise RefusedError(
                f"{label}: no {self.manufacturer.name} accelerator on this node can place a {profile} partition"
                f"{where}: each partitioning accelerator is full for it, lacks the profile, or is held in another mode"
            )
        card = self._ledger.cards[spot[0]]
        instance = partitioner.create(card.group, card.accelerator, profile, spot[1])
        if instance.size <= 0:
            instance = replace(instance, start=spot[1], size=spot[2])
        offered = self._ledger.profile(card.id, profile)
        units = budgets.partition_units(
            self.names, target.container.resources, offered.memory_mib if offered else 0, card.group.memory, label
        )
        claim = Claim(
            pod_uid=target.pod.uid,
            namespace=target.pod.namespace,
            pod=target.pod.name,
            container=target.container.name,
            family=Family.PARTITIONED,
            accelerators=(card.id,),
            devices=tuple(ids),
            units=units,
            partition=instance,
            profile=profile,
        )
        return claim, instance

    def _owner(self, pod_uid: str, container: str) -> Claim | None:
        owners = [
            c
            for c in self._ledger.claims.values()
            if c.pod_uid == pod_uid and c.container != container and c.family is not Family.VISIBILITY
        ]
        return min(owners, key=lambda c: (c.container, c.family.value)) if owners else None

    def _visibility_claim(self, target: ident.Target, ids: list[str], label: str) -> Claim:
        owner = self._owner(target.pod.uid, target.container.name)
        if owner is None:
            raise RefusedError(
                f"{label}: no other container of this Pod holds a {self.manufacturer.name} accelerator, so the "
                f"{self.names.visibility} grant cannot be substantiated (the owner, e.g. main, is allocated first)"
            )
        if owner.family is Family.PARTITIONED and (owner.partition is None or not self._live(owner.partition)):
            raise RefusedError(
                f"{label}: the partition {owner.partition.uuid if owner.partition else '(unrecorded)'} of "
                f"{owner.label} is not live, so the sidecar's visibility cannot be substantiated"
            )
        if len(owner.accelerators) != len(ids):
            log.warning(
                "%s: requests %d %s but %s holds %d accelerators; granting exactly the owner's",
                label,
                len(ids),
                self.names.visibility,
                owner.label,
                len(owner.accelerators),
            )
        return Claim(
            pod_uid=target.pod.uid,
            namespace=target.pod.namespace,
            pod=target.pod.name,
            container=target.container.name,
            family=Family.VISIBILITY,
            accelerators=owner.accelerators,
            devices=tuple(ids),
            partition=owner.partition if owner.family is Family.PARTITIONED else None,
            owner_family=owner.family,
        )

    def _live(self, instance: PartitionInstance) -> bool:
        partitioner = self._ctx.partitioner
        if partitioner is None:
            return False
        try:
            return bool(partitioner.live(instance))
        except RefusedError as exc:
            log.warning(
                "%s: partition %s could not be verified: %s", self.manufacturer.name, instance.uuid, exc.message
            )
            return False

    def _destroy(self, instance: PartitionInstance) -> None:
        partitioner = self._ctx.partitioner
        if partitioner is None:
            return
        try:
            partitioner.destroy(instance)
        except Exception as exc:  # logged; the reclaimer retries once the Pod is gone
            log.error("%s: partition %s could not be destroyed: %s", self.manufacturer.name, instance.uuid, exc)

    # -- the grant ----------------------------------------------------------------------------------

    def _grant(self, claim: Claim, target: ident.Target, notes: list[str]) -> Grant:
        missing = [a for a in claim.accelerators if a not in self._ledger.cards]
        if missing:
            raise RefusedError(
                f"{claim.label}: accelerator {missing[0]} is no longer detected on this node", Code.NOT_FOUND
            )
        cards = sorted((self._ledger.cards[a] for a in claim.accelerators), key=lambda c: c.accelerator.index)
        channel, kind = Channel.ENVVAR, None
        partition_backed = claim.family is Family.PARTITIONED or (
            claim.family is Family.VISIBILITY and claim.owner_family is Family.PARTITIONED
        )
        if not partition_backed:
            if self._cdi is None:
                notes.append(f"{claim.label}: channel envvar (no CDI resolver)")
            else:
                decision = self._cdi.decide([c.id for c in cards], target.pod.runtime_class)
                channel, kind = decision.channel, decision.kind
                notes.append(f"{claim.label}: channel {channel}: {decision.reason}")
        return Grant(
            manufacturer=self.manufacturer.name,
            family=claim.family,
            accelerators=tuple(Granted(c.group, c.accelerator) for c in cards),
            container=ContainerRef(
                namespace=target.pod.namespace,
                pod=target.pod.name,
                pod_uid=target.pod.uid,
                container=target.container.name,
                env=dict(target.container.env),
                runtime_class=target.pod.runtime_class,
            ),
            budget=claim.budget,
            partition=claim.partition,
            owner_family=claim.owner_family,
            channel=channel,
            cdi_kind=kind,
        )

    def _write_record(self, pod: PodSpec) -> None:
        """``<pods_dir>/<uid>/allocation.json`` as ledger/podrecords.py reads it."""
        held = [
            c
            for c in self._ledger.claims.values()
            if c.pod_uid == pod.uid and c.family in (Family.SLICED, Family.PARTITIONED)
        ]
        if not held:
            self._forget_record_entries(pod)
            return
        accelerators = sorted({a for c in held for a in c.accelerators})
        record = AllocatedRecord(
            pod=pod.key,
            manufacturer=self.manufacturer.name,
            mode=held[0].family.value,
            accelerators=accelerators,
            allocated={c.container: AllocatedEntry.of(c, self.manufacturer.name) for c in held},
        )
        directory = self._ctx.pod_dir(pod.uid)
        try:
            self._ctx.host.makedirs(directory)
            self._ctx.host.write_text(
                f"{directory}/allocation.json", record.model_dump_json(by_alias=True, exclude_none=True) + "\n"
            )
        except HostPathError as exc:
            log.error("%s: the allocation record of %s could not be written: %s", self.manufacturer.name, pod.key, exc)

    # -- release and recovery -----------------------------------------------------------------------

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
