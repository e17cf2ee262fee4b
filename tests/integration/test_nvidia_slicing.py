"""NVIDIA: a MIG mode that cannot be read fails closed (neither logical slices nor MIG partitions on
that card); "not supported" (a card without MIG) stays HAMi-core logical slicing. Over ``a100-mig``
(MIG on for NVML 0-3, off for 4-7) and the NVML stand-in."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import detect_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import Accelerator
from gpustack_operator.manufacturers.base import Detected
from gpustack_operator.manufacturers.nvidia import nvml as codes
from gpustack_operator.settings import load_settings

from tests.conftest import copy_host, host
from tests.stubs.nvidia.data import set_values


def accelerators(root: Path) -> list[Accelerator]:
    outcome = detect_node(HostRoot(root), resolve_manufacturers(["nvidia"]), load_settings()).outcomes["nvidia"]
    assert isinstance(outcome, Detected)
    return [a for g in outcome.groups for a in g.accelerators]


def test_mig_on_off_as_read() -> None:
    accs = accelerators(host("a100-mig"))
    for acc in accs[:4]:
        assert acc.status.logical_sliced is not None and acc.status.logical_sliced.count == 0
        assert acc.status.physical_sliced is not None and acc.status.physical_sliced.profiles
    for acc in accs[4:]:
        assert acc.status.logical_sliced is not None and acc.status.logical_sliced.count == 128
        assert acc.status.physical_sliced is None


@pytest.mark.parametrize("device", [0, 5])  # a card in MIG mode and one out of it
def test_an_unreadable_mig_mode_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture, device: int) -> None:
    root = copy_host("a100-mig", tmp_path)
    set_values(root, device, mig_error=codes.ERROR_UNKNOWN)
    with caplog.at_level(logging.ERROR):
        accs = accelerators(root)
    assert len(accs) == 8  # the card is still detected
    assert accs[device].status.logical_sliced is None and accs[device].status.physical_sliced is None
    assert "MIG mode" in caplog.text and "neither" in caplog.text
    others = [a for i, a in enumerate(accs) if i != device]
    assert all(a.status.logical_sliced is not None for a in others)


def test_mig_not_supported_is_logical_slicing(tmp_path: Path) -> None:
    root = copy_host("a100-mig", tmp_path)
    set_values(root, 0, mig_error=codes.ERROR_NOT_SUPPORTED)
    acc = accelerators(root)[0]
    assert acc.status.logical_sliced is not None and acc.status.logical_sliced.count == 128
    assert acc.status.physical_sliced is None
