"""A vendor library that kills the process loading it (issue 16, "Hostile input"): every command that
loads vendor code -- ``dm detect``, ``dm monitor``, ``dm mode``, ``dm serve`` and the
``accelerator_facts`` module -- survives it.

The node is a copy of ``mixed-cambricon-metax`` whose CNDev stand-in is cut to half its size, as a
half-written driver install leaves it: ``dlopen`` maps segments past the end of the file and the first
touch of them is ``SIGBUS`` inside the dynamic loader (checked below, so the test knows what it is
testing). Each command runs as its own process, as a user runs it: the document is written, Cambricon
is unmeasured with a reason naming the library and the signal, MetaX is answered, and stderr holds no
traceback (device-discovery "failure semantics": an error is "could not measure", no claim about the
hardware).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO, copy_host, run_cli

NODE = "mixed-cambricon-metax"


def truncated_node(tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the node, its CNDev library cut to half its size)."""
    root = copy_host(NODE, tmp_path)
    (lib,) = [p for p in root.rglob("libcndev.so*") if not p.name.endswith(".fixture")]
    data = lib.read_bytes()
    lib.unlink()  # never write through a link into the shared fixture tree
    lib.write_bytes(data[: len(data) // 2])
    lib.chmod(0o755)
    return root, lib


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    return truncated_node(tmp_path)


def assert_cambricon_killed(reason: object, lib: Path) -> None:
    assert isinstance(reason, str)
    assert "killed by SIGBUS" in reason, reason
    assert str(lib) in reason, reason
    assert "reinstall the driver" in reason, reason  # the remedy


def test_the_truncated_library_faults_with_sigbus_in_dlopen(node: tuple[Path, Path]) -> None:
    """The premise: loading the library alone kills its process with SIGBUS (not an OSError)."""
    _, lib = node
    proc = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('loaded')", str(lib)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr)
    assert "loaded" not in proc.stdout


def test_detect_writes_its_document_and_names_the_library_and_signal(node: tuple[Path, Path]) -> None:
    root, lib = node
    proc = run_cli("dm", "detect", "--detect-root", str(root), "-o", "json")
    assert proc.returncode == 1, proc.stderr  # a manufacturer could not be measured
    doc = json.loads(proc.stdout)
    unmeasured = doc["node"]["unmeasured"]
    assert sorted(unmeasured) == ["cambricon"]
    assert_cambricon_killed(unmeasured["cambricon"], lib)
    assert {g["manufacturer"] for g in doc["groups"]} == {"metax"}  # the other one answered
    assert "cambricon could not be measured" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_monitor_writes_its_sample_and_names_the_library_and_signal(node: tuple[Path, Path]) -> None:
    root, lib = node
    proc = run_cli("dm", "monitor", "--detect-root", str(root))
    assert proc.returncode == 0, proc.stderr  # monitor names the unmeasured, it does not fail (rule 5)
    doc = yaml.safe_load(proc.stdout)
    assert sorted(doc["unmeasured"]) == ["cambricon"]
    assert_cambricon_killed(doc["unmeasured"]["cambricon"], lib)
    (metax,) = [g for g in doc["groups"] if g["manufacturer"] == "metax"]
    assert metax["accelerators"]
    assert "Traceback" not in proc.stderr


def test_mode_refuses_in_one_line_naming_the_library(node: tuple[Path, Path]) -> None:
    root, lib = node
    proc = run_cli("dm", "mode", "cambricon", "smlu", "--detect-root", str(root))
    assert proc.returncode == 1, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert "cambricon could not be measured" in line
    assert_cambricon_killed(line, lib)
    assert "Traceback" not in proc.stderr


def test_serve_holds_back_a_manufacturer_it_could_not_measure(node: tuple[Path, Path], tmp_path: Path) -> None:
    """serve never exits for a manufacturer it could not measure: the first pass is held back and
    repeated (fast-failed), each time naming the fault and its remedy, until SIGTERM (exit 0)."""
    root, lib = node
    sockets = Path(tempfile.mkdtemp(prefix="gpa-", dir="/tmp"))  # short: a socket path holds 107 bytes
    argv = [str(BIN / "gpustack-operator"), "dm", "serve", "--detect-root", str(root), "--manufacturer", "cambricon"]
    argv += ["--node-name", "node-1", "--kube-api-server", "http://127.0.0.1:9", "--monitor-period", "0.2"]
    argv += ["--kube-socket", str(sockets / "kubelet.sock"), "--pod-resources-socket", str(sockets / "pr.sock")]
    argv += ["--host-write-root", str(tmp_path), "--secure-port", "0", "--bind-address", "127.0.0.1"]
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "KUBE"))}
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("held back and repeated") < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # the process this test started, by its pid
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(sockets)
    out = log.read_text()
    assert code == 0, out[-3000:]
    (line, *_) = [ln for ln in out.splitlines() if "held back and repeated" in ln]
    assert "the first detection of cambricon found nothing" in line
    assert_cambricon_killed(line, lib)
    assert "Traceback" not in out


@pytest.mark.ansible
def test_the_facts_module_survives_it(
    node: tuple[Path, Path], tmp_path: Path, ansible_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """accelerator_facts detects through api.facts (the same isolated pass): the task is ok, Cambricon
    is ``unmeasured`` with the reason, MetaX detected."""
    import ansible_runner

    root, lib = node
    for key, value in ansible_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    inv = tmp_path / "inv.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": str(BIN / "python")}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node": {**host, "gpustack_host_root": str(root)}}}}))
    (tmp_path / "runner").mkdir()
    run = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        host_pattern="node",
        inventory=str(inv),
        module="gpustack.accelerators.accelerator_facts",
        quiet=True,
    )
    (event,) = [e for e in run.events if e.get("event") in ("runner_on_ok", "runner_on_failed")]
    result: dict[str, Any] = event["event_data"]["res"]
    assert event["event"] == "runner_on_ok", result
    facts = result["ansible_facts"]["gpustack_accelerators"]
    cambricon = facts["manufacturers"]["cambricon"]
    assert cambricon["state"] == "unmeasured"
    assert_cambricon_killed(cambricon["reason"], lib)
    assert facts["manufacturers"]["metax"]["state"] == "detected"
