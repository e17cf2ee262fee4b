"""``GetPreferredAllocation`` order and partition packing (supplement §1.9, reference rules §6).

Pure over the room it is handed, so identical requests against identical state place identically.

- Sliced: must-include first; then accelerators whose remaining units cover the container's units
  (and that have a free slot), fullest first; then the ones that do not fit, emptiest first; ties by
  position (groups in spec order, then position within the group). One token per accelerator.
- Shared: one token per distinct accelerator (a shared grant of N is N accelerators), accelerators
  already serving shares first (keeps pristine ones whole), then position.
- Exclusive: must-include first, then position.
- Visibility and partitioned: no hint (their tokens are a fungible count).
- Partition packing: the most-occupied accelerator that still has a free placement for the profile,
  ties by position; a free placement is a legal one overlapping no placed instance.

Returned ids are always a subset of ``available`` (unknown ids are dropped), ``size`` of them when
there are enough.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter

from gpustack_operator.ledger.models import AcceleratorPhysicalSlicedProfile, AcceleratorPlacement

Profile = AcceleratorPhysicalSlicedProfile


@dataclass(frozen=True)
class CardRoom:
    """What the hint reads of one accelerator (the same room the allocation gate reads)."""

    accelerator: str
    position: tuple[int, int]
    remaining: int
    slices: int = 0
    slot_limit: int = 0
    shares: int = 0

    def fits(self, units: int | None) -> bool:
        """A free slot and enough units (``None``: the container is unknown -- any room at all)."""
        if self.slices >= self.slot_limit:
            return False
        return self.remaining > 0 if units is None else self.remaining >= units


def _by_card(
    available: Iterable[str], rooms: Mapping[str, CardRoom], card_of: Callable[[str], str | None]
) -> tuple[list[str], dict[str, list[str]]]:
    """The offered tokens this node knows (first occurrence, offered order) and per card (sorted).
    A kubelet offers every free token -- 1,024 for the slices of eight cards -- so this stays in
    comprehensions and C-level dict work."""
    unique = list(dict.fromkeys(available))
    pairs = [(c, t) for t, c in zip(unique, map(card_of, unique), strict=True) if c is not None and c in rooms]
    per_card = {card: [t for _, t in group] for card, group in itertools.groupby(sorted(pairs), key=itemgetter(0))}
    return [t for _, t in pairs], per_card


def _fill(
    must: list[str],
    order: list[str],
    *,
    per_card: dict[str, list[str]],
    card_of: Callable[[str], str | None],
    size: int,
    one_per_card: bool,
) -> list[str]:
    result = list(must)
    used_cards = {card_of(t) for t in must}
    for card in order:
        if len(result) >= size:
            break
        for token in per_card.get(card, []):
            if len(result) >= size:
                break
            if token in result:
                continue
            if one_per_card and card in used_cards:
                break
            result.append(token)
            used_cards.add(card)
    return result


def _must(must_include: Iterable[str], known: list[str]) -> list[str]:
    known_set = set(known)
    out: list[str] = []
    for token in must_include:
        if token in known_set and token not in out:
            out.append(token)
    return out


def preferred_sliced(
    available: list[str],
    must_include: list[str],
    size: int,
    *,
    rooms: Mapping[str, CardRoom],
    card_of: Callable[[str], str | None],
    units: int | Mapping[str, int | None] | None,
) -> list[str]:
    """``units``: what the container needs (per accelerator when their VRAM differs; ``None``: unknown)."""

    def fits(room: CardRoom) -> bool:
        return room.fits(units.get(room.accelerator) if isinstance(units, Mapping) else units)

    if not must_include:
        return _sliced_fast(available, size, rooms=rooms, card_of=card_of, fits=fits)
    known, per_card = _by_card(available, rooms, card_of)
    must = _must(must_include, known)
    must_cards = [c for c in dict.fromkeys(card_of(t) for t in must) if c is not None]
    rest = [rooms[c] for c in per_card if c not in must_cards]
    order = must_cards + _slice_order(rest, fits)
    return _fill(must, order, per_card=per_card, card_of=card_of, size=size, one_per_card=True)


def _slice_order(rooms: list[CardRoom], fits: Callable[[CardRoom], bool]) -> list[str]:
    # reference rules §6: fullest (least Remaining) first, then emptiest first; a tie goes to the
    # lower position -- Remaining alone measures fullness (not the slice count)
    fit = sorted((r for r in rooms if fits(r)), key=lambda r: (r.remaining, r.position))
    unfit = sorted((r for r in rooms if not fits(r)), key=lambda r: (-r.remaining, r.position))
    return [r.accelerator for r in fit + unfit]


def _sliced_fast(
    available: list[str],
    size: int,
    *,
    rooms: Mapping[str, CardRoom],
    card_of: Callable[[str], str | None],
    fits: Callable[[CardRoom], bool],
) -> list[str]:
    """:func:`preferred_sliced` with nothing to include: the same answer -- one token per card, the
    card's lowest, cards in slice order -- without bucketing every token. A kubelet offers every free
    token (1,024 for the slices of eight cards) and takes one."""
    cards = list(map(card_of, available))
    offered = [c for c in dict.fromkeys(cards) if c is not None and c in rooms]
    chosen = _slice_order([rooms[c] for c in offered], fits)[: max(size, 0)]
    return [min(itertools.compress(available, map(card.__eq__, cards))) for card in chosen]


def preferred_shared(
    available: list[str],
    must_include: list[str],
    size: int,
    *,
    rooms: Mapping[str, CardRoom],
    card_of: Callable[[str], str | None],
) -> list[str]:
    known, per_card = _by_card(available, rooms, card_of)
    must = _must(must_include, known)
    must_cards = [c for c in dict.fromkeys(card_of(t) for t in must) if c is not None]
    rest = sorted((rooms[c] for c in per_card if c not in must_cards), key=lambda r: (-r.shares, r.position))
    order = must_cards + [r.accelerator for r in rest]
    return _fill(must, order, per_card=per_card, card_of=card_of, size=size, one_per_card=True)


def preferred_exclusive(
    available: list[str],
    must_include: list[str],
    size: int,
    *,
    rooms: Mapping[str, CardRoom],
    card_of: Callable[[str], str | None],
) -> list[str]:
    known, per_card = _by_card(available, rooms, card_of)
    must = _must(must_include, known)
    order = [r.accelerator for r in sorted((rooms[c] for c in per_card), key=lambda r: r.position)]
    return _fill(must, order, per_card=per_card, card_of=card_of, size=size, one_per_card=False)


# -- partition geometry ------------------------------------------------------------------------------


def legal_placements(profile: Profile) -> list[AcceleratorPlacement]:
    """The profile's legal placements on an empty accelerator; a profile whose detector could not
    read them is taken as ``count`` back-to-back instances of its memory-slice span."""
    if profile.placements:
        return sorted(profile.placements, key=lambda p: (p.start, p.length))
    span = max(profile.memory_slices, 1)
    return [AcceleratorPlacement(start=i * span, length=span) for i in range(max(profile.count, 0))]


def _overlaps(start: int, length: int, occupied: Iterable[tuple[int, int]]) -> bool:
    end = start + max(length, 1)
    return any(start < s + max(n, 1) and s < end for s, n in occupied)


def free_placements(profile: Profile, occupied: list[tuple[int, int]]) -> list[AcceleratorPlacement]:
    """Legal placements overlapping no placed instance, lowest start first."""
    return [p for p in legal_placements(profile) if not _overlaps(p.start, p.length, occupied)]


def placeable_count(profile: Profile, occupied: list[tuple[int, int]]) -> int:
    """How many more instances of ``profile`` fit among the free placements (greedy by earliest end,
    which is optimal for intervals), never more than the profile's own empty-card count."""
    taken = list(occupied)
    count = 0
    for p in sorted(free_placements(profile, occupied), key=lambda p: (p.start + p.length, p.start)):
        if not _overlaps(p.start, p.length, taken):
            taken.append((p.start, p.length))
            count += 1
    return min(count, max(profile.count, 0)) if profile.count > 0 else count


@dataclass(frozen=True)
class PartitionCard:
    """One partitioning accelerator as packing reads it."""

    accelerator: str
    position: tuple[int, int]
    occupied: tuple[tuple[int, int], ...]
    profile: Profile | None  # the requested profile on this accelerator (None: not offered)
    eligible: bool = True  # healthy and held by no other mode


def choose_partition(cards: Iterable[PartitionCard]) -> tuple[str, AcceleratorPlacement] | None:
    """Pack: the most-occupied accelerator with a free placement for the profile, ties by position;
    the free placement with the lowest start. ``None`` when no accelerator can place it."""
    best: tuple[tuple[int, int, tuple[int, int]], str, AcceleratorPlacement] | None = None
    for card in cards:
        if not card.eligible or card.profile is None:
            continue
        free = free_placements(card.profile, list(card.occupied))
        if not free:
            continue
        used = sum(max(n, 1) for _, n in card.occupied)
        key = (-used, -len(card.occupied), card.position)
        if best is None or key < best[0]:
            best = (key, card.accelerator, free[0])
    return None if best is None else (best[1], best[2])
