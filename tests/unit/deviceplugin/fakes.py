"""Stand-ins at the edge's two boundaries: the allocator core (its interface, in memory) and the
kubelet's Registration service (a real gRPC server on a unix socket, dialling the plugin back as the
kubelet does before answering ``Register``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from gpustack_operator.allocator.core import DeviceState, Pool
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from gpustack_operator.manufacturers.respond import Family, Injection

SLICED = Pool(resource="nvidia.com/gpu.sliced", family=Family.SLICED, preferred_allocation=True)
PARTITIONED = Pool(
    resource="nvidia.com/gpu.partitioned.mig-1g.10gb", family=Family.PARTITIONED, preferred_allocation=False
)


class FakeAllocator:
    """The allocator core's interface over a dict of tokens; ``answer`` decides each ``allocate``."""

    def __init__(self, tokens: dict[str, list[DeviceState]]) -> None:
        self.tokens = tokens
        self._version = 1
        self._cond = threading.Condition()
        self.calls: list[tuple[str, list[list[str]]]] = []
        self.answer: Callable[[str, list[list[str]]], list[Injection]] = lambda _r, reqs: [
            Injection(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}) for ids in reqs
        ]

    def pools(self) -> list[Pool]:
        return [SLICED]

    def devices(self, resource: str) -> list[DeviceState]:
        with self._cond:
            return list(self.tokens[resource])

    def preferred(self, resource: str, available: list[str], must_include: list[str], size: int) -> list[str]:
        rest = sorted((a for a in available if a not in must_include), reverse=True)
        return (must_include + rest)[:size]

    def allocate(self, resource: str, requests: list[list[str]]) -> list[Injection]:
        self.calls.append((resource, requests))
        return self.answer(resource, requests)

    @property
    def version(self) -> int:
        with self._cond:
            return self._version

    def wait_change(self, version: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout)
            return self._version

    def change(self, resource: str, tokens: list[DeviceState]) -> None:
        with self._cond:
            self.tokens[resource] = tokens
            self._version += 1
            self._cond.notify_all()


@dataclass
class Registration:
    request: pb.RegisterRequest
    socket_existed: bool
    answered: pb.DevicePluginOptions | None
    error: str | None = None


@dataclass
class FakeKubelet:
    """The kubelet's Registration service on ``<dir>/kubelet.sock``. On ``Register`` it dials the plugin's
    endpoint back (``GetDevicePluginOptions``) before answering, as the kubelet does, and records what it
    found. :meth:`restart` does what a kubelet start does: the directory is emptied, then a fresh
    ``kubelet.sock`` is bound (a new inode)."""

    plugin_dir: Path
    registrations: list[Registration] = field(default_factory=list)
    _server: grpc.Server | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def start(self) -> None:
        kubelet = self

        class Servicer(pb_grpc.RegistrationServicer):  # type: ignore[misc]
            def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:  # noqa: N802
                endpoint = kubelet.plugin_dir / request.endpoint
                existed = endpoint.exists()
                answered, error = None, None
                try:
                    with grpc.insecure_channel(f"unix://{endpoint}") as channel:
                        answered = pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=5)
                except grpc.RpcError as exc:
                    error = f"{exc.code().name}: {exc.details()}"
                with kubelet._cond:
                    kubelet.registrations.append(Registration(request, existed, answered, error))
                    kubelet._cond.notify_all()
                if error:
                    context.abort(grpc.StatusCode.UNKNOWN, f"dial back failed: {error}")
                return pb.Empty()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(Servicer(), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        if self.socket.exists():
            self.socket.unlink()

    def restart(self) -> None:
        self.stop()
        for entry in self.plugin_dir.iterdir():  # the kubelet's registration server empties the directory
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.start()

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.registrations) >= count, timeout)


@contextmanager
def short_dir() -> Iterator[Path]:
    """A plugin directory under /tmp: a unix socket path must fit in 107 bytes, which pytest's
    per-test tmp_path (named after the test) does not always leave room for."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def socket_inode(path: Path) -> tuple[int, int] | None:
    """A socket's identity (inode numbers are recycled, so with its change time)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns
