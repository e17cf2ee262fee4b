"""Units, credits and per-accelerator accounting (reference rules §5; supplement §1.8 rule 7)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from gpustack_operator.allocator.ledger import (
    AllocatedEntry,
    AllocationMode,
    Claim,
    D,
    Ledger,
    cards_to_credits,
    cost_per_token,
    credits_to_cards,
    memory_mib_to_units,
    parse_allocated,
    render_allocated,
    sliced_units,
)
from gpustack_operator.manufacturers.respond import Family, PartitionInstance

from tests.unit.allocator.fakes import card, group, mig_card


def test_one_card_is_1600k_units() -> None:
    assert D == 1_600_000


@pytest.mark.parametrize(
    ("mib", "vram", "units"),
    [(10240, 81920, 200_000), (81920, 81920, D), (12282, 24564, 800_000), (1, 81920, 19), (0, 81920, 0)],
)
def test_memory_mib_to_units(mib: int, vram: int, units: int) -> None:
    assert memory_mib_to_units(mib, vram) == units


def test_memory_mib_to_units_refuses_unknown_vram() -> None:
    with pytest.raises(ValueError, match="VRAM"):
        memory_mib_to_units(10, 0)


@pytest.mark.parametrize(("cards", "credits"), [(1, 1_600_000), (2, 3_200_000), (Decimal("0.5"), 800_000), (0, 0)])
def test_cards_to_credits(cards: int | Decimal, credits: int) -> None:
    assert cards_to_credits(cards) == credits


@pytest.mark.parametrize(
    ("credits", "cards"),
    [(1_600_000, 1), (3_200_000, 2), (Decimal("1599999.5"), 1), (1_599_999, Decimal("0.999999"))],
)
def test_credits_to_cards_ceils_fractional_credits_first(credits: int | Decimal, cards: int | Decimal) -> None:
    assert credits_to_cards(credits) == cards


@pytest.mark.parametrize(
    ("q", "partitions", "units"), [(1, 8, 200_000), (1, 2, 800_000), (3, 512, 9375), (2, 4, 800_000)]
)
def test_sliced_units(q: int, partitions: int, units: int) -> None:
    assert sliced_units(q, partitions) == units


@pytest.mark.parametrize("partitions", [0, 1, 3, 6, 1024])
def test_sliced_units_needs_a_power_of_two_in_range(partitions: int) -> None:
    with pytest.raises(ValueError, match="power of two"):
        sliced_units(1, partitions)


@pytest.mark.parametrize(
    ("family", "units", "cost"),
    [
        (Family.EXCLUSIVE, 5, D),
        (Family.SHARED, 5, 160_000),
        (Family.SLICED, 200_000, 200_000),
        (Family.PARTITIONED, 400_000, 400_000),
        (Family.VISIBILITY, 9, 0),
    ],
)
def test_cost_per_token(family: Family, units: int, cost: int) -> None:
    assert cost_per_token(family, units) == cost


def claim(
    container: str, family: Family, acc: str, units: int = 0, *, terminal: bool = False, uid: str = "u1"
) -> Claim:
    return Claim(uid, "ns", "p", container, family, (acc,), units=units, terminal=terminal)


def ledger(manufacturer: str = "nvidia", release: bool = True) -> Ledger:
    return Ledger.of(manufacturer, [group([card(0), card(1)])], release)


def test_remaining_and_slices_of_sliced_claims() -> None:
    led = ledger()
    for c in (claim("a", Family.SLICED, "GPU-0", 600_000), claim("b", Family.SLICED, "GPU-0", 200_000, uid="u2")):
        led.claims[c.key] = c
    assert led.remaining("GPU-0") == 800_000
    assert led.slices("GPU-0") == 2
    assert led.mode("GPU-0") is AllocationMode.SLICED
    assert led.mode("GPU-1") is AllocationMode.FREE
    # excluding a container's own claim (a retry reads the room without itself)
    a = claim("a", Family.SLICED, "GPU-0", 600_000)
    assert led.remaining("GPU-0", exclude=a.key) == 1_400_000


def test_remaining_clamps_at_zero() -> None:
    led = ledger()
    for i in range(3):
        c = claim(f"c{i}", Family.SLICED, "GPU-0", 700_000)
        led.claims[c.key] = c
    assert led.remaining("GPU-0") == 0


@pytest.mark.parametrize(
    ("manufacturer", "family", "release", "charged"),
    [
        ("nvidia", Family.EXCLUSIVE, True, False),
        ("nvidia", Family.SHARED, True, False),
        ("nvidia", Family.SLICED, True, False),
        ("nvidia", Family.PARTITIONED, True, True),
        ("metax", Family.SLICED, True, True),
        ("cambricon", Family.SLICED, True, True),
        ("nvidia", Family.EXCLUSIVE, False, True),
        ("nvidia", Family.SLICED, False, True),
    ],
)
def test_a_finished_pod_stops_charging(manufacturer: str, family: Family, release: bool, charged: bool) -> None:
    led = ledger(manufacturer, release)
    c = claim("a", family, "GPU-0", 100, terminal=True)
    led.claims[c.key] = c
    assert led.charging(c) is charged
    assert (led.holders("GPU-0") == [c]) is charged


def test_visibility_never_charges_nor_conflicts() -> None:
    led = ledger()
    vis = claim("sshd", Family.VISIBILITY, "GPU-0")
    led.claims[vis.key] = vis
    assert led.holders("GPU-0") == []
    assert led.conflict("GPU-0", Family.EXCLUSIVE) is None


@pytest.mark.parametrize(
    ("held", "wanted", "conflict"),
    [
        (Family.EXCLUSIVE, Family.EXCLUSIVE, True),
        (Family.EXCLUSIVE, Family.SHARED, True),
        (Family.SHARED, Family.SHARED, False),
        (Family.SHARED, Family.SLICED, True),
        (Family.SLICED, Family.SLICED, False),
        (Family.SLICED, Family.EXCLUSIVE, True),
        (Family.PARTITIONED, Family.PARTITIONED, False),
        (Family.SLICED, Family.VISIBILITY, False),
    ],
)
def test_cross_mode_conflicts(held: Family, wanted: Family, conflict: bool) -> None:
    led = ledger()
    c = claim("a", held, "GPU-0", 100)
    led.claims[c.key] = c
    assert (led.conflict("GPU-0", wanted) is not None) is conflict
    assert led.conflict("GPU-0", wanted, exclude=c.key) is None


def test_status_lists_mode_units_slices_and_holders() -> None:
    led = ledger()
    c = claim("a", Family.SHARED, "GPU-1")
    led.claims[c.key] = c
    status = led.status([group([card(0), card(1)])])
    acc = status[0].accelerators[1]
    assert (acc.mode, acc.allocated, acc.remaining, acc.allocated_slices) == (
        AllocationMode.SHARED,
        160_000,
        1_440_000,
        0,
    )
    assert [(h.pod, h.container, h.mode) for h in acc.holders] == [("ns/p", "a", AllocationMode.SHARED)]
    assert status[0].accelerators[0].mode is AllocationMode.FREE
    wire = status[0].wire()
    assert wire["accelerators"][1]["allocatedSlices"] == 0  # type: ignore[index]


def test_partition_profiles_in_status_are_placement_aware() -> None:
    g = group([mig_card(0)])
    led = Ledger.of("nvidia", [g])
    inst = PartitionInstance(accelerator="MIGCARD-0", profile="3g.40gb", uuid="MIG-a", start=0, size=4)
    c = Claim(
        "u", "ns", "p", "main", Family.PARTITIONED, ("MIGCARD-0",), units=800_000, partition=inst, profile="3g.40gb"
    )
    led.claims[c.key] = c
    acc = led.status([g])[0].accelerators[0]
    assert [(p.name, p.count) for p in acc.allocated_profiles] == [("3g.40gb", 1)]
    assert {p.name: p.count for p in acc.remaining_profiles} == {"1g.10gb": 3, "3g.40gb": 1, "7g.80gb": 0}
    assert led.partition_room() == 3


def test_allocated_annotation_round_trips_and_skips_garbage() -> None:
    inst = PartitionInstance(accelerator="A", profile="1g.10gb", uuid="MIG-1", start=2, size=1, handle={"gi": 3})
    c = Claim(
        "u", "ns", "p", "main", Family.PARTITIONED, ("A",), devices=("t",), units=5, partition=inst, profile="1g.10gb"
    )
    raw = render_allocated({"main": AllocatedEntry.of(c, "nvidia")})
    back = parse_allocated(raw)
    assert back["main"].partition is not None and back["main"].partition.instance() == inst
    assert back["main"].mode is Family.PARTITIONED
    assert parse_allocated("not json") == {}
    assert parse_allocated("[1]") == {}
    assert parse_allocated('{"main": {"mode": "exclusive"}, "x": 3}') == {}
