"""Image mode (supplement §8, worker/install.py): without ``*`` in ``--disable-applications`` the worker
installs its packaged chart as the release ``gpustack-operator-device-manager`` through helm, with every
``GPUSTACK_*`` of its environment in ``deviceManager.env``.

helm is a stand-in here (a script recording its argv and the values file it was handed); the values are
also rendered by the real helm (tests/tools/helm.sh) with ``helm template`` against the chart itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from gpustack_operator import __version__
from gpustack_operator.settings import PciVendorMatch
from gpustack_operator.worker.install import (
    RELEASE,
    ChartInstaller,
    InstallPlan,
    forwarded_env,
    install_values,
    plan_install,
    run_helm,
)
from gpustack_operator.worker.run import Worker, WorkerOptions

from tests.tools.helm import HelmUnavailableError, provide
from tests.unit.worker.standin import WorkerStandIn

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "operator" / "chart" / "gpustack-operator"
BIN = Path(sys.executable).parent
NS = "gpustack-system"
AMD_LABELS = {
    "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
    "feature.node.kubernetes.io/cpu-model.family": "25",
    "feature.node.kubernetes.io/cpu-model.id": "1",
}

# A helm stand-in: appends {"argv": [...], "values": <the --values file, parsed>} to $RECORD, one JSON
# line per run; exits with the number in $FAIL_FIRST for that many runs (counted in $RECORD.count).
HELM_STANDIN = """#!{python}
import json, os, sys
argv = sys.argv[1:]
values = json.load(open(argv[argv.index("--values") + 1])) if "--values" in argv else None
with open(os.environ["RECORD"], "a") as out:
    out.write(json.dumps({{"argv": argv, "values": values}}) + "\\n")
count_file = os.environ["RECORD"] + ".count"
count = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(count + 1))
if count < int(os.environ.get("FAIL_FIRST", "0")):
    sys.stderr.write("Error: INSTALLATION FAILED: another operation (install/upgrade/rollback) is in progress\\n")
    sys.exit(1)
"""


@pytest.fixture
def helm_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    """Install the stand-in as ``tmp/helm``; returns a reader of its runs."""
    script = tmp_path / "helm"
    script.write_text(HELM_STANDIN.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "helm-runs.jsonl"
    monkeypatch.setenv("RECORD", str(record))

    def runs() -> list[dict[str, Any]]:
        if not record.exists():
            return []
        return [json.loads(line) for line in record.read_text().splitlines()]

    return runs


def wait_for(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s")


# -- when, and with what --------------------------------------------------------------------------


def test_chart_mode_installs_nothing() -> None:
    assert plan_install(["*"], {}, namespace=NS) is None
    assert plan_install(["kueue", "*"], {}, namespace=NS) is None


def test_image_mode_installs_the_packaged_chart_as_the_spec_s_release() -> None:
    plan = plan_install([], {"GPUSTACK_CONF_DIR": "/opt/conf", "PATH": "/bin"}, namespace="ops")
    assert plan is not None
    assert plan.chart == f"/opt/conf/charts/gpustack-operator-{__version__}.tgz"
    assert plan.helm == "helm" and plan.namespace == "ops"
    assert plan.argv("/v.json") == [
        "helm",
        "upgrade",
        "--install",
        "gpustack-operator-device-manager",
        f"/opt/conf/charts/gpustack-operator-{__version__}.tgz",
        "--namespace",
        "ops",
        "--values",
        "/v.json",
    ]
    default = plan_install([], {}, namespace=NS)
    assert default is not None and default.chart == f"/etc/gpustack/charts/gpustack-operator-{__version__}.tgz"


def test_the_helm_binary_and_chart_from_flags_or_env() -> None:
    from_env = plan_install([], {"HELM_BINARY": "/usr/local/bin/helm"}, namespace=NS)
    assert from_env is not None and from_env.helm == "/usr/local/bin/helm"
    flags = plan_install(
        [], {"HELM_BINARY": "/x"}, namespace=NS, helm="/opt/helm", chart="/c.tgz", kubeconfig="/kc", api_server="u"
    )
    assert flags is not None and (flags.helm, flags.chart) == ("/opt/helm", "/c.tgz")
    assert flags.argv("v")[-2:] == ["--kubeconfig", "/kc"]  # the kubeconfig names its own server
    server = plan_install([], {}, namespace=NS, api_server="https://10.0.0.1:6443")
    assert server is not None and server.argv("v")[-2:] == ["--kube-apiserver", "https://10.0.0.1:6443"]


def test_device_manager_disabled_leaves_nothing_to_install() -> None:
    assert plan_install(["device-manager"], {}, namespace=NS) is None
    assert plan_install(["kueue", "model-manager"], {}, namespace=NS) is not None  # not in this chart


def test_every_gpustack_variable_goes_to_the_device_manager() -> None:
    env = {
        "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE": "false",
        "GPUSTACK_NVIDIA_PCI_VENDOR_ID": "10de",
        "GPUSTACK_CONF_DIR": "/etc/gpustack",
        "GPUSTACK_lower": "x",
        "GPUSTACK_": "y",
        "HOME": "/root",
        "KUBERNETES_POD_NAMESPACE": NS,
    }
    kept, refused = forwarded_env(env)
    assert kept == {
        "GPUSTACK_CONF_DIR": "/etc/gpustack",
        "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE": "false",
        "GPUSTACK_NVIDIA_PCI_VENDOR_ID": "10de",
    }
    assert refused == ["GPUSTACK_", "GPUSTACK_lower"]
    assert install_values([], env) == {"worker": {"enabled": False}, "deviceManager": {"env": kept}}
    assert install_values(["node-feature-discovery"], {})["node-feature-discovery"] == {"enabled": False}


# -- the helm run -------------------------------------------------------------------------------------


def test_helm_is_run_with_the_values_file(tmp_path: Path, helm_standin: Callable[[], list[dict[str, Any]]]) -> None:
    values = install_values([], {"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"})
    plan = InstallPlan(helm=str(tmp_path / "helm"), chart="/c.tgz", namespace=NS, values=values)
    assert run_helm(plan) is None
    (run,) = helm_standin()
    assert run["argv"][:6] == ["upgrade", "--install", RELEASE, "/c.tgz", "--namespace", NS]
    assert run["values"] == values


def test_a_failed_helm_is_one_line_and_retried(
    tmp_path: Path, helm_standin: Callable[[], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_FIRST", "2")
    plan = InstallPlan(helm=str(tmp_path / "helm"), chart="/c.tgz", namespace=NS, values={})
    failure = run_helm(plan)
    assert (
        failure
        == "helm exited 1: Error: INSTALLATION FAILED: another operation (install/upgrade/rollback) is in progress"
    )
    installer = ChartInstaller(plan, backoff_initial=0.01, backoff_max=0.02)
    assert installer.run() is True
    assert installer.attempts == 2 and len(helm_standin()) == 3


def test_no_helm_binary_is_a_clear_line(tmp_path: Path) -> None:
    plan = InstallPlan(helm=str(tmp_path / "absent"), chart="/c.tgz", namespace=NS, values={})
    assert run_helm(plan) == f"no helm binary at {str(tmp_path / 'absent')!r} (--helm-binary or HELM_BINARY)"
    (tmp_path / "plain").write_text("")
    plan = InstallPlan(helm=str(tmp_path / "plain"), chart="/c.tgz", namespace=NS, values={})
    assert run_helm(plan) == f"{str(tmp_path / 'plain')!r} is not executable"


# -- in the worker ----------------------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


def test_the_leader_installs_once(
    api: WorkerStandIn, tmp_path: Path, helm_standin: Callable[[], list[dict[str, Any]]]
) -> None:
    plan = InstallPlan(helm=str(tmp_path / "helm"), chart="/c.tgz", namespace=NS, values={"worker": {"enabled": False}})
    options = WorkerOptions(
        namespace=NS, vendors=[PciVendorMatch(vendor="10de")], identity="w1", retry_period=0.05, install=plan
    )
    worker = Worker(kubernetes.client.ApiClient(api.configuration()), options)
    worker.start()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert worker.installer is not None
        assert worker.installer.installed.wait(10)
        api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
        wait_for(lambda: api.obj("nodefeatures", "n1-gpustack-worker", NS))
        time.sleep(0.3)  # more rounds of the loop: still the one install
        assert len(helm_standin()) == 1
    finally:
        worker.stop()
        thread.join(10)


def _worker_process(api: WorkerStandIn, tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "KUBERNETES_POD_NAMESPACE": NS, "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET": "false"}
    argv = [str(BIN / "gpustack-operator"), "worker", "--kube-api-server", api.url, "--helm-binary"]
    argv += [str(tmp_path / "helm"), "--chart", "/charts/x.tgz", "--kube-leader-election=false", "--secure-port=0"]
    argv += flags
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err


def test_the_worker_process_in_image_mode(
    api: WorkerStandIn, tmp_path: Path, helm_standin: Callable[[], list[dict[str, Any]]]
) -> None:
    proc = _worker_process(api, tmp_path, "--disable-applications", "node-feature-discovery", "-v=2")
    try:
        (run,) = wait_for(helm_standin, 30)
    finally:
        err = _stop(proc)
    assert run["argv"][:6] == ["upgrade", "--install", RELEASE, "/charts/x.tgz", "--namespace", NS]
    assert run["argv"][-2:] == ["--kube-apiserver", api.url]
    assert run["values"]["worker"] == {"enabled": False}
    assert run["values"]["node-feature-discovery"] == {"enabled": False}
    assert run["values"]["deviceManager"]["env"]["GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET"] == "false"
    assert f"release {RELEASE} installed" in err


def test_the_worker_process_in_chart_mode_runs_no_helm(
    api: WorkerStandIn, tmp_path: Path, helm_standin: Callable[[], list[dict[str, Any]]]
) -> None:
    api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
    proc = _worker_process(api, tmp_path, "--disable-applications=*")
    try:
        wait_for(lambda: api.obj("nodefeatures", "n1-gpustack-worker", NS), 30)  # it leads and acts
        time.sleep(0.5)
    finally:
        _stop(proc)
    assert helm_standin() == []


# -- the real helm, the chart itself ---------------------------------------------------------------


def test_the_values_render_with_the_real_chart(tmp_path: Path) -> None:
    """``helm template`` of the chart with image mode's values: the schema takes them, no worker
    Deployment is rendered, and every Device Manager DaemonSet carries the forwarded variables."""
    try:
        helm = provide(tmp_path / "helm-home")
    except HelmUnavailableError as exc:
        pytest.skip(f"helm is not available: npm cannot fetch it ({exc})")
    env = {"GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE": "false", "GPUSTACK_PCI_CLASS_PREFIXES": "02,03"}
    values = tmp_path / "values.json"
    values.write_text(json.dumps(install_values([], env)))
    proc = helm.run("template", RELEASE, str(CHART), "--namespace", NS, "--values", str(values), timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert not [d for d in docs if d["kind"] == "Deployment"]  # worker.enabled: false
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    assert daemonsets
    for ds in daemonsets:
        (container,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "device-manager"]
        got = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: got.get(k) for k in env} == env, ds["metadata"]["name"]
