"""Hygon partition ("MIG") mode over the libhydmi_mig stand-in (tests/stubs/hygon/fake_hydmi_mig.c):
``hygon-k100-mig`` is a node in MIG mode, ``hygon-k100`` one without the library."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import pytest
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorStatus,
    DevicesGroup,
)
from gpustack_operator.manufacturers.hygon import dmi
from gpustack_operator.manufacturers.hygon.detect import withhold_divergent_profiles

from tests.conftest import copy_host, host
from tests.stubs.keyvalue import edit_kv_fixture
from tests.unit.test_amd_detect import detect, detected

LIB = "opt/hyhal/lib/libhydmi_mig.so.1"
PROFILES = ["2g.15gb", "4g.31gb", "8g.63gb"]


def edit(root: Path, **values: object) -> None:
    edit_kv_fixture(root / (LIB + ".fixture"), **values)


def accelerators(root: Path) -> list[Accelerator]:
    (group,) = detected(detect(root, "hygon")).groups
    return group.accelerators


def test_a_partitioned_node_offers_partitions_only() -> None:
    (group,) = detected(detect(host("hygon-k100-mig"), "hygon")).groups
    assert (group.id, group.name, group.memory, group.cores, group.compute_capability) == (
        "k100",
        "K100",
        65520,
        120,
        "gfx926",
    )
    assert len(group.accelerators) == 4
    for acc in group.accelerators:
        # never both families on one accelerator: logical count 0, as NVIDIA's MIG cards
        assert acc.status.logical_sliced == AcceleratorLogicalSliced(count=0)
        sliced = acc.status.physical_sliced
        assert sliced is not None and sliced.count == 4
        assert [p.name for p in sliced.profiles] == PROFILES  # the driver's names, "MIG " stripped
        small, medium, whole = sliced.profiles
        assert (small.memory_mib, small.compute_slices, small.memory_slices, small.count) == (16380, 1, 1, 4)
        assert [(p.start, p.length) for p in small.placements] == [(0, 1), (1, 1), (2, 1), (3, 1)]
        assert (medium.memory_mib, medium.memory_slices, medium.count) == (32760, 2, 2)
        assert [(p.start, p.length) for p in medium.placements] == [(0, 2), (2, 2)]
        assert (whole.memory_mib, whole.memory_slices, whole.count) == (65520, 4, 1)


def test_a_node_without_the_library_keeps_logical_slicing() -> None:
    for acc in accelerators(host("hygon-k100")):
        assert acc.status.logical_sliced == AcceleratorLogicalSliced(count=4)
        assert acc.status.physical_sliced is None


def test_mode_off_is_logical_slicing(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, mig=0, mig_pending=0)
    for acc in accelerators(root):
        assert acc.status.logical_sliced == AcceleratorLogicalSliced(count=4)
        assert acc.status.physical_sliced is None


def test_not_supported_is_an_answer_not_a_failure(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, mode_error=3)  # NOT_SUPPORTED: no DCU of the system supports MIG mode
    assert all(a.status.logical_sliced == AcceleratorLogicalSliced(count=4) for a in accelerators(root))


def test_an_unreadable_mode_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, mode_error=999)
    with caplog.at_level(logging.ERROR):
        accs = accelerators(root)
    assert len(accs) == 4  # still detected, still whole-card accelerators
    for acc in accs:
        assert acc.status.logical_sliced is None and acc.status.physical_sliced is None
    assert "MIG mode could not be read" in caplog.text and "neither" in caplog.text


def test_a_library_that_will_not_load_is_no_partitioning(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    (root / LIB).write_bytes(b"\x7fELF truncated")
    assert all(a.status.logical_sliced == AcceleratorLogicalSliced(count=4) for a in accelerators(root))


def test_an_unreachable_dcu_offers_nothing(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, device_1_handle_error=999)
    accs = accelerators(root)
    assert accs[1].status.logical_sliced == AcceleratorLogicalSliced(count=0)
    assert accs[1].status.physical_sliced is None
    assert all(a.status.physical_sliced is not None for a in (accs[0], accs[2], accs[3]))


def test_a_profile_whose_placements_are_unreadable_is_withheld(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, **{"profile.1.placements_error": 999})  # 4g.31gb (profile id 1)
    sliced = accelerators(root)[0].status.physical_sliced
    assert sliced is not None and [p.name for p in sliced.profiles] == ["2g.15gb", "8g.63gb"]


def test_an_unanswered_width_is_left_out_and_the_rest_stands(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, **{"profile.0.error": 999})  # the one-slice width: not an absent code
    (group,) = detected(detect(root, "hygon")).groups
    sliced = group.accelerators[0].status.physical_sliced
    assert sliced is not None and [p.name for p in sliced.profiles] == ["4g.31gb", "8g.63gb"]
    assert sliced.count == 2 and group.cores == 120  # 60 x 2 and 120 x 1 still state the card


def test_a_profile_without_a_placement_is_withheld(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, **{"profile.2.placements": ""})
    sliced = accelerators(root)[0].status.physical_sliced
    assert sliced is not None and [p.name for p in sliced.profiles] == ["2g.15gb", "4g.31gb"]


def test_no_publishable_profile_is_no_partition_capability(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, profiles=0)  # a driver installed without virtualization support reports none
    for acc in accelerators(root):
        assert acc.status.physical_sliced is None
        assert acc.status.logical_sliced == AcceleratorLogicalSliced(count=0)


def test_cores_come_from_the_profiles_in_mig_mode(tmp_path: Path) -> None:
    root = copy_host("hygon-k100-mig", tmp_path)
    edit(root, **{"profile.0.cu": 31, "profile.1.cu": 62})  # 31 x 4 = 124 is the largest product
    assert detected(detect(root, "hygon")).groups[0].cores == 124


def _profile(name: str, count: int) -> AcceleratorPhysicalSlicedProfile:
    return AcceleratorPhysicalSlicedProfile(name=name, memory_mib=1000 * count, count=count)


def test_profiles_the_cards_of_a_group_disagree_on_are_withheld() -> None:
    def acc(i: int, *profiles: AcceleratorPhysicalSlicedProfile) -> Accelerator:
        sliced = AcceleratorPhysicalSliced(profiles=list(profiles), count=max(p.count for p in profiles))
        return Accelerator(id=f"GPU-{i}", index=i, status=AcceleratorStatus(physical_sliced=sliced))

    group = DevicesGroup(
        id="k100",
        manufacturer="hygon",
        name="K100",
        accelerators=[acc(0, _profile("a", 4), _profile("b", 2)), acc(1, _profile("a", 3), _profile("b", 2))],
    )
    withhold_divergent_profiles(group)
    for a in group.accelerators:
        assert a.status.physical_sliced is not None
        assert [p.name for p in a.status.physical_sliced.profiles] == ["b"]
        assert a.status.physical_sliced.count == 2  # the ceiling recomputed from what survives


def test_struct_layout_matches_the_vendor_header() -> None:
    info = dmi._GpuInstanceProfileInfo
    assert ctypes.sizeof(info) == 280
    assert (info.id.offset, info.memory_size_MB.offset, info.name.offset) == (0, 16, 24)
    assert ctypes.sizeof(dmi._Placement) == 8
