"""The kubelet's pod-resources List, asked over a real unix socket served by a stand-in kubelet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from gpustack_operator.allocator.pods import KubeletContainer, KubeletPod, PodSpec, PodsUnavailableError
from gpustack_operator.deviceplugin.api import podresources_pb2 as pr
from gpustack_operator.deviceplugin.api import podresources_pb2_grpc as pr_grpc
from gpustack_operator.deviceplugin.podresources import KubeletPodSource

from tests.unit.deviceplugin.fakes import short_dir

ANSWER = pr.ListPodResourcesResponse(
    pod_resources=[
        pr.PodResources(
            name="train-0",
            namespace="ml",
            containers=[
                pr.ContainerResources(
                    name="main",
                    devices=[
                        pr.ContainerDevices(resource_name="nvidia.com/gpu.sliced", device_ids=["GPU-a::0"]),
                        pr.ContainerDevices(resource_name="nvidia.com/gpu.sliced", device_ids=["GPU-b::3"]),
                        pr.ContainerDevices(resource_name="cpu-ignored.example/x", device_ids=["1", "2"]),
                    ],
                    cpu_ids=[4, 5],
                ),
                pr.ContainerResources(name="sshd"),
            ],
        ),
        pr.PodResources(name="pending", namespace="default", containers=[pr.ContainerResources(name="c")]),
    ]
)


class Lister(pr_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, answer: Callable[[], pr.ListPodResourcesResponse]) -> None:
        self.answer = answer
        self.calls = 0

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:  # noqa: N802
        self.calls += 1
        return self.answer()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def serve(path: Path, lister: Lister) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


def no_api() -> list[PodSpec]:
    raise PodsUnavailableError("not asked in this test")


def test_list_is_converted_joining_a_resources_entries(socket_dir: Path) -> None:
    lister = Lister(lambda: ANSWER)
    server = serve(socket_dir / "kubelet.sock", lister)
    try:
        source = KubeletPodSource(no_api, socket=str(socket_dir / "kubelet.sock"))
        pods = source.kubelet_pods()
        assert pods == [
            KubeletPod(
                namespace="ml",
                name="train-0",
                containers=(
                    KubeletContainer(
                        name="main",
                        devices={
                            "nvidia.com/gpu.sliced": ("GPU-a::0", "GPU-b::3"),
                            "cpu-ignored.example/x": ("1", "2"),
                        },
                    ),
                    KubeletContainer(name="sshd", devices={}),
                ),
            ),
            KubeletPod(namespace="default", name="pending", containers=(KubeletContainer(name="c"),)),
        ]
        # nothing memoised: every call asks the kubelet again
        source.kubelet_pods()
        assert lister.calls == 2
    finally:
        server.stop(0).wait()


def test_an_absent_kubelet_is_none(socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = KubeletPodSource(no_api, socket=str(socket_dir / "missing.sock"), timeout=1.0)
    with caplog.at_level("INFO"):
        assert source.kubelet_pods() is None
    assert any("missing.sock" in r.getMessage() for r in caplog.records)


def test_a_kubelet_slower_than_the_timeout_is_none(socket_dir: Path) -> None:
    release = threading.Event()

    def slow() -> pr.ListPodResourcesResponse:
        release.wait(5)
        return ANSWER

    server = serve(socket_dir / "kubelet.sock", Lister(slow))
    try:
        source = KubeletPodSource(no_api, socket=str(socket_dir / "kubelet.sock"), timeout=0.5)
        started = time.monotonic()
        assert source.kubelet_pods() is None
        assert time.monotonic() - started < 2.5
    finally:
        release.set()
        server.stop(0).wait()


def test_a_kubelet_error_is_none(socket_dir: Path) -> None:
    class Failing(Lister):
        def List(  # noqa: N802
            self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
        ) -> pr.ListPodResourcesResponse:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
            raise AssertionError

    server = serve(socket_dir / "kubelet.sock", Failing(lambda: ANSWER))
    try:
        assert KubeletPodSource(no_api, socket=str(socket_dir / "kubelet.sock")).kubelet_pods() is None
    finally:
        server.stop(0).wait()


def test_node_pods_delegates_and_lets_the_error_through() -> None:
    spec = PodSpec(uid="u", namespace="ns", name="p", created=1.0)
    assert KubeletPodSource(lambda: [spec]).node_pods() == [spec]
    with pytest.raises(PodsUnavailableError, match="not asked"):
        KubeletPodSource(no_api).node_pods()
