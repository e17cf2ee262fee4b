"""The host vendor CLIs' parsers (preflight question 1's cross-check), over the output shapes each
CLI prints in the field, and against hostile input: each returns a count or a declared problem,
never an exception."""

from __future__ import annotations

import pytest
from gpustack_operator.manufacturers.amd.hostcli import HOST_CLI as AMD_CLI
from gpustack_operator.manufacturers.amd.hostcli import count_rocm_smi_showuniqueid
from gpustack_operator.manufacturers.ascend.hostcli import HOST_CLI as ASCEND_CLI
from gpustack_operator.manufacturers.ascend.hostcli import MAX_CHIPS_PER_NPU, count_npu_smi_info_l
from gpustack_operator.manufacturers.base import HostCount
from gpustack_operator.manufacturers.nvidia.hostcli import HOST_CLI as NVIDIA_CLI
from gpustack_operator.manufacturers.nvidia.hostcli import count_nvidia_smi_l
from hypothesis import given
from hypothesis import strategies as st

# -- nvidia-smi -L -------------------------------------------------------------------------------

H100_X8 = "".join(
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-6d3c7a1e-2f0b-4a8e-9c1d-0000000000{i:02d})\n" for i in range(8)
)
MIG_R470 = (
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b2c3d4e-0000-1111-2222-333344445555)\n"
    "  MIG 3g.40gb     Device  0: (UUID: MIG-7a8b9c0d-1111-2222-3333-444455556666)\n"
    "  MIG 2g.20gb     Device  1: (UUID: MIG-8a8b9c0d-1111-2222-3333-444455556666)\n"
    "  MIG 1g.10gb     Device  2: (UUID: MIG-9a8b9c0d-1111-2222-3333-444455556666)\n"
    "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2b2c3d4e-0000-1111-2222-333344445555)\n"
    "  MIG 7g.80gb     Device  0: (UUID: MIG-aa8b9c0d-1111-2222-3333-444455556666)\n"
    "GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-3b2c3d4e-0000-1111-2222-333344445555)\n"
)
MIG_R450 = (  # the R450/R460 form: MIG UUIDs name their parent GPU
    "GPU 0: A100-SXM4-40GB (UUID: GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f)\n"
    "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0)\n"
    "  MIG 1g.5gb Device 1: (UUID: MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/8/0)\n"
    "GPU 1: A100-SXM4-40GB (UUID: GPU-6c89852c-d268-c3f3-1b07-005d5ae1dc3f)\n"
)
MIG_TABS = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c3d4e-0000-1111-2222-333344445555)\n"
    "\tMIG 1g.10gb\tDevice 0: (UUID: MIG-7a8b9c0d-1111-2222-3333-444455556666)\n"
    " \t MIG 1g.10gb     Device  1: (UUID: MIG-8a8b9c0d-1111-2222-3333-444455556666)\n"
)
LEGACY = (
    "GPU 0: Tesla K80 (UUID: GPU-2f3c5e7a-4b6d-8e9f-0a1b-2c3d4e5f6a7b)\n"
    "GPU 1: GeForce GTX 1080 Ti (UUID: GPU-3f3c5e7a-4b6d-8e9f-0a1b-2c3d4e5f6a7b)\n"
    "GPU 2: Quadro P400 (UUID: N/A)\n"
    "GPU 3: GeForce 8600 GT\n"
)
DISPLAY_AND_COMPUTE = (
    "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-a1b2c3d4-e5f6-a7b8-c9d0-e1f2a3b4c5d6)\n"
    "GPU 1: NVIDIA RTX A400 (UUID: GPU-b1b2c3d4-e5f6-a7b8-c9d0-e1f2a3b4c5d6)\n"
)
GAPS = (
    "GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    "GPU 2: NVIDIA L40S (UUID: GPU-22222222-0000-0000-0000-000000000000)\n"
    "GPU 5: NVIDIA L40S (UUID: GPU-55555555-0000-0000-0000-000000000000)\n"
)
VGPU = "GPU 0: GRID A100D-4C (UUID: GPU-7c6d5e4f-3a2b-1c0d-9e8f-7a6b5c4d3e2f)\n"
NO_HANDLE = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6d3c7a1e-2f0b-4a8e-9c1d-000000000000)\n"
    "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-6d3c7a1e-2f0b-4a8e-9c1d-000000000002)\n"
)


@pytest.mark.parametrize(
    ("output", "seen", "problem"),
    [
        pytest.param(H100_X8, [f"GPU {i}" for i in range(8)], None, id="h100-x8"),
        pytest.param(MIG_R470, ["GPU 0", "GPU 1", "GPU 2"], None, id="mig-children-are-not-gpus"),
        pytest.param(MIG_R450, ["GPU 0", "GPU 1"], None, id="mig-r450-form"),
        pytest.param(MIG_TABS, ["GPU 0"], None, id="mig-tab-and-space-indent"),
        pytest.param(LEGACY, ["GPU 0", "GPU 1", "GPU 2", "GPU 3"], None, id="legacy-uuid-na-and-none"),
        pytest.param(DISPLAY_AND_COMPUTE, ["GPU 0", "GPU 1"], None, id="display-gpus"),
        pytest.param(GAPS, ["GPU 0", "GPU 2", "GPU 5"], None, id="non-contiguous"),
        pytest.param(VGPU, ["GPU 0"], None, id="vgpu"),
        pytest.param(H100_X8 + "\n\n  \n", [f"GPU {i}" for i in range(8)], None, id="trailing-blank-lines"),
        pytest.param(H100_X8.replace("\n", "\r\n"), [f"GPU {i}" for i in range(8)], None, id="crlf"),
        pytest.param(
            "  GPU 0: NVIDIA T4 (UUID: GPU-x)\n\tGPU 1: NVIDIA T4 (UUID: GPU-y)\n",
            ["GPU 0", "GPU 1"],
            None,
            id="indented-gpu-lines",
        ),
        pytest.param("GPU 0: A\nGPU 0: A\nGPU 00: A\n", ["GPU 0"], None, id="repeated-index-once"),
        pytest.param("GPU 3: NVIDIA H1", ["GPU 3"], None, id="truncated-after-the-head"),
        pytest.param("GPU 0:NVIDIA A10 (UUID: GPU-z)\nGPU\t1 :NVIDIA A10\n", ["GPU 0", "GPU 1"], None, id="spacing"),
        pytest.param("", [], None, id="empty"),
        pytest.param("No devices were found\n", [], None, id="no-devices"),
        pytest.param(NO_HANDLE, ["GPU 0", "GPU 2"], "Unable to determine the device handle", id="no-handle"),
        pytest.param(
            "GPU 0: A\nGPU 99999999999999999999999: B\n", ["GPU 0"], "GPU 99999999999999999999999", id="huge-index"
        ),
        pytest.param("GPU 0: A\nGPU 3", ["GPU 0"], "'GPU 3'", id="cut-before-the-colon"),
        pytest.param("GPU x: A\n", [], "'GPU x: A'", id="no-index"),
        pytest.param(
            "NVIDIA-SMI couldn't find libnvidia-ml.so library\n", [], "no line of the form", id="not-a-listing"
        ),
        pytest.param("GPU 0: \ufffd\ufffd\x00 (UUID: GPU-\x00)\n", ["GPU 0"], None, id="garbled-name"),
    ],
)
def test_nvidia_smi_l(output: str, seen: list[str], problem: str | None) -> None:
    result = count_nvidia_smi_l(output)
    assert list(result.seen) == seen and result.accelerators == len(seen)
    if problem is None:
        assert result.problem is None
    else:
        assert result.problem is not None and problem in result.problem


# -- npu-smi info -l ----------------------------------------------------------------------------


def npu_block(npu: int | str, chips: int | str | None, indent: str = "        ", extra: bool = False) -> str:
    lines = [f"{indent}NPU ID                         : {npu}"]
    if extra:
        lines += [
            f"{indent}Product Name                   : IT21PDAB01",
            f"{indent}Serial Number                  : 033LBH10P30001{npu}",
        ]
    if chips is not None:
        lines.append(f"{indent}Chip Count                     : {chips}")
    return "\n".join(lines) + "\n\n"


def npu_smi(total: int | str | None, blocks: list[str], indent: str = "        ") -> str:
    head = f"{indent}Total Count                    : {total}\n\n" if total is not None else ""
    return head + "".join(blocks)


def chips(*per_npu: tuple[int | str, int]) -> list[str]:
    return [f"NPU {n} chip {c}" for n, k in per_npu for c in range(k)]


@pytest.mark.parametrize(
    ("output", "seen", "problem"),
    [
        pytest.param(
            npu_smi(8, [npu_block(i, 1) for i in range(8)]), chips(*((i, 1) for i in range(8))), None, id="910b-x8"
        ),
        pytest.param(
            npu_smi(2, [npu_block(i, 1, "\t", extra=True) for i in range(2)], "\t"),
            chips((0, 1), (1, 1)),
            None,
            id="tab-indent-with-product-and-serial",
        ),
        pytest.param(
            npu_smi(2, [npu_block(0, 2), npu_block(1, 2)]),
            chips((0, 2), (1, 2)),
            None,
            id="atlas-300i-duo-two-chips-per-npu",
        ),
        pytest.param(
            npu_smi(8, [npu_block(i, 2) for i in range(8)]),
            chips(*((i, 2) for i in range(8))),
            None,
            id="a3-910c-two-chips",
        ),
        pytest.param(npu_smi(1, [npu_block(8, 1, extra=True)]), chips((8, 1)), None, id="single-card-id-8"),
        pytest.param(
            "Total Count:2\nNPU ID:0\nChip Count:2\nNPU  ID   :   3\n Chip   Count\t:\t1 \n",
            chips((0, 2), (3, 1)),
            None,
            id="varying-spacing",
        ),
        pytest.param(
            npu_smi(2, [npu_block(0, "N/A"), npu_block(1, "NA")]),
            chips((0, 1), (1, 1)),
            None,
            id="chip-count-na-is-one",
        ),
        pytest.param(
            npu_smi(4, [npu_block(i, 2) for i in (0, 2, 2944, 32768)]),
            chips((0, 2), (2, 2), (2944, 2), (32768, 2)),
            None,
            id="non-contiguous-ids",
        ),
        pytest.param(
            "        NPU ID                         : 0\n        Product Name                   : IT21PMAA\n"
            "        Serial Number                  : 102326710\n\n"
            "        NPU ID                         : 1\n        Product Name                   : IT21PMAA\n",
            chips((0, 1), (1, 1)),
            None,
            id="legacy-without-chip-count",
        ),
        pytest.param(
            npu_smi(2, [npu_block("N/A", 1), npu_block("N/A", 2)]),
            ["NPU N/A (#1) chip 0", "NPU N/A (#2) chip 0", "NPU N/A (#2) chip 1"],
            None,
            id="npu-id-na",
        ),
        pytest.param(
            npu_smi(2, [npu_block(0, 1), npu_block(0, 2)]),
            chips((0, 2)),
            "states Total Count 2",
            id="repeated-npu-once",
        ),
        pytest.param(npu_smi(0, []), [], None, id="total-count-zero"),
        pytest.param("", [], None, id="empty"),
        pytest.param(
            npu_smi(8, [npu_block(i, 1) for i in range(8)]).replace("\n", "\r\n"),
            chips(*((i, 1) for i in range(8))),
            None,
            id="crlf",
        ),
        pytest.param(
            npu_smi(8, [npu_block(i, 1) for i in range(3)]),
            chips((0, 1), (1, 1), (2, 1)),
            "states Total Count 8 but lists 3 NPU(s)",
            id="cut-short",
        ),
        pytest.param("Chip Count : 2\nNPU ID : 0\n", chips((0, 1)), "'Chip Count : 2'", id="chips-before-any-npu"),
        pytest.param(
            npu_smi(1, [npu_block(0, 99999999999999999999)]),
            chips((0, 1)),
            "99999999999999999999",
            id="huge-chip-count",
        ),
        pytest.param(
            npu_smi(1, [npu_block(0, MAX_CHIPS_PER_NPU + 1)]),
            chips((0, 1)),
            "could not be read",
            id="chip-count-past-a-board",
        ),
        pytest.param(npu_smi(1, [npu_block(0, 0)]), chips((0, 1)), "could not be read", id="chip-count-zero"),
        pytest.param(
            npu_smi(1, [npu_block("1" * 30, 1)]),
            [f"NPU {'1' * 16!r} (#1) chip 0"],
            "could not be read",
            id="huge-npu-id-still-an-npu",
        ),
        pytest.param(
            "dcmi model initialized failed, because the device is used. ret is -8020\n",
            [],
            "printed no 'NPU ID",
            id="not-a-listing",
        ),
    ],
)
def test_npu_smi_info_l(output: str, seen: list[str], problem: str | None) -> None:
    result = count_npu_smi_info_l(output)
    assert list(result.seen) == seen and result.accelerators == len(seen)
    if problem is None:
        assert result.problem is None
    else:
        assert result.problem is not None and problem in result.problem


# -- rocm-smi --showuniqueid --------------------------------------------------------------------

BANNER = "============================ ROCm System Management Interface ============================\n"
SECTION = "====================================== Unique ID =======================================\n"
RULE = "=" * 90 + "\n"
END = "================================== End of ROCm SMI Log ===================================\n"


def rocm_smi(*lines: str, warnings: tuple[str, ...] = ()) -> str:
    return (
        "\n\n"
        + "".join(w + "\n" for w in warnings)
        + BANNER
        + SECTION
        + "".join(line + "\n" for line in lines)
        + RULE
        + END
    )


MI300X_X8 = rocm_smi(*(f"GPU[{i}]\t\t: Unique ID: 0x{i + 1:016x}" for i in range(8)))
ROCM6_SPACES = rocm_smi("GPU[0]          : Unique ID: 0xe54792172da5eeb", "GPU[1]          : Unique ID: N/A")
FULL_REPORT = (  # rocm-smi with more than one --show flag: only the Unique ID lines name GPUs
    BANNER
    + "======================================== ID ========================================\n"
    + "GPU[0]\t\t: GPU ID: 0x74a1\nGPU[1]\t\t: GPU ID: 0x74a1\n"
    + SECTION
    + "GPU[0]\t\t: Unique ID: 0x18f68e602b8a790f\nGPU[1]\t\t: Unique ID: 0x28f68e602b8a790f\n"
    + "====================================== VBIOS =======================================\n"
    + "GPU[0]\t\t: VBIOS version: 113-M3000100-102\nGPU[1]\t\t: VBIOS version: 113-M3000100-102\n"
    + RULE
    + END
)


@pytest.mark.parametrize(
    ("output", "seen", "problem"),
    [
        pytest.param(MI300X_X8, [f"GPU[{i}]" for i in range(8)], None, id="mi300x-x8-tabs"),
        pytest.param(ROCM6_SPACES, ["GPU[0]", "GPU[1]"], None, id="rocm6-spaces-and-na"),
        pytest.param(
            rocm_smi("GPU[0]\t\t: Unique ID: N/A", "GPU[1]\t\t: Unique ID: N/A"),
            ["GPU[0]", "GPU[1]"],
            None,
            id="every-id-na-still-counts",
        ),
        pytest.param(
            rocm_smi(
                "GPU[0]\t\t: Unique ID: 0x1",
                warnings=(
                    "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status",
                ),
            ),
            ["GPU[0]"],
            None,
            id="warning-lines",
        ),
        pytest.param(FULL_REPORT, ["GPU[0]", "GPU[1]"], None, id="other-fields-do-not-count"),
        pytest.param(
            rocm_smi("GPU[0]\t\t: Unique ID: 0x1", "GPU[0]\t\t: Unique ID: 0x1"),
            ["GPU[0]"],
            None,
            id="repeated-index-once",
        ),
        pytest.param(
            rocm_smi("GPU[1]\t\t: Unique ID: 0x1", "GPU[4]\t\t: Unique ID: 0x2"),
            ["GPU[1]", "GPU[4]"],
            None,
            id="non-contiguous",
        ),
        pytest.param(MI300X_X8.replace("\n", "\r\n"), [f"GPU[{i}]" for i in range(8)], None, id="crlf"),
        pytest.param(rocm_smi(), [], None, id="banner-without-gpus"),
        pytest.param("", [], None, id="empty"),
        pytest.param("GPU[3]:Unique ID:0x1", ["GPU[3]"], None, id="no-padding-truncated"),
        pytest.param(
            rocm_smi("GPU[0]\t\t: Unique ID: 0x1", "GPU[99999999999999999999999]\t: Unique ID: 0x2"),
            ["GPU[0]"],
            "GPU[99999999999999999999999]",
            id="huge-index",
        ),
        pytest.param(rocm_smi("GPU[x]\t\t: Unique ID: 0x1"), [], "'GPU[x]", id="no-index"),
        pytest.param("Segmentation fault\n", [], "neither its banner", id="not-a-listing"),
    ],
)
def test_rocm_smi_showuniqueid(output: str, seen: list[str], problem: str | None) -> None:
    result = count_rocm_smi_showuniqueid(output)
    assert list(result.seen) == seen and result.accelerators == len(seen)
    if problem is None:
        assert result.problem is None
    else:
        assert result.problem is not None and problem in result.problem


def test_each_host_cli_carries_its_parser() -> None:
    assert NVIDIA_CLI.count is count_nvidia_smi_l and NVIDIA_CLI.args == ("-L",)
    assert ASCEND_CLI.count is count_npu_smi_info_l and ASCEND_CLI.args == ("info", "-l")
    assert AMD_CLI.count is count_rocm_smi_showuniqueid and AMD_CLI.args == ("--showuniqueid",)


# -- well-formed listings round-trip ---------------------------------------------------------------

indexes = st.lists(st.integers(0, 4095), unique=True, max_size=24)
uuid_suffix = st.one_of(st.just(""), st.just(" (UUID: N/A)"), st.uuids().map(lambda u: f" (UUID: GPU-{u})"))


@given(st.lists(st.tuples(st.integers(0, 4095), uuid_suffix, st.integers(0, 7)), max_size=24), st.booleans())
def test_nvidia_listing_counts_its_gpus_and_never_their_mig_devices(
    gpus: list[tuple[int, str, int]], crlf: bool
) -> None:
    lines = []
    for index, uuid, migs in gpus:
        lines.append(f"GPU {index}: NVIDIA A100-SXM4-80GB{uuid}")
        lines += [f"  MIG 1g.10gb     Device  {m}: (UUID: MIG-{index}-{m})" for m in range(migs)]
    output = ("\r\n" if crlf else "\n").join(lines)
    result = count_nvidia_smi_l(output)
    assert result.accelerators == len({i for i, _, _ in gpus}) and result.problem is None


@given(
    st.lists(
        st.tuples(st.integers(0, 65535), st.one_of(st.none(), st.integers(1, 4), st.just("N/A"))),
        unique_by=lambda t: t[0],
        max_size=16,
    ),
    st.sampled_from(["        ", "\t", ""]),
)
def test_npu_listing_sums_chips(npus: list[tuple[int, int | str | None]], indent: str) -> None:
    output = npu_smi(len(npus), [npu_block(n, c, indent) for n, c in npus], indent)
    expected = sum(c if isinstance(c, int) else 1 for _, c in npus)
    result = count_npu_smi_info_l(output)
    assert result.accelerators == expected and result.problem is None


@given(indexes, st.sampled_from(["\t\t", "          ", " "]), st.booleans())
def test_rocm_listing_counts_gpu_indexes(gpus: list[int], pad: str, na: bool) -> None:
    value = "N/A" if na else "0x18f68e602b8a790f"
    result = count_rocm_smi_showuniqueid(rocm_smi(*(f"GPU[{i}]{pad}: Unique ID: {value}" for i in gpus)))
    assert result.accelerators == len(gpus) and result.problem is None


# -- hostile input ---------------------------------------------------------------------------------

PARSERS = [count_nvidia_smi_l, count_npu_smi_info_l, count_rocm_smi_showuniqueid]
VOCABULARY = [
    "GPU ",
    "GPU[",
    "]",
    ": ",
    ":",
    "MIG ",
    "Device ",
    "(UUID: ",
    "GPU-",
    "MIG-",
    ")",
    "N/A",
    "NPU ID",
    "Chip Count",
    "Total Count",
    "Unique ID",
    "0x",
    "=====",
    "WARNING: ",
    "Unable to determine the device handle",
    "\t",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\x00",
    "\ufffd",
    "-1",
    "0",
    "7",
    "99999999999999999999999",
    "9" * 5000,
]
hostile_text = st.one_of(
    st.text(),
    st.binary().map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(st.one_of(st.sampled_from(VOCABULARY), st.text(max_size=8)), max_size=60).map("".join),
)


def check(result: HostCount, output: str) -> None:
    assert isinstance(result, HostCount)
    assert len(set(result.seen)) == len(result.seen) == result.accelerators >= 0
    assert result.problem is None or isinstance(result.problem, str)
    lines = len(output.splitlines())
    assert result.accelerators <= lines * MAX_CHIPS_PER_NPU


@pytest.mark.hostile
@given(hostile_text, st.integers(0, 2), st.integers(0, 64))
def test_host_cli_parsers_take_anything(text: str, which: int, cut: int) -> None:
    parser = PARSERS[which]
    check(parser(text), text)
    truncated = text[: max(0, len(text) - cut)]
    check(parser(truncated), truncated)


@pytest.mark.hostile
@given(st.sampled_from([H100_X8, MIG_R470, LEGACY]), st.integers(0, 2000), st.binary(max_size=16))
def test_nvidia_listing_cut_or_spliced_anywhere(output: str, at: int, junk: bytes) -> None:
    spliced = output[:at] + junk.decode("utf-8", errors="replace") + output[at:]
    for text in (output[:at], spliced):
        check(count_nvidia_smi_l(text), text)


@pytest.mark.hostile
@given(st.integers(0, 2000), st.binary(max_size=16))
def test_npu_listing_cut_or_spliced_anywhere(at: int, junk: bytes) -> None:
    output = npu_smi(4, [npu_block(i, 2, extra=True) for i in range(4)])
    spliced = output[:at] + junk.decode("utf-8", errors="replace") + output[at:]
    for text in (output[:at], spliced):
        result = count_npu_smi_info_l(text)
        check(result, text)
        assert result.accelerators <= 8 + 1 + MAX_CHIPS_PER_NPU  # junk can add one garbled NPU at most


@pytest.mark.hostile
@given(st.integers(0, 2000), st.binary(max_size=16))
def test_rocm_listing_cut_or_spliced_anywhere(at: int, junk: bytes) -> None:
    spliced = MI300X_X8[:at] + junk.decode("utf-8", errors="replace") + MI300X_X8[at:]
    for text in (MI300X_X8[:at], spliced):
        result = count_rocm_smi_showuniqueid(text)
        check(result, text)
        assert result.accelerators <= 9
