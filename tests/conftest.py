"""Shared test helpers: where the fixtures are, how to run the CLI and Ansible for real."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from tests.tools.kube_cluster import KubeCluster

# Hypothesis profiles for the parsers of host and user input (issue 8, "hostile input"):
#   ci       -- what `make test` runs: a few hundred examples per parser, no deadline (CI timing noise);
#   hostile  -- on demand, >= 100k examples per parser with a 100 ms deadline per input:
#               HYPOTHESIS_PROFILE=hostile .venv/bin/pytest -m hostile -p no:cacheprovider
#   hostile-loaded -- the same 100k examples without the deadline, for a machine other work loads (a
#               deadline there fails on the scheduler, not the parser: the example passes when re-run);
#               a hang still shows, as the run's own time
# Property tests never hard-code max_examples, so the profile decides.
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("hostile", max_examples=100_000, deadline=100, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "hostile-loaded", max_examples=100_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"
BIN = Path(sys.executable).parent


def host(name: str) -> Path:
    path = HOSTS / name
    assert path.is_dir(), f"missing fixture host {name}"
    return path


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed console script, as a user would."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    full_env.update(env or {})
    return subprocess.run(
        [str(BIN / "gpustack-operator"), *args], capture_output=True, text=True, env=full_env, timeout=120
    )


@pytest.fixture(scope="session", autouse=True)
def vendor_stubs() -> None:
    """Compile the vendor-library stand-ins into the fixture hosts once per session."""
    from tests.stubs.build import build_all

    build_all()


def fresh_node(directory: str, names: list[str]) -> set[str]:
    """``copytree``'s ``ignore``: leave out what a preflight run on the shared fixture tree staged onto it
    (``var/lib/gpustack``, git-ignored), so a copy is the node as imaged; and the device nodes
    tests/stubs/node_extras.py gives the shared tree (``dev/``, T-Head's character devices among them,
    which a copy could not even read) -- a test gives its copy the nodes it needs
    (``node_extras.install``)."""
    import stat

    skip = {"gpustack"} if Path(directory).as_posix().endswith("/var/lib") and "gpustack" in names else set()
    if Path(directory).parent == HOSTS and "dev" in names:
        skip.add("dev")  # the fixture's device nodes (node_extras): a test gives its copy the nodes it needs
    for name in names:
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            continue
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            skip.add(name)
    return skip


def copy_host(name: str, dest: Path) -> Path:
    """A private copy of a fixture host (symlinks kept) for tests that change its state."""
    import shutil

    target = dest / name
    shutil.copytree(host(name), target, symlinks=True, ignore=fresh_node)
    return target


def make_enterable(root: Path) -> Path:
    """Give a fixture node a shell (this machine's /bin/dash and the libraries it needs) so host
    CLIs faked as ``#!/bin/sh`` scripts run inside it under a real ``chroot``."""
    import re
    import shutil

    shell = Path("/bin/dash").resolve()
    ldd = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"(/\S+\.so[\w.]*)", ldd)
    for src in [str(shell), *libs]:
        dest = root / src.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin/sh").exists():
        shutil.copy2(shell, root / "bin/sh")
    return root


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """The one-node cluster (tests/tools/kube_cluster.py), started once per session for whatever needs it
    -- tests/cluster/ and the molecule scenarios of tests/integration/test_molecule.py; every user shares
    this one (one start; the ports are chosen free at start, so other clusters may run beside it). Skips only where the
    machine cannot run it (``cannot_run``); a cluster that does not come up is an error with its logs."""
    from tests.tools.kube_cluster import KubeCluster, cannot_run

    reason = cannot_run()
    if reason is not None:
        pytest.skip(reason)
    cluster = KubeCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ansible_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "ANSIBLE_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}:{env.get('PATH', '')}",
        # a home of the test's own: the install role records its venv under ~/.local/state, and a
        # record left in the real home would let a later test's module respawn into another test's venv
        HOME=str(tmp_path / "home"),
    )
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def empty(outcome: object) -> object:
    """Assert a detection outcome is the measured "nothing here" (``Detected`` with no group) and
    return it, so a test can go on to check the evidence beside it (``driver``, ``dropped``)."""
    from gpustack_operator.manufacturers.base import Detected

    assert isinstance(outcome, Detected), outcome
    assert outcome.groups == [], outcome.groups
    return outcome


# -- where the suite's time goes (issue 17: the phases of `make test` with their durations) ----------
# Per test file: the setup, call and teardown of its tests, module and session fixtures included (an
# image build is charged to the first test that needs it). Printed after the run, slowest first.
_FILE_SECONDS: dict[str, float] = {}
_SLOWEST_FILES = 15


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    ranked = sorted(_FILE_SECONDS.items(), key=lambda item: item[1], reverse=True)
    terminalreporter.section("where the time went (per test file, fixtures included)")
    for path, seconds in ranked[:_SLOWEST_FILES]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:5.1f}%  {path}")
    rest = ranked[_SLOWEST_FILES:]
    if rest:
        terminalreporter.write_line(f"{sum(s for _, s in rest):8.1f} s  in the other {len(rest)} files")
    terminalreporter.write_line(f"{total:8.1f} s  in all {len(ranked)} files")
