"""A real one-node Kubernetes 1.20.2 on 127.0.0.1 for the test suite (docs/testing-kube-local.md).

:meth:`KubeCluster.start` gets the binaries (tests/tools/kube_local/provide.sh: the machine's cache,
else the prebuilt kit when its checksums match ours, else a build from Debian's source), then runs
tests/tools/kube_local/up.sh on a fresh state directory under /tmp: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler on loopback, a private dockerd and the kubelet in a private
mount namespace. Every process it starts is recorded by pid in ``STATE/pid`` and stopped by that pid
(down.sh checks each still names the state directory on its command line) -- never by name.

A cluster that does not come up is a :class:`KubeClusterError` whose message carries the last lines of
every component's log; :func:`cannot_run` names the only reasons the tests skip instead (not root, no
unshare/nsenter, no mount namespace allowed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parent / "kube_local"
PROVIDE_TIMEOUT = 45 * 60.0  # a cold build from Debian's source is ~6 min on 2 idle cores; loaded, more
UP_TIMEOUT_EXTRA = 120.0  # up.sh's other waits: dockerd (60 s), key generation, the image import
DOWN_TIMEOUT = 180.0
STATE_PARENT = "/tmp"  # unix socket paths live under the state dir: up.sh takes at most 40 characters
COMPONENTS = ("etcd", "apiserver", "kcm", "scheduler", "nodens", "dockerd", "kubelet")


class KubeClusterError(RuntimeError):
    """The cluster could not be provided, started, restarted or stopped (the message says what and
    carries the components' log tails)."""


def cannot_run() -> str | None:
    """Why this machine genuinely cannot run the cluster (a reason to skip), or ``None``."""
    if os.geteuid() != 0:
        return "the real cluster needs root (dockerd, the kubelet, a private mount namespace): run the suite as root"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (util-linux): the kubelet runs in a private mount namespace"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"this machine allows no private mount namespace (unshare --mount: {probe.stderr.strip()})"
    return None


def provide_binaries() -> Path:
    """The directory with the six binaries (provide.sh; may build them, once per machine)."""
    try:
        proc = subprocess.run(
            ["bash", str(KIT / "provide.sh")], capture_output=True, text=True, timeout=PROVIDE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise KubeClusterError(f"kube-local: provide.sh took over {PROVIDE_TIMEOUT:.0f} s: {exc}") from exc
    if proc.returncode != 0 or not proc.stdout.strip():
        raise KubeClusterError(
            f"kube-local: the Kubernetes binaries could not be provided (tests/tools/kube_local/provide.sh exit "
            f"{proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"    ({exc})"
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _parse_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return env


@dataclass
class KubeCluster:
    """One running cluster: its state directory and what up.sh wrote there (``STATE/env``)."""

    state: Path
    env: dict[str, str]
    bin_dir: Path
    _core: Any = field(default=None, repr=False)

    # --- lifecycle ------------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        node_name: str = "test-node",
        ready_timeout: float = 180.0,
        api_timeout: float = 120.0,
        bin_dir: Path | None = None,
    ) -> KubeCluster:
        """Provide the binaries (unless ``bin_dir`` names them) and start the cluster; return once the
        node is Ready. Raises :class:`KubeClusterError` (the cluster half started is stopped first)."""
        bin_dir = bin_dir or provide_binaries()
        state = Path(tempfile.mkdtemp(prefix="kl-", dir=STATE_PARENT))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE_LOCAL_", "KUBECONFIG", "DOCKER_"))}
        env |= {
            "KUBE_LOCAL_BIN": str(bin_dir),
            "KUBE_LOCAL_DL": str(bin_dir.parent / "dl"),
            "KUBE_LOCAL_NODE": node_name,
            "KUBE_LOCAL_READY_TIMEOUT": str(int(ready_timeout)),
            "KUBE_LOCAL_API_TIMEOUT": str(int(api_timeout)),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        try:
            proc = subprocess.run(
                ["bash", str(KIT / "up.sh"), str(state)],
                capture_output=True,
                text=True,
                env=env,
                timeout=ready_timeout + api_timeout + UP_TIMEOUT_EXTRA,
                check=False,
            )
            failure = None if proc.returncode == 0 else f"up.sh exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"
        except subprocess.TimeoutExpired:
            failure = f"up.sh did not finish within {ready_timeout + api_timeout + UP_TIMEOUT_EXTRA:.0f} s"
        cluster = cls(state=state, env=_parse_env(state / "env") if (state / "env").is_file() else {}, bin_dir=bin_dir)
        if failure is None and not cluster.node_ready():
            failure = f"up.sh returned but node {node_name} is not Ready"
        if failure is not None:
            report = cluster.logs_tail()
            cluster.stop(check=False)
            raise KubeClusterError(
                f"kube-local: the cluster did not come up in {state}: {failure}\n"
                f"the last lines of each component's log:\n{report}"
            )
        return cluster

    def stop(self, check: bool = True) -> None:
        """Stop every process of the cluster by its recorded pid (down.sh), then remove the state dir.
        With ``check``, a process left running is a :class:`KubeClusterError`."""
        if not self.state.exists():
            return
        proc = subprocess.run(
            ["bash", str(KIT / "down.sh"), str(self.state)],
            capture_output=True,
            text=True,
            timeout=DOWN_TIMEOUT,
            check=False,
        )
        left = self.running()
        for name, pid in left.items():  # down.sh gave up on it: KILL by the recorded pid, nothing else
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            del name
        if check and left:
            raise KubeClusterError(f"kube-local: still running after down.sh: {left}; down.sh said:\n{proc.stderr}")

    # --- what a test reads ---------------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self.env.get("KUBE_LOCAL_NODE", "test-node")

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def device_plugin_socket(self) -> Path:
        return Path(self.env["DEVICE_PLUGIN_SOCKET"])

    @property
    def pod_resources_socket(self) -> Path:
        return Path(self.env["PODRESOURCES_SOCKET"])

    @property
    def host_write_root(self) -> Path:
        """Where the node's host paths are for a device plugin (the kubelet's /var/lib is its var/lib)."""
        return Path(self.env["HOST_WRITE_ROOT"])

    @property
    def log_dir(self) -> Path:
        return self.state / "log"

    def pid(self, name: str) -> int | None:
        """The recorded pid of a component when it is still running and is ours (names the state dir)."""
        try:
            pid = int((self.state / "pid" / name).read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if str(self.state) in cmdline else None

    def running(self) -> dict[str, int]:
        pid_dir = self.state / "pid"
        names = sorted(p.name for p in pid_dir.iterdir()) if pid_dir.is_dir() else []
        return {name: pid for name in names if (pid := self.pid(name)) is not None}

    def logs_tail(self, lines: int = 15) -> str:
        logs = sorted(self.log_dir.glob("*.log")) if self.log_dir.is_dir() else []
        if not logs:
            return f"    (no logs in {self.log_dir})"
        return "\n".join(f"  {p.name}:\n{_tail(p, lines)}" for p in logs)

    def kubectl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.state / "kubectl"), *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def core(self) -> Any:
        """A ``kubernetes.client.CoreV1Api`` on the cluster (the TLS certificate verified against the
        API server's own self-signed one)."""
        if self._core is None:
            import kubernetes.client

            config = kubernetes.client.Configuration()
            config.host = self.env["KUBE_LOCAL_API"]
            config.api_key = {"authorization": f"Bearer {self.env['KUBE_LOCAL_TOKEN']}"}
            config.ssl_ca_cert = str(self.state / "certs" / "apiserver.crt")
            config.proxy = None
            self._core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))
        return self._core

    def node(self) -> Any:
        return self.core().read_node(self.node_name)

    def node_ready(self) -> bool:
        try:
            conditions = self.node().status.conditions or []
        except Exception:  # any failure to read the Node is "not Ready" here
            return False
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    def allocatable(self) -> dict[str, str]:
        return dict(self.node().status.allocatable or {})

    def docker(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The docker CLI on the cluster's private dockerd."""
        env = dict(os.environ) | {"DOCKER_HOST": self.env["DOCKER_HOST"]}
        return subprocess.run(["docker", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)

    def container_id(self, pod: str, container: str = "main", namespace: str = "default") -> str:
        proc = self.docker("ps", "-q", "--filter", f"name=k8s_{container}_{pod}_{namespace}_")
        ids = proc.stdout.split()
        if proc.returncode != 0 or len(ids) != 1:
            raise KubeClusterError(f"no single running container {container} of pod {namespace}/{pod}: {proc}")
        return ids[0]

    def container_env(self, pod: str, container: str = "main", namespace: str = "default") -> dict[str, str]:
        """The environment the runtime gave the container (what the device plugin's Allocate injected
        among it)."""
        cid = self.container_id(pod, container, namespace)
        proc = self.docker("inspect", "--format", "{{json .Config.Env}}", cid)
        if proc.returncode != 0:
            raise KubeClusterError(f"docker inspect {cid}: {proc.stderr}")
        pairs: list[str] = json.loads(proc.stdout)
        return dict(p.split("=", 1) for p in pairs if "=" in p)

    def container_exec(self, pod: str, *argv: str, container: str = "main", namespace: str = "default") -> str:
        cid = self.container_id(pod, container, namespace)
        proc = self.docker("exec", cid, *argv)
        if proc.returncode != 0:
            raise KubeClusterError(f"docker exec {cid} {argv}: {proc.stderr}")
        return proc.stdout

    # --- the kubelet --------------------------------------------------------------------------------

    def kubelet_healthy(self) -> bool:
        url = self.env.get("KUBELET_HEALTHZ", "")
        if not url:
            return False
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
        try:
            with opener.open(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def restart_kubelet(self, timeout: float = 120.0) -> None:
        """Stop the kubelet and start it again with the same flags in the node's mount namespace
        (restart-kubelet.sh); return once the new kubelet answers /healthz and has made its device
        plugin registration socket anew."""
        socket = self.device_plugin_socket

        def identity() -> tuple[int, int] | None:  # the inode alone may be reused at once for the new socket
            try:
                st = socket.stat()
            except OSError:
                return None
            return (st.st_ino, st.st_ctime_ns)

        before = identity()
        old = self.pid("kubelet")
        proc = subprocess.run(
            ["bash", str(KIT / "restart-kubelet.sh"), str(self.state)],
            capture_output=True,
            text=True,
            timeout=DOWN_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0:
            raise KubeClusterError(f"restart-kubelet.sh exit {proc.returncode}: {proc.stderr}\n{self.logs_tail()}")
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            new = self.pid("kubelet")
            now = identity()
            fresh = now is not None and now != before
            healthy = self.kubelet_healthy()
            if new is not None and new != old and fresh and healthy:
                return
            seen = f"kubelet pid {new} (was {old}), registration socket made anew: {fresh}, /healthz ok: {healthy}"
            time.sleep(0.25)
        raise KubeClusterError(
            f"the kubelet did not come back within {timeout:.0f} s of restart-kubelet.sh ({seen}):\n{self.logs_tail()}"
        )

    def wait(self, what: str, predicate: Any, timeout: float = 90.0, period: float = 0.5) -> Any:
        """Poll ``predicate()`` until it returns a truthy value (returned); at the timeout an
        AssertionError naming ``what`` with the components' log tails. An AssertionError the predicate
        raises ends the wait at once (it knows the state can no longer come)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = predicate()
            except AssertionError:  # the predicate saw it can never come true: say so now
                raise
            except Exception as exc:  # a transient failure (the API server busy): reported if it lasts
                last = exc
            else:
                if last:
                    if os.environ.get("KUBE_CLUSTER_TRACE"):
                        print(f"[{time.monotonic() - (deadline - timeout):6.1f} s] {what}", flush=True)
                    return last
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f} s (last seen: {last!r})\n{self.logs_tail(25)}")
            time.sleep(period)


def pod_manifest(
    name: str,
    limits: Mapping[str, str] | None = None,
    *,
    node_name: str | None = None,
    containers: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """A pod the cluster can run: host network (no CNI), the local busybox image, no service account
    token volume; pinned to ``node_name`` when given, else placed by the scheduler."""
    wanted = dict(containers) if containers is not None else {"main": dict(limits or {})}
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": cname,
                "image": "localhost/pause:1",
                "imagePullPolicy": "Never",
                "command": ["sleep", "infinity"],
                "resources": {"limits": dict(lim)} if lim else {},
            }
            for cname, lim in wanted.items()
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
