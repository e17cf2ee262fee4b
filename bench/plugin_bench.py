"""The plugin half of ``bench/allocate_bench.py`` (see its docstring): an 8-accelerator NVIDIA node
served by the real allocator and plugin servers, registered with the test suite's kubelet stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.pods import ContainerSpec, KubeletContainer, KubeletPod, PodSpec
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from gpustack_operator.deviceplugin.server import PluginServer, PluginSet
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorStatus,
    DevicesGroup,
    DeviceTopology,
)
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import resolve
from gpustack_operator.manufacturers.respond import RespondContext
from gpustack_operator.settings import Settings

Line = Callable[[str, list[float], list[float] | None], str]
Echo = Callable[[bytes], object]
NODE = "bench-node"


def h100_node(cards: int = 8) -> list[DevicesGroup]:
    """The shape detection gives an 8x H100 SXM node (tests/fixtures/hosts/h100-sxm-8x)."""
    return [
        DevicesGroup(
            id="nvidia-h100-80gb-hbm3",
            manufacturer="nvidia",
            name="NVIDIA H100 80GB HBM3",
            memory=81559,
            runtime_version="12.4",
            accelerators=[
                Accelerator(
                    id=f"GPU-{i:08x}-1111-2222-3333-444455556666",
                    index=i,
                    topology=DeviceTopology(pci_bus_id=f"0000:{0x18 + i * 16:02x}:00.0", numa_affinity=str(i // 4)),
                    status=AcceleratorStatus(logical_sliced=AcceleratorLogicalSliced(count=128)),
                )
                for i in range(cards)
            ],
        )
    ]


class MemoryPods:
    """The node's Pods answered from memory, so a timed call measures the plugin, not its callers."""

    def __init__(self) -> None:
        self.pods: list[PodSpec] = []
        self.calls = {"kubelet": 0, "api": 0}

    def next_pod(self, n: int, resource: str, quantity: str, extra: dict[str, str] | None = None) -> None:
        resources = {resource: quantity, **(extra or {})}
        self.pods = [
            PodSpec(
                uid=f"uid-{n}",
                namespace="bench",
                name=f"pod-{n}",
                created=1_700_000_000 + n,
                node=NODE,
                containers=(ContainerSpec(name="main", resources=resources),),
            )
        ]

    def kubelet_pods(self) -> list[KubeletPod] | None:
        self.calls["kubelet"] += 1
        return [KubeletPod(p.namespace, p.name, (KubeletContainer("main"),)) for p in self.pods]

    def node_pods(self) -> list[PodSpec]:
        self.calls["api"] += 1
        return list(self.pods)


def context(root: Path) -> RespondContext:
    lib = root / "host/var/lib/gpustack/operator/lib/nvidia/cuda-12"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "view").mkdir(exist_ok=True)
    return RespondContext(view=HostRoot(root / "view"), host=HostRoot(root / "host"), settings=Settings())


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))]


KUBELET_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[3])
from tests.kubelet.standin import KubeletStandIn
kubelet = KubeletStandIn(sys.argv[1], sys.argv[2]).start()
print("ready", flush=True)
sys.stdin.read()  # until the parent closes it
kubelet.close()
"""


def kubelet_process(plugin_dir: Path, pod_resources: Path) -> subprocess.Popen[str]:
    """The suite's kubelet stand-in in a process of its own, as a kubelet is: its ListAndWatch
    consumption does not share this process's GIL with the plugin being measured."""
    repo = str(Path(__file__).resolve().parent.parent)
    child = subprocess.Popen(
        [sys.executable, "-c", KUBELET_CHILD, str(plugin_dir), str(pod_resources), repo],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit("the kubelet stand-in did not start")
    return child


def run(tmp: Path, calls: int, echo: Echo, line: Line) -> None:
    plugin_dir = tmp / "device-plugins"
    plugin_dir.mkdir()
    pods = MemoryPods()
    nvidia = resolve(REGISTRY["nvidia"].identity)
    responder = REGISTRY["nvidia"].responder
    assert responder is not None
    allocator = Allocator(nvidia, h100_node(), responder=responder, ctx=context(tmp), pods=pods, node_name=NODE)
    kubelet = kubelet_process(plugin_dir, tmp / "pod-resources.sock")
    try:
        servers = [
            PluginServer(allocator, pool, "nvidia", kube_socket=str(plugin_dir / "kubelet.sock"))
            for pool in allocator.pools()
        ]
        plugins = PluginSet(servers)
        plugins.start()
        try:
            if not plugins.wait_registered(30):
                raise SystemExit("the plugins did not register with the kubelet stand-in")
            by_resource = {s.resource: s for s in servers}
            bench_allocate(by_resource["nvidia.com/gpu"], allocator, pods=pods, calls=calls, echo=echo, line=line)
            sliced = by_resource["nvidia.com/gpu.sliced"]
            bench_preferred(sliced, allocator, pods=pods, calls=calls, echo=echo, line=line)
            bench_watch(by_resource["nvidia.com/gpu.shared"], allocator, pods)
        finally:
            plugins.stop()
    finally:
        kubelet.communicate("", timeout=30)
    bench_identification(tmp, calls=min(calls, 500))
    bench_rss(tmp)


def _stub(server: PluginServer) -> tuple[grpc.Channel, pb_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{server.socket_path}")
    return channel, pb_grpc.DevicePluginStub(channel)


def bench_allocate(
    server: PluginServer, allocator: Allocator, *, pods: MemoryPods, calls: int, echo: Echo, line: Line
) -> None:
    channel, stub = _stub(server)
    tokens = [d.id for d in allocator.devices(server.resource)]
    samples: list[float] = []
    baseline: list[float] = []
    before = dict(pods.calls)
    for n in range(calls + 50):
        pods.next_pod(n, server.resource, "1")  # the previous Pod is gone: reclaimed on this call
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[tokens[n % 8]])])
        payload = request.SerializeToString()
        start = time.perf_counter()
        stub.Allocate(request, timeout=5)
        middle = time.perf_counter()
        echo(payload)
        if n >= 50:
            samples.append(middle - start)
            baseline.append(time.perf_counter() - middle)
    channel.close()
    print(line("  echo of the AllocateRequest bytes", baseline, None))
    print(line("Allocate nvidia.com/gpu (decision + response)", samples, baseline))
    made = {k: (pods.calls[k] - before[k]) / (calls + 50) for k in pods.calls}
    print(f"  outbound calls per Allocate: {made['kubelet']:.2f} pod-resources List, {made['api']:.2f} API pod list")


def bench_preferred(
    server: PluginServer, allocator: Allocator, *, pods: MemoryPods, calls: int, echo: Echo, line: Line
) -> None:
    channel, stub = _stub(server)
    available = [d.id for d in allocator.devices(server.resource)]
    pods.next_pod(10**6, server.resource, "1", {"nvidia.com/gpu.sliced.memory-mib": "10240"})
    for offered in (8, len(available)):  # one token per card, and every token the node has
        ids = available[:: len(available) // offered][:offered]
        request = pb.PreferredAllocationRequest(
            container_requests=[pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=1)]
        )
        payload = request.SerializeToString()
        samples: list[float] = []
        baseline: list[float] = []
        for n in range(calls + 50):
            start = time.perf_counter()
            stub.GetPreferredAllocation(request, timeout=5)
            middle = time.perf_counter()
            echo(payload)
            if n >= 50:
                samples.append(middle - start)
                baseline.append(time.perf_counter() - middle)
        print(line(f"  echo of the request bytes ({len(payload)} B)", baseline, None))
        print(line(f"GetPreferredAllocation .sliced ({offered} offered)", samples, baseline))
    channel.close()


def bench_watch(server: PluginServer, allocator: Allocator, pods: MemoryPods, rounds: int = 40) -> None:
    """A ledger change (an exclusive grant, then its release) reaching a ListAndWatch stream."""
    channel, stub = _stub(server)
    stream = stub.ListAndWatch(pb.Empty())
    updates: list[float] = []
    seen = threading.Event()
    stamp: list[float] = []

    def consume() -> None:
        for _ in stream:
            if stamp:
                updates.append(time.perf_counter() - stamp.pop())
            seen.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    seen.wait(5)
    exclusive = [d.id for d in allocator.devices("nvidia.com/gpu")]
    latencies: list[float] = []
    for n in range(rounds):
        seen.clear()
        pods.next_pod(2 * 10**6 + n, "nvidia.com/gpu", "1")
        stamp.append(time.perf_counter())
        allocator.allocate("nvidia.com/gpu", [[exclusive[n % 8]]])
        if seen.wait(2) and updates:
            latencies.append(updates.pop())
    stream.cancel()
    channel.close()
    if latencies:
        p50, worst = percentile(latencies, 50) * 1e3, max(latencies) * 1e3
        name = "ledger change -> ListAndWatch update"
        print(f"{name:<44} p50 {p50:7.3f} ms   max {worst:7.3f} ms ({len(latencies)} changes)")


def bench_identification(tmp: Path, calls: int) -> None:
    """The two identification round trips as the plugin makes them: pod-resources List against the
    kubelet stand-in, the API server's pod list through the official client against its stand-in."""
    from gpustack_operator.deviceplugin.podresources import KubeletPodSource  # noqa: PLC0415
    from gpustack_operator.kube.pods import NodePods, make_api_client  # noqa: PLC0415

    from tests.kube.apiserver import APIServerStandIn, pod_manifest  # noqa: PLC0415
    from tests.kubelet.standin import KubeletStandIn  # noqa: PLC0415

    plugin_dir = tmp / "ident-plugins"
    plugin_dir.mkdir()
    with APIServerStandIn() as api, KubeletStandIn(plugin_dir, tmp / "ident-pr.sock"):
        for n in range(20):
            api.add_pod(pod_manifest(f"p{n}", node_name=NODE, containers=[("main", {"nvidia.com/gpu": "1"})]))
        lister = NodePods(make_api_client(None, f"http://127.0.0.1:{api.port}"), NODE)
        source = KubeletPodSource(lister.list, socket=str(tmp / "ident-pr.sock"))
        for name, call in (
            ("pod-resources List (kubelet stand-in)", source.kubelet_pods),
            ("API pod list, 20 pods (official client)", source.node_pods),
        ):
            samples = []
            for _ in range(calls):
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
            p50, p99 = percentile(samples, 50) * 1e3, percentile(samples, 99) * 1e3
            print(f"  identification round trip: {name:<40} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms")


RSS_CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from bench.plugin_bench import nine_backends
print(nine_backends(Path(sys.argv[1])), flush=True)
"""


def bench_rss(tmp: Path) -> None:
    """``device-manager serve``'s RSS with all nine backends registered, in a fresh process: every
    manufacturer's allocator, responder and plugin servers, registered with a kubelet stand-in that
    runs in the parent (the kubelet is not part of the Device Manager's memory)."""
    from tests.kubelet.standin import KubeletStandIn  # noqa: PLC0415

    plugin_dir = tmp / "rss-plugins"
    plugin_dir.mkdir()
    with KubeletStandIn(plugin_dir, tmp / "rss-pr.sock") as kubelet:
        out = subprocess.run(
            [sys.executable, "-c", RSS_CHILD, str(tmp), str(Path(__file__).resolve().parent.parent)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        registered = len(kubelet.resources())
    if out.returncode != 0:
        print(f"serve RSS: the child failed: {out.stderr.strip()[-400:]}")
        return
    print(f"{'dm serve, nine backends registered: RSS':<44} {out.stdout.strip()}  ({registered} resources registered)")


def nine_backends(tmp: Path, watch: tuple[str | None, str | None] | None = None) -> str:
    """(In the child) one allocator and its plugins per manufacturer, two accelerators each; the RSS
    once every plugin has registered. ``watch`` = (kubeconfig, API server URL): also the watch-backed
    view of the node's Pods (``kube/podwatch.py``, as ``dm serve`` runs it), synced first."""
    view = None
    if watch is not None:
        from gpustack_operator.kube.pods import make_api_client  # noqa: PLC0415
        from gpustack_operator.kube.podwatch import PodWatch  # noqa: PLC0415

        view = PodWatch(make_api_client(*watch), NODE).start()
        if not view.wait_synced(60):
            return "the pod view did not sync"
    groups = {name: _two_cards(name) for name in REGISTRY}
    servers: list[PluginServer] = []
    for name, group in groups.items():
        backend = REGISTRY[name]
        responder = backend.responder
        if responder is None:
            continue
        allocator = Allocator(
            resolve(backend.identity), [group], responder=responder, ctx=context(tmp), pods=MemoryPods()
        )
        servers += [
            PluginServer(allocator, pool, name, kube_socket=str(tmp / "rss-plugins" / "kubelet.sock"))
            for pool in allocator.pools()
        ]
    plugins = PluginSet(servers)
    plugins.start()
    ok = plugins.wait_registered(60)
    rss = next(
        line.split()[1] for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmRSS")
    )
    plugins.stop()
    watched = "" if view is None else f", {len(view.node_pods())} Pods watched"
    if view is not None:
        view.stop()
    registered = "all" if ok else "NOT all"
    return f"{int(rss) / 1024:.1f} MiB ({len(servers)} plugin servers, {registered} registered{watched})"


def _two_cards(manufacturer: str) -> DevicesGroup:
    return DevicesGroup(
        id=f"{manufacturer}-bench",
        manufacturer=manufacturer,
        name=f"{manufacturer} bench",
        memory=65536,
        runtime_version="12.4",
        accelerators=[
            Accelerator(
                id=f"{manufacturer}-card-{i}",
                index=i,
                physical_indexes=[i, i, 0],
                status=AcceleratorStatus(logical_sliced=AcceleratorLogicalSliced(count=4)),
            )
            for i in range(2)
        ],
    )


if __name__ == "__main__":  # pragma: no cover
    os.execv(sys.executable, [sys.executable, str(Path(__file__).with_name("allocate_bench.py")), *sys.argv[1:]])
