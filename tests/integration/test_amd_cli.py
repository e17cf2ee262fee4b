"""``device-manager detect|monitor|preflight`` as a process over the AMD and Hygon fixture hosts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_host, host, run_cli

A = "acceleratable.feature.gpustack.ai/"

# host → manufacturer, aKey, labels of that model
EXPECTED = {
    "mi300x-8x": (
        "amd",
        "amd-instinct-mi300x",
        {
            "product": "AMD-Instinct-MI300X",
            "memory": "192Gi",
            "cores": "304",
            "count": "8",
            "family": "Arctic-Islands",
            "comcap": "gfx942",
        },
        {"driver-version": "6.8.5", "runtime-version": "6.2"},
    ),
    "radeon-7800xt": (
        "amd",
        "amd-radeon-rx-7800-xt",
        {
            "product": "AMD-Radeon-RX-7800-XT",
            "memory": "16Gi",
            "cores": "60",
            "count": "1",
            "family": "GC-11.0.0",
            "comcap": "gfx1101",
        },
        {"runtime-version": "6.3"},  # in-tree driver: no driver-version label at all
    ),
    "hygon-k100": (
        "hygon",
        "hygon-k100_ai",
        {
            "product": "K100_AI",
            "memory": "64Gi",
            "cores": "120",
            "count": "4",
            "family": "Arctic-Islands",
            "comcap": "gfx928",
        },
        {"driver-version": "6.2.26", "runtime-version": "24.04"},
    ),
}


def detect_doc(root: Path, *extra: str) -> tuple[int, dict[str, object]]:
    proc = run_cli("dm", "detect", "--host-root", str(root), "-o", "json", *extra)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_labels(name: str) -> None:
    manufacturer, akey, model, vendor = EXPECTED[name]
    rc, doc = detect_doc(host(name))
    assert rc == 0
    node = doc["node"]
    assert isinstance(node, dict)
    labels = node["labels"]
    assert labels["feature.gpustack.ai/acceleratable"] == "true"
    assert labels[f"{A}{manufacturer}"] == "true"
    assert labels[f"{A}{akey}"] == "true"
    assert {k: labels[f"{A}{akey}.{k}"] for k in model} == model
    present = {
        k: labels[f"{A}{manufacturer}.{k}"]
        for k in ("driver-version", "runtime-version")
        if f"{A}{manufacturer}.{k}" in labels
    }
    assert present == vendor
    groups = doc["groups"]
    assert isinstance(groups, list)
    assert [g["manufacturer"] for g in groups] == [manufacturer]
    for acc in groups[0]["accelerators"]:
        assert acc["id"].startswith("GPU-") and len(acc["id"]) == 20
        assert acc["topology"]["pciBusId"]


def test_rx7800xt_matches_the_spec_example() -> None:
    """supplement §3.7: an RX 7800 XT detects with logicalSliced count 128, overcommit true."""
    _, doc = detect_doc(host("radeon-7800xt"))
    (group,) = doc["groups"]  # type: ignore[misc]
    (acc,) = group["accelerators"]
    assert acc["status"]["logicalSliced"] == {"coresPercentageOvercommit": True, "count": 128}
    assert (group["memory"], group["cores"], group["computeCapability"]) == (16368, 60, "gfx1101")


def test_hygon_slices_four_without_overcommit() -> None:
    _, doc = detect_doc(host("hygon-k100"))
    (group,) = doc["groups"]  # type: ignore[misc]
    assert {json.dumps(a["status"]["logicalSliced"]) for a in group["accelerators"]} == {
        json.dumps({"coresPercentageOvercommit": False, "count": 4})
    }


@pytest.mark.parametrize(
    ("name", "manufacturer", "detail"),
    [
        ("mi300x-8x", "amd", "AMD Instinct MI300X x8"),
        ("radeon-7800xt", "amd", "AMD Radeon RX 7800 XT x1"),
        ("hygon-k100", "hygon", "K100_AI x4"),
    ],
)
def test_preflight_detection(name: str, manufacturer: str, detail: str) -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host(name)),
        "--host-root",
        str(host(name)),
        "--manufacturer",
        "amd,hygon",
    )
    assert proc.returncode == 0, proc.stderr
    groups = {g["manufacturer"]: g for g in yaml.safe_load(proc.stdout)["accelerators"]}
    det = groups[manufacturer]["detection"]
    assert (det["state"], det["detail"]) == ("ok", detail)
    other = "hygon" if manufacturer == "amd" else "amd"
    assert groups[other]["detection"]["state"] == "not-declared"


def test_garbled_properties_make_preflight_unavailable(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / "sys/devices/virtual/kfd/kfd/topology/nodes/7/properties"
    props.write_text(props.read_text().replace("gfx_target_version 90402", "gfx_target_version gfx942"))
    proc = run_cli("dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "amd")
    assert proc.returncode != 0
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    assert group["detection"]["state"] == "unavailable"
    assert "/sys/class/kfd/kfd/topology/nodes/7/properties" in group["detection"]["reason"]
    rc, doc = detect_doc(root, "--manufacturer", "amd")
    assert rc == 1
    assert "nodes/7/properties" in doc["node"]["unmeasured"]["amd"]  # type: ignore[index]


def test_driver_not_loaded_is_unavailable_in_preflight_and_empty_in_detect(tmp_path: Path) -> None:
    root = copy_host("radeon-7800xt", tmp_path)
    (root / "sys/class/kfd/kfd").unlink()
    (root / "sys/class/kfd").rmdir()
    # with amdgpu not loaded the host's own rocm-smi cannot see the card either (real message and rc)
    (root / "usr/bin/rocm-smi").write_text(
        "#!/bin/sh\nprintf 'ERROR:root:Driver not initialized (amdgpu not found in modules)\\n' >&2\nexit 2\n"
    )
    proc = run_cli("dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "amd")
    assert proc.returncode == 1, proc.stderr
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    det = group["detection"]
    assert det["state"] == "unavailable"
    assert "the PCI bus shows 1 accelerator(s)" in det["reason"] and "/sys/class/kfd is absent" in det["reason"]
    assert "Driver not initialized" in det["host"]["reason"]
    rc, doc = detect_doc(root, "--manufacturer", "amd")
    assert rc == 0 and doc["groups"] == []


def test_monitor_cli() -> None:
    proc = run_cli("dm", "monitor", "--host-root", str(host("hygon-k100")), "-o", "json", "--manufacturer", "hygon")
    assert proc.returncode == 0, proc.stderr
    (group,) = json.loads(proc.stdout)["groups"]
    assert group["manufacturer"] == "hygon"
    second = group["accelerators"][1]
    assert {
        k: second[k]
        for k in ("memory", "memoryUsage", "memoryUtilization", "coresUtilization", "temperature", "powerUsage")
    } == {
        "memory": 65520,
        "memoryUsage": 8192,
        "memoryUtilization": 12,
        "coresUtilization": 64,
        "temperature": 43,
        "powerUsage": 212,
    }
