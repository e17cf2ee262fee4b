"""The durable half of ``bench/allocate_bench.py`` (issue 18), measured in the same run as its echo:

- ``Allocate`` through the whole path a kubelet sees -- the container identified from the
  watch-backed pod view (``kube/podwatch.py``, no API round trip) and the durable annotation patched
  on the Pod (``kube/annotations.py``) before the answer -- against the floor measured call by call
  beside it: the bare gRPC unix-socket echo of the same request bytes plus one PATCH of the same
  annotation size to the same API server through the same client. Issue 18's bound: p50 <= 1.5x,
  p99 <= 3x the floor.
- Pod deleted -> the card's shared tokens ``Healthy`` on an open ``ListAndWatch`` stream (the watch
  event releases it; the 30 s reconcile plays no part): p50 / p99 / max over the rounds (bound: p99
  <= 1 s).

- ``dm serve``'s RSS with 110 Pods on its node watched (issue 18's bound: <= 80 MiB with all nine
  backends): the nine backends' allocators and plugin servers plus the watch-backed view of 110 Pods
  in one process (:func:`bench_rss_watched`), and the real ``dm serve`` process on the
  mixed-cambricon-metax fixture (detection of all nine manufacturers loaded, two served) with the
  same 110 Pods.

Two API servers, chosen with ``--api`` (``bench/allocate_bench.py --api``):

- ``standin`` (the default): the test suite's HTTP stand-in on loopback (``tests/kube/apiserver.py``,
  the official client talking to it unchanged) in a process of its own. Its PATCH costs what a Python
  ``ThreadingHTTPServer`` costs.
- ``kube-local``: a real ``kube-apiserver`` 1.20.2 with etcd (``tests/tools/kube_cluster.py``, started
  for the run, loopback only; needs root), over TLS with a bearer token as in a cluster. The Pods are
  bound to a node no kubelet runs (``spec.nodeName``), so nothing starts them, and are deleted with a
  grace period of 0.

Either way the same server answers the floor's PATCH, so the ratio compares like with like. The
kubelet's pod-resources ``List`` is answered from memory here (its round trip is measured on its own
by ``plugin_bench.bench_identification``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.pods import KubeletContainer, KubeletPod, PodSpec
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.server import PluginServer, PluginSet
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import resolve

from bench.plugin_bench import NODE, Echo, Line, _stub, context, h100_node, kubelet_process, percentile

API_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from tests.kube.apiserver import APIServerStandIn
api = APIServerStandIn().start()
print(api.url, flush=True)
sys.stdin.read()  # until the parent closes it
api.close()
"""


class ApiProcess:
    """The API-server stand-in in a process of its own, as an API server is (its HTTP handling does not
    share the measured plugin's GIL); Pods are created and deleted over its HTTP API, and it counts
    nothing here -- the plugin's round trips are counted by the plugin's own client."""

    def __init__(self) -> None:
        repo = str(Path(__file__).resolve().parent.parent)
        self.child = subprocess.Popen(
            [sys.executable, "-c", API_CHILD, repo], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.child.stdout is not None
        self.url = self.child.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise SystemExit("the API-server stand-in did not start")

    def _call(self, method: str, path: str, body: object | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def add_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        namespace = manifest["metadata"].get("namespace", "default")
        return self._call("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)  # type: ignore[no-any-return]

    def delete(self, namespace: str, name: str) -> None:
        self._call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def pods(self) -> list[dict[str, Any]]:
        return self._call("GET", "/api/v1/pods")["items"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.child.communicate("", timeout=30)


class ClusterApi:
    """A real ``kube-apiserver`` (kube-local) with :class:`ApiProcess`'s methods; ``kubeconfig`` is what
    the plugin's client is built from (TLS, bearer token)."""

    def __init__(self) -> None:
        from tests.tools.kube_cluster import KubeCluster, cannot_run  # noqa: PLC0415

        reason = cannot_run()
        if reason is not None:
            raise SystemExit(f"--api kube-local: {reason}")
        self.cluster = KubeCluster.start()
        self.url = self.cluster.env["KUBE_LOCAL_API"]
        self.kubeconfig: str | None = str(self.cluster.kubeconfig)
        self.core = self.cluster.core()

    def add_pod(self, manifest: dict[str, Any]) -> dict[str, Any]:
        namespace = manifest["metadata"].get("namespace", "default")
        answer = self.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
        return json.loads(answer.data)  # type: ignore[no-any-return]

    def delete(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def pods(self) -> list[dict[str, Any]]:
        answer = self.core.list_namespaced_pod("default", _preload_content=False)
        return json.loads(answer.data)["items"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.cluster.stop(check=False)


def api_server(kind: str) -> Any:
    """The API server the run talks to: ``standin`` (:class:`ApiProcess`) or ``kube-local``
    (:class:`ClusterApi`)."""
    if kind == "kube-local":
        return ClusterApi()
    api = ApiProcess()
    api.kubeconfig = None  # type: ignore[attr-defined]
    return api


class CountingPatcher:
    """The plugin's AnnotationPatcher, counted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.patches = 0

    def record(self, pod: PodSpec, value: str | None) -> None:
        self.patches += 1
        self.inner.record(pod, value)


class WatchedPods:
    """The allocator's PodSource: the node's Pods from the watch, the kubelet's List from memory."""

    def __init__(self, watch: Any) -> None:
        self.watch = watch
        self.admitting: list[tuple[str, str]] = []

    def kubelet_pods(self) -> list[KubeletPod] | None:
        return [KubeletPod(ns, name, (KubeletContainer("main"),)) for ns, name in self.admitting]

    def node_pods(self) -> list[PodSpec]:
        return list(self.watch.node_pods())

    def refresh(self) -> bool:
        return bool(self.watch.refresh())


def _wait_view(watch: Any, check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    version = watch.version
    while not check(watch.node_pods()):
        left = deadline - time.monotonic()
        if left <= 0:
            raise SystemExit("the pod view did not follow the API server")
        version = watch.wait_change(version, min(left, 0.5))


def run(tmp: Path, calls: int, echo: Echo, line: Line, api_kind: str = "standin") -> None:
    from gpustack_operator.kube.annotations import AnnotationPatcher  # noqa: PLC0415
    from gpustack_operator.kube.pods import make_api_client  # noqa: PLC0415
    from gpustack_operator.kube.podwatch import PodWatch  # noqa: PLC0415

    from tests.kube.apiserver import pod_manifest  # noqa: PLC0415

    plugin_dir = tmp / "durable-plugins"
    plugin_dir.mkdir()
    api = api_server(api_kind)
    server = None if api.kubeconfig else api.url
    which = "a real kube-apiserver 1.20.2 (kube-local)" if api.kubeconfig else "the stand-in"
    print(f"  API server: {which} at {api.url}")
    try:
        client = make_api_client(api.kubeconfig, server)
        watch = PodWatch(client, NODE).start()
        if not watch.wait_synced(30):
            raise SystemExit("the pod view did not sync with the API server")
        patcher = CountingPatcher(AnnotationPatcher(client))
        floor_patcher = AnnotationPatcher(make_api_client(api.kubeconfig, server))
        pods = WatchedPods(watch)
        nvidia = resolve(REGISTRY["nvidia"].identity)
        responder = REGISTRY["nvidia"].responder
        assert responder is not None
        allocator = Allocator(
            nvidia, h100_node(), responder=responder, ctx=context(tmp), pods=pods, node_name=NODE, recorder=patcher
        )
        watch.subscribe(lambda note: allocator.reconcile())
        # the floor's PATCH target: a Pod of its own, patched with an annotation of the plugin's size
        floor_pod = api.add_pod(pod_manifest("floor", node_name="elsewhere", containers=[("main", {})]))
        floor = PodSpec(uid=floor_pod["metadata"]["uid"], namespace="default", name="floor", created=0.0)
        kubelet = kubelet_process(plugin_dir, tmp / "durable-pr.sock")
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
                gpu = by_resource["nvidia.com/gpu"]
                _bench_allocate(api, pod_manifest, watch, pods, patcher, floor_patcher, floor, gpu, calls, echo, line)
                _bench_release(api, pod_manifest, watch, pods, allocator, by_resource["nvidia.com/gpu.shared"])
            finally:
                plugins.stop()
        finally:
            kubelet.communicate("", timeout=30)
            watch.stop()
    finally:
        api.close()


def _bench_allocate(  # noqa: PLR0917 -- the run's parts, passed down once
    api: Any,
    manifest: Any,
    watch: Any,
    pods: WatchedPods,
    patcher: CountingPatcher,
    floor_patcher: Any,
    floor: PodSpec,
    server: PluginServer,
    calls: int,
    echo: Echo,
    line: Line,
) -> None:
    channel, stub = _stub(server)
    tokens = [d.id for d in server.allocator.devices(server.resource)]
    samples: list[float] = []
    baseline: list[float] = []
    lists_before = watch.lists
    patches_before = patcher.patches
    for n in range(calls + 20):
        name = f"p{n}"
        if n:
            api.delete("default", f"p{n - 1}")
        api.add_pod(manifest(name, node_name=NODE, containers=[("main", {"nvidia.com/gpu": "1"})]))
        _wait_view(watch, lambda view, name=name: any(p.name == name for p in view) and len(view) == 1)
        # and the release the deletion's event started has finished (it shares the node lock): a
        # deletion lands at its own moment on a node, not in the middle of the next timed call
        deadline = time.monotonic() + 5
        while any(c.pod != name for c in server.allocator.claims()) and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.001)
        pods.admitting = [("default", name)]
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[tokens[n % 8]])])
        payload = request.SerializeToString()
        start = time.perf_counter()
        stub.Allocate(request, timeout=10)
        middle = time.perf_counter()
        echo(payload)
        echoed = time.perf_counter()
        value = server.allocator.annotation(watch_pod(watch, name).uid) or "{}"  # type: ignore[attr-defined]
        value = value[:-2] + f"{n % 10}" + value[-1:]  # the same size, a new value each time
        patched = time.perf_counter()
        floor_patcher.record(floor, value)
        end = time.perf_counter()
        if n >= 20:
            samples.append(middle - start)
            baseline.append((echoed - middle) + (end - patched))
    channel.close()
    print(line("  floor: echo of the request + one PATCH", baseline, None))
    print(line("Allocate nvidia.com/gpu (watch view + PATCH)", samples, baseline))
    p50, p99 = percentile(samples, 50) / percentile(baseline, 50), percentile(samples, 99) / percentile(baseline, 99)
    print(f"  issue 18 bounds: p50 {p50:4.2f}x (<= 1.5x)   p99 {p99:4.2f}x (<= 3x)")
    lists = watch.lists - lists_before
    patches = patcher.patches - patches_before
    print(f"  API round trips of {calls + 20} Allocates: {patches} PATCH, {lists} pod lists (the watch's)")


def watch_pod(watch: Any, name: str) -> PodSpec:
    return next(p for p in watch.node_pods() if p.name == name)


def _bench_release(  # noqa: PLR0917
    api: Any, manifest: Any, watch: Any, pods: WatchedPods, allocator: Allocator, shared: PluginServer, rounds: int = 50
) -> None:
    """Pod deleted on the API server -> the card's shared tokens Healthy on an open ListAndWatch."""
    channel, stub = _stub(shared)
    stream = stub.ListAndWatch(pb.Empty())
    latest: list[Any] = []
    arrived = threading.Condition()

    def consume() -> None:
        try:
            for response in stream:
                with arrived:
                    latest[:] = [(time.perf_counter(), response)]
                    arrived.notify_all()
        except grpc.RpcError:
            return

    threading.Thread(target=consume, daemon=True).start()
    exclusive = [d.id for d in allocator.devices("nvidia.com/gpu")]
    latencies: list[float] = []
    for n in range(rounds):
        name = f"r{n}"
        for pod in api.pods():
            if pod["metadata"]["name"].startswith("p"):
                api.delete("default", pod["metadata"]["name"])
        api.add_pod(manifest(name, node_name=NODE, containers=[("main", {"nvidia.com/gpu": "1"})]))
        _wait_view(watch, lambda view, name=name: any(p.name == name for p in view))
        pods.admitting = [("default", name)]
        token = exclusive[n % 8]
        card = token.split(":", 1)[1].rsplit(":", 1)[0]
        allocator.allocate("nvidia.com/gpu", [[token]])

        def held(healthy: bool, card: str = card) -> bool:
            if not latest:
                return False
            devices = [d for d in latest[0][1].devices if d.ID.split(":", 1)[1].rsplit(":", 1)[0] == card]
            return bool(devices) and all((d.health == "Healthy") is healthy for d in devices)

        with arrived:
            arrived.wait_for(lambda: held(False), timeout=5)
        start = time.perf_counter()
        api.delete("default", name)
        with arrived:
            if arrived.wait_for(lambda: held(True), timeout=5):
                latencies.append(latest[0][0] - start)
    stream.cancel()
    channel.close()
    if latencies:
        p50, p99, worst = (percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3, max(latencies) * 1e3)
        name = "Pod deleted -> shared tokens Healthy"
        print(f"{name:<44} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   max {worst:7.3f} ms ({len(latencies)} of {rounds})")


def bench_restart(tmp: Path, pods: int = 110, holders: int = 8) -> None:
    """``dm serve`` started (as after a crash) on a node with ``pods`` Pods, ``holders`` of them holding
    a card by their annotation: from the process start to every pool registered with its first device
    list showing the held cards' shared tokens Unhealthy (the ledger rebuilt before registering)."""
    import json as _json  # noqa: PLC0415

    from gpustack_operator.allocator.ledger import AllocatedEntry, render_allocated  # noqa: PLC0415
    from gpustack_operator.manufacturers.respond import Family  # noqa: PLC0415

    from tests.conftest import BIN, host  # noqa: PLC0415
    from tests.kube.apiserver import pod_manifest  # noqa: PLC0415
    from tests.kubelet.standin import KubeletStandIn  # noqa: PLC0415

    root = host("h100-sxm-8x")
    groups = _json.loads(
        subprocess.run(
            [str(BIN / "gpustack-operator"), "dm", "detect", "--detect-root", str(root), "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["groups"]
    group = groups[0]
    cards = [a["id"] for a in group["accelerators"]][:holders]
    api = ApiProcess()
    write_root = tmp / "restart-host"
    write_root.mkdir()
    try:
        for n in range(pods):
            annotations = None
            if n < holders:
                token = f"{group['id']}:{cards[n]}:0000"
                entry = AllocatedEntry(
                    manufacturer="nvidia", mode=Family.EXCLUSIVE, accelerators=[cards[n]], devices=[token]
                )
                annotations = {"device.gpustack.ai/accelerator.allocated": render_allocated({"main": entry})}
            limits = {"nvidia.com/gpu": "1"} if n < holders else {}
            api.add_pod(pod_manifest(f"p{n}", node_name=NODE, containers=[("main", limits)], annotations=annotations))
        with KubeletStandIn(tmp / "restart-dp", tmp / "restart-pr" / "kubelet.sock") as kubelet:
            argv = [
                str(BIN / "gpustack-operator"),
                "dm",
                "serve",
                "--manufacturer",
                "nvidia",
                "--detect-root",
                str(root),
            ]
            argv += ["--kube-socket", str(kubelet.socket), "--pod-resources-socket", str(kubelet.pod_resources_socket)]
            argv += ["--kube-api-server", api.url, "--node-name", NODE, "--host-write-root", str(write_root)]
            argv += ["--secure-port", "0", "--bind-address", "127.0.0.1"]
            start = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                shared = "nvidia.com/gpu.shared"
                kubelet.wait_for(shared, bool, timeout=60)  # the first device list arrived
                ready = time.perf_counter() - start
                unhealthy = {t.split(":", 1)[1].rsplit(":", 1)[0] for t in kubelet.unhealthy(shared)}
                held = "every held card Unhealthy" if unhealthy == set(cards) else f"held {sorted(unhealthy)}"
                print(
                    f"{'restart -> registered, ledger rebuilt':<44} {ready * 1e3:8.0f} ms "
                    f"({pods} Pods, {holders} holders: {held}; includes detection and imports)"
                )
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        api.close()


RSS_WATCHED_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from bench.plugin_bench import nine_backends
print(nine_backends(Path(sys.argv[1]), (sys.argv[3] or None, sys.argv[4] or None)), flush=True)
"""


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024


def bench_rss_watched(tmp: Path, api_kind: str = "standin", pods: int = 110) -> None:
    """Issue 18's memory bound (<= 80 MiB with all nine backends and 110 Pods watched), two ways:
    (1) the nine backends' allocators and plugin servers with the watch-backed view of ``pods`` Pods in
    one process (``plugin_bench.nine_backends``); (2) the real ``dm serve`` process on the
    mixed-cambricon-metax fixture (all nine manufacturers' detection loaded, two served: what a node
    serves) with the same Pods, its health endpoint and detection loop running, registered with a
    kubelet stand-in. Either is read once registration is done (the view has synced by then)."""
    from tests.conftest import BIN, host  # noqa: PLC0415
    from tests.kube.apiserver import pod_manifest  # noqa: PLC0415
    from tests.kubelet.standin import KubeletStandIn  # noqa: PLC0415

    api = api_server(api_kind)
    repo = str(Path(__file__).resolve().parent.parent)
    server = "" if api.kubeconfig else api.url
    try:
        for n in range(pods):
            limits = {"nvidia.com/gpu": "1"} if n % 10 == 0 else {}
            api.add_pod(pod_manifest(f"rss{n}", node_name=NODE, containers=[("main", limits), ("side", {})]))
        child_tmp = tmp / "rss-watched"  # nine_backends registers at <its tmp>/rss-plugins/kubelet.sock
        (child_tmp / "rss-plugins").mkdir(parents=True)
        with KubeletStandIn(child_tmp / "rss-plugins", tmp / "rss-watched-pr.sock"):
            out = subprocess.run(
                [sys.executable, "-c", RSS_WATCHED_CHILD, str(child_tmp), repo, api.kubeconfig or "", server],
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        text = out.stdout.strip() if out.returncode == 0 else f"the child failed: {out.stderr.strip()[-400:]}"
        print(f"{'nine backends + the pod view: RSS':<44} {text}")
        write_root = tmp / "rss-serve-host"
        write_root.mkdir()
        with KubeletStandIn(tmp / "rss-serve-dp", tmp / "rss-serve-pr" / "kubelet.sock") as kubelet:
            argv = [str(BIN / "gpustack-operator"), "dm", "serve", "--detect-root", str(host("mixed-cambricon-metax"))]
            argv += ["--kube-socket", str(kubelet.socket), "--pod-resources-socket", str(kubelet.pod_resources_socket)]
            argv += ["--node-name", NODE, "--host-write-root", str(write_root)]
            argv += ["--secure-port", "0", "--bind-address", "127.0.0.1"]
            if api.kubeconfig:
                argv, how = in_cluster(api, argv, tmp), "in-cluster service account"
            else:
                argv, how = [*argv, "--kube-api-server", api.url], "--kube-api-server"
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 90
                while len(kubelet.resources()) < 2 and time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.2)
                time.sleep(2.0)  # a publishing round and the first capacity write settle
                served = sorted(kubelet.resources())
                if proc.poll() is not None:
                    print(f"{'dm serve (mixed-cambricon-metax): RSS':<44} serve exited {proc.returncode}")
                else:
                    rss = _rss_mib(proc.pid)
                    verdict = "met" if rss <= 80 else "NOT met"
                    print(
                        f"{'dm serve (mixed-cambricon-metax): RSS':<44} {rss:.1f} MiB with {pods} Pods watched, "
                        f"{len(served)} resources registered, {how} (<= 80 MiB: {verdict})"
                    )
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        api.close()


def in_cluster(api: Any, argv: list[str], tmp: Path) -> list[str]:
    """``argv`` run as in the DaemonSet's Pod: the API server found from ``KUBERNETES_SERVICE_HOST`` /
    ``_PORT`` and the service-account token and CA at /var/run/secrets/kubernetes.io/serviceaccount --
    mounted on a tmpfs over /run in a private mount namespace of its own (nothing is written to the
    machine's /run), then the process exec'd in place (its pid is serve's)."""
    secrets = tmp / "serviceaccount"
    secrets.mkdir(exist_ok=True)
    (secrets / "token").write_text(api.cluster.env["KUBE_LOCAL_TOKEN"])
    (secrets / "ca.crt").write_bytes((api.cluster.state / "certs" / "apiserver.crt").read_bytes())
    (secrets / "namespace").write_text("gpustack-system")
    host, port = api.url.removeprefix("https://").rsplit(":", 1)
    mount = "/run/secrets/kubernetes.io/serviceaccount"
    script = (
        f"mount -t tmpfs tmpfs /run && mkdir -p {mount} && cp {secrets}/* {mount}/ && "
        f'KUBERNETES_SERVICE_HOST={host} KUBERNETES_SERVICE_PORT={port} exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "serve", *argv]
