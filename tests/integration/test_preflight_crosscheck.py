"""Question 1 end to end: the detect pass cross-checked against the node's own vendor CLI, entered
with a real chroot (the fixture node carries ``nvidia-smi`` / ``npu-smi`` / ``rocm-smi`` scripts in
their real output formats and a shell to run them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_host, host, run_cli

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")


def nvidia_group(proc_stdout: str) -> dict[str, object]:
    doc = yaml.safe_load(proc_stdout)
    (group,) = [g for g in doc["accelerators"] if g["manufacturer"] == "nvidia"]
    return group  # type: ignore[no-any-return]


def test_host_agrees_with_detection() -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host("h100-sxm-8x")),
        "--host-root",
        str(host("h100-sxm-8x")),
        "--manufacturer",
        "nvidia",
    )
    assert proc.returncode == 0, proc.stderr
    det = nvidia_group(proc.stdout)["detection"]
    assert det["state"] == "ok" and det["accelerators"] == 8  # type: ignore[index]
    assert det["host"]["accelerators"] == 8 and "reason" not in det["host"]  # type: ignore[index]


def test_container_without_the_vendor_runtime_is_unavailable_naming_what_is_missing(tmp_path: Path) -> None:
    """The bring-up mistake nearly every first run makes: the container sees no NVML (no
    --runtime nvidia), the host's nvidia-smi sees eight. Not "no accelerators": unavailable."""
    node = copy_host("h100-sxm-8x", tmp_path)
    (node / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").unlink()
    proc = run_cli("dm", "preflight", "--detect-root", str(node), "--host-root", str(node), "--manufacturer", "nvidia")
    assert proc.returncode == 1
    det = nvidia_group(proc.stdout)["detection"]
    assert det["state"] == "unavailable"  # type: ignore[index]
    assert "nvidia-smi reports 8 accelerator(s) where this container detected 0" in det["reason"]  # type: ignore[index]
    assert any("container runtime" in m for m in det["host"]["missingMounts"])  # type: ignore[index]


def test_driver_that_does_not_answer_on_either_side() -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host("nvidia-driver-broken")),
        "--host-root",
        str(host("nvidia-driver-broken")),
        "--manufacturer",
        "nvidia",
    )
    # neither side sees the cards: not a visibility gap (no mount is named) but a half-installed node
    assert proc.returncode == 1, proc.stderr
    det = nvidia_group(proc.stdout)["detection"]
    assert det["state"] == "unavailable"  # type: ignore[index]
    assert "the PCI bus shows 2 accelerator(s)" in det["reason"]  # type: ignore[index]
    assert "missingMounts" not in det["host"]  # type: ignore[index]
    assert det["host"]["reason"].startswith("nvidia-smi: exit status 9: NVIDIA-SMI has failed")  # type: ignore[index]


@pytest.mark.parametrize(
    ("name", "manufacturer", "count"),
    [("ascend-910b-8x", "ascend", 8), ("mi300x-8x", "amd", 8), ("radeon-7800xt", "amd", 1)],
)
def test_other_host_clis(name: str, manufacturer: str, count: int) -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host(name)),
        "--host-root",
        str(host(name)),
        "--manufacturer",
        manufacturer,
    )
    assert proc.returncode == 0, proc.stderr
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    assert group["detection"]["host"]["accelerators"] == count == group["detection"]["accelerators"]


def test_manufacturer_without_a_host_cli_gets_no_host_view() -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host("h100-sxm-8x")),
        "--host-root",
        str(host("h100-sxm-8x")),
        "--manufacturer",
        "cambricon",
    )
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    assert "host" not in group["detection"]
