"""accelerator_facts through Ansible: gather_subset-style manufacturers, the per-manufacturer and
per-accelerator views, a refusal for an unknown name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO, host

pytestmark = pytest.mark.ansible


def facts(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, manufacturers: list[str]
) -> tuple[str, dict[str, Any]]:
    """(the task's outcome event, its result) for one ad hoc run through ansible-runner."""
    import ansible_runner

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "node": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(BIN / "python"),
                            "gpustack_host_root": str(host(node)),
                        }
                    }
                }
            }
        )
    )
    (tmp_path / "runner").mkdir()
    run = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        host_pattern="node",
        inventory=str(inv),
        module="gpustack.accelerators.accelerator_facts",
        module_args=json.dumps({"manufacturers": manufacturers}),
        quiet=True,
    )
    (event,) = [e for e in run.events if e.get("event") in ("runner_on_ok", "runner_on_failed")]
    return str(event["event"]), dict(event["event_data"]["res"])


def test_exclusions_and_views(ansible_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome, result = facts(ansible_env, tmp_path, monkeypatch, "h100-sxm-8x", ["!thead", "!cambricon"])
    assert outcome == "runner_on_ok", result
    doc = result["ansible_facts"]["gpustack_accelerators"]
    assert sorted(doc["manufacturers"]) == ["amd", "ascend", "hygon", "iluvatar", "metax", "mthreads", "nvidia"]
    nvidia = doc["manufacturers"]["nvidia"]
    assert nvidia["state"] == "detected" and nvidia["accelerators"] == 8
    assert len(doc["accelerators"]) == 8
    assert {a["manufacturer"] for a in doc["accelerators"]} == {"nvidia"}
    assert sorted(a["index"] for a in doc["accelerators"]) == list(range(8))
    assert doc["node"]["generalNodeKey"] == "intel-xeon-platinum-8480"
    assert result["changed"] is False


def test_unknown_manufacturer_is_refused_by_name(
    ansible_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, result = facts(ansible_env, tmp_path, monkeypatch, "cpu-only-vm", ["!intel"])
    assert outcome == "runner_on_failed"
    assert "unknown manufacturer '!intel'" in result["msg"]


def test_the_inventory_variable_takes_the_same_syntax_and_a_blank_root_is_refused(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    """``gpustack_manufacturers: [all, "!thead"]`` from inventory (the modules' one syntax, not
    Ansible choices), and a host whose ``gpustack_host_root`` is blank fails instead of reading ``/``."""
    import subprocess

    common = {"ansible_connection": "local", "ansible_python_interpreter": str(BIN / "python")}
    hosts = {
        "eight": {
            **common,
            "gpustack_host_root": str(host("h100-sxm-8x")),
            "gpustack_manufacturers": ["all", "!thead"],
        },
        "blank": {**common, "gpustack_host_root": "  "},
    }
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    proc = subprocess.run(
        [str(BIN / "ansible"), "all", "-i", str(inv), "-m", "gpustack.accelerators.accelerator_facts", "-o"],
        cwd=REPO,
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    lines = {line.split(" | ", 1)[0]: line for line in proc.stdout.splitlines() if " | " in line}
    eight = json.loads(lines["eight"].split(" => ", 1)[1])
    assert sorted(eight["ansible_facts"]["gpustack_accelerators"]["manufacturers"]) == [
        "amd",
        "ascend",
        "cambricon",
        "hygon",
        "iluvatar",
        "metax",
        "mthreads",
        "nvidia",
    ]
    assert "blank | FAILED! => " in lines["blank"] and "host_root is empty: " in lines["blank"]
