"""The plugin server over real gRPC on unix sockets: serve-then-register, the kubelet's restart, the
successor's socket, and every RPC's mapping onto the allocator core (faked at its interface)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from gpustack_operator.allocator.core import DeviceState, Pool
from gpustack_operator.deviceplugin import server as dp
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from gpustack_operator.manufacturers.respond import Code, Family, Injection, RefusedError
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.deviceplugin.fakes import PARTITIONED, SLICED, FakeAllocator, FakeKubelet, short_dir, socket_inode

TOKENS = [
    DeviceState("GPU-a::0", True, (0,)),
    DeviceState("GPU-a::1", True, (0,)),
    DeviceState("GPU-b::0", False, (1,)),
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
def allocator() -> FakeAllocator:
    return FakeAllocator({SLICED.resource: list(TOKENS)})


def make_server(allocator: FakeAllocator, plugin_dir: Path, **kw: object) -> dp.PluginServer:
    options: dict[str, object] = {"poll_interval": 0.05, "backoff_max": 0.2, "register_timeout": 15.0}
    options.update(kw)
    return dp.PluginServer(allocator, SLICED, "nvidia", kube_socket=str(plugin_dir / "kubelet.sock"), **options)  # type: ignore[arg-type]


@pytest.fixture
def served(allocator: FakeAllocator, plugin_dir: Path, kubelet: FakeKubelet) -> Iterator[dp.PluginServer]:
    server = make_server(allocator, plugin_dir)
    server.start()
    assert server.wait_registrations(1, 10), "the plugin never registered"
    yield server
    server.stop()


@pytest.fixture
def stub(served: dp.PluginServer) -> Iterator[pb_grpc.DevicePluginStub]:
    with grpc.insecure_channel(f"unix://{served.socket_path}") as channel:
        yield pb_grpc.DevicePluginStub(channel)


# -- naming ----------------------------------------------------------------------------------------


def test_socket_names_per_family_and_profile() -> None:
    assert dp.socket_name("nvidia", SLICED) == "gpustack-nvidia-sliced.sock"
    assert dp.socket_name("nvidia", PARTITIONED) == "gpustack-nvidia-partitioned-mig-1g.10gb.sock"


# -- registration ----------------------------------------------------------------------------------


def test_register_carries_the_fields_and_comes_after_our_server_answers(
    served: dp.PluginServer, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    reg = kubelet.registrations[0]
    assert reg.request.version == "v1beta1"
    assert reg.request.endpoint == "gpustack-nvidia-sliced.sock"
    assert reg.request.resource_name == "nvidia.com/gpu.sliced"
    assert reg.request.options.get_preferred_allocation_available is True
    assert reg.request.options.pre_start_required is False
    # the kubelet's dial-back inside Register found the socket and our server answering on it
    assert reg.socket_existed and reg.error is None
    assert reg.answered is not None and reg.answered.get_preferred_allocation_available is True
    assert served.socket_path == str(plugin_dir / "gpustack-nvidia-sliced.sock")
    # nothing but the kubelet's socket and ours is left in the directory (the temporary name is gone)
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["gpustack-nvidia-sliced.sock", "kubelet.sock"]


def test_no_register_while_our_own_server_does_not_answer(
    allocator: FakeAllocator, plugin_dir: Path, kubelet: FakeKubelet, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: object, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        context.abort(grpc.StatusCode.UNAVAILABLE, "not ready")
        raise AssertionError("unreachable")

    monkeypatch.setattr(dp.DevicePluginServicer, "GetDevicePluginOptions", refuse)
    server = make_server(allocator, plugin_dir)
    server.start()
    try:
        time.sleep(1.0)
        assert kubelet.registrations == [], "registered before its own server answered"
        monkeypatch.undo()
        assert server.wait_registrations(1, 10)
        assert kubelet.registrations[0].error is None
    finally:
        server.stop()


def test_waits_for_an_absent_kubelet_then_registers(allocator: FakeAllocator, plugin_dir: Path) -> None:
    server = make_server(allocator, plugin_dir)
    server.start()
    kubelet = FakeKubelet(plugin_dir)
    try:
        time.sleep(0.5)
        assert server.registrations == 0
        assert (plugin_dir / "gpustack-nvidia-sliced.sock").exists(), "serving does not wait for the kubelet"
        kubelet.start()
        assert server.wait_registrations(1, 10)
        assert kubelet.registrations[0].error is None
    finally:
        server.stop()
        kubelet.stop()


def test_reregisters_on_a_fresh_socket_after_the_kubelet_restarts(
    served: dp.PluginServer, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    before = socket_inode(plugin_dir / served.endpoint)
    kubelet.restart()  # wipes the directory, binds a new kubelet.sock
    assert served.wait_registrations(2, 10), "no registration after the kubelet restarted"
    assert kubelet.wait_for(2)
    second = kubelet.registrations[1]
    assert second.socket_existed and second.error is None
    assert second.request.resource_name == "nvidia.com/gpu.sliced"
    after = socket_inode(plugin_dir / served.endpoint)
    assert after is not None and after != before


def test_reregisters_when_only_the_kubelet_socket_is_recreated(
    served: dp.PluginServer, kubelet: FakeKubelet, plugin_dir: Path
) -> None:
    kubelet.stop()
    kubelet.start()  # a new kubelet.sock inode, our socket left alone
    assert served.wait_registrations(2, 10)
    assert kubelet.wait_for(2) and kubelet.registrations[1].error is None


def test_a_successors_socket_is_never_unlinked(
    allocator: FakeAllocator, plugin_dir: Path, kubelet: FakeKubelet
) -> None:
    old = make_server(allocator, plugin_dir, poll_interval=30.0)  # stops before it looks again
    old.start()
    assert old.wait_registrations(1, 10)
    successor = make_server(allocator, plugin_dir)
    successor.start()
    try:
        assert successor.wait_registrations(1, 10)
        path = plugin_dir / "gpustack-nvidia-sliced.sock"
        theirs = socket_inode(path)
        old.stop()
        assert socket_inode(path) == theirs, "stopping the predecessor removed the successor's socket"
        with grpc.insecure_channel(f"unix://{path}") as channel:
            assert pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=5) is not None
    finally:
        successor.stop()
    assert not (plugin_dir / "gpustack-nvidia-sliced.sock").exists(), "a server's own socket is removed on stop"


def test_a_server_that_sees_its_socket_taken_over_stands_aside(
    allocator: FakeAllocator, plugin_dir: Path, kubelet: FakeKubelet
) -> None:
    old = make_server(allocator, plugin_dir)
    old.start()
    assert old.wait_registrations(1, 10)
    successor = make_server(allocator, plugin_dir)
    successor.start()
    try:
        assert successor.wait_registrations(1, 10)
        path = plugin_dir / "gpustack-nvidia-sliced.sock"
        theirs = socket_inode(path)
        deadline = time.monotonic() + 5
        while not old.superseded and time.monotonic() < deadline:
            time.sleep(0.05)
        assert old.superseded
        time.sleep(0.3)
        assert socket_inode(path) == theirs, "the predecessor fought back for the socket"
        assert old.registrations == 1
    finally:
        old.stop()
        successor.stop()


# -- the RPCs --------------------------------------------------------------------------------------


def test_list_and_watch_sends_the_list_then_every_change(
    stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator
) -> None:
    stream = stub.ListAndWatch(pb.Empty(), timeout=20)
    first = next(stream)
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices] == [
        ("GPU-a::0", "Healthy", [0]),
        ("GPU-a::1", "Healthy", [0]),
        ("GPU-b::0", "Unhealthy", [1]),
    ]
    changed: list[pb.ListAndWatchResponse] = []

    def read() -> None:
        changed.append(next(stream))

    reader = threading.Thread(target=read)
    started = time.monotonic()
    reader.start()
    time.sleep(0.1)
    allocator.change(SLICED.resource, [DeviceState("GPU-a::0", False, (0,)), DeviceState("p-0", True)])
    reader.join(5)
    assert changed, "no update after the allocator's version changed"
    assert time.monotonic() - started < 3
    update = changed[0]
    assert [(d.ID, d.health) for d in update.devices] == [("GPU-a::0", "Unhealthy"), ("p-0", "Healthy")]
    assert not update.devices[1].HasField("topology"), "a token without NUMA nodes carries no topology"
    stream.cancel()


def test_list_and_watch_ends_when_the_server_stops(served: dp.PluginServer) -> None:
    with grpc.insecure_channel(f"unix://{served.socket_path}") as channel:
        stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=30)
        next(stream)
        started = time.monotonic()
        served.stop()
        with pytest.raises((grpc.RpcError, StopIteration)):
            next(stream)
        assert time.monotonic() - started < 8


def test_options_and_prestart(stub: pb_grpc.DevicePluginStub) -> None:
    options = stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available and not options.pre_start_required
    assert stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=["GPU-a::0"]), timeout=5) is not None


def test_preferred_allocation_per_container(stub: pb_grpc.DevicePluginStub) -> None:
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=["a", "b", "c"], must_include_deviceIDs=["a"], allocation_size=2
            ),
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=["x", "y"], allocation_size=1),
        ]
    )
    answer = stub.GetPreferredAllocation(request, timeout=5)
    assert [list(r.deviceIDs) for r in answer.container_responses] == [["a", "c"], ["y"]]


def test_allocate_maps_every_injection_field(stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator) -> None:
    def answer(resource: str, requests: list[list[str]]) -> list[Injection]:
        out = []
        for ids in requests:
            inj = Injection(
                envs={"CUDA_DEVICE_MEMORY_LIMIT_0": "1024m", "IDS": ",".join(ids)},
                annotations={"cdi.k8s.io/gpustack_x": "nvidia.com/gpu=0"},
                cdi_devices=["nvidia.com/gpu=0"],
                log=["aligned down to 50%"],
            )
            inj.add_mount("/usr/local/vgpu", "/var/lib/gpustack/operator/lib/nvidia/cuda-12")
            inj.add_mount("/tmp/vgpu", "/var/lib/gpustack/operator/pods/u1/main", read_only=False)
            inj.add_device("/dev/nvidia0")
            inj.add_device("/dev/dri/card1", "/dev/dri/card3", "rw")
            out.append(inj)
        return out

    allocator.answer = answer
    request = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["GPU-a::0", "GPU-a::1"]),
            pb.ContainerAllocateRequest(devices_ids=["GPU-b::0"]),
        ]
    )
    response = stub.Allocate(request, timeout=5)
    assert allocator.calls == [("nvidia.com/gpu.sliced", [["GPU-a::0", "GPU-a::1"], ["GPU-b::0"]])]
    assert len(response.container_responses) == 2
    first, second = response.container_responses
    assert dict(first.envs) == {"CUDA_DEVICE_MEMORY_LIMIT_0": "1024m", "IDS": "GPU-a::0,GPU-a::1"}
    assert dict(second.envs)["IDS"] == "GPU-b::0"
    assert [(m.container_path, m.host_path, m.read_only) for m in first.mounts] == [
        ("/usr/local/vgpu", "/var/lib/gpustack/operator/lib/nvidia/cuda-12", True),
        ("/tmp/vgpu", "/var/lib/gpustack/operator/pods/u1/main", False),
    ]
    assert [(d.container_path, d.host_path, d.permissions) for d in first.devices] == [
        ("/dev/nvidia0", "/dev/nvidia0", "rwm"),
        ("/dev/dri/card1", "/dev/dri/card3", "rw"),
    ]
    assert dict(first.annotations) == {"cdi.k8s.io/gpustack_x": "nvidia.com/gpu=0"}
    assert [c.name for c in first.cdi_devices] == ["nvidia.com/gpu=0"]


def test_allocate_logs_the_decisions_lines(
    stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator, caplog: pytest.LogCaptureFixture
) -> None:
    allocator.answer = lambda _r, reqs: [Injection(log=["CDI fell back to envvar: the Pod names a runtimeClassName"])]
    with caplog.at_level("INFO", logger="gpustack_operator.deviceplugin.server"):
        stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["x"])]), timeout=5
        )
    assert any("CDI fell back to envvar" in r.getMessage() and r.levelname == "INFO" for r in caplog.records)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (Code.FAILED_PRECONDITION, grpc.StatusCode.FAILED_PRECONDITION),
        (Code.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT),
        (Code.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_a_refusal_is_its_status_and_message(
    stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator, code: Code, status: grpc.StatusCode
) -> None:
    message = "GPU-a has no free slot for a 60% slice; free one or ask for less"

    def refuse(resource: str, requests: list[list[str]]) -> list[Injection]:
        raise RefusedError(message, code)

    allocator.answer = refuse
    with pytest.raises(grpc.RpcError) as info:
        stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["a"])]), timeout=5
        )
    assert info.value.code() == status
    assert info.value.details() == message


def test_an_unexpected_exception_is_internal_in_one_line(
    stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator, caplog: pytest.LogCaptureFixture
) -> None:
    def crash(resource: str, requests: list[list[str]]) -> list[Injection]:
        raise KeyError("GPU-zz\nsecond line")

    allocator.answer = crash
    with pytest.raises(grpc.RpcError) as info:
        stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["a"])]), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.INTERNAL
    details = info.value.details()
    assert "KeyError" in details and "\n" not in details and "Traceback" not in details
    assert any(r.exc_info for r in caplog.records), "the trace goes to the log"


def test_an_answer_for_the_wrong_number_of_containers_is_internal(
    stub: pb_grpc.DevicePluginStub, allocator: FakeAllocator
) -> None:
    allocator.answer = lambda _r, _reqs: []
    with pytest.raises(grpc.RpcError) as info:
        stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["a"])]), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.INTERNAL


def test_plugin_set_refuses_two_pools_on_one_socket(allocator: FakeAllocator, plugin_dir: Path) -> None:
    with pytest.raises(dp.PluginError, match="share a socket"):
        dp.PluginSet([make_server(allocator, plugin_dir), make_server(allocator, plugin_dir)])


@given(
    st.lists(
        st.tuples(
            st.text(alphabet="abcdefgh0123456789:-", min_size=1, max_size=40),
            st.booleans(),
            st.lists(st.integers(min_value=0, max_value=7), max_size=3, unique=True),
        ),
        max_size=60,
    )
)
def test_list_assembled_from_cached_encodings_is_the_fresh_response(raw: list[tuple[str, bool, list[int]]]) -> None:
    """ListAndWatch's response concatenates each token's cached encoding (protobuf: concatenation is
    merge, a repeated field appends); it must equal the response built message by message, in order,
    also when the same token recurs with another health."""
    from gpustack_operator.deviceplugin.server import DevicePluginServicer, device_message

    states = [DeviceState(i, h, tuple(sorted(n))) for i, h, n in raw]
    servicer = DevicePluginServicer(None, Pool("x.com/gpu", Family.SLICED, True), threading.Event())  # type: ignore[arg-type]
    fresh = pb.ListAndWatchResponse(devices=[device_message(d) for d in states])
    assert servicer._list(states) == fresh
    assert servicer._list(list(reversed(states))) == pb.ListAndWatchResponse(devices=list(reversed(fresh.devices)))
