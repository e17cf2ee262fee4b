"""No AMD and no T-Head accelerator on an arm64 node (spec: "Where the preload libraries come from"):
``altra-radeon-7800xt`` carries an RX 7800 XT whose amdgpu publishes KFD on an Ampere Altra."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpustack_operator.manufacturers.base import Detected, Measured

from tests.conftest import copy_host, host
from tests.stubs.keyvalue import detect_one
from tests.unit.test_amd_detect import detect, detected, sample


def test_no_amd_node_on_arm64() -> None:
    outcome = detect(host("altra-radeon-7800xt"), "amd")
    assert isinstance(outcome, Detected) and outcome.groups == [] and outcome.driver is not None
    assert "arm64" in outcome.driver and "ROCm" in outcome.driver
    assert sample(host("altra-radeon-7800xt"), "amd") == Measured([])


def test_the_same_card_on_x86_is_detected() -> None:
    (group,) = detected(detect(host("radeon-7800xt"), "amd")).groups
    assert group.name == "AMD Radeon RX 7800 XT" and len(group.accelerators) == 1


def test_an_unreadable_cpuinfo_decides_nothing(tmp_path: Path) -> None:
    root = copy_host("altra-radeon-7800xt", tmp_path)
    (root / "proc/cpuinfo").unlink()
    (group,) = detected(detect(root, "amd")).groups
    assert len(group.accelerators) == 1


def test_no_ppu_on_arm64(tmp_path: Path) -> None:
    root = copy_host("thead-ppu", tmp_path)
    shutil.copy2(host("ampere-altra-cpu-only") / "proc/cpuinfo", root / "proc/cpuinfo")
    outcome = detect_one(root, "thead")
    assert isinstance(outcome, Detected) and outcome.groups == []
    assert outcome.driver is not None and "PPU SDK" in outcome.driver
    assert len(detected(detect_one(host("thead-ppu"), "thead")).groups[0].accelerators) == 8
