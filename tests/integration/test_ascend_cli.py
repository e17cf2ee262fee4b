"""``gpustack-operator dm detect|monitor|mode|preflight`` over the Ascend fixture hosts, as a process.

ascend-910b-8x serves DCMI V1 (8 cards of one Ascend910B2); ascend-950pr-v2 answers every V1 call
with NOT_SUPPORT and serves V2 (8x Ascend950PR). The stand-in libdcmi is loaded by the production
binding from /usr/local/Ascend/driver/lib64/driver/libdcmi.so inside each host root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import host, run_cli
from tests.stubs.ascend import fixture
from tests.stubs.ascend.fixture import copy_host

KEY = "acceleratable.feature.gpustack.ai/ascend"
CLEAN_ENV = {"CANN_HOME": "", "ASCEND_TOOLKIT_HOME": "", "LD_LIBRARY_PATH": ""}


def cli(*args: str) -> tuple[int, str, str]:
    proc = run_cli(*args, env=CLEAN_ENV)
    return proc.returncode, proc.stdout, proc.stderr


def detect_json(root: Path, *extra: str) -> tuple[dict[str, object], str]:
    rc, out, err = cli("dm", "detect", "--host-root", str(root), "--manufacturer", "ascend", "-o", "json", *extra)
    assert rc == 0, err
    return json.loads(out), err


def test_v1_host_labels_and_ledger() -> None:
    doc, err = detect_json(host("ascend-910b-8x"), "-v")
    labels = doc["node"]["labels"]  # type: ignore[index]
    assert labels[f"{KEY}-910b2.product"] == "Ascend910B2"
    assert labels[f"{KEY}-910b2.family"] == "910B"
    assert labels[f"{KEY}-910b2.memory"] == "64Gi"
    assert labels[f"{KEY}-910b2.count"] == "8"
    assert labels[f"{KEY}-910b2.cores"] == "24"
    assert labels[f"{KEY}.driver-version"] == "24.1.rc2"
    assert labels[f"{KEY}.runtime-version"] == "8.0"
    (group,) = doc["groups"]  # type: ignore[misc]
    assert (group["id"], group["name"], group["memory"], group["family"]) == ("910b2", "Ascend910B2", 65536, "910B")
    accs = group["accelerators"]
    assert [a["physicalIndexes"] for a in accs] == [[i, i, 0] for i in range(8)]
    # the driver's enumeration order, not the bus order
    assert [a["topology"]["pciBusId"][5:7] for a in accs] == ["c1", "01", "c2", "02", "81", "41", "82", "42"]
    assert [a["topology"]["numaAffinity"] for a in accs][:2] == ["6", "0"]
    assert {json.dumps(a["status"]["logicalSliced"]) for a in accs} == {
        '{"coresPercentageOvercommit": true, "count": 63}'
    }
    assert "8 NPU(s) through the DCMI V1 API" in err


def test_v2_host_falls_back_and_folds_950() -> None:
    doc, err = detect_json(host("ascend-950pr-v2"), "-v")
    assert "answered the DCMI V2 API (V1 refused: dcmi_init returned -8255 (NOT_SUPPORT))" in err
    labels = doc["node"]["labels"]  # type: ignore[index]
    assert labels[f"{KEY}-950pr.product"] == "Ascend950PR"
    assert labels[f"{KEY}-950pr.family"] == "950"  # Ascend950PR folds onto the Ascend950 SoC
    assert labels[f"{KEY}-950pr.memory"] == "128Gi"
    assert labels[f"{KEY}-950pr.count"] == "8"
    assert labels[f"{KEY}.runtime-version"] == "9.0"
    assert f"{KEY}.driver-version" not in labels  # V2 has no driver version reading
    (group,) = doc["groups"]  # type: ignore[misc]
    assert "driverVersion" not in group
    assert [a["physicalIndexes"] for a in group["accelerators"]] == [[i, i, 0] for i in range(8)]


def test_die_failure_drops_the_device_via_the_cli(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_npu(root, 4, die_rc=-8005)
    doc, err = detect_json(root)
    accs = [a for g in doc["groups"] for a in g["accelerators"]]  # type: ignore[attr-defined]
    assert len(accs) == 7
    assert "0000:81:00.0" not in [a["topology"]["pciBusId"] for a in accs]
    assert [a["physicalIndexes"][0] for a in accs] == [0, 1, 2, 3, 5, 6, 7]
    assert [a["index"] for a in accs] == list(range(7))
    assert "card 4 device 0 dropped: its identity die cannot be read" in err
    assert doc["node"]["labels"][f"{KEY}-910b2.count"] == "7"  # type: ignore[index]


def test_enumeration_failure_is_unmeasured_not_empty(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_global(root, card_list_rc=-8005)
    rc, out, err = cli("dm", "detect", "--host-root", str(root), "--manufacturer", "ascend", "-o", "json")
    assert rc == 1
    doc = json.loads(out)
    assert "dcmiv2_get_device_list returned -8005" in doc["node"]["unmeasured"]["ascend"]
    assert "ascend could not be measured" in err


@pytest.mark.parametrize(
    ("name", "memory", "used", "power"), [("ascend-910b-8x", 65536, 3392, 95), ("ascend-950pr-v2", 131072, 3050, 112)]
)
def test_monitor(name: str, memory: int, used: int, power: int) -> None:
    rc, out, err = cli("dm", "monitor", "--host-root", str(host(name)), "--manufacturer", "ascend", "-o", "json")
    assert rc == 0, err
    (group,) = json.loads(out)["groups"]
    assert group["manufacturer"] == "ascend"
    first = group["accelerators"][0]
    assert (first["memory"], first["memoryUsage"], first["powerUsage"]) == (memory, used, power)
    assert first["coresUtilization"] == 0 and first["temperature"] > 0
    assert len(group["accelerators"]) == 8


def test_container_share_read_set_restore_via_the_cli(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    mode = ("dm", "mode", "ascend", "container-share", "--host-root", str(root))
    rc, out, err = cli(*mode)
    assert rc == 0, err
    states = yaml.safe_load(out)["modes"]
    assert [(s["index"], s["declared"], s["enabled"]) for s in states] == [(i, True, False) for i in range(8)]

    rc, out, err = cli(*mode, "--enable", "--accelerator", "3")
    assert rc == 0, err
    (change,) = yaml.safe_load(out)["changes"]
    assert (change["before"], change["after"], change["changed"]) == (False, True, True)
    assert change["command"] == "npu-smi set -t device-share -i 3 -c 0 -d 1"
    assert change["undo_command"] == "npu-smi set -t device-share -i 3 -c 0 -d 0"
    assert fixture.npu_value(root, 3, "share") == "1"

    rc, out, _ = cli(*mode, "--enable", "--accelerator", "3")
    assert rc == 0 and yaml.safe_load(out)["changes"][0]["changed"] is False  # idempotent

    rc, out, _ = cli(*mode, "--disable", "--accelerator", "3")
    assert rc == 0 and yaml.safe_load(out)["changes"][0]["after"] is False
    assert fixture.npu_value(root, 3, "share") == "0"


def test_container_share_on_v2_is_undeclared() -> None:
    mode = ("dm", "mode", "ascend", "container-share", "--host-root", str(host("ascend-950pr-v2")))
    rc, out, _ = cli(*mode)
    assert rc == 0
    states = yaml.safe_load(out)["modes"]
    assert {(s["declared"], s["detail"]) for s in states} == {
        (False, "this generation (DCMI V2) declares no container-share flag")
    }
    assert all("enabled" not in s for s in states)
    rc, _, err = cli(*mode, "--enable")
    assert rc == 1
    assert "declares no container-share flag" in err and "npu-smi" not in err


def test_preflight_names_both_generations() -> None:
    for name, detail in (("ascend-910b-8x", "Ascend910B2 x8"), ("ascend-950pr-v2", "Ascend950PR x8")):
        rc, out, err = cli(
            "dm",
            "preflight",
            "--detect-root",
            str(host(name)),
            "--host-root",
            str(host(name)),
            "--manufacturer",
            "ascend",
        )
        assert rc == 0, err
        (group,) = yaml.safe_load(out)["accelerators"]
        assert (group["detection"]["state"], group["detection"]["detail"]) == ("ok", detail)
