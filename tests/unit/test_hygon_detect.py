"""Hygon DCU detection and monitor over the hygon-k100 fixture (hydcu sysfs), in process."""

from __future__ import annotations

from pathlib import Path

from gpustack_operator.manufacturers.base import Measured, Unmeasured

from tests.conftest import copy_host, host
from tests.unit.test_amd_detect import NODES, detect, detected, sample


def test_k100_ai_host() -> None:
    (group,) = detected(detect(host("hygon-k100"), "hygon")).groups
    assert (group.id, group.name, group.memory, group.cores, group.compute_capability) == (
        "k100_ai",
        "K100_AI",
        65520,
        120,
        "gfx928",
    )
    assert (group.driver_version, group.runtime_version) == ("6.2.26", "24.04")
    assert [a.topology.numa_affinity for a in group.accelerators] == ["0", "1", "2", "3"]
    assert [a.physical_indexes for a in group.accelerators] == [[1, 128], [2, 129], [3, 130], [4, 131]]
    for acc in group.accelerators:
        sliced = acc.status.logical_sliced
        assert sliced is not None
        assert (sliced.count, sliced.cores_percentage_overcommit) == (4, False)
        assert acc.topology.pci_class == "0b4000"


def test_hycu_is_read_before_hydcu(tmp_path: Path) -> None:
    root = copy_host("hygon-k100", tmp_path)
    (root / "sys/module/hycu").mkdir(parents=True)
    (root / "sys/module/hycu/version").write_text("6.3.30\n")
    assert detected(detect(root, "hygon")).groups[0].driver_version == "6.3.30"


def test_unknown_device_id_is_unnamed(tmp_path: Path) -> None:
    root = copy_host("hygon-k100", tmp_path)
    for node in range(4, 8):
        props = root / NODES / f"{node}/properties"
        props.write_text(props.read_text().replace("device_id 25104", "device_id 25105"))
    (group,) = detected(detect(root, "hygon")).groups
    assert group.name == "" and len(group.accelerators) == 4


def test_garbled_hygon_node_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("hygon-k100", tmp_path)
    props = root / NODES / "6/properties"
    props.write_text(props.read_text() + "unique_id 1\n")
    outcome = detect(root, "hygon")
    assert isinstance(outcome, Unmeasured) and "nodes/6/properties: unique_id appears twice" in outcome.reason


def test_monitor_k100() -> None:
    monitored = sample(host("hygon-k100"), "hygon")
    assert isinstance(monitored, Measured)
    assert [s.memory_usage for s in monitored.samples] == [32, 8192, 0, 1024]
    assert [s.memory_utilization for s in monitored.samples] == [0, 12, 0, 1]
    assert [s.cores_utilization for s in monitored.samples] == [0, 64, 0, 5]
    assert [s.temperature for s in monitored.samples] == [41, 43, 45, 47]  # edge, as RSMI's first sensor
    assert [s.power_usage for s in monitored.samples] == [45, 212, 44, 61]
