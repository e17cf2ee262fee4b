"""The NVIDIA backend's parsers of NVML answers (pure functions) and the MIG profile derivation."""

from __future__ import annotations

from gpustack_operator.manufacturers.groups import normalize_bus_id
from gpustack_operator.manufacturers.nvidia import values
from gpustack_operator.manufacturers.nvidia.detect import derive_profiles
from gpustack_operator.manufacturers.nvidia.nvml import GpuInstanceProfile
from hypothesis import given
from hypothesis import strategies as st

# -- CUDA driver version ------------------------------------------------------------------------


@given(st.integers(1, 99), st.integers(0, 9), st.integers(0, 9))
def test_cuda_version_text_reads_nvml_encoding(major: int, minor: int, patch: int) -> None:
    encoded = 1000 * major + 10 * minor + patch  # NVML: 1000*major + 10*minor (patch never set)
    text = values.cuda_version_text(encoded)
    assert text == f"{major}.{minor}"
    assert values.cuda_major(text) == major


def test_cuda_version_examples() -> None:
    assert values.cuda_version_text(12040) == "12.4"
    assert values.cuda_version_text(11080) == "11.8"
    assert values.cuda_version_text(13000) == "13.0"


@given(st.integers(max_value=0))
def test_cuda_version_not_reported(encoded: int) -> None:
    assert values.cuda_version_text(encoded) is None


@given(st.text(max_size=8))
def test_cuda_major_never_raises(text: str) -> None:
    head = text.partition(".")[0]
    ascii_number = bool(head) and all("0" <= c <= "9" for c in head)
    assert values.cuda_major(text) == (int(head) if ascii_number else None)


# -- PCI bus id ---------------------------------------------------------------------------------

addresses = st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))


@given(addresses)
def test_bus_id_from_nvml_spelling(addr: tuple[int, int, int, int]) -> None:
    domain, bus, dev, fn = addr
    expected = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    nvml = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}"  # nvmlPciInfo_t.busId
    legacy = f"{domain:04X}:{bus:02X}:{dev:02X}.{fn}"  # nvmlPciInfo_t.busIdLegacy
    assert values.bus_id_of(nvml) == expected
    assert values.bus_id_of("", legacy) == expected
    assert values.bus_id_of("garbage", legacy) == expected
    assert values.bus_id_of(nvml) == normalize_bus_id(nvml)


@given(addresses, st.text(alphabet="xyz!: ", max_size=12))
def test_bus_id_composed_from_fields_when_strings_are_unusable(addr: tuple[int, int, int, int], junk: str) -> None:
    domain, bus, dev, _ = addr
    got = values.bus_id_of(junk, junk, domain, bus, dev)
    if domain or bus or dev:
        assert got == f"{domain:04x}:{bus:02x}:{dev:02x}.0"
    else:
        assert got == ""


# -- MIG profiles -------------------------------------------------------------------------------

profile_names = st.builds(
    lambda c, m, suffix: f"{c}g.{m}gb{suffix}",
    st.integers(1, 8),
    st.integers(5, 192),
    st.sampled_from(["", "+me", "+me.all", "+gfx"]),
)


@given(profile_names, st.integers(0, 0x11))
def test_profile_filter_drops_media_and_graphics_variants(name: str, probe_index: int) -> None:
    assert values.is_exposed_profile(name, probe_index) == ("+" not in name)


@given(st.integers(0, 0x11))
def test_profile_filter_without_a_name_uses_the_probe_index(probe_index: int) -> None:
    # v1 answers carry no name: 0x7 is 1_SLICE_REV1 (+me), 0xA.. are the GFX / ME variants
    assert values.is_exposed_profile("", probe_index) == (probe_index not in (0x7,) and probe_index < 0xA)


@given(st.integers(1, 64), st.integers(0, 8), st.data())
def test_memory_slices_round_half_up(per_slice_gib: int, n: int, data: st.DataObject) -> None:
    card = per_slice_gib * 1024 * 8
    per_slice = card // 8
    slack = data.draw(st.integers(-(per_slice // 2) + 1, per_slice // 2 - 1))
    profile = max(n * per_slice + slack, 0)
    assert values.memory_slices(profile, card) == n


def test_memory_slices_real_a100_80gb() -> None:
    assert [values.memory_slices(m, 81920) for m in (9728, 19968, 40192, 80896)] == [1, 2, 4, 8]


def probe(index: int, pid: int, name: str, slices: int, count: int, mib: int) -> GpuInstanceProfile:
    return GpuInstanceProfile(index, pid, name, slices, count, mib)


A100_80GB = [
    probe(0x0, 19, "1g.10gb", 1, 7, 9728),
    probe(0x1, 14, "2g.20gb", 2, 3, 19968),
    probe(0x2, 9, "3g.40gb", 3, 2, 40192),
    probe(0x3, 5, "4g.40gb", 4, 1, 40192),
    probe(0x4, 0, "7g.80gb", 7, 1, 80896),
    probe(0x7, 20, "1g.10gb+me", 1, 1, 9728),
    probe(0x9, 15, "1g.20gb", 1, 4, 19968),
]


def test_derive_profiles_a100_80gb() -> None:
    placements = {15: [(0, 2), (2, 2), (4, 2), (6, 2)], 19: [(i, 1) for i in range(7)]}
    got = derive_profiles(A100_80GB, 81920, lambda pid: placements.get(pid, []))
    assert [(p.name, p.compute_slices, p.memory_slices, p.count, p.memory_mib) for p in got] == [
        ("1g.10gb", 1, 1, 7, 9728),
        ("2g.20gb", 2, 2, 3, 19968),
        ("3g.40gb", 3, 4, 2, 40192),
        ("4g.40gb", 4, 4, 1, 40192),
        ("7g.80gb", 7, 8, 1, 80896),
        ("1g.20gb", 1, 2, 4, 19968),
    ]
    by_name = {p.name: p for p in got}
    # placements are asked by the probed profile id, so the two 1-slice profiles keep their own
    assert [(s.start, s.length) for s in by_name["1g.20gb"].placements] == placements[15]
    assert [(s.start, s.length) for s in by_name["1g.10gb"].placements] == placements[19]


def test_derive_profiles_v1_names_from_geometry_and_dedupes() -> None:
    unnamed = [probe(0x0, 19, "", 1, 7, 9728), probe(0x7, 20, "", 1, 1, 9728), probe(0x9, 15, "", 1, 4, 19968)]
    got = derive_profiles([*unnamed, probe(0xD, 21, "1g.10gb", 1, 7, 9728)], 81920)
    # 0x7 (+me) and 0xD (a variant index) dropped; names from compute and memory slices
    assert [p.name for p in got] == ["1g.10gb", "1g.20gb"]
    assert all(p.placements == [] for p in got)


# -- memory, family, usage ----------------------------------------------------------------------


@given(st.integers(1, 1 << 20), st.integers(1024, 8192), st.booleans())
def test_hbm_memory_is_never_restored(memory: int, width: int, ecc: bool) -> None:
    assert values.restore_ecc_carveout(memory, width, ecc) == memory


@given(st.integers(1, 1 << 20), st.integers(1, 1023))
def test_gddr_ecc_carveout_restored(memory: int, width: int) -> None:
    restored = values.restore_ecc_carveout(memory, width, True)
    assert restored == memory * 16 // 15 >= memory
    assert values.restore_ecc_carveout(memory, width, False) == memory
    assert values.restore_ecc_carveout(memory, None, True) == memory


def test_l40s_memory_label_source() -> None:
    assert values.restore_ecc_carveout(46068, 384, True) == 49139  # 48 GB GDDR6 with ECC on


def test_family_from_compute_capability() -> None:
    table = {
        (7, 0): "Volta",
        (7, 5): "Turing",
        (8, 0): "Ampere",
        (8, 6): "Ampere",
        (8, 9): "Ada-Lovelace",
        (9, 0): "Hopper",
        (10, 0): "Blackwell",
        (12, 0): "Blackwell",
        (11, 0): None,
    }
    assert {cc: values.family_of_compute_capability(*cc) for cc in table} == table
    # the architecture enum gives the same names where both exist
    arch = {5: (7, 0), 6: (7, 5), 7: (8, 0), 8: (8, 9), 9: (9, 0), 10: (10, 0)}
    for code, cc in arch.items():
        assert values.family_of_architecture(code) == values.family_of_compute_capability(*cc)
    assert values.family_of_architecture(0xFFFFFFFF) is None


@given(st.integers(0, 100), st.integers(0, 99))
def test_compute_capability_text(major: int, minor: int) -> None:
    text = values.compute_capability_text(major, minor)
    assert text == (f"{major}.{minor}" if major > 0 else None)


@given(st.integers(0, 1 << 40), st.integers(0, 1 << 40))
def test_percent_bounds(part: int, whole: int) -> None:
    got = values.percent(part, whole)
    if whole == 0:
        assert got is None
    else:
        assert got is not None and 0 <= got <= 100
        if part <= whole:
            assert got == part * 100 // whole


@given(st.integers(0, 10**7))
def test_watts_truncate_milliwatts(mw: int) -> None:
    assert values.watts(mw) == mw // 1000
    assert values.mib(mw << 20) == mw
