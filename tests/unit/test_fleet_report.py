"""The fleet report: classification, YAML, HTML (no JavaScript, escaped) and JUnit."""

from datetime import UTC, datetime
from xml.etree import ElementTree as ET

from gpustack_operator.report import fleet

OK = {
    "report": {
        "accelerators": [
            {
                "manufacturer": "nvidia",
                "timestamp": "t",
                "detection": {"state": "ok", "depth": "declared", "accelerators": 8, "detail": "H100 x8"},
            },
            {
                "manufacturer": "amd",
                "timestamp": "t",
                "detection": {"state": "not-declared", "depth": "declared", "reason": "none <here>"},
            },
        ]
    }
}
BAD = {
    "failed": True,
    "msg": "preflight: nvidia: detection: could not measure",
    "report": {
        "accelerators": [
            {
                "manufacturer": "nvidia",
                "timestamp": "t",
                "detection": {"state": "unavailable", "depth": "declared", "reason": "could not measure"},
                "checks": [
                    {
                        "accelerator": "GPU-1",
                        "capability": "mig-partitioning",
                        "mode": "partitioned",
                        "state": "unavailable",
                        "depth": "declared",
                        "reason": "driver refused",
                    }
                ],
            },
        ]
    },
}


def build() -> fleet.FleetReport:
    return fleet.build(
        [
            ("b-ok", OK),
            ("a-bad", BAD),
            ("c-gone", {"unreachable": True, "msg": "ssh: refused"}),
            ("d-none", None),
            ("e-pkg", {"failed": True, "msg": "Failed to import the required Python library"}),
        ],
        now=datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
    )


def test_classification_and_summary() -> None:
    report = build()
    assert [(h.host, h.status.value) for h in report.hosts] == [
        ("a-bad", "unavailable"),
        ("b-ok", "ok"),
        ("c-gone", "unreachable"),
        ("d-none", "unreachable"),
        ("e-pkg", "failed"),
    ]
    assert report.summary.line() == "fleet preflight: 5 hosts, 1 ok, 1 unavailable, 2 unreachable, 1 failed"


def test_html_is_escaped_static_and_filterable() -> None:
    page = fleet.to_html(build())
    assert "<script" not in page
    assert "none &lt;here&gt;" in page and "none <here>" not in page
    assert 'tr class="status-unavailable has-unavailable"' in page
    assert "#only-unavailable:target ~ table#matrix" in page
    assert "<details><summary>ok · 8" in page


def test_junit() -> None:
    suite = ET.fromstring(fleet.to_junit(build()))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "1", "3")
    (failure,) = suite.iter("failure")
    assert "detection: could not measure" in (failure.text or "")
    assert "mig-partitioning on GPU-1: driver refused" in (failure.text or "")


def test_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    paths = fleet.write(build(), tmp_path / "out")
    assert sorted(p.rsplit(".", 1)[-1] for p in paths.values()) == ["html", "xml", "yaml"]
    assert paths["yaml"].endswith("preflight-20261129T100000Z.yaml")
