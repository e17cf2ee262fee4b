"""One v1beta1 device-plugin server per registered resource, and its registration with the kubelet.

The edge is thin on purpose: every RPC is one call into the allocator core
(:class:`~gpustack_operator.allocator.core.Allocator`) and a message conversion; what a container
gets, and whether it gets anything, is decided there (spec "The device-plugin allocator").

What this module owns is the kubelet's lifecycle contract (interfaces.md §5):

- **one socket per pool** ``<plugin dir>/gpustack-<manufacturer>-<family>[-<profile>].sock``, the plugin
  dir being the directory of ``--kube-socket`` (``/var/lib/kubelet/device-plugins/``);
- **serve, prove, then register**: the server is started, dialled on its own socket
  (``GetDevicePluginOptions``) and only then announced -- the kubelet dials back within 10 s of
  ``Register`` and drops a plugin it cannot reach, so the ``Register`` deadline (15 s) outlives that dial;
- **re-register on every kubelet restart**: the kubelet wipes the directory's sockets when it starts,
  so a socket that disappears (or stops being ours) or a ``kubelet.sock`` with a new inode means serve
  again on a fresh socket and register again, with backoff while the kubelet is away;
- **never unlink a successor's socket**: gRPC removes a unix listener's path when the server stops,
  whoever's socket is there by then. So the server binds a private temporary name and the socket is
  renamed onto its public name (atomic, replacing a stale one); gRPC's clean-up then hits the
  temporary name, already gone, and this module unlinks the public name only while it is still the
  inode it created. A server that finds another process's socket on its name (a successor Device
  Manager in a rolling update) stands aside rather than take it back, until the name is free again.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Protocol

import grpc  # type: ignore[import-untyped]

from gpustack_operator.allocator.core import DeviceState, Pool
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as pb
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as pb_grpc
from gpustack_operator.manufacturers.respond import Family, Injection, RefusedError

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

REGISTER_TIMEOUT = 15.0  # longer than the kubelet's 10 s dial-back inside Register
VERIFY_TIMEOUT = 5.0  # our own server answering on our own socket
POLL_INTERVAL = 1.0  # how often the sockets are looked at
WATCH_SLICE = 1.0  # ListAndWatch's wait on the allocator: how soon a cancelled stream is noticed
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 10.0
STOP_GRACE = 1.0


class AllocatorPort(Protocol):
    """What the edge calls on the allocator core (the subset of ``Allocator`` a pool's server uses)."""

    def devices(self, resource: str) -> list[DeviceState]: ...

    def preferred(self, resource: str, available: list[str], must_include: list[str], size: int) -> list[str]: ...

    def allocate(self, resource: str, requests: list[list[str]]) -> list[Injection]: ...

    @property
    def version(self) -> int: ...

    def wait_change(self, version: int, timeout: float) -> int: ...


class PluginError(Exception):
    """A plugin server could not be started or proven (the message names the socket and why)."""


# -- message conversion ----------------------------------------------------------------------------


ENCODED_CACHE_LIMIT = 1 << 16  # (token, health) encodings kept per pool: two per token, and then some


def device_message(state: DeviceState) -> pb.Device:
    """A token as ListAndWatch sends it: topology only when the token has NUMA nodes (a partitioned
    token reports none, spec "The partitioned family")."""
    device = pb.Device(ID=state.id, health=HEALTHY if state.healthy else UNHEALTHY)
    if state.numa:
        device.topology.CopyFrom(pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in state.numa]))
    return device


def container_response(injection: Injection) -> pb.ContainerAllocateResponse:
    """One container's injection as the kubelet reads it (``log`` stays here)."""
    return pb.ContainerAllocateResponse(
        envs=dict(injection.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in injection.mounts
        ],
        devices=[
            pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in injection.devices
        ],
        annotations=dict(injection.annotations),
        cdi_devices=[pb.CDIDevice(name=name) for name in injection.cdi_devices],
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# -- the servicer ----------------------------------------------------------------------------------


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """The v1beta1 ``DevicePlugin`` service for one pool. ``stopped`` ends its ListAndWatch streams when
    the server it belongs to is being replaced."""

    def __init__(self, allocator: AllocatorPort, pool: Pool, stopped: threading.Event) -> None:
        self._allocator = allocator
        self._pool = pool
        self._stopped = stopped
        self._encoded: dict[DeviceState, bytes] = {}  # a token's ListAndWatch encoding, per health

    @property
    def resource(self) -> str:
        return self._pool.resource

    def options(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=self._pool.preferred_allocation
        )

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:  # noqa: N802
        return self.options()

    def _list(self, states: list[DeviceState]) -> pb.ListAndWatchResponse:
        """The response for ``states``, assembled from each token's encoding.

        Protobuf defines the concatenation of serialised messages as their merge, and a repeated field
        merges by appending: so the response is the concatenation of one single-device response per
        token, each encoded once per (token, health) and kept. Building 1,024 ``Device`` messages
        afresh costs ~7 ms of the GIL on every change, which every ``Allocate`` in flight then waits
        for; this costs ~0.3 ms."""
        encoded = self._encoded
        parts: list[bytes] = []
        for state in states:
            part = encoded.get(state)
            if part is None:
                part = pb.ListAndWatchResponse(devices=[device_message(state)]).SerializeToString()
                if len(encoded) < ENCODED_CACHE_LIMIT:
                    encoded[state] = part
            parts.append(part)
        response = pb.ListAndWatchResponse()
        response.ParseFromString(b"".join(parts))
        return response

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:  # noqa: N802
        """The full list at once, then the full list again whenever an allocator change changed *this*
        pool's list (an exclusive grant changes the shared and sliced tokens' health, never the
        visibility pool's), until the kubelet cancels the stream or this server stops."""
        try:
            version = self._allocator.version
            sent = self._allocator.devices(self.resource)
            yield self._list(sent)
            log.info("%s: ListAndWatch opened", self.resource)
            while context.is_active() and not self._stopped.is_set():
                current = self._allocator.wait_change(version, WATCH_SLICE)
                if current != version and context.is_active():
                    version = current
                    states = self._allocator.devices(self.resource)
                    if states is not sent and states != sent:
                        sent = states
                        yield self._list(states)
        except Exception as exc:
            log.exception("%s: ListAndWatch failed", self.resource)
            context.abort(grpc.StatusCode.INTERNAL, f"{self.resource}: the device list failed: {_one_line(exc)}")
        log.info("%s: ListAndWatch closed", self.resource)

    def GetPreferredAllocation(  # noqa: N802
        self, request: pb.PreferredAllocationRequest, context: Any
    ) -> pb.PreferredAllocationResponse:
        responses: list[pb.ContainerPreferredAllocationResponse] = []
        try:
            for req in request.container_requests:
                chosen = self._allocator.preferred(
                    self.resource, list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
                responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        except RefusedError as exc:
            log.warning("%s: no preferred allocation: %s", self.resource, exc.message)
            context.abort(grpc.StatusCode[exc.code.value], exc.message)
        except Exception as exc:
            log.exception("%s: GetPreferredAllocation failed", self.resource)
            message = f"{self.resource}: the preferred allocation failed: {_one_line(exc)}"
            context.abort(grpc.StatusCode.INTERNAL, message)
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:  # noqa: N802
        requests = [list(r.devices_ids) for r in request.container_requests]
        try:
            injections = self._allocator.allocate(self.resource, requests)
            if len(injections) != len(requests):
                raise RuntimeError(f"the allocator answered {len(injections)} containers for {len(requests)} requests")
        except RefusedError as exc:
            log.warning("%s: Allocate %s refused (%s): %s", self.resource, requests, exc.code.value, exc.message)
            context.abort(grpc.StatusCode[exc.code.value], exc.message)
        except Exception as exc:
            log.exception("%s: Allocate %s failed", self.resource, requests)
            context.abort(
                grpc.StatusCode.INTERNAL,
                f"{self.resource}: the allocation failed inside the device plugin ({_one_line(exc)}); "
                "a bug: the device-manager log has the trace",
            )
        for ids, injection in zip(requests, injections, strict=True):
            log.info("%s: allocated %s", self.resource, ",".join(ids))
            for line in injection.log:
                log.info("%s: %s", self.resource, line)
        return pb.AllocateResponse(container_responses=[container_response(i) for i in injections])

    def PreStartContainer(  # noqa: N802
        self, request: pb.PreStartContainerRequest, context: Any
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


# -- one pool's server and its registration --------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def socket_name(manufacturer: str, pool: Pool) -> str:
    """``gpustack-<manufacturer>-<family>.sock``; a partitioned pool (one per profile) adds its profile
    (``gpustack-nvidia-partitioned-mig-1g.10gb.sock``)."""
    name = f"gpustack-{manufacturer}-{pool.family.value}"
    if pool.family is Family.PARTITIONED:
        _, sep, profile = pool.resource.partition(".partitioned.")
        if sep and profile:
            name = f"{name}-{profile}"
    return _UNSAFE.sub("-", name) + ".sock"


@dataclass(frozen=True)
class _Inode:
    """A file's identity: device and inode, plus its change time, because a filesystem recycles the
    inode number of a file just removed (a kubelet's new ``kubelet.sock`` can carry the old number)."""

    dev: int
    ino: int
    ctime_ns: int

    @classmethod
    def of(cls, path: str) -> _Inode | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return cls(st.st_dev, st.st_ino, st.st_ctime_ns)


class PluginServer:
    """Serve one pool on its own socket and keep it registered with the kubelet.

    :meth:`start` runs the lifecycle on a thread of its own; :meth:`stop` ends it and unlinks the socket
    if it is still the one this server created. ``registrations`` counts successful ``Register`` calls
    (each kubelet restart adds one)."""

    def __init__(
        self,
        allocator: AllocatorPort,
        pool: Pool,
        manufacturer: str,
        *,
        kube_socket: str = KUBELET_SOCKET,
        endpoint: str | None = None,
        poll_interval: float = POLL_INTERVAL,
        register_timeout: float = REGISTER_TIMEOUT,
        backoff_max: float = BACKOFF_MAX,
        max_workers: int = 4,
    ) -> None:
        self.allocator = allocator
        self.pool = pool
        self.kube_socket = kube_socket
        self.plugin_dir = os.path.dirname(kube_socket) or "."
        self.endpoint = endpoint or socket_name(manufacturer, pool)
        self.socket_path = os.path.join(self.plugin_dir, self.endpoint)
        self.poll_interval = poll_interval
        self.register_timeout = register_timeout
        self.backoff_max = backoff_max
        self.max_workers = max_workers
        self.registrations = 0
        self.superseded = False  # another process's socket holds our name: stand aside until it is gone
        self.registered = threading.Event()  # set while registered with the current kubelet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._server_stopped: threading.Event | None = None
        self._inode: _Inode | None = None  # the public socket this server created
        self._kubelet: _Inode | None = None  # kubelet.sock as it was when we registered
        self._changed = threading.Condition()

    @property
    def resource(self) -> str:
        return self.pool.resource

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"plugin {self.resource}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the lifecycle thread to end (:meth:`stop` also waits for it)."""
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._shutdown()

    def wait_registrations(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` registrations have succeeded (tests, ``--once-registered``)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.registrations >= count, timeout)

    def _run(self) -> None:
        delay = BACKOFF_INITIAL
        try:
            while not self._stop.is_set():
                try:
                    self._step()
                except (PluginError, grpc.RpcError, OSError) as exc:
                    log.warning("%s: %s; retrying in %.1fs", self.resource, _describe(exc), delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, self.backoff_max)
                    continue
                except Exception:
                    log.exception("%s: plugin lifecycle failed; retrying in %.1fs", self.resource, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, self.backoff_max)
                    continue
                if self.registered.is_set():
                    delay = BACKOFF_INITIAL
                self._stop.wait(self.poll_interval)
        finally:
            self._shutdown()

    def _step(self) -> None:
        """One look: restart when our socket was removed or the kubelet restarted, stand aside while
        another process's socket holds our name, serve when not serving, register when not registered."""
        if self._server is not None:
            current = _Inode.of(self.socket_path)
            if current is not None and current != self._inode:
                log.warning(
                    "%s: socket %s was taken over by another process (a successor device manager?); "
                    "this one stops serving it and leaves it in place",
                    self.resource,
                    self.socket_path,
                )
                self._shutdown()
                self.superseded = True
                return
            reason = self._restart_reason(current)
            if reason:
                log.info("%s: %s; serving again on a fresh socket", self.resource, reason)
                self._shutdown()
        if self.superseded:
            if _Inode.of(self.socket_path) is not None:
                return  # the successor's socket: never replaced, never unlinked
            self.superseded = False
        if self._server is None:
            self._serve()
        if not self.registered.is_set():
            self._register()

    def _restart_reason(self, current: _Inode | None) -> str | None:
        if current is None:
            return f"socket {self.socket_path} was removed (the kubelet restarted?)"
        if self.registered.is_set():
            kubelet = _Inode.of(self.kube_socket)
            if kubelet is not None and kubelet != self._kubelet:
                return f"the kubelet's {self.kube_socket} was recreated (the kubelet restarted)"
        return None

    def _serve(self) -> None:
        os.makedirs(self.plugin_dir, exist_ok=True)
        # a private name, short (a unix socket path has 107 bytes) and unique across processes and servers
        temporary = os.path.join(self.plugin_dir, f".gpustack-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        stopped = threading.Event()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix=f"dp-{self.pool.family.value}")
        )
        pb_grpc.add_DevicePluginServicer_to_server(DevicePluginServicer(self.allocator, self.pool, stopped), server)  # type: ignore[no-untyped-call]
        try:
            if not server.add_insecure_port(f"unix://{temporary}"):
                raise PluginError(f"could not listen on {temporary}")
        except RuntimeError as exc:
            raise PluginError(f"could not listen on {temporary}: {exc}") from None
        server.start()
        try:
            os.rename(temporary, self.socket_path)
            inode = _Inode.of(self.socket_path)
            if inode is None:
                raise PluginError(f"socket {self.socket_path} vanished as it was created")
            self._server, self._server_stopped, self._inode = server, stopped, inode
        except BaseException:
            stopped.set()
            server.stop(0).wait()
            _unlink_quietly(temporary)
            raise
        self._verify()
        log.info("%s: serving on %s", self.resource, self.socket_path)

    def _verify(self) -> None:
        """Our own server answers on our own socket, or nothing is registered."""
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty(), timeout=VERIFY_TIMEOUT)  # type: ignore[no-untyped-call]
        except grpc.RpcError as exc:
            self._shutdown()
            raise PluginError(f"our own server does not answer on {self.socket_path}: {_describe(exc)}") from None

    def _register(self) -> None:
        kubelet = _Inode.of(self.kube_socket)
        if kubelet is None:
            raise PluginError(
                f"the kubelet's registration socket {self.kube_socket} does not exist (is the kubelet up?)"
            )
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.endpoint,
            resource_name=self.resource,
            options=pb.DevicePluginOptions(
                pre_start_required=False, get_preferred_allocation_available=self.pool.preferred_allocation
            ),
        )
        with grpc.insecure_channel(f"unix://{self.kube_socket}") as channel:
            pb_grpc.RegistrationStub(channel).Register(request, timeout=self.register_timeout)  # type: ignore[no-untyped-call]
        self._kubelet = kubelet
        self.registered.set()
        with self._changed:
            self.registrations += 1
            self._changed.notify_all()
        log.info("%s: registered with the kubelet at %s as %s", self.resource, self.kube_socket, self.endpoint)

    def _shutdown(self) -> None:
        """Stop the server (its streams first) and unlink its socket only while it is still ours."""
        self.registered.clear()
        server, stopped, inode = self._server, self._server_stopped, self._inode
        self._server = self._server_stopped = self._inode = None
        if server is None:
            return
        if stopped is not None:
            stopped.set()
        server.stop(STOP_GRACE).wait()
        if inode is not None and _Inode.of(self.socket_path) == inode:
            _unlink_quietly(self.socket_path)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s: %s", path, exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code = exc.code()
        details = exc.details() if hasattr(exc, "details") else ""
        return f"{getattr(code, 'name', code)}: {details}"
    return str(exc) or type(exc).__name__


class PluginSet:
    """Every pool's server of one process: started together, stopped together."""

    def __init__(self, servers: list[PluginServer]) -> None:
        names = [s.socket_path for s in servers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PluginError(f"two pools would share a socket: {', '.join(duplicates)}")
        self.servers = servers

    def start(self) -> None:
        for server in self.servers:
            server.start()

    def stop(self) -> None:
        for server in self.servers:
            server.request_stop()
        for server in self.servers:
            server.stop()

    def wait_registered(self, timeout: float) -> bool:
        """Every server registered at least once (``--once-registered``)."""
        deadline = time.monotonic() + timeout
        return all(s.wait_registrations(1, max(0.0, deadline - time.monotonic())) for s in self.servers)


__all__ = [
    "API_VERSION",
    "HEALTHY",
    "KUBELET_SOCKET",
    "UNHEALTHY",
    "AllocatorPort",
    "DevicePluginServicer",
    "PluginError",
    "PluginServer",
    "PluginSet",
    "container_response",
    "device_message",
    "socket_name",
]
