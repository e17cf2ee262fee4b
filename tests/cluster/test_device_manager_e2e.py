"""End to end with a real kubelet (1.20.2) and a real API server (issue 18): ``gpustack-operator
device-manager serve`` as a process on a fixture node (rtx4090: one card) registers with the kubelet,
the Node's allocatable shows its resources, a pod gets the card with the injection in its container's
environment, a second pod is refused the held card, and after a kubelet restart the plugins register
again and nothing is granted twice.

What runs for real: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the kubelet (its
device manager, admission, checkpoint and pod-resources socket), dockerd and runc. What is not: the
card (the fixture node's sysfs and the NVML stand-in), and the containers' image (busybox).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.conftest import DeviceManager
from tests.conftest import host, run_cli
from tests.kubelet import checkpoint as ckpt
from tests.tools.kube_cluster import KubeCluster, pod_manifest

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
SLICED = "nvidia.com/gpu.sliced"
NV_VIS = "device.gpustack.ai/nvidia.visibility"
NV_ENV = "NVIDIA_VISIBLE_DEVICES"
ALLOCATED = "device.gpustack.ai/accelerator.allocated"
RESOURCES = (GPU, SHARED, SLICED, NV_VIS)


def the_card(root: Path) -> dict[str, Any]:
    """What the detect pass finds on the one-card node: its group (memory) and the card's UUID."""
    proc = run_cli("dm", "detect", "--detect-root", str(root), "-o", "json", "--manufacturer", "nvidia")
    assert proc.returncode == 0, proc.stderr
    (group,) = json.loads(proc.stdout)["groups"]
    (card,) = group["accelerators"]
    return {"uuid": card["id"], "memory": group["memory"], "slices": card["status"]["logicalSliced"]["count"]}


def serving(cluster: KubeCluster, dm: DeviceManager, want: dict[str, str]) -> None:
    """Wait until the Node's allocatable shows ``want`` (the kubelet posts it at its next status sync)."""

    def shown() -> bool:
        if dm.proc.poll() is not None:
            raise AssertionError(f"dm serve ended ({dm.proc.returncode}):\n{dm.output()[-3000:]}")
        alloc = cluster.allocatable()
        return all(alloc.get(k) == v for k, v in want.items())

    cluster.wait(f"Node allocatable {want}", shown, timeout=120)


def create(cluster: KubeCluster, name: str, limits: dict[str, str], pinned: bool = True) -> None:
    manifest = pod_manifest(name, limits, node_name=cluster.node_name if pinned else None)
    cluster.core().create_namespaced_pod("default", manifest)


def phase(cluster: KubeCluster, name: str) -> Any:
    return cluster.core().read_namespaced_pod(name, "default").status


def running(cluster: KubeCluster, name: str) -> None:
    def up() -> bool:
        status = phase(cluster, name)
        if status.phase == "Failed":
            raise AssertionError(f"pod {name} failed: {status.reason}: {status.message}")
        return bool(status.phase == "Running")

    cluster.wait(f"pod {name} Running", up)


def refused(cluster: KubeCluster, name: str) -> Any:
    """The kubelet's admission turned the pod away (phase Failed): its status (reason, message)."""
    status = cluster.wait(
        f"pod {name} refused", lambda: (s := phase(cluster, name)).phase in ("Failed", "Running") and s
    )
    assert status.phase == "Failed", f"pod {name} is Running on a held card"
    return status


def test_serve_on_a_real_kubelet_grants_a_card_once_across_a_kubelet_restart(
    cluster: KubeCluster, device_manager: Callable[[Path, str], DeviceManager]
) -> None:
    root = host("rtx4090")
    card = the_card(root)
    dm = device_manager(root, "nvidia")
    # registration: every family of the one card on the Node, counted as the kubelet counts tokens
    serving(cluster, dm, {GPU: "1", SHARED: "10", SLICED: str(card["slices"]), NV_VIS: "512"})

    # a pod placed by the real scheduler gets the card, named in its container's environment
    create(cluster, "holder", {GPU: "1"}, pinned=False)
    running(cluster, "holder")
    assert cluster.core().read_namespaced_pod("holder", "default").spec.node_name == cluster.node_name
    assert cluster.container_env("holder")[NV_ENV] == card["uuid"]
    holder_container = cluster.container_id("holder")

    # the card held exclusively: its shared and sliced tokens are withdrawn from the Node
    serving(cluster, dm, {GPU: "1", SHARED: "0", SLICED: "0"})
    create(cluster, "late-shared", {SHARED: "1"})
    status = refused(cluster, "late-shared")
    assert SHARED in f"{status.reason} {status.message}"
    create(cluster, "late-exclusive", {GPU: "1"})
    status = refused(cluster, "late-exclusive")
    assert GPU in f"{status.reason} {status.message}"

    # the kubelet's own record names the holder's grant (read with the suite's checkpoint reader)
    uid = cluster.core().read_namespaced_pod("holder", "default").metadata.uid
    cp = ckpt.read(cluster.device_plugin_socket.parent)
    assert cp is not None and cp.entries is not None
    held = [(e.pod_uid, e.container, e.resource) for e in cp.entries]
    assert held == [(uid, "main", GPU)], held

    # the kubelet restarts: every plugin registers again; the holder keeps its container and its card
    before = (dm.registrations(), dm.streams())
    cluster.restart_kubelet()
    cluster.wait(
        "every plugin registered again after the kubelet restart, and the kubelet opened its stream",
        lambda: dm.registrations() >= before[0] + len(RESOURCES) and dm.streams() >= before[1] + len(RESOURCES),
    )
    cluster.wait("node Ready after the kubelet restart", cluster.node_ready)
    serving(cluster, dm, {GPU: "1", SHARED: "0", SLICED: "0", NV_VIS: "512"})
    assert phase(cluster, "holder").phase == "Running"
    assert cluster.container_id("holder") == holder_container
    assert cluster.container_env("holder")[NV_ENV] == card["uuid"]

    # nothing is granted twice: the held card is refused in every mode after the restart
    for name, limits in [
        ("after-shared", {SHARED: "1"}),
        ("after-sliced", {SLICED: "1", f"{SLICED}.memory-percentage": "10"}),
        ("after-exclusive", {GPU: "1"}),
    ]:
        create(cluster, name, limits)
        status = refused(cluster, name)
        assert status.reason, status

    # the holder deleted: the card is granted again (the kubelet and the device manager both let it go)
    cluster.core().delete_namespaced_pod("holder", "default", grace_period_seconds=0)
    cluster.wait("holder gone", lambda: not cluster.docker("ps", "-q", "--filter", "name=k8s_main_holder_").stdout)
    create(cluster, "second-holder", {GPU: "1"})
    running(cluster, "second-holder")
    assert cluster.container_env("second-holder")[NV_ENV] == card["uuid"]


def test_a_pinned_sliced_pod_gets_its_limit_and_the_preload_and_the_budget_is_kept(
    cluster: KubeCluster, device_manager: Callable[[Path, str], DeviceManager]
) -> None:
    """Pinned with nodeName (the kubelet's admission and the device manager's own budget check, without
    the scheduler; test_the_scheduler_places_a_sliced_pod_by_the_capacity_keys_serve_patched is the
    scheduler's side)."""
    root = host("rtx4090")
    card = the_card(root)
    dm = device_manager(root, "nvidia")
    serving(cluster, dm, {GPU: "1", SLICED: str(card["slices"])})

    create(cluster, "slice-50", {SLICED: "1", f"{SLICED}.memory-percentage": "50"})
    running(cluster, "slice-50")
    env = cluster.container_env("slice-50")
    assert env[NV_ENV] == card["uuid"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{card['memory'] * 50 // 100}m"
    # the preload the kubelet mounted from the host path serve wrote (--host-write-root)
    assert cluster.container_exec("slice-50", "cat", "/etc/ld.so.preload") == "/usr/local/vgpu/libvgpu.so\n"
    assert (
        cluster.container_exec("slice-50", "ls", "/usr/local/vgpu/libvgpu.so").strip() == "/usr/local/vgpu/libvgpu.so"
    )

    # the card is held sliced: no exclusive pod gets it
    serving(cluster, dm, {GPU: "0"})
    create(cluster, "whole", {GPU: "1"})
    assert GPU in "{0.reason} {0.message}".format(refused(cluster, "whole"))

    # 50 % + 60 % of its memory exceeds the card: the device manager refuses the allocation itself
    create(cluster, "slice-60", {SLICED: "1", f"{SLICED}.memory-percentage": "60"})
    status = refused(cluster, "slice-60")
    assert status.reason == "UnexpectedAdmissionError", status
    assert card["uuid"] in status.message or "memory" in status.message, status.message
    # what fits is granted on the same card
    create(cluster, "slice-40", {SLICED: "1", f"{SLICED}.memory-percentage": "40"})
    running(cluster, "slice-40")
    assert cluster.container_env("slice-40")["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{card['memory'] * 40 // 100}m"


def test_serve_killed_with_a_pod_running_recovers_and_grants_nothing_twice(
    cluster: KubeCluster, device_manager: Callable[[Path, str], DeviceManager]
) -> None:
    """``serve`` ends by SIGKILL while a pod holds the card; the one started next rebuilds the
    holding (the Pod's annotation, the kubelet's pod-resources List) before it registers, so the card's
    other families stay withdrawn and no pod is granted it a second time; the holder deleted, the
    pod watch releases the recovered grant without waiting for another Allocate."""
    root = host("rtx4090")
    card = the_card(root)
    first = device_manager(root, "nvidia")
    serving(cluster, first, {GPU: "1", SHARED: "10"})
    create(cluster, "holder", {GPU: "1"})
    running(cluster, "holder")
    # the durable record of the grant, on the Pod in the API server
    annotations = cluster.core().read_namespaced_pod("holder", "default").metadata.annotations or {}
    assert card["uuid"] in annotations.get(ALLOCATED, ""), annotations

    first.kill()
    second = device_manager(root, "nvidia")
    cluster.wait("the restarted device manager registered and streams", lambda: second.streams() >= len(RESOURCES))
    serving(cluster, second, {GPU: "1", SHARED: "0", SLICED: "0"})
    for name, limits in [
        ("late-shared", {SHARED: "1"}),
        ("late-sliced", {SLICED: "1", f"{SLICED}.memory-mib": "1024"}),
    ]:
        create(cluster, name, limits)
        status = refused(cluster, name)
        assert status.reason, status
    assert phase(cluster, "holder").phase == "Running"
    assert cluster.container_env("holder")[NV_ENV] == card["uuid"]

    # the holder deleted: the pod watch releases the recovered grant, the card's other families return
    cluster.core().delete_namespaced_pod("holder", "default", grace_period_seconds=0)
    serving(cluster, second, {SHARED: "10", SLICED: str(card["slices"])})
    create(cluster, "shared-after", {SHARED: "1"})
    running(cluster, "shared-after")
    assert cluster.container_env("shared-after")[NV_ENV] == card["uuid"]


def pending_reason(cluster: KubeCluster, name: str) -> str:
    """The scheduler's reason for leaving ``name`` unscheduled (its PodScheduled condition), once given."""

    def given() -> str | None:
        status = phase(cluster, name)
        assert status.phase == "Pending", f"pod {name} is {status.phase}, not Pending"
        for condition in status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
                return str(condition.message)
        return None

    return str(cluster.wait(f"pod {name} left unscheduled by the scheduler", given))


def test_the_scheduler_places_a_sliced_pod_by_the_capacity_keys_serve_patched(
    cluster: KubeCluster, device_manager: Callable[[Path, str], DeviceManager]
) -> None:
    """Not pinned: the real scheduler places a sliced pod only when the Node carries the node capacity
    keys (supplement 5.2), which serve's detection loop patches onto the Node's status; a second one
    asking more memory-percentage than the card has left stays Pending, named by the scheduler."""
    root = host("rtx4090")
    card = the_card(root)
    dm = device_manager(root, "nvidia")
    memory = f"{SLICED}.memory-percentage"
    serving(cluster, dm, {SLICED: str(card["slices"]), memory: "100"})

    create(cluster, "slice-60", {SLICED: "1", memory: "60"}, pinned=False)
    running(cluster, "slice-60")
    assert cluster.core().read_namespaced_pod("slice-60", "default").spec.node_name == cluster.node_name
    env = cluster.container_env("slice-60")
    assert env[NV_ENV] == card["uuid"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{card['memory'] * 60 // 100}m"

    create(cluster, "slice-50", {SLICED: "1", memory: "50"}, pinned=False)
    reason = pending_reason(cluster, "slice-50")
    assert f"Insufficient {memory}" in reason, reason
    assert phase(cluster, "slice-50").phase == "Pending"
    assert "Traceback" not in dm.output()
