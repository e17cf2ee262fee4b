"""Moore Threads over MTML (opaque library/device/memory/gpu objects): detection, failure injection and
monitor, against the libmtml stand-in (tests/stubs/mthreads/fake_mtml.c) in ``mthreads-s4000``."""

from __future__ import annotations

import re
from pathlib import Path

from gpustack_operator.discovery.detect import monitor_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, Measured, Unmeasured
from gpustack_operator.manufacturers.groups import normalize_bus_id
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import copy_host, empty, host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "usr/lib/x86_64-linux-gnu/libmtml.so"


def edit_fixture(root: Path, **values: object) -> None:
    edit_kv_fixture(root / (LIB + ".fixture"), **values)


def detect(root: Path) -> Detected | Unmeasured:
    return detect_one(root, "mthreads")


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 255), st.integers(0, 31), st.integers(0, 7))
def test_mtml_sbdf_joins_the_pci_scan(segment: int, bus: int, dev: int, fn: int) -> None:
    sbdf = f"{segment:08x}:{bus:02x}:{dev:02x}.{fn}"  # MtmlPciInfo.sbdf, e.g. "00000000:3a:00.0"
    assert normalize_bus_id(sbdf) == f"{segment & 0xFFFF:04x}:{bus:02x}:{dev:02x}.{fn}"


def test_detects_eight_s4000() -> None:
    outcome = detect(host("mthreads-s4000"))
    assert isinstance(outcome, Detected)
    (group,) = outcome.groups
    assert (group.id, group.name, group.memory, group.cores, group.driver_version) == (
        "mtt-s4000",
        "MTT S4000",
        49152,
        8192,
        "2.7.0",
    )
    accs = group.accelerators
    assert [a.topology.pci_bus_id for a in accs][:2] == ["0000:01:00.0", "0000:21:00.0"]
    assert all(a.topology.pci_root_id for a in accs)
    assert all(re.fullmatch(r"[0-9a-f-]{36}", a.id) for a in accs)
    assert all(a.status.logical_sliced and a.status.logical_sliced.count == 16 for a in accs)


def test_failure_injection(tmp_path: Path) -> None:
    root = copy_host("mthreads-s4000", tmp_path)
    edit_fixture(root, device_0_uuid_error=2, device_7_memory_error=2)
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    buses = [a.topology.pci_bus_id for a in outcome.groups[0].accelerators]
    assert len(buses) == 6 and "0000:01:00.0" not in buses and "0000:e1:00.0" not in buses

    edit_fixture(root, count_error=2)
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured) and "MTML_ERROR_DRIVER_FAILURE" in outcome.reason

    edit_fixture(root, init=1)
    assert empty(detect(root))


def test_monitor_power_is_watts() -> None:
    sample = monitor_node(HostRoot(host("mthreads-s4000")), resolve_manufacturers(["mthreads"]), load_settings())
    outcome = sample.outcomes["mthreads"]
    assert isinstance(outcome, Measured) and len(outcome.samples) == 8
    s2 = outcome.samples[2]
    assert (s2.memory_usage, s2.cores_utilization, s2.temperature, s2.power_usage) == (1220, 10, 47, 81)
