"""NVIDIA over NVML, through the CLI as a process: the production binding loads the stand-in
libnvidia-ml.so.1 inside each fixture node and reads what the node's data file says."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import copy_host, host, run_cli
from tests.stubs.nvidia.data import data_file, library, set_values

LABEL = "acceleratable.feature.gpustack.ai/"

# host -> (count, name, id, memory MiB, memory label, cores, comcap, family, driver, runtime)
HOSTS = {
    "h100-sxm-8x": (
        8,
        "NVIDIA H100 80GB HBM3",
        "h100-80gb-hbm3",
        81559,
        "80Gi",
        16896,
        "9.0",
        "Hopper",
        "550.54.15",
        "12.4",
    ),
    "mixed-nvidia-mellanox": (
        4,
        "NVIDIA L40S",
        "l40s",
        49139,
        "48Gi",
        18176,
        "8.9",
        "Ada-Lovelace",
        "535.161.08",
        "12.2",
    ),
    "a100-mig": (
        8,
        "NVIDIA A100-SXM4-80GB",
        "a100-sxm4-80gb",
        81920,
        "80Gi",
        6912,
        "8.0",
        "Ampere",
        "535.183.01",
        "12.2",
    ),
    "rtx4090": (
        1,
        "NVIDIA GeForce RTX 4090",
        "geforce-rtx-4090",
        24564,
        "24Gi",
        16384,
        "8.9",
        "Ada-Lovelace",
        "550.120",
        "12.4",
    ),
}

A100_PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"]


def detect(root: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("dm", "detect", "--host-root", str(root), "--manufacturer", "nvidia", "-o", "json", *args, env=env)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def nvidia_bus_ids(root: Path) -> list[str]:
    """The NVIDIA display-class functions of a fixture node, read straight from its sysfs tree."""
    bus = root / "sys/bus/pci/devices"
    out = []
    for entry in sorted(os.listdir(bus)):
        d = bus / entry
        if (d / "vendor").read_text().strip() == "0x10de" and (d / "class").read_text().startswith("0x03"):
            out.append(entry)
    return out


def accelerators(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for g in doc["groups"] for a in g["accelerators"]]


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_detect_reads_nvml(name: str) -> None:
    count, product, gid, memory, label, cores, cc, family, driver, runtime = HOSTS[name]
    rc, doc, stderr = detect(host(name))
    assert rc == 0, stderr
    (group,) = doc["groups"]
    assert {k: v for k, v in group.items() if k != "accelerators"} == {
        "id": gid,
        "manufacturer": "nvidia",
        "name": product,
        "memory": memory,
        "cores": cores,
        "driverVersion": driver,
        "runtimeVersion": runtime,
        "computeCapability": cc,
        "family": family,
    }
    accs = group["accelerators"]
    assert len(accs) == count
    assert [a["index"] for a in accs] == list(range(count))
    assert [a["physicalIndexes"] for a in accs] == [[i] for i in range(count)]  # NVML's own index
    assert all(a["id"].startswith("GPU-") and len(a["id"]) == 40 for a in accs)
    assert len({a["id"] for a in accs}) == count
    # NVML enumerates in PCI bus order, and its bus ids are the sysfs tree's
    assert [a["topology"]["pciBusId"] for a in accs] == nvidia_bus_ids(host(name))
    labels = doc["node"]["labels"]
    akey = f"{LABEL}nvidia-{gid}"
    assert labels[akey] == "true"
    assert labels[f"{akey}.memory"] == label
    assert labels[f"{akey}.comcap"] == cc
    assert labels[f"{akey}.family"] == family
    assert labels[f"{akey}.cores"] == str(cores)
    assert labels[f"{akey}.count"] == str(count)
    assert labels[f"{LABEL}nvidia.driver-version"] == driver
    assert labels[f"{LABEL}nvidia.runtime-version"] == runtime


@pytest.mark.parametrize("name", ["h100-sxm-8x", "mixed-nvidia-mellanox", "rtx4090"])
def test_mig_off_or_absent_is_logically_sliced(name: str) -> None:
    _, doc, _ = detect(host(name))
    for acc in accelerators(doc):
        assert acc["status"]["logicalSliced"] == {"coresPercentageOvercommit": True, "count": 128}
        assert "physicalSliced" not in acc["status"]


def test_a100_mig_profiles() -> None:
    _, doc, _ = detect(host("a100-mig"))
    accs = accelerators(doc)
    for acc in accs[:4]:  # MIG enabled on NVML 0-3
        status = acc["status"]
        assert status["logicalSliced"] == {"coresPercentageOvercommit": False, "count": 0}
        physical = status["physicalSliced"]
        profiles = {p["name"]: p for p in physical["profiles"]}
        assert list(profiles) == A100_PROFILES  # 1g.10gb+me excluded (supplement §5.6)
        assert physical["count"] == 7
        assert [(p["computeSlices"], p["memorySlices"], p["count"]) for p in profiles.values()] == [
            (1, 1, 7),
            (2, 2, 3),
            (3, 4, 2),
            (4, 4, 1),
            (7, 8, 1),
            (1, 2, 4),
        ]
        assert profiles["3g.40gb"]["memoryMib"] == 40192
        assert [(s["start"], s["length"]) for s in profiles["1g.20gb"]["placements"]] == [
            (0, 2),
            (2, 2),
            (4, 2),
            (6, 2),
        ]
        assert [(s["start"], s["length"]) for s in profiles["7g.80gb"]["placements"]] == [(0, 8)]
        assert [s["start"] for s in profiles["1g.10gb"]["placements"]] == list(range(7))
    for acc in accs[4:]:
        assert acc["status"]["logicalSliced"]["count"] == 128
        assert "physicalSliced" not in acc["status"]
    # DGX A100 NUMA: GPU pairs on nodes 3, 1, 7, 5
    assert [a["topology"]["numaAffinity"] for a in accs] == ["3", "3", "1", "1", "7", "7", "5", "5"]


def test_group_id_with_memory() -> None:
    _, doc, _ = detect(host("mixed-nvidia-mellanox"), env={"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"})
    assert doc["groups"][0]["id"] == "l40s-48g"


def test_driver_installed_but_not_loaded_is_no_accelerator() -> None:
    root = host("nvidia-driver-broken")
    assert len(nvidia_bus_ids(root)) == 2  # the bus shows the cards
    rc, doc, stderr = detect(root, "-v")
    assert rc == 0
    assert doc["groups"] == [] and "unmeasured" not in doc["node"]
    assert "Driver Not Loaded" in stderr and "no NVIDIA accelerator" in stderr
    labels = doc["node"]["labels"]
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    # NFD sees a known vendor's card, so it does not mark the node "false"; the DM claims nothing
    assert "feature.gpustack.ai/acceleratable" not in labels
    assert not any(k.startswith(f"{LABEL}nvidia") for k in labels)
    # the ledger's "empty, no error" stands (above); preflight never reads a half-installed node as
    # "no NVIDIA accelerator": the bus shows two, the driver named none
    proc = run_cli("dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia")
    assert proc.returncode == 1, proc.stderr
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    det = group["detection"]
    assert det["state"] == "unavailable"
    assert "the PCI bus shows 2 accelerator(s)" in det["reason"] and "0000:01:00.0, 0000:41:00.0" in det["reason"]
    assert "Driver Not Loaded" in det["reason"] and "install and load the vendor driver" in det["reason"]


def test_driver_loaded_later_is_seen_on_the_next_pass(tmp_path: Path) -> None:
    root = copy_host("nvidia-driver-broken", tmp_path)
    set_values(root, init_error=0)
    rc, doc, _ = detect(root)
    assert rc == 0
    (group,) = doc["groups"]
    assert (group["name"], len(group["accelerators"]), group["memory"]) == ("NVIDIA L4", 2, 24569)


@pytest.mark.parametrize("failure", ["uuid_error", "name_error", "pci_error", "memory_error", "handle_error"])
def test_device_whose_identity_fails_is_dropped(tmp_path: Path, failure: str) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    set_values(root, device=2, **{failure: 999})
    rc, doc, stderr = detect(root)
    assert rc == 0, stderr
    accs = accelerators(doc)
    assert len(accs) == 7
    assert "0000:52:00.0" not in [a["topology"]["pciBusId"] for a in accs]  # never named by address
    assert [a["index"] for a in accs] == list(range(7))
    assert [a["physicalIndexes"][0] for a in accs] == [0, 1, 3, 4, 5, 6, 7]
    assert "dropped the device at NVML index 2" in stderr and "Unknown Error" in stderr
    assert doc["node"]["labels"][f"{LABEL}nvidia-h100-80gb-hbm3.count"] == "7"


def test_count_failure_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    set_values(root, count_error=999)
    rc, doc, stderr = detect(root)
    assert rc == 1
    assert doc["groups"] == []
    reason = doc["node"]["unmeasured"]["nvidia"]
    assert "could not enumerate" in reason and "nvmlDeviceGetCount" in reason and "Unknown Error" in reason
    assert "nvidia could not be measured" in stderr
    assert "feature.gpustack.ai/acceleratable" not in doc["node"]["labels"]  # no claim either way
    proc = run_cli("dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia")
    assert proc.returncode == 1
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    assert group["detection"]["state"] == "unavailable"
    assert "nvmlDeviceGetCount" in group["detection"]["reason"]


def test_absent_library_is_no_accelerator(tmp_path: Path) -> None:
    if any(Path(d, "libnvidia-ml.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        pytest.skip("this machine has its own libnvidia-ml.so.1, which the search would find")
    root = copy_host("h100-sxm-8x", tmp_path)
    library(root).unlink()
    rc, doc, stderr = detect(root, "-v")
    assert rc == 0 and doc["groups"] == []
    assert "libnvidia-ml.so.1 was not found" in stderr


def test_library_found_through_ld_library_path(tmp_path: Path) -> None:
    root = copy_host("rtx4090", tmp_path)
    moved = root / "opt/nvidia/lib"
    moved.mkdir(parents=True)
    for f in (library(root), data_file(root)):
        shutil.move(str(f), moved / f.name)
    rc, doc, _ = detect(root, env={"LD_LIBRARY_PATH": "/opt/nvidia/lib"})
    assert rc == 0 and doc["groups"][0]["name"] == "NVIDIA GeForce RTX 4090"


def test_uncorrected_ecc_errors_mark_the_accelerator_unhealthy(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    set_values(root, device=5, ecc_uncorrected_volatile_dram=2)
    _, doc, _ = detect(root)
    assert [a["status"]["unhealthy"] for a in accelerators(doc)] == [i == 5 for i in range(8)]
    proc = run_cli("dm", "monitor", "--host-root", str(root), "--manufacturer", "nvidia", "-o", "json")
    samples = json.loads(proc.stdout)["groups"][0]["accelerators"]
    assert [s["unhealthy"] for s in samples] == [i == 5 for i in range(8)]


# -- monitor ------------------------------------------------------------------------------------


def monitor(root: Path) -> list[dict[str, Any]]:
    proc = run_cli("dm", "monitor", "--host-root", str(root), "--manufacturer", "nvidia", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "unmeasured" not in doc
    (group,) = doc["groups"]
    assert group["manufacturer"] == "nvidia"
    return list(group["accelerators"])


def test_monitor_h100() -> None:
    samples = monitor(host("h100-sxm-8x"))
    _, doc, _ = detect(host("h100-sxm-8x"))
    assert [s["id"] for s in samples] == [a["id"] for a in accelerators(doc)]
    busy = {
        "memory": 81559,
        "memoryUsage": 71234,
        "memoryUtilization": 87,
        "coresUtilization": 97,
        "temperature": 54,
        "powerUsage": 612,
        "unhealthy": False,
    }
    idle = {
        "memory": 81559,
        "memoryUsage": 1,
        "memoryUtilization": 0,
        "coresUtilization": 0,
        "temperature": 31,
        "powerUsage": 71,
        "unhealthy": False,
    }
    assert [{k: v for k, v in s.items() if k != "id"} for s in samples] == [busy] * 4 + [idle] * 4


def test_monitor_mig_cards_report_no_core_utilisation() -> None:
    samples = monitor(host("a100-mig"))
    assert ["coresUtilization" in s for s in samples] == [False] * 4 + [True] * 4  # NVML: not in MIG mode
    assert all(s["temperature"] > 0 and s["powerUsage"] > 0 for s in samples)


def test_monitor_failing_metric_leaves_only_that_metric_out(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    set_values(root, device=0, power_error=999, temperature_error=15)
    set_values(root, device=1, memory_error=999)
    samples = monitor(root)
    assert "powerUsage" not in samples[0] and "temperature" not in samples[0]
    assert samples[0]["coresUtilization"] == 97 and samples[0]["memoryUsage"] == 71234
    assert "memoryUsage" not in samples[1] and "memoryUtilization" not in samples[1]
    assert samples[1]["powerUsage"] == 612
    assert all("powerUsage" in s and "memoryUsage" in s for s in samples[2:])


def test_monitor_broken_driver_is_an_empty_sample() -> None:
    proc = run_cli(
        "dm", "monitor", "--host-root", str(host("nvidia-driver-broken")), "--manufacturer", "nvidia", "-o", "json"
    )
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert "unmeasured" not in doc
    assert [g["accelerators"] for g in doc["groups"]] in ([], [[]])
