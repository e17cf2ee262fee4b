"""T-Head over HGML: detection with MIG-named partition profiles, failure injection and monitor,
against the libhgml stand-in (tests/stubs/thead/fake_hgml.c) in ``thead-ppu`` (PPUs 6-7 in MIG mode)."""

from __future__ import annotations

import re
from pathlib import Path

from gpustack_operator.discovery.detect import monitor_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, Measured, Unmeasured
from gpustack_operator.manufacturers.thead.detect import profile_name
from gpustack_operator.manufacturers.thead.hgml import runtime_version_string
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import copy_host, empty, host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "usr/local/PPU_SDK/lib/libhgml.so"


def edit_fixture(root: Path, **values: object) -> None:
    edit_kv_fixture(root / (LIB + ".fixture"), **values)


def detect(root: Path) -> Detected | Unmeasured:
    return detect_one(root, "thead")


@given(st.integers(1, 64), st.integers(1, 512), st.sampled_from(["MIG ", ""]))
def test_profile_names_strip_mig_prefix(g: int, gb: int, prefix: str) -> None:
    assert profile_name(f"{prefix}{g}g.{gb}gb") == f"{g}g.{gb}gb"
    assert profile_name(f"{prefix}{g}g.{gb}gb+me") is None


@given(st.text(max_size=30))
def test_profile_names_are_resource_segments(raw: str) -> None:
    name = profile_name(raw)
    assert name is None or (re.fullmatch(r"[a-z0-9]([a-z0-9.\-]*[a-z0-9])?", name) and "+" not in name)


@given(st.integers(1, 99), st.integers(0, 99))
def test_runtime_version_string(major: int, minor: int) -> None:
    assert runtime_version_string(major * 1000 + minor * 10) == f"{major}.{minor}"
    assert runtime_version_string(-major) is None


def test_detects_ppus_logical_and_partitioned() -> None:
    outcome = detect(host("thead-ppu"))
    assert isinstance(outcome, Detected)
    (group,) = outcome.groups
    assert (group.id, group.name, group.memory, group.cores) == ("ppu-zw810e", "PPU-ZW810E", 98304, 128)
    assert (group.driver_version, group.runtime_version, group.compute_capability) == ("1.5.2", "12.3", "8.0")
    accs = group.accelerators
    assert [a.physical_indexes for a in accs] == [[i] for i in range(8)]
    for a in accs[:6]:
        assert a.status.physical_sliced is None
        assert a.status.logical_sliced and a.status.logical_sliced.count == 128
        assert a.status.logical_sliced.cores_percentage_overcommit
    for a in accs[6:]:
        assert a.status.logical_sliced is None  # never both on one accelerator
        sliced = a.status.physical_sliced
        assert sliced is not None and sliced.count == 8
        assert [p.name for p in sliced.profiles] == ["1g.12gb", "2g.24gb", "4g.48gb", "8g.96gb"]  # +me dropped
        p2 = sliced.profiles[1]
        assert (p2.memory_mib, p2.compute_slices, p2.memory_slices, p2.count) == (24576, 2, 2, 4)
        assert [(pl.start, pl.length) for pl in p2.placements] == [(0, 2), (2, 2), (4, 2), (6, 2)]


def test_unreadable_mig_mode_fails_closed(tmp_path: Path) -> None:
    root = copy_host("thead-ppu", tmp_path)
    edit_fixture(root, device_6_mig_error=999)
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    accs = outcome.groups[0].accelerators
    assert len(accs) == 8  # still detected
    assert accs[6].status.physical_sliced is None and accs[6].status.logical_sliced is None  # neither
    assert accs[7].status.physical_sliced is not None and accs[0].status.logical_sliced is not None


def test_mig_not_supported_is_logical_slicing(tmp_path: Path) -> None:
    root = copy_host("thead-ppu", tmp_path)
    edit_fixture(root, device_6_mig_error=3)  # NOT_SUPPORTED
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    acc6 = outcome.groups[0].accelerators[6]
    assert acc6.status.physical_sliced is None
    assert acc6.status.logical_sliced is not None and acc6.status.logical_sliced.count == 128


def test_failure_injection(tmp_path: Path) -> None:
    root = copy_host("thead-ppu", tmp_path)
    edit_fixture(root, device_2_uuid_error=15)
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    assert "0000:40:00.0" not in [a.topology.pci_bus_id for a in outcome.groups[0].accelerators]
    assert len(outcome.groups[0].accelerators) == 7

    edit_fixture(root, count_error=1)
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured) and "hgmlDeviceGetCount_v2" in outcome.reason

    edit_fixture(root, init=9)
    assert empty(detect(root))


def test_monitor() -> None:
    sample = monitor_node(HostRoot(host("thead-ppu")), resolve_manufacturers(["thead"]), load_settings())
    outcome = sample.outcomes["thead"]
    assert isinstance(outcome, Measured) and len(outcome.samples) == 8
    s7 = outcome.samples[7]
    assert (s7.memory, s7.memory_usage, s7.temperature, s7.power_usage) == (98304, 924, 57, 157)
