"""Non-regular files and an unreadable arm64 register through the commands a user runs (issue 16,
"Hostile input"): ``detect`` and ``preflight`` on fixture copies where a FIFO sits at ``/proc/cpuinfo``
or at the kubelet's ``config.yaml``, or where ``midr_el1`` cannot be read. Each command returns
promptly (a hang FAILS here: the process is killed at the deadline), writes its document, prints no
traceback, and what could not be read costs only what depends on it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, copy_host
from tests.tools import kubelet_nodes as kn
from tests.unit.nonregular import plant

DEADLINE = 60  # seconds; these runs take about one on this fixture fleet
MIDR = "sys/devices/system/cpu/cpu0/regs/identification/midr_el1"
MANUFACTURERS = {"amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"}


def cli(*args: str) -> tuple[int, dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    try:
        proc = subprocess.run(
            [str(BIN / "gpustack-operator"), *args], capture_output=True, text=True, env=env, timeout=DEADLINE
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} still running after {DEADLINE} s (a read blocked on a non-regular file?)")
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = yaml.safe_load(proc.stdout) if proc.stdout else None
    assert isinstance(doc, dict), f"no document written; stderr: {proc.stderr}"
    return proc.returncode, doc, proc.stderr


def _fifo(root: Path, rel: str) -> Path:
    return plant(root / rel, "fifo")


def test_detect_with_a_fifo_at_proc_cpuinfo_answers_without_the_cpu(tmp_path: Path) -> None:
    root = copy_host("cpu-only-vm", tmp_path)
    _fifo(root, "proc/cpuinfo")
    rc, doc, err = cli("dm", "detect", "--detect-root", str(root))
    node = doc["node"]
    assert isinstance(node, dict)
    assert node["cpu"] is None
    assert "/proc/cpuinfo" in str(node["cpuError"]) and "FIFO" in str(node["cpuError"])
    assert rc == 0, err


def test_preflight_with_a_fifo_at_the_kubelet_config_says_it_was_not_read(tmp_path: Path) -> None:
    root = kn.kubeadm_node(copy_host("cpu-only-vm", tmp_path), running=False)
    _fifo(root, "var/lib/kubelet/config.yaml")
    rc, doc, err = cli(
        "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia"
    )
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["policy"] == "unknown"
    note = str(topology["note"])
    assert "/var/lib/kubelet/config.yaml" in note and "FIFO" in note and "not a regular file" in note
    assert rc == 0, err


def test_preflight_with_a_fifo_at_a_running_kubelets_config_and_cmdline(tmp_path: Path) -> None:
    root = kn.kubeadm_node(copy_host("cpu-only-vm", tmp_path))
    _fifo(root, f"proc/{kn.KUBELET_PID}/cmdline")
    rc, doc, err = cli(
        "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia"
    )
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["policy"] == "unknown"
    assert f"/proc/{kn.KUBELET_PID}/cmdline" in str(topology["note"])
    assert rc == 0, err


@pytest.mark.parametrize("kind", ["directory", "fifo", "loop", "garbled"])
def test_an_unreadable_midr_costs_the_cpu_identity_only(tmp_path: Path, kind: str) -> None:
    root = copy_host("ampere-altra-cpu-only", tmp_path)
    midr = root / MIDR
    midr.parent.mkdir(parents=True, exist_ok=True)
    if kind == "loop":
        os.symlink("midr_el1", midr)
    elif kind == "garbled":
        midr.write_text("-0x" + "f" * 5000 + "\n")
    else:
        plant(midr, kind)

    rc, doc, err = cli("dm", "preflight", "--detect-root", str(root), "--host-root", str(root))
    rows = doc["accelerators"]
    assert isinstance(rows, list)
    assert {row["manufacturer"] for row in rows} == MANUFACTURERS
    assert "crashed" not in yaml.safe_dump(doc), "a manufacturer was not answered"
    assert all(row["detection"]["state"] != "unavailable" for row in rows), rows
    assert "midr_el1" in err  # the reason the CPU identity is unknown is logged
    assert rc == 0, err

    rc, doc, err = cli("dm", "detect", "--detect-root", str(root))
    node = doc["node"]
    assert isinstance(node, dict) and node["cpu"] is None
    assert "midr_el1" in str(node["cpuError"])
    assert node["generalNodeKey"] == "generic"
    assert rc == 0, err
