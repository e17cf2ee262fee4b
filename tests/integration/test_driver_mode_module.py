"""``gpustack.accelerators.driver_mode`` for real (ad hoc), on a copy of a fixture node whose DCMI
stand-in persists the container-share flag."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO, copy_host

pytestmark = pytest.mark.ansible


def driver_mode(env: dict[str, str], inv: Path, args: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible"), "all", "-i", str(inv), "-m", "gpustack.accelerators.driver_mode", "-a", args, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    body = proc.stdout[proc.stdout.index("{") :]
    return json.loads(body)  # type: ignore[no-any-return]


def test_enable_is_idempotent_checked_and_disable_refused_while_pods_hold_slices(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    node = copy_host("ascend-910b-8x", tmp_path)
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "npu": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(BIN / "python"),
                            "gpustack_host_root": str(node),
                        }
                    }
                }
            }
        )
    )
    base = "manufacturer=ascend mode=container-share accelerators=0"

    checked = driver_mode(ansible_env, inv, f"{base} state=enabled", "--check", "--diff")
    assert checked.returncode == 0, checked.stdout
    assert result(checked)["changed"] is True
    assert "share=1" not in (node / "usr/local/Ascend/driver/lib64/driver/libdcmi.so.fixture").read_text()

    first = driver_mode(ansible_env, inv, f"{base} state=enabled")
    assert first.returncode == 0, first.stdout
    (change,) = result(first)["changes"]  # type: ignore[misc]
    assert (
        change["before"] is False
        and change["after"] is True
        and "npu-smi set -t device-share" in change["undo_command"]
    )
    again = driver_mode(ansible_env, inv, f"{base} state=enabled")
    assert result(again)["changed"] is False

    pods = node / "var/lib/gpustack/operator/pods/6f1c2a9e-0000-4000-8000-000000000001"
    pods.mkdir(parents=True)
    (pods / "allocation.json").write_text(
        json.dumps(
            {"pod": "team-a/llm-0", "manufacturer": "ascend", "mode": "sliced", "accelerators": [change["accelerator"]]}
        )
    )
    refused = driver_mode(ansible_env, inv, f"{base} state=disabled")
    assert refused.returncode != 0
    assert "pods hold slices there: team-a/llm-0" in refused.stdout
    assert "--force / force: true" in refused.stdout  # the remedy
    forced = driver_mode(ansible_env, inv, f"{base} state=disabled force=true")
    assert forced.returncode == 0, forced.stdout
    assert result(forced)["changed"] is True


def test_unknown_mode_is_a_clear_failure(ansible_env: dict[str, str], tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "gpu": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(BIN / "python"),
                            "gpustack_host_root": str(REPO / "tests/fixtures/hosts/h100-sxm-8x"),
                        }
                    }
                }
            }
        )
    )
    proc = driver_mode(ansible_env, inv, "manufacturer=nvidia mode=smlu")
    assert proc.returncode != 0
    assert "nvidia has no driver mode 'smlu' (its modes: mig)" in proc.stdout


def local_inventory(tmp_path: Path, roots: dict[str, Path]) -> Path:
    inv = tmp_path / "inv.yml"
    common = {"ansible_connection": "local", "ansible_python_interpreter": str(BIN / "python")}
    hosts = {name: {**common, "gpustack_host_root": str(root)} for name, root in roots.items()}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inv


def test_a_node_without_the_manufacturer_warns_or_fails_never_a_silent_no_op(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    """No NVIDIA GPU on the node: ``absent=warn`` (the default) succeeds with Ansible's warning naming
    the manufacturer; ``absent=fail`` fails the task with the same words; a node whose bus could not be
    read fails either way."""
    roots = {
        "cpu": REPO / "tests/fixtures/hosts/cpu-only-vm",
        "unreadable": REPO / "tests/fixtures/hosts/unreadable-sysfs",
    }
    inv = local_inventory(tmp_path, roots)
    words = f"no nvidia accelerator was detected on this node (host root {roots['cpu']}), so mig was not enabled"

    warned = driver_mode(ansible_env, inv, "manufacturer=nvidia mode=mig state=enabled", "--limit", "cpu")
    assert warned.returncode == 0, warned.stdout
    assert result(warned)["changed"] is False
    assert f"[WARNING]: driver_mode: {words}" in " ".join(warned.stderr.split())

    failed = driver_mode(ansible_env, inv, "manufacturer=nvidia mode=mig state=enabled absent=fail")
    assert failed.returncode != 0
    out = " ".join(failed.stdout.split())
    assert "cpu | FAILED! => " in out and f'"msg": "driver_mode: {words}"' in out
    assert "unreadable | FAILED! => " in out and "nvidia could not be measured" in out

    unmeasured = driver_mode(ansible_env, inv, "manufacturer=nvidia mode=mig", "--limit", "unreadable")
    assert unmeasured.returncode != 0 and "nvidia could not be measured" in unmeasured.stdout


def test_the_driver_modes_role_passes_absent_through(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """An Ascend group's wanted mode on a host without Ascend NPUs: the role's item warns by default,
    fails with ``driver_modes_absent: fail``, and an item's own ``absent`` wins over the role's."""
    inv = local_inventory(tmp_path, {"cpu": REPO / "tests/fixtures/hosts/cpu-only-vm"})
    playbook = tmp_path / "modes.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "all",
                    "gather_facts": False,
                    "roles": [{"role": "gpustack.accelerators.driver_modes"}],
                }
            ]
        )
    )

    def play(wanted: list[dict[str, object]], *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                "-i",
                str(inv),
                str(playbook),
                "-e",
                json.dumps({"driver_modes_wanted": wanted}),
                *extra,
            ],
            cwd=REPO,
            env=ansible_env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    share = {"manufacturer": "ascend", "mode": "container-share", "state": "enabled"}
    words = "driver_mode: no ascend accelerator was detected on this node"
    warned = play([share])
    assert warned.returncode == 0, warned.stdout + warned.stderr
    assert f"[WARNING]: {words}" in " ".join((warned.stdout + warned.stderr).split())
    assert "changed=0" in warned.stdout

    failed = play([share], "-e", "driver_modes_absent=fail")
    assert failed.returncode != 0
    assert words in failed.stdout and "failed=1" in failed.stdout

    item_wins = play([{**share, "absent": "warn"}], "-e", "driver_modes_absent=fail")
    assert item_wins.returncode == 0, item_wins.stdout
