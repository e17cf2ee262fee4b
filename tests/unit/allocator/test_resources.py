"""Resource names and token ids (reference rules §6, supplement §5.2)."""

from __future__ import annotations

import pytest
from gpustack_operator.allocator.resources import (
    ResourceNames,
    parse_token,
    token_id,
    tokens,
    tokens_per_card,
)
from gpustack_operator.manufacturers.respond import Family

from tests.unit.allocator.fakes import card, mig_card

NAMES = ResourceNames("nvidia.com/gpu", "nvidia")


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, "g:GPU-a:0000"), (7, "g:GPU-a:0007"), (511, "g:GPU-a:0511"), (9999, "g:GPU-a:9999"), (12345, "g:GPU-a:12345")],
)
def test_token_id_pads_to_four_digits_and_never_truncates(index: int, expected: str) -> None:
    assert token_id("g", "GPU-a", index) == expected
    assert parse_token(expected) == ("g", "GPU-a", index)


def test_token_of_an_accelerator_id_with_colons_round_trips() -> None:
    tid = token_id("amd-mi300x", "0000:03:00.0", 3)
    assert parse_token(tid) == ("amd-mi300x", "0000:03:00.0", 3)


@pytest.mark.parametrize("bad", ["", "g", "g:acc", ":acc:0001", "g::0001", "g:acc:x1", "g:acc:", "g:acc:١٢"])
def test_not_a_token(bad: str) -> None:
    assert parse_token(bad) is None


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ("exclusive", "nvidia.com/gpu"),
        ("shared", "nvidia.com/gpu.shared"),
        ("sliced", "nvidia.com/gpu.sliced"),
        ("partitioned", "nvidia.com/gpu.partitioned"),
        ("visibility", "device.gpustack.ai/nvidia.visibility"),
        ("sliced_units", "nvidia.com/gpu.sliced.units"),
        ("sliced_cores_percentage", "nvidia.com/gpu.sliced.cores-percentage"),
        ("sliced_memory_percentage", "nvidia.com/gpu.sliced.memory-percentage"),
        ("sliced_memory_mib", "nvidia.com/gpu.sliced.memory-mib"),
        ("partitioned_units", "nvidia.com/gpu.partitioned.units"),
    ],
)
def test_resource_names(attribute: str, expected: str) -> None:
    assert getattr(NAMES, attribute) == expected


def test_profile_keys() -> None:
    assert NAMES.partitioned_profile("3g.40gb") == "nvidia.com/gpu.partitioned.mig-3g.40gb"
    assert NAMES.profile_of("nvidia.com/gpu.partitioned.mig-3g.40gb") == "3g.40gb"
    assert NAMES.profile_of("nvidia.com/gpu.partitioned.units") is None
    assert NAMES.profile_of("nvidia.com/gpu.partitioned.mig-") is None
    assert (
        ResourceNames("hygon.com/dcu", "hygon").partitioned_profile("2g.15gb")
        == "hygon.com/dcu.partitioned.mig-2g.15gb"
    )


@pytest.mark.parametrize("family", list(Family))
def test_family_of_round_trips(family: Family) -> None:
    assert NAMES.family_of(NAMES.resource(family)) is family


def test_family_of_a_capacity_key_is_none() -> None:
    assert NAMES.family_of("nvidia.com/gpu.sliced.units") is None
    assert NAMES.family_of("amd.com/gpu") is None


@pytest.mark.parametrize(
    ("family", "expected"),
    [(Family.EXCLUSIVE, 1), (Family.SHARED, 10), (Family.SLICED, 8), (Family.PARTITIONED, 0), (Family.VISIBILITY, 512)],
)
def test_tokens_per_unpartitioned_card(family: Family, expected: int) -> None:
    assert tokens_per_card(card(0, slices=8), family) == expected


@pytest.mark.parametrize(
    ("family", "expected"),
    [(Family.EXCLUSIVE, 0), (Family.SHARED, 0), (Family.SLICED, 0), (Family.PARTITIONED, 7), (Family.VISIBILITY, 512)],
)
def test_a_partitioning_card_offers_only_partitions_and_visibility(family: Family, expected: int) -> None:
    assert tokens_per_card(mig_card(0), family) == expected


def test_a_zero_slice_pool_advertises_none() -> None:
    assert tokens("g", card(0, slices=0), Family.SLICED) == []
    hygon = card(0, slices=4)
    assert tokens("hygon-k100", hygon, Family.SLICED) == [f"hygon-k100:GPU-0:{i:04d}" for i in range(4)]


def test_no_logical_slicing_reported_means_no_slices() -> None:
    acc = card(0)
    acc.status.logical_sliced = None
    assert tokens_per_card(acc, Family.SLICED) == 0
    assert tokens_per_card(acc, Family.EXCLUSIVE) == 1
