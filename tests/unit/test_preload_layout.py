"""Which preload-library subtrees a node needs, from its detected groups and CPU architecture."""

from __future__ import annotations

import pytest
from gpustack_operator.ledger.models import Accelerator, AcceleratorLogicalSliced, AcceleratorStatus, DevicesGroup
from gpustack_operator.preload.layout import runtime_major, wanted_subtrees
from gpustack_operator.preload.stage import validate_subtree
from hypothesis import given
from hypothesis import strategies as st

MANUFACTURERS = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]


def group(manufacturer: str, runtime: str | None = None, family: str | None = None, gid: str = "") -> DevicesGroup:
    return DevicesGroup(
        id=gid or f"{manufacturer}-0", manufacturer=manufacturer, name="x", runtime_version=runtime, family=family
    )


@pytest.mark.parametrize(
    ("version", "major"),
    [("12.4", 12), ("11.8.89", 11), ("12040", 12), ("8.0.RC2", 8), ("v9.1.0", 9), ("CUDA 13.0", 13), (None, None)],
)
def test_runtime_major(version: str | None, major: int | None) -> None:
    assert runtime_major(version) == major


def test_runtime_major_without_a_number() -> None:
    assert runtime_major("unknown") is None


def test_nvidia_is_per_cuda_major() -> None:
    layout = wanted_subtrees([group("nvidia", "12.4")], "amd64")
    assert layout.subtrees == ["nvidia/cuda-12"]
    assert layout.skipped == [] and layout.assumptions == []
    assert wanted_subtrees([group("nvidia", "11.8")], "arm64").subtrees == ["nvidia/cuda-11"]


def test_nvidia_without_a_runtime_version_takes_the_default_major_and_says_so() -> None:
    layout = wanted_subtrees([group("nvidia", None, gid="nvidia-h100")], "amd64")
    assert layout.subtrees == ["nvidia/cuda-12"]
    (note,) = layout.assumptions
    assert "nvidia-h100" in note and "unknown" in note and "12" in note


def test_ascend_is_per_cann_major_and_family() -> None:
    layout = wanted_subtrees([group("ascend", "8.0.RC2", "910B")], "arm64")
    assert layout.subtrees == ["ascend/cann-8-910b"]
    assert wanted_subtrees([group("ascend", "9.0.0", "Ascend310P")], "amd64").subtrees == ["ascend/cann-9-310p"]


def test_ascend_default_major_is_8() -> None:
    layout = wanted_subtrees([group("ascend", None, "910C")], "arm64")
    assert layout.subtrees == ["ascend/cann-8-910c"]
    assert layout.assumptions


def test_ascend_without_a_family_is_not_staged() -> None:
    layout = wanted_subtrees([group("ascend", "8.0.RC2", None, gid="ascend-npu")], "arm64")
    assert layout.subtrees == []
    (skip,) = layout.skipped
    assert (skip.manufacturer, skip.group) == ("ascend", "ascend-npu")
    assert "family" in skip.reason


def test_ascend_with_an_unusable_family_is_not_staged() -> None:
    layout = wanted_subtrees([group("ascend", "8.0", "../x")], "arm64")
    assert layout.subtrees == []
    assert "../x" in layout.skipped[0].reason


@pytest.mark.parametrize("manufacturer", ["amd", "thead", "iluvatar"])
def test_flat_manufacturers(manufacturer: str) -> None:
    layout = wanted_subtrees([group(manufacturer, "6.2.1")], "amd64")
    assert layout.subtrees == [manufacturer]
    assert layout.assumptions == []


@pytest.mark.parametrize("arch", ["arm64", "aarch64", "ARM64"])
@pytest.mark.parametrize("manufacturer", ["amd", "thead"])
def test_no_amd_or_thead_shim_on_arm64(manufacturer: str, arch: str) -> None:
    layout = wanted_subtrees([group(manufacturer)], arch)
    assert layout.subtrees == []
    assert "arm64" in layout.skipped[0].reason


def test_iluvatar_is_staged_on_arm64() -> None:
    assert wanted_subtrees([group("iluvatar")], "arm64").subtrees == ["iluvatar"]


@pytest.mark.parametrize("manufacturer", ["cambricon", "hygon", "metax", "mthreads", "intel"])
def test_manufacturers_without_a_preload_library(manufacturer: str) -> None:
    layout = wanted_subtrees([group(manufacturer)], "amd64")
    assert layout.subtrees == []
    assert "no preload library" in layout.skipped[0].reason


def test_one_subtree_for_several_groups_of_one_stack() -> None:
    groups = [group("nvidia", "12.4", gid="a"), group("nvidia", "12.2", gid="b"), group("amd", gid="c")]
    assert wanted_subtrees(groups, "amd64").subtrees == ["amd", "nvidia/cuda-12"]


def test_unknown_architecture_excludes_nothing() -> None:
    assert wanted_subtrees([group("amd"), group("thead")], "unknown").subtrees == ["amd", "thead"]


versions = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.from_regex(r"\A[0-9]{1,5}(\.[0-9]{1,3}){0,2}(\.RC[0-9])?\Z"),
)
families = st.one_of(st.none(), st.text(max_size=10), st.sampled_from(["910B", "910C", "310P", "950", "Ascend910B"]))
groups_strategy = st.lists(
    st.builds(group, st.sampled_from([*MANUFACTURERS, "intel", "x"]), versions, families), max_size=8
)
arches = st.sampled_from(["amd64", "arm64", "aarch64", "unknown", "riscv64"])


@given(groups_strategy, arches)
def test_wanted_subtrees_invariants(groups: list[DevicesGroup], arch: str) -> None:
    layout = wanted_subtrees(groups, arch)
    # sorted, unique, and every name is one staging accepts (no '..', no hidden names)
    assert layout.subtrees == sorted(set(layout.subtrees))
    for subtree in layout.subtrees:
        parts = validate_subtree(subtree)
        assert parts[0] in {g.manufacturer for g in groups}
        if parts[0] == "nvidia":
            assert len(parts) == 2 and parts[1].startswith("cuda-") and parts[1][5:].isdigit()
        elif parts[0] == "ascend":
            assert len(parts) == 2 and parts[1].startswith("cann-") and parts[1] == parts[1].lower()
        else:
            assert parts[0] in {"amd", "iluvatar", "thead"} and len(parts) == 1
    # no AMD and no T-Head shim on arm64
    if arch in {"arm64", "aarch64"}:
        assert not {"amd", "thead"} & set(layout.subtrees)
    # at most one subtree per distinct runtime major; every group is either staged or explained
    staged_manufacturers = {s.split("/")[0] for s in layout.subtrees}
    for g in groups:
        explained = any(s.group == g.id and s.manufacturer == g.manufacturer for s in layout.skipped)
        assert (g.manufacturer in staged_manufacturers) or explained
    for skip in layout.skipped:
        assert skip.reason
    # pure: the same input gives the same answer
    assert wanted_subtrees(groups, arch) == layout


def test_every_manufacturer_declares_its_preload_library_or_why_it_has_none() -> None:
    """The rule lives in each vendor's identity; a manufacturer added without one is caught here."""
    from gpustack_operator.manufacturers import REGISTRY
    from gpustack_operator.manufacturers.base import PreloadLibrary

    declared = {name: m.identity.preload for name, m in REGISTRY.items()}
    assert all(isinstance(rule, PreloadLibrary) or (isinstance(rule, str) and rule) for rule in declared.values())
    libraries = {name for name, rule in declared.items() if isinstance(rule, PreloadLibrary)}
    assert libraries == {"amd", "ascend", "iluvatar", "nvidia", "thead"}


def test_a_runtime_subdir_needs_a_default_major() -> None:
    from gpustack_operator.manufacturers.base import PreloadLibrary

    with pytest.raises(ValueError, match="needs a default major"):
        PreloadLibrary(directory="x", runtime="cuda")


def sliced_group(
    manufacturer: str, runtime: str | None, family: str | None, counts: list[int | None], gid: str = ""
) -> DevicesGroup:
    """A group whose accelerators the detection offered these logical slice counts (``None``: absent)."""
    g = group(manufacturer, runtime, family, gid)
    g.accelerators = [
        Accelerator(
            id=f"{g.id}-{i}",
            index=i,
            status=AcceleratorStatus(logical_sliced=None if n is None else AcceleratorLogicalSliced(count=n)),
        )
        for i, n in enumerate(counts)
    ]
    return g


def test_an_ascend_pair_without_a_slicing_build_is_not_staged() -> None:
    # 950 slices on CANN 9 only (reference rules §9): on CANN 8 the detection offers no slicing, and
    # the staging must not then demand ascend/cann-8-950, which the image never built
    from gpustack_operator.manufacturers.ascend import soc

    assert soc.logical_sliced("950", "8.0.RC2") is None
    unsliced = sliced_group("ascend", "8.0.RC2", "950", [None, None], gid="ascend-950pr")
    sliced = sliced_group("ascend", "8.0.RC2", "910B", [63], gid="ascend-910b2")
    layout = wanted_subtrees([unsliced, sliced], "arm64")
    assert layout.subtrees == ["ascend/cann-8-910b"]
    (skip,) = layout.skipped
    assert skip.group == "ascend-950pr" and "logical slicing" in skip.reason and "950" in skip.reason


def test_cards_offering_no_logical_slices_need_no_library() -> None:
    assert wanted_subtrees([sliced_group("nvidia", "12.2", None, [0, 0])], "amd64").subtrees == []  # all in MIG mode
    assert wanted_subtrees([sliced_group("nvidia", "12.2", None, [0, 128])], "amd64").subtrees == ["nvidia/cuda-12"]
    assert wanted_subtrees([sliced_group("thead", None, None, [None])], "amd64").subtrees == []  # mode unreadable
