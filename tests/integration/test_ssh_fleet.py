"""The fleet playbook over real SSH: two hosts in network namespaces (sshd each), one host that
refuses connections, ``ansible-playbook playbooks/preflight.yml -f 2`` for real.

What it proves: forks are honoured (both reachable hosts run side by side, the third waits for a
free fork — read from a timeline callback's timestamps), the host that cannot be reached is listed
as unreachable in the YAML report and as an error in the JUnit file, and each host's answers in the
fleet report are exactly what ``gpustack-operator dm preflight`` / ``dm detect`` say for its
fixture on this machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import BIN, REPO, host, run_cli
from tests.tools import netns_hosts as nh

pytestmark = pytest.mark.ansible

FIXTURES = {"node1": "h100-sxm-8x", "node2": "mi300x-8x"}
UNREACHABLE = "node3-down"

TIMELINE_CALLBACK = '''
"""Record when each task starts and ends on each host (one JSON line per event)."""
import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "gpa_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def _log(self, event, host, task):
        line = {"event": event, "host": host.get_name(), "task": task.get_name(), "t": time.time()}
        with open(os.environ["GPA_TIMELINE"], "a") as out:
            out.write(json.dumps(line) + "\\n")

    def v2_runner_on_start(self, host, task):
        self._log("start", host, task)

    def v2_runner_on_ok(self, result):
        self._log("ok", result._host, result._task)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._log("failed", result._host, result._task)

    def v2_runner_on_unreachable(self, result):
        self._log("unreachable", result._host, result._task)
'''


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[nh.NetnsFleet]:
    reason = nh.unavailable()
    if reason:
        pytest.skip(reason)
    problem = nh.missing_tools()
    if problem:
        pytest.fail(problem)
    with nh.netns_hosts(tmp_path_factory.mktemp("netns"), sshd=(True, True, False)) as fleet:
        yield fleet


def write_inventory(fleet: nh.NetnsFleet, path: Path) -> Path:
    node1, node2, down = fleet.hosts
    common = " ".join(a for a in fleet.ssh_args() if a not in {"-i", str(fleet.client_key)})
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "ssh",
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(fleet.client_key),
                "ansible_ssh_common_args": common,
                # the namespaces share this filesystem: the same interpreter and package work there
                "ansible_python_interpreter": sys.executable,
            },
            "hosts": {
                "node1": {"ansible_host": node1.address, "gpustack_host_root": str(host(FIXTURES["node1"]))},
                "node2": {"ansible_host": node2.address, "gpustack_host_root": str(host(FIXTURES["node2"]))},
                UNREACHABLE: {"ansible_host": down.address, "gpustack_host_root": str(host("cpu-only-vm"))},
            },
        }
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def fleet_run(ssh_fleet: nh.NetnsFleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("ssh-run")
    plugins = work / "callback_plugins"
    plugins.mkdir()
    (plugins / "gpa_timeline.py").write_text(TIMELINE_CALLBACK)
    timeline = work / "timeline.jsonl"
    reports = work / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "ANSIBLE_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(work / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(work / "ansible-remote"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(work / "cp"),
        ANSIBLE_CALLBACK_PLUGINS=str(plugins),
        ANSIBLE_CALLBACKS_ENABLED="gpa_timeline",
        ANSIBLE_NOCOLOR="1",
        GPA_TIMELINE=str(timeline),
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
    inventory = write_inventory(ssh_fleet, work / "inventory.yml")
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            str(REPO / "playbooks" / "preflight.yml"),
            "-i",
            str(inventory),
            "-f",
            "2",
            "-e",
            f"preflight_report_dir={reports}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    events = [json.loads(line) for line in timeline.read_text().splitlines()] if timeline.exists() else []
    return {"proc": proc, "reports": reports, "events": events}


def output(run: dict[str, object]) -> str:
    proc = run["proc"]
    assert isinstance(proc, subprocess.CompletedProcess)
    return proc.stdout + proc.stderr


def test_run_ends_with_the_summary_and_fails_for_the_unreachable_host(fleet_run: dict[str, object]) -> None:
    proc = fleet_run["proc"]
    assert isinstance(proc, subprocess.CompletedProcess)
    out = output(fleet_run)
    assert "fleet preflight: 3 hosts, 2 ok, 0 unavailable, 1 unreachable" in out, out
    # the default preflight_fail_on=unavailable fails the run, after the report is written
    assert proc.returncode != 0, out
    assert f"fatal: [{UNREACHABLE}]: UNREACHABLE!" in out, out


def test_forks_are_honoured(fleet_run: dict[str, object]) -> None:
    events = fleet_run["events"]
    assert isinstance(events, list)
    task = "Run the GPUStack preflight"
    spans: dict[str, dict[str, float]] = {}
    for e in events:
        if e["task"].endswith(task):
            key = "start" if e["event"] == "start" else "end"
            spans.setdefault(e["host"], {})[key] = e["t"]
    assert set(spans) == {"node1", "node2", UNREACHABLE}, events
    ends = {e["host"]: e["event"] for e in events if e["task"].endswith(task) and e["event"] != "start"}
    assert ends == {"node1": "ok", "node2": "ok", UNREACHABLE: "unreachable"}
    s1, s2, s3 = (spans[h]["start"] for h in ("node1", "node2", UNREACHABLE))
    d1, d2 = (spans[h]["end"] - spans[h]["start"] for h in ("node1", "node2"))
    shortest = min(d1, d2)
    detail = f"spans (s): {json.dumps({h: {k: round(v - s1, 3) for k, v in sp.items()} for h, sp in spans.items()})}"
    # -f 2: the two reachable hosts start together and run side by side ...
    assert abs(s1 - s2) < 0.5 * shortest, detail
    overlap = min(spans["node1"]["end"], spans["node2"]["end"]) - max(s1, s2)
    assert overlap > 0.5 * shortest, detail
    # ... and the third host waits for one of them to free its fork (never 3 at once)
    assert s3 - max(s1, s2) > 0.5 * shortest, detail
    assert s3 > min(spans["node1"]["end"], spans["node2"]["end"]) - 0.25, detail


def test_unreachable_host_in_yaml_and_junit(fleet_run: dict[str, object]) -> None:
    reports = fleet_run["reports"]
    assert isinstance(reports, Path)
    (yaml_path,) = reports.glob("preflight-*Z.yaml")
    doc = yaml.safe_load(yaml_path.read_text())
    # degraded: the h100-sxm-8x fixture's ib3 is down on purpose (an ok host whose RDMA link failed)
    assert doc["summary"] == {
        "hosts": 3,
        "ok": 2,
        "unavailable": 0,
        "unreachable": 1,
        "failed": 0,
        "mismatch": 0,
        "degraded": 1,
    }
    assert doc["hosts"]["node1"]["degraded"] == [
        'ib3 failed: the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'
    ]
    entry = doc["hosts"][UNREACHABLE]
    assert entry["status"] == "unreachable"
    assert "report" not in entry
    assert "Connection refused" in entry["message"], entry
    assert doc["hosts"]["node1"]["status"] == doc["hosts"]["node2"]["status"] == "ok"

    # one testcase per host
    junit = ET.parse(next(reports.glob("preflight-*.junit.xml"))).getroot()
    assert (junit.get("tests"), junit.get("failures"), junit.get("errors")) == ("3", "0", "1")
    (case,) = junit.findall(f"testcase[@name='{UNREACHABLE}']")
    error = case.find("error")
    assert error is not None and error.get("type") == "unreachable"
    assert "Connection refused" in (error.text or "")
    for node in ("node1", "node2"):
        (case,) = junit.findall(f"testcase[@name='{node}']")
        assert case.find("error") is None and case.find("failure") is None


RENDER_DIR = re.compile(r"/var/lib/gpustack/operator/preflight/render-[^\s:\"]+")


def without_timestamps(groups: list[dict[str, object]]) -> list[dict[str, object]]:
    """The groups without what differs run to run by construction: the read time, and the responder's
    per-run render directory the probe commands name (render-<pid>-<random>/<scenario>/<pod uid>)."""
    text = json.dumps([{k: v for k, v in g.items() if k != "timestamp"} for g in groups])
    loaded: list[dict[str, object]] = json.loads(RENDER_DIR.sub("<render>", text))
    return loaded


@pytest.mark.parametrize("node", sorted(FIXTURES))
def test_answers_over_ssh_equal_the_cli_on_the_same_fixture(fleet_run: dict[str, object], node: str) -> None:
    reports = fleet_run["reports"]
    assert isinstance(reports, Path)
    doc = yaml.safe_load(next(reports.glob("preflight-*Z.yaml")).read_text())
    # an ok host's whole document is in the side file the report names, not in the report itself
    assert doc["hosts"][node]["status"] == "ok" and "report" not in doc["hosts"][node]
    side = yaml.safe_load((reports / doc["documents"]).read_text())
    over_ssh = side["hosts"][node]["accelerators"]
    root = str(host(FIXTURES[node]))

    pre = run_cli("dm", "preflight", "--detect-root", root, "--host-root", root)
    assert pre.returncode == 0, pre.stderr
    local = yaml.safe_load(pre.stdout)["accelerators"]
    # the whole per-manufacturer answer (state, depth, count, detail/reason, host probe, note)
    assert without_timestamps(over_ssh) == without_timestamps(local)

    det = run_cli("dm", "detect", "-o", "json", "--host-root", root)
    assert det.returncode == 0, det.stderr
    detected = json.loads(det.stdout)
    counts: dict[str, int] = {}
    for g in detected["groups"]:
        counts[g["manufacturer"]] = counts.get(g["manufacturer"], 0) + len(g["accelerators"])
    assert not detected["node"].get("unmeasured")
    assert counts, "the fixture should carry accelerators"
    for group in over_ssh:
        d = group["detection"]
        expected = counts.get(group["manufacturer"], 0)
        assert d["accelerators"] == expected, group
        assert d["state"] == ("ok" if expected else "not-declared"), group
