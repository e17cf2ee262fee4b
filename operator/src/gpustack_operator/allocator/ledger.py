"""Units, credits and the per-accelerator ledger (reference rules §5; supplement §1.3, §1.8, §9.2).

One accelerator is ``D`` = ``ResourceMaxUnits`` = ``CreditsPerCard`` = 1,600,000 units. A token costs
(reference rules §5 "Ledger cost per token"): exclusive ``D``, shared ``D/10``, sliced and partitioned
the container's own units (its ``.sliced.units`` / ``.partitioned.units``, else derived from its memory
budget by :func:`memory_mib_to_units`). Visibility costs nothing (supplement §1.7).

:class:`Ledger` is the in-process accounting over :class:`Claim` s keyed by (Pod UID, container)
(supplement §1.8 rule 6): which mode holds each accelerator, its remaining units, the slices it hosts
and who holds it. :meth:`Ledger.status` renders it as the ``AcceleratorAllocation`` models the
``Devices`` status carries (supplement §9.2; ``allocatedSlices`` from the Discovery text).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpustack_operator.allocator import placement
from gpustack_operator.allocator.resources import SHARED_TOKENS
from gpustack_operator.ledger.models import Accelerator, CamelModel, DevicesGroup
from gpustack_operator.manufacturers.respond import Family, PartitionInstance, SliceBudget, charges

D = 1_600_000  # ResourceMaxUnits = CreditsPerCard: one whole accelerator
SHARE_UNITS = D // SHARED_TOKENS  # one share of a shared accelerator

ClaimKey = tuple[str, str, str]  # (pod uid, container, family): a reservation (supplement §1.8 rule 6)


def memory_mib_to_units(mib: int, vram_mib: int) -> int:
    """``MemoryMibToUnits`` = floor(mib·D/vram) (reference rules §5: 10240 of 81920 → 200000)."""
    if vram_mib <= 0:
        raise ValueError(f"an accelerator VRAM of {vram_mib} MiB cannot convert memory into units")
    return (max(mib, 0) * D) // vram_mib


def cards_to_credits(cards: int | Decimal) -> int:
    """Cards → credits is × D (``1`` → ``1600k``); a fractional product is ceiled."""
    return int((Decimal(cards) * D).to_integral_value(rounding=ROUND_CEILING))


def credits_to_cards(credits: int | Decimal) -> Decimal:
    """Credits → cards, fraction kept at micro-card precision (reference rules §5): fractional
    credits are ceiled to a whole credit first (Kueue's ``ResourceValue`` quantisation), then divided
    by D and truncated to 1e-6 (``1600k`` → 1, ``200k`` → 0.125, ``3125`` → 0.001953,
    ``199999.5`` → 0.125). A fraction, not a floor, so a slice's credits read back as its card share."""
    whole = int(Decimal(credits).to_integral_value(rounding=ROUND_CEILING))
    micro = abs(whole) * 1_000_000 // D
    return Decimal(micro if whole >= 0 else -micro).scaleb(-6).normalize() + 0


def sliced_units(quantity: int, partitions: int) -> int:
    """``.sliced.units`` = q × (D / partitions), partitions a power of two in [2, 512]
    (1 card sliced 8 → 200k)."""
    if partitions < 2 or partitions > 512 or partitions & (partitions - 1):
        raise ValueError(f"a card is sliced into a power of two in [2, 512] partitions, not {partitions}")
    return quantity * (D // partitions)


def cost_per_token(family: Family, units: int = 0) -> int:
    """What one accelerator of a grant of ``family`` is charged (reference rules §5)."""
    if family is Family.EXCLUSIVE:
        return D
    if family is Family.SHARED:
        return SHARE_UNITS
    if family in (Family.SLICED, Family.PARTITIONED):
        return units
    return 0


# -- claims ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What one container holds of one manufacturer: the in-process reservation (or one recovered
    from the durable annotation, ``recovered``). ``units`` is the per-accelerator cost for sliced and
    partitioned grants; ``devices`` the kubelet's token ids it was granted for."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    family: Family
    accelerators: tuple[str, ...]
    devices: tuple[str, ...] = ()
    units: int = 0
    budget: SliceBudget | None = None
    partition: PartitionInstance | None = None
    profile: str | None = None
    owner_family: Family | None = None  # visibility: what the owner holds
    terminal: bool = False
    recovered: bool = False

    @property
    def key(self) -> ClaimKey:
        return (self.pod_uid, self.container, self.family.value)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.pod} container {self.container}"

    def cost(self) -> int:
        return cost_per_token(self.family, self.units)

    def with_terminal(self, terminal: bool) -> Claim:
        return self if terminal == self.terminal else replace(self, terminal=terminal)


# -- the status models -------------------------------------------------------------------------------


class AllocationMode(StrEnum):
    """An accelerator's mode in the ledger status (visibility is internal and never a mode)."""

    FREE = "free"
    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"


class ProfileCount(CamelModel):
    name: str
    count: int


class Holder(CamelModel):
    """One container charging an accelerator."""

    pod: str  # namespace/name
    pod_uid: str
    container: str
    mode: AllocationMode
    units: int
    profile: str | None = None


class AcceleratorAllocation(CamelModel):
    """One accelerator's allocation state (``status.groups[].accelerators[]``)."""

    id: str
    index: int
    mode: AllocationMode = AllocationMode.FREE
    allocated: int = 0
    remaining: int = D
    allocated_slices: int = 0
    allocated_profiles: list[ProfileCount] = Field(default_factory=list)
    remaining_profiles: list[ProfileCount] = Field(default_factory=list)
    holders: list[Holder] = Field(default_factory=list)


class DevicesAllocationGroup(CamelModel):
    id: str
    manufacturer: str
    accelerators: list[AcceleratorAllocation] = Field(default_factory=list)


# -- the ledger --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Card:
    """An accelerator with where it sits: ``position`` = (group order, position within the group)."""

    group: DevicesGroup
    accelerator: Accelerator
    position: tuple[int, int]

    @property
    def id(self) -> str:
        return self.accelerator.id

    @property
    def slot_limit(self) -> int:
        sliced = self.accelerator.status.logical_sliced
        return max(sliced.count, 0) if sliced is not None else 0


@dataclass
class Ledger:
    """The accounting over the claims of one manufacturer. Not thread-safe: the allocator holds the
    node lock around every use."""

    manufacturer: str
    release_terminated: bool = True
    cards: dict[str, Card] = field(default_factory=dict)
    claims: dict[ClaimKey, Claim] = field(default_factory=dict)

    @classmethod
    def of(cls, manufacturer: str, groups: Iterable[DevicesGroup], release_terminated: bool = True) -> Ledger:
        ledger = cls(manufacturer=manufacturer, release_terminated=release_terminated)
        ledger.set_groups(groups)
        return ledger

    def set_groups(self, groups: Iterable[DevicesGroup]) -> None:
        self.cards = {}
        for gi, group in enumerate(groups):
            for ai, accelerator in enumerate(group.accelerators):
                self.cards.setdefault(accelerator.id, Card(group, accelerator, (gi, ai)))

    # -- charging -------------------------------------------------------------------------------------

    def charging(self, claim: Claim) -> bool:
        """Does ``claim`` charge its accelerators? :func:`~..respond.charges`, the rule the responders
        read their per-slice host records by too: visibility never does; a finished Pod's exclusive,
        shared and logical-slice claims stop charging (supplement §1.8 rule 7) unless the switch is
        off -- partitions and MetaX/Cambricon slices stay until the Pod is gone."""
        return charges(self.manufacturer, claim.family, claim.terminal, self.release_terminated)

    def holders(self, accelerator: str, exclude: ClaimKey | None = None) -> list[Claim]:
        """The charging claims on ``accelerator`` other than ``exclude``, in a stable order."""
        found = [
            c for k, c in self.claims.items() if k != exclude and accelerator in c.accelerators and self.charging(c)
        ]
        return sorted(found, key=lambda c: (c.namespace, c.pod, c.container, c.pod_uid))

    def used(self, accelerator: str, exclude: ClaimKey | None = None) -> int:
        return sum(c.cost() for c in self.holders(accelerator, exclude))

    def remaining(self, accelerator: str, exclude: ClaimKey | None = None) -> int:
        """Remaining units, clamped at 0 (an ungated over-commit shows as 0, never negative)."""
        return max(0, D - self.used(accelerator, exclude))

    def slices(self, accelerator: str, exclude: ClaimKey | None = None) -> int:
        return sum(1 for c in self.holders(accelerator, exclude) if c.family is Family.SLICED)

    def shares(self, accelerator: str, exclude: ClaimKey | None = None) -> int:
        return sum(1 for c in self.holders(accelerator, exclude) if c.family is Family.SHARED)

    def mode(self, accelerator: str, exclude: ClaimKey | None = None) -> AllocationMode:
        holders = self.holders(accelerator, exclude)
        return AllocationMode(holders[0].family.value) if holders else AllocationMode.FREE

    def conflict(self, accelerator: str, family: Family, exclude: ClaimKey | None = None) -> Claim | None:
        """The claim that forbids ``family`` on ``accelerator`` (the cross-mode invariant, supplement
        §1.8 rule 9; an exclusive tenant also excludes a second exclusive one), else ``None``."""
        if family is Family.VISIBILITY:
            return None
        for holder in self.holders(accelerator, exclude):
            if holder.family is not family or family is Family.EXCLUSIVE:
                return holder
        return None

    def other_mode_held(self, accelerator: str, family: Family) -> bool:
        """Is ``accelerator`` held by a mode other than ``family`` (its tokens go Unhealthy)?"""
        return any(c.family is not family for c in self.holders(accelerator))

    # -- partitions -----------------------------------------------------------------------------------

    def placed(self, accelerator: str, exclude: ClaimKey | None = None) -> list[tuple[int, int]]:
        """The (start, size) memory-slice ranges the charging partitions on ``accelerator`` occupy."""
        out = []
        for claim in self.holders(accelerator, exclude):
            if claim.family is Family.PARTITIONED and claim.partition is not None:
                out.append((claim.partition.start, self._size(accelerator, claim)))
        return out

    def _size(self, accelerator: str, claim: Claim) -> int:
        if claim.partition is not None and claim.partition.size > 0:
            return claim.partition.size
        profile = self.profile(accelerator, claim.profile or (claim.partition.profile if claim.partition else ""))
        return max(profile.memory_slices, 1) if profile is not None else 1

    def profile(self, accelerator: str, name: str) -> placement.Profile | None:
        card = self.cards.get(accelerator)
        physical = card.accelerator.status.physical_sliced if card is not None else None
        if physical is None:
            return None
        return next((p for p in physical.profiles if p.name == name), None)

    def remaining_profiles(self, accelerator: str) -> list[ProfileCount]:
        card = self.cards.get(accelerator)
        physical = card.accelerator.status.physical_sliced if card is not None else None
        if physical is None or card is None or card.accelerator.status.unhealthy:
            return []
        occupied = self.placed(accelerator)
        return [ProfileCount(name=p.name, count=placement.placeable_count(p, occupied)) for p in physical.profiles]

    def partition_room(self) -> int:
        """Node-level remaining partition room: per healthy partitioning accelerator, the most
        instances of any one profile still placeable (supplement §1.9 "pure node-level count")."""
        room = 0
        for card in self.cards.values():
            remaining = self.remaining_profiles(card.id)
            room += max((p.count for p in remaining), default=0)
        return room

    # -- status ---------------------------------------------------------------------------------------

    def status(self, groups: Iterable[DevicesGroup]) -> list[DevicesAllocationGroup]:
        out = []
        for group in groups:
            accelerators = []
            for accelerator in sorted(group.accelerators, key=lambda a: a.index):
                holders = self.holders(accelerator.id)
                allocated = sum(c.cost() for c in holders)
                profiles: dict[str, int] = {}
                for c in holders:
                    if c.family is Family.PARTITIONED:
                        name = c.profile or (c.partition.profile if c.partition else "")
                        profiles[name] = profiles.get(name, 0) + 1
                accelerators.append(
                    AcceleratorAllocation(
                        id=accelerator.id,
                        index=accelerator.index,
                        mode=self.mode(accelerator.id),
                        allocated=allocated,
                        remaining=max(0, D - allocated),
                        allocated_slices=sum(1 for c in holders if c.family is Family.SLICED),
                        allocated_profiles=[ProfileCount(name=n, count=k) for n, k in sorted(profiles.items())],
                        remaining_profiles=self.remaining_profiles(accelerator.id),
                        holders=[
                            Holder(
                                pod=f"{c.namespace}/{c.pod}",
                                pod_uid=c.pod_uid,
                                container=c.container,
                                mode=AllocationMode(c.family.value),
                                units=c.cost(),
                                profile=c.profile,
                            )
                            for c in holders
                        ],
                    )
                )
            out.append(DevicesAllocationGroup(id=group.id, manufacturer=group.manufacturer, accelerators=accelerators))
        return out


def mark_terminal(claims: Mapping[ClaimKey, Claim], terminal_uids: set[str]) -> dict[ClaimKey, Claim]:
    """The claims with ``terminal`` following the Pods' phases."""
    return {k: c.with_terminal(c.pod_uid in terminal_uids) for k, c in claims.items()}


# -- the durable annotation --------------------------------------------------------------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class AllocatedPartition(_Lenient):
    accelerator: str
    profile: str
    uuid: str
    start: int = 0
    size: int = 0
    device_nodes: list[str] = Field(default_factory=list)
    registry_file: str | None = None
    handle: dict[str, int | str] = Field(default_factory=dict)

    def instance(self) -> PartitionInstance:
        return PartitionInstance(
            accelerator=self.accelerator,
            profile=self.profile,
            uuid=self.uuid,
            start=self.start,
            size=self.size,
            device_nodes=tuple(self.device_nodes),
            registry_file=self.registry_file,
            handle=dict(self.handle),
        )


class AllocatedEntry(_Lenient):
    """One container's entry in the Pod's ``device.gpustack.ai/accelerator.allocated`` annotation (a
    JSON map keyed by container name, supplement §1.8 rule 6): what lets a sidecar, a retried
    partition and the ledger recover a claim after a Device Manager restart."""

    manufacturer: str
    mode: Family
    accelerators: list[str] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)
    units: int = 0
    profile: str | None = None
    partition: AllocatedPartition | None = None

    @classmethod
    def of(cls, claim: Claim, manufacturer: str) -> AllocatedEntry:
        part = claim.partition
        return cls(
            manufacturer=manufacturer,
            mode=claim.family,
            accelerators=list(claim.accelerators),
            devices=list(claim.devices),
            units=claim.units,
            profile=claim.profile,
            partition=None
            if part is None
            else AllocatedPartition(
                accelerator=part.accelerator,
                profile=part.profile,
                uuid=part.uuid,
                start=part.start,
                size=part.size,
                device_nodes=list(part.device_nodes),
                registry_file=part.registry_file,
                handle=dict(part.handle),
            ),
        )


def parse_allocated(raw: str | None) -> dict[str, AllocatedEntry]:
    """The annotation's entries by container name; an unreadable annotation or entry is skipped
    (logged by the caller), never an error: it is a recovery aid, the reservation is the record."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, AllocatedEntry] = {}
    for container, entry in data.items():
        try:
            out[str(container)] = AllocatedEntry.model_validate(entry)
        except ValidationError:
            continue
    return out


def render_allocated(entries: Mapping[str, AllocatedEntry]) -> str:
    return json.dumps(
        {
            name: entry.model_dump(by_alias=True, exclude_none=True, mode="json")
            for name, entry in sorted(entries.items())
        },
        sort_keys=True,
        separators=(",", ":"),
    )
