"""The ``mig`` driver mode on the NVML stand-in: read, set, idempotence, restore, failed writes.

Every write happens on a copy of a fixture node: the stand-in persists the mode in its data file."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import detect_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import DetectContext, Detected, ModeError, ModeState
from gpustack_operator.manufacturers.nvidia.modes import MIG_MODE
from gpustack_operator.settings import load_settings

from tests.conftest import copy_host, host
from tests.stubs.nvidia.data import data_file, read_values, set_values


def context(root: Path) -> tuple[DetectContext, list[DevicesGroup]]:
    resolved = resolve_manufacturers(["nvidia"])
    settings = load_settings()
    hr = HostRoot(root)
    result = detect_node(hr, resolved, settings)
    outcome = result.outcomes["nvidia"]
    assert isinstance(outcome, Detected)
    return DetectContext(view=hr, pci=result.pci, settings=settings, manufacturer=resolved["nvidia"]), outcome.groups


def read(root: Path) -> list[ModeState]:
    ctx, groups = context(root)
    return MIG_MODE.read(ctx, groups)


def test_registered() -> None:
    assert REGISTRY["nvidia"].modes["mig"] is MIG_MODE
    assert MIG_MODE.writable


def test_read_h100_all_off() -> None:
    states = read(host("h100-sxm-8x"))
    assert [(s.index, s.declared, s.enabled, s.detail, s.mode) for s in states] == [
        (i, True, False, None, "mig") for i in range(8)
    ]
    assert all(s.accelerator.startswith("GPU-") for s in states)


def test_read_a100_per_card() -> None:
    assert [s.enabled for s in read(host("a100-mig"))] == [True] * 4 + [False] * 4


def test_consumer_card_declares_no_mig_mode() -> None:
    (state,) = read(host("rtx4090"))
    assert (state.declared, state.enabled, state.detail) == (False, None, "this accelerator has no MIG mode")


def test_set_is_idempotent_and_restores(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    original = data_file(root).read_text()
    ctx, groups = context(root)
    state = MIG_MODE.read(ctx, groups)[2]

    change = MIG_MODE.set(ctx, state, True)
    assert (change.before, change.after, change.changed) == (False, True, True)
    assert change.command == "nvidia-smi -i 2 -mig 1"
    assert change.undo_command == "nvidia-smi -i 2 -mig 0"
    assert change.accelerator == state.accelerator and change.index == 2
    assert read_values(root, 2)["mig_current"] == "1"  # the driver state moved

    # the next detection sees a partitioned card: H100 profiles, no logical slices
    ctx, groups = context(root)
    acc = groups[0].accelerators[2]
    assert acc.status.logical_sliced is not None and acc.status.logical_sliced.count == 0
    assert acc.status.physical_sliced is not None
    assert [p.name for p in acc.status.physical_sliced.profiles] == [
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        "1g.20gb",
    ]
    assert acc.status.physical_sliced.count == 7
    assert [a.status.physical_sliced is None for a in groups[0].accelerators] == [i != 2 for i in range(8)]

    states = MIG_MODE.read(ctx, groups)
    again = MIG_MODE.set(ctx, states[2], True)
    assert (again.before, again.after, again.changed, again.command) == (True, True, False, None)

    back = MIG_MODE.set(ctx, states[2], change.before)  # restore
    assert (back.before, back.after, back.changed) == (True, False, True)
    assert back.command == "nvidia-smi -i 2 -mig 0"
    assert [s.enabled for s in MIG_MODE.read(ctx, groups)] == [False] * 8
    assert data_file(root).read_text() == original  # put back exactly


def test_failed_write_names_accelerator_error_and_remedy(tmp_path: Path) -> None:
    root = copy_host("a100-mig", tmp_path)
    set_values(root, device=5, set_mig_error=4)  # NVML_ERROR_NO_PERMISSION
    ctx, groups = context(root)
    state = MIG_MODE.read(ctx, groups)[5]
    with pytest.raises(ModeError) as err:
        MIG_MODE.set(ctx, state, True)
    message = str(err.value)
    assert state.accelerator in message and message.startswith("mig on ")
    assert "Insufficient Permissions" in message
    assert "remedy:" in message and "root" in message and "nvidia-smi -i 5 -mig 1" in message
    assert err.value.write_error and "Insufficient Permissions" in err.value.write_error
    assert MIG_MODE.read(ctx, groups)[5].enabled is False  # nothing changed


def test_pending_change_asks_for_a_reset_and_can_be_cancelled(tmp_path: Path) -> None:
    root = copy_host("a100-mig", tmp_path)
    set_values(root, device=6, mig_activation=19)  # NVML_ERROR_IN_USE: applies at the next reset
    ctx, groups = context(root)
    state = MIG_MODE.read(ctx, groups)[6]
    with pytest.raises(ModeError) as err:
        MIG_MODE.set(ctx, state, True)
    message = str(err.value)
    assert state.accelerator in message and "only pending" in message
    assert "In use by another client" in message
    assert "reset the GPU (nvidia-smi -i 6 -r) or reboot" in message
    pending = MIG_MODE.read(ctx, groups)[6]
    assert pending.enabled is False and pending.detail and "pending" in pending.detail

    set_values(root, device=6, mig_activation=0)
    cancel = MIG_MODE.set(ctx, pending, False)  # restore: writes the current mode back
    assert (cancel.before, cancel.after, cancel.changed) == (False, False, True)
    assert MIG_MODE.read(ctx, groups)[6].detail is None


def test_set_on_a_card_without_mig_is_refused(tmp_path: Path) -> None:
    ctx, groups = context(host("rtx4090"))
    (state,) = MIG_MODE.read(ctx, groups)
    with pytest.raises(ModeError, match="no MIG mode") as err:
        MIG_MODE.set(ctx, state, True)
    assert state.accelerator in str(err.value)


def test_read_when_nvml_cannot_be_asked(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    ctx, groups = context(root)
    set_values(root, init_error=9)
    states = MIG_MODE.read(ctx, groups)
    assert len(states) == 8
    assert all(s.declared and s.enabled is None and s.detail and "Driver Not Loaded" in s.detail for s in states)
    with pytest.raises(ModeError) as err:
        MIG_MODE.set(ctx, states[0], True)
    assert states[0].accelerator in str(err.value) and "remedy:" in str(err.value)


def test_read_failure_of_one_card_is_named(tmp_path: Path) -> None:
    root = copy_host("a100-mig", tmp_path)
    set_values(root, device=1, mig_error=999)
    states = read(root)
    assert states[1].enabled is None and states[1].detail and "Unknown Error" in states[1].detail
    assert [s.enabled for i, s in enumerate(states) if i != 1] == [True] * 3 + [False] * 4
