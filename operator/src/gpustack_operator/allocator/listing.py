"""What an :class:`~gpustack_operator.allocator.core.Allocator` advertises, and its hint (issue 18):
the pools it registers, each pool's tokens and their health as ListAndWatch sends them (kept until a
change), and the ``GetPreferredAllocation`` order over the same room ``Allocate`` reads (supplement
§1.9). Kept apart from ``core.py`` so the decision path reads alone: nothing here reserves.

:class:`ListingMixin` is mixed into ``Allocator``; it uses the allocator's state and the few methods
named under ``TYPE_CHECKING`` below (defined in ``core.py`` and ``reconcile.py``). :class:`Pool`,
:class:`DeviceState` and :func:`parse_numa` are re-exported by ``core.py``, where callers import them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator import identify as ident
from gpustack_operator.allocator import placement
from gpustack_operator.allocator.ledger import ClaimKey, Ledger
from gpustack_operator.allocator.pods import KubeletPod, PodSource, PodSpec, PodsUnavailableError
from gpustack_operator.allocator.resources import ResourceNames, parse_token, tokens, tokens_per_card
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.respond import Family, RefusedError

FAMILY_ORDER = (Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.PARTITIONED, Family.VISIBILITY)


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


class ListingMixin:
    """See the module docstring."""

    if TYPE_CHECKING:  # what core.Allocator provides
        names: ResourceNames
        _lock: threading.RLock
        _groups: list[DevicesGroup]
        _ledger: Ledger
        _pods: PodSource
        _node: str | None
        _token_cards: dict[str, str | None]
        _device_lists: dict[str, tuple[int, list[DeviceState]]]
        _generation: int

        @property
        def version(self) -> int: ...

        def _serves(self, family: Family) -> bool: ...

        def _bump(self) -> None: ...

        def _kubelet_pods(self) -> list[KubeletPod] | None: ...

        def _reserved(self, family: Family) -> dict[tuple[str, str], tuple[str, ...]]: ...

        def _mark_finished(self, pods: list[PodSpec]) -> bool: ...

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


__all__ = ["FAMILY_ORDER", "DeviceState", "ListingMixin", "Pool", "parse_numa"]
