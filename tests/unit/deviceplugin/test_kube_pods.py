"""kube/pods.py: the official client lists the node's pods over real HTTP from a loopback stand-in of
the API server, and each V1Pod becomes the allocator's PodSpec."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from gpustack_operator.allocator.pods import ContainerSpec, PodsUnavailableError
from gpustack_operator.kube.pods import KubeConfigError, NodePods, make_api_client

POD_LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "4711"},
    "items": [
        {
            "metadata": {
                "name": "train-0",
                "namespace": "ml",
                "uid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                "creationTimestamp": "2025-03-01T10:20:30Z",
                "annotations": {"device.gpustack.ai/accelerator.allocated": '{"main": {}}'},
            },
            "spec": {
                "nodeName": "node-a",
                "runtimeClassName": "nvidia",
                "initContainers": [
                    {"name": "stage", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu.sliced": "1"}}}
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": "vllm",
                        "env": [
                            {"name": "CUDA_DEVICE_ORDER", "value": "FASTEST_FIRST"},
                            {"name": "EMPTY"},
                            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        ],
                        "resources": {
                            "requests": {"cpu": "2", "nvidia.com/gpu.sliced": "1", "memory": "1Gi"},
                            "limits": {
                                "nvidia.com/gpu.sliced": "1",
                                "nvidia.com/gpu.sliced.cores-percentage": "50",
                                "memory": "2Gi",
                            },
                        },
                    },
                    {
                        "name": "sshd",
                        "image": "alpine",
                        "resources": {"limits": {"device.gpustack.ai/nvidia.visibility": "1"}},
                    },
                ],
            },
            "status": {"phase": "Pending"},
        },
        {
            "metadata": {
                "name": "done",
                "namespace": "default",
                "uid": "u-2",
                "creationTimestamp": "2025-03-01T10:20:31Z",
                "deletionTimestamp": "2025-03-01T11:00:00Z",
            },
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Succeeded"},
        },
    ],
}


class ApiServer:
    """A loopback stand-in of the API server: answers GET /api/v1/pods with ``body`` (or ``status``)."""

    def __init__(self) -> None:
        self.body: object = POD_LIST
        self.status = 200
        self.delay = 0.0
        self.paths: list[str] = []
        self.released = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                if outer.delay:
                    outer.released.wait(outer.delay)
                data = json.dumps(outer.body if outer.status == 200 else {"kind": "Status", "message": "boom"}).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # the client gave up (the timeout test)
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer()
    yield server
    server.close()


def test_the_nodes_pods_are_listed_and_converted(api: ApiServer) -> None:
    pods = NodePods(make_api_client(None, api.url), "node-a").list()
    query = parse_qs(urlparse(api.paths[0]).query)
    assert urlparse(api.paths[0]).path == "/api/v1/pods"
    assert query["fieldSelector"] == ["spec.nodeName=node-a"]
    train, done = pods
    assert (train.uid, train.namespace, train.name, train.phase, train.node) == (
        "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "ml",
        "train-0",
        "Pending",
        "node-a",
    )
    assert train.created == datetime(2025, 3, 1, 10, 20, 30, tzinfo=UTC).timestamp()
    assert train.runtime_class == "nvidia" and not train.deleting
    assert dict(train.annotations) == {"device.gpustack.ai/accelerator.allocated": '{"main": {}}'}
    assert train.containers == (
        ContainerSpec(name="stage", resources={"nvidia.com/gpu.sliced": "1"}, init=True),
        ContainerSpec(
            name="main",
            env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "EMPTY": "", "FROM_SECRET": ""},
            resources={
                "cpu": "2",
                "memory": "2Gi",  # limits win
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.cores-percentage": "50",
            },
        ),
        ContainerSpec(name="sshd", resources={"device.gpustack.ai/nvidia.visibility": "1"}),
    )
    assert done.terminal and done.deleting and done.runtime_class is None and dict(done.annotations) == {}


def test_every_call_lists_again(api: ApiServer) -> None:
    lister = NodePods(make_api_client(None, api.url), "node-a")
    lister()
    api.body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    assert lister() == []
    assert len(api.paths) == 2


def test_an_api_error_names_the_endpoint_and_status(api: ApiServer) -> None:
    api.status = 503
    with pytest.raises(PodsUnavailableError) as info:
        NodePods(make_api_client(None, api.url), "node-a").list()
    assert api.url in str(info.value) and "503" in str(info.value) and "node-a" in str(info.value)


def test_a_slow_api_server_is_unavailable_within_the_timeout(api: ApiServer) -> None:
    api.delay = 3.0
    started = time.monotonic()
    with pytest.raises(PodsUnavailableError, match="could not be listed"):
        NodePods(make_api_client(None, api.url), "node-a", timeout=0.5).list()
    assert time.monotonic() - started < 2.5


def test_an_unreachable_api_server_is_unavailable() -> None:
    closed = ApiServer()
    url = closed.url
    closed.close()
    with pytest.raises(PodsUnavailableError, match=url.replace(".", r"\.")):
        NodePods(make_api_client(None, url), "node-a", timeout=1.0).list()


def test_a_kubeconfig_file_is_read(api: ApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert len(NodePods(make_api_client(str(kubeconfig), None), "node-a").list()) == 2
    assert make_api_client(str(kubeconfig), "http://127.0.0.1:1").configuration.host == "http://127.0.0.1:1"


def test_no_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="--kubeconfig, KUBECONFIG nor --kube-api-server"):
        make_api_client(None, None)
    with pytest.raises(KubeConfigError, match="no such file"):
        make_api_client(str(tmp_path / "absent"), None)
    with pytest.raises(KubeConfigError, match="not a URL"):
        make_api_client(None, "127.0.0.1:6443")
    (tmp_path / "bad").write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(KubeConfigError, match="could not be loaded"):
        make_api_client(str(tmp_path / "bad"), None)


def test_an_empty_node_name_is_refused() -> None:
    with pytest.raises(KubeConfigError, match="KUBERNETES_NODE_NAME"):
        NodePods(make_api_client(None, "http://127.0.0.1:1"), "")


@pytest.mark.parametrize(
    "text",
    ["key: [unclosed\n", "- a list\n- not a kubeconfig\n", "just a scalar\n", "clusters: 3\nusers: {a: b}\n"],
)
def test_a_file_that_is_not_a_kubeconfig_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(KubeConfigError, match="could not be loaded"):
        make_api_client(str(path), None)


def test_a_kubeconfig_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(KubeConfigError, match="not a regular file"):
        make_api_client(str(fifo), None)  # a FIFO would block the loader forever
    with pytest.raises(KubeConfigError, match="not a regular file"):
        make_api_client(str(tmp_path), None)
