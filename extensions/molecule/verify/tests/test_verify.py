"""Verify scenario `verify`: the reports the role wrote on the controller (converge, idempotence and the
check run each wrote one) against what seed.py published, and the cluster left as seeded."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE.parent / "shared"))
sys.path.insert(0, str(HERE))

import cluster  # noqa: E402
import seed  # noqa: E402
from controller import BUILD  # noqa: E402

REPORTS = BUILD / "verify" / "reports"
GOOD, FALLEN = seed.NODES["good-01"][1], seed.NODES["fallen-01"][1]
# the fallen card, as the role words it (roles/verify/README.md), then what follows from it
FALLEN_DIFFERENCES = [
    f"Devices advertises {seed.FALLEN} (nvidia l40s) the host no longer has",
    "allocatable nvidia.com/gpu 5, the host has 4",
    "label acceleratable.feature.gpustack.ai/nvidia-l40s.count is 4 on the host, 5 in the NodeFeature labels",
]


def reports() -> list[Path]:
    return sorted(REPORTS.glob("verify-*Z.yaml"))


@pytest.fixture(scope="module")
def latest() -> dict[str, Any]:
    found = reports()
    assert found, f"no verify report under {REPORTS}"
    doc: dict[str, Any] = yaml.safe_load(found[-1].read_text(encoding="utf-8"))
    doc["_path"] = found[-1]
    return doc


def test_every_run_of_the_sequence_wrote_a_report_with_the_same_verdict() -> None:
    found = reports()
    # converge, idempotence and check (a second's timestamp apart at least)
    assert len(found) >= 3, found
    summaries = [yaml.safe_load(p.read_text(encoding="utf-8"))["summary"] for p in found]
    assert summaries == [{"nodes": 2, "ok": 1, "drift": 1, "error": 0}] * len(found), summaries


def test_the_matching_node_is_ok(latest: dict[str, Any]) -> None:
    nodes = {n["host"]: n for n in latest["nodes"]}
    assert nodes["good-01"] == {"host": "good-01", "node": GOOD, "status": "ok"}


def test_the_drifting_node_names_the_card_the_cluster_still_advertises(latest: dict[str, Any]) -> None:
    nodes = {n["host"]: n for n in latest["nodes"]}
    assert nodes["fallen-01"]["node"] == FALLEN and nodes["fallen-01"]["status"] == "drift"
    assert [d["text"] for d in nodes["fallen-01"]["differences"]] == FALLEN_DIFFERENCES


def test_the_junit_fails_the_drifting_node_only(latest: dict[str, Any]) -> None:
    junit = ET.parse(latest["_path"].with_suffix("").with_suffix(".junit.xml")).getroot()
    assert (junit.get("tests"), junit.get("failures"), junit.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    failure = cases["fallen-01"].find("failure")
    assert failure is not None and failure.get("message") == "\n".join(FALLEN_DIFFERENCES)
    assert cases["good-01"].find("failure") is None
    page = latest["_path"].with_suffix("").with_suffix(".html").read_text(encoding="utf-8")
    assert FALLEN_DIFFERENCES[0] in page


def test_the_cluster_is_as_seeded_the_role_only_read_it() -> None:
    c = cluster.client()
    devices = cluster.get(c, f"/apis/worker.gpustack.ai/v1alpha1/devices/{FALLEN}")
    assert devices is not None
    ids = [a["id"] for g in devices["spec"]["groups"] for a in g["accelerators"]]
    assert seed.FALLEN in ids and len(ids) == 5, ids
    for node in (GOOD, FALLEN):
        pod = cluster.get(c, f"/api/v1/namespaces/{seed.NAMESPACE}/pods/device-manager-nvidia-{node}")
        assert pod is not None and pod["status"]["phase"] == "Running", pod
        assert pod["metadata"]["resourceVersion"], pod
