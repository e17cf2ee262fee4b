"""Preflight questions 2/3 without a container (preflight/capability.py) and the A5 readers
(manufacturers/ascend/a5.py). The mode driver is a stand-in at the ModeDriver boundary."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.ascend import a5
from gpustack_operator.manufacturers.base import ModeChange, ModeError, ModeState
from gpustack_operator.manufacturers.respond import DeviceNode, Injection
from gpustack_operator.preflight import capability
from gpustack_operator.preflight.models import Depth, State


def host_with(tmp_path: Path, files: dict[str, str]) -> HostRoot:
    (tmp_path / "etc").mkdir(exist_ok=True)
    for path, text in files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return HostRoot(str(tmp_path))


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("v26.0.0", True),
        ("v26.0.0.beta.1", True),
        ("v27.1.0", True),
        ("v7.3.0", False),
        ("v7.0.RC1", False),
        ("unknown", False),
    ],
)
def test_runtime_version(tmp_path: Path, version: str, ok: bool) -> None:
    host = host_with(tmp_path, {a5.RUNTIME_INFO: f"path=/x\nversion={version}\n"})
    fact = a5.runtime_version(host)
    assert fact.ok is ok
    assert (version in fact.words) or ok


def test_runtime_version_absent_and_no_host(tmp_path: Path) -> None:
    assert not a5.runtime_version(host_with(tmp_path, {})).ok
    fact = a5.runtime_version(None, "no host root to enter")
    assert not fact.ok and "never looked at" in fact.words


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (None, True),
        ('{"version": "2.0"}', True),
        ('{"version": "1.2"}', False),
        ("{not json", False),
        ('{"server_count": 1}', False),
    ],
)
def test_ranktable(tmp_path: Path, text: str | None, ok: bool) -> None:
    host = host_with(tmp_path, {a5.RANKTABLE: text} if text is not None else {})
    assert a5.ranktable(host).ok is ok


def test_ranktable_symlink_is_unavailable_naming_the_target(tmp_path: Path) -> None:
    host = host_with(tmp_path, {"/opt/rt.json": '{"version": "2.0"}'})
    os.symlink("/opt/rt.json", tmp_path / "etc/hccl_rootinfo.json")
    fact = a5.ranktable(host)
    assert not fact.ok and "/opt/rt.json" in fact.words


def test_ranktable_without_host_root() -> None:
    assert not a5.ranktable(None, "no host root").ok


def test_visibility_verdict() -> None:
    owner = Injection(
        envs={"X_VISIBLE_DEVICES": "0", "LIMIT": "12282"},
        devices=[DeviceNode(container_path="/dev/a0", host_path="/dev/a0")],
    )
    same = Injection(
        envs={"X_VISIBLE_DEVICES": "0"}, devices=[DeviceNode(container_path="/dev/a0", host_path="/dev/a0")]
    )
    assert capability.visibility_verdict(owner, same) is None
    wider = Injection(envs={"X_VISIBLE_DEVICES": "0,1"})
    assert "X_VISIBLE_DEVICES=0,1" in (capability.visibility_verdict(owner, wider) or "")
    extra = Injection(devices=[DeviceNode(container_path="/dev/a1", host_path="/dev/a1")])
    assert "/dev/a1" in (capability.visibility_verdict(owner, extra) or "")
    assert capability.visibility_verdict(owner, Injection()) is not None


class FakeShare:
    """A ModeDriver stand-in recording every write."""

    mode = "container-share"
    writable = True

    def __init__(self, enabled: bool | None, *, refuse_on: bool = False, refuse_off: bool = False) -> None:
        self.enabled = enabled
        self.refuse_on = refuse_on
        self.refuse_off = refuse_off
        self.writes: list[bool] = []

    def read(self, ctx: object, groups: list[DevicesGroup]) -> list[ModeState]:
        return [
            ModeState(accelerator=a.id, index=a.index, mode=self.mode, enabled=self.enabled)
            for g in groups
            for a in g.accelerators
        ]

    def set(self, ctx: object, state: ModeState, enabled: bool) -> ModeChange:
        if (enabled and self.refuse_on) or (not enabled and self.refuse_off):
            raise ModeError(state.accelerator, self.mode, "driver said no")
        self.writes.append(enabled)
        before, self.enabled = self.enabled, enabled
        return ModeChange(
            accelerator=state.accelerator,
            index=state.index,
            mode=self.mode,
            before=before,
            after=enabled,
            changed=True,
            command=f"npu-smi set -d {int(enabled)}",
            undo_command="npu-smi set -d 0",
        )


GROUP = DevicesGroup(
    id="910b", manufacturer="ascend", name="Ascend910B", memory=65536, accelerators=[Accelerator(id="npu-0", index=0)]
)


def run_established(
    monkeypatch: pytest.MonkeyPatch, driver: FakeShare, dry_run: bool = False, why: str | None = None
) -> object:
    monkeypatch.setitem(capability.REGISTRY, "ascend", SimpleNamespace(modes={"container-share": driver}))  # type: ignore[arg-type]
    env = capability.Env(resolved=None, settings=None, detect=object(), host=None, host_problem=None, dry_run=dry_run)  # type: ignore[arg-type]
    if why is not None:
        env = dataclasses.replace(env, dry_why=why)
    return capability.established_row("ascend", env, GROUP, GROUP.accelerators[0])


def test_container_share_off_is_turned_on_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeShare(False)
    row = run_established(monkeypatch, driver)
    assert row.state is State.OK and row.depth is Depth.DECLARED and row.mode == "sliced"  # type: ignore[attr-defined]
    assert driver.writes == [True, False] and driver.enabled is False
    assert "put straight back" in row.detail  # type: ignore[attr-defined]


def test_container_share_already_on_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeShare(True)
    assert run_established(monkeypatch, driver).state is State.OK  # type: ignore[attr-defined]
    assert driver.writes == []


def test_restore_failure_is_loud_on_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeShare(False, refuse_off=True)
    row = run_established(monkeypatch, driver)
    assert row.state is State.UNAVAILABLE  # type: ignore[attr-defined]
    assert "RESTORE FAILED" in row.reason and "LEFT ON" in row.reason and "npu-smi set -d 0" in row.reason  # type: ignore[attr-defined]
    assert driver.enabled is True


def test_refused_turning_on(monkeypatch: pytest.MonkeyPatch) -> None:
    row = run_established(monkeypatch, FakeShare(False, refuse_on=True))
    assert row.state is State.UNAVAILABLE and "refused" in row.reason  # type: ignore[attr-defined]


def test_dry_run_does_not_ask_and_the_withheld_ask_is_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """preflight-operations "Emitted steps": a step withheld is an answer, not a failure -- the row reports
    the mode as read and that it was not established, and does not fail the run."""
    driver = FakeShare(False)
    row = run_established(monkeypatch, driver, dry_run=True)
    assert driver.writes == []
    assert (row.state, row.depth, row.reason) == (State.OK, Depth.DECLARED, None)  # type: ignore[attr-defined]
    assert "container-share reads off and was not established" in row.detail  # type: ignore[attr-defined]
    assert "--dry-run" in row.detail  # type: ignore[attr-defined]


def test_no_host_root_withholds_the_ask_naming_why(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeShare(False)
    row = run_established(monkeypatch, driver, dry_run=True, why="there is no host root to enter (x)")
    assert driver.writes == [] and row.state is State.OK  # type: ignore[attr-defined]
    assert "there is no host root to enter (x)" in row.detail and "--dry-run" not in row.detail  # type: ignore[attr-defined]


def test_dry_run_reads_a_mode_already_on_as_on(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeShare(True)
    row = run_established(monkeypatch, driver, dry_run=True)
    assert driver.writes == [] and row.state is State.OK and "not established" not in row.detail  # type: ignore[attr-defined]


def test_notes_say_how_deep_each_tier_goes() -> None:
    assert "probe container" in capability.note_for("nvidia") and "measures the sliced rows" in capability.note_for(
        "nvidia"
    )
    assert "no driver-read row" in capability.note_for("iluvatar")
    assert "not built" not in capability.note_for("cambricon")
