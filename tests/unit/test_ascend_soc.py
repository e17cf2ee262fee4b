"""Ascend chip name → SoC → family, and the logical slicing offered per CANN major (reference rules §9)."""

from __future__ import annotations

import pytest
from gpustack_operator.manufacturers.ascend import soc
from hypothesis import assume, given
from hypothesis import strategies as st

# (chip name as DCMI reports it, SoC name, family)
REFERENCE_ROWS = [
    ("910B2", "Ascend910B2", "910B"),  # V1 drops the vendor prefix
    ("Ascend910B2", "Ascend910B2", "910B"),  # the prefix is optional
    ("910B4-1", "Ascend910B4-1", "910B"),
    ("910B9", "Ascend910B1", "910B"),  # unlisted 910B suffix → the family's first member
    ("A2G7", "Ascend910B1", "910B"),
    ("910_9362", "Ascend910_9362", "910C"),  # 910C parts are named exactly
    ("Ascend910_9363", "Ascend910_9363", "910C"),
    ("910", "Ascend910", "910C"),  # the reference table lists the bare 910 in the A3 band
    ("910A", "Ascend910A", "910"),
    ("910ProB", "Ascend910ProB", "910"),
    ("910_9599", "Ascend910A", "910"),  # any other 910* is the 910A
    ("310P3", "Ascend310P3", "310P"),
    ("310P6", "Ascend310P1", "310P"),  # unlisted 310P suffix
    ("310P", "Ascend310P1", "310P"),
    ("I2", "Ascend310P1", "310P"),
    ("310B4", "Ascend310B4", "310B"),
    ("310B9", "Ascend310B1", "310B"),
    ("Ascend950PR", "Ascend950", "950"),  # every 950* folds onto one SoC
    ("Ascend950DT", "Ascend950", "950"),
    ("950PR", "Ascend950", "950"),
    ("Ascend950", "Ascend950", "950"),
    ("Ascend910_95", "Ascend910_95", "950"),
    ("", "", ""),  # empty → no family
    ("   ", "", ""),
    ("Ascend", "", ""),
    ("H100", "", ""),
    ("310", "", ""),
    ("910B0310B", "Ascend310B1", "310B"),  # "310B" anywhere wins over the 910B prefix, as in the reference
]


@pytest.mark.parametrize(("chip", "soc_name", "family"), REFERENCE_ROWS)
def test_reference_rows(chip: str, soc_name: str, family: str) -> None:
    assert soc.soc_name(chip) == soc_name
    assert soc.family(chip) == family


@pytest.mark.parametrize(
    ("chip", "product"),
    [("910B2", "Ascend910B2"), ("Ascend950PR", "Ascend950PR"), (" 910B3 ", "Ascend910B3"), ("", ""), ("Ascend", "")],
)
def test_product_name_carries_the_prefix_once(chip: str, product: str) -> None:
    assert soc.product_name(chip) == product


_SUFFIX = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", max_size=8)


@given(prefix=st.sampled_from(["", "Ascend"]), suffix=_SUFFIX)
def test_every_950_name_folds_onto_one_soc_and_family(prefix: str, suffix: str) -> None:
    name = f"{prefix}950{suffix}"
    assert soc.soc_name(name) == "Ascend950"
    assert soc.family(name) == "950"


@given(digit=st.sampled_from("0123456789"), rest=_SUFFIX)
def test_910b_names_stay_910b(digit: str, rest: str) -> None:
    name = f"910B{digit}{rest}"
    assume("310B" not in name)  # the reference tests for 310B anywhere in the name before 910B
    assert soc.family(name) == "910B"
    expected = f"Ascend{name}" if f"Ascend{name}" in soc.SOC_VERSIONS else "Ascend910B1"
    assert soc.soc_name(name) == expected


@given(st.text(max_size=24))
def test_any_name_maps_to_a_listed_soc_or_nothing(name: str) -> None:
    result = soc.soc_name(name)
    assert result == "" or result in soc.SOC_VERSIONS
    assert soc.family(name) in soc.FAMILIES | {""}
    # a SoC name is a fixed point: reading it again does not move it
    if result:
        assert soc.soc_name(result) == result
        assert soc.family(result) == soc.family(name)


@given(name=st.sampled_from(sorted(soc.SOC_VERSIONS)))
def test_listed_socs_are_themselves_with_or_without_prefix(name: str) -> None:
    assert soc.soc_name(name) == name
    assert soc.soc_name(name.removeprefix("Ascend")) == name


@pytest.mark.parametrize(
    ("family", "runtime", "sliced"),
    [
        ("910B", "8.0", True),
        ("910B", "9.0", True),
        ("910C", "8.3", True),
        ("910B", "7.0", False),
        ("910B", "10.0", False),  # the major is a number: 10 is not 8 or 9, whatever "10" < "9" says
        ("910B", None, True),  # no CANN read: the default major 8
        ("310P", "8.0", False),  # 310P and 950 on CANN 9 only
        ("310P", "9.1", True),
        ("950", "8.0", False),
        ("950", "9.0", True),
        ("950", None, False),
        ("310B", "9.0", False),
        ("910", "8.0", False),
        ("", "8.0", False),
        ("910B", "RC.1", False),
    ],
)
def test_logical_slicing_per_family_and_cann_major(family: str, runtime: str | None, sliced: bool) -> None:
    result = soc.logical_sliced(family, runtime)
    if sliced:
        assert result is not None
        assert (result.count, result.cores_percentage_overcommit) == (63, True)
    else:
        assert result is None


@given(major=st.integers(min_value=0, max_value=10_000), minor=st.integers(min_value=0, max_value=99))
def test_cann_major_is_compared_as_a_number(major: int, minor: int) -> None:
    assert soc.cann_major(f"{major}.{minor}") == major
    assert (soc.logical_sliced("910B", f"{major}.{minor}") is not None) == (major in (8, 9))
    assert (soc.logical_sliced("950", f"{major}.{minor}") is not None) == (major == 9)


@pytest.mark.parametrize(
    ("mainboard", "super_pod", "expected"),
    [
        (0x68, None, ("card-1p", 5)),  # the inference cards are recognized by their mainboard alone
        (0x6C, 2, ("card-4p", 6)),
        (0x44, 0, ("server-8p", 0)),
        (0x46, 1, ("pod-1d", 1)),
        (0x48, 2, ("pod-2d", 2)),
        (0x44, 3, ("server-16p", 3)),
        (0x44, 4, ("server-32p", 4)),
        (0x44, 9, ("", 9)),  # an unknown code: no word, the code kept
        (0x44, None, None),
    ],
)
def test_a5_product_type(mainboard: int, super_pod: int | None, expected: tuple[str, int] | None) -> None:
    assert soc.a5_product(mainboard, super_pod) == expected


@given(mainboard=st.integers(min_value=0, max_value=0xFFFF), code=st.integers(min_value=0, max_value=2**32 - 1))
def test_a5_product_keeps_the_code(mainboard: int, code: int) -> None:
    word, kept = soc.a5_product(mainboard, code) or ("?", -1)
    if mainboard in (0x68, 0x6C):
        assert (word, kept) == (("card-1p", 5) if mainboard == 0x68 else ("card-4p", 6))
    else:
        assert kept == code
        assert word == soc.PRODUCT_TYPES.get(code, "")
