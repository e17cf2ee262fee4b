"""driver_mode on a private copy of the Ascend 910B node, whose DCMI stand-in keeps the
container-share flag in its fixture file: read, check mode, idempotent enable, refusal to disable
under pods, force, and the usage errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.gpustack.accelerators.plugins.modules import driver_mode
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import (
    exit_result,
    fail_result,
    printed_result,
    warning_messages,
)

DCMI = "usr/local/Ascend/driver/lib64/driver/libdcmi.so"
SHARE = {"manufacturer": "ascend", "mode": "container-share"}


@pytest.fixture
def npu_node(node_copy: Callable[[str], Path], stand_in: Callable[[Path, str], Path]) -> Path:
    node = node_copy("ascend-910b-8x")
    stand_in(node, DCMI)
    return node


def dcmi_state(node: Path) -> str:
    return (node / (DCMI + ".fixture")).read_text(encoding="utf-8")


def hold_slices(node: Path, pod: str, accelerator: str) -> None:
    record = node / "var/lib/gpustack/operator/pods/6f1c2a9e-0000-4000-8000-000000000001"
    record.mkdir(parents=True)
    allocation = {"pod": pod, "manufacturer": "ascend", "mode": "sliced", "accelerators": [accelerator]}
    (record / "allocation.json").write_text(json.dumps(allocation), encoding="utf-8")


def test_read_reports_every_npu_and_changes_nothing(npu_node: Path) -> None:
    before = dcmi_state(npu_node)
    result = exit_result(driver_mode.main, dict(SHARE, host_root=str(npu_node)))
    assert result["changed"] is False
    assert "changes" not in result
    assert [m["index"] for m in result["modes"]] == list(range(8))
    assert all(m["declared"] is True and m["enabled"] is False for m in result["modes"])
    assert {m["mode"] for m in result["modes"]} == {"container-share"}
    assert dcmi_state(npu_node) == before


def test_check_mode_predicts_the_change_and_writes_nothing(npu_node: Path) -> None:
    before = dcmi_state(npu_node)
    args = dict(SHARE, host_root=str(npu_node), accelerators=["0"], state="enabled")
    result = exit_result(driver_mode.main, args, check_mode=True, diff=True)
    assert result["changed"] is True
    (change,) = result["changes"]
    assert (change["index"], change["before"], change["after"]) == (0, False, True)
    assert result["diff"] == {
        "before": f"{change['accelerator']}: False\n",
        "after": f"{change['accelerator']}: True\n",
    }
    assert dcmi_state(npu_node) == before


def test_enable_writes_once_and_is_idempotent(npu_node: Path) -> None:
    args = dict(SHARE, host_root=str(npu_node), accelerators=["1"], state="enabled")
    first = exit_result(driver_mode.main, args)
    assert first["changed"] is True
    (change,) = first["changes"]
    assert change["before"] is False and change["after"] is True
    assert "npu-smi set -t device-share" in change["undo_command"]
    assert "diff" not in first

    again = exit_result(driver_mode.main, args)
    assert again["changed"] is False
    assert [c["changed"] for c in again["changes"]] == [False]
    read = exit_result(driver_mode.main, dict(SHARE, host_root=str(npu_node)))
    assert [m["index"] for m in read["modes"] if m["enabled"]] == [1]


def test_disable_is_refused_while_a_pod_holds_slices_unless_forced(npu_node: Path) -> None:
    args = dict(SHARE, host_root=str(npu_node), accelerators=["0"], state="enabled")
    (change,) = exit_result(driver_mode.main, args)["changes"]
    hold_slices(npu_node, "team-a/llm-0", change["accelerator"])

    args["state"] = "disabled"
    refused = fail_result(driver_mode.main, args)
    assert change["accelerator"] in refused["msg"]
    assert "pods hold slices there: team-a/llm-0" in refused["msg"]
    assert "force" in refused["msg"]  # the remedy
    assert [h["pod"] for h in refused["holders"]] == ["team-a/llm-0"]
    assert [m["enabled"] for m in refused["modes"] if m["index"] == 0] == [True]

    forced = exit_result(driver_mode.main, dict(args, force=True))
    assert forced["changed"] is True
    assert [(c["before"], c["after"]) for c in forced["changes"]] == [(True, False)]


def test_a_pod_on_another_npu_does_not_block(npu_node: Path) -> None:
    states = exit_result(driver_mode.main, dict(SHARE, host_root=str(npu_node)))["modes"]
    hold_slices(npu_node, "team-b/other", states[5]["accelerator"])
    args = dict(SHARE, host_root=str(npu_node), accelerators=["0"], state="disabled")
    result = exit_result(driver_mode.main, args)
    assert result["changed"] is False  # already disabled: nothing to write, nothing refused


def test_a_mode_the_manufacturer_lacks_is_a_clear_failure(npu_node: Path) -> None:
    result = fail_result(driver_mode.main, {"manufacturer": "ascend", "mode": "mig", "host_root": str(npu_node)})
    assert result["msg"] == "ascend has no driver mode 'mig' (its modes: container-share)"


def test_an_unknown_accelerator_lists_the_choices(npu_node: Path) -> None:
    args = dict(SHARE, host_root=str(npu_node), accelerators=["99"], state="enabled")
    result = fail_result(driver_mode.main, args)
    assert result["msg"].startswith("no accelerator '99'; choose all, an index or an id: 0 (")


@pytest.mark.parametrize("state", ["read", "enabled", "disabled"])
def test_a_manufacturer_absent_from_the_node_warns_naming_it(
    state: str, fixture_host: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Never a silent changed=false: the warning Ansible shows (``warnings`` of the printed result)."""
    root = fixture_host("cpu-only-vm")
    args = {"manufacturer": "nvidia", "mode": "mig", "state": state, "host_root": str(root)}
    rc, result = printed_result(driver_mode.main, args, capsys)
    assert rc == 0
    assert result["changed"] is False and "failed" not in result
    assert result["modes"] == [] and "changes" not in result
    assert warning_messages(result) == [
        f"driver_mode: no nvidia accelerator was detected on this node (host root {root}), so mig was not {state}"
    ]


def test_absent_fail_fails_the_task_naming_the_manufacturer(fixture_host: Callable[[str], Path]) -> None:
    root = fixture_host("cpu-only-vm")
    args = {"manufacturer": "nvidia", "mode": "mig", "state": "enabled", "absent": "fail", "host_root": str(root)}
    result = fail_result(driver_mode.main, args)
    assert result["msg"] == (
        f"driver_mode: no nvidia accelerator was detected on this node (host root {root}), so mig was not enabled"
    )
    assert result["modes"] == []


def test_an_absent_manufacturer_the_bus_shows_says_what_the_bus_shows(fixture_host: Callable[[str], Path]) -> None:
    """Cards on the PCI bus, no driver answering: still absent for the mode, and the message says why."""
    args = {
        "manufacturer": "nvidia",
        "mode": "mig",
        "absent": "fail",
        "host_root": str(fixture_host("nvidia-driver-broken")),
    }
    msg = fail_result(driver_mode.main, args)["msg"]
    assert msg.startswith("driver_mode: no nvidia accelerator was detected on this node")
    assert "the PCI bus shows 2 accelerator(s) of this manufacturer where its driver named 0" in msg
    assert "Driver Not Loaded" in msg


@pytest.mark.parametrize("absent", ["warn", "fail"])
def test_an_unmeasured_manufacturer_always_fails(absent: str, fixture_host: Callable[[str], Path]) -> None:
    args = {
        "manufacturer": "nvidia",
        "mode": "mig",
        "absent": absent,
        "host_root": str(fixture_host("unreadable-sysfs")),
    }
    result = fail_result(driver_mode.main, args)
    assert "nvidia could not be measured: the PCI bus could not be listed" in result["msg"]


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_host_root_is_refused(blank: str, source_repo: Path) -> None:
    result = fail_result(driver_mode.main, {"manufacturer": "ascend", "mode": "container-share", "host_root": blank})
    assert result["msg"].startswith("host_root is empty: ")
    assert "modes" not in result


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"manufacturer": "intel", "mode": "mig"}, "manufacturer"),
        ({"manufacturer": "nvidia", "mode": "mig", "state": "on"}, "state"),
        ({"manufacturer": "nvidia"}, "mode"),
        ({"manufacturer": "nvidia", "mode": "mig", "manufacturers": ["nvidia"]}, "manufacturers"),
        ({"manufacturer": "nvidia", "mode": "mig", "absent": "ignore"}, "absent"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option(args: dict[str, object], option: str, source_repo: Path) -> None:
    result = fail_result(driver_mode.main, args)
    assert option in result["msg"]
    assert "modes" not in result


def test_without_the_package_the_task_fails_with_the_install_hint(without_gpustack: ModuleType) -> None:
    result = fail_result(driver_mode.main, {"manufacturer": "ascend", "mode": "container-share"})
    assert "Failed to import the required Python library (gpustack-operator)" in result["msg"]
