"""Ascend container-share: read, set, restore, and the read outcomes of supplement §1.6."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import modes
from gpustack_operator.manufacturers.ascend import detect
from gpustack_operator.manufacturers.ascend.modes import CONTAINER_SHARE, V2_DETAIL, npu_smi_command
from gpustack_operator.manufacturers.base import DetectContext, Detected, ModeError

from tests.conftest import host
from tests.stubs.ascend import fixture
from tests.stubs.ascend.fixture import copy_host
from tests.unit.test_ascend_dcmi import ctx


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CANN_HOME", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)


def detected(root: Path) -> tuple[DetectContext, list[DevicesGroup]]:
    context = ctx(root)
    outcome = detect.detect(context)
    assert isinstance(outcome, Detected)
    return context, outcome.groups


def test_npu_smi_command() -> None:
    assert npu_smi_command(3, 0, True) == "npu-smi set -t device-share -i 3 -c 0 -d 1"
    assert npu_smi_command(1, 1, False) == "npu-smi set -t device-share -i 1 -c 1 -d 0"


def test_v1_reads_the_flag_per_card() -> None:
    context, groups = detected(host("ascend-910b-8x"))
    states = CONTAINER_SHARE.read(context, groups)
    assert [(s.index, s.declared, s.enabled) for s in states] == [(i, True, False) for i in range(8)]
    assert [s.accelerator for s in states] == [a.id for g in groups for a in g.accelerators]


def test_v2_declares_no_flag() -> None:
    context, groups = detected(host("ascend-950pr-v2"))
    states = CONTAINER_SHARE.read(context, groups)
    assert len(states) == 8
    assert all(not s.declared and s.enabled is None and s.detail == V2_DETAIL for s in states)
    with pytest.raises(ModeError, match="declares no container-share flag"):
        modes.converge(context, CONTAINER_SHARE, groups, "all", True)


def test_set_is_idempotent_and_restorable(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    context, groups = detected(root)
    (change,) = modes.converge(context, CONTAINER_SHARE, groups, "3", True)
    assert (change.index, change.before, change.after, change.changed) == (3, False, True, True)
    assert change.command == "npu-smi set -t device-share -i 3 -c 0 -d 1"
    assert change.undo_command == "npu-smi set -t device-share -i 3 -c 0 -d 0"
    assert fixture.npu_value(root, 3, "share") == "1"
    assert fixture.npu_value(root, 2, "share") == "0"

    # a second set finds the flag on and writes nothing (a write would now fail)
    fixture.set_global(root, share_set_rc=-8002)
    (again,) = modes.converge(context, CONTAINER_SHARE, groups, "3", True)
    assert (again.before, again.after, again.changed, again.command) == (True, True, False, None)

    fixture.set_global(root, share_set_rc=0)
    restored = modes.restore(context, CONTAINER_SHARE, groups, change)
    assert (restored.before, restored.after, restored.changed) == (True, False, True)
    assert fixture.npu_value(root, 3, "share") == "0"


def test_other_read_failure_still_writes(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    context, groups = detected(root)
    fixture.set_npu(root, 5, share_get_rc=-8005)
    states = CONTAINER_SHARE.read(context, groups)
    assert states[5].enabled is None and "-8005" in (states[5].detail or "")
    (change,) = modes.converge(context, CONTAINER_SHARE, groups, "5", True)
    assert (change.before, change.changed, change.undo_command) == (None, True, None)
    assert change.command == "npu-smi set -t device-share -i 5 -c 0 -d 1"
    assert fixture.npu_value(root, 5, "share") == "1"


def test_read_and_write_failure_reports_both_and_the_remedy(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    context, groups = detected(root)
    fixture.set_npu(root, 1, share_get_rc=-8005, share_set_rc=-8002)
    with pytest.raises(ModeError) as excinfo:
        modes.converge(context, CONTAINER_SHARE, groups, "1", True)
    error = excinfo.value
    assert error.read_error == "dcmi_get_device_share_enable returned -8005 (INNER_ERR)"
    assert error.write_error == "dcmi_set_device_share_enable returned -8002 (OPER_NOT_PERMITTED)"
    assert error.remedy == "run `npu-smi set -t device-share -i 1 -c 0 -d 1` on the host"
    assert error.accelerator == groups[0].accelerators[1].id
    assert fixture.npu_value(root, 1, "share") == "0"


def test_write_failure_after_a_good_read_names_no_read_error(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    context, groups = detected(root)
    fixture.set_global(root, share_set_rc=-8002)
    with pytest.raises(ModeError) as excinfo:
        modes.converge(context, CONTAINER_SHARE, groups, "0", True)
    assert excinfo.value.read_error is None
    assert excinfo.value.write_error and "-8002" in excinfo.value.write_error
    assert excinfo.value.remedy and "npu-smi set -t device-share -i 0 -c 0 -d 1" in excinfo.value.remedy


def test_missing_entry_point_refuses_without_writing_or_a_command(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.install_variant(root, "fake_dcmi_noshare.c")
    context, groups = detected(root)  # detection itself needs no share call
    states = CONTAINER_SHARE.read(context, groups)
    assert all(s.declared and s.enabled is None for s in states)
    assert "libdcmi exports no dcmi_get_device_share_enable" in (states[0].detail or "")
    with pytest.raises(ModeError) as excinfo:
        modes.converge(context, CONTAINER_SHARE, groups, "0", True)
    assert excinfo.value.remedy is None and "nothing was written" in str(excinfo.value)
    assert "npu-smi" not in str(excinfo.value)


def test_library_not_loaded_refuses_without_a_command(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    context, groups = detected(root)
    (root / fixture.LIB).unlink()
    states = CONTAINER_SHARE.read(context, groups)
    assert all(s.enabled is None and (s.detail or "").startswith("libdcmi is not loaded") for s in states)
    with pytest.raises(ModeError) as excinfo:
        CONTAINER_SHARE.set(context, states[0], True)
    assert excinfo.value.remedy is None and "npu-smi" not in str(excinfo.value)
