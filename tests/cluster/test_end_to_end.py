"""The whole story on the suite's real one-node cluster (issue 19 "End to end"): the operator image built
here and loaded into the cluster's dockerd, ``playbooks/deploy.yml`` run against the cluster, and then

1. the worker's Pod runs the image and applies its CRDs and the ``gpustack-cpu-info`` NodeFeatureRule;
2. the NVIDIA Device Manager DaemonSet's Pod lands on the node (labelled ``pci-10de.present`` as NFD
   would), its node view a fixture tree mounted from the host (``rtx4090``: one card, the NVML stand-in
   library inside the tree), and becomes Ready -- ``helm --wait`` and ``--atomic`` for real;
3. it registers with the real kubelet: the Node's allocatable shows the card;
4. a workload Pod asking ``nvidia.com/gpu: 1`` runs with the card's UUID in ``NVIDIA_VISIBLE_DEVICES``;
5. ``verify`` (the playbook's last play) passes: the host's view and the cluster's agree;
6. the host loses the card -- its view, the tree ``accelerator_facts`` reads, no longer has it (PCI
   function and NVML record gone) while the Device Manager's mounted copy, and so the cluster, still
   advertise it: the window the drift check exists for -- and ``playbooks/verify.yml`` fails, naming the
   node and the difference.

Each step is timed; the table is printed and written to ``tests/.build/end-to-end.txt``.

What is real: etcd, kube-apiserver (``--allow-privileged``, as kubeadm sets it), controller-manager,
scheduler, kubelet 1.20.2 with dockershim, dockerd, runc, helm 4.1.4 and kubernetes.core 6.6.0, the
operator image (operator/Containerfile on the molecule base: Debian 12 + CPython 3.12) with the package,
the service-account token the Pods reach the API server with. What is not: the card (fixture sysfs and the
gcc-built NVML stand-in), NFD (its two CRDs are minimal stand-ins and the node's label is set by the
test), the workload's image (busybox). What the cluster cannot give, and the values that work around it
(docs/testing-kube-local.md "The end-to-end demo"): no pod network (``hostNetwork`` on both workloads), no
kube-proxy for the ``kubernetes`` Service (``KUBERNETES_SERVICE_HOST``/``_PORT`` point at the API server on
loopback through ``extraEnv``), no ``nvidia`` runtime in dockershim (``runtimeInjectsDriver: false``: no
RuntimeClass), a host ``/etc/containerd`` the test will not touch (``containerdConfigDir`` under the
node's private ``/var/lib``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from gpustack_operator.kube.rest import request

from tests.cluster.conftest import stage_hami_core
from tests.cluster.test_deploy_cluster import (
    NS,
    RELEASE,
    ansible_env,
    helm_env,
    recap_of,
)
from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD, apply_crd, client_of
from tests.cluster.test_worker import RULE_CRD
from tests.conftest import BIN, REPO, host
from tests.tools.kube_cluster import KubeCluster, pod_manifest

pytestmark = pytest.mark.ansible

GPU = "nvidia.com/gpu"
PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
MANUFACTURERS = ("amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead")
DM_DAEMONSET = "gpustack-operator-device-manager-nvidia"
WORKER = "gpustack-operator-worker"
VIEW_MOUNT = "/node-view"
CARD_PCI = "0000:01:00.0"
TIMINGS = REPO / "tests" / ".build" / "end-to-end.txt"


@dataclass
class Clock:
    """Each step's wall time, printed and written at the end."""

    started: float = field(default_factory=time.monotonic)
    steps: list[tuple[str, float]] = field(default_factory=list)
    _last: float = field(default_factory=time.monotonic)

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.steps.append((step, now - self._last))
        self._last = now

    def table(self) -> str:
        rows = [f"{seconds:8.1f} s  {step}" for step, seconds in self.steps]
        rows.append(f"{time.monotonic() - self.started:8.1f} s  in all")
        return "\n".join(rows) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def lose_the_card(root: Path) -> None:
    """The card falls off the bus: its PCI function (the device directory and the bus link) and the NVML
    stand-in's record of it are gone from the host's tree."""
    link = root / "sys/bus/pci/devices" / CARD_PCI
    target = link.resolve()
    link.unlink()
    assert target.is_relative_to(root), target
    shutil.rmtree(target)
    nvml = root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1.fixture"
    text = nvml.read_text()
    assert "[device]" in text
    nvml.write_text(text.split("[device]", 1)[0])


def the_card_uuid(root: Path) -> str:
    """The card's UUID as the NVML stand-in of the tree reports it."""
    text = (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1.fixture").read_text()
    (uuid,) = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("uuid=")]
    return uuid


def build_and_load_image(cluster: KubeCluster) -> str:
    """The molecule base (podman_image.sh; cached per machine) and the operator image on it
    (operator_image.sh: reused while its recipe is unchanged), loaded into the cluster's dockerd."""
    env = dict(os.environ) | {"DOCKER_HOST": cluster.env["DOCKER_HOST"]}
    base = subprocess.run(
        ["bash", str(REPO / "tests/tools/podman_image.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    if base.returncode != 0:
        pytest.skip(f"the image base cannot be built on this machine: {base.stderr.strip()[-600:]}")
    proc = subprocess.run(
        ["bash", str(REPO / "tests/tools/operator_image.sh"), "--docker-load"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if proc.returncode == 3:
        pytest.skip(f"helm could not be fetched for the image: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def node_labels(client: kubernetes.client.ApiClient, node: str) -> dict[str, str]:
    got = request(client, "GET", f"/api/v1/nodes/{node}")
    labels: dict[str, str] = got["metadata"].get("labels") or {}
    return labels


def label_node(client: kubernetes.client.ApiClient, node: str, value: str | None) -> None:
    body = {"metadata": {"labels": {PCI_LABEL: value}}}
    request(client, "PATCH", f"/api/v1/nodes/{node}", body=body, content_type="application/merge-patch+json")


def pods_of(client: kubernetes.client.ApiClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = request(client, "GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    return items


@pytest.fixture
def demo(
    kube_cluster: KubeCluster,
    helm: Path,
    collections: Path,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """The cluster with NFD's CRDs, the node labelled as NFD would, the node views, and afterwards: the
    release uninstalled and its Pods gone, the label and the test's Pods removed, a host ``/etc/cdi`` the
    kubelet had to create (the chart mounts it DirectoryOrCreate) removed again."""
    client = client_of(kube_cluster)
    apply_crd(client, NODE_FEATURE_CRD)
    apply_crd(client, RULE_CRD)
    dm_view, host_view = tmp_path / "dm-view", tmp_path / "host-view"
    for view in (dm_view, host_view):
        shutil.copytree(host("rtx4090"), view, symlinks=True)
    stage_hami_core(kube_cluster.host_write_root)
    etc_cdi_was_there = Path("/etc/cdi").exists()
    work = tmp_path / "work"
    work.mkdir()
    yield {"client": client, "dm_view": dm_view, "host_view": host_view, "work": work}
    subprocess.run(
        [str(helm), "uninstall", RELEASE, "-n", NS, "--wait", "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True,
        env=helm_env(work),
        timeout=180,
        check=False,
    )
    core = kube_cluster.core()
    for pod in core.list_namespaced_pod("default").items:
        core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)
    label_node(client, kube_cluster.node_name, None)
    kube_cluster.wait("the release's Pods are gone", lambda: not pods_of(client), timeout=120)
    if not etc_cdi_was_there:
        with contextlib.suppress(OSError):  # not empty: someone else's now
            Path("/etc/cdi").rmdir()


def deploy_variables(cluster: KubeCluster, dm_view: Path, helm_binary: Path) -> dict[str, Any]:
    api_port = cluster.env["KUBE_LOCAL_API"].rsplit(":", 1)[1]
    api_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": api_port},
    ]
    rows: dict[str, Any] = {m: {"enabled": False} for m in MANUFACTURERS if m != "nvidia"}
    rows["nvidia"] = {"runtimeInjectsDriver": False}
    return {
        "deploy_kubeconfig": str(cluster.kubeconfig),
        "deploy_helm_binary": str(helm_binary),
        "deploy_image": {"pullPolicy": "Never"},
        "deploy_manufacturers": rows,
        "deploy_wait": True,
        "deploy_atomic": True,
        "deploy_timeout": "4m0s",
        "deploy_values": {
            "worker": {"hostNetwork": True, "extraEnv": api_env, "securePort": free_port()},
            "deviceManager": {
                "hostNetwork": True,
                "extraEnv": api_env,
                "securePort": free_port(),
                "containerdConfigDir": "/var/lib/gpustack-e2e/containerd",
                "extraArgs": [f"--detect-root={VIEW_MOUNT}"],
                "extraVolumes": [{"name": "node-view", "hostPath": {"path": str(dm_view), "type": "Directory"}}],
                "extraVolumeMounts": [{"name": "node-view", "mountPath": VIEW_MOUNT, "readOnly": True}],
            },
        },
    }


def run_playbook(
    cluster: KubeCluster, collections_dir: Path, work: Path, playbook: str, host_view: Path, extra: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    inventory = work / "fleet.yml"
    node = {"gpustack_host_root": str(host_view), "gpustack_manufacturers": ["nvidia"]}
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"vars": local, "hosts": {cluster.node_name: node}}}))
    variables = extra | {
        "verify_kubeconfig": str(cluster.kubeconfig),
        "verify_report_dir": str(work / "reports"),
        "preflight_report_dir": str(work / "reports"),
        "preflight_dry_run": True,
        "preflight_fail_on": "never",
    }
    (work / "vars.json").write_text(json.dumps(variables))
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / playbook)]
    return subprocess.run(
        [*argv, "-e", f"@{work / 'vars.json'}"],
        capture_output=True,
        text=True,
        env=ansible_env(work, collections_dir),
        timeout=600,
        check=False,
    )


def container_log(cluster: KubeCluster, pod: str) -> str:
    """The newest container's log of ``pod`` (through the cluster's dockerd: kubectl logs cannot reach
    the kubelet here)."""
    ps = cluster.docker(
        "ps",
        "-aq",
        "--filter",
        f"label=io.kubernetes.pod.name={pod}",
        "--filter",
        "label=io.kubernetes.docker.type=container",
    )
    ids = ps.stdout.split()
    assert ids, f"no container of {pod}"
    logs = cluster.docker("logs", ids[0])
    return logs.stdout + logs.stderr


def diagnose(cluster: KubeCluster, client: kubernetes.client.ApiClient) -> str:
    """The release's Pods and the last lines of their containers' logs (for a failure message)."""
    lines = []
    for pod in pods_of(client):
        name = pod["metadata"]["name"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        lines.append(f"{name}: {pod['status'].get('phase')} {json.dumps(statuses)[:600]}")
        ps = cluster.docker("ps", "-aq", "--filter", f"label=io.kubernetes.pod.name={name}")
        for cid in ps.stdout.split()[:2]:
            logs = cluster.docker("logs", "--tail", "25", cid)
            lines.append(f"--- {name} {cid}:\n{logs.stdout[-2500:]}{logs.stderr[-2500:]}")
    return "\n".join(lines)


def assert_the_release_runs(kube_cluster: KubeCluster, client: kubernetes.client.ApiClient, node: str) -> None:
    """What the deploy left running: the worker's objects, both Pods on the image, the Device Manager's
    Pod Ready on the node and registered with the kubelet."""
    # 1. the worker ran the image and applied what it owns
    request(client, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/devices.worker.gpustack.ai")
    rule = request(client, "GET", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info")
    assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpustack-operator", rule["metadata"]
    pods = {p["metadata"]["name"]: p for p in pods_of(client)}
    images = {c["image"] for p in pods.values() for c in p["spec"]["containers"]}
    assert images == {"gpustack/gpustack-operator-py:0.1.0"}, images
    # 2. the Device Manager's Pod landed on the node and is Ready (helm waited for it)
    (dm_pod,) = [p for name, p in pods.items() if name.startswith(DM_DAEMONSET)]
    assert dm_pod["spec"]["nodeName"] == node
    ready = {c["type"]: c["status"] for c in dm_pod["status"]["conditions"]}
    assert ready["Ready"] == "True", dm_pod["status"]
    worker_feature = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures/{node}-gpustack-worker"
    assert request(client, "GET", worker_feature)["spec"]["labels"], "the worker's NodeFeature has no labels"
    # 3. registered with the real kubelet (and reached its pod-resources socket): the card is allocatable
    dm_log = container_log(kube_cluster, dm_pod["metadata"]["name"])
    assert "nvidia.com/gpu: registered with the kubelet" in dm_log, dm_log[-3000:]
    assert "could not be asked" not in dm_log, dm_log[-3000:]  # the pod-resources List answered
    assert "Traceback" not in dm_log, dm_log[-3000:]


def test_deploy_then_a_workload_gets_the_card_and_verify_catches_the_lost_card(
    kube_cluster: KubeCluster,
    helm: Path,
    collections: Path,
    demo: dict[str, Any],
) -> None:
    clock = Clock()
    client, work = demo["client"], demo["work"]
    node = kube_cluster.node_name
    image = build_and_load_image(kube_cluster)
    clock.lap(f"operator image {image} built (or current) and loaded into the cluster's dockerd")

    label_node(client, node, "true")
    extra = deploy_variables(kube_cluster, demo["dm_view"], helm)
    proc = run_playbook(kube_cluster, collections, work, "deploy.yml", demo["host_view"], extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:] + "\n" + diagnose(kube_cluster, client)
    clock.lap("playbooks/deploy.yml: preflight (dry), deploy (helm --wait --atomic), verify")

    assert_the_release_runs(kube_cluster, client, node)  # 1., 2. and the registration of 3.
    kube_cluster.wait(f"the Node's allocatable shows {GPU}: 1", lambda: kube_cluster.allocatable().get(GPU) == "1")
    clock.lap("the Node's allocatable shows the card")
    # 5. verify (the playbook's last play) agreed
    assert "cluster verify: 1 nodes, 1 ok, 0 drift, 0 error" in out, out[-4000:]
    assert recap_of(proc, node)["failed"] == 0

    # 4. a workload gets the card
    manifest = pod_manifest("e2e-workload", {GPU: "1"})  # placed by the scheduler
    kube_cluster.core().create_namespaced_pod("default", manifest)

    def running() -> bool:
        return bool(kube_cluster.core().read_namespaced_pod("e2e-workload", "default").status.phase == "Running")

    kube_cluster.wait("the workload Pod runs", running, timeout=120)
    env = kube_cluster.container_env("e2e-workload")
    uuid = the_card_uuid(demo["dm_view"])
    assert env.get("NVIDIA_VISIBLE_DEVICES") == uuid, env
    clock.lap("a workload Pod runs with the card")

    # 6. the host loses the card; the cluster still advertises it: verify fails, naming node and difference
    lose_the_card(demo["host_view"])
    failed = run_playbook(kube_cluster, collections, work, "verify.yml", demo["host_view"], {})
    text = failed.stdout + failed.stderr
    assert failed.returncode != 0, text[-4000:]
    assert "cluster verify: 1 nodes, 0 ok, 1 drift, 0 error" in text, text[-4000:]
    assert recap_of(failed, node)["failed"] == 1
    assert (
        f"{node} (node {node}): drift - Devices advertises {uuid} (nvidia geforce-rtx-4090) the host no longer has"
        in text
    ), text[-4000:]
    clock.lap("verify after the host lost the card: failed, naming the node and the difference")
    junit = max((work / "reports").glob("verify-*.xml"), key=lambda p: p.stat().st_mtime).read_text()
    assert f'name="{node}"' in junit and "<failure" in junit and uuid in junit, junit[-2000:]

    table = clock.table()
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS.write_text(table)
    print("\n" + table)
