"""module_utils/verify_report.py: the verify report's entries, console lines and files (issue 19) --
worst first, a drifting node a JUnit failure whose message is its differences, an error an error, host
text escaped in the HTML and kept parseable in the XML."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import yaml
from ansible_collections.gpustack.accelerators.plugins.module_utils import verify_report as vr

DRIFT = [
    {"kind": "accelerator", "text": "Devices advertises GPU-1 (nvidia l40s) the host no longer has"},
    {"kind": "allocatable", "text": "allocatable nvidia.com/gpu 5, the host has 4"},
]


def report() -> dict:
    return vr.build(
        [
            vr.entry("node-10", "node-10", "ok"),
            vr.entry("node-2", "n2", "drift", DRIFT),
            vr.entry("gone-1", "gone-1", "error", error="unreachable: ssh: connect to host port 1"),
            vr.entry("node-1", "node-1", "ok"),
        ],
        generated="2026-12-02T06:00:00Z",
    )


def test_worst_first_then_natural_order_and_the_summary() -> None:
    doc = report()
    assert [e["host"] for e in doc["nodes"]] == ["gone-1", "node-2", "node-1", "node-10"]
    assert doc["summary"] == {"nodes": 4, "error": 1, "drift": 1, "ok": 2}
    assert vr.summary_line(doc["summary"]) == "cluster verify: 4 nodes, 2 ok, 1 drift, 1 error"
    assert vr.console_lines(doc) == [
        "gone-1 (node gone-1): error - unreachable: ssh: connect to host port 1",
        "node-2 (node n2): drift - Devices advertises GPU-1 (nvidia l40s) the host no longer has (+1 more)",
    ]
    assert set(vr.failing_hosts(doc)) == {"gone-1", "node-2"}


def test_the_three_files(tmp_path: Path) -> None:
    paths = vr.write(report(), str(tmp_path / "reports"))
    assert Path(paths["yaml"]).name == "verify-20261202T060000Z.yaml"
    doc = yaml.safe_load(Path(paths["yaml"]).read_text(encoding="utf-8"))
    assert doc["nodes"][1] == {"host": "node-2", "node": "n2", "status": "drift", "differences": DRIFT}
    suite = ET.parse(paths["junit"]).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["node-2"].find("failure")
    assert failure is not None and failure.get("message") == "\n".join(d["text"] for d in DRIFT)
    error = cases["gone-1"].find("error")
    assert error is not None and error.get("message") == "unreachable: ssh: connect to host port 1"
    assert cases["node-1"].find("failure") is None and cases["node-1"].find("error") is None
    page = Path(paths["html"]).read_text(encoding="utf-8")
    assert "allocatable nvidia.com/gpu 5, the host has 4" in page and "cluster verify: 4 nodes" in page


def test_host_text_is_escaped_in_html_and_never_breaks_the_xml(tmp_path: Path) -> None:
    hostile = [
        {"kind": "label", "text": "label x is <script>alert(1)</script> on the host, \x1b[31m\x00 in the NodeFeature"}
    ]
    doc = vr.build([vr.entry("h<1>", "h<1>", "drift", hostile)], generated="2026-12-02T06:00:00Z")
    paths = vr.write(doc, str(tmp_path))
    page = Path(paths["html"]).read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    (case,) = ET.parse(paths["junit"]).getroot().iter("testcase")
    failure = case.find("failure")
    assert failure is not None and "\x00" not in (failure.get("message") or "")
    assert case.get("name") == "h<1>"
