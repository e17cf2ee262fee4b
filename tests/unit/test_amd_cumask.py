"""The HSA_CU_MASK topology rules (reference rules §4) with the reference's own numbers."""

from __future__ import annotations

import pytest
from gpustack_operator.manufacturers.amd.cumask import (
    Architecture,
    CuMaskTopology,
    CuMaskTopologyError,
    check,
)
from hypothesis import given
from hypothesis import strategies as st

RX7800XT = CuMaskTopology(gfx="gfx1101", cu=60, se=3, sa_per_se=2, xcc=1)
MI300X = CuMaskTopology(gfx="gfx942", cu=304, se=32, sa_per_se=1, xcc=8)
MI210 = CuMaskTopology(gfx="gfx90a", cu=104, se=8, sa_per_se=1, xcc=1)


@pytest.mark.parametrize(
    ("topology", "arch", "quantum", "minimum"),
    [
        (RX7800XT, Architecture.RDNA, 6, 9),  # 60 CU / 3 SE: atom 3 WGPs of 30 → 9%
        (MI300X, Architecture.CDNA, 8, 3),  # 304 CU / 8 XCC: atom 8 of 304 → 3%
        (MI210, Architecture.CDNA, 1, 1),  # gfx90a is CDNA with one XCC, never RDNA
        (CuMaskTopology("gfx1100", 96, 6, 2, 1), Architecture.RDNA, 12, 12),  # 7900 XTX: ceil(550/48)
    ],
)
def test_min_percentage_table(topology: CuMaskTopology, arch: Architecture, quantum: int, minimum: int) -> None:
    topology.validate()
    assert topology.architecture is arch
    assert topology.quantum == quantum
    assert topology.min_percent == minimum


@pytest.mark.parametrize(
    ("topology", "needle"),
    [
        (CuMaskTopology("gfx942", 0, 32, 1, 8), "reports 0 compute units"),
        (CuMaskTopology("gfx803", 64, 4, 1, 1), "unrecognised GPU architecture family"),
        (CuMaskTopology("gfx1101", 61, 3, 2, 1), "61 compute units is odd"),
        (CuMaskTopology("gfx1101", 60, 0, 2, 1), "reports 0 shader engines"),
        (CuMaskTopology("gfx1101", 4, 3, 2, 1), "3 shader engines exceed its 2 WGPs"),
        (CuMaskTopology("gfx942", 304, 32, 1, 0), "reports no XCC count"),
        (CuMaskTopology("gfx1101", 64, 3, 2, 1), "6-CU quantum does not divide 64"),
        (CuMaskTopology("gfx942", 300, 32, 1, 8), "8-CU quantum does not divide 300"),
    ],
)
def test_validation_refusals(topology: CuMaskTopology, needle: str) -> None:
    with pytest.raises(CuMaskTopologyError) as err:
        topology.validate()
    assert needle in str(err.value)
    assert repr(topology.gfx) in str(err.value)


def test_rdna_ignores_the_xcc_count() -> None:
    CuMaskTopology("gfx1101", 60, 3, 2, 0).validate()  # XCC is never read on RDNA


@pytest.mark.parametrize(
    ("topology", "percent", "cus"),
    [
        (RX7800XT, 9, 6),  # 2.7 WGPs → 3 → one round of 3 SE → 6 CUs
        (RX7800XT, 50, 30),  # 15 WGPs, a multiple of 3
        (RX7800XT, 33, 18),  # 9.9 → 10 WGPs, aligned down to 9 → 18 CUs
        (RX7800XT, 100, 60),
        (MI300X, 3, 8),  # 9.12 → 9, aligned down to one atom of 8
        (MI300X, 50, 152),
        (MI300X, 100, 304),
        (MI210, 1, 1),
    ],
)
def test_window_rounds_half_up_and_aligns_down(topology: CuMaskTopology, percent: int, cus: int) -> None:
    assert topology.window_cus(percent) == cus


@pytest.mark.parametrize(("topology", "percent"), [(RX7800XT, 8), (MI300X, 2), (RX7800XT, 1)])
def test_below_the_minimum_is_refused_naming_it(topology: CuMaskTopology, percent: int) -> None:
    with pytest.raises(CuMaskTopologyError) as err:
        topology.window_cus(percent)
    assert str(err.value).endswith(f"; its smallest slice is {topology.min_percent}%")


@given(st.integers(1, 64), st.integers(1, 16), st.integers(1, 100))
def test_minimum_is_the_smallest_percentage_with_a_window(wgps_per_se: int, se: int, percent: int) -> None:
    topology = CuMaskTopology("gfx1101", 2 * se * wgps_per_se, se, 2, 1)
    topology.validate()
    if percent >= topology.min_percent:
        cus = topology.window_cus(percent)
        assert cus % topology.quantum == 0 and 0 < cus <= topology.cu
    else:
        with pytest.raises(CuMaskTopologyError):
            topology.window_cus(percent)


@given(st.integers(1, 64), st.integers(1, 16), st.integers(1, 100))
def test_cdna_windows_cover_every_xcc(per_xcc: int, xcc: int, percent: int) -> None:
    topology = CuMaskTopology("gfx942", per_xcc * xcc, 4 * xcc, 1, xcc)
    if percent >= topology.min_percent:
        assert topology.window_cus(percent) % xcc == 0
    else:
        with pytest.raises(CuMaskTopologyError):
            topology.window_cus(percent)


def test_check_names_cus_and_atom_or_the_refusal() -> None:
    topologies = {"GPU-a": MI300X, "GPU-b": CuMaskTopology("gfx942", 304, 32, 1, 0)}
    ok = check(topologies, "GPU-a")
    assert ok.ok and "304 CUs" in ok.detail and "8-CU atom" in ok.detail and "3%" in ok.detail
    refused = check(topologies, "GPU-b")
    assert not refused.ok and "no XCC count" in refused.detail
    missing = check(topologies, "GPU-c")
    assert not missing.ok and "GPU-c" in missing.detail
