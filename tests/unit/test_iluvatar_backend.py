"""Iluvatar over IXML (NVML-named entry points): detection, failure injection and monitor, against the
libixml stand-in (tests/stubs/iluvatar/fake_ixml.c) installed in ``iluvatar-bi150``."""

from __future__ import annotations

from pathlib import Path

from gpustack_operator.discovery.detect import monitor_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, Measured, Unmeasured
from gpustack_operator.manufacturers.groups import normalize_bus_id
from gpustack_operator.manufacturers.iluvatar.ixml import cuda_version_string
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import copy_host, empty, host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "usr/local/corex/lib64/libixml.so"


def edit_fixture(root: Path, **values: object) -> None:
    edit_kv_fixture(root / (LIB + ".fixture"), **values)


def detect(root: Path) -> Detected | Unmeasured:
    return detect_one(root, "iluvatar")


@given(st.integers(1, 99), st.integers(0, 99))
def test_cuda_version_string(major: int, minor: int) -> None:
    assert cuda_version_string(major * 1000 + minor * 10) == f"{major}.{minor}"


@given(st.integers(max_value=0))
def test_cuda_version_absent(value: int) -> None:
    assert cuda_version_string(value) is None


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 255), st.integers(0, 31), st.integers(0, 7))
def test_nvml_style_bus_ids_join_the_pci_scan(domain: int, bus: int, dev: int, fn: int) -> None:
    nvml = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}"  # what nvmlPciInfo_t.busId carries
    assert normalize_bus_id(nvml) == f"{domain & 0xFFFF:04x}:{bus:02x}:{dev:02x}.{fn}"


def test_detects_eight_bi_v150() -> None:
    outcome = detect(host("iluvatar-bi150"))
    assert isinstance(outcome, Detected)
    (group,) = outcome.groups
    assert (group.id, group.name, group.memory) == ("bi-v150", "Iluvatar BI-V150", 32768)
    assert (group.driver_version, group.runtime_version, group.compute_capability) == ("4.3.0", "10.2", "7.1")
    accs = group.accelerators
    assert [a.topology.pci_bus_id for a in accs][:3] == ["0000:11:00.0", "0000:21:00.0", "0000:41:00.0"]
    assert [a.topology.numa_affinity for a in accs] == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert [a.physical_indexes for a in accs] == [[i] for i in range(8)]
    assert all(a.status.logical_sliced and a.status.logical_sliced.count == 128 for a in accs)


def test_failure_injection(tmp_path: Path) -> None:
    root = copy_host("iluvatar-bi150", tmp_path)
    edit_fixture(root, device_1_uuid_error=999, device_4_name_error=2)
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    buses = [a.topology.pci_bus_id for a in outcome.groups[0].accelerators]
    assert len(buses) == 6 and "0000:21:00.0" not in buses and "0000:81:00.0" not in buses

    edit_fixture(root, count_error=999)
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured) and "nvmlDeviceGetCount_v2" in outcome.reason

    edit_fixture(root, init=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    assert empty(detect(root))


def test_monitor() -> None:
    sample = monitor_node(HostRoot(host("iluvatar-bi150")), resolve_manufacturers(["iluvatar"]), load_settings())
    outcome = sample.outcomes["iluvatar"]
    assert isinstance(outcome, Measured) and len(outcome.samples) == 8
    s3 = outcome.samples[3]
    assert (s3.memory, s3.memory_usage, s3.cores_utilization, s3.temperature, s3.power_usage) == (
        32768,
        492,
        12,
        44,
        75,
    )
