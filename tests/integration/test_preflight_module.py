"""``gpustack.accelerators.preflight`` for real: options ``runtime``, ``probe_image``, ``dry_run``
(forced in check mode), and what it returns (``report``, ``summary``, ``runtime``), ad hoc and
through ansible-runner, on a fixture node given a running kubeadm kubelet."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO, copy_host
from tests.tools import kubelet_nodes as kn

pytestmark = pytest.mark.ansible

MODULE = "gpustack.accelerators.preflight"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """One local host whose root is the H100 fixture made a kubeadm worker (kubelet running)."""
    root = kn.kubeadm_node(copy_host("h100-sxm-8x", tmp_path))
    inv = tmp_path / "inv.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "gpu-01": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(BIN / "python"),
                            "gpustack_host_root": str(root),
                            "gpustack_manufacturers": ["nvidia", "amd"],
                        }
                    }
                }
            }
        )
    )
    return inv


def adhoc(env: dict[str, str], inv: Path, args: str, *extra: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [str(BIN / "ansible"), "all", "-i", str(inv), "-m", MODULE, "-a", args, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    marker = out.find(" => {")  # "<host> | SUCCESS => {...}"; a failed task prints its own lines first
    body = json.loads(out[marker + 4 :]) if marker >= 0 else {}
    return proc.returncode, body, out + proc.stderr


def test_summary_report_and_runtime_resolved_from_the_kubelet(ansible_env: dict[str, str], inventory: Path) -> None:
    # question 1 and the runtime alone: this host's nerdctl is an empty stand-in, which a probe would run
    # (and rightly report as printing nothing) -- the probes are tests/integration/test_preflight_engine.py's
    rc, res, out = adhoc(ansible_env, inventory, "fail_on=unavailable capabilities=false")
    assert rc == 0, out
    assert res["changed"] is False and res["dry_run"] is False and res["failures"] == []
    assert res["summary"] == {
        "manufacturers": {
            "amd": {"state": "not-declared", "depth": "declared", "accelerators": 0},
            "nvidia": {"state": "ok", "depth": "declared", "accelerators": 8},
        },
        "states": {"ok": 1, "unavailable": 0, "not-declared": 1},
        "topology": "single-numa-node",
        "runtime": "nerdctl",
    }
    report = res["report"]
    assert isinstance(report, dict) and list(report) == ["accelerators", "network", "topology"]
    assert report["topology"]["policy"] == "single-numa-node"
    runtime = res["runtime"]
    assert isinstance(runtime, dict)
    assert runtime["runtime"] == "nerdctl" and runtime["binary"] == "/usr/local/bin/nerdctl"
    assert runtime["endpoint"] == "unix:///var/run/containerd/containerd.sock"
    assert runtime["socket"] == "/var/run/containerd/containerd.sock" and runtime["namespace"] == "gpustack-preflight"
    assert runtime["emitted"] is False and "reason" not in runtime
    assert "probe_image" not in res


def test_check_mode_forces_dry_run(ansible_env: dict[str, str], inventory: Path) -> None:
    rc, res, out = adhoc(ansible_env, inventory, "dry_run=false", "--check")
    assert rc == 0, out
    assert res["dry_run"] is True and res["changed"] is False


def test_runtime_and_probe_image_are_passed_through(ansible_env: dict[str, str], inventory: Path) -> None:
    rc, res, out = adhoc(ansible_env, inventory, "runtime=ctr probe_image=nvidia/cuda:12")
    assert rc == 0, out
    runtime = res["runtime"]
    assert isinstance(runtime, dict)
    assert (runtime["runtime"], runtime["source"], runtime["binary"]) == ("ctr", "--runtime", "/usr/bin/ctr")
    assert res["probe_image"] == "nvidia/cuda:12"
    summary = res["summary"]
    assert isinstance(summary, dict) and summary["runtime"] == "ctr"
    report = res["report"]
    assert isinstance(report, dict)
    (nvidia,) = [g for g in report["accelerators"] if g["manufacturer"] == "nvidia"]
    # ctr never starts a probe: each probe step is emitted, rewritten for nerdctl, with the probe image
    row = next(r for r in nvidia["checks"] if r["capability"] == "sliced-quota-in-force")
    assert row["depth"] == "simulated" and "ctr never starts a probe" in row["detail"]
    assert " nerdctl " in row["command"] and " nvidia/cuda:12 -c " in row["command"]


def test_a_runtime_the_host_lacks_says_every_step_would_be_emitted(
    ansible_env: dict[str, str], inventory: Path
) -> None:
    rc, res, out = adhoc(ansible_env, inventory, "runtime=docker")
    assert rc == 0, out
    runtime = res["runtime"]
    assert isinstance(runtime, dict) and runtime["runtime"] == "docker" and runtime["emitted"] is True
    assert "the host carries no docker on its PATH" in runtime["reason"]


def test_bad_probe_image_fails_the_task_naming_the_problem(ansible_env: dict[str, str], inventory: Path) -> None:
    rc, res, out = adhoc(ansible_env, inventory, "probe_image=Ubuntu:24.04")
    assert rc != 0
    assert "'Ubuntu:24.04' is not an OCI image reference: the repository path 'Ubuntu' must be lower-case" in str(
        res.get("msg")
    ), out
    assert "Traceback" not in out


def test_runtime_outside_the_choices_is_refused_by_ansible(ansible_env: dict[str, str], inventory: Path) -> None:
    rc, res, out = adhoc(ansible_env, inventory, "runtime=podman")
    assert rc != 0
    assert "value of runtime must be one of: docker, nerdctl, ctr, got: podman" in str(res.get("msg")), out


def test_through_ansible_runner_in_check_mode(
    tmp_path: Path, ansible_env: dict[str, str], inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ansible_runner

    for key, value in ansible_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    (tmp_path / "runner").mkdir()
    result = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        host_pattern="gpu-01",
        inventory=str(inventory),
        module=MODULE,
        module_args="runtime=nerdctl",
        cmdline="--check",
        quiet=True,
    )
    assert result.rc == 0
    (event,) = [e for e in result.events if e.get("event") == "runner_on_ok"]
    res = event["event_data"]["res"]
    assert res["dry_run"] is True
    assert res["runtime"]["source"] == "--runtime" and res["runtime"]["runtime"] == "nerdctl"
    assert res["summary"]["states"] == {"ok": 1, "unavailable": 0, "not-declared": 1}
    assert res["report"]["topology"]["depth"] == "declared"


def test_detect_root_pairs_a_container_view_with_its_host(
    ansible_env: dict[str, str], inventory: Path, tmp_path: Path
) -> None:
    """``detect_root`` (inventory ``gpustack_detect_root``) relocates the node view: a view without
    libnvidia-ml (the container runtime did not inject it) against the full host is unavailable,
    naming the runtime; the host root alone is never detected through."""
    view = copy_host("h100-sxm-8x", tmp_path / "view")
    for lib in view.glob("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1*"):
        lib.unlink()
    rc, body, out = adhoc(ansible_env, inventory, f"detect_root={view} fail_on=never")
    assert rc == 0, out
    (nvidia,) = [g for g in body["report"]["accelerators"] if g["manufacturer"] == "nvidia"]  # type: ignore[index]
    det = nvidia["detection"]
    assert det["state"] == "unavailable" and det["accelerators"] == 0 and det["host"]["accelerators"] == 8
    assert any("--runtime nvidia" in m for m in det["host"]["missingMounts"])
    empty_rc, _, empty_out = adhoc(ansible_env, inventory, "host_root=' '")
    assert empty_rc != 0 and "host_root is empty" in empty_out, empty_out
    blank_rc, _, blank_out = adhoc(ansible_env, inventory, "detect_root=''")
    assert blank_rc != 0 and "detect_root is empty: " in blank_out, blank_out


def test_manufacturers_take_the_gather_subset_syntax(ansible_env: dict[str, str], inventory: Path) -> None:
    """The option overrides the inventory's ``[nvidia, amd]`` with exclusions; an unknown name names the choices."""
    rc, body, out = adhoc(ansible_env, inventory, "manufacturers='!thead,!cambricon' fail_on=never")
    assert rc == 0, out
    assert sorted(body["summary"]["manufacturers"]) == [  # type: ignore[index]
        "amd",
        "ascend",
        "hygon",
        "iluvatar",
        "metax",
        "mthreads",
        "nvidia",
    ]
    bad_rc, _, bad_out = adhoc(ansible_env, inventory, "manufacturers='all,!intel'")
    assert bad_rc != 0
    assert "manufacturers: unknown manufacturer '!intel'; choose from all, amd, ascend" in bad_out, bad_out
