"""The kubelet stand-in (tests/kubelet) against minimal device plugins written here: registration,
ListAndWatch, the admission order, the pod-resources view, the checkpoint and restarts -- all over
real gRPC on unix sockets."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpustack_operator.deviceplugin.api import (
    deviceplugin_pb2 as dp,
)
from gpustack_operator.deviceplugin.api import (
    deviceplugin_pb2_grpc as dp_grpc,
)
from gpustack_operator.deviceplugin.api import (
    podresources_pb2 as pr,
)
from gpustack_operator.deviceplugin.api import (
    podresources_pb2_grpc as pr_grpc,
)

from tests.kube.apiserver import APIServerStandIn, pod_manifest
from tests.kubelet import checkpoint as ckpt
from tests.kubelet.standin import (
    AdmissionError,
    KubeletStandIn,
    StartError,
    go_status,
    is_extended_resource_name,
    wipe_sockets,
)

RES = "example.com/gpu"

Allocator = Callable[[list[str]], dict[str, str]]


class MiniPlugin(dp_grpc.DevicePluginServicer):
    """The smallest honest device plugin: serves on ``<dir>/<name>``, registers, streams its
    device list (``set_devices`` pushes an update), answers a hint and an Allocate (both
    replaceable), and re-registers when its socket is wiped (``watch=True``), as real plugins do."""

    def __init__(
        self,
        plugin_dir: Path,
        name: str,
        resource: str,
        devices: list[dp.Device],
        *,
        preferred: bool = False,
        pre_start: bool = False,
        watch: bool = False,
    ) -> None:
        self.dir, self.name, self.resource = plugin_dir, name, resource
        self.path = plugin_dir / name
        self._devices = list(devices)
        self._cond = threading.Condition()
        self._version = 0
        self.opts = dp.DevicePluginOptions(get_preferred_allocation_available=preferred, pre_start_required=pre_start)
        self.hint: Callable[[dp.ContainerPreferredAllocationRequest], list[str]] | None = None
        self.allocate_fn: Callable[[list[str], grpc.ServicerContext], dict[str, str]] | None = None
        self.allocations: list[list[str]] = []
        self.prestarts: list[list[str]] = []
        self.hints: list[dp.ContainerPreferredAllocationRequest] = []
        self.streams = 0
        self.server: grpc.Server | None = None
        self._stop = threading.Event()
        self._watch = watch
        self._watcher: threading.Thread | None = None
        self.registrations = 0

    # servicer
    def GetDevicePluginOptions(self, request: Any, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return self.opts

    def ListAndWatch(self, request: Any, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:  # noqa: N802
        self.streams += 1
        seen = -1
        while context.is_active() and not self._stop.is_set():
            with self._cond:
                if seen == self._version:
                    self._cond.wait(0.1)
                    continue
                seen = self._version
                devices = list(self._devices)
            yield dp.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request: Any, context: Any) -> dp.PreferredAllocationResponse:  # noqa: N802
        out = []
        for creq in request.container_requests:
            self.hints.append(creq)
            ids = self.hint(creq) if self.hint else list(creq.available_deviceIDs)[: creq.allocation_size]
            out.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> dp.AllocateResponse:  # noqa: N802
        out = []
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            self.allocations.append(ids)
            envs = self.allocate_fn(ids, context) if self.allocate_fn else {"VISIBLE": ",".join(sorted(ids))}
            out.append(dp.ContainerAllocateResponse(envs=envs, annotations={"n": str(len(ids))}))
        return dp.AllocateResponse(container_responses=out)

    def PreStartContainer(self, request: Any, context: Any) -> dp.PreStartContainerResponse:  # noqa: N802
        self.prestarts.append(list(request.devices_ids))
        return dp.PreStartContainerResponse()

    # lifecycle
    def serve(self) -> MiniPlugin:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_DevicePluginServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix:{self.path}")
        self.server.start()
        return self

    def register(self, version: str = "v1beta1", resource: str | None = None) -> None:
        with grpc.insecure_channel(f"unix:{self.dir / 'kubelet.sock'}") as ch:
            grpc.channel_ready_future(ch).result(timeout=5)
            dp_grpc.RegistrationStub(ch).Register(
                dp.RegisterRequest(
                    version=version, endpoint=self.name, resource_name=resource or self.resource, options=self.opts
                ),
                timeout=15,
            )
        self.registrations += 1
        if self._watch and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch_socket, daemon=True)
            self._watcher.start()

    def _watch_socket(self) -> None:
        while not self._stop.wait(0.05):
            if self.path.exists():
                continue
            # the kubelet wiped our socket: serve again and register once its socket is back
            if self.server is not None:
                self.server.stop(0).wait(5)
            self.serve()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not self._stop.is_set():
                try:
                    self.register()
                    break
                except (grpc.RpcError, grpc.FutureTimeoutError):
                    time.sleep(0.05)

    def set_devices(self, devices: list[dp.Device]) -> None:
        with self._cond:
            self._devices = list(devices)
            self._version += 1
            self._cond.notify_all()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        if self.server is not None:
            self.server.stop(0).wait(5)


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def devs(n: int, prefix: str = "d", numa: int | None = None, health: str = "Healthy") -> list[dp.Device]:
    topo = dp.TopologyInfo(nodes=[dp.NUMANode(ID=numa)]) if numa is not None else None
    return [dp.Device(ID=f"{prefix}{i}", health=health, topology=topo) for i in range(n)]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths must fit sockaddr_un (108 bytes): pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(short_dir / "plugins", short_dir / "pr" / "kubelet.sock") as k:
        yield k


@pytest.fixture
def plugins() -> Iterator[list[MiniPlugin]]:
    started: list[MiniPlugin] = []
    yield started
    for p in started:
        p.stop()


def start_plugin(k: KubeletStandIn, plugins: list[MiniPlugin], n: int = 4, **kw: Any) -> MiniPlugin:
    name = kw.pop("name", "mini.sock")
    resource = kw.pop("resource", RES)
    p = MiniPlugin(k.plugin_dir, name, resource, kw.pop("devices", None) or devs(n), **kw).serve()
    plugins.append(p)
    p.register()
    k.wait_capacity(resource, sum(1 for d in p._devices if d.health == "Healthy"))
    return p


def pr_client(k: KubeletStandIn) -> tuple[grpc.Channel, pr_grpc.PodResourcesListerStub]:
    ch = grpc.insecure_channel(f"unix:{k.pod_resources_socket}")
    return ch, pr_grpc.PodResourcesListerStub(ch)


# --- registration -------------------------------------------------------------------------------


def test_register_dials_back_reads_options_and_streams_devices(
    kubelet: KubeletStandIn, plugins: list[MiniPlugin]
) -> None:
    p = start_plugin(kubelet, plugins, 3, preferred=True)
    reg = kubelet.wait_registered(RES)
    assert reg.accepted and reg.endpoint == "mini.sock" and reg.generation == 0
    assert kubelet.options(RES) is not None and kubelet.options(RES).get_preferred_allocation_available  # type: ignore[union-attr]
    assert kubelet.capacity(RES) == 3 and p.streams == 1
    p.set_devices([*devs(2), dp.Device(ID="d2", health="Unhealthy")])
    kubelet.wait_for(RES, lambda d: d["d2"].health == "Unhealthy")
    assert kubelet.capacity(RES) == 2
    assert kubelet.node_status(RES) == (3, 2)  # the Node counts the Unhealthy one in capacity
    assert kubelet.allocatable(RES) == ["d0", "d1"]


@pytest.mark.parametrize(
    ("version", "resource", "message"),
    [
        ("v1alpha", RES, "requested API version 'v1alpha' is not supported by kubelet"),
        ("v1beta1", "gpu", "the ResourceName 'gpu' is invalid"),
        ("v1beta1", "kubernetes.io/gpu", "the ResourceName 'kubernetes.io/gpu' is invalid"),
        ("v1beta1", "example.com/-bad", "the ResourceName 'example.com/-bad' is invalid"),
    ],
)
def test_register_is_refused_like_the_kubelet(
    kubelet: KubeletStandIn, plugins: list[MiniPlugin], version: str, resource: str, message: str
) -> None:
    p = MiniPlugin(kubelet.plugin_dir, "mini.sock", resource, devs(1)).serve()
    plugins.append(p)
    with pytest.raises(grpc.RpcError) as err:
        p.register(version=version)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert message in (err.value.details() or "")
    (reg,) = kubelet.registrations
    assert not reg.accepted and message in reg.error
    assert kubelet.resources() == []


def test_register_fails_when_the_endpoint_cannot_be_dialled(short_dir: Path) -> None:
    with KubeletStandIn(short_dir / "p", short_dir / "pr.sock", dial_timeout=0.5) as k:
        with grpc.insecure_channel(f"unix:{k.socket}") as ch, pytest.raises(grpc.RpcError) as err:
            dp_grpc.RegistrationStub(ch).Register(
                dp.RegisterRequest(version="v1beta1", endpoint="nobody.sock", resource_name=RES), timeout=10
            )
        assert "failed to dial device plugin" in (err.value.details() or "")
        assert k.registrations[-1].accepted is False


def test_newer_registration_replaces_the_endpoint(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, 2, name="old.sock")
    start_plugin(kubelet, plugins, 5, name="new.sock", devices=devs(5, prefix="n"))
    assert kubelet.wait_registered(RES, 2).endpoint == "new.sock"
    kubelet.wait_for(RES, lambda d: sorted(d) == [f"n{i}" for i in range(5)])
    # the old plugin stopping does not turn the new one's devices Unhealthy
    plugins[0].stop()
    time.sleep(0.3)
    assert kubelet.capacity(RES) == 5


def test_stream_end_turns_devices_unhealthy(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 2)
    p.stop()
    kubelet.wait_for(RES, lambda d: all(x.health == "Unhealthy" for x in d.values()))
    assert kubelet.capacity(RES) == 0 and kubelet.node_status(RES) == (2, 0)


def test_start_wipes_sockets_but_keeps_other_files(short_dir: Path) -> None:
    plugin_dir = short_dir / "plugins"
    plugin_dir.mkdir()
    stale = MiniPlugin(plugin_dir, "stale.sock", RES, devs(1)).serve()
    try:
        (plugin_dir / "notes.txt").write_text("not a socket")
        with KubeletStandIn(plugin_dir, short_dir / "pr.sock") as k:
            assert k.removed_sockets == ["stale.sock"]
            assert not (plugin_dir / "stale.sock").exists()
            assert (plugin_dir / "notes.txt").read_text() == "not a socket"
            assert k.socket.is_socket()
        assert not k.socket.exists() and not (short_dir / "pr.sock").exists()  # nothing leaked
    finally:
        stale.stop()
    assert wipe_sockets(short_dir / "absent") == []


def test_socket_path_too_long_is_refused_with_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sockaddr_un"):
        KubeletStandIn(tmp_path / ("x" * 120), tmp_path / "pr.sock")


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.sliced", True),
        ("device.gpustack.ai/nvidia.visibility", True),
        ("cpu", False),
        ("kubernetes.io/x", False),
        ("requests.example.com/x", False),
        ("Example.com/x", False),
        ("example.com/", False),
        ("example.com/a/b", False),
        ("example.com/" + "a" * 64, False),
    ],
)
def test_extended_resource_names(name: str, ok: bool) -> None:
    assert is_extended_resource_name(name) is ok


def test_go_status_names() -> None:
    assert go_status(grpc.StatusCode.FAILED_PRECONDITION) == "FailedPrecondition"
    assert go_status(grpc.StatusCode.OK) == "OK"


# --- admission -----------------------------------------------------------------------------------


def test_admission_order_view_during_allocate_and_results(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 4)
    seen: list[list[pr.PodResources]] = []

    def allocate(ids: list[str], context: grpc.ServicerContext) -> dict[str, str]:
        # what a plugin sees from the kubelet while its Allocate runs: the pod, devices not yet
        ch, stub = pr_client(kubelet)
        with ch:
            seen.append(list(stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources))
        return {"VISIBLE": ",".join(ids)}

    p.allocate_fn = allocate
    pod = pod_manifest("p1", uid="u1", containers=[("main", {RES: "2"}), ("side", {RES: "1"})])
    grants = kubelet.admit(pod)
    assert [g.device_ids for g in (grants["main"][RES], grants["side"][RES])] == [["d0", "d1"], ["d2"]]
    assert p.allocations == [["d0", "d1"], ["d2"]]  # one Allocate per container, in spec order
    first, second = seen
    assert [(c.name, list(c.devices)) for c in first[0].containers] == [("main", []), ("side", [])]
    assert [c.name for c in second[0].containers if c.devices] == ["main"]
    assert kubelet.envs("u1", "main") == {"VISIBLE": "d0,d1"}
    assert kubelet.results("u1")["side"][RES].annotations["n"] == "1"
    assert kubelet.allocatable(RES) == ["d3"]
    ch, stub = pr_client(kubelet)
    with ch:
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources
        got = stub.Get(pr.GetPodResourcesRequest(pod_name="p1", pod_namespace="default"), timeout=5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="default"), timeout=5)
    assert err.value.details() == "pod nope in namespace default not found"
    main = listed[0].containers[0]
    # one ContainerDevices per device id, as the kubelet lists them
    assert [list(d.device_ids) for d in main.devices] == [["d0"], ["d1"]]
    assert {d.resource_name for d in main.devices} == {RES}
    assert got.pod_resources == listed[0]
    assert kubelet.pod_resources_calls.count("List") == 3


def test_preferred_allocation_is_used_and_kubelet_fills_the_rest(
    kubelet: KubeletStandIn, plugins: list[MiniPlugin]
) -> None:
    p = start_plugin(kubelet, plugins, 6, preferred=True)
    p.hint = lambda req: ["d5", "d3"]
    kubelet.admit(pod_manifest("a", uid="ua", containers=[("c", {RES: "2"})]))
    assert p.allocations[-1] == ["d5", "d3"]
    (hint,) = p.hints
    assert list(hint.available_deviceIDs) == [f"d{i}" for i in range(6)] and hint.allocation_size == 2
    assert list(hint.must_include_deviceIDs) == []
    # an answer naming a held or unknown id: the kubelet keeps what is available and fills from the rest
    p.hint = lambda req: ["d5", "zz", "d4"]
    kubelet.admit(pod_manifest("b", uid="ub", containers=[("c", {RES: "2"})]))
    assert p.allocations[-1] == ["d4", "d0"]
    assert list(p.hints[-1].available_deviceIDs) == ["d0", "d1", "d2", "d4"]
    assert [c.method for c in kubelet.calls] == ["GetPreferredAllocation", "Allocate"] * 2


def test_no_hint_without_the_option(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 3)
    kubelet.admit(pod_manifest("a", uid="ua", containers=[("c", {RES: "1"})]))
    assert p.hints == [] and [c.method for c in kubelet.calls] == ["Allocate"]


def test_init_container_devices_are_reused(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 4, preferred=True)
    pod = pod_manifest("p", uid="u", init_containers=[("init", {RES: "1"})], containers=[("main", {RES: "2"})])
    grants = kubelet.admit(pod)
    assert grants["init"][RES].device_ids == ["d0"]
    assert grants["main"][RES].device_ids[0] == "d0"  # reused, not a fresh one
    assert list(p.hints[-1].must_include_deviceIDs) == ["d0"]
    assert sorted(kubelet.allocatable(RES)) == ["d2", "d3"]
    # a non-restartable init container is not listed by pod-resources
    assert [c.name for c in kubelet.pod_resources()[0].containers] == ["main"]


def test_restartable_init_container_is_listed_first_and_not_reused(
    kubelet: KubeletStandIn, plugins: list[MiniPlugin]
) -> None:
    start_plugin(kubelet, plugins, 4)
    pod = pod_manifest("p", uid="u", containers=[("main", {RES: "1"})])
    pod["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {RES: "1"}}}
    ]
    grants = kubelet.admit(pod)
    assert grants["sidecar"][RES].device_ids == ["d0"] and grants["main"][RES].device_ids == ["d1"]
    assert [c.name for c in kubelet.pod_resources()[0].containers] == ["sidecar", "main"]


def test_grpc_error_rejects_the_pod_with_code_and_details(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 4)

    def refuse(ids: list[str], context: grpc.ServicerContext) -> dict[str, str]:
        if len(p.allocations) == 2:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "accelerator d1 is held by ns/other")
        return {}

    p.allocate_fn = refuse
    pod = pod_manifest("p", uid="u", containers=[("a", {RES: "1"}), ("b", {RES: "1"})])
    with pytest.raises(AdmissionError) as err:
        kubelet.admit(pod)
    e = err.value
    assert (e.code, e.details, e.container, e.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "accelerator d1 is held by ns/other",
        "b",
        "UnexpectedAdmissionError",
    )
    assert str(e) == (
        "Allocate failed due to rpc error: code = FailedPrecondition desc = accelerator d1 is held by ns/other, "
        "which is unexpected"
    )
    # the rejected pod leaves the view and gives back what its first container got
    assert kubelet.pods() == [] and kubelet.pod_resources() == [] and "u" in kubelet.rejected
    assert kubelet.allocatable(RES) == ["d0", "d1", "d2", "d3"]


def test_not_enough_healthy_devices(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, devices=[*devs(2), dp.Device(ID="sick", health="Unhealthy")])
    kubelet.admit(pod_manifest("a", uid="ua", containers=[("c", {RES: "1"})]))
    with pytest.raises(AdmissionError) as err:
        kubelet.admit(pod_manifest("b", uid="ub", containers=[("c", {RES: "2"})]))
    assert err.value.code is None
    assert "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1" in str(err.value)
    kubelet.remove("ua")
    assert kubelet.admit(pod_manifest("b", uid="ub", containers=[("c", {RES: "2"})]))["c"][RES].device_ids == [
        "d0",
        "d1",
    ]


def test_forced_ids_reach_the_plugin_as_given(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 3, preferred=True)
    kubelet.admit(pod_manifest("a", uid="ua", containers=[("c", {RES: "1"})]))
    # a stale kubelet hands out d0 again: the plugin gets it, no hint is asked
    kubelet.admit(pod_manifest("b", uid="ub", containers=[("c", {RES: "1"})]), force={"c": {RES: ["d0"]}})
    assert p.allocations == [["d0"], ["d0"]] and len(p.hints) == 1


def test_status_goes_to_the_api_server_and_other_nodes_pods_are_refused(
    short_dir: Path, plugins: list[MiniPlugin]
) -> None:
    with (
        APIServerStandIn() as api,
        KubeletStandIn(short_dir / "p", short_dir / "pr.sock", node_name="n1", pod_status=api.pod_status) as k,
    ):
        p = start_plugin(k, plugins, 1)
        ok = api.add_pod(pod_manifest("ok", node_name="n1", containers=[("c", {RES: "1"})]))
        k.admit(ok)
        assert api.get("default", "ok")["status"] == {"phase": "Running"}  # type: ignore[index]
        p.allocate_fn = lambda ids, ctx: ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "held")  # type: ignore[func-returns-value]
        k.remove(ok["metadata"]["uid"])
        bad = api.add_pod(pod_manifest("bad", node_name="n1", containers=[("c", {RES: "1"})]))
        with pytest.raises(AdmissionError):
            k.admit(bad)
        status = api.get("default", "bad")["status"]  # type: ignore[index]
        assert (status["phase"], status["reason"]) == ("Failed", "UnexpectedAdmissionError")
        assert "desc = held" in status["message"]
        with pytest.raises(ValueError, match="bound to n2, not to this kubelet's n1"):
            k.admit(pod_manifest("x", uid="ux", node_name="n2", containers=[("c", {RES: "1"})]))


def test_unregistered_and_native_resources_are_skipped(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 2)
    pod = pod_manifest(
        "p", uid="u", containers=[("c", {RES: "1", "example.com/gpu.sliced.memory-mib": "1024", "cpu": "2"})]
    )
    assert list(kubelet.admit(pod)["c"]) == [RES]
    assert len(p.allocations) == 1


def test_bad_manifests_are_refused_clearly(kubelet: KubeletStandIn) -> None:
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        kubelet.admit({"metadata": {"name": "x"}, "spec": {"containers": []}})
    with pytest.raises(ValueError, match="whole numbers"):
        kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "500m"})]))


def test_prestart_is_called_when_the_plugin_asks(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = start_plugin(kubelet, plugins, 2, pre_start=True)
    kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "2"})]))
    assert p.prestarts == [["d0", "d1"]]


class BrokenPreStart(MiniPlugin):
    def PreStartContainer(self, request: Any, context: Any) -> dp.PreStartContainerResponse:  # noqa: N802
        context.abort(grpc.StatusCode.INTERNAL, "no")
        raise AssertionError("unreachable")


def test_prestart_failure_fails_the_start_not_the_admission(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    p = BrokenPreStart(kubelet.plugin_dir, "b.sock", RES, devs(2), pre_start=True).serve()
    plugins.append(p)
    p.register()
    kubelet.wait_capacity(RES, 2)
    with pytest.raises(StartError, match="code = Internal desc = no"):
        kubelet.admit(pod_manifest("q", uid="uq", containers=[("c", {RES: "1"})]))
    assert kubelet.grants("uq")["c"][RES].device_ids == ["d0"]  # admitted: the devices are held
    assert kubelet.admit(pod_manifest("r", uid="ur", containers=[("c", {RES: "1"})]), start=False)


def test_shuffle_seed_reorders_id_lists(short_dir: Path, plugins: list[MiniPlugin]) -> None:
    with KubeletStandIn(short_dir / "p", short_dir / "pr.sock", shuffle_seed=7) as k:
        p = start_plugin(k, plugins, 8, preferred=True)
        p.hint = lambda req: []  # no preference: the kubelet's own pick, passed in shuffled order
        k.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "8"})]))
        assert sorted(p.allocations[0]) == [f"d{i}" for i in range(8)]
        assert p.allocations[0] != [f"d{i}" for i in range(8)]
        assert sorted(p.hints[0].available_deviceIDs) == [f"d{i}" for i in range(8)]


def test_allocatable_resources_carry_topology(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, devices=[*devs(2, numa=1), dp.Device(ID="x", health="Unhealthy")])
    ch, stub = pr_client(kubelet)
    with ch:
        resp = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
    assert [(list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in resp.devices] == [
        (["d0"], [1]),
        (["d1"], [1]),
    ]


# --- checkpoint ------------------------------------------------------------------------------------

# Two checkpoint files written by real kubelets (published with their checksums): the checksum
# computed here must equal the kubelet's for both, or the format is not the kubelet's.
REAL_CHECKPOINTS = [
    '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":'
    '["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}',
    '{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check",'
    '"ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],'
    '"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}',
]


@pytest.mark.parametrize("raw", REAL_CHECKPOINTS)
def test_checksum_matches_real_kubelet_files(raw: str) -> None:
    cp = ckpt.decode(raw.encode())
    assert ckpt.checksum(cp) == json.loads(raw)["Checksum"]
    assert ckpt.encode(cp) == raw.encode()  # byte-identical round trip


def test_real_alloc_resp_decodes_as_a_container_allocate_response() -> None:
    cp = ckpt.decode(REAL_CHECKPOINTS[1].encode())
    assert cp.entries is not None
    resp = dp.ContainerAllocateResponse.FromString(cp.entries[0].alloc_resp or b"")
    assert dict(resp.envs) == {"NVIDIA_VISIBLE_DEVICES": "tegra"}
    assert cp.entries[0].device_ids == ["tegra"]


def test_checksum_distinguishes_nil_from_empty_and_sees_every_field() -> None:
    base = ckpt.Checkpoint(entries=None, registered={"r": ["a"]})
    variants = [
        ckpt.Checkpoint(entries=[], registered={"r": ["a"]}),
        ckpt.Checkpoint(entries=None, registered={"r": ["b"]}),
        ckpt.Checkpoint(entries=None, registered={"r": None}),
        ckpt.Checkpoint(entries=None, registered=None),
        ckpt.Checkpoint(entries=[ckpt.Entry("u", "c", "r", {-1: ["a"]}, b"\x01")], registered={"r": ["a"]}),
        ckpt.Checkpoint(entries=[ckpt.Entry("u", "c", "r", {0: ["a"]}, b"\x01")], registered={"r": ["a"]}),
        ckpt.Checkpoint(entries=[ckpt.Entry("u", "c", "r", {0: ["a"]}, None)], registered={"r": ["a"]}),
    ]
    sums = {ckpt.checksum(v) for v in [base, *variants]}
    assert len(sums) == len(variants) + 1


def test_numa_keys_sort_numerically_in_the_hash_and_as_strings_in_json() -> None:
    cp = ckpt.Checkpoint(entries=[ckpt.Entry("u", "c", "r", {10: ["x"], 2: ["y"], -1: ["z"]}, b"")], registered={})
    assert "map[-1:[z] 2:[y] 10:[x]]" in ckpt.spew(cp)
    assert b'"DeviceIDs":{"-1":["z"],"10":["x"],"2":["y"]}' in ckpt.encode(cp)
    assert b'"AllocResp":""' in ckpt.encode(cp)


def test_corrupt_checkpoints_are_named() -> None:
    good = json.loads(REAL_CHECKPOINTS[0])
    good["Checksum"] += 1
    with pytest.raises(ckpt.CheckpointError, match="checksum mismatch"):
        ckpt.decode(json.dumps(good).encode())
    assert ckpt.decode(json.dumps(good).encode(), verify=False).registered == {
        "nvidia.com/gpu": ["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]
    }
    for raw, what in [
        (b"{", "not JSON"),
        (b"[]", '"Data"'),
        (b'{"Data":{"PodDeviceEntries":{}}}', "not a list"),
        (b'{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}', "not a NUMA id"),
        (b'{"Data":{"PodDeviceEntries":[{"AllocResp":"%%"}]}}', "not base64"),
        (b'{"Data":{"RegisteredDevices":{"r":[1]}}}', "not a list of strings"),
    ]:
        with pytest.raises(ckpt.CheckpointError, match=what):
            ckpt.decode(raw, verify=False)
    # the version-1 layout (a flat id list) is read as no-topology devices
    v1 = ckpt.decode(b'{"Data":{"PodDeviceEntries":[{"PodUID":"u","DeviceIDs":["a","b"]}]}}', verify=False)
    assert v1.entries is not None and v1.entries[0].devices == {-1: ["a", "b"]}


def test_standin_writes_a_verifiable_checkpoint(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, devices=[*devs(2, numa=0), dp.Device(ID="sick", health="Unhealthy")])
    empty = json.loads((kubelet.plugin_dir / ckpt.FILE_NAME).read_text())
    assert empty["Data"] == {"PodDeviceEntries": None, "RegisteredDevices": {RES: ["d0", "d1"]}}
    kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "1"})]))
    raw = json.loads((kubelet.plugin_dir / ckpt.FILE_NAME).read_text())
    (entry,) = raw["Data"]["PodDeviceEntries"]
    assert entry["PodUID"] == "u" and entry["ContainerName"] == "c" and entry["DeviceIDs"] == {"0": ["d0"]}
    resp = dp.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))
    assert dict(resp.envs) == {"VISIBLE": "d0"}
    assert ckpt.read(kubelet.plugin_dir) is not None  # the checksum verifies


# --- restart -----------------------------------------------------------------------------------------


def test_restart_wipes_sockets_plugins_reregister_and_allocations_survive(
    kubelet: KubeletStandIn, plugins: list[MiniPlugin]
) -> None:
    p = start_plugin(kubelet, plugins, 4, watch=True)
    kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "2"})]))
    before = kubelet.results("u")
    kubelet.restart()
    reg = kubelet.wait_registered(RES, 2, timeout=15)
    assert reg.generation == 1
    assert eventually(lambda: p.registrations == 2)
    kubelet.wait_capacity(RES, 4)
    # the allocation came back from the checkpoint: same devices, same response, still held
    assert kubelet.grants("u")["c"][RES].device_ids == ["d0", "d1"]
    assert kubelet.results("u") == before
    assert kubelet.allocatable(RES) == ["d2", "d3"]
    assert [c.name for c in kubelet.pod_resources()[0].containers] == ["c"]
    assert kubelet.admit(pod_manifest("q", uid="uq", containers=[("c", {RES: "2"})]))["c"][RES].device_ids == [
        "d2",
        "d3",
    ]


def test_restart_before_reregistration_has_no_capacity(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, 2)  # this plugin does not watch: it never comes back
    kubelet.restart()
    assert kubelet.capacity(RES) == 0 and kubelet.resources() == []
    with pytest.raises(AdmissionError, match="stopped"):
        kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "1"})]))


def test_corrupt_checkpoint_is_ignored_on_restart(kubelet: KubeletStandIn, plugins: list[MiniPlugin]) -> None:
    start_plugin(kubelet, plugins, 2, watch=True)
    kubelet.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "1"})]))
    kubelet.stop()
    path = kubelet.plugin_dir / ckpt.FILE_NAME
    path.write_text(path.read_text().replace('"d0"', '"d9"'))
    kubelet.restart()
    assert "checksum mismatch" in kubelet.checkpoint_error
    kubelet.wait_registered(RES, 2, timeout=15)
    kubelet.wait_capacity(RES, 2)
    assert kubelet.grants("u") == {}  # as the kubelet: allocation info lost, not guessed


def test_fresh_standin_reads_another_processes_checkpoint(short_dir: Path, plugins: list[MiniPlugin]) -> None:
    plugin_dir = short_dir / "p"
    with KubeletStandIn(plugin_dir, short_dir / "pr.sock") as first:
        start_plugin(first, plugins, 2)
        pod = pod_manifest("p", uid="u", containers=[("c", {RES: "1"})])
        first.admit(pod)
    plugins[0].stop()
    with KubeletStandIn(plugin_dir, short_dir / "pr.sock") as second:
        assert second.grants("u")["c"][RES].device_ids == ["d0"]  # held until the next admission
        start_plugin(second, plugins, 2, name="again.sock")
        # the kubelet re-admitting a running pod keeps its devices; a stranger's entry is dropped
        assert second.admit(pod)["c"][RES].device_ids == ["d0"]
        assert len(plugins[-1].allocations) == 0


def test_checkpoint_off_keeps_allocations_in_memory(short_dir: Path, plugins: list[MiniPlugin]) -> None:
    with KubeletStandIn(short_dir / "p", short_dir / "pr.sock", checkpoint=False) as k:
        start_plugin(k, plugins, 2, watch=True)
        k.admit(pod_manifest("p", uid="u", containers=[("c", {RES: "1"})]))
        assert not (k.plugin_dir / ckpt.FILE_NAME).exists()
        k.restart(down=0.1)
        k.wait_registered(RES, 2, timeout=15)
        assert k.grants("u")["c"][RES].device_ids == ["d0"]


def test_close_leaves_no_threads_or_sockets(short_dir: Path, plugins: list[MiniPlugin]) -> None:
    before = {t.name for t in threading.enumerate()}
    k = KubeletStandIn(short_dir / "p", short_dir / "pr.sock").start()
    start_plugin(k, plugins, 2)
    k.close()
    plugins[0].stop()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name.startswith("kubelet-law") for t in threading.enumerate() if t.name not in before
    ):
        time.sleep(0.05)
    assert not any(t.name.startswith("kubelet-law") for t in threading.enumerate())
    assert sorted(p.name for p in (short_dir / "p").iterdir() if p.is_socket()) == []
    assert not (short_dir / "pr.sock").exists()
