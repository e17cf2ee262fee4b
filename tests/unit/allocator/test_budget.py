"""A slice's budgets and request quantities (reference rules §5, supplement §5.3)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from gpustack_operator.allocator.budget import (
    parse_count,
    parse_quantity,
    partition_profile,
    partition_units,
    slice_budget,
)
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.manufacturers.respond import Code, RefusedError, SliceBudget
from hypothesis import given
from hypothesis import strategies as st

N = ResourceNames("nvidia.com/gpu", "nvidia")
PCT, MIB, CORES, UNITS = N.sliced_memory_percentage, N.sliced_memory_mib, N.sliced_cores_percentage, N.sliced_units


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", Decimal(1)),
        ("50", Decimal(50)),
        ("200k", Decimal(200_000)),
        ("1Ki", Decimal(1024)),
        ("1Gi", Decimal(1024**3)),
        ("1e3", Decimal(1000)),
        ("1.5", Decimal("1.5")),
        ("500m", Decimal("0.5")),
        (" 7 ", Decimal(7)),
        (".5", Decimal("0.5")),
        ("+3", Decimal(3)),
    ],
)
def test_quantities(raw: str, value: Decimal) -> None:
    assert parse_quantity(raw, "k") == value


@pytest.mark.parametrize("raw", ["", "abc", "1x", "--1", "1e", "1e99999", "1Ki1", "NaN", "inf", "1_000", "1" * 80])
def test_not_a_quantity_is_refused_naming_the_key(raw: str) -> None:
    with pytest.raises(RefusedError) as err:
        parse_quantity(raw, "nvidia.com/gpu.sliced.memory-mib")
    assert err.value.code is Code.INVALID_ARGUMENT
    assert "nvidia.com/gpu.sliced.memory-mib" in err.value.message


@pytest.mark.parametrize("raw", ["1.5", "-1", "500m"])
def test_a_count_is_whole(raw: str) -> None:
    with pytest.raises(RefusedError, match="whole number"):
        parse_count(raw, "k")


@pytest.mark.parametrize(
    ("resources", "vram", "expected"),
    [
        # docs example: 24564 MiB at 50 % → 12282 MiB; units from memory (half the card)
        ({PCT: "50"}, 24564, SliceBudget(cores_percent=100, memory_mib=12282, units=800_000)),
        # percentage preferred over MiB
        ({PCT: "25", MIB: "1000"}, 81920, SliceBudget(100, 20480, 400_000)),
        ({MIB: "10240"}, 81920, SliceBudget(100, 10240, 200_000)),
        # capped at VRAM
        ({MIB: "99999"}, 81920, SliceBudget(100, 81920, 1_600_000)),
        ({PCT: "150"}, 81920, SliceBudget(100, 81920, 1_600_000)),
        # floor
        ({PCT: "33"}, 1000, SliceBudget(100, 330, 528_000)),
        # a fractional percentage is read as Quantity.Value() reads it: rounded up (33.3 -> 34)
        ({PCT: "33.3"}, 1000, SliceBudget(100, 340, 544_000)),
        # cores absent or <= 0 → 100; else as asked
        ({PCT: "50", CORES: "0"}, 81920, SliceBudget(100, 40960, 800_000)),
        ({PCT: "50", CORES: "-5"}, 81920, SliceBudget(100, 40960, 800_000)),
        ({PCT: "50", CORES: "30"}, 81920, SliceBudget(30, 40960, 800_000)),
        ({PCT: "50", CORES: "300"}, 81920, SliceBudget(100, 40960, 800_000)),
        # the webhook-derived units win when present
        ({PCT: "50", UNITS: "200k"}, 81920, SliceBudget(100, 40960, 200_000)),
        ({MIB: "10240", UNITS: "1"}, 81920, SliceBudget(100, 10240, 1)),
    ],
)
def test_slice_budget(resources: dict[str, str], vram: int, expected: SliceBudget) -> None:
    assert slice_budget(N, resources, vram) == expected


def test_neither_memory_key_is_refused_with_the_spec_message() -> None:
    with pytest.raises(RefusedError) as err:
        slice_budget(N, {"nvidia.com/gpu.sliced": "1"}, 81920, "ns/p container main")
    assert err.value.code is Code.INVALID_ARGUMENT
    assert err.value.message == (
        "ns/p container main: a nvidia.com/gpu.sliced request must set nvidia.com/gpu.sliced.memory-percentage "
        "or nvidia.com/gpu.sliced.memory-mib"
    )


@pytest.mark.parametrize(
    ("resources", "match"),
    [
        # a non-positive key counts as not set (reference rules §5)
        ({PCT: "0"}, r"must set .* to a positive value \(nvidia.com/gpu.sliced.memory-percentage is 0\)"),
        ({MIB: "-3"}, "to a positive value"),
        ({PCT: "1", MIB: "0"}, "less than 1 MiB"),
        ({PCT: "50", UNITS: "0"}, "positive whole number"),
        ({PCT: "lots"}, "not a Kubernetes quantity"),
    ],
)
def test_bad_budget_values_are_invalid_arguments(resources: dict[str, str], match: str) -> None:
    with pytest.raises(RefusedError, match=match) as err:
        slice_budget(N, resources, 50 if resources.get(MIB) == "0" else 81920)
    assert err.value.code is Code.INVALID_ARGUMENT


def test_unknown_vram_is_a_failed_precondition() -> None:
    with pytest.raises(RefusedError, match="VRAM is unknown") as err:
        slice_budget(N, {PCT: "50"}, 0)
    assert err.value.code is Code.FAILED_PRECONDITION


def test_partition_profile_and_units() -> None:
    res = {N.partitioned: "1", N.partitioned_profile("3g.40gb"): "1"}
    assert partition_profile(N, res) == "3g.40gb"
    assert partition_units(N, res, 40192, 81920) == 785_000
    assert partition_units(N, {**res, N.partitioned_units: "800k"}, 40192, 81920) == 800_000
    with pytest.raises(RefusedError, match=r"must name a profile, e\.g\. nvidia\.com/gpu\.partitioned\.mig-<profile>"):
        partition_profile(N, {N.partitioned: "1"})
    with pytest.raises(RefusedError, match=r"only one partition profile, found \[1g.10gb 3g.40gb\]"):
        partition_profile(N, {**res, N.partitioned_profile("1g.10gb"): "1"})


KEYS = st.sampled_from([PCT, MIB, CORES, UNITS, "other"])
VALUES = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"[+-]?[0-9]{0,25}(\.[0-9]{0,10})?([eE][+-]?[0-9]{1,7}|Ki|Mi|Gi|Ei|[numkMGTPE])?", fullmatch=True),
)


@given(resources=st.dictionaries(KEYS, VALUES, max_size=5), vram=st.integers(min_value=-10, max_value=10**7))
def test_budget_never_raises_anything_but_a_refusal(resources: dict[str, str], vram: int) -> None:
    try:
        got = slice_budget(N, resources, vram)
    except RefusedError as exc:
        assert exc.message
        return
    assert 0 < got.memory_mib <= vram
    assert 0 < got.cores_percent <= 100
    assert 0 <= got.units <= 1_600_000


@given(raw=VALUES)
def test_quantity_parse_is_total(raw: str) -> None:
    try:
        value = parse_quantity(raw, "k")
    except RefusedError:
        return
    assert value.is_finite()
