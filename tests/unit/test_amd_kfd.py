"""The amdgpu/KFD sysfs reader shared by AMD and Hygon: its parsers and derivations."""

from __future__ import annotations

import pytest
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.amd.products import BUILT_IN, marketing_name, parse_amdgpu_ids
from hypothesis import given
from hypothesis import strategies as st

KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,30}", fullmatch=True)
VALUES = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.dictionaries(KEYS, VALUES, min_size=1, max_size=40))
def test_properties_round_trip(props: dict[str, int]) -> None:
    text = "".join(f"{k} {v}\n" for k, v in props.items())
    assert kfd.parse_properties(text) == props


@given(st.text(max_size=300))
def test_properties_parser_never_fails_otherwise(text: str) -> None:
    """Any input is either properties or a KfdError naming the file — never another exception."""
    try:
        props = kfd.parse_properties(text, "/sys/x/properties")
    except kfd.KfdError as exc:
        assert str(exc).startswith("/sys/x/properties: ")
    else:
        assert props and all(isinstance(v, int) and v >= 0 for v in props.values())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("simd_count 1216\nsimd_per_cu four\n", "simd_per_cu is 'four'"),
        ("simd_count -1\n", "not an unsigned decimal integer"),
        ("simd_count 0x4c0\n", "not an unsigned decimal integer"),
        ("simd_count 1 2\n", "line 1 is not '<key> <value>'"),
        ("simd_count 1\nsimd_count 2\n", "appears twice"),
        ("", "holds no properties"),
        ("\x00\x00\x00\n", "line 1"),
        ("Simd_Count 4\n", "no property name"),
    ],
)
def test_garbled_properties_are_refused(text: str, needle: str) -> None:
    with pytest.raises(kfd.KfdError) as err:
        kfd.parse_properties(text, "/sys/class/kfd/kfd/topology/nodes/2/properties")
    assert needle in str(err.value)
    assert err.value.path == "/sys/class/kfd/kfd/topology/nodes/2/properties"


@pytest.mark.parametrize(
    ("version", "gfx"),
    [
        (90402, "gfx942"),  # MI300X
        (90010, "gfx90a"),  # MI210 / MI250X
        (90008, "gfx908"),  # MI100
        (90012, "gfx90c"),
        (110000, "gfx1100"),  # RX 7900 XTX
        (110001, "gfx1101"),  # RX 7800 XT
        (120001, "gfx1201"),
        (90208, "gfx928"),  # Hygon K100_AI
        (0, None),  # a CPU node
        (91000, None),  # minor 10: no gfx name spells it
        (90016, None),  # stepping 16
    ],
)
def test_gfx_target_decoding(version: int, gfx: str | None) -> None:
    assert kfd.decode_gfx_target(version) == gfx


@given(st.integers(1, 63), st.integers(0, 9), st.integers(0, 15))
def test_gfx_target_decoding_is_exact(major: int, minor: int, step: int) -> None:
    name = kfd.decode_gfx_target(major * 10000 + minor * 100 + step)
    assert name == f"gfx{major}{minor}{step:x}"
    # and the name gives the version back: major digits, one minor digit, one hex stepping digit
    assert name is not None
    assert int(name[3:-2]) == major and int(name[-2]) == minor and int(name[-1], 16) == step


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_bus_id_from_location_id(domain: int, bus: int, slot: int, function: int) -> None:
    assert kfd.bus_id_of(domain, bus << 8 | slot << 3 | function) == f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"


def test_bus_id_of_an_mi300x_node() -> None:
    assert kfd.bus_id_of(0, 1280) == "0000:05:00.0"


@pytest.mark.parametrize(
    ("sysfs", "banks", "partitioned", "expected"),
    [
        (206141652992, 206141652992, False, 206141652992),  # whole discrete card: the DRM file
        (206141652992, 25767706624, True, 25767706624),  # a CPX partition: its own bank
        (536870912, 68719476736, False, 68719476736),  # an APU: the file is the BIOS carve-out
        (0, 17163091968, False, 17163091968),  # file reads zero: the banks
        (None, 17163091968, False, 17163091968),  # no file
        (17163091968, None, False, 17163091968),  # no banks listed
        (None, None, False, None),
    ],
)
def test_vram_follows_amd_smi_rule(
    sysfs: int | None, banks: int | None, partitioned: bool, expected: int | None
) -> None:
    assert kfd.vram_bytes(sysfs, banks, partitioned) == expected


@pytest.mark.parametrize(
    ("raw", "normalized"), [("6.2.0-66", "6.2"), ("24.04.1", "24.04"), ("6.3.1-48\n", "6.3"), ("7", "7")]
)
def test_versions_keep_major_minor(raw: str, normalized: str) -> None:
    assert kfd.normalize_version(raw) == normalized


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_umc_err_count_round_trip(ue: int, ce: int) -> None:
    assert kfd.parse_umc_err_count(f"ue: {ue}\nce: {ce}\n") == (ue, ce)


@given(st.text(max_size=80))
def test_umc_err_count_garbage_is_no_reading(text: str) -> None:
    result = kfd.parse_umc_err_count(text)
    assert result is None or all(v >= 0 for v in result)


def test_umc_err_count_needs_both_lines() -> None:
    assert kfd.parse_umc_err_count("ue: 3\n") is None


@pytest.mark.parametrize(
    ("gfx", "family"),
    [
        ("gfx942", "Arctic Islands"),
        ("gfx90a", "Arctic Islands"),
        ("gfx1101", "GC 11.0.0"),
        ("gfx1103", "GC 11.0.1"),
        ("gfx1030", "Navi"),
        ("gfx90c", "Raven"),
        ("gfx1201", "GC 12.0.0"),
        ("gfx801", None),
    ],
)
def test_family_from_gfx_target(gfx: str, family: str | None) -> None:
    family_id = kfd.family_id_of(gfx)
    assert (kfd.FAMILY_NAMES.get(family_id) if family_id is not None else None) == family


AMDGPU_IDS = (
    "# List of AMDGPU IDs\n#\n# Syntax:\n# device_id,\trevision_id,\tproduct_name\n\n1.0.0\n"
    "747E,\tC8,\tAMD Radeon RX 7800 XT\n747E,\tFF,\tAMD Radeon RX 7700 XT\n"
    "743F,\tC3,\tAMD Radeon RX 6500\n743F,\tC3,\tAMD Radeon RX 6500M\n"
    "7481,   C7,     AMD Steam Machine\nnot a row\n74A1,\t00,\tAMD Instinct MI300X, OAM\n"
)


def test_amdgpu_ids_parse_like_libdrm() -> None:
    table = parse_amdgpu_ids(AMDGPU_IDS)
    assert table[("747e", "c8")] == "AMD Radeon RX 7800 XT"
    assert table[("747e", "ff")] == "AMD Radeon RX 7700 XT"
    assert table[("743f", "c3")] == "AMD Radeon RX 6500"  # the first row of a pair wins
    assert table[("7481", "c7")] == "AMD Steam Machine"  # spaces instead of tabs
    assert table[("74a1", "00")] == "AMD Instinct MI300X, OAM"  # a comma inside the name
    assert len(table) == 5


NAME = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\n\r,"), min_size=1, max_size=40)


@given(
    st.dictionaries(
        st.tuples(st.from_regex(r"[0-9a-f]{4}", fullmatch=True), st.from_regex(r"[0-9a-f]{2}", fullmatch=True)),
        NAME.map(str.strip).filter(bool),
        max_size=20,
    )
)
def test_amdgpu_ids_round_trip(rows: dict[tuple[str, str], str]) -> None:
    text = "1.0.0\n" + "".join(f"{d.upper()},\t{r.upper()},\t{n}\n" for (d, r), n in rows.items())
    assert parse_amdgpu_ids(text) == rows


def test_marketing_name_needs_the_revision() -> None:
    assert marketing_name([], "747e", "c8") == "AMD Radeon RX 7800 XT"
    assert marketing_name([], "747e", "ff") == "AMD Radeon RX 7700 XT"
    assert marketing_name([], "747e", None) is None
    assert marketing_name([{("747e", "c8"): "from the host"}], "747E", "C8") == "from the host"
    assert ("74a1", "00") in BUILT_IN
