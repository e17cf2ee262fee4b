"""Naming rules, with the reference implementation's own examples (reference-rules §1–§3)."""

import itertools

import pytest
from gpustack_operator.node.naming import (
    format_binary_si,
    format_memory_suffix,
    group_id,
    group_ids,
    normalize_name,
    sanitize_label_value,
    strip_cpu_cruft,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("name", "manufacturer", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "nvidia", "h100-80gb-hbm3"),
        ("Ascend910B2", "ascend", "910b2"),
        ("K100_AI", "hygon", "k100_ai"),
        ("NVIDIA", "nvidia", ""),
        ("Tesla T4", "nvidia", "tesla-t4"),
        ("AMD Instinct MI300X", "amd", "instinct-mi300x"),
        ("NVIDIA A100-SXM4-80GB", "nvidia", "a100-sxm4-80gb"),
        ("  NVIDIA  GeForce  RTX 4090 ", "nvidia", "geforce-rtx-4090"),
    ],
)
def test_group_id(name: str, manufacturer: str, expected: str) -> None:
    assert group_id(manufacturer, name, 0, with_memory=False) == expected


@pytest.mark.parametrize(("mib", "expected"), [(0, "0g"), (512, "1g"), (1023, "1g"), (143771, "140g"), (81559, "80g")])
def test_memory_suffix(mib: int, expected: str) -> None:
    assert format_memory_suffix(mib) == expected


def test_group_id_with_memory() -> None:
    assert group_id("nvidia", "Tesla T4", 15360, with_memory=True) == "tesla-t4-15g"


@pytest.mark.parametrize(
    ("mib", "expected"),
    [
        (15360, "15Gi"),
        (16368, "16Gi"),
        (196608, "192Gi"),
        (512, "512Mi"),
        (0, "0"),
        (1536, "2Gi"),
        (81559, "80Gi"),
        (1048576, "1Ti"),
    ],
)
def test_binary_si(mib: int, expected: str) -> None:
    assert format_binary_si(mib) == expected


def test_non_strip_dedup_runs_on_the_sanitized_stream() -> None:
    assert normalize_name("Intel(R) Core(TM) i9-14900K", "intel", 50, strip_cruft=False) == "r-coretm-i9-14900k"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763"),
        ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "Intel Xeon Gold 6248"),
        ("11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz", "Intel Core i7-1165G7"),
        ("Genuine Intel(R) CPU 0000 @ 2.40GHz", "Intel CPU 0000"),  # only a trailing " CPU" goes
        ("AMD Ryzen 9 7950X 16-Cores", "AMD Ryzen 9 7950X"),
        ("Hygon C86 7285 32-core Processor", "Hygon C86 7285"),
    ],
)
def test_strip_cpu_cruft(raw: str, expected: str) -> None:
    assert strip_cpu_cruft(raw) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tesla T4", "Tesla-T4"),
        ("--a  b--", "a-b"),
        ("535.104.05", "535.104.05"),
        ("x" * 80, "x" * 63),
        ("AMD Instinct MI250X/MI250", "AMD-Instinct-MI250XMI250"),
    ],
)
def test_sanitize_label_value(value: str, expected: str) -> None:
    assert sanitize_label_value(value) == expected


SEPS = set("-_.")


@given(st.text(), st.sampled_from(["", "amd", "intel", "nvidia", "generic"]), st.integers(-1, 80), st.booleans())
def test_normalize_name_is_always_label_safe(name: str, prefix: str, budget: int, strip: bool) -> None:
    out = normalize_name(name, prefix, budget, strip)
    assert all(c.islower() or c.isdigit() or c in SEPS for c in out)
    assert out.isascii()
    if out:
        assert out[0] not in SEPS and out[-1] not in SEPS
        assert not any(a in SEPS and b in SEPS for a, b in itertools.pairwise(out))
    if budget > 0:
        assert len(out) <= budget


@given(st.text())
def test_sanitize_label_value_is_always_a_valid_label_value(value: str) -> None:
    out = sanitize_label_value(value)
    assert len(out) <= 63
    assert all(c.isascii() and (c.isalnum() or c in SEPS) for c in out)
    if out:
        assert out[0].isalnum() and out[-1].isalnum()


@given(st.integers(min_value=0, max_value=2**40))
def test_binary_si_round_trips_within_half_a_unit(mib: int) -> None:
    text = format_binary_si(mib)
    units = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
    if text == "0":
        assert mib == 0
        return
    number, unit = int(text[:-2]), text[-2:]
    scale = 1024 ** units[unit]
    assert abs(number * scale - mib * 2**20) <= scale // 2


def test_group_ids_are_the_reference_ids_when_unique() -> None:
    models = [("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA L40S", 46068)]
    assert group_ids("nvidia", models, with_memory=False) == ["h100-80gb-hbm3", "l40s"]
    assert group_ids("nvidia", models, with_memory=True) == ["h100-80gb-hbm3-80g", "l40s-45g"]


def test_colliding_group_ids_carry_their_memory() -> None:
    # one driver name for two memory sizes: each colliding group carries the GROUP_ID_WITH_MEMORY suffix
    models = [("NVIDIA A100-SXM4", 40960), ("NVIDIA H100", 81559), ("NVIDIA A100-SXM4", 81920)]
    assert group_ids("nvidia", models, with_memory=False) == ["a100-sxm4-40g", "h100", "a100-sxm4-80g"]
    assert group_ids("nvidia", models, with_memory=False)[0] == group_id("nvidia", "NVIDIA A100-SXM4", 40960, True)


def test_ids_still_shared_take_an_ordinal() -> None:
    # two names normalizing alike, one memory: the suffix cannot tell them apart
    models = [("NVIDIA A100", 40960), ("A100", 40960)]
    assert group_ids("nvidia", models, with_memory=False) == ["a100-40g", "a100-40g-2"]
    assert group_ids("nvidia", models, with_memory=True) == ["a100-40g", "a100-40g-2"]
    long = [("X" * 80, 1024), ("x" * 80, 1024)]
    ids = group_ids("nvidia", long, with_memory=False)
    assert len(set(ids)) == 2 and all(len(f"nvidia-{i}") <= 63 for i in ids)


def test_unnamed_groups_stay_unnamed() -> None:
    assert group_ids("amd", [("", 16368), ("", 196592)], with_memory=False) == ["", ""]


@given(
    st.lists(
        st.tuples(st.sampled_from(["NVIDIA A100", "A100", "a100", "NVIDIA", "H100 PCIe", ""]), st.integers(0, 300000)),
        max_size=8,
    ),
    st.booleans(),
)
def test_group_ids_never_collide(models: list[tuple[str, int]], with_memory: bool) -> None:
    ids = group_ids("nvidia", list(dict.fromkeys(models)), with_memory)
    named = [i for i in ids if i]
    assert len(named) == len(set(named))
    assert all(len(f"nvidia-{i}") <= 63 for i in named)
