"""fleet_report: what the preflight module registered per host, written as YAML, HTML and JUnit -- on a
controller that needs no gpustack-operator package (the report is the collection's own module_utils)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from xml.etree import ElementTree

import yaml
from ansible_collections.gpustack.accelerators.plugins.modules import fleet_report, preflight
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import exit_result, fail_result


def registered(root: Path, manufacturers: list[str]) -> dict[str, Any]:
    """What ``register:`` keeps of a preflight task on that node (failed or not)."""
    args = {"host_root": str(root), "manufacturers": manufacturers, "fail_on": "never"}
    result = exit_result(preflight.main, args)
    if result["failures"]:
        result.update(failed=True, msg="preflight: " + "; ".join(result["failures"]))
    return result


def test_a_fleet_of_real_preflight_results_is_written_and_counted(
    fixture_host: Callable[[str], Path], tmp_path: Path
) -> None:
    hosts = ["gpu-node", "vm", "broken-bus", "never-reached", "no-package"]
    results = [
        registered(fixture_host("mi300x-8x"), ["amd", "nvidia"]),
        registered(fixture_host("cpu-only-vm"), ["amd", "nvidia"]),
        registered(fixture_host("unreadable-sysfs"), ["amd", "nvidia"]),
        None,
        {"failed": True, "msg": "Failed to import the required Python library (gpustack-operator)"},
    ]
    dest = tmp_path / "reports" / "fleet"
    expect = {"gpu-node": {"amd": 8}, "vm": {"nvidia": 1}}  # the VM was meant to carry a GPU
    args = {"hosts": hosts, "results": results, "dest": str(dest), "expect": expect}
    result = exit_result(fleet_report.main, args)

    assert result["changed"] is True
    assert result["summary"] == {
        "hosts": 5,
        "ok": 1,
        "unavailable": 1,
        "unreachable": 1,
        "failed": 1,
        "mismatch": 1,
        "degraded": 0,
    }
    assert result["summary_line"] == (
        "fleet preflight: 5 hosts, 1 ok, 1 unavailable, 1 unreachable, 1 failed, 1 mismatched"
    )
    # one console line per host that is not ok, worst first; the same lines by host for the role
    assert [line.split(":", 1)[0] for line in result["console"]] == ["no-package", "never-reached", "broken-bus", "vm"]
    assert result["failing"]["vm"] == (
        "vm: mismatch — fewer accelerators than expected — NVIDIA: expected 1, found 0 (1 missing)"
    )
    assert "gpu-node" not in result["failing"]
    assert sorted(result["paths"]) == ["documents", "html", "junit", "yaml"]
    for path in result["paths"].values():
        assert Path(path).parent == dest and Path(path).is_file()

    doc = yaml.safe_load(Path(result["paths"]["yaml"]).read_text(encoding="utf-8"))
    assert [(host, entry["status"]) for host, entry in doc["hosts"].items()] == [
        ("no-package", "failed"),
        ("never-reached", "unreachable"),
        ("broken-bus", "unavailable"),
        ("vm", "mismatch"),
        ("gpu-node", "ok"),
    ]
    # an ok host's whole document is in the side file the report names; a host that is not ok's in it
    side = yaml.safe_load(Path(result["paths"]["documents"]).read_text(encoding="utf-8"))
    assert doc["documents"] == Path(result["paths"]["documents"]).name and "report" not in doc["hosts"]["gpu-node"]
    assert doc["hosts"]["broken-bus"]["report"] == results[2]["report"]
    amd = side["hosts"]["gpu-node"]["accelerators"][0]
    assert amd["manufacturer"] == "amd" and amd["detection"]["accelerators"] == 8

    # the capability rows totalled: returned as the YAML has them; a host whose detection failed has
    # no row, so it is not answered for its manufacturers -- ok for no capability
    capabilities = result["capabilities"]
    assert capabilities == doc["capabilities"] and list(capabilities) == ["totals", "notAnswered"]
    unanswered = {(n["manufacturer"], h) for n in capabilities["notAnswered"] for h in n["hosts"]}
    assert {("amd", "broken-bus"), ("nvidia", "broken-bus")} <= unanswered
    for total in capabilities["totals"]:
        assert sorted(total["counts"]) == ["not-answered", "not-declared", "ok", "unavailable"]
        assert "broken-bus" not in total["hosts"]["ok"]
    answered = {
        h for t in capabilities["totals"] if t["manufacturer"] == "amd" for hs in t["hosts"].values() for h in hs
    }
    assert "gpu-node" in answered or ("amd", "gpu-node") in unanswered

    # one testcase per host
    suite = ElementTree.parse(result["paths"]["junit"]).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "2")
    verdicts = {
        case.get("name"): [child.tag for child in case if child.tag in ("failure", "error")]
        for case in suite.iter("testcase")
    }
    assert verdicts == {
        "broken-bus": ["failure"],
        "gpu-node": [],
        "never-reached": ["error"],
        "no-package": ["error"],
        "vm": ["failure"],
    }
    assert "<script" not in Path(result["paths"]["html"]).read_text(encoding="utf-8")


def test_hosts_and_results_must_align(tmp_path: Path, source_repo: Path) -> None:
    result = fail_result(fleet_report.main, {"hosts": ["a", "b"], "results": [None], "dest": str(tmp_path)})
    assert result["msg"] == "hosts and results must align: 2 hosts, 1 results"
    assert list(tmp_path.iterdir()) == []


def test_a_result_that_is_not_a_registered_result_is_named(tmp_path: Path, source_repo: Path) -> None:
    args = {"hosts": ["a", "b"], "results": [None, "ok"], "dest": str(tmp_path)}
    result = fail_result(fleet_report.main, args)
    assert result["msg"] == "the result for b is a str, not a registered preflight result"


def test_an_unwritable_destination_fails_the_task(tmp_path: Path, source_repo: Path) -> None:
    blocker = tmp_path / "reports"
    blocker.write_text("a file where the directory should go\n")
    result = fail_result(fleet_report.main, {"hosts": ["a"], "results": [None], "dest": str(blocker)})
    assert result["msg"] == f"dest {blocker} exists and is not a directory"
    below = fail_result(fleet_report.main, {"hosts": ["a"], "results": [None], "dest": str(blocker / "x")})
    assert below["msg"].startswith(f"the fleet report could not be written to {blocker / 'x'}: ")


def test_a_blank_destination_is_refused(tmp_path: Path, source_repo: Path) -> None:
    for blank in ("", "   "):
        result = fail_result(fleet_report.main, {"hosts": ["a"], "results": [None], "dest": blank})
        assert result["msg"].startswith("dest is empty")


def test_a_malformed_registered_report_is_named_as_such(tmp_path: Path) -> None:
    args = {"hosts": ["a"], "results": [{"report": {"accelerators": "x"}}], "dest": str(tmp_path)}
    result = fail_result(fleet_report.main, args)
    assert result["msg"] == (
        "a registered result carries no valid preflight report: a: report.accelerators is a str, not a list"
    )
    assert list(tmp_path.iterdir()) == []


def test_expect_must_name_hosts_of_the_report(tmp_path: Path) -> None:
    args = {"hosts": ["a"], "results": [None], "dest": str(tmp_path), "expect": {"b": {"nvidia": 8}}}
    result = fail_result(fleet_report.main, args)
    assert result["msg"] == "expect names hosts the report does not cover: b"


def test_check_mode_is_unsupported_and_writes_nothing(tmp_path: Path, source_repo: Path) -> None:
    dest = tmp_path / "reports"
    result = exit_result(fleet_report.main, {"hosts": ["a"], "results": [None], "dest": str(dest)}, check_mode=True)
    assert result["skipped"] is True
    assert "check mode" in result["msg"]
    assert not dest.exists()


def test_required_options_are_named(source_repo: Path) -> None:
    result = fail_result(fleet_report.main, {"hosts": ["a"]})
    assert "missing required arguments" in result["msg"]
    assert "dest" in result["msg"] and "results" in result["msg"]


def test_a_controller_without_the_package_writes_the_report(without_gpustack: ModuleType, tmp_path: Path) -> None:
    detection = {"state": "ok", "accelerators": 8, "detail": "NVIDIA H100 80GB HBM3 x8"}
    results = [{"report": {"accelerators": [{"manufacturer": "nvidia", "detection": detection}]}}]
    result = exit_result(fleet_report.main, {"hosts": ["a"], "results": results, "dest": str(tmp_path)})
    assert result["summary_line"] == "fleet preflight: 1 host, 1 ok, 0 unavailable, 0 unreachable"
    assert all(Path(path).is_file() for path in result["paths"].values())


def test_a_host_whose_rdma_links_are_down_fails_only_when_asked(tmp_path: Path) -> None:
    detection = {"state": "ok", "accelerators": 8, "detail": "NVIDIA H100 80GB HBM3 x8"}
    link = {"interface": "ib3", "rdmaDevice": "mlx5_3", "state": "failed", "reason": "the RDMA link is not usable"}
    report = {"accelerators": [{"manufacturer": "nvidia", "detection": detection}], "network": {"checks": [link]}}
    args = {"hosts": ["hgx"], "results": [{"report": report}], "dest": str(tmp_path)}
    result = exit_result(fleet_report.main, args)
    assert result["summary"]["ok"] == 1 and result["summary"]["degraded"] == 1 and result["failing"] == {}
    assert result["console"] == ["hgx: degraded — RDMA link down — ib3 failed: the RDMA link is not usable"]
    strict = exit_result(fleet_report.main, dict(args, fail_degraded=True, dest=str(tmp_path / "strict")))
    assert strict["failing"] == {"hgx": result["console"][0]}
    assert "fleet summary above" in strict["fail_message"]
