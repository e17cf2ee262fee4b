"""The cluster the suite runs (tests/tools/kube_local/, tests/tools/kube_cluster.py) is what it claims:
a real Kubernetes 1.20.2 control plane and kubelet, listening on loopback only, that runs host-network
pods from the local image (pinned or placed by the real scheduler), collects garbage by
ownerReference, and -- when it cannot start -- says why with its components' logs."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.tools.kube_cluster import KIT, KubeCluster, KubeClusterError, cannot_run, pod_manifest


def test_node_ready_with_the_real_kubelet_and_its_sockets(cluster: KubeCluster) -> None:
    node = cluster.node()
    assert node.status.node_info.kubelet_version == "v1.20.2"
    assert cluster.node_ready()
    for socket in (cluster.device_plugin_socket, cluster.pod_resources_socket):
        assert stat.S_ISSOCK(socket.stat().st_mode), socket
    version = cluster.kubectl("version", "-o", "json")
    assert version.returncode == 0, version.stderr
    assert '"gitVersion": "v1.20.2"' in version.stdout  # kubectl and the API server


def test_every_listener_of_the_cluster_is_on_loopback(cluster: KubeCluster) -> None:
    pids = set(cluster.running().values())
    assert {"etcd", "apiserver", "kcm", "scheduler", "dockerd", "kubelet"} <= set(cluster.running())
    ss = subprocess.run(["ss", "-Hltnup"], capture_output=True, text=True, check=True, timeout=30)
    ours = [line for line in ss.stdout.splitlines() if {int(p) for p in re.findall(r"pid=(\d+)", line)} & pids]
    assert ours, ss.stdout  # etcd, the API server, the controller manager, the scheduler, the kubelet
    for line in ours:
        local = line.split()[4]
        assert local.startswith(("127.0.0.1:", "[::1]:")), line


@pytest.mark.parametrize("pinned", [True, False], ids=["nodeName", "scheduler"])
def test_a_host_network_pod_runs_from_the_local_image(cluster: KubeCluster, pinned: bool) -> None:
    name = "plain-pinned" if pinned else "plain-scheduled"
    cluster.core().create_namespaced_pod("default", pod_manifest(name, node_name=cluster.node_name if pinned else None))
    pod = cluster.wait(
        f"pod {name} Running",
        lambda: (p := cluster.core().read_namespaced_pod(name, "default")).status.phase == "Running" and p,
    )
    assert pod.spec.node_name == cluster.node_name
    assert cluster.container_exec(name, "cat", "/proc/1/cmdline").startswith("sleep")
    assert cluster.container_env(name)["KUBERNETES_SERVICE_HOST"]  # the kubelet's service variables


def test_the_controller_manager_collects_garbage_by_owner_reference(cluster: KubeCluster) -> None:
    core = cluster.core()
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "gc-owner"}, "data": {}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map("default", {"metadata": {"name": "gc-dependent", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("gc-owner", "default")

    def collected() -> bool:
        return "gc-dependent" not in {c.metadata.name for c in core.list_namespaced_config_map("default").items}

    cluster.wait("the dependent ConfigMap is collected", collected)


@pytest.mark.skipif(cannot_run() is not None, reason=str(cannot_run()))
def test_a_cluster_that_cannot_start_is_an_error_with_the_components_logs(tmp_path: Path) -> None:
    """Binaries that die at once: start() raises naming the state dir, the wait that failed and each
    component's last log lines, and leaves no process and no state dir behind."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"):
        script = fake / name
        script.write_text(f"#!/bin/sh\necho '{name} stand-in: refusing to start' >&2\nexit 3\n")
        script.chmod(0o755)
    with pytest.raises(KubeClusterError) as err:
        KubeCluster.start(bin_dir=fake, api_timeout=2, ready_timeout=2)
    message = str(err.value)
    assert "kube-apiserver /readyz" in message
    assert "apiserver.log" in message and "kube-apiserver stand-in: refusing to start" in message
    assert "etcd.log" in message and "etcd stand-in: refusing to start" in message
    state = re.search(r"did not come up in (/tmp/kl-\S+):", message)
    assert state is not None, message
    assert not Path(state.group(1)).exists()


# --- provide.sh: where the binaries come from -----------------------------------------------------------

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")


def provide(cache: Path, kit: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE_LOCAL_")}
    env |= {"GPUSTACK_TEST_CACHE": str(cache), "KUBE_LOCAL_KIT": str(kit), "KUBE_LOCAL_NO_BUILD": "1"}
    return subprocess.run(
        ["bash", str(KIT / "provide.sh")], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def cache_entry(cache: Path) -> Path:
    recipe = re.search(r"^RECIPE=(\S+)$", (KIT / "provide.sh").read_text(), re.M)
    assert recipe is not None
    return cache / "kube-local" / recipe.group(1)


def fake_entry(entry: Path) -> None:
    """A cache entry of six small executables with their recorded checksums (and the image's .deb)."""
    (entry / "bin").mkdir(parents=True)
    (entry / "dl").mkdir()
    (entry / "dl" / "busybox-static_1_amd64.deb").write_bytes(b"!<arch>\n")
    for name in NAMES:
        (entry / "bin" / name).write_text(f"#!/bin/sh\necho {name}\n")
        (entry / "bin" / name).chmod(0o755)
    sums = subprocess.run(["sha256sum", *NAMES], cwd=entry / "bin", capture_output=True, text=True, check=True)
    (entry / "SHA256SUMS").write_text(sums.stdout)


def test_provide_uses_a_cache_entry_that_matches_its_checksums(tmp_path: Path) -> None:
    entry = cache_entry(tmp_path / "cache")
    fake_entry(entry)
    run = provide(tmp_path / "cache", tmp_path / "no-kit")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(entry / "bin")


def test_provide_refuses_a_damaged_cache_entry_and_a_kit_that_does_not_match(tmp_path: Path) -> None:
    entry = cache_entry(tmp_path / "cache")
    fake_entry(entry)
    (entry / "bin" / "kubelet").write_text("#!/bin/sh\necho changed\n")
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "bins").mkdir()
    for name in NAMES:  # the right names, not the pinned contents
        (kit / "bins" / name).write_text("not the pinned binary\n")
    subprocess.run(["tar", "-cJf", str(kit / "bin.tar.xz"), "-C", str(kit / "bins"), *NAMES], check=True)
    run = provide(tmp_path / "cache", kit)
    assert run.returncode == 1
    assert "do not match tests/tools/kube_local/SHA256SUMS: not used" in run.stderr
    assert "KUBE_LOCAL_NO_BUILD=1 and no usable kit: remedy:" in run.stderr
    assert not (entry / "bin").exists()  # the damaged entry is never handed out
    assert run.stdout == ""


def test_provide_without_a_kit_says_it_would_build(tmp_path: Path) -> None:
    run = provide(tmp_path / "cache", tmp_path / "no-kit")
    assert run.returncode == 1
    assert f"no prebuilt kit at {tmp_path / 'no-kit'}" in run.stderr
    assert "unset KUBE_LOCAL_NO_BUILD (a ~6 min build)" in run.stderr
