"""``gpustack-operator dm serve`` as a user runs it: the console script in a subprocess, over a fixture
node (the NVML stand-in), a fake kubelet Registration server and a loopback API-server stand-in; the
allocator core is the real one."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc

from tests.conftest import BIN, fresh_node, host
from tests.kube.apiserver import APIServerStandIn as ApiServer
from tests.kube.routes_publish import PublishStandIn
from tests.kubelet.standin import KubeletStandIn
from tests.unit.deviceplugin.fakes import FakeKubelet, short_dir

RESOURCES = {
    "nvidia.com/gpu": "gpustack-nvidia-exclusive.sock",
    "nvidia.com/gpu.shared": "gpustack-nvidia-shared.sock",
    "nvidia.com/gpu.sliced": "gpustack-nvidia-sliced.sock",
    "device.gpustack.ai/nvidia.visibility": "gpustack-nvidia-visibility.sock",
}

PENDING = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {},
    "items": [
        {
            "metadata": {
                "name": "whole",
                "namespace": "ml",
                "uid": "0b6f3c1e-1111-4c3a-9d7e-000000000001",
                "creationTimestamp": "2025-03-01T10:20:30Z",
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Pending"},
        }
    ],
}


LOOPBACK_HEALTH = ("--secure-port", "0", "--bind-address", "127.0.0.1")  # any free port, loopback only


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this machine's cluster, proxy or GPUSTACK settings."""
    drop = ("GPUSTACK_", "KUBERNETES_", "KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(drop)}
    env.update(extra)
    return env


def serve_args(plugin_dir: Path, api: ApiServer, write_root: Path, *more: str, node: str = "rtx4090") -> list[str]:
    return [
        str(BIN / "gpustack-operator"),
        "dm",
        "serve",
        "-v=1",
        "--manufacturer",
        "nvidia",
        "--detect-root",
        str(host(node)),
        "--kube-socket",
        str(plugin_dir / "kubelet.sock"),
        "--pod-resources-socket",
        str(plugin_dir / "pod-resources.sock"),
        "--node-name",
        "node-a",
        "--kube-api-server",
        api.url,
        "--host-write-root",
        str(write_root),
        *LOOPBACK_HEALTH,
        *more,
    ]


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(plugin_dir)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    """The HTTP API-server stand-in (list, watch, the annotation's merge patch); no Pods yet."""
    with ApiServer() as server:
        yield server


def test_help_says_what_is_durable() -> None:
    out = subprocess.run(
        [str(BIN / "gpustack-operator"), "dm", "serve", "--help"], capture_output=True, text=True, env=clean_env()
    )
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "Reservations are durable" in text and "device.gpustack.ai/accelerator.allocated" in text
    assert "before it registers any plugin" in text
    assert "never exits because nothing was found" in text and "every --monitor-period" in text
    assert "node capacity keys" in text and "NodeFeature" in text and "/readyz and /livez" in text
    flags = ("--no-shared", "--no-sliced", "--no-partitioned", "--kube-socket", "--node-name", "--kube-api-server")
    for flag in (*flags, "--monitor-period", "--no-fast-failed", "--secure-port", "--bind-address", "--cert-dir"):
        assert flag in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kube-api-server", "127.0.0.1:6443"], "is not a URL"),
        (["--kube-socket", "relative/kubelet.sock"], "is not an absolute path"),
        (["--manufacturer", "nvidai"], "unknown manufacturer 'nvidai'; choose from amd"),
        ([], "the node name is unknown: pass --node-name or set KUBERNETES_NODE_NAME"),
        (["--node-name", "n", "--host-write-root", "/nonexistent-dir"], "--host-write-root /nonexistent-dir"),
        (["--node-name", "n"], "no API server to list the node's pods from"),
    ],
)
def test_usage_errors_exit_2_naming_the_problem(args: list[str], message: str) -> None:
    out = subprocess.run(
        [str(BIN / "gpustack-operator"), "dm", "serve", "--detect-root", str(host("rtx4090")), *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_a_health_port_in_use_is_a_usage_error(plugin_dir: Path, api: ApiServer, tmp_path: Path) -> None:
    """/readyz and /livez cannot be served: exit 2 naming the flags and the remedy, nothing registered."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        out = subprocess.run(
            serve_args(plugin_dir, api, tmp_path, "--secure-port", port, "--once-registered"),
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=120,
        )
    assert out.returncode == 2, out.stderr
    assert f"--bind-address 127.0.0.1 --secure-port {port} could not be bound" in out.stderr
    assert "choose a free port with --secure-port" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in plugin_dir.iterdir()) == [], "a socket was created"


def test_once_registered_registers_every_pool_and_cleans_up(
    plugin_dir: Path, kubelet: FakeKubelet, api: ApiServer, tmp_path: Path
) -> None:
    out = subprocess.run(
        serve_args(plugin_dir, api, tmp_path, "--once-registered"),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = {r.request.resource_name: r.request.endpoint for r in kubelet.registrations}
    assert got == RESOURCES
    assert all(r.error is None and r.socket_existed for r in kubelet.registrations)
    hints = {
        r.request.resource_name: r.request.options.get_preferred_allocation_available for r in kubelet.registrations
    }
    assert hints == {
        "nvidia.com/gpu": True,
        "nvidia.com/gpu.shared": True,
        "nvidia.com/gpu.sliced": True,
        "device.gpustack.ai/nvidia.visibility": False,
    }
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"], "a plugin socket was left behind"
    assert "Reservations are durable" in out.stderr
    assert "restart recovery: 0 claims held" in out.stderr  # recovered before the first registration


def test_nothing_registers_before_the_pods_are_read(
    plugin_dir: Path, kubelet: FakeKubelet, api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API server that answers nothing: the held cards cannot be recovered, so no plugin registers
    (an unread node is never advertised free); SIGTERM still ends the wait."""
    api.fail(503, count=-1)
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(serve_args(plugin_dir, api, tmp_path), stderr=sink, text=True, env=clean_env())
    try:
        for _ in range(600):  # until serve has tried the API server (and would have registered by now)
            if "HTTP 503" in log.read_text() or proc.poll() is not None:
                break
            kubelet.wait_for(1, timeout=0.1)
        assert "HTTP 503" in log.read_text()
        assert not kubelet.wait_for(1, timeout=2), "a plugin registered before the node's pods were read"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert proc.returncode == 0, err
    assert kubelet.registrations == []
    assert "503" in err and "Traceback" not in err


def test_no_flags_gate_their_families(plugin_dir: Path, kubelet: FakeKubelet, api: ApiServer, tmp_path: Path) -> None:
    out = subprocess.run(
        serve_args(plugin_dir, api, tmp_path, "--once-registered", "--no-shared", "--no-sliced"),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(r.request.resource_name for r in kubelet.registrations) == [
        "device.gpustack.ai/nvidia.visibility",
        "nvidia.com/gpu",
    ]


NVML = Path("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1.fixture")
SLICED_MEMORY = "nvidia.com/gpu.sliced.memory-percentage"


def copied_node(tmp_path: Path, name: str = "rtx4090") -> Path:
    root = tmp_path / "node"
    shutil.copytree(host(name), root, symlinks=True, ignore=fresh_node)
    return root


def set_cards(root: Path, present: bool) -> None:
    """The NVML stand-in's data with its [device] sections (present) or without them (a driver that
    answers and sees no card: a clean, empty pass)."""
    original = (host("rtx4090") / NVML).read_text()
    text = original if present else original.split("[device]", 1)[0]
    target = root / NVML
    staged = target.with_suffix(".new")
    staged.write_text(text)
    staged.replace(target)  # atomic: a pass reads the old data or the new, never half


def health_url(log: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"serving /readyz and /livez on https://127\.0\.0\.1:(\d+)", log.read_text())
        if found:
            return f"https://127.0.0.1:{found.group(1)}"
        time.sleep(0.1)
    raise AssertionError(f"the health endpoint was never served:\n{log.read_text()[-3000:]}")


def probe(url: str, path: str) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the self-signed pair serve generated
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(url + path, timeout=10) as answer:  # loopback, never through a proxy
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def wait_until(check: Callable[[], bool], what: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def node_capacity(api: PublishStandIn) -> dict[str, str]:
    node = api.obj("nodes", "node-a")
    assert node is not None
    return {k: v for k, v in node["status"]["capacity"].items() if k.startswith("nvidia.com/")}


def assert_published(api: PublishStandIn) -> None:
    """The capacity keys on the Node (one RTX 4090: 100 % of its memory), the NodeFeature and the
    Devices, each owned by the Node."""
    assert node_capacity(api).get(SLICED_MEMORY) == "100", node_capacity(api)
    feature = api.obj("nodefeatures", "node-a-gpustack-device-manager", "gpustack-system")
    assert feature is not None and feature["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == "node-a"
    devices = api.obj("devices", "node-a")
    assert devices is not None and devices["metadata"]["ownerReferences"][0]["kind"] == "Node"
    (card,) = [a for g in devices["spec"]["groups"] for a in g["accelerators"]]
    assert card["id"]


def gone_and_back(root: Path, kubelet: KubeletStandIn, api: PublishStandIn, log: Path) -> None:
    """The card gone from a pass: the same token Unhealthy and its budget off the Node; back: Healthy."""
    set_cards(root, present=False)
    kubelet.wait_for("nvidia.com/gpu", lambda d: all(x.health == "Unhealthy" for x in d.values()), timeout=30)
    assert len(kubelet.devices("nvidia.com/gpu")) == 1
    wait_until(lambda: node_capacity(api).get(SLICED_MEMORY) in (None, "0"), "the gone card's budget stayed", log)
    set_cards(root, present=True)
    kubelet.wait_for("nvidia.com/gpu", lambda d: all(x.health == "Healthy" for x in d.values()), timeout=30)
    wait_until(lambda: node_capacity(api).get(SLICED_MEMORY) == "100", "the budget did not come back", log)


def test_serve_waits_for_accelerators_follows_them_publishes_and_stops_on_sigterm(tmp_path: Path) -> None:
    """A node whose driver sees no card yet: serve keeps running (never "nothing to serve"), /readyz says
    why it is not ready; the card appears between passes and is served, the capacity keys reach the Node
    and the NodeFeature / Devices are published; the card gone from a pass turns its tokens Unhealthy in
    ListAndWatch (the kubelet stand-in's view) and its budget leaves the Node; back, Healthy again."""
    root = copied_node(tmp_path)
    set_cards(root, present=False)
    write_root = tmp_path / "host"
    write_root.mkdir()
    log = tmp_path / "serve.log"
    with short_dir() as sockets, PublishStandIn() as api, KubeletStandIn(sockets, sockets / "pr.sock") as kubelet:
        api.add_node("node-a")
        argv = serve_args(sockets, api, write_root, "--monitor-period", "0.2")
        argv[argv.index("--detect-root") + 1] = str(root)
        argv[argv.index("--pod-resources-socket") + 1] = str(kubelet.pod_resources_socket)
        with log.open("w") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, text=True, env=clean_env())
        try:
            url = health_url(log)
            wait_until(lambda: log.read_text().count("held back and repeated") >= 2, "no pass held back twice", log)
            code, body = probe(url, "/readyz")
            assert code == 503 and "found nothing" in body and "--no-fast-failed" in body, body
            assert probe(url, "/livez") == (200, "ok")
            assert proc.poll() is None, "serve exited on a node with nothing detected"
            assert kubelet.resources() == []

            set_cards(root, present=True)  # the driver comes up
            for resource in RESOURCES:
                kubelet.wait_registered(resource, timeout=60)
            kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 1, timeout=30)
            assert kubelet.unhealthy("nvidia.com/gpu") == []
            wait_until(lambda: probe(url, "/readyz") == (200, "ok"), "never ready", log)

            assert_published(api)
            gone_and_back(root, kubelet, api, log)
            assert proc.poll() is None

            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        left = sorted(p.name for p in sockets.iterdir() if p.name.startswith(("gpustack-", ".gpustack-")))
    out = log.read_text()
    assert code == 0, out[-3000:]
    assert left == [], f"plugin sockets left behind: {left}"
    assert "signal SIGTERM: stopping" in out and "Traceback" not in out


def test_serves_an_allocation_then_stops_on_sigterm(
    plugin_dir: Path, kubelet: FakeKubelet, api: ApiServer, tmp_path: Path
) -> None:
    for item in PENDING["items"]:  # type: ignore[index]
        api.add_pod(item)
    proc = subprocess.Popen(serve_args(plugin_dir, api, tmp_path), stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert kubelet.wait_for(len(RESOURCES), timeout=60), "not every pool registered"
        with (
            grpc.insecure_channel(f"unix://{plugin_dir / RESOURCES['nvidia.com/gpu']}") as exclusive,
            grpc.insecure_channel(f"unix://{plugin_dir / RESOURCES['nvidia.com/gpu.shared']}") as shared,
        ):
            tokens = next(pb_grpc.DevicePluginStub(exclusive).ListAndWatch(pb.Empty(), timeout=10)).devices
            assert len(tokens) == 1 and tokens[0].health == "Healthy"
            shared_watch = pb_grpc.DevicePluginStub(shared).ListAndWatch(pb.Empty(), timeout=30)
            assert all(d.health == "Healthy" for d in next(shared_watch).devices)

            response = pb_grpc.DevicePluginStub(exclusive).Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[tokens[0].ID])]),
                timeout=10,
            )
            envs = dict(response.container_responses[0].envs)
            assert envs["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
            pod_reads = [r for r in api.requests if r.path == "/api/v1/pods"]
            assert pod_reads and all(r.query["fieldSelector"] == "spec.nodeName=node-a" for r in pod_reads)
            stored = api.get("ml", "whole")  # the grant is recorded on the Pod before the answer
            assert (
                stored is not None and "device.gpustack.ai/accelerator.allocated" in stored["metadata"]["annotations"]
            )
            # the cross-mode invariant reaches the kubelet: the shared tokens of the held accelerator
            # turn Unhealthy on the open ListAndWatch stream
            update = next(shared_watch)
            assert update.devices and all(d.health == "Unhealthy" for d in update.devices)
            shared_watch.cancel()

            # a second container asking for the held accelerator is refused with the core's message
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.DevicePluginStub(shared).Allocate(
                    pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=[update.devices[0].ID])]
                    ),
                    timeout=10,
                )
            assert info.value.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
            assert info.value.details()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "signal SIGTERM: stopping" in err
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]


SSH_POD = {
    "metadata": {
        "name": "ssh-instance",
        "namespace": "ml",
        "uid": "0b6f3c1e-2222-4c3a-9d7e-000000000002",
        "creationTimestamp": "2025-03-01T10:21:00Z",
    },
    "spec": {
        "nodeName": "node-a",
        "containers": [
            {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {
                "name": "sshd",
                "image": "alpine",
                "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": "1"}},
            },
        ],
    },
    "status": {"phase": "Pending"},
}


def test_the_kubelet_stand_in_admits_through_serve_and_survives_its_restart(
    plugin_dir: Path, api: ApiServer, tmp_path: Path
) -> None:
    """The kubelet's own order (tests/kubelet): dial-back, ListAndWatch, hint, Allocate per container,
    pod-resources naming the Pod being admitted; then a kubelet restart wipes the sockets."""
    api.add_pod(SSH_POD)
    pod_resources = plugin_dir / "pod-resources.sock"
    with KubeletStandIn(plugin_dir, pod_resources, checkpoint=False) as kubelet:
        proc = subprocess.Popen(
            serve_args(plugin_dir, api, tmp_path), stderr=subprocess.PIPE, text=True, env=clean_env()
        )
        try:
            for resource in RESOURCES:
                kubelet.wait_registered(resource, timeout=60)
            kubelet.wait_capacity("nvidia.com/gpu", 1, timeout=10)
            grants = kubelet.admit(SSH_POD)
            main = grants["main"]["nvidia.com/gpu"].response
            sshd = grants["sshd"]["device.gpustack.ai/nvidia.visibility"].response
            gpu = dict(main.envs)["NVIDIA_VISIBLE_DEVICES"]
            assert gpu.startswith("GPU-")
            assert dict(sshd.envs).get("NVIDIA_VISIBLE_DEVICES") == gpu, "the sidecar sees exactly main's grant"
            # each Allocate asked the kubelet's pod-resources List which container it serves
            assert kubelet.pod_resources_calls.count("List") >= 2

            kubelet.restart()
            for resource in RESOURCES:
                kubelet.wait_registered(resource, count=2, timeout=30)
            kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 1, timeout=10)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        assert {p.name for p in plugin_dir.iterdir()} <= {"kubelet.sock", "pod-resources.sock"}
