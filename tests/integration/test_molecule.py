"""The roles' molecule scenarios (extensions/molecule/<scenario>/, where molecule looks in a
collection), run for real: ``molecule test -s <scenario>`` from the repository root, as a newcomer
would, in podman containers with no network, each scenario's full test sequence (converge,
idempotence, check, testinfra verify, destroy).

tests/tools/podman_image.sh makes this machine ready first (podman, runc and debootstrap from Debian;
containers.conf; the containers.podman collection; the image localhost/gpustack-molecule, built once)
-- each scenario's create step runs it too, so this is only to build it once, not four times side by
side. The scenarios run side by side (each has its own build and ephemeral directory, and its
containers carry this checkout's run id) to keep the whole module to a few minutes; every scenario's
output is kept in tests/.build/molecule/logs/.

Two scenarios start no container: ``verify`` and ``deploy`` run their roles on the controller against the
suite's real API server -- the session's ``kube_cluster`` (tests/conftest.py; only one can run on a
machine, so they share the one tests/cluster/ started, or start it here), whose kubeconfig they get in
``GPUSTACK_TEST_KUBECONFIG``, with kubernetes.core's collections directory in
``GPUSTACK_TEST_KUBERNETES_CORE`` (tests/tools/kubernetes_core.py) for ``deploy``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import BIN, REPO
from tests.tools.kube_cluster import KubeCluster
from tests.tools.kubernetes_core import FETCH_FAILED, KubernetesCoreError
from tests.tools.kubernetes_core import provide as kubernetes_core

pytestmark = pytest.mark.ansible

SCENARIOS = ("preflight", "install", "driver_modes", "preload_libraries", "verify", "deploy")
# the scenarios that run against the session's cluster (extensions/molecule/shared/cluster.py)
CLUSTER_SCENARIOS = ("verify", "deploy")
NOT_RUN: dict[str, str] = {}  # scenario -> why this machine cannot run it (a skip, never a pass)
SCENARIO_DIR = REPO / "extensions" / "molecule"
# every action of the scenarios' test_sequence that must run and succeed
ACTIONS = ("destroy", "create", "prepare", "converge", "idempotence", "check", "verify")
LOGS = REPO / "tests" / ".build" / "molecule" / "logs"
TIMEOUT = 1500  # per scenario; a cold machine also installs podman and debootstraps the image first


def cannot_run_podman() -> str | None:
    """Why podman cannot run here at all, or None. Anything else that fails is a failure."""
    if sys.platform != "linux":
        return f"the scenarios run podman containers, which need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the scenarios run podman as root (tests/tools/podman_image.sh installs and configures it): not root"
    if shutil.which("podman") is None and shutil.which("apt-get") is None:
        return "podman is not installed and there is no apt-get to install it"
    return None


@pytest.fixture(scope="module")
def molecule_env() -> dict[str, str]:
    reason = cannot_run_podman()
    if reason:
        pytest.skip(reason)
    if not (BIN / "molecule").exists():
        pytest.fail(
            f"molecule is not installed in {BIN.parent}: the dev extra needs "
            "'molecule>=26.10' and 'molecule-plugins[podman]>=26.10'"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPUSTACK_", "MOLECULE_"))}
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    setup = subprocess.run(
        ["bash", str(REPO / "tests/tools/podman_image.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert setup.returncode == 0, f"tests/tools/podman_image.sh failed:\n{setup.stderr[-4000:]}"
    exports = dict(re.findall(r"^export (\w+)=(.*)$", setup.stdout, re.MULTILINE))
    assert "CONTAINERS_CONF" in exports, setup.stdout
    env.update(exports)
    env.update(
        # the project's settings; molecule runs ansible with its own generated ansible.cfg, so the
        # collection path is also given directly (molecule.yml sets it for the playbooks too)
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
        NO_COLOR="1",
    )
    return env


@pytest.fixture(scope="module")
def cluster_env(kube_cluster: KubeCluster) -> dict[str, str]:
    """What the cluster scenarios are given (after molecule_env stripped every GPUSTACK_*): the session
    cluster's kubeconfig, and kubernetes.core for the deploy role (fetched once per machine)."""
    env = {
        "GPUSTACK_TEST_KUBECONFIG": str(kube_cluster.kubeconfig),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    try:
        env["GPUSTACK_TEST_KUBERNETES_CORE"] = str(kubernetes_core())
    except KubernetesCoreError as exc:
        if exc.code != FETCH_FAILED:
            raise
        NOT_RUN["deploy"] = f"kubernetes.core could not be fetched: {exc}"
    return env


def scenario_env(env: dict[str, str], scenario: str, cluster: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` with the scenario's own ephemeral directory under tests/.build (molecule's default is
    keyed by the checkout's basename only: two checkouts called alike would share it), and for a
    cluster scenario ``cluster`` (cluster_env)."""
    out = dict(env, MOLECULE_EPHEMERAL_DIRECTORY=str(REPO / "tests" / ".build" / "molecule" / scenario / "ephemeral"))
    if scenario in CLUSTER_SCENARIOS:
        out.update(cluster or {})
    return out


def left_behind(env: dict[str, str]) -> dict[str, str]:
    """This checkout's molecule containers still there (extensions/molecule/shared/create.yml labels
    each with the project directory and its scenario): container name -> scenario."""
    proc = subprocess.run(
        [
            "podman",
            "ps",
            "--all",
            "--filter",
            f"label=gpustack.molecule.project={REPO}",
            "--format",
            '{{.Names}} {{index .Labels "gpustack.molecule.scenario"}}',
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def test_scenarios_are_where_molecule_looks_in_a_collection() -> None:
    """Molecule reads a collection's scenarios from extensions/molecule/ (its shared config.yml
    there): nothing is left at molecule/, which would switch it back to role mode with a warning."""
    assert not (REPO / "molecule").exists()
    assert (SCENARIO_DIR / "config.yml").is_file()
    assert sorted(p.parent.name for p in SCENARIO_DIR.glob("*/molecule.yml")) == sorted(SCENARIOS)


def timestamped(stream: IO[bytes], log: Path, t0: float) -> None:
    """Copy a scenario's output into its log, each line prefixed with the seconds since its start."""
    with log.open("w", encoding="utf-8") as out:
        for raw in stream:
            out.write(f"{time.monotonic() - t0:6.1f} {raw.decode('utf-8', 'replace')}")
            out.flush()


def start(scenario: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], threading.Thread, float]:
    """``molecule test -s <scenario>`` in the background, its output copied into its log."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [str(BIN / "molecule"), "test", "-s", scenario],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    copier = threading.Thread(target=timestamped, args=(proc.stdout, LOGS / f"{scenario}.log", t0), daemon=True)
    copier.start()
    return proc, copier, t0


def the_cluster(request: pytest.FixtureRequest) -> dict[str, str]:
    """cluster_env, or {} with every cluster scenario in NOT_RUN when this machine cannot run the
    cluster (kube_cluster skips): the podman scenarios still run."""
    try:
        env: dict[str, str] = request.getfixturevalue("cluster_env")
    except pytest.skip.Exception as exc:
        NOT_RUN.update(dict.fromkeys(CLUSTER_SCENARIOS, f"no cluster to run against: {exc}"))
        return {}
    return env


@pytest.fixture(scope="module")
def runs(molecule_env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[dict[str, tuple[int, str, float]]]:
    """``molecule test -s <scenario>`` for every scenario, side by side: scenario -> (exit status,
    output, seconds). The podman scenarios start first; the cluster scenarios once the session's
    cluster is there (started meanwhile, when tests/cluster did not start it already)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    started: dict[str, tuple[subprocess.Popen[bytes], threading.Thread, float]] = {}
    cluster: dict[str, str] = {}
    results: dict[str, tuple[int, str, float]] = {}
    try:
        for scenario in SCENARIOS:
            if scenario not in CLUSTER_SCENARIOS:
                started[scenario] = start(scenario, scenario_env(molecule_env, scenario))
        cluster = the_cluster(request)
        for scenario in CLUSTER_SCENARIOS:
            if scenario not in NOT_RUN:
                started[scenario] = start(scenario, scenario_env(molecule_env, scenario, cluster))
        deadline = time.monotonic() + TIMEOUT
        while len(results) < len(started) and time.monotonic() < deadline:
            for scenario, (proc, copier, t0) in started.items():
                if scenario not in results and proc.poll() is not None:
                    copier.join(timeout=30)
                    log = (LOGS / f"{scenario}.log").read_text(encoding="utf-8", errors="replace")
                    results[scenario] = (proc.returncode, log, time.monotonic() - t0)
            time.sleep(0.5)
        for scenario in set(started) - set(results):
            results[scenario] = (-1, f"molecule test -s {scenario} did not finish within {TIMEOUT} s", TIMEOUT)
        (LOGS / "seconds.txt").write_text("".join(f"{s} {r[2]:.0f}\n" for s, r in sorted(results.items())))
        yield results
    finally:
        unfinished = set()
        for scenario, (proc, _, _) in started.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                unfinished.add(scenario)
        # a scenario that died half way must not leave its container, or its objects in the cluster, behind
        left = set(left_behind(molecule_env).values()) | (unfinished & set(CLUSTER_SCENARIOS))
        for scenario in sorted(left & set(SCENARIOS)):
            subprocess.run(
                [str(BIN / "molecule"), "destroy", "-s", scenario],
                cwd=REPO,
                env=scenario_env(molecule_env, scenario, cluster),
                capture_output=True,
                timeout=300,
                check=False,
            )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scenario(runs: dict[str, tuple[int, str, float]], scenario: str) -> None:
    if scenario in NOT_RUN:
        pytest.skip(NOT_RUN[scenario])
    rc, output, _ = runs[scenario]
    tail = output[-6000:]
    assert rc == 0, f"molecule test -s {scenario} exited {rc} (log: {LOGS / scenario}.log)\n{tail}"
    for action in ACTIONS:
        assert f"[{scenario} > {action}] Executed: Successful" in output or (
            action == "verify" and f"[{scenario} > verify] Verifier completed successfully." in output
        ), f"{action} did not run successfully\n{tail}"
    assert re.search(r"Idempotence test failed", output) is None
    verified = re.search(r"=+ (\d+) passed(?:, (\d+) \w+)* in [\d.]+s", output)
    assert verified and int(verified.group(1)) > 0, f"no testinfra test passed\n{tail}"
    assert " failed" not in verified.group(0)


def test_no_container_is_left_behind(runs: dict[str, tuple[int, str, float]], molecule_env: dict[str, str]) -> None:
    assert runs
    assert left_behind(molecule_env) == {}
