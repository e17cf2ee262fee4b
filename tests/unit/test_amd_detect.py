"""AMD detection and monitor over the fixture hosts' amdgpu sysfs, in process."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.amd import cumask
from gpustack_operator.manufacturers.base import (
    DetectContext,
    Detected,
    DetectOutcome,
    Measured,
    MonitorOutcome,
    Unmeasured,
    resolve,
)
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import Settings

from tests.conftest import copy_host, host

NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"


def context(root: Path, manufacturer: str, no_pci_check: bool = False) -> DetectContext:
    hr = HostRoot(root)
    return DetectContext(
        view=hr,
        pci=scan_pci(hr),
        settings=Settings(),
        manufacturer=resolve(REGISTRY[manufacturer].identity),
        no_pci_check=no_pci_check,
    )


def detect(root: Path, manufacturer: str = "amd", no_pci_check: bool = False) -> DetectOutcome:
    return REGISTRY[manufacturer].detect(context(root, manufacturer, no_pci_check))


def sample(root: Path, manufacturer: str = "amd") -> MonitorOutcome:
    monitor = REGISTRY[manufacturer].monitor
    assert monitor is not None
    return monitor(context(root, manufacturer))


def detected(outcome: DetectOutcome) -> Detected:
    assert isinstance(outcome, Detected), outcome
    return outcome


def test_mi300x_host() -> None:
    (group,) = detected(detect(host("mi300x-8x"))).groups
    assert (group.name, group.memory, group.cores, group.compute_capability, group.family) == (
        "AMD Instinct MI300X",
        196592,
        304,
        "gfx942",
        "Arctic Islands",
    )
    assert (group.driver_version, group.runtime_version) == ("6.8.5", "6.2")
    accs = group.accelerators
    assert [a.index for a in accs] == list(range(8))
    # card0 is the BMC's VGA: the driver's own numbering, not the logical index
    assert [a.physical_indexes for a in accs] == [[i + 1, 128 + i] for i in range(8)]
    assert [a.topology.pci_bus_id[5:7] for a in accs] == ["05", "2b", "5b", "65", "7d", "a5", "d5", "e7"]
    for acc in accs:
        # the id is KFD's decimal unique_id in ROCr's GPU-<16 hex> form; amdgpu prints the same
        # value as %016llx in the PCI function's unique_id file
        hexid = (host("mi300x-8x") / f"sys/bus/pci/devices/{acc.topology.pci_bus_id}/unique_id").read_text()
        assert acc.id == f"GPU-{hexid.strip()}"
        assert acc.status.logical_sliced is not None
        assert (acc.status.logical_sliced.count, acc.status.logical_sliced.cores_percentage_overcommit) == (128, True)
        assert not acc.status.unhealthy


def test_radeon_host_is_named_by_device_and_revision() -> None:
    (group,) = detected(detect(host("radeon-7800xt"))).groups
    assert (group.name, group.memory, group.cores, group.compute_capability, group.family) == (
        "AMD Radeon RX 7800 XT",
        16368,
        60,
        "gfx1101",
        "GC 11.0.0",
    )
    assert group.driver_version is None  # the kernel's own amdgpu has no module version
    assert group.runtime_version == "6.3"
    assert group.accelerators[0].physical_indexes == [1, 128]


def set_revision(root: Path, bdf: str, revision: str) -> None:
    (root / f"sys/bus/pci/devices/{bdf}/revision").write_text(revision + "\n")


def test_the_same_device_id_at_another_revision_is_another_card(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    set_revision(root, "0000:03:00.0", "0xff")
    assert detected(detect(root)).groups[0].name == "AMD Radeon RX 7700 XT"


def test_unknown_revision_falls_back_to_the_board_name_then_to_none(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    (root / "usr/share/libdrm/amdgpu.ids").unlink()
    set_revision(root, "0000:03:00.0", "0xc1")
    assert detected(detect(root)).groups[0].name == ""  # unnamed: the preflight reports it
    pci = root / "sys/bus/pci/devices/0000:03:00.0"
    (pci / "product_name").write_text("Radeon RX 7800 XT Pulse\n")
    assert detected(detect(root)).groups[0].name == "Radeon RX 7800 XT Pulse"


def test_host_amdgpu_ids_wins_over_the_built_in_rows(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    ids = root / "usr/share/libdrm/amdgpu.ids"
    ids.write_text(ids.read_text().replace("AMD Radeon RX 7800 XT", "AMD Radeon RX 7800 XT (host table)"))
    assert detected(detect(root)).groups[0].name == "AMD Radeon RX 7800 XT (host table)"


def test_enumeration_follows_kfd_node_order(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    nodes = root / NODES
    (nodes / "2").rename(nodes / "tmp")
    (nodes / "9").rename(nodes / "2")
    (nodes / "tmp").rename(nodes / "9")
    accs = detected(detect(root)).groups[0].accelerators
    assert accs[0].topology.pci_bus_id == "0000:e7:00.0" and accs[0].physical_indexes == [8, 135]
    assert accs[7].topology.pci_bus_id == "0000:05:00.0"


def test_garbled_properties_are_unmeasured_naming_the_file(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / NODES / "4/properties"
    props.write_text(props.read_text().replace("simd_count 1216", "simd_count lots"))
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured)
    assert "/sys/class/kfd/kfd/topology/nodes/4/properties" in outcome.reason
    assert "simd_count is 'lots'" in outcome.reason
    assert isinstance(sample(root), Unmeasured)


def test_unreadable_properties_are_unmeasured(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / NODES / "3/properties"
    props.unlink()
    props.mkdir()  # reading a directory fails (EISDIR) even for root
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured)
    assert outcome.reason.startswith("/sys/class/kfd/kfd/topology/nodes/3/properties: ")


def test_contradictory_shape_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / NODES / "2/properties"
    props.write_text(props.read_text().replace("simd_per_cu 4", "simd_per_cu 5"))
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured) and "whole number" in outcome.reason


def test_no_kfd_means_nothing_detected(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    (root / "sys/class/kfd/kfd").unlink()
    (root / "sys/class/kfd").rmdir()
    assert detected(detect(root)).groups == []
    assert sample(root) == Measured([])


def test_a_card_without_unique_id_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / NODES / "5/properties"
    lines = [("unique_id 0" if line.startswith("unique_id ") else line) for line in props.read_text().splitlines()]
    props.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        (group,) = detected(detect(root)).groups
    assert len(group.accelerators) == 7
    assert "0000:65:00.0" not in [a.topology.pci_bus_id for a in group.accelerators]
    assert "no unique_id" in caplog.text and "0000:65:00.0" in caplog.text
    monitored = sample(root)
    assert isinstance(monitored, Measured) and len(monitored.samples) == 7


def test_memory_falls_back_to_the_kfd_banks(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    (root / "sys/bus/pci/devices/0000:03:00.0/mem_info_vram_total").unlink()
    assert detected(detect(root)).groups[0].memory == 16368


def test_another_vendors_nodes_are_not_ours() -> None:
    # with the PCI check off, both detectors read the KFD of the other's host
    assert detected(detect(host("hygon-k100"), "amd", no_pci_check=True)).groups == []
    assert detected(detect(host("mi300x-8x"), "hygon", no_pci_check=True)).groups == []


def test_no_card_on_the_bus_reads_no_kfd(tmp_path: Path) -> None:
    assert detected(detect(host("h100-sxm-8x"))).groups == []


def test_uncorrectable_ecc_marks_the_card_unhealthy(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    (root / "sys/bus/pci/devices/0000:2b:00.0/ras/umc_err_count").write_text("ue: 2\nce: 17\n")
    accs = detected(detect(root)).groups[0].accelerators
    assert [a.status.unhealthy for a in accs] == [False, True] + [False] * 6
    monitored = sample(root)
    assert isinstance(monitored, Measured)
    assert [s.unhealthy for s in monitored.samples] == [False, True] + [False] * 6


def test_runtime_version_follows_rocm_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    (root / "opt/rocm-7.0.2/.info").mkdir(parents=True)
    (root / "opt/rocm-7.0.2/.info/version").write_text("7.0.2-56\n")
    monkeypatch.setenv("ROCM_PATH", "/opt/rocm-7.0.2")
    assert detected(detect(root)).groups[0].runtime_version == "7.0"
    monkeypatch.setenv("ROCM_HOME", "/opt/rocm")  # searched first
    assert detected(detect(root)).groups[0].runtime_version == "6.3"


def test_monitor_mi300x() -> None:
    monitored = sample(host("mi300x-8x"))
    assert isinstance(monitored, Measured)
    first = monitored.samples[0]
    assert first.id.startswith("GPU-") and len(first.id) == 20
    assert (first.memory, first.memory_usage, first.memory_utilization) == (196592, 283, 0)
    assert [s.cores_utilization for s in monitored.samples] == [0, 0, 3, 0, 100, 0, 0, 12]
    assert [s.temperature for s in monitored.samples] == list(range(43, 51))  # junction, no edge sensor
    assert [s.power_usage for s in monitored.samples] == list(range(134, 142))  # power1_input only


def test_monitor_radeon_prefers_junction_and_power_average() -> None:
    monitored = sample(host("radeon-7800xt"))
    assert isinstance(monitored, Measured)
    (one,) = monitored.samples
    assert (one.memory_usage, one.memory_utilization, one.cores_utilization) == (536, 3, 37)
    assert (one.temperature, one.power_usage) == (61, 212)


def test_monitor_reports_absent_figures_as_none(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    pci = root / "sys/bus/pci/devices/0000:03:00.0"
    for name in ("mem_info_vram_used", "gpu_busy_percent"):
        (pci / name).unlink()
    shutil.rmtree(pci / "hwmon")
    monitored = sample(root)
    assert isinstance(monitored, Measured)
    (one,) = monitored.samples
    assert one.memory == 16368
    assert (one.memory_usage, one.memory_utilization, one.cores_utilization, one.temperature, one.power_usage) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_cu_mask_topologies_of_the_fixture_hosts() -> None:
    mi300x = cumask.read_topologies(context(host("mi300x-8x"), "amd"))
    assert len(mi300x) == 8
    for topology in mi300x.values():
        topology.validate()
        assert (topology.cu, topology.se, topology.xcc, topology.quantum, topology.min_percent) == (304, 32, 8, 8, 3)
    (radeon,) = cumask.read_topologies(context(host("radeon-7800xt"), "amd")).values()
    radeon.validate()
    assert (radeon.gfx, radeon.cu, radeon.se, radeon.quantum, radeon.min_percent) == ("gfx1101", 60, 3, 6, 9)


def test_an_unreadable_figure_is_none_not_an_unmeasured_sample(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    pci = root / "sys/bus/pci/devices/0000:03:00.0"
    (pci / "gpu_busy_percent").write_text("busy\n")
    (pci / "hwmon/hwmon1/power1_average").unlink()
    (pci / "hwmon/hwmon1/power1_average").mkdir()  # EISDIR, as a refused sensor read
    monitored = sample(root)
    assert isinstance(monitored, Measured)
    (one,) = monitored.samples
    assert (one.cores_utilization, one.power_usage, one.temperature) == (None, None, 61)
