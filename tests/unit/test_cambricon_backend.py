"""Cambricon over CNDev: detection, failure injection, monitor and the sMLU driver mode, against the
libcndev stand-in (tests/stubs/cambricon/fake_cndev.c) installed in the ``mlu370-x8`` fixture host."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import monitor_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import DetectContext, Detected, Measured, ModeError, ModeState, Unmeasured
from gpustack_operator.manufacturers.cambricon.detect import mlu_id, parse_neuware_version
from gpustack_operator.manufacturers.cambricon.modes import SMLU, cnmon_command
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO, copy_host, empty, host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "usr/local/neuware/lib64/libcndev.so"
FIXTURE = LIB + ".fixture"
BUSES = ["0000:18:00.0", "0000:19:00.0", "0000:40:00.0", "0000:41:00.0"]


def edit_fixture(root: Path, **values: object) -> None:
    edit_kv_fixture(root / FIXTURE, **values)


def fixture_value(root: Path, key: str) -> str:
    for line in (root / FIXTURE).read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    raise KeyError(key)


def detect(root: Path) -> Detected | Unmeasured:
    return detect_one(root, "cambricon")


def context(root: Path) -> DetectContext:
    resolved = resolve_manufacturers(["cambricon"])["cambricon"]
    host_root = HostRoot(root)
    return DetectContext(view=host_root, pci=scan_pci(host_root), settings=load_settings(), manufacturer=resolved)


# -- parsers -----------------------------------------------------------------------------------


@given(st.integers(0, 999), st.integers(0, 999), st.integers(0, 999), st.text(max_size=20))
def test_neuware_version_takes_the_first_triple(major: int, minor: int, patch: int, noise: str) -> None:
    noise = re.sub(r"\d", "", noise)
    assert parse_neuware_version(f"Neuware Version {noise} {major}.{minor}.{patch}\n") == f"{major}.{minor}.{patch}"


@given(st.text())
def test_neuware_version_never_raises_and_is_numeric(text: str) -> None:
    version = parse_neuware_version(text)
    assert version is None or re.fullmatch(r"\d+\.\d+\.\d+", version)


@given(st.uuids().map(str))
def test_mlu_id_is_prefixed_once(raw: str) -> None:
    assert mlu_id(raw) == f"MLU-{raw}"
    assert mlu_id(mlu_id(raw)) == mlu_id(raw)


@given(st.integers(0, 127), st.booleans())
def test_cnmon_command_names_the_ordinal(index: int, enabled: bool) -> None:
    assert cnmon_command(index, enabled) == f"cnmon set -c {index} -smlu {'on' if enabled else 'off'}"


# -- detection ---------------------------------------------------------------------------------


def test_detects_eight_mlu370_with_identity_topology_and_slicing() -> None:
    outcome = detect(host("mlu370-x8"))
    assert isinstance(outcome, Detected)
    (group,) = outcome.groups
    assert (group.id, group.name, group.memory) == ("mlu370-x8", "MLU370-X8", 49152)
    assert (group.driver_version, group.runtime_version) == ("5.10", "1.15.0")
    accs = group.accelerators
    assert [a.index for a in accs] == list(range(8))
    assert [a.physical_indexes for a in accs] == [[i] for i in range(8)]
    assert all(a.id.startswith("MLU-") and len(a.id) == 40 for a in accs)
    assert [a.topology.pci_bus_id for a in accs][:4] == BUSES
    assert [a.topology.numa_affinity for a in accs] == ["0"] * 4 + ["1"] * 4
    assert all(a.topology.pci_class == "120000" for a in accs)
    assert all(a.status.logical_sliced and a.status.logical_sliced.count == 16 for a in accs)
    assert not any(a.status.logical_sliced and a.status.logical_sliced.cores_percentage_overcommit for a in accs)


def test_init_failure_is_no_hardware_not_an_error(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    edit_fixture(root, init=1)  # CNDEV_ERROR_NO_DRIVER
    assert empty(detect(root))


def test_absent_library_is_no_hardware(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    (root / LIB).unlink()
    assert empty(detect(root))


def test_count_failure_after_init_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    edit_fixture(root, count_error=7)
    outcome = detect(root)
    assert isinstance(outcome, Unmeasured)
    assert "cndevGetDeviceCount" in outcome.reason and "CNDEV_ERROR_UNKNOWN" in outcome.reason


def test_a_card_whose_uuid_fails_is_dropped_not_named_by_pci(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    edit_fixture(root, device_3_uuid_error=6, device_5_name_error=1)
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    accs = outcome.groups[0].accelerators
    assert len(accs) == 6
    assert "0000:41:00.0" not in [a.topology.pci_bus_id for a in accs]  # card 3
    assert "0000:9b:00.0" not in [a.topology.pci_bus_id for a in accs]  # card 5
    assert all(a.id.startswith("MLU-") for a in accs)
    # the driver's numbering travels: logical 0..5, physical keeps the cnDev positions
    assert [a.physical_indexes[0] for a in accs] == [0, 1, 2, 4, 6, 7]
    assert [a.index for a in accs] == list(range(6))


def test_no_pci_function_means_the_library_is_not_consulted() -> None:
    # h100 has no cabc device: nothing to load, nothing reported
    assert empty(detect(host("h100-sxm-8x")))


def test_monitor_samples_every_card() -> None:
    sample = monitor_node(HostRoot(host("mlu370-x8")), resolve_manufacturers(["cambricon"]), load_settings())
    outcome = sample.outcomes["cambricon"]
    assert isinstance(outcome, Measured)
    assert len(outcome.samples) == 8
    s2 = outcome.samples[2]
    assert (s2.memory, s2.memory_usage, s2.memory_utilization) == (49152, 2560, 5)
    assert (s2.cores_utilization, s2.temperature, s2.power_usage) == (20, 40, 70)


def test_monitor_count_failure_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    edit_fixture(root, count_error=4)
    sample = monitor_node(HostRoot(root), resolve_manufacturers(["cambricon"]), load_settings())
    assert isinstance(sample.outcomes["cambricon"], Unmeasured)


# -- sMLU mode ---------------------------------------------------------------------------------


def _states(root: Path) -> list[ModeState]:
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    return SMLU.read(context(root), outcome.groups)


def test_smlu_read_reports_each_card() -> None:
    states = _states(host("mlu370-x8"))
    assert [s.enabled for s in states] == [True, True] + [False] * 6
    assert all(s.declared and s.mode == "smlu" for s in states)
    assert [s.index for s in states] == list(range(8))
    assert "PCI 0000:40:00.0" in (states[2].detail or "")


def test_smlu_set_restore_is_idempotent_and_persists(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    ctx = context(root)
    state = _states(root)[3]
    assert state.enabled is False

    change = SMLU.set(ctx, state, True)
    assert (change.before, change.after, change.changed) == (False, True, True)
    assert change.command == "cnmon set -c 3 -smlu on"
    assert change.undo_command == "cnmon set -c 3 -smlu off"
    assert fixture_value(root, "device.3.smlu") == "1"  # the stand-in persisted the driver state
    assert _states(root)[3].enabled is True

    again = SMLU.set(ctx, state, True)
    assert (again.changed, again.command, again.before, again.after) == (False, None, True, True)

    restore = SMLU.set(ctx, state, bool(change.before))
    assert (restore.before, restore.after, restore.changed) == (True, False, True)
    assert fixture_value(root, "device.3.smlu") == "0"
    assert [s.enabled for s in _states(root)] == [True, True] + [False] * 6


def test_smlu_write_refusal_names_pci_index_both_errors_and_cnmon(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    state = _states(root)[2]
    edit_fixture(root, device_2_smlu_set_error=13, device_2_smlu_get_error=7)
    with pytest.raises(ModeError) as err:
        SMLU.set(context(root), state, True)
    text = str(err.value)
    assert "PCI 0000:40:00.0" in text and "cnDev index 2" in text
    assert "CNDEV_ERROR_NO_PERMISSION" in text and "CNDEV_ERROR_UNKNOWN" in text  # write and read
    assert "cnmon set -c 2 -smlu on" in text and "confirming the ordinal with `cnmon`" in text
    assert err.value.read_error and err.value.write_error
    assert fixture_value(root, "device.2.smlu") == "0"


def test_smlu_unreadable_but_writable_still_writes(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    state = _states(root)[4]
    edit_fixture(root, device_4_smlu_get_error=7)
    change = SMLU.set(context(root), state, True)
    assert (change.before, change.after, change.changed, change.undo_command) == (None, True, True, None)
    assert fixture_value(root, "device.4.smlu") == "1"


def _build_without_smlu(out: Path) -> None:
    source = REPO / "tests/stubs/cambricon/fake_cndev.c"
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-DFAKE_CNDEV_NO_SMLU", "-o", str(out), str(source)]
    subprocess.run([*cmd, "-ldl"], check=True, capture_output=True)


def test_no_smlu_api_refuses_without_a_command(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    states = _states(host("mlu370-x8"))  # same cards; the copy's library must not be loaded before the swap
    (root / LIB).unlink()
    _build_without_smlu(root / LIB)
    outcome = detect(root)
    assert isinstance(outcome, Detected) and len(outcome.groups[0].accelerators) == 8
    for call in (lambda: SMLU.read(context(root), outcome.groups), lambda: SMLU.set(context(root), states[5], True)):
        with pytest.raises(ModeError) as err:
            call()
        assert "no sMLU API" in str(err.value) and "cndevGetSMLUMode" in str(err.value)
        assert "cnmon" not in str(err.value) and err.value.remedy is None


def test_no_library_is_no_smlu_api(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    states = _states(root)
    (root / LIB).unlink()
    with pytest.raises(ModeError, match="no sMLU API") as err:
        SMLU.set(context(root), states[0], False)
    assert "cnmon" not in str(err.value)


def test_set_refuses_an_index_that_now_names_another_card(tmp_path: Path) -> None:
    root = copy_host("mlu370-x8", tmp_path)
    state = _states(root)[1]
    moved = state.model_copy(update={"index": 6})
    with pytest.raises(ModeError, match="cnDev index 6 now names"):
        SMLU.set(context(root), moved, True)
    assert fixture_value(root, "device.6.smlu") == "0"


def test_accelerator_without_logical_slicing_is_not_declared(tmp_path: Path) -> None:
    outcome = detect(host("mlu370-x8"))
    assert isinstance(outcome, Detected)
    group = outcome.groups[0].model_copy(deep=True)
    group.accelerators[0].status.logical_sliced = None
    states = SMLU.read(context(host("mlu370-x8")), [group])
    assert states[0].declared is False and states[0].enabled is None
    assert states[1].declared is True


def test_stub_source_has_no_smlu_symbols_when_built_without(tmp_path: Path) -> None:
    out = tmp_path / "libcndev.so"
    _build_without_smlu(out)
    symbols = subprocess.run(["nm", "-D", str(out)], capture_output=True, text=True, check=True).stdout
    assert "cndevGetUUID" in symbols and "SMLU" not in symbols
    assert shutil.which("gcc")
