"""The fleet report (the collection's plugins/module_utils/fleet_report.py, standard library only):
classification worst first, causes grouped across hosts, expected inventory, YAML (or JSON), HTML
(no JavaScript, escaped, CSS filters), JUnit per host, console lines."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml

from tests.conftest import REPO, host

# collections/ansible_collections/gpustack/accelerators is this repository (a symlink): the module_utils
# import as the modules import them
if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report as fleet

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
HALF = (
    "the PCI bus shows {n} accelerator(s) of this manufacturer where its driver named 0 (unanswered: {pci}); the "
    "driver said: nvmlInit failed on {root}/usr/lib64/libnvidia-ml.so.1: Driver Not Loaded (NVML error 9). The "
    "accelerators are on the bus, so this is not an empty node: install and load the vendor driver on the node"
)
UNMEASURED = fleet.UNMEASURED_PREFIX + "the PCI bus could not be listed: /sys/bus/pci/devices: Too many levels of links"


def group(manufacturer: str, state: str, count: int = 0, **detection: Any) -> dict[str, Any]:
    return {
        "manufacturer": manufacturer,
        "timestamp": "t",
        "detection": {"state": state, "depth": "declared", "accelerators": count, **detection},
        "note": "only question 1 (detection) is answered by this version" if state == "ok" else None,
    }


def ok(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"changed": False, "report": {"accelerators": list(groups)}, "failures": []}


H100 = group("nvidia", "ok", 8, detail="NVIDIA H100 80GB HBM3 x8", driverVersion="550.54.15", runtimeVersion="12.4")
NONE_AMD = group("amd", "not-declared", reason="none <here>")
NONE_NVIDIA = group("nvidia", "not-declared", reason="none")


def nodriver(pci: str, root: str) -> dict[str, Any]:
    return ok(group("nvidia", "unavailable", reason=HALF.format(n=2, pci=pci, root=root)), NONE_AMD)


def build(**expect: Any) -> dict[str, Any]:
    return fleet.build(
        [
            ("node-10", ok(H100, NONE_AMD)),
            ("node-9", nodriver("0000:01:00.0, 0000:41:00.0", "/hosts/node-9")),
            ("node-2", nodriver("0000:17:00.0, 0000:2a:00.0", "/hosts/node-2")),
            ("cpu-1", ok(NONE_AMD, NONE_NVIDIA)),
            ("gone", {"unreachable": True, "msg": "ssh: connect to host gone port 22: Connection refused"}),
            ("never", None),
            ("e-pkg", {"failed": True, "msg": "Failed to import the required Python library (gpustack-operator)"}),
            ("sysfs", ok(*(group(m, "unavailable", reason=UNMEASURED) for m in fleet.MANUFACTURERS))),
        ],
        expect=expect,
        now=NOW,
    )


def test_statuses_worst_first_and_the_summary() -> None:
    report = build()
    assert [(h["host"], h["status"]) for h in report["hosts"]] == [
        ("e-pkg", "failed"),
        ("gone", "unreachable"),
        ("never", "unreachable"),
        ("node-2", "unavailable"),  # the cause two hosts share comes before the one host's, names naturally
        ("node-9", "unavailable"),
        ("sysfs", "unavailable"),
        ("cpu-1", "ok"),
        ("node-10", "ok"),
    ]
    assert report["summary"] == {"hosts": 8, "ok": 2, "unavailable": 3, "unreachable": 2, "failed": 1, "mismatch": 0}
    assert (
        fleet.summary_line(report["summary"])
        == "fleet preflight: 8 hosts, 2 ok, 3 unavailable, 2 unreachable, 1 failed"
    )


def test_the_same_cause_groups_across_hosts_without_their_particulars() -> None:
    report = build()
    causes = {c["title"]: c for c in report["causes"]}
    driver = causes["NVIDIA: driver not loaded"]
    assert driver["hosts"] == ["node-2", "node-9"]
    # PCI addresses, paths and counts other than 0 are taken out; the remedy sentence is left out
    assert driver["text"] == (
        "the PCI bus shows N accelerator(s) of this manufacturer where its driver named 0 (unanswered: …); the "
        "driver said: nvmlInit failed on …: Driver Not Loaded (NVML error N)"
    )
    # nine manufacturers answering the same on one host are one cause, its words as they are
    sysfs = causes["all 9 manufacturers: could not measure"]
    assert sysfs["hosts"] == ["sysfs"]
    assert sysfs["text"] == "the PCI bus could not be listed: /sys/bus/pci/devices: Too many levels of links"
    assert causes["gpustack-operator not installed"]["status"] == "failed"
    assert causes["connection refused"]["hosts"] == ["gone"]
    # a host's one line keeps its own particulars
    (node9,) = [h for h in report["hosts"] if h["host"] == "node-9"]
    assert node9["reason"].startswith("NVIDIA: driver not loaded — the PCI bus shows 2 accelerator(s)")
    assert "0000:41:00.0" in node9["reason"] and "install and load" not in node9["reason"]


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("driver named 7 (unanswered: 0000:df:00.0)", "driver named N (unanswered: …)"),
        ("driver named 0 (unanswered: 0000:01:00.0, 0000:41:00.0)", "driver named 0 (unanswered: …)"),
        ("GPU-7410685e-88b6-32ea-d0d7-43827e3952ba could not be read", "… could not be read"),
        ("killed by SIGSEGV while loading /host/usr/lib/libnvidia-ml.so.1", "killed by SIGSEGV while loading …"),
        ("card 0x1f at index 3", "card … at index N"),
        ("ssh to node-17 at 10.0.3.7: timed out", "ssh to … at N: timed out"),
    ],
)
def test_normalise(text: str, normalised: str) -> None:
    assert fleet.normalise(text, host="node-17") == normalised


@pytest.mark.parametrize(
    ("reason", "title"),
    [
        (HALF.format(n=2, pci="0000:01:00.0", root=""), "driver not loaded"),
        (
            "the host's own nvidia-smi reports 8 accelerator(s) where this container detected 0, so what is missing "
            "is this container's access to them rather than the hardware (this container's library said: nvmlInit "
            "failed: Driver Not Loaded); give it: /dev/nvidiactl",
            "this container sees fewer than the host",
        ),
        (
            "the PCI bus shows 8 accelerator(s) of this manufacturer where its driver named 7 (unanswered: "
            "0000:df:00.0): the driver enumerates fewer accelerators than the bus shows (one fallen off the bus)",
            "fewer accelerators than the bus shows",
        ),
        (
            fleet.UNMEASURED_PREFIX + "the nvidia detect pass was killed by SIGSEGV while it was loading or calling "
            "/usr/lib/libnvidia-ml.so.1: the vendor library is broken",
            "vendor library crashed",
        ),
        (
            "the detect pass sees these accelerators but could not identify 1 of them",
            "accelerators it could not identify",
        ),
        (UNMEASURED, "could not measure"),
        ("something nobody foresaw", "unavailable"),
    ],
)
def test_cause_titles(reason: str, title: str) -> None:
    assert fleet.title_of(reason, "unavailable") == title


def test_expected_inventory() -> None:
    report = build(
        **{
            "node-10": {"nvidia": {"count": 8, "model": "H100"}},  # met
            "cpu-1": {"nvidia": 2},  # imaged without its cards or driver: nothing
            "node-9": {"nvidia": "2"},  # unavailable stays unavailable, the shortfall beside it
            "gone": {"nvidia": 8},  # nothing to compare
        }
    )
    by = {h["host"]: h for h in report["hosts"]}
    assert by["node-10"]["status"] == "ok" and by["node-10"]["differences"] == []
    assert by["cpu-1"]["status"] == "mismatch"
    assert [d["text"] for d in by["cpu-1"]["differences"]] == ["NVIDIA: expected 2, found 0 (2 missing)"]
    assert by["cpu-1"]["reason"] == "fewer accelerators than expected — NVIDIA: expected 2, found 0 (2 missing)"
    assert by["node-9"]["status"] == "unavailable"
    assert by["node-9"]["reason"].endswith("; NVIDIA: expected 2, found 0 (2 missing); its answer is unavailable")
    assert by["gone"]["status"] == "unreachable" and by["gone"]["differences"] == []
    assert report["summary"]["mismatch"] == 1
    assert fleet.summary_line(report["summary"]).endswith(", 1 failed, 1 mismatched")
    (cause,) = [c for c in report["causes"] if c["status"] == "mismatch"]
    assert cause["title"] == "fewer accelerators than expected" and cause["hosts"] == ["cpu-1"]


def test_two_manufacturers_short_on_one_host_are_one_cause() -> None:
    mlu = group("cambricon", "ok", 2, detail="MLU370-X8 x2")
    mx = group("metax", "ok", 2, detail="MXC500 x2")
    report = fleet.build([("mixed", ok(mlu, mx))], expect={"mixed": {"cambricon": 4, "metax": 4}}, now=NOW)
    (cause,) = report["causes"]
    assert cause["hosts"] == ["mixed"] and cause["manufacturers"] == ["cambricon", "metax"]
    assert report["hosts"][0]["reason"] == (
        "fewer accelerators than expected — Cambricon: expected 4, found 2 (2 missing); "
        "MetaX: expected 4, found 2 (2 missing)"
    )


@pytest.mark.parametrize(
    ("expect", "text"),
    [
        ({"nvidia": {"count": 8, "model": "A100"}}, "NVIDIA A100: expected 8, found 0 (8 missing); it has NVIDIA H100"),
        ({"nvidia": 7}, "NVIDIA: expected 7, found 8 (1 more)"),
        ({"ascend": 8}, "Ascend: expected 8, not asked"),
        ({"intel": 8}, "preflight_expect names 'intel', not a manufacturer"),
        ({"nvidia": -1}, "preflight_expect.nvidia is -1, not a count of accelerators"),
        ({"nvidia": {"count": 8, "vram": 80}}, "preflight_expect.nvidia takes count and model, not vram"),
        (["nvidia"], "preflight_expect is a list, not a mapping of manufacturer to count"),
    ],
)
def test_a_host_that_differs_from_its_expectation_is_a_mismatch(expect: object, text: str) -> None:
    entry = fleet.classify("n1", ok(H100, NONE_AMD), expect)
    assert entry["status"] == "mismatch"
    assert entry["differences"][0]["text"].startswith(text), entry["differences"]


@pytest.mark.parametrize(
    ("report", "problem"),
    [
        ({"accelerators": "x"}, "n1: report.accelerators is a str, not a list"),
        ({"accelerators": [{"manufacturer": "nvidia"}]}, "n1: report.accelerators[0].detection is null, not a mapping"),
        (
            {"accelerators": [{"manufacturer": "nvidia", "detection": {"state": "great"}}]},
            "n1: report.accelerators[0].detection.state is 'great', not one of ok, unavailable, not-declared",
        ),
        (
            {"accelerators": [{"manufacturer": "amd", "detection": {"state": "ok", "accelerators": True}}]},
            "n1: report.accelerators[0].detection.accelerators is a bool, not a count",
        ),
        ({"topology": {"policy": 3}}, "n1: report.topology.policy is an int, not a string"),
        ("a string", "n1: report is a str, not a mapping"),
    ],
)
def test_a_malformed_registered_report_is_named(report: object, problem: str) -> None:
    with pytest.raises(fleet.MalformedReportError) as info:
        fleet.classify("n1", {"report": report})
    assert str(info.value) == problem


def test_html_is_escaped_static_and_filterable() -> None:
    report = build(**{"cpu-1": {"nvidia": 2}})
    page = fleet.to_html(report)
    assert "<script" not in page.lower() and "javascript:" not in page.lower()
    assert "none <here>" not in page
    # one row per host, worst first, the reason inline, what the host has with its versions
    rows = [line for line in page.splitlines() if line.startswith("<tr id=")]
    assert [r.split('data-host="', 1)[1].split('"', 1)[0] for r in rows] == [h["host"] for h in report["hosts"]]
    (h100,) = [r for r in rows if 'data-host="node-10"' in r]
    assert "NVIDIA H100 80GB HBM3 ×8" in h100 and "550.54.15 · CUDA 12.4" in h100
    (node9,) = [r for r in rows if 'data-host="node-9"' in r]
    assert "<summary>NVIDIA: driver not loaded — the PCI bus shows 2 accelerator(s)" in node9
    assert "not-declared" not in page and "declared" not in page.replace("preflight_expect", "")
    # CSS-only filters: a radio per status, manufacturer, cause and model, each with its rule
    for cause in report["causes"]:
        assert f'id="f{cause["id"]}"' in page and f"#f{cause['id']}:checked~#hosts tbody tr:not(.{cause['id']})" in page
        assert f'<label for="f{cause["id"]}"' in page
    assert "#fs-bad:checked~#hosts tbody tr:not(.bad)" in page and 'class="s-unavailable bad m-nvidia' in node9
    assert "#fm-nvidia:checked~#hosts tbody tr:not(.m-nvidia)" in page
    assert "counter-increment:shown" in page


def test_junit_has_one_testcase_per_host() -> None:
    report = build(**{"cpu-1": {"nvidia": 2}})
    suite = ET.fromstring(fleet.to_junit(report))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("8", "4", "3")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert {c.get("classname") for c in cases.values()} == {"gpustack-preflight"}
    failure = cases["node-9"].find("failure")
    assert failure is not None and failure.get("type") == "unavailable"
    assert failure.get("message", "").startswith("NVIDIA: driver not loaded — ")
    assert "nvidia: detection: the PCI bus shows 2" in (failure.text or "")
    mismatch = cases["cpu-1"].find("failure")
    assert mismatch is not None and mismatch.get("type") == "mismatch"
    assert (mismatch.text or "") == "NVIDIA: expected 2, found 0 (2 missing)"
    error = cases["gone"].find("error")
    assert error is not None and error.get("type") == "unreachable" and "Connection refused" in (error.text or "")
    assert cases["node-10"].find("failure") is None
    assert cases["node-10"].findtext("system-out") == "NVIDIA H100 80GB HBM3 x8 (driver 550.54.15) (CUDA 12.4)"


def test_console_lines_one_per_host_that_is_not_ok() -> None:
    lines = fleet.console_lines(build())
    assert [line.split(":", 1)[0] for line in lines] == ["e-pkg", "gone", "never", "node-2", "node-9", "sysfs"]
    assert lines[-1] == (
        "sysfs: unavailable — all 9 manufacturers: could not measure — the PCI bus could not be listed: "
        "/sys/bus/pci/devices: Too many levels of links"
    )
    assert all(len(line) <= fleet.CONSOLE_WIDTH and "\n" not in line for line in lines)


def test_yaml_keeps_every_document_and_adds_the_fleet_view(monkeypatch: pytest.MonkeyPatch) -> None:
    report = build(**{"cpu-1": {"nvidia": 2}})
    doc = yaml.safe_load(fleet.to_yaml(report))
    assert list(doc) == ["generated", "summary", "causes", "models", "notes", "hosts"]
    assert list(doc["hosts"]) == [h["host"] for h in report["hosts"]]
    assert doc["hosts"]["node-10"]["report"] == ok(H100, NONE_AMD)["report"]
    assert doc["hosts"]["node-10"]["inventory"] == [
        {
            "manufacturer": "nvidia",
            "driverVersion": "550.54.15",
            "runtimeVersion": "12.4",
            "model": "NVIDIA H100 80GB HBM3",
            "count": 8,
        }
    ]
    assert doc["hosts"]["cpu-1"]["expected"] == {"nvidia": {"count": 2}}
    assert doc["hosts"]["cpu-1"]["differences"] == ["NVIDIA: expected 2, found 0 (2 missing)"]
    assert doc["hosts"]["gone"] == {
        "status": "unreachable",
        "reason": "connection refused — ssh: connect to host gone port 22: Connection refused",
        "message": "ssh: connect to host gone port 22: Connection refused",
    }
    assert doc["models"] == [
        {
            "model": "NVIDIA H100 80GB HBM3",
            "manufacturer": "nvidia",
            "hosts": 1,
            "accelerators": 8,
            "driverVersions": {"550.54.15": 1},
            "runtimeVersions": {"12.4": 1},
        }
    ]
    # two hosts registering equal documents: each written in full, never as a YAML alias
    twice = fleet.build([("a", ok(H100)), ("b", ok(H100))], now=NOW)
    assert "&id" not in fleet.to_yaml(twice) and "*id" not in fleet.to_yaml(twice)
    # without PyYAML: JSON, which YAML readers read the same
    monkeypatch.setattr(fleet, "HAS_YAML", False)
    assert json.loads(fleet.to_yaml(report)) == doc


def test_write(tmp_path: Path) -> None:
    paths = fleet.write(build(), str(tmp_path / "out"))
    assert paths == {
        "yaml": str(tmp_path / "out" / "preflight-20261129T100000Z.yaml"),
        "html": str(tmp_path / "out" / "preflight-20261129T100000Z.html"),
        "junit": str(tmp_path / "out" / "preflight-20261129T100000Z.junit.xml"),
    }
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(Path(p).name for p in paths.values())


def test_the_module_utils_need_no_package_and_no_yaml() -> None:
    """A controller with ansible-core alone: neither gpustack_operator nor pydantic (nor even PyYAML)."""
    code = (
        "import sys\n"
        "for name in ('gpustack_operator', 'pydantic', 'yaml'): sys.modules[name] = None\n"
        f"sys.path.insert(0, {str(REPO / 'collections')!r})\n"
        "from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report as f\n"
        "r = f.build([('a', {'report': {'accelerators': []}}), ('b', None)])\n"
        "assert not f.HAS_YAML and f.summary_line(r['summary']).startswith('fleet preflight: 2 hosts, 1 ok')\n"
        "import json; json.loads(f.to_yaml(r))\n"
        "assert not [m for m, v in sys.modules.items() if v is not None and m.startswith(('gpustack_operator', 'pydantic'))]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_preflight_reports_the_detected_versions() -> None:
    """The preflight document carries what the fleet report shows beside the model: the driver and
    runtime versions of an ok answer."""
    from gpustack_operator import api

    root = str(host("h100-sxm-8x"))
    doc = api.run_preflight(api.make_request(root, ["nvidia"]), host_root=root).wire()
    (nvidia,) = doc["accelerators"]  # type: ignore[misc]
    assert nvidia["detection"]["driverVersion"] == "550.54.15"
    assert nvidia["detection"]["runtimeVersion"] == "12.4"
    entry = fleet.classify("hgx", {"report": doc})
    assert entry["inventory"][0]["model"] == "NVIDIA H100 80GB HBM3" and entry["inventory"][0]["count"] == 8
