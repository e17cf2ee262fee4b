"""The claims an :class:`~gpustack_operator.allocator.core.Allocator` builds and the grant it hands
the responder (issue 18): the per-family checks (tokens to accelerators, the cross-mode invariant,
the shared and sliced gates), partition packing and materialising (supplement §1.9), the visibility
sidecar's owner, the :class:`~gpustack_operator.manufacturers.respond.Grant` (CDI channel included)
and the node-local ``allocation.json`` record. Kept apart from ``core.py``, which decides *when* a
claim is built, reserved and given back; this file says *what* the claim and the grant are.

:class:`ClaimsMixin` is mixed into ``Allocator``; it uses the allocator's state and the few methods
named under ``TYPE_CHECKING`` below (defined in ``durable.py``). The CDI resolver's protocols live
here (the grant is their one reader) and are re-exported by ``core.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator import identify as ident
from gpustack_operator.allocator import placement
from gpustack_operator.allocator.durable import AllocatedRecord
from gpustack_operator.allocator.ledger import SHARE_UNITS, AllocatedEntry, Card, Claim, ClaimKey, Ledger
from gpustack_operator.allocator.pods import PodSpec
from gpustack_operator.allocator.resources import (
    SHARED_TOKENS,
    ResourceNames,
    parse_token,
    partitioning,
    tokens_per_card,
)
from gpustack_operator.host import HostPathError
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import (
    Channel,
    Code,
    ContainerRef,
    Family,
    Grant,
    Granted,
    PartitionInstance,
    RefusedError,
    RespondContext,
    SliceBudget,
)

log = logging.getLogger("gpustack_operator.allocator.core")  # one logger for the whole allocator


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


class ClaimsMixin:
    """See the module docstring."""

    if TYPE_CHECKING:  # what core.Allocator provides
        manufacturer: Resolved
        names: ResourceNames
        _ledger: Ledger
        _ctx: RespondContext
        _cdi: CdiResolverLike | None

        def _forget_record_entries(self, pod: PodSpec) -> None: ...

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


__all__ = ["CdiDecisionLike", "CdiResolverLike", "ClaimsMixin"]
