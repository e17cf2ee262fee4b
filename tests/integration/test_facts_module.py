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
