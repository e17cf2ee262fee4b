"""GetPreferredAllocation order and partition packing (supplement §1.9, reference rules §6)."""

from __future__ import annotations

from gpustack_operator.allocator.placement import (
    CardRoom,
    PartitionCard,
    choose_partition,
    free_placements,
    placeable_count,
    preferred_exclusive,
    preferred_shared,
    preferred_sliced,
)
from gpustack_operator.allocator.resources import parse_token
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.allocator.fakes import PROFILES

ONE_G, THREE_G, SEVEN_G = PROFILES


def card_of(token: str) -> str | None:
    parsed = parse_token(token)
    return parsed[1] if parsed else None


def toks(card: str, n: int = 2, group: str = "g") -> list[str]:
    return [f"{group}:{card}:{i:04d}" for i in range(n)]


def rooms(*specs: tuple[str, int, int]) -> dict[str, CardRoom]:
    """(card, remaining, slices) in position order."""
    return {c: CardRoom(c, (0, i), remaining=r, slices=s, slot_limit=8) for i, (c, r, s) in enumerate(specs)}


def sliced(available: list[str], must: list[str], size: int, r: dict[str, CardRoom], units: int | None) -> list[str]:
    return preferred_sliced(available, must, size, rooms=r, card_of=card_of, units=units)


AVAIL = toks("A") + toks("B") + toks("C") + toks("D")


def test_fullest_fitting_card_first() -> None:
    r = rooms(("A", 1_600_000, 0), ("B", 400_000, 3), ("C", 900_000, 1), ("D", 100_000, 5))
    assert sliced(AVAIL, [], 1, r, 300_000) == ["g:B:0000"]
    # the order behind it: fits fullest first (B, C, A), then the ones that do not fit emptiest first (D)
    assert sliced(AVAIL, [], 4, r, 300_000) == ["g:B:0000", "g:C:0000", "g:A:0000", "g:D:0000"]


def test_cards_that_do_not_fit_come_emptiest_first() -> None:
    r = rooms(("A", 100_000, 5), ("B", 200_000, 5), ("C", 50_000, 6))
    assert sliced(toks("A") + toks("B") + toks("C"), [], 3, r, 900_000) == ["g:B:0000", "g:A:0000", "g:C:0000"]


def test_a_card_with_no_free_slot_does_not_fit() -> None:
    r = {
        "A": CardRoom("A", (0, 0), remaining=1_000_000, slices=4, slot_limit=4),  # Hygon: 4 slices, full
        "B": CardRoom("B", (0, 1), remaining=1_600_000, slices=0, slot_limit=4),
    }
    assert sliced(toks("A") + toks("B"), [], 1, r, 100_000) == ["g:B:0000"]


def test_must_include_comes_first() -> None:
    r = rooms(("A", 1_600_000, 0), ("B", 400_000, 3))
    assert sliced(AVAIL[:4], ["g:A:0001"], 2, r, 100_000) == ["g:A:0001", "g:B:0000"]


def test_ties_go_to_the_lower_position_groups_in_spec_order() -> None:
    r = {
        "X": CardRoom("X", (1, 0), remaining=800_000, slices=1, slot_limit=8),
        "Y": CardRoom("Y", (0, 1), remaining=800_000, slices=1, slot_limit=8),
        "Z": CardRoom("Z", (0, 2), remaining=800_000, slices=1, slot_limit=8),
    }
    avail = toks("X", group="h") + toks("Z") + toks("Y")
    assert sliced(avail, [], 3, r, 100_000) == ["g:Y:0000", "g:Z:0000", "h:X:0000"]


def test_unknown_ids_are_dropped_and_only_available_ids_returned() -> None:
    r = rooms(("A", 1_600_000, 0))
    got = sliced(["junk", "g:NOPE:0000", *toks("A")], ["g:NOPE:0001"], 2, r, 1)
    assert got == ["g:A:0000"]


def test_an_unknown_container_fits_any_card_with_room() -> None:
    r = rooms(("A", 1_600_000, 0), ("B", 0, 2), ("C", 10, 7))
    assert sliced(toks("A") + toks("B") + toks("C"), [], 3, r, None) == ["g:C:0000", "g:A:0000", "g:B:0000"]


def test_units_per_card() -> None:
    r = rooms(("A", 500_000, 1), ("B", 900_000, 1))
    got = preferred_sliced(toks("A") + toks("B"), [], 1, rooms=r, card_of=card_of, units={"A": 600_000, "B": 100_000})
    assert got == ["g:B:0000"]


def test_shared_is_one_token_per_distinct_card() -> None:
    r = {c: CardRoom(c, (0, i), remaining=0, shares=s) for i, (c, s) in enumerate([("A", 0), ("B", 3), ("C", 1)])}
    avail = toks("A", 3) + toks("B", 3) + toks("C", 3)
    got = preferred_shared(avail, [], 3, rooms=r, card_of=card_of)
    assert got == ["g:B:0000", "g:C:0000", "g:A:0000"]
    assert len({card_of(t) for t in got}) == 3
    # too few distinct cards: fewer ids, never two on one card
    assert preferred_shared(toks("A", 3), [], 2, rooms=r, card_of=card_of) == ["g:A:0000"]


def test_exclusive_must_include_then_position() -> None:
    r = {c: CardRoom(c, (0, i), remaining=0) for i, c in enumerate("ABC")}
    avail = ["g:C:0000", "g:B:0000", "g:A:0000"]
    assert preferred_exclusive(avail, ["g:C:0000"], 2, rooms=r, card_of=card_of) == ["g:C:0000", "g:A:0000"]


SPEC = st.tuples(st.integers(0, 1_600_000), st.integers(0, 8), st.integers(1, 8))


@given(
    specs=st.lists(SPEC, min_size=1, max_size=6),
    units=st.one_of(st.none(), st.integers(0, 1_600_000)),
    size=st.integers(1, 4),
    seed=st.randoms(use_true_random=False),
)
def test_the_hint_is_deterministic_and_within_available(
    specs: list[tuple[int, int, int]], units: int | None, size: int, seed: object
) -> None:
    r = {f"C{i}": CardRoom(f"C{i}", (0, i), remaining=a, slices=b, slot_limit=c) for i, (a, b, c) in enumerate(specs)}
    avail = [t for c in r for t in toks(c, 2)]
    shuffled = list(avail)
    seed.shuffle(shuffled)  # type: ignore[attr-defined]
    first = sliced(avail, [], size, r, units)
    assert first == sliced(shuffled, [], size, r, units)  # the kubelet's order does not matter
    assert set(first) <= set(avail)
    assert len(first) == min(size, len(r))
    assert len({card_of(t) for t in first}) == len(first)
    # a fitting card is never placed after a non-fitting one
    fits = [r[card_of(t) or ""].fits(units) for t in first]
    assert fits == sorted(fits, reverse=True)


# -- partitions --------------------------------------------------------------------------------------


def test_free_placements_do_not_overlap_placed_instances() -> None:
    assert [p.start for p in free_placements(THREE_G, [(0, 4)])] == [4]
    assert [p.start for p in free_placements(THREE_G, [(1, 1)])] == [4]
    assert free_placements(SEVEN_G, [(6, 1)]) == []
    assert [p.start for p in free_placements(ONE_G, [(0, 4)])] == [4, 5, 6]


def test_placeable_counts() -> None:
    assert placeable_count(ONE_G, []) == 7
    assert placeable_count(THREE_G, []) == 2
    assert placeable_count(THREE_G, [(3, 1)]) == 1
    assert placeable_count(SEVEN_G, [(3, 1)]) == 0


def pcard(
    name: str, pos: int, occupied: tuple[tuple[int, int], ...], profile: object = ONE_G, eligible: bool = True
) -> PartitionCard:
    return PartitionCard(name, (0, pos), occupied, profile, eligible)  # type: ignore[arg-type]


def test_partition_packs_onto_the_most_occupied_card_that_fits() -> None:
    cards = [pcard("A", 0, ()), pcard("B", 1, ((0, 1), (1, 1))), pcard("C", 2, ((0, 4),))]
    chosen = choose_partition(cards)
    assert chosen is not None and chosen[0] == "C" and chosen[1].start == 4
    # 3g.40gb fits B (at 4) and C (at 4); C is the more occupied
    chosen = choose_partition([pcard(c.accelerator, c.position[1], c.occupied, THREE_G) for c in cards])
    assert chosen is not None and chosen[0] == "C"
    # the whole-card profile goes to the pristine card, keeping packing of the rest
    chosen = choose_partition([pcard(c.accelerator, c.position[1], c.occupied, SEVEN_G) for c in cards])
    assert chosen is not None and chosen[0] == "A" and chosen[1].start == 0


def test_partition_ties_by_position_and_skips_ineligible() -> None:
    cards = [pcard("B", 1, ((0, 1),)), pcard("A", 0, ((5, 1),)), pcard("Z", 2, ((0, 1), (1, 1)), eligible=False)]
    chosen = choose_partition(cards)
    assert chosen is not None and chosen[0] == "A" and chosen[1].start == 0
    assert choose_partition([pcard("A", 0, (), None)]) is None
    assert choose_partition([pcard("A", 0, ((0, 8),), SEVEN_G)]) is None


@given(
    rooms=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 1_600_000), st.integers(0, 4)),
        min_size=1,
        max_size=6,
        unique_by=lambda r: (r[0], r[1]),
    ),
    picks=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 40)), max_size=60),
    size=st.integers(1, 4),
    units=st.one_of(st.none(), st.integers(0, 1_600_000)),
)
def test_the_fast_slice_hint_is_the_bucketed_one(
    rooms: list[tuple[int, int, int, int]], picks: list[tuple[int, int]], size: int, units: int | None
) -> None:
    """With nothing to include the hint skips bucketing every offered token; it must answer exactly
    what the bucketed path (_by_card + _fill) answers, for any offered order, duplicates, unknown ids
    and ties of position across groups."""
    from gpustack_operator.allocator import placement

    cards = {f"c{g}-{p}": CardRoom(f"c{g}-{p}", (g, p), remaining=r, slices=s, slot_limit=4) for g, p, r, s in rooms}
    names = [*cards, "unknown"]
    available = [f"grp:{names[i % len(names)]}:{t:04d}" for i, t in picks]

    def card_of(token: str) -> str | None:
        parsed = parse_token(token)
        return parsed[1] if parsed is not None else None

    def fits(room: CardRoom) -> bool:
        return room.fits(units)

    fast = placement._sliced_fast(available, size, rooms=cards, card_of=card_of, fits=fits)
    _known, per_card = placement._by_card(available, cards, card_of)
    order = placement._slice_order([cards[c] for c in per_card], fits)
    slow = placement._fill([], order, per_card=per_card, card_of=card_of, size=size, one_per_card=True)
    assert fast == slow
