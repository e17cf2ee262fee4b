"""The fleet report (the collection's plugins/module_utils/fleet_report.py, standard library only):
classification worst first, causes grouped across hosts, expected inventory, YAML (or JSON), HTML
(no JavaScript, escaped, CSS filters), JUnit per host, console lines; the capability rows per host and
totalled across the fleet, from real preflight documents (the package's own preflight with its
capability rows, on copies of the fixture hosts) and hand-made ones; rows read from a host that are
malformed, reported as such (hypothesis), never a traceback."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, copy_host

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
    assert report["summary"] == {
        "hosts": 8,
        "ok": 2,
        "unavailable": 3,
        "unreachable": 2,
        "failed": 1,
        "mismatch": 0,
        "degraded": 0,
    }
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
        # one probe container's name per accelerator: preflight-0, preflight-1 ... read the same
        ("gpustack-preflight/preflight-0 container main", "gpustack-preflight/preflight-N container main"),
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
        # capability rows' words
        (
            "the allocator refused a synthetic half-accelerator slice: the slicing library "
            "/var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so is not staged on this node",
            "slicing library not staged",
        ),
        (
            "the allocator refused a synthetic half-accelerator slice: amd gpustack-preflight/preflight-0 container "
            "main: device node /dev/kfd does not exist on this node; is the driver loaded?",
            "device node missing",
        ),
        (
            "the stale-container sweep could not be completed, so a container an earlier run left behind may "
            "still be holding this accelerator: docker ps timed out after 30s; clear the leftovers by hand",
            "stale preflight containers not cleared",
        ),
        (
            "this manufacturer's preflight panicked and was contained, so none of this accelerator's "
            "preconditions were established: RuntimeError: boom",
            "preflight panicked",
        ),
        ("malformed row: its state is 'great', not one of ok, unavailable, not-declared", "malformed row"),
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


def filtered_off(page: str, axis: str, radio: str) -> bool:
    """Whether checking ``radio`` turns its axis off on the table (the rows it keeps turn it back on)."""
    end = "{--" + axis + ":none}"
    rule = next(line for line in page.splitlines() if line.endswith(end))
    return f"#{radio}:checked~#hosts" in rule.removesuffix(end).split(",")


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
        assert (
            f'id="f{cause["id"]}"' in page
            and f"#f{cause['id']}:checked~#hosts tr.{cause['id']}{{--fc:initial}}" in page
        )
        assert filtered_off(page, "fc", f"f{cause['id']}")
        assert f'<label for="f{cause["id"]}"' in page
    assert "#fs-bad:checked~#hosts tr.bad{--fs:initial}" in page and 'class="s-unavailable bad m-nvidia' in node9
    assert "#fm-nvidia:checked~#hosts tr.m-nvidia{--fm:initial}" in page and filtered_off(page, "fm", "fm-nvidia")
    # a row is shown unless an axis whose radio is checked does not keep it (the axes combine)
    assert "#hosts tbody tr{display:var(--fs,var(--fm,var(--fc,table-row)))}" in page
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
    side = yaml.safe_load(fleet.to_documents_yaml(report))
    assert list(doc) == ["generated", "summary", "documents", "causes", "models", "capabilities", "notes", "hosts"]
    assert list(doc["hosts"]) == [h["host"] for h in report["hosts"]]
    # every registered document is kept: a not-ok host's in the main file, an ok host's beside it
    assert doc["hosts"]["node-9"]["report"] == nodriver("0000:01:00.0, 0000:41:00.0", "/hosts/node-9")["report"]
    assert side["hosts"]["node-10"] == ok(H100, NONE_AMD)["report"] and "report" not in doc["hosts"]["node-10"]
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
    assert json.loads(fleet.to_documents_yaml(report)) == side


def test_write(tmp_path: Path) -> None:
    paths = fleet.write(build(), str(tmp_path / "out"))
    assert paths == {
        "yaml": str(tmp_path / "out" / "preflight-20261129T100000Z.yaml"),
        "documents": str(tmp_path / "out" / "preflight-20261129T100000Z.documents.yaml"),
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


def test_preflight_reports_the_detected_versions(tmp_path: Path) -> None:
    """The preflight document carries what the fleet report shows beside the model: the driver and
    runtime versions of an ok answer (on a copy of the node: a pass may drive its vendor stand-ins)."""
    from gpustack_operator import api

    root = str(copy_host("h100-sxm-8x", tmp_path))
    doc = api.run_preflight(api.make_request(root, ["nvidia"]), dry_run=True, host_root=root).wire()
    (nvidia,) = doc["accelerators"]  # type: ignore[misc]
    assert nvidia["detection"]["driverVersion"] == "550.54.15"
    assert nvidia["detection"]["runtimeVersion"] == "12.4"
    entry = fleet.classify("hgx", {"report": doc})
    assert entry["inventory"][0]["model"] == "NVIDIA H100 80GB HBM3" and entry["inventory"][0]["count"] == 8


# --- capability rows ---------------------------------------------------------------------------------

REAL = ("h100-sxm-8x", "mi300x-8x", "ascend-910b-8x", "a100-mig")
COTENANCY = ("GPU-7410685e-88b6-32ea-d0d7-43827e3952ba", "GPU-bb0d6284-ef54-9e14-171c-6dc80a3c5aa9")
COTENANCY_REASON = (
    "the two slices' <injections> & quotas overlap on /dev/nvidia1 of GPU-7410685e-88b6-32ea-d0d7-43827e3952ba "
    "(cot-01): both containers saw the whole card"
)
SWEPT = ("GPU-86ec9390f862d2a1", "GPU-049594c11c7e5455")


def preflighted(root: Path, capabilities: bool = True) -> dict[str, Any]:
    """What the preflight module registers on that node (a dry run: it writes nothing to it)."""
    from gpustack_operator import api

    report = api.run_preflight(
        api.make_request(str(root), None), dry_run=True, host_root=str(root), capabilities=capabilities
    )
    return {"changed": False, "report": report.wire(), "summary": report.summary(), "failures": report.failures()}


def cotenancy_result(refused: bool = True) -> dict[str, Any]:
    """Two H100s, rows measured in probe containers: MIG off, the sliced runtime loaded, and
    co-tenancy refused on the first card (``refused``) or ok on both."""
    from gpustack_operator.preflight.models import Check, Depth, Detection, Group, Report, State

    checks = []
    for acc in COTENANCY:
        bad = refused and acc == COTENANCY[0]
        checks += [
            Check(
                accelerator=acc,
                capability="mig-partitioning",
                mode="partitioned",
                state=State.NOT_DECLARED,
                detail="no physical-slice profile: MIG is off",
            ),
            Check(
                accelerator=acc,
                capability="sliced-runtime-loaded",
                mode="sliced",
                state=State.OK,
                depth=Depth.MEASURED,
                detail="libvgpu.so answered in the probe container",
                command=f"nerdctl run --rm --gpus device={acc} probe",
            ),
            Check(
                accelerator=acc,
                capability="co-tenancy",
                mode="sliced",
                state=State.UNAVAILABLE if bad else State.OK,
                depth=Depth.MEASURED,
                reason=COTENANCY_REASON if bad else None,
                detail=None if bad else "two slices ran side by side, each within its quota",
                command="nerdctl run --rm probe-pair",
            ),
        ]
    detection = Detection(state=State.OK, accelerators=2, detail="NVIDIA H100 80GB HBM3 x2", driver_version="550.54.15")
    report = Report(accelerators=[Group(manufacturer="nvidia", timestamp="t", detection=detection, checks=checks)])
    return {"changed": False, "report": report.wire(), "failures": report.failures()}


def sweep_result() -> dict[str, Any]:
    """Two MI300X whose stale-container sweep failed: the cu-mask row ok, one sweep row each."""
    from gpustack_operator.preflight import sweep
    from gpustack_operator.preflight.models import Check, Detection, Group, Report, State

    reason = sweep.REASON.format(
        what="listing on docker: docker ps timed out after 30s",
        manual="docker rm -f $(docker ps -aq --filter label=gpustack.ai/preflight=true)",
    )
    checks = [
        Check(accelerator=a, capability="cu-mask-topology", mode="sliced", state=State.OK, detail="gfx942: 304 CUs")
        for a in SWEPT
    ]
    checks += sweep.stale_rows(SWEPT, reason)
    detection = Detection(state=State.OK, accelerators=2, detail="AMD Instinct MI300X x2")
    report = Report(accelerators=[Group(manufacturer="amd", timestamp="t", detection=detection, checks=checks)])
    return {"changed": False, "report": report.wire(), "failures": report.failures()}


@pytest.fixture(scope="module")
def rows_fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Four real nodes preflighted with their capability rows, one from before the rows (no rows at
    all), one whose driver is not loaded (detection failed: no rows), and the hand-made ones."""
    work = tmp_path_factory.mktemp("capability-hosts")
    results: list[tuple[str, Any]] = [(name, preflighted(copy_host(name, work))) for name in REAL]
    results.append(("old-h100", preflighted(copy_host("h100-sxm-8x", work / "old"), capabilities=False)))
    results.append(("nodriver", preflighted(copy_host("nvidia-driver-broken", work))))
    results += [("cot-01", cotenancy_result()), ("cot-ok-01", cotenancy_result(refused=False))]
    results.append(("sweep-01", sweep_result()))
    report = fleet.build(results, now=NOW)
    return {"results": dict(results), "report": report, "entries": {e["host"]: e for e in report["hosts"]}}


def host_states(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(manufacturer, capability) -> the host's state, read off the rows directly (the oracle)."""
    seen: dict[tuple[str, str], set[str]] = {}
    for group in doc["accelerators"]:
        for check in group.get("checks") or []:
            seen.setdefault((group["manufacturer"], check["capability"]), set()).add(check["state"])
    return {
        key: "unavailable" if "unavailable" in states else "ok" if "ok" in states else "not-declared"
        for key, states in seen.items()
    }


def test_the_fleet_totals_count_hosts_per_manufacturer_and_capability(rows_fleet: dict[str, Any]) -> None:
    results, report = rows_fleet["results"], rows_fleet["report"]
    expected: dict[tuple[str, str], dict[str, list[str]]] = {}
    unanswered: dict[str, list[str]] = {}
    for name, result in results.items():
        for key, state in host_states(result["report"]).items():
            expected.setdefault(key, {s: [] for s in fleet.HOST_STATES})[state].append(name)
        for group in result["report"]["accelerators"]:
            if not group.get("checks") and group["detection"]["state"] != "not-declared":
                unanswered.setdefault(group["manufacturer"], []).append(name)
    for (manufacturer, _capability), states in expected.items():
        states["not-answered"] = unanswered.get(manufacturer, [])
    totals = {(t["manufacturer"], t["capability"]): t for t in report["capabilities"]["totals"]}
    assert set(totals) == set(expected)
    for key, total in totals.items():
        assert {s: sorted(h) for s, h in total["hosts"].items()} == {s: sorted(h) for s, h in expected[key].items()}
        assert total["counts"] == {s: len(h) for s, h in expected[key].items()}, key
    assert list(totals) == sorted(totals, key=lambda k: (k[0], fleet.capability_order(k[1])))
    # a host whose group carries no row is ok for no capability: not answered, for every one
    assert unanswered["nvidia"] == ["old-h100", "nodriver"]
    for (manufacturer, _capability), total in totals.items():
        if manufacturer == "nvidia":
            assert {"old-h100", "nodriver"} <= set(total["hosts"]["not-answered"])
            assert not {"old-h100", "nodriver"} & set(total["hosts"]["ok"] + total["hosts"]["not-declared"])
    # what the fixture nodes are: MIG on the A100s (on half of them), off on the H100s; the MI300X's CU masks
    assert "a100-mig" in totals["nvidia", "mig-partitioning"]["hosts"]["ok"]
    assert "h100-sxm-8x" in totals["nvidia", "mig-partitioning"]["hosts"]["not-declared"]
    assert "mi300x-8x" in totals["amd", "cu-mask-topology"]["hosts"]["ok"]
    cotenancy = totals["nvidia", "co-tenancy"]
    assert "cot-01" in cotenancy["hosts"]["unavailable"] and "cot-ok-01" in cotenancy["hosts"]["ok"]
    assert cotenancy["depth"] == "measured" and "sliced" in cotenancy["modes"]
    assert {"text": fleet.normalise(COTENANCY_REASON, "cot-01"), "hosts": ["cot-01"]} in cotenancy["reasons"]
    sweep = totals["amd", "stale-container-sweep"]
    assert sweep["hosts"]["unavailable"] == ["sweep-01"] and sweep["modes"] == ["unnamed"]
    assert sweep["depth"] == "declared" and sweep["reasons"][0]["text"].startswith(
        "the stale-container sweep could not be completed"
    )
    # the hosts not answered, by manufacturer, with the note their group carries
    notes = {(n["manufacturer"], h): n["note"] for n in report["capabilities"]["notAnswered"] for h in n["hosts"]}
    for name in ("old-h100", "nodriver"):
        (group,) = [g for g in results[name]["report"]["accelerators"] if g["manufacturer"] == "nvidia"]
        assert notes["nvidia", name] == group["note"]


def test_each_host_summarises_its_rows(rows_fleet: dict[str, Any]) -> None:
    results, entries = rows_fleet["results"], rows_fleet["entries"]
    depth = {d: i for i, d in enumerate(fleet.DEPTHS)}
    for name, result in results.items():
        doc, summary = result["report"], entries[name]["capabilities"]
        states = host_states(doc)
        for (manufacturer, capability), state in states.items():
            cap = summary[manufacturer]["capabilities"][capability]
            rows = [
                c
                for g in doc["accelerators"]
                if g["manufacturer"] == manufacturer
                for c in g.get("checks") or []
                if c["capability"] == capability
            ]
            assert cap["state"] == state, (name, capability)
            assert cap["accelerators"] == {s: sum(1 for c in rows if c["state"] == s) for s in fleet.STATES}
            assert cap["depth"] == max((c["depth"] for c in rows), key=lambda d: depth[d])
            assert cap["modes"] == sorted({c["mode"] for c in rows})
            assert ("reasons" in cap) == (state == "unavailable")
        answered = {m for m, s in summary.items() if s["answered"]}
        assert answered == {m for m, _c in states}
    h100 = entries["h100-sxm-8x"]["capabilities"]["nvidia"]
    assert h100["answered"] is True
    assert h100["capabilities"]["mig-partitioning"] == {
        "state": "not-declared",
        "accelerators": {"ok": 0, "unavailable": 0, "not-declared": 8},
        "depth": "declared",
        "modes": ["partitioned"],
    }
    mig = entries["a100-mig"]["capabilities"]["nvidia"]["capabilities"]["mig-partitioning"]
    assert mig["state"] == "ok" and mig["accelerators"] == {"ok": 4, "unavailable": 0, "not-declared": 4}
    assert entries["cot-01"]["capabilities"]["nvidia"]["capabilities"]["co-tenancy"] == {
        "state": "unavailable",
        "accelerators": {"ok": 1, "unavailable": 1, "not-declared": 0},
        "depth": "measured",
        "modes": ["sliced"],
        # the host's name, the device path and the UUID taken out, as the causes take them out
        "reasons": ["the two slices' <injections> & quotas overlap on … of … (…): both containers saw the whole card"],
    }
    assert list(entries["cot-ok-01"]["capabilities"]["nvidia"]["capabilities"]) == [
        "mig-partitioning",
        "sliced-runtime-loaded",
        "co-tenancy",
    ]
    stale = entries["sweep-01"]["capabilities"]["amd"]["capabilities"]
    assert stale["cu-mask-topology"]["state"] == "ok"
    assert stale["stale-container-sweep"]["state"] == "unavailable"
    assert stale["stale-container-sweep"]["accelerators"] == {"ok": 0, "unavailable": 2, "not-declared": 0}
    # no row: not answered, with the group's note -- whether the document predates the rows (the host
    # stays ok, it is ok for no capability) or its detection failed
    (old,) = [g for g in results["old-h100"]["report"]["accelerators"] if g["manufacturer"] == "nvidia"]
    assert entries["old-h100"]["capabilities"] == {"nvidia": {"answered": False, "note": old["note"]}}
    assert entries["old-h100"]["status"] == "ok"
    assert entries["nodriver"]["capabilities"]["nvidia"]["answered"] is False
    assert entries["nodriver"]["capabilities"]["nvidia"]["note"].startswith("detection failed")


def test_an_unavailable_capability_is_a_cause_and_the_hosts_reason(rows_fleet: dict[str, Any]) -> None:
    report, entries, results = rows_fleet["report"], rows_fleet["entries"], rows_fleet["results"]
    cot = entries["cot-01"]
    assert cot["status"] == "unavailable" and entries["cot-ok-01"]["status"] == "ok"
    assert cot["reason"] == "NVIDIA co-tenancy: unavailable — " + COTENANCY_REASON
    causes = {c["title"]: c for c in report["causes"]}
    assert causes["NVIDIA co-tenancy: unavailable"]["hosts"] == ["cot-01"]
    assert causes["NVIDIA co-tenancy: unavailable"]["capabilities"] == ["co-tenancy"]
    sweep = entries["sweep-01"]
    assert sweep["reason"].startswith(
        "AMD stale-container-sweep: stale preflight containers not cleared — the stale-container sweep could not"
    )
    # a real node whose detection is ok: its reason names its first unavailable capability
    for name in REAL:
        doc, entry = results[name]["report"], entries[name]
        failing = [
            (g["manufacturer"], c["capability"])
            for g in doc["accelerators"]
            if g["detection"]["state"] == "ok"
            for c in g.get("checks") or []
            if c["state"] == "unavailable"
        ]
        if not failing:
            assert entry["status"] == "ok" and entry["reason"] is None
            continue
        manufacturer, capability = failing[0]
        first = entry["reason"].split(" — ", 1)[0]
        assert first.startswith(fleet.NAMES[manufacturer] + " ") and capability in first, (name, entry["reason"])
        assert entry["status"] == "unavailable"
    # every unavailable row is some cause's, and the causes name their capabilities
    named = {(m, c) for cause in report["causes"] for m in cause["manufacturers"] for c in cause["capabilities"]}
    for name, result in results.items():
        for (manufacturer, capability), state in host_states(result["report"]).items():
            assert (state != "unavailable") or (manufacturer, capability) in named, (name, capability)


def test_the_page_has_the_capability_table_and_each_hosts_rows(rows_fleet: dict[str, Any]) -> None:
    report, entries = rows_fleet["report"], rows_fleet["entries"]
    page = fleet.to_html(report)
    assert "<script" not in page.lower() and "javascript:" not in page.lower()
    # a host's words are escaped: the reason's markup and ampersand, everywhere they appear
    assert "<injections>" not in page and "&lt;injections&gt; &amp; quotas" in page
    totals = report["capabilities"]["totals"]
    section = page.split('<details id="capabilities">', 1)[1].split("</details>", 1)[0]
    assert "<h2>Capabilities</h2>" in section
    rows = section.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")[:-1]
    assert len(rows) == len(totals)
    hosts = {
        line.split('data-host="', 1)[1].split('"', 1)[0]: line for line in page.splitlines() if "data-host=" in line
    }
    for index, (total, row) in enumerate(zip(totals, rows, strict=True), start=1):
        assert f"<td>{html.escape(total['capability'])}</td>" in row
        assert f"<td>{total['depth']}</td>" in row and f"<td>{html.escape(', '.join(total['modes']))}</td>" in row
        for state, letter in fleet.STATE_LETTERS.items():
            radio, n = f"fk{index}{letter}", total["counts"][state]
            if not n:
                assert f'"{radio}"' not in page
                continue
            # each count a filter of the hosts: a radio, its rule, and the class on exactly those rows
            assert f'<label for="{radio}"' in row and f">{n}</label>" in row
            assert f'<input type="radio" name="fc" id="{radio}" hidden>' in page
            assert f"#{radio}:checked~#hosts tr.k{index}{letter}{{--fc:initial}}" in page
            assert filtered_off(page, "fc", radio)
            marked = [h for h, line in hosts.items() if f" k{index}{letter} " in line.split('"', 4)[3] + " "]
            assert sorted(marked) == sorted(total["hosts"][state])
    assert "Not answered (no capability row in the document)" in section
    assert "<li><b>NVIDIA</b> 1 host: " + html.escape(entries["old-h100"]["capabilities"]["nvidia"]["note"]) in section
    # behind a host's line: its rows, grouped, with the command of a measured row
    cot = hosts["cot-01"]
    caps = cot.split('<ul class="caps">', 1)[1]
    assert 'co-tenancy <i>sliced</i> <span class="short">unavailable</span>' in caps
    assert "measured · 1 of 2: GPU-7410685e-…</span>: reason above <code>nerdctl run --rm probe-pair</code>" in caps
    assert 'sliced-runtime-loaded <i>sliced</i> <span class="met">ok</span>' in caps and "measured · all 2" in caps
    assert 'mig-partitioning <i>partitioned</i> <span class="muted">not-declared</span>' in caps
    assert caps.index("co-tenancy") < caps.index("sliced-runtime-loaded")  # what fails first
    # an ok host: a count of its capabilities (its rows are in the YAML's side file, the fleet's in the
    # capability table), so the page stays ~1.5 KB a host; a host without rows says so
    ok_row = hosts["cot-ok-01"].split('<td class="why">', 1)[1]
    assert ok_row == '<span class="muted">capabilities 2/3 ok</span></td></tr>'
    old = hosts["old-h100"].split('<td class="why">', 1)[1]
    assert "capabilities not answered" in old and "<details" not in old
    # eight accelerators answering alike are one line (not one per accelerator)
    lines = fleet.row_lines(entries["h100-sxm-8x"])
    rows = [r for group in entries["h100-sxm-8x"]["rows"] for r in group]
    assert len(rows) > 8 and 0 < len(lines) <= len({(r["capability"], r["state"], r["mode"]) for r in rows})
    assert any(line["accelerators"] and len(line["accelerators"]) == 8 for line in lines)


def test_junit_names_each_failing_capability_and_keeps_the_node_identity(rows_fleet: dict[str, Any]) -> None:
    report, entries, results = rows_fleet["report"], rows_fleet["entries"], rows_fleet["results"]
    suite = ET.fromstring(fleet.to_junit(report))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == set(results) and {c.get("classname") for c in cases.values()} == {"gpustack-preflight"}
    failure = cases["cot-01"].find("failure")
    assert failure is not None and failure.get("type") == "unavailable"
    assert (failure.get("message") or "").split("\n") == [
        entries["cot-01"]["reason"],
        "NVIDIA co-tenancy: the two slices' <injections> & quotas overlap on … of … (…): both containers saw the "
        "whole card",
    ]
    assert f"nvidia: co-tenancy on {COTENANCY[0]}: {COTENANCY_REASON}" in (failure.text or "").split("\n")
    swept = cases["sweep-01"].find("failure")
    assert swept is not None
    lines = (swept.get("message") or "").split("\n")
    assert len(lines) == 2 and lines[1].startswith("AMD stale-container-sweep: the stale-container sweep could")
    # the accelerators failing alike are one line of the text, naming them all
    assert (swept.text or "").startswith(f"amd: stale-container-sweep on {SWEPT[0]}, {SWEPT[1]}: the stale-container")
    for name in REAL:
        entry = entries[name]
        if entry["status"] == "ok":
            assert cases[name].find("failure") is None
            continue
        found = cases[name].find("failure")
        assert found is not None
        distinct = {
            (m, c, r)
            for m, s in entry["capabilities"].items()
            if s["answered"]
            for c, cap in s["capabilities"].items()
            for r in cap.get("reasons", [])
        }
        assert len((found.get("message") or "").split("\n")) == 1 + len(distinct)
    assert cases["old-h100"].find("failure") is None and cases["cot-ok-01"].find("failure") is None


def test_the_yaml_carries_the_capabilities(rows_fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    report, entries = rows_fleet["report"], rows_fleet["entries"]
    doc = yaml.safe_load(fleet.to_yaml(report))
    assert list(doc["capabilities"]) == ["totals", "notAnswered"]
    assert [list(t) for t in doc["capabilities"]["totals"]] == [
        ["manufacturer", "capability", "modes", "depth", "counts", "hosts", "reasons"]
    ] * len(report["capabilities"]["totals"])
    assert doc["capabilities"]["notAnswered"] == [
        {"manufacturer": "nvidia", "note": n["note"], "hosts": n["hosts"]}
        for n in report["capabilities"]["notAnswered"]
    ]
    for name, entry in entries.items():
        assert doc["hosts"][name]["capabilities"] == entry["capabilities"]
    (cause,) = [c for c in doc["causes"] if c["title"] == "NVIDIA co-tenancy: unavailable"]
    assert cause == {
        "title": "NVIDIA co-tenancy: unavailable",
        "status": "unavailable",
        "text": COTENANCY_REASON,  # one host: its own words
        "hosts": ["cot-01"],
        "capabilities": ["co-tenancy"],
    }
    monkeypatch.setattr(fleet, "HAS_YAML", False)
    assert json.loads(fleet.to_yaml(report)) == doc


ROW = {"accelerator": "GPU-1", "capability": "co-tenancy", "mode": "sliced", "state": "ok", "depth": "simulated"}


@pytest.mark.parametrize(
    ("checks", "capability", "problem"),
    [
        ([ROW, "a string"], fleet.UNREADABLE, "it is a str, not a mapping"),
        ([ROW, {"accelerator": "GPU-0", "state": "ok"}], fleet.UNREADABLE, "its capability is missing"),
        (
            [ROW, dict(ROW, state="great")],
            "co-tenancy",
            "its state is 'great', not one of ok, unavailable, not-declared",
        ),
        (
            [ROW, dict(ROW, depth="deep")],
            "co-tenancy",
            "its depth is 'deep', not one of declared, simulated, measured",
        ),
        ([ROW, dict(ROW, state="unavailable", reason=["no"])], "co-tenancy", "its reason is a list, not a string"),
        (
            [ROW, {"accelerator": 3, "capability": "co-tenancy"}],
            "co-tenancy",
            "its accelerator is an int; its state is missing, not one of ok, unavailable, not-declared",
        ),
        ({"co-tenancy": "ok"}, fleet.UNREADABLE, "checks is a mapping, not a list"),
    ],
)
def test_a_malformed_row_is_reported_as_such(checks: Any, capability: str, problem: str) -> None:
    result = ok(dict(H100, checks=checks), NONE_AMD)
    report = fleet.build([("n1", result)], now=NOW)
    (entry,) = report["hosts"]
    # never ok: the host cannot be shown to have what the row says
    assert entry["status"] == "unavailable"
    cap = entry["capabilities"]["nvidia"]["capabilities"][capability]
    assert cap["state"] == "unavailable" and cap["accelerators"]["malformed"] == 1
    assert cap["reasons"] == [fleet.normalise("malformed row: " + problem)]
    assert entry["reason"] == f"NVIDIA {capability}: malformed row — malformed row: {problem}"
    (total,) = [t for t in report["capabilities"]["totals"] if t["capability"] == capability]
    assert total["hosts"]["unavailable"] == ["n1"]
    where = "checks" if isinstance(checks, dict) else "checks[1]"
    failure = ET.fromstring(fleet.to_junit(report)).find("testcase/failure")
    assert failure is not None and f"nvidia: malformed capability row {where}: {problem}" in (failure.text or "")
    assert html.escape(problem) in fleet.to_html(report)
    yaml.safe_load(fleet.to_yaml(report))


# what a host's YAML may hold where a row should be: anything
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["<script>x</script>", '" onclick="x', "<x-inj>", "a & b", "co-tenancy", "GPU-0", ""]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_FIELDS = ("accelerator", "capability", "mode", "state", "depth", "detail", "reason", "command", "evidence")
_VALUES = st.sampled_from([*fleet.STATES, *fleet.DEPTHS, *fleet.CAPABILITIES[:4], "sliced", "GPU-0", "<x-inj>"])
_ROW = st.fixed_dictionaries(
    {
        "accelerator": st.sampled_from(["GPU-0", "GPU-1", "<x-inj>"]),
        "capability": st.sampled_from([*fleet.CAPABILITIES, '" onclick="x']),
        "state": st.sampled_from(fleet.STATES),
    },
    optional={
        "mode": st.sampled_from(["sliced", "partitioned", "<x-inj>"]),
        "depth": st.sampled_from(fleet.DEPTHS),
        "reason": _TEXT,
        "detail": _TEXT,
        "command": _TEXT,
    },
)
_ANY_ROW = _ROW | st.dictionaries(st.sampled_from(_FIELDS), _VALUES | _JSON, max_size=9) | _JSON
_GROUP = st.fixed_dictionaries(
    {
        "manufacturer": st.sampled_from(["nvidia", "amd", "<x-inj>&"]),
        "detection": st.fixed_dictionaries(
            {"state": st.sampled_from(fleet.STATES), "accelerators": st.integers(0, 8)},
            optional={"reason": _TEXT, "detail": _TEXT},
        ),
        "checks": st.none() | st.lists(_ANY_ROW, max_size=6) | _JSON,
    },
    optional={"note": _TEXT},
)


# Each example renders the whole report -- YAML, side file, page, JUnit -- and reads some of it back:
# ~10-50 ms of CPU, so the hostile profile's 100 ms per input (a parser's budget) measured the machine's
# load (a 43 ms example took 255 ms with five other suites on two cores), not the code. A second per
# example still catches anything superlinear; how many examples run stays the profile's.
RENDERS = settings(deadline=1000)


def load_yaml(text: str) -> Any:
    """The report read back by libyaml (the property tests' examples stay within their deadline: the
    pure-Python loader spends ~100 ms on one)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs |= {name for name, _value in attrs}


@pytest.mark.hostile
@RENDERS
@given(st.lists(_GROUP, max_size=3))
def test_any_rows_a_host_sends_are_reported_never_a_traceback(groups: list[dict[str, Any]]) -> None:
    report = fleet.build([("h<1>", {"report": {"accelerators": groups}}), ("h2", None)], now=NOW)
    (entry,) = [e for e in report["hosts"] if e["host"] == "h<1>"]
    rows = [fleet.group_rows(g) for g in groups]
    # every row is counted once, under its capability (or as unreadable)
    counted = sum(
        n
        for summary in entry["capabilities"].values()
        if summary["answered"]
        for cap in summary["capabilities"].values()
        for n in cap["accelerators"].values()
    )
    assert counted == sum(len(r) for r in rows)
    failing = any(fleet.failing(r) for group in rows for r in group)
    detection = any(g["detection"]["state"] == "unavailable" for g in groups)
    assert (entry["status"] == "unavailable") == (failing or detection)
    for summary in entry["capabilities"].values():
        for cap in (summary.get("capabilities") or {}).values():
            if cap["state"] == "ok":  # ok only where none of its rows fails
                assert not cap["accelerators"]["unavailable"] and not cap["accelerators"].get("malformed")
    # every output is written: the YAML reads back, the page carries no markup from the host, the
    # JUnit parses and names each malformed row
    load_yaml(fleet.to_yaml(report))
    tags = _Tags()
    tags.feed(fleet.to_html(report).split("<body>", 1)[1])  # the styles before it hold no host text
    assert not {"script", "x-inj"} & tags.tags and "onclick" not in tags.attrs
    text = "\n".join(f.text or "" for f in ET.fromstring(fleet.to_junit(report)).iter("failure"))
    assert text.count("malformed capability row") == sum(r["state"] == "malformed" for group in rows for r in group)


@pytest.mark.hostile
@RENDERS
@given(
    _JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "accelerators": st.lists(_GROUP | _JSON, max_size=3) | _JSON,
            "network": _JSON,
            "topology": _JSON,
        },
    )
)
def test_any_document_is_reported_or_named_malformed(document: Any) -> None:
    try:
        report = fleet.build([("h", {"report": document})], now=NOW)
    except fleet.MalformedReportError:
        return
    fleet.to_yaml(report)
    fleet.to_html(report)
    ET.fromstring(fleet.to_junit(report))


# --- issue 17: counts in words, groups the report cannot name, topology, RDMA links down, sizes -------


def test_every_count_noun_agrees_with_its_count() -> None:
    """ "1 hosts" -> "1 host", and so every count the report writes (console, page)."""
    one = fleet.build([("solo", ok(H100))], now=NOW)
    assert fleet.summary_line(one["summary"]) == "fleet preflight: 1 host, 1 ok, 0 unavailable, 0 unreachable"
    two = fleet.build([("a", ok(H100)), ("b", ok(H100))], now=NOW)
    assert fleet.summary_line(two["summary"]).startswith("fleet preflight: 2 hosts, 2 ok,")
    page = fleet.to_html(one)
    assert ">1 host</label>" in page and "of 1 host shown" in page and "1 hosts" not in page
    # the host's own CLI saw one accelerator: "1 accelerator", never "1 accelerator(s)"
    seen = dict(
        group("nvidia", "unavailable", reason=HALF.format(n=1, pci="0000:01:00.0", root="")),
        detection={
            "state": "unavailable",
            "accelerators": 0,
            "reason": HALF.format(n=1, pci="0000:01:00.0", root=""),
            "host": {"command": "nvidia-smi -L", "accelerators": 1},
        },
    )
    details = fleet.to_html(fleet.build([("n", ok(seen))], now=NOW))
    assert "nvidia-smi -L</code>: 1 accelerator<" in details and "accelerator(s)</li>" not in details


def accelerators_cell(page: str, host: str) -> str:
    row = next(line for line in page.splitlines() if f'data-host="{host}"' in line)
    cells = row.split("<td")
    return html.unescape(re.sub(r"<[^>]+>", "", "<td" + cells[2]))


def test_a_group_the_report_cannot_name_says_what_it_knows_in_words() -> None:
    report = build()
    page = fleet.to_html(report)
    # two GPUs on the bus, no driver answering: not "NVIDIA ?"
    assert accelerators_cell(page, "node-9") == "NVIDIA: driver not loaded, 2 on the bus"
    # nine manufacturers that could not be measured: not "? (9 unavailable)"
    assert accelerators_cell(page, "sysfs") == "all 9 manufacturers: could not measure"
    # an answer that counted some but could not name them says so, with its count
    short = group(
        "amd",
        "unavailable",
        3,
        reason="the detect pass sees these accelerators but could not identify 1 of them",
    )
    partial = fleet.to_html(fleet.build([("p", ok(short))], now=NOW))
    assert accelerators_cell(partial, "p") == "AMD: accelerators it could not identify, 3 counted"
    for text in (accelerators_cell(page, h["host"]) for h in report["hosts"]):
        assert "?" not in text


def topology_cell(page: str, host: str) -> str:
    row = next(line for line in page.splitlines() if f'data-host="{host}"' in line)
    return "<td" + row.split("<td")[5]


NOT_READ = (
    "not read: /host/proc/1 is absent, so the host's process table is not visible (the node's / was mounted "
    "without its /proc); without it nothing can say which kubelet runs here"
)


def test_a_topology_that_was_not_read_says_why_in_its_cell_title() -> None:
    unknown = dict(ok(H100), report={"accelerators": [H100], "topology": {"policy": "unknown", "note": NOT_READ}})
    named = dict(ok(H100), report={"accelerators": [H100], "topology": {"policy": "single-numa-node"}})
    page = fleet.to_html(fleet.build([("u", unknown), ("s", named), ("old", ok(H100))], now=NOW))
    cell = topology_cell(page, "u")
    assert f'title="{html.escape(NOT_READ)}"' in cell and ">unknown</td>" in cell
    assert "title=" not in topology_cell(page, "s") and ">single-numa-node</td>" in topology_cell(page, "s")
    # a document without a topology section: the cell says so too
    assert 'title="this document carries no topology section"' in topology_cell(page, "old")


DOWN = 'the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'


def linked(*states: str) -> dict[str, Any]:
    checks = [
        {"interface": f"ib{i}", "rdmaDevice": f"mlx5_{i}", "state": s, **({"reason": DOWN} if s == "failed" else {})}
        for i, s in enumerate(states)
    ]
    return dict(ok(H100), report={"accelerators": [H100], "network": {"timestamp": "t", "checks": checks}})


def test_a_host_whose_rdma_links_are_down_is_degraded_never_plain_ok() -> None:
    report = fleet.build(
        [("down-01", linked("ok", "failed", "ok")), ("up-01", linked("ok", "unverified")), ("n", ok(H100))], now=NOW
    )
    by = {e["host"]: e for e in report["hosts"]}
    # the verdict is unchanged (a down link stops no allocation), the mark is beside it
    assert by["down-01"]["status"] == "ok" and by["down-01"]["degraded"] == [f"ib1 failed: {DOWN}"]
    assert by["up-01"]["degraded"] == [] and by["n"]["degraded"] == []  # unverified counts as usable
    assert report["summary"]["degraded"] == 1 and report["summary"]["ok"] == 3
    assert fleet.summary_line(report["summary"]).endswith("; 1 degraded (RDMA links down)")
    assert fleet.console_lines(report) == [f"down-01: degraded — RDMA link down — ib1 failed: {DOWN}"]
    page = fleet.to_html(report)
    row = next(line for line in page.splitlines() if 'data-host="down-01"' in line)
    assert '<td class="st degraded" title="ok for every allocation; RDMA link down — ib1 failed' in row
    assert row.split('class="', 1)[1].split('"', 1)[0].split()[:2] == ["s-ok", "dg"]
    plain = next(line for line in page.splitlines() if 'data-host="up-01"' in line)
    assert '<td class="st ok">ok</td>' in plain and " dg" not in plain.split('"')[3]
    # filterable as every other mark: a radio, its label (a chip), and its CSS rule
    assert '<input type="radio" name="fs" id="fs-degraded" hidden>' in page
    assert "#fs-degraded:checked~#hosts tr.dg{--fs:initial}" in page and '<label for="fs-degraded"' in page
    assert filtered_off(page, "fs", "fs-degraded")
    assert fleet.COLOURS["degraded"] not in (fleet.COLOURS["ok"], fleet.COLOURS["mismatch"])
    # never a failure by default: not failing, a passing JUnit testcase that says so
    assert fleet.failing_hosts(report) == {}
    case = next(c for c in ET.fromstring(fleet.to_junit(report)).iter("testcase") if c.get("name") == "down-01")
    assert case.find("failure") is None and "degraded: RDMA link down" in (case.findtext("system-out") or "")
    # unless asked (preflight_fail_on: degraded): then it fails with its line, in the JUnit too
    strict = fleet.build([("down-01", linked("failed"))], now=NOW, fail_degraded=True)
    assert list(fleet.failing_hosts(strict)) == ["down-01"]
    failure = ET.fromstring(fleet.to_junit(strict)).find("testcase/failure")
    assert failure is not None and failure.get("type") == "degraded"


def test_the_yaml_keeps_whole_documents_only_for_hosts_that_are_not_ok(tmp_path: Path) -> None:
    report = build(**{"cpu-1": {"nvidia": 2}})
    paths = fleet.write(report, str(tmp_path))
    assert set(paths) == {"yaml", "documents", "html", "junit"}
    assert Path(paths["documents"]).name == "preflight-20261129T100000Z.documents.yaml"
    doc = load_yaml(Path(paths["yaml"]).read_text(encoding="utf-8"))
    side = load_yaml(Path(paths["documents"]).read_text(encoding="utf-8"))
    assert doc["documents"] == "preflight-20261129T100000Z.documents.yaml"  # beside it, by name
    # an ok host: its summary here, its whole document there
    assert "report" not in doc["hosts"]["node-10"] and doc["hosts"]["node-10"]["inventory"]
    assert doc["hosts"]["node-10"]["document"] == "in preflight-20261129T100000Z.documents.yaml"
    assert side["hosts"]["node-10"] == ok(H100, NONE_AMD)["report"]
    # a host that is not ok keeps its whole document in the main file, and only there
    assert doc["hosts"]["node-9"]["report"]["accelerators"][0]["detection"]["state"] == "unavailable"
    assert doc["hosts"]["cpu-1"]["status"] == "mismatch" and "report" in doc["hosts"]["cpu-1"]
    assert set(side["hosts"]) == {h["host"] for h in report["hosts"] if h["status"] == "ok"}
    assert side["generated"] == doc["generated"] and side["report"] == Path(paths["yaml"]).name


@pytest.fixture(scope="module")
def simulated_fleet(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, dict[str, Any]]]:
    """The simulated fleet's real documents: every host of examples/simulated-fleet/inventory.yml
    preflighted (a dry run, capability rows included) on a copy of its fixture node, registered as the
    preflight module registers it."""
    from gpustack_operator import api

    work = tmp_path_factory.mktemp("simulated-fleet")
    inventory = load_yaml((REPO / "examples" / "simulated-fleet" / "inventory.yml").read_text())
    out = []
    for children in inventory["all"]["children"].values():
        for name, spec in children["hosts"].items():
            root = copy_host(spec["gpustack_host_root"].rsplit("/", 1)[-1], work / name)
            report = api.run_preflight(
                api.make_request(str(root), spec.get("gpustack_manufacturers")), dry_run=True, host_root=str(root)
            )
            out.append((name, {"changed": False, "report": report.wire(), "failures": report.failures()}))
    return out


HTML_BYTES_PER_HOST = 2_000  # 1,000 hosts: <= 2 MB (issue 17)
YAML_BYTES_PER_OK_HOST = 2_500  # an ok host's summary in the main YAML (its document is in the side file)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def test_the_report_size_per_host_on_real_documents_is_bounded(
    simulated_fleet: list[tuple[str, dict[str, Any]]],
) -> None:
    """300 hosts synthesised round-robin from the simulated fleet's real documents (with a few
    unreachable and mismatched ones, as bench/report_bench.py does): the page stays under 2 KB a
    host, and an ok host's entry in the main YAML is its summary, never its whole document."""
    hosts = 300
    results: list[tuple[str, Any]] = []
    expect: dict[str, Any] = {}
    for i in range(hosts):
        name, result = simulated_fleet[i % len(simulated_fleet)]
        host = f"{name}-{i:04d}"
        if i % 97 == 96:
            results.append((host, {"unreachable": True, "msg": f"ssh: connect to host {host} port 22: timed out"}))
            continue
        results.append((host, result))
        if i % 23 == 0:
            expect[host] = {"nvidia": 1}
    report = fleet.build(results, expect, now=NOW)
    page = fleet.to_html(report).encode("utf-8")
    assert len(page) / hosts <= HTML_BYTES_PER_HOST, len(page) / hosts
    doc = fleet.document(report)
    for entry in report["hosts"]:
        item = doc["hosts"][entry["host"]]
        if entry["status"] == "ok":
            assert "report" not in item
            text = yaml.dump(item, Dumper=DUMPER, sort_keys=False, allow_unicode=True, width=120)
            assert len(text.encode("utf-8")) <= YAML_BYTES_PER_OK_HOST, entry["host"]
        elif entry["report"] is not None:
            assert item["report"] is entry["report"]


def test_a_row_meets_only_the_filter_rules_of_its_own_classes() -> None:
    """The page's layout bound (<= 2 s at 1,000 hosts): every filter rule that reaches the rows ends in
    a class the row carries (``tr.<class>``), never ``tr:not(.<class>)`` -- which matched every row for
    every radio, each match walking all the radios before the table (~1-2 s of style at 1,000 hosts)."""
    page = fleet.to_html(build(**{"cpu-1": {"nvidia": 2}}))
    css = page.split("<style>", 1)[1].split("</style>", 1)[0]
    selectors = [s.strip() for rule in css.split("}") if "{" in rule for s in rule.split("{", 1)[0].split(",")]
    on_rows = [s for s in selectors if s.split()[-1].startswith("tr")]
    assert on_rows, css
    assert not [s for s in on_rows if ":not(" in s]
    radios = re.findall(r'<input type="radio" name="\w+" id="([\w-]+)"', page)
    filtering = [r for r in radios if not r.endswith("-all")]
    for radio in filtering:  # each radio: one rule on the rows of the class it keeps
        assert len([s for s in on_rows if s.startswith(f"#{radio}:checked")]) == 1, radio
    # and the one rule every row meets: its display, from the three axes
    assert [s for s in on_rows if s.startswith("#hosts")] == ["#hosts tbody tr", "#hosts tbody tr"]


_STATE = st.sampled_from([*fleet.USABLE_LINKS, "failed", "down", "", "<x-inj>"]) | _TEXT
_LINK = st.fixed_dictionaries(
    {},
    optional={
        "interface": _TEXT | st.sampled_from(["ib0", "ens1f0np0/0000:21:00.4"]),
        "rdmaDevice": _TEXT,
        "state": st.none() | _STATE,
        "reason": st.none() | _TEXT | st.text(min_size=500, max_size=2000),
    },
)
_SECTIONS = st.fixed_dictionaries(
    {"accelerators": st.lists(_GROUP, max_size=2)},
    optional={
        "network": st.fixed_dictionaries({}, optional={"checks": st.lists(_LINK, max_size=6), "note": _TEXT}),
        "topology": st.fixed_dictionaries(
            {}, optional={"policy": _TEXT, "note": st.none() | _TEXT | st.text(min_size=500, max_size=2000)}
        ),
    },
)


@pytest.mark.hostile
@RENDERS
@given(_SECTIONS, st.booleans())
def test_any_links_and_topology_a_host_sends_are_reported_never_a_traceback(
    document: dict[str, Any], fail_degraded: bool
) -> None:
    """A host's network and topology sections, however odd: the host is degraded exactly when one of
    its links has a verdict that is not a usable one (never its status changed by it), the topology
    cell's title is its note, every text on the page is cut and escaped, the YAML keeps its document
    exactly where it is not ok, the JUnit parses."""
    try:
        report = fleet.build([("h<1>", {"report": document}), ("h2", None)], now=NOW, fail_degraded=fail_degraded)
    except fleet.MalformedReportError:
        return
    (entry,) = [e for e in report["hosts"] if e["host"] == "h<1>"]
    checks = document.get("network", {}).get("checks") or []
    down = [c for c in checks if c.get("state") not in fleet.USABLE_LINKS]
    assert bool(entry["degraded"]) == bool(down) and report["summary"]["degraded"] == (1 if down else 0)
    assert entry["status"] == ("unavailable" if fleet.failures(document) else "ok")
    assert ("h<1>" in fleet.failing_hosts(report)) == (entry["status"] != "ok" or (fail_degraded and bool(down)))
    page = fleet.to_html(report)
    tags = _Tags()
    tags.feed(page.split("<body>", 1)[1])  # the styles before it hold no host text
    assert not {"script", "x-inj"} & tags.tags and "onclick" not in tags.attrs
    row = page.split('data-host="h&lt;1&gt;"', 1)[1].split("</tr>", 1)[0]  # a host's words may hold newlines
    for text in [c.get("reason") for c in checks] + [document.get("topology", {}).get("note")]:
        if text and len(text) > fleet.TEXT_SHOWN:
            assert html.escape(text) not in row  # cut, never the whole of it
    note = document.get("topology", {}).get("note")
    if note:
        assert f' title="{html.escape(fleet.cut(note, fleet.TEXT_SHOWN))}"' in row
    doc, side = fleet.document(report), fleet.documents_document(report)
    assert load_yaml(fleet.to_yaml(report))["hosts"]["h<1>"] == doc["hosts"]["h<1>"]  # what is written
    assert ("report" in doc["hosts"]["h<1>"]) == (entry["status"] != "ok")
    assert (doc["hosts"]["h<1>"].get("report") or side["hosts"]["h<1>"]) == document
    assert doc["hosts"]["h<1>"].get("degraded", []) == entry["degraded"]
    ET.fromstring(fleet.to_junit(report))
