"""Ansible run for real: the fleet playbook over the simulated fleet, and the modules ad hoc."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import BIN, REPO

pytestmark = pytest.mark.ansible

FLEET = REPO / "examples" / "simulated-fleet" / "inventory.yml"
# Ansible's own line per host and task (ok / skipping / fatal) and the recap's
ANSIBLE_OWN = re.compile(r"^(?:(?:ok|skipping|changed|fatal): \[\S+?(?: -> \S+)?\]|\S+\s+: ok=\d+)")


def playbook(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "preflight.yml"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def fleet_with_unreachable(tmp_path: Path) -> Path:
    """The simulated fleet plus one host nobody answers for (a closed port on loopback)."""
    extra = tmp_path / "unreachable.yml"
    extra.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "gone-01": {
                            "ansible_connection": "ssh",
                            "ansible_host": "127.0.0.1",
                            "ansible_port": 1,
                            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes",
                        }
                    }
                }
            }
        )
    )
    return extra


def assert_fleet_view(doc: dict[str, Any]) -> None:
    """What the fleet report adds to the documents: inventories with versions, expectations and their
    differences, causes grouped across hosts, totals by model."""
    hosts = doc["hosts"]
    # what each host has, with its versions; the expected inventory (host or group) and its differences
    assert hosts["hgx-h100-01"]["inventory"] == [
        {
            "manufacturer": "nvidia",
            "driverVersion": "550.54.15",
            "runtimeVersion": "12.4",
            "model": "NVIDIA H100 80GB HBM3",
            "count": 8,
        }
    ]
    assert hosts["hgx-h100-01"]["expected"] == {"nvidia": {"count": 8, "model": "H100"}}
    assert "differences" not in hosts["hgx-h100-01"]
    assert hosts["atlas-910b-01"]["expected"] == {"ascend": {"count": 8}} and hosts["atlas-910b-01"]["status"] == "ok"
    assert hosts["rtx4090-01"]["differences"] == ["NVIDIA: expected 2, found 1 (1 missing)"]
    assert hosts["nodriver-01"]["differences"] == ["NVIDIA: expected 2, found 0 (2 missing); its answer is unavailable"]
    causes = {c["title"]: c for c in doc["causes"]}
    assert causes["NVIDIA: driver not loaded"]["hosts"] == ["nodriver-01"]
    assert causes["all 9 manufacturers: could not measure"]["hosts"] == ["broken-sysfs-01"]
    assert causes["fewer accelerators than expected"]["hosts"] == ["rtx4090-01"]
    models = {m["model"]: m for m in doc["models"]}
    assert models["NVIDIA H100 80GB HBM3"]["accelerators"] == 8
    assert models["MLU370-X8"] == {
        "model": "MLU370-X8",
        "manufacturer": "cambricon",
        "hosts": 2,
        "accelerators": 10,
        "driverVersions": {"5.10": 2},
        "runtimeVersions": {"1.15.0": 2},
    }


def test_fleet_playbook_writes_the_report(
    ansible_env: dict[str, str], tmp_path: Path, fleet_with_unreachable: Path
) -> None:
    reports = tmp_path / "reports"
    proc = playbook(
        ansible_env,
        "-i",
        str(FLEET),
        "-i",
        str(fleet_with_unreachable),
        "-f",
        "4",
        "-e",
        f"preflight_report_dir={reports}",
    )
    out = proc.stdout + proc.stderr
    # one host cannot be read, one carries GPUs whose driver is not loaded, one has fewer GPUs than its
    # preflight_expect, one cannot be reached: the run fails, after writing the report
    assert proc.returncode != 0, out
    assert "fleet preflight: 20 hosts, 16 ok, 2 unavailable, 1 unreachable, 1 mismatched; 2 degraded" in out
    # the verdict lands on the hosts it is about: the recap fails exactly the ones that are not ok
    recap = dict(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.MULTILINE))
    assert len(recap) == 20, out[-3000:]
    assert {host for host, failed in recap.items() if failed != "0"} == {
        "broken-sysfs-01",
        "nodriver-01",
        "rtx4090-01",
        "gone-01",
    }, out[-3000:]
    assert_console_at_scale(out)
    (yaml_path,) = reports.glob("preflight-*Z.yaml")
    (side_path,) = reports.glob("preflight-*Z.documents.yaml")
    (html_path,) = reports.glob("preflight-*.html")
    doc = yaml.safe_load(yaml_path.read_text())
    # the summary gained "mismatch" (hosts whose preflight is ok but that differ from preflight_expect)
    # and "degraded": the hosts whose RDMA links are down (never a failure by default)
    assert doc["summary"] == {
        "hosts": 20,
        "ok": 16,
        "unavailable": 2,
        "unreachable": 1,
        "failed": 0,
        "mismatch": 1,
        "degraded": 2,
    }
    hosts = doc["hosts"]
    assert set(list(hosts)[4:6]) == {"hgx-h100-01", "l40s-mellanox-01"}  # the degraded ones first of the ok
    # worst first: unreachable, unavailable, mismatch, then ok
    statuses = [entry["status"] for entry in hosts.values()]
    assert statuses == ["unreachable", "unavailable", "unavailable", "mismatch"] + ["ok"] * 16
    assert set(list(hosts)[1:3]) == {"broken-sysfs-01", "nodriver-01"} and list(hosts)[3] == "rtx4090-01"
    assert hosts["gone-01"]["status"] == "unreachable"
    assert hosts["broken-sysfs-01"]["status"] == "unavailable"
    assert_fleet_view(doc)

    # the whole documents: a host that is not ok's in the report, every ok host's in the side file it
    # names (a degraded host is ok: its links down are named in its entry)
    side = yaml.safe_load(side_path.read_text())
    assert doc["documents"] == side_path.name and side["report"] == yaml_path.name
    assert set(side["hosts"]) == {h for h, e in hosts.items() if e["status"] == "ok"}
    assert all(("report" in e) == (e["status"] not in ("ok", "unreachable")) for e in hosts.values())
    assert hosts["hgx-h100-01"]["degraded"] == [
        'ib3 failed: the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'
    ]
    documents = {h: e.get("report") or side["hosts"].get(h) for h, e in hosts.items()}

    def detection(host: str, manufacturer: str) -> dict[str, object]:
        groups = {g["manufacturer"]: g for g in documents[host]["accelerators"]}
        return groups[manufacturer]["detection"]

    assert detection("hgx-h100-01", "nvidia")["accelerators"] == 8
    assert detection("mi300x-01", "amd")["detail"] == "AMD Instinct MI300X x8"
    assert detection("atlas-910b-01", "ascend")["state"] == "ok"
    assert detection("cpu-vm-01", "nvidia")["state"] == "not-declared"
    assert detection("broken-sysfs-01", "nvidia")["state"] == "unavailable"
    # the nine manufacturers, each on its own node shape
    for node, manufacturer, count in [
        ("a100-mig-01", "nvidia", 8),
        ("atlas-950pr-01", "ascend", 8),
        ("mlu370-01", "cambricon", 8),
        ("k100-01", "hygon", 4),
        ("c500-01", "metax", 8),
        ("bi150-01", "iluvatar", 8),
        ("s4000-01", "mthreads", 8),
        ("ppu-01", "thead", 8),
    ]:
        answer = detection(node, manufacturer)
        assert (answer["state"], answer["accelerators"]) == ("ok", count), (node, answer)
    # a half-installed node is never green: the bus shows two GPUs, the driver named none
    nodriver = detection("nodriver-01", "nvidia")
    assert nodriver["state"] == "unavailable" and "the PCI bus shows 2 accelerator(s)" in str(nodriver["reason"])
    # JUnit: one testcase per host (it was one per host x manufacturer)
    junit = ET.parse(next(reports.glob("preflight-*.junit.xml"))).getroot()
    assert junit.get("tests") == "20"
    assert junit.get("errors") == "1"  # the unreachable host
    assert junit.get("failures") == "3"  # the unreadable host, nodriver and the RTX 4090 short of a card
    html = html_path.read_text()
    assert 'data-host="hgx-h100-01"' in html and 'data-status="unavailable"' in html
    assert "<script" not in html


def assert_console_at_scale(out: str) -> None:
    """Each host that is not ok printed once, with its reason, in the fleet summary -- never again as a
    task error with its source lines (issue 17) --, and never a preflight result as JSON; the hosts
    whose RDMA links are down once each too, never failed."""
    assert '"failures": [' not in out and '"report": {' not in out, out[-3000:]
    after = out.split("TASK [gpustack.accelerators.preflight : Write the fleet report", 1)[1]
    lines = {
        "gone-01": "gone-01: unreachable — connection refused — ",
        "nodriver-01": "nodriver-01: unavailable — NVIDIA: driver not loaded — the PCI bus shows 2 accelerator(s)",
        "broken-sysfs-01": "broken-sysfs-01: unavailable — all 9 manufacturers: could not measure — ",
        "rtx4090-01": "rtx4090-01: mismatch — fewer accelerators than expected — NVIDIA: expected 2, found 1 (1 missing)",
        "hgx-h100-01": "hgx-h100-01: degraded — RDMA link down — ib3 failed: the RDMA link is not usable",
        "l40s-mellanox-01": "l40s-mellanox-01: degraded — RDMA link down — enp33s0np0/0000:21:00.4 failed: ",
    }
    for host, line in lines.items():
        # its reason once in the whole run; its name after the report only there and in its own
        # "fatal:" / recap lines
        assert out.count(line) == 1, (host, out[-4000:])
        mentions = [ln for ln in after.splitlines() if host in ln and not ANSIBLE_OWN.match(ln)]
        assert len(mentions) == 1, (host, mentions)
    # the failing hosts fail with the same words, so Ansible's error (and its source lines) shows once
    fail_task = after.split("TASK [gpustack.accelerators.preflight : Fail each host", 1)[1].split("PLAY RECAP", 1)[0]
    assert fail_task.count("Origin:") <= 1 and fail_task.count("[ERROR]") <= 1, fail_task
    fatal = re.findall(r"^fatal: \[(\S+)\]: FAILED! => .*fleet summary above", fail_task, re.MULTILINE)
    assert sorted(fatal) == ["broken-sysfs-01", "gone-01", "nodriver-01", "rtx4090-01"], fail_task
    assert "documents: " in after and ".documents.yaml" in after


def test_fleet_playbook_never_mode_exits_zero(ansible_env: dict[str, str], tmp_path: Path) -> None:
    proc = playbook(
        ansible_env,
        "-i",
        str(FLEET),
        "-e",
        f"preflight_report_dir={tmp_path}",
        "-e",
        "preflight_fail_on=never",
        "--limit",
        "cpu,broken",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fleet preflight: 4 hosts, 3 ok, 1 unavailable, 0 unreachable" in proc.stdout


def test_a_degraded_host_fails_only_when_preflight_fail_on_says_so(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """hgx-h100-01 has an RDMA link down: marked degraded, the run passes; with preflight_fail_on=degraded
    it is the one host that fails, with the fleet's one error block."""
    limit = ("--limit", "hgx-h100-01,cpu-vm-01")
    plain = playbook(ansible_env, "-i", str(FLEET), *limit, "-e", f"preflight_report_dir={tmp_path / 'a'}")
    out = plain.stdout + plain.stderr
    assert plain.returncode == 0, out[-3000:]
    assert "fleet preflight: 2 hosts, 2 ok, 0 unavailable, 0 unreachable; 1 degraded (RDMA links down)" in out
    assert out.count("hgx-h100-01: degraded — RDMA link down — ib3 failed: ") == 1 and "fatal:" not in out
    strict = playbook(
        ansible_env,
        "-i",
        str(FLEET),
        *limit,
        "-e",
        f"preflight_report_dir={tmp_path / 'b'}",
        "-e",
        "preflight_fail_on=degraded",
    )
    out = strict.stdout + strict.stderr
    assert strict.returncode != 0, out[-3000:]
    recap = dict(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.MULTILINE))
    assert recap == {"hgx-h100-01": "1", "cpu-vm-01": "0"}, out[-3000:]
    assert re.search(r"^fatal: \[hgx-h100-01\]: FAILED! => .*fleet summary above", out, re.MULTILINE), out[-3000:]
    (junit,) = (tmp_path / "b").glob("preflight-*.junit.xml")
    failure = ET.parse(junit).getroot().find("testcase[@name='hgx-h100-01']/failure")
    assert failure is not None and failure.get("type") == "degraded"


def test_role_passes_runtime_and_probe_image(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """preflight_runtime / preflight_probe_image reach the module: a good pair is accepted, a malformed
    image fails that host's task naming the problem -- listed as failed, never dropped."""
    good = playbook(
        ansible_env,
        *("-i", str(FLEET), "--limit", "cpu-vm-01", "-e", f"preflight_report_dir={tmp_path / 'good'}"),
        *("-e", "preflight_runtime=nerdctl", "-e", "preflight_probe_image=registry.local:5000/cuda:12.4"),
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert "fleet preflight: 1 host, 1 ok, 0 unavailable, 0 unreachable" in good.stdout  # never "1 hosts"
    bad = playbook(
        ansible_env,
        *("-i", str(FLEET), "--limit", "cpu-vm-01", "-e", f"preflight_report_dir={tmp_path / 'bad'}"),
        *("-e", "preflight_fail_on=never", "-e", "preflight_probe_image=Team/Probe:1"),
    )
    assert bad.returncode == 0, bad.stdout + bad.stderr
    assert "fleet preflight: 1 host, 0 ok, 0 unavailable, 0 unreachable" in bad.stdout
    (yaml_path,) = (tmp_path / "bad").glob("preflight-*Z.yaml")
    entry = yaml.safe_load(yaml_path.read_text())["hosts"]["cpu-vm-01"]
    assert entry["status"] == "failed"
    assert "'Team/Probe:1' is not an OCI image reference" in entry["message"]


def test_check_mode(ansible_env: dict[str, str], tmp_path: Path) -> None:
    proc = playbook(
        ansible_env, "-i", str(FLEET), "--check", "--limit", "nvidia", "-e", f"preflight_report_dir={tmp_path}"
    )
    # check mode changes nothing about the verdict: the node whose driver is not loaded still fails
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "fleet preflight: 5 hosts, 3 ok, 1 unavailable, 0 unreachable, 1 mismatched" in proc.stdout
    assert list(tmp_path.glob("preflight-*.html"))


def adhoc(env: dict[str, str], module: str, *args: str, inventory: Path = FLEET) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible"), "all", "-i", str(inventory), "-m", module, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_facts_module_ad_hoc(ansible_env: dict[str, str]) -> None:
    proc = adhoc(ansible_env, "gpustack.accelerators.accelerator_facts", "--limit", "hgx-h100-01")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"generalNodeKey": "intel-xeon-platinum-8480"' in proc.stdout


def test_facts_module_with_ansible_runner(
    tmp_path: Path, ansible_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ansible_runner

    for key, value in ansible_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(REPO)
    result = ansible_runner.run(
        private_data_dir=str(tmp_path),
        host_pattern="mi300x-01",
        inventory=str(FLEET),
        module="gpustack.accelerators.accelerator_facts",
        module_args="manufacturers=amd",
        quiet=True,
    )
    assert result.rc == 0
    facts = result.get_fact_cache("mi300x-01") or {}
    if not facts:  # fact caching is off by default: read the event instead
        (event,) = [e for e in result.events if e.get("event") == "runner_on_ok"]
        facts = event["event_data"]["res"]["ansible_facts"]
    groups = facts["gpustack_accelerators"]["groups"]
    assert [(g["manufacturer"], len(g["accelerators"])) for g in groups] == [("amd", 8)]


def test_bad_module_argument_is_a_clear_failure(ansible_env: dict[str, str]) -> None:
    proc = adhoc(ansible_env, "gpustack.accelerators.preflight", "-a", "manufacturers=intel", "--limit", "cpu-vm-01")
    assert proc.returncode != 0
    # the package's own rule (select_subset), naming the option and the choices, not Ansible's choices
    assert "manufacturers: unknown manufacturer 'intel'; choose from all, amd, ascend" in proc.stdout


def test_missing_package_names_the_remedy(ansible_env: dict[str, str], tmp_path: Path) -> None:
    inv = tmp_path / "bare.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "bare": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "/usr/bin/python3",
                        }
                    }
                }
            }
        )
    )
    proc = adhoc(ansible_env, "gpustack.accelerators.accelerator_facts", inventory=inv)
    assert proc.returncode != 0
    assert "Failed to import the required Python library (gpustack-operator)" in proc.stdout
    assert "gpustack.accelerators.install role" in proc.stdout


def test_preflight_fail_on_never(ansible_env: dict[str, str]) -> None:
    proc = adhoc(ansible_env, "gpustack.accelerators.preflight", "-a", "fail_on=never", "--limit", "broken-sysfs-01")
    assert proc.returncode == 0, proc.stdout
    assert '"failures": [' in proc.stdout and "could not measure" in proc.stdout
