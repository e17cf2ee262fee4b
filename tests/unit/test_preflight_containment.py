"""Preflight's containment rules (preflight-operations "One manufacturer's crash does not take the
others down"): a crash while answering one manufacturer gives its preflight-panicked rows and note,
the others are answered as usual, and the exit-code rule follows the rows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from gpustack_operator import api
from gpustack_operator.manufacturers.base import Detected, Dropped, Unmeasured
from gpustack_operator.preflight import run
from gpustack_operator.preflight.models import State

from tests.conftest import copy_host, host


def test_a_crash_answering_one_manufacturer_is_contained(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = run.preflight_group

    def crash_on_nvidia(name: str, *args: object, **kwargs: object) -> object:
        if name == "nvidia":
            raise RuntimeError("invalid memory address")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run, "preflight_group", crash_on_nvidia)
    root = str(host("mixed-nvidia-mellanox"))
    report = api.run_preflight(api.make_request(root, None), host_root=root)
    groups = {g.manufacturer: g for g in report.accelerators}
    assert len(groups) == 9
    nvidia = groups["nvidia"]
    assert nvidia.detection.state is State.OK and nvidia.detection.accelerators == 4  # the block it had
    assert nvidia.checks is not None and len(nvidia.checks) == 4
    assert {c.capability for c in nvidia.checks} == {"preflight-panicked"}
    assert all(c.state is State.UNAVAILABLE for c in nvidia.checks)
    assert "RuntimeError: invalid memory address" in (nvidia.checks[0].reason or "")
    assert (nvidia.note or "").startswith("this manufacturer's preflight panicked and was contained")
    assert all(g.detection.state is State.NOT_DECLARED for m, g in groups.items() if m != "nvidia")
    assert len(report.failures()) == 4  # the rows fail the run
    # one line at error naming the crash; its trace only at debug (a traceback on stderr is a defect)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("nvidia preflight panicked: RuntimeError: invalid memory address" in r.getMessage() for r in errors)
    assert all(r.exc_info is None for r in errors)


def test_detection_answer_tells_the_cases_apart() -> None:
    from gpustack_operator.discovery.coverage import Coverage

    bus = ("0000:01:00.0", "0000:41:00.0")
    half = Coverage(bus=bus, answered=0, missing=2, unanswered=bus, driver="nvmlInit: Driver Not Loaded", dropped=())
    det = run.detection_answer(Detected([], driver="nvmlInit: Driver Not Loaded"), half)
    assert det.state is State.UNAVAILABLE and "0000:41:00.0" in (det.reason or "")
    assert "install and load the vendor driver" in (det.reason or "")
    dropped = (Dropped("KFD node 3 (0000:41:00.0)", "its unique_id reads 0"),)
    named = Coverage(bus=bus, answered=1, missing=1, unanswered=("0000:41:00.0",), driver=None, dropped=dropped)
    det = run.detection_answer(Detected([], dropped=dropped), named)
    assert "could not identify 1 of them" in (det.reason or "") and "driver named" not in (det.reason or "")
    none = Coverage(bus=(), answered=0, missing=0, unanswered=(), driver="libcndev.so not found", dropped=())
    assert run.detection_answer(Detected([], driver="libcndev.so not found"), none).state is State.NOT_DECLARED
    unmeasured = run.detection_answer(Unmeasured("sysfs unreadable"))
    assert unmeasured.state is State.UNAVAILABLE and "sysfs unreadable" in (unmeasured.reason or "")


def test_a_library_vendor_without_its_library_is_half_installed(tmp_path: Path) -> None:
    """The generic library pass (CNDev here) says why it answered nothing; preflight weighs it."""
    root = copy_host("mlu370-x8", tmp_path)
    for lib in root.rglob("libcndev.so*"):
        if not lib.name.endswith(".fixture"):
            lib.unlink()
    report = api.run_preflight(api.make_request(str(root), ["cambricon"]), host_root=str(root))
    (group,) = report.accelerators
    assert group.detection.state is State.UNAVAILABLE
    assert "the PCI bus shows 8 accelerator(s)" in (group.detection.reason or "")
    assert "libcndev.so" in (group.detection.reason or "")
