"""``gpustack-operator device-manager detect|monitor`` as a process over the Cambricon, MetaX, Iluvatar,
Moore Threads and T-Head fixture hosts: the whole path from the host root through the vendor library
stand-ins to the labels a node would carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import copy_host, host, run_cli

P = "acceleratable.feature.gpustack.ai/"

# host -> manufacturer -> (group id, product label, memory label, count, driver label, runtime label)
EXPECTED = {
    "mlu370-x8": {"cambricon": ("mlu370-x8", "MLU370-X8", "48Gi", 8, "5.10", "1.15.0")},
    "metax-c500": {"metax": ("mxc500", "MXC500", "64Gi", 8, "3.6.11", "3.5.3.18")},
    "iluvatar-bi150": {"iluvatar": ("bi-v150", "Iluvatar-BI-V150", "32Gi", 8, "4.3.0", "10.2")},
    "mthreads-s4000": {"mthreads": ("mtt-s4000", "MTT-S4000", "48Gi", 8, "2.7.0", None)},
    "thead-ppu": {"thead": ("ppu-zw810e", "PPU-ZW810E", "96Gi", 8, "1.5.2", "12.3")},
    "mixed-cambricon-metax": {
        "cambricon": ("mlu370-x8", "MLU370-X8", "48Gi", 2, "5.10", "1.15.0"),
        "metax": ("mxc500", "MXC500", "64Gi", 2, "3.6.11", "3.5.3.18"),
    },
}

LIBRARIES = {
    "cambricon": ("mlu370-x8", "usr/local/neuware/lib64/libcndev.so", "CNDev"),
    "metax": ("metax-c500", "opt/maca/lib/libmxsml.so", "MXSML"),
    "iluvatar": ("iluvatar-bi150", "usr/local/corex/lib64/libixml.so", "IXML"),
    "mthreads": ("mthreads-s4000", "usr/lib/x86_64-linux-gnu/libmtml.so", "MTML"),
    "thead": ("thead-ppu", "usr/local/PPU_SDK/lib/libhgml.so", "HGML"),
}


def detect_json(root: Path, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    proc = run_cli("dm", "detect", "--host-root", str(root), "-o", "json", *extra)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def set_keys(path: Path, **values: object) -> None:
    lines = path.read_text().splitlines()
    for raw, value in values.items():
        key = re.sub(r"^device_(\d+)_", r"device.\1.", raw)
        lines = [ln for ln in lines if not ln.startswith(key + "=")] + [f"{key}={value}"]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_labels_per_host(name: str) -> None:
    code, doc, stderr = detect_json(host(name))
    assert code == 0, stderr
    labels = doc["node"]["labels"]
    assert labels["feature.gpustack.ai/acceleratable"] == "true"
    found = {g["manufacturer"]: g for g in doc["groups"]}
    assert set(found) == set(EXPECTED[name])
    for manufacturer, (gid, product, memory, count, driver, runtime) in EXPECTED[name].items():
        group = found[manufacturer]
        assert group["id"] == gid and len(group["accelerators"]) == count
        key = f"{P}{manufacturer}-{gid}"
        assert labels[key] == "true"
        assert labels[f"{key}.product"] == product
        assert labels[f"{key}.memory"] == memory
        assert labels[f"{key}.count"] == str(count)
        assert labels[f"{P}{manufacturer}"] == "true"
        assert labels[f"{P}{manufacturer}.driver-version"] == driver
        if runtime is None:
            assert f"{P}{manufacturer}.runtime-version" not in labels
        else:
            assert labels[f"{P}{manufacturer}.runtime-version"] == runtime
        # every accelerator joined the PCI scan: class, NUMA node and CPU list come from sysfs
        for acc in group["accelerators"]:
            assert acc["topology"]["pciClass"] and acc["topology"]["cpuAffinity"]


def test_mixed_host_keeps_each_vendor_to_its_own_cards() -> None:
    _, doc, _ = detect_json(host("mixed-cambricon-metax"))
    buses = {g["manufacturer"]: [a["topology"]["pciBusId"] for a in g["accelerators"]] for g in doc["groups"]}
    assert buses == {"cambricon": ["0000:01:00.0", "0000:61:00.0"], "metax": ["0000:21:00.0", "0000:81:00.0"]}
    assert doc["node"]["labels"]["feature.node.kubernetes.io/pci-cabc.present"] == "true"
    assert doc["node"]["labels"]["feature.node.kubernetes.io/pci-9999.present"] == "true"


@pytest.mark.parametrize("manufacturer", sorted(LIBRARIES))
def test_monitor_per_host(manufacturer: str) -> None:
    name = LIBRARIES[manufacturer][0]
    proc = run_cli("dm", "monitor", "--host-root", str(host(name)), "-o", "json", "--manufacturer", manufacturer)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "unmeasured" not in doc
    (group,) = doc["groups"]
    assert group["manufacturer"] == manufacturer and len(group["accelerators"]) == 8
    for sample in group["accelerators"]:
        assert sample["memory"] > 0 and 0 < sample["memoryUsage"] < sample["memory"]
        assert sample["temperature"] > 20 and sample["powerUsage"] > 20


@pytest.mark.parametrize("manufacturer", sorted(LIBRARIES))
def test_library_that_will_not_initialise_is_no_hardware(manufacturer: str, tmp_path: Path) -> None:
    name, lib, _ = LIBRARIES[manufacturer]
    root = copy_host(name, tmp_path)
    set_keys(root / (lib + ".fixture"), init=1)
    code, doc, stderr = detect_json(root, "--manufacturer", manufacturer)
    assert code == 0, stderr
    assert doc["groups"] == [] and "unmeasured" not in doc["node"]
    assert f"{P}{manufacturer}" not in doc["node"]["labels"]


@pytest.mark.parametrize("manufacturer", sorted(set(LIBRARIES) - {"metax"}))  # MXSML's count cannot fail
def test_count_failure_is_could_not_measure(manufacturer: str, tmp_path: Path) -> None:
    name, lib, api = LIBRARIES[manufacturer]
    root = copy_host(name, tmp_path)
    set_keys(root / (lib + ".fixture"), count_error=2)
    code, doc, stderr = detect_json(root, "--manufacturer", manufacturer)
    assert code == 1
    assert doc["groups"] == []
    assert api in doc["node"]["unmeasured"][manufacturer]
    assert f"{manufacturer} could not be measured" in stderr
    # no claim either way: the manufacturer is neither labelled present nor absent
    assert f"{P}{manufacturer}" not in doc["node"]["labels"]


@pytest.mark.parametrize("manufacturer", sorted(LIBRARIES))
def test_one_unidentifiable_device_is_dropped(manufacturer: str, tmp_path: Path) -> None:
    name, lib, _ = LIBRARIES[manufacturer]
    root = copy_host(name, tmp_path)
    key = "device_1_info_error" if manufacturer == "metax" else "device_1_uuid_error"
    set_keys(root / (lib + ".fixture"), **{key: 2})
    code, doc, stderr = detect_json(root, "--manufacturer", manufacturer)
    assert code == 0, stderr
    (group,) = doc["groups"]
    assert len(group["accelerators"]) == 7
    assert doc["node"]["labels"][f"{P}{manufacturer}-{group['id']}.count"] == "7"
    assert "dropped, its identity could not be read" in stderr  # logged at WARNING on stderr
    assert all(not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", a["id"]) for a in group["accelerators"])


def test_pci_check_keeps_an_answering_library_unloaded(tmp_path: Path) -> None:
    # a host whose PCI tree shows no MetaX function but which carries an MXSML that would answer
    root = copy_host("mlu370-x8", tmp_path)
    target = root / "opt/maca/lib"
    target.mkdir(parents=True)
    (target / "libmxsml.so").write_bytes((host("metax-c500") / "opt/maca/lib/libmxsml.so").read_bytes())
    (target / "libmxsml.so.fixture").write_text((host("metax-c500") / "opt/maca/lib/libmxsml.so.fixture").read_text())
    _, doc, _ = detect_json(root, "--manufacturer", "metax")
    assert doc["groups"] == []  # the PCI check says no MetaX function: the library is not loaded
