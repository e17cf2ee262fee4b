"""The run around questions 2 and 3 (preflight/run.py): which runs write, the lock that serialises them,
and the sweep that gates the probes (supplement §2.4, §2.5, §2.8; issue 16).

The node is a copy of the H100 fixture (the node view the detect pass reads) beside a host root of its
own: ``/etc``, a ``docker`` executable, nothing else. The host's CLI is never entered here:
:meth:`HostExec.run` answers as the host's docker would (a listing, a removal that fails or not), and
the probe containers are recorded at :func:`gpustack_operator.preflight.probe.run_together`, the one
place a probe is started. Everything between -- the lock, the sweep and its verdict, staging, the
allocator, the probe steps -- is the real code's. The same rules with real processes and a real
chroot are in tests/integration/test_preflight_probes.py and test_preflight_lock_sweep.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator import api
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight import probe
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.lock import LOCK_PATH, acquire
from gpustack_operator.preflight.models import Report, State

from tests.conftest import copy_host

LEFT_BEHIND = "3f4e2a1b9c8d"
DENIED = "Error response from daemon: cannot remove container: permission denied"


@dataclass
class Host:
    view: Path
    root: Path
    source: Path
    calls: list[list[str]] = field(default_factory=list)
    started: list[probe.Step] = field(default_factory=list)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    view = copy_host("h100-sxm-8x", tmp_path)
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    docker = root / "usr/bin/docker"
    docker.parent.mkdir(parents=True)
    docker.write_text("#!/bin/sh\n")
    docker.chmod(0o755)
    source = tmp_path / "lib-source"
    (source / "nvidia/cuda-12").mkdir(parents=True)
    (source / "nvidia/cuda-12/libvgpu.so").write_bytes(b"\x7fELF stand-in\n")
    node = Host(view, root, source)

    def run(self: HostExec, name: str, *args: str) -> str:
        node.calls.append([name, *args])
        if name.endswith("docker") and args[:2] == ("ps", "-aq"):
            return f"{LEFT_BEHIND}\n" if (root / "left-behind").exists() else ""
        if name.endswith("docker") and args[:2] == ("rm", "-f"):
            if (root / "rm-fails").exists():
                raise HostExecError(f"docker: exit status 1: {DENIED}")
            return args[2]
        raise HostExecError(f"{name}: not on this host")

    def together(steps: Sequence[probe.Step], timeout: float = probe.PROBE_TIMEOUT) -> list[probe.Ran]:
        node.started.extend(steps)
        return [probe.Ran(0, "", "", 0.0) for _ in steps]

    monkeypatch.setattr(HostExec, "run", run)
    monkeypatch.setattr(probe, "run_together", together)
    return node


def preflight(node: Host, *, dry_run: bool = False, host_root: Path | None = None) -> Report:
    return api.run_preflight(
        api.make_request(str(node.view), ["nvidia"]),
        dry_run=dry_run,
        runtime="docker",
        host_root=str(host_root or node.root),
        preload_source=str(node.source),
    )


def rows(report: Report, capability: str) -> list[object]:
    (group,) = report.accelerators
    return [c for c in group.checks or [] if c.capability == capability]


def swept(node: Host) -> list[list[str]]:
    return [c for c in node.calls if c[0].endswith("docker")]


def test_a_healthy_sweep_lets_the_probes_start(host: Host) -> None:
    """The control for the next test: on this node, with nothing left behind, the probes do start."""
    (host.root / "left-behind").touch()
    report = preflight(host)
    assert swept(host) == [
        ["/usr/bin/docker", "ps", "-aq", "--filter", "label=gpustack.ai/preflight=true"],
        ["/usr/bin/docker", "rm", "-f", LEFT_BEHIND],
    ]
    assert len(host.started) == 8 * 3  # one probe per accelerator, then two together
    assert not rows(report, "stale-container-sweep")


def test_no_probe_starts_after_a_failed_sweep(host: Host) -> None:
    """§2.8: a sweep that could not be completed fails every accelerator it could not clear, and
    nothing is measured against an accelerator a leftover may still hold."""
    (host.root / "left-behind").touch()
    (host.root / "rm-fails").touch()
    report = preflight(host)
    assert host.started == []
    stale = rows(report, "stale-container-sweep")
    assert len(stale) == 8 and {r.state for r in stale} == {State.UNAVAILABLE}  # type: ignore[attr-defined]
    assert DENIED in stale[0].reason  # type: ignore[attr-defined]
    for capability in ("sliced-runtime-loaded", "sliced-quota-in-force", "co-tenancy"):
        (first, *_) = rows(report, capability)
        assert "stale-container sweep could not be completed" in first.detail  # type: ignore[attr-defined]
        assert first.command and first.evidence is None  # type: ignore[attr-defined]
    assert report.failures()


def test_a_run_that_writes_without_probing_takes_the_lock_first(host: Host) -> None:
    """§2.5, §2.8: staging the library tree is a host write, so a run that stages -- here one with no
    container runtime, which starts no probe -- refuses while another run holds the lock, before it
    stages, sweeps or toggles anything."""
    (host.root / "usr/bin/docker").unlink()
    held = acquire(HostRoot(host.root))  # a second open file description: a second lock owner
    try:
        report = preflight(host)
    finally:
        held.release()
    (group,) = report.accelerators
    assert group.detection.state is State.UNAVAILABLE and group.checks is None
    assert f"holds this node's lock {LOCK_PATH}" in (group.detection.reason or "")
    assert "refused before it swept or started anything" in (group.note or "")
    assert not (host.root / "var/lib/gpustack/operator/lib").exists()  # nothing staged
    assert host.calls == [] and host.started == []


def test_a_run_that_writes_leaves_the_lock_released_and_in_place(host: Host) -> None:
    (host.root / "usr/bin/docker").unlink()
    report = preflight(host)
    assert not report.failures(), report.failures()
    assert (host.root / "var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so").is_file()  # staged
    lock = host.root / LOCK_PATH.lstrip("/")
    assert lock.is_file()  # never removed (§2.5)
    acquire(HostRoot(host.root)).release()  # and released: the next run takes it


def test_a_dry_run_takes_no_lock_and_is_not_refused_by_one(host: Host) -> None:
    report = preflight(host, dry_run=True)
    assert not (host.root / "var").exists()  # no lock file, no tree, no render directory
    assert not report.failures() and host.started == [] and swept(host) == []
    held = acquire(HostRoot(host.root))
    try:
        report = preflight(host, dry_run=True)
    finally:
        held.release()
    (group,) = report.accelerators
    assert group.detection.state is State.OK and group.checks


def test_no_host_root_writes_nothing_and_takes_no_lock(host: Host, tmp_path: Path) -> None:
    """A host root without /etc is none (preflight-operations "A path that merely resembles a host root
    counts as none"): the run carries on as a dry run."""
    empty = tmp_path / "empty"
    empty.mkdir()
    report = preflight(host, host_root=empty)
    assert list(empty.iterdir()) == []
    assert host.calls == [] and host.started == []
    assert not report.failures(), report.failures()
    (row, *_) = rows(report, "sliced-quota-in-force")
    assert "there is no host root to enter" in row.detail  # type: ignore[attr-defined]
