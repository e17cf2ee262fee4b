"""``gpustack-operator device-manager detect|preflight`` run as a process over the host fixtures."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import host, run_cli

NINE = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]

# host → (general node key, {manufacturer: (count, detail)}); every other manufacturer not-declared
EXPECTED = {
    "h100-sxm-8x": ("intel-xeon-platinum-8480", {"nvidia": (8, "NVIDIA H100 80GB HBM3 x8")}),
    "mi300x-8x": ("amd-epyc-9654", {"amd": (8, "AMD Instinct MI300X x8")}),
    "ascend-910b-8x": ("generic-31-53264", {"ascend": (8, "Ascend910B2 x8")}),
    "mixed-nvidia-mellanox": ("amd-epyc-7763", {"nvidia": (4, "NVIDIA L40S x4")}),
    "cpu-only-vm": ("intel-xeon-processor-icelake", {}),
    "hygon-cpu-only": ("hygon-c86-7285", {}),
    "ampere-altra-cpu-only": ("arm-63-53441", {}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect(name: str) -> None:
    key, found = EXPECTED[name]
    proc = run_cli("device-manager", "detect", "--host-root", str(host(name)), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # Devices spec groups (+ interfaces when the node's /sys/class/net could be enumerated), and the node
    assert {"node", "groups"} <= set(doc) <= {"node", "groups", "interfaces"}
    assert ("interfaces" in doc) != ("interfacesError" in doc["node"])
    node = doc["node"]
    assert node["generalNodeKey"] == key
    labels = node["labels"]
    counts: dict[str, int] = {}
    for group in doc["groups"]:
        counts[group["manufacturer"]] = counts.get(group["manufacturer"], 0) + len(group["accelerators"])
        for acc in group["accelerators"]:
            assert acc["topology"]["pciBusId"]
    assert counts == {m: c for m, (c, _) in found.items()}
    if found:
        assert labels["feature.gpustack.ai/acceleratable"] == "true"
        for group in doc["groups"]:
            akey = f"acceleratable.feature.gpustack.ai/{group['manufacturer']}-{group['id']}"
            assert labels[akey] == "true"
            assert labels[akey + ".count"] == str(len(group["accelerators"]))
    else:
        assert labels["feature.gpustack.ai/acceleratable"] == "false"
    assert labels["feature.node.kubernetes.io/cpu-model.vendor_id"] == node["cpu"]["vendor_id"]


def test_h100_labels_and_topology() -> None:
    doc = yaml.safe_load(run_cli("dm", "detect", "--host-root", str(host("h100-sxm-8x"))).stdout)
    labels = doc["node"]["labels"]
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-15b3.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-1a03.present"] == "true"  # the BMC VGA is class 03
    assert labels["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["feature.node.kubernetes.io/cpu-model.family"] == "6"
    assert labels["feature.node.kubernetes.io/cpu-model.id"] == "143"
    (group,) = doc["groups"]
    assert group["id"] == "h100-80gb-hbm3" and group["manufacturer"] == "nvidia"
    numa = [a["topology"]["numaAffinity"] for a in group["accelerators"]]
    assert sorted(set(numa)) == ["0", "1"]
    assert [a["index"] for a in group["accelerators"]] == list(range(8))
    assert all(a["topology"]["pciRootId"] for a in group["accelerators"])  # behind PCIe switches
    assert doc["node"]["cpu"]["cores"] == 112 and doc["node"]["cpu"]["threads"] == 224


def test_ascend_host_ignores_huawei_nic_and_bmc_vga() -> None:
    doc = yaml.safe_load(run_cli("dm", "detect", "--host-root", str(host("ascend-910b-8x"))).stdout)
    (group,) = doc["groups"]
    assert all(a["topology"]["pciClass"].startswith("12") for a in group["accelerators"])
    assert doc["node"]["cpu"]["vendor_id"] == "VendorUnknown"  # HiSilicon is not in cpuid's table


def test_manufacturer_filter() -> None:
    doc = yaml.safe_load(
        run_cli("dm", "detect", "--host-root", str(host("h100-sxm-8x")), "--manufacturer", "amd").stdout
    )
    assert doc["groups"] == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preflight(name: str) -> None:
    _, found = EXPECTED[name]
    proc = run_cli("dm", "preflight", "--detect-root", str(host(name)), "--host-root", str(host(name)))
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    assert list(doc) == ["accelerators", "network", "topology"]
    # the fixtures carry no host process table, so the kubelet's policy is not read (never defaulted)
    assert (doc["topology"]["policy"], doc["topology"]["note"][:10]) == ("unknown", "not read: ")
    groups = {g["manufacturer"]: g for g in doc["accelerators"]}
    assert sorted(groups) == NINE
    for m, g in groups.items():
        det = g["detection"]
        assert det["depth"] == "declared"
        if m in found:
            assert (det["state"], det["accelerators"], det["detail"]) == ("ok", *found[m])
            assert "reason" not in det
        else:
            assert det["state"] == "not-declared"
            assert det["reason"] == "the detect pass found no accelerator of this manufacturer"
        assert g["note"]


def test_unreadable_sysfs_is_unavailable_not_empty() -> None:
    proc = run_cli(
        "dm", "preflight", "--detect-root", str(host("unreadable-sysfs")), "--host-root", str(host("unreadable-sysfs"))
    )
    assert proc.returncode == 1
    doc = yaml.safe_load(proc.stdout)
    for g in doc["accelerators"]:
        assert g["detection"]["state"] == "unavailable"
        assert "Too many levels of symbolic links" in g["detection"]["reason"]
    assert "preflight:" in proc.stderr
    detect = run_cli("dm", "detect", "--host-root", str(host("unreadable-sysfs")))
    assert detect.returncode == 1
    doc = yaml.safe_load(detect.stdout)
    assert sorted(doc["node"]["unmeasured"]) == NINE
    assert "feature.gpustack.ai/acceleratable" not in doc["node"]["labels"]  # no claim either way


def test_escaping_symlinks_stay_inside_the_root() -> None:
    proc = run_cli("dm", "detect", "--host-root", str(host("escaping-symlink")), "-o", "json")
    doc = json.loads(proc.stdout)
    # the absolute and the ../ links resolve inside the fixture (its /etc), never the test machine's
    reasons = " ".join(doc["node"].get("unmeasured", {}).values())
    assert "0000:00:05.0" in reasons and "0000:00:06.0" in reasons
    assert proc.returncode == 1


def test_preflight_with_bad_root_still_writes_the_document(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A root that exists but holds no node (no /sys, no /etc) is answered: the document is written,
    unavailable, naming what could not be read (a typed root that does not exist is a usage error:
    test_a_typed_root_that_does_not_exist_is_a_usage_error)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_cli(
        "dm", "preflight", "--detect-root", str(empty), "--host-root", str(empty), "--manufacturer", "nvidia"
    )
    assert proc.returncode == 1
    doc = yaml.safe_load(proc.stdout)
    detection = doc["accelerators"][0]["detection"]
    assert detection["state"] == "unavailable"
    assert "/sys/bus/pci/devices" in detection["reason"]
    assert "carries no /etc" in detection["host"]["reason"]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag", ["--detect-root", "--host-root"])
def test_a_typed_root_that_does_not_exist_is_a_usage_error(tmp_path, flag: str) -> None:  # type: ignore[no-untyped-def]
    other = "--host-root" if flag == "--detect-root" else "--detect-root"
    proc = run_cli("dm", "preflight", flag, str(tmp_path / "nope"), other, str(host("h100-sxm-8x")))
    assert proc.returncode == 2
    assert flag in proc.stderr and proc.stdout == ""
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dm", "detect", "--manufacturer", "intel"], "unknown manufacturer 'intel'"),
        (["dm", "detect", "-o", "xml"], "invalid choice"),
        (["dm", "frobnicate"], "invalid choice"),
        (
            ["dm", "detect", "--host-root", "/nonexistent/root"],
            "host root '/nonexistent/root' cannot be used",
        ),
    ],
)
def test_usage_errors_are_one_clear_line(args: list[str], needle: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_setting_is_a_usage_error() -> None:
    proc = run_cli("dm", "detect", env={"GPUSTACK_NVIDIA_PCI_VENDOR_ID": "nvidia"})
    assert proc.returncode == 2
    assert "GPUSTACK_NVIDIA_PCI_VENDOR_ID" in proc.stderr and "Traceback" not in proc.stderr


def test_help() -> None:
    for args in (["--help"], ["dm", "--help"], ["dm", "detect", "--help"], ["dm", "preflight", "--help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0 and "usage:" in proc.stdout


def test_group_id_with_memory_setting() -> None:
    doc = yaml.safe_load(
        run_cli(
            "dm",
            "detect",
            "--host-root",
            str(host("h100-sxm-8x")),
            env={"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"},
        ).stdout
    )
    assert doc["groups"][0]["id"] == "h100-80gb-hbm3-80g"  # NVML: 81559 MiB


def test_pci_class_prefixes_setting_narrows_the_scan() -> None:
    doc = yaml.safe_load(
        run_cli(
            "dm", "detect", "--host-root", str(host("h100-sxm-8x")), env={"GPUSTACK_PCI_CLASS_PREFIXES": "12"}
        ).stdout
    )
    assert doc["groups"] == []
