"""A kubelet stand-in for device-plugin tests: real gRPC over unix sockets, the kubelet's order.

:class:`KubeletStandIn` serves what a device plugin talks to on a node -- the ``v1beta1.Registration``
service on ``<plugin_dir>/kubelet.sock`` and the ``v1.PodResourcesLister`` service on the
pod-resources socket -- and acts as the kubelet's device manager towards every registered plugin:
it dials the plugin back, reads its options, consumes ``ListAndWatch``, and admits Pods by calling
``GetPreferredAllocation`` / ``Allocate`` (and ``PreStartContainer`` when asked for) exactly in the
order the kubelet does. Everything runs in threads of the test process; :meth:`close` (or the
``with`` block) stops every server, stream and channel and removes every socket it created.

What follows the kubelet (``pkg/kubelet/cm/devicemanager``, ``pkg/kubelet/apis/podresources``) and
where it departs, so a test knows what it proves:

* **Start** removes every socket file in the plugin directory (the kubelet's ``cleanSocketDir``;
  plugins watch for it to re-register) but keeps the checkpoint and anything that is not a socket.
* **Register** checks ``version`` is ``v1beta1`` and the resource name is an extended resource name
  (``<domain>/<name>`` outside ``kubernetes.io``, ``requests.<name>`` a qualified name), then dials
  ``<plugin_dir>/<endpoint>`` (10 s, as the kubelet) and calls ``GetDevicePluginOptions``; any failure
  fails the ``Register`` call with the kubelet's message (code ``UNKNOWN``, as a Go error becomes). A
  newer registration of a resource replaces the old endpoint (its stream is cancelled). When a
  ``ListAndWatch`` stream ends without being replaced the resource's devices turn Unhealthy (the
  kubelet's ``markResourceUnhealthy``).
* **Admission** (:meth:`admit`): the Pod enters the pod-resources view first (its containers
  holding nothing yet); then per container -- init containers first, then containers -- and per
  extended resource it *limits* (requests when no limit is set; sorted by name, where the kubelet
  walks a Go map) that a plugin registered: a non-restartable init container's devices are reused by
  later containers (``devicesToReuse``); ``available`` = healthy ids no live container holds;
  ``GetPreferredAllocation(available ∪ reused, must_include=reused, size)`` when the plugin offered
  it; the answer's ids that are available are taken first, the rest filled from ``available``
  (``allocateRemainingFrom``); then one ``Allocate`` with one ``ContainerAllocateRequest``. Any
  error -- a gRPC status from the plugin, fewer healthy devices than requested, an empty response
  -- rejects the Pod with :class:`AdmissionError` (the kubelet's ``UnexpectedAdmissionError``), and
  the Pod leaves the view and frees what earlier containers got. The kubelet passes id lists in Go
  set order (random); the stand-in passes them in ``ListAndWatch`` order, or shuffled with
  ``shuffle_seed`` to prove a plugin does not depend on the order.
* **Pod-resources** ``List`` / ``Get`` name every admitted or being-admitted Pod; per Pod the
  restartable init containers (native sidecars) then the containers -- other init containers are
  not listed, as in the kubelet -- and per container one ``ContainerDevices`` *per device id* with
  its NUMA topology (the kubelet's shape; consumers must merge). ``GetAllocatableResources`` lists
  every healthy device the same way. No CPU, memory or dynamic resources.
* **Checkpoint** (``checkpoint=True``): ``kubelet_internal_checkpoint`` is written after every
  allocation, release and device update, in the kubelet's format and checksum (see
  :mod:`tests.kubelet.checkpoint`); :meth:`restart` forgets every allocation and reloads them from
  it (a corrupt file is logged in :attr:`checkpoint_error` and ignored, as the kubelet does). Pods
  the checkpoint names that the stand-in does not know are held until the next admission, which
  frees them (``UpdateAllocatedDevices``); admitting such a Pod again keeps its devices.
* **Status**: with ``pod_status`` (e.g. the API-server stand-in's ``pod_status``) an admitted and
  started Pod is reported ``Running`` and a rejected one ``Failed`` with reason
  ``UnexpectedAdmissionError``, as the kubelet writes them; with ``node_name`` a Pod bound to
  another node (or none) is refused.
* Not modelled: the topology manager (no NUMA alignment: every device is "no affinity"), CPU and
  memory managers, node-capacity predicates (``OutOf<resource>``), the 5-minute grace before a
  disconnected resource is dropped, and container runtime effects of an ``AllocateResponse``.
"""

from __future__ import annotations

import logging
import os
import random
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from gpustack_operator.deviceplugin.api import (
    deviceplugin_pb2,
    deviceplugin_pb2_grpc,
    podresources_pb2,
    podresources_pb2_grpc,
)

from tests.kubelet import checkpoint as ckpt

log = logging.getLogger(__name__)

KUBELET_SOCKET = "kubelet.sock"
SUPPORTED_VERSIONS = ("v1beta1",)
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
DIAL_TIMEOUT = 10.0  # the kubelet's dial timeout for a registering plugin
RPC_TIMEOUT = 30.0  # the kubelet sets none on Allocate; a test must not hang forever
PRESTART_TIMEOUT = 30.0  # KubeletPreStartContainerRPCTimeoutInSecs
SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the NUL

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def go_status(code: grpc.StatusCode) -> str:
    """``FAILED_PRECONDITION`` -> ``FailedPrecondition``, as Go's ``codes.Code.String`` prints it."""
    name: str = code.name
    return "OK" if name == "OK" else "".join(part.capitalize() for part in name.split("_"))


def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: a ``<domain>/<name>`` outside ``kubernetes.io``, not
    ``requests.``-prefixed, whose quota name ``requests.<name>`` is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".partition("/")
    if "/" in short or not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return False
    return len(prefix) <= 253 and bool(_DNS1123_SUBDOMAIN.match(prefix))


def check_socket_path(path: Path) -> None:
    if len(str(path)) > SUN_PATH_MAX:
        raise ValueError(
            f"unix socket path {path} is {len(str(path))} bytes, over the {SUN_PATH_MAX} a sockaddr_un holds; "
            "use a shorter directory (e.g. tempfile.mkdtemp(dir='/tmp'))"
        )


def wipe_sockets(directory: Path, keep: Iterable[Path] = ()) -> list[str]:
    """Remove every socket file directly in ``directory`` (not in subdirectories), except ``keep``."""
    kept = {Path(p).name for p in keep if Path(p).parent == directory}
    removed = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    for name in names:
        if name in kept:
            continue
        path = directory / name
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                path.unlink()
                removed.append(name)
        except FileNotFoundError:
            continue
    return removed


PodStatusSink = Callable[[Mapping[str, Any], str, str, str], None]
"""Where the kubelet's status updates go: ``(pod manifest, phase, reason, message)`` -- ``Running``
once a Pod is admitted and started, ``Failed`` / ``UnexpectedAdmissionError`` when it is rejected
(the kubelet's ``rejectPod``). :meth:`tests.kube.apiserver.APIServerStandIn.pod_status` is one."""


class AdmissionError(Exception):
    """The kubelet rejected the Pod (``UnexpectedAdmissionError``): an ``Allocate`` or
    ``GetPreferredAllocation`` error (``code`` and ``details`` the plugin's gRPC status), or not
    enough healthy devices (``code`` None)."""

    reason = "UnexpectedAdmissionError"

    def __init__(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        error: str,
        code: grpc.StatusCode | None = None,
        details: str = "",
    ) -> None:
        self.pod_uid = pod_uid
        self.container = container
        self.resource = resource
        self.code = code
        self.details = details
        self.error = error
        super().__init__(f"Allocate failed due to {error}, which is unexpected")


class StartError(Exception):
    """``PreStartContainer`` failed: the kubelet fails the container's start (not its admission)."""


@dataclass(frozen=True)
class Registration:
    """One ``Register`` call as the stand-in saw it."""

    resource: str
    endpoint: str
    version: str
    options: deviceplugin_pb2.DevicePluginOptions | None
    accepted: bool
    error: str
    generation: int  # the stand-in's restart count when it arrived
    at: float


@dataclass
class Grant:
    """What one container holds of one resource."""

    container: str
    resource: str
    device_ids: list[str]
    numa: dict[int, list[str]]
    response: deviceplugin_pb2.ContainerAllocateResponse


@dataclass
class Call:
    """One device-plugin call the stand-in made (for asserting the kubelet's side)."""

    method: str
    resource: str
    request: Any
    response: Any = None
    error: str = ""


@dataclass
class _Container:
    name: str
    init: bool
    restartable: bool
    wants: dict[str, int]


@dataclass
class _Pod:
    uid: str
    name: str
    namespace: str
    manifest: dict[str, Any]
    containers: list[_Container]
    grants: dict[tuple[str, str], Grant] = field(default_factory=dict)  # (container, resource)
    admitted: bool = False


def _quantity(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where}: {value!r} is not a quantity")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not re.fullmatch(r"\+?\d+", text):
        raise ValueError(f"{where}: extended resources take whole numbers, got {value!r}")
    return int(text)


def _containers(manifest: Mapping[str, Any]) -> list[_Container]:
    spec = manifest.get("spec") or {}
    out = []
    for key, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(spec.get(key) or []):
            name = c.get("name")
            if not name:
                raise ValueError(f"spec.{key}[{i}] has no name")
            resources = c.get("resources") or {}
            limits = dict(resources.get("limits") or {})
            requests = dict(resources.get("requests") or {})
            wants: dict[str, int] = {}
            for res in sorted(set(limits) | set(requests)):
                if not is_extended_resource_name(res):
                    continue
                raw = limits.get(res, requests.get(res))
                wants[res] = _quantity(raw, f"spec.{key}[{i}].resources[{res}]")
            out.append(_Container(name, init, init and c.get("restartPolicy") == "Always", wants))
    return out


class _Endpoint:
    """A registered plugin: its channel, options and the latest ``ListAndWatch`` device list."""

    def __init__(self, kubelet: KubeletStandIn, resource: str, path: Path, options: Any) -> None:
        self.kubelet = kubelet
        self.resource = resource
        self.path = path
        self.options: deviceplugin_pb2.DevicePluginOptions = options
        self.channel = grpc.insecure_channel(f"unix:{path}")
        self.stub = deviceplugin_pb2_grpc.DevicePluginStub(self.channel)
        self.closed = False
        self._call: Any = None
        self._thread: threading.Thread | None = None

    def connect(self, timeout: float) -> deviceplugin_pb2.DevicePluginOptions:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)
        opts: deviceplugin_pb2.DevicePluginOptions = self.stub.GetDevicePluginOptions(
            deviceplugin_pb2.Empty(), timeout=timeout
        )
        self.options = opts
        return opts

    def start(self) -> None:
        self._call = self.stub.ListAndWatch(deviceplugin_pb2.Empty())
        self._thread = threading.Thread(target=self._run, name=f"kubelet-law-{self.resource}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        error = "stream ended"
        try:
            for resp in self._call:
                self.kubelet._devices_update(self, list(resp.devices))
        except grpc.RpcError as err:
            error = f"{go_status(err.code())}: {err.details()}"
        except Exception as err:  # a closing channel may raise anything; never kill the test process
            error = repr(err)
        if not self.closed:
            self.kubelet._disconnected(self, error)

    def close(self) -> None:
        self.closed = True
        if self._call is not None:
            self._call.cancel()
        self.channel.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class _Registration(deviceplugin_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletStandIn) -> None:
        self.kubelet = kubelet

    def Register(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        error = self.kubelet._register(request)
        if error:
            context.abort(grpc.StatusCode.UNKNOWN, error)
        return deviceplugin_pb2.Empty()


class _PodResources(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: KubeletStandIn) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.kubelet.pod_resources_calls.append("List")
        return podresources_pb2.ListPodResourcesResponse(pod_resources=self.kubelet.pod_resources())

    def Get(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.kubelet.pod_resources_calls.append("Get")
        for pod in self.kubelet.pod_resources():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return podresources_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found")

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.kubelet.pod_resources_calls.append("GetAllocatableResources")
        return podresources_pb2.AllocatableResourcesResponse(devices=self.kubelet.allocatable_devices())


def _topology(numa: Iterable[int]) -> podresources_pb2.TopologyInfo | None:
    nodes = [podresources_pb2.NUMANode(ID=n) for n in numa if n != ckpt.NO_TOPOLOGY]
    return podresources_pb2.TopologyInfo(nodes=nodes) if nodes else None


class KubeletStandIn:
    """See the module docstring. ``start()`` is called by ``__enter__``."""

    def __init__(
        self,
        plugin_dir: Path | str,
        pod_resources_socket: Path | str,
        checkpoint: bool = True,
        *,
        dial_timeout: float = DIAL_TIMEOUT,
        rpc_timeout: float = RPC_TIMEOUT,
        shuffle_seed: int | None = None,
        node_name: str | None = None,
        pod_status: PodStatusSink | None = None,
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.socket = self.plugin_dir / KUBELET_SOCKET
        self.pod_resources_socket = Path(pod_resources_socket)
        check_socket_path(self.socket)
        check_socket_path(self.pod_resources_socket)
        self.checkpoint = checkpoint
        self.dial_timeout = dial_timeout
        self.rpc_timeout = rpc_timeout
        self._shuffle = random.Random(shuffle_seed) if shuffle_seed is not None else None
        self.node_name = node_name
        self.pod_status = pod_status
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._admit_lock = threading.Lock()
        self.generation = 0
        self.registrations: list[Registration] = []
        self.calls: list[Call] = []
        self.pod_resources_calls: list[str] = []
        self.checkpoint_error: str = ""
        self.removed_sockets: list[str] = []  # names wiped at each start
        self.rejected: dict[str, AdmissionError] = {}
        self._endpoints: dict[str, _Endpoint] = {}
        self._devices: dict[str, dict[str, deviceplugin_pb2.Device]] = {}  # resource -> id -> Device
        self._updates: dict[str, int] = {}
        self._pods: dict[str, _Pod] = {}  # uid -> pod, admission order
        self._orphans: dict[str, dict[tuple[str, str], Grant]] = {}  # checkpoint entries of unknown pods
        self._registration_server: grpc.Server | None = None
        self._pod_resources_server: grpc.Server | None = None
        self._running = False

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> KubeletStandIn:
        with self._admit_lock, self._lock:
            if self._running:
                return self
            self.plugin_dir.mkdir(parents=True, exist_ok=True)
            self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
            self.removed_sockets = wipe_sockets(self.plugin_dir)
            if self.pod_resources_socket.is_socket():
                self.pod_resources_socket.unlink()
            if self.checkpoint:
                self._load_checkpoint()
            self._registration_server = self._serve(
                self.socket, lambda s: deviceplugin_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), s)
            )
            self._pod_resources_server = self._serve(
                self.pod_resources_socket,
                lambda s: podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), s),
            )
            self._running = True
        return self

    @staticmethod
    def _serve(path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"kubelet-{path.name}"))
        add(server)
        if server.add_insecure_port(f"unix:{path}") == 0:
            raise RuntimeError(f"cannot listen on unix socket {path}")
        server.start()
        return server

    def stop(self) -> None:
        """Stop both servers and every plugin connection (the kubelet process exiting). The sockets
        the stand-in listened on are removed; plugin sockets are left for the next start to wipe."""
        with self._lock:
            servers = [s for s in (self._registration_server, self._pod_resources_server) if s is not None]
            endpoints = list(self._endpoints.values())
            self._registration_server = self._pod_resources_server = None
            self._endpoints.clear()
            self._running = False
        for ep in endpoints:
            ep.close()
        for server in servers:
            server.stop(grace=0.2).wait(5)
        for path in (self.socket, self.pod_resources_socket):
            if path.is_socket():
                path.unlink()
        with self._cond:
            self._cond.notify_all()

    def restart(self, down: float = 0.0) -> None:
        """Stop, stay down ``down`` seconds, start again: every plugin must re-register. Allocations
        are reloaded from the checkpoint (with ``checkpoint=False`` they are kept in memory)."""
        with self._admit_lock:
            self.stop()
            with self._lock:
                self.generation += 1
                if self.checkpoint:
                    for pod in self._pods.values():
                        pod.grants.clear()
                    self._orphans.clear()
                # a registered resource is known but has no devices until its plugin is back; with a
                # checkpoint the new process knows only what the file names
                self._devices = {} if self.checkpoint else {res: {} for res in self._devices}
        if down:
            time.sleep(down)
        self.start()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> KubeletStandIn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- registration ------------------------------------------------------------------------------

    def _register(self, request: Any) -> str:
        resource, endpoint, version = request.resource_name, request.endpoint, request.version
        options = request.options if request.HasField("options") else None
        error = ""
        if version not in SUPPORTED_VERSIONS:
            error = (
                f"requested API version {version!r} is not supported by kubelet. "
                f"Supported versions are {list(SUPPORTED_VERSIONS)!r}"
            )
        elif not is_extended_resource_name(resource):
            error = f"the ResourceName {resource!r} is invalid"
        else:
            path = Path(os.path.normpath(f"{self.plugin_dir}/{endpoint}"))  # Go's filepath.Join
            ep = _Endpoint(self, resource, path, options)
            try:
                options = ep.connect(self.dial_timeout)
            except grpc.FutureTimeoutError:
                ep.close()
                error = f"failed to dial device plugin: context deadline exceeded (no server on {path})"
            except grpc.RpcError as err:
                ep.close()
                error = f"failed to get device plugin options: rpc error: code = {go_status(err.code())} desc = {err.details()}"
            else:
                with self._cond:
                    old = self._endpoints.get(resource)
                    self._endpoints[resource] = ep
                    self._devices.setdefault(resource, {})
                if old is not None:
                    old.close()
                ep.start()
        with self._cond:
            self.registrations.append(
                Registration(resource, endpoint, version, options, not error, error, self.generation, time.time())
            )
            self._cond.notify_all()
        if error:
            log.info("kubelet stand-in refused registration of %s: %s", resource, error)
        return error

    def _devices_update(self, ep: _Endpoint, devices: list[deviceplugin_pb2.Device]) -> None:
        with self._cond:
            if self._endpoints.get(ep.resource) is not ep:
                return
            self._devices[ep.resource] = {d.ID: d for d in devices}
            self._updates[ep.resource] = self._updates.get(ep.resource, 0) + 1
            self._write_checkpoint()
            self._cond.notify_all()

    def _disconnected(self, ep: _Endpoint, error: str) -> None:
        with self._cond:
            if self._endpoints.get(ep.resource) is not ep:
                return
            log.info("kubelet stand-in: %s ListAndWatch ended (%s); its devices are Unhealthy", ep.resource, error)
            current = self._devices.get(ep.resource, {})
            self._devices[ep.resource] = {
                i: deviceplugin_pb2.Device(ID=d.ID, health=UNHEALTHY, topology=d.topology) for i, d in current.items()
            }
            self._updates[ep.resource] = self._updates.get(ep.resource, 0) + 1
            self._write_checkpoint()
            self._cond.notify_all()

    def accepted(self, resource: str | None = None) -> list[Registration]:
        with self._lock:
            return [r for r in self.registrations if r.accepted and (resource is None or r.resource == resource)]

    def wait_registered(self, resource: str, count: int = 1, timeout: float = 10.0) -> Registration:
        """Wait until ``resource`` has been registered (accepted) ``count`` times in all; the latest."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.accepted(resource)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(r.resource, r.accepted, r.error) for r in self.registrations]
                    raise TimeoutError(
                        f"{resource} not registered {count} time(s) in {timeout}s; registrations: {seen}"
                    )
                self._cond.wait(left)
            return self.accepted(resource)[-1]

    def resources(self) -> list[str]:
        """Resources with a live endpoint."""
        with self._lock:
            return sorted(self._endpoints)

    def options(self, resource: str) -> deviceplugin_pb2.DevicePluginOptions | None:
        with self._lock:
            ep = self._endpoints.get(resource)
            return ep.options if ep else None

    # --- devices -----------------------------------------------------------------------------------

    def devices(self, resource: str) -> dict[str, deviceplugin_pb2.Device]:
        """The latest ``ListAndWatch`` list (id -> Device), in the plugin's order."""
        with self._lock:
            return dict(self._devices.get(resource, {}))

    def healthy(self, resource: str) -> list[str]:
        return [i for i, d in self.devices(resource).items() if d.health == HEALTHY]

    def unhealthy(self, resource: str) -> list[str]:
        return [i for i, d in self.devices(resource).items() if d.health != HEALTHY]

    def capacity(self, resource: str) -> int:
        """Healthy devices of ``resource`` (what the node can be given). The kubelet's
        ``Node.status.capacity`` also counts the Unhealthy ones: see :meth:`node_status`."""
        return len(self.healthy(resource))

    def allocatable(self, resource: str) -> list[str]:
        """Healthy ids no live container holds (what the next admission may be given)."""
        with self._lock:
            held = self._held(resource)
            return [i for i in self.healthy(resource) if i not in held]

    def node_status(self, resource: str) -> tuple[int, int]:
        """``(capacity, allocatable)`` as the kubelet reports them on the Node: all devices, healthy ones."""
        devs = self.devices(resource)
        return len(devs), sum(1 for d in devs.values() if d.health == HEALTHY)

    def updates(self, resource: str) -> int:
        """How many ``ListAndWatch`` responses (or disconnections) the resource has had."""
        with self._lock:
            return self._updates.get(resource, 0)

    def wait_for(
        self,
        resource: str,
        predicate: Callable[[dict[str, deviceplugin_pb2.Device]], bool],
        timeout: float = 10.0,
    ) -> dict[str, deviceplugin_pb2.Device]:
        """Wait until ``predicate(devices(resource))`` holds; the device map it held for."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                devs = self.devices(resource)
                if predicate(devs):
                    return devs
                left = deadline - time.monotonic()
                if left <= 0:
                    health = {i: d.health for i, d in devs.items()}
                    raise TimeoutError(f"{resource}: condition not met in {timeout}s; devices: {health}")
                self._cond.wait(left)

    def wait_capacity(self, resource: str, count: int, timeout: float = 10.0) -> None:
        self.wait_for(resource, lambda d: sum(1 for x in d.values() if x.health == HEALTHY) == count, timeout)

    # --- pods --------------------------------------------------------------------------------------

    def _held(self, resource: str, skip_pod: str | None = None) -> set[str]:
        held: set[str] = set()
        for pod in self._pods.values():
            if pod.uid == skip_pod:
                continue
            for (_, res), grant in pod.grants.items():
                if res == resource:
                    held.update(grant.device_ids)
        for uid, grants in self._orphans.items():
            if uid != skip_pod:
                for (_, res), grant in grants.items():
                    if res == resource:
                        held.update(grant.device_ids)
        return held

    def admit(
        self,
        pod: Mapping[str, Any],
        *,
        start: bool = True,
        force: Mapping[str, Mapping[str, list[str]]] | None = None,
    ) -> dict[str, dict[str, Grant]]:
        """Admit ``pod`` (a Pod manifest) as the kubelet would; per container, per resource, its
        :class:`Grant`. Raises :class:`AdmissionError`. With ``start`` (the default) the containers
        are then "started": ``PreStartContainer`` is called where the plugin asked for it.

        ``force`` (container -> resource -> ids) hands the plugin exactly those ids for that
        container, skipping the kubelet's own pick and the hint: what a kubelet does whose
        ``ListAndWatch`` view is stale -- the race a plugin's own refusals (e.g. the cross-mode
        check) exist for. Forced ids need not be healthy or free."""
        meta = pod.get("metadata") or {}
        uid, name = meta.get("uid"), meta.get("name")
        if not uid or not name:
            raise ValueError("a Pod manifest needs metadata.uid and metadata.name (add it to the API server first)")
        namespace = meta.get("namespace") or "default"
        bound = (pod.get("spec") or {}).get("nodeName")
        if self.node_name is not None and bound != self.node_name:
            raise ValueError(
                f"pod {namespace}/{name} is bound to {bound or 'no node'}, not to this kubelet's {self.node_name} "
                "(set spec.nodeName, as the scheduler's binding does)"
            )
        containers = _containers(pod)
        with self._admit_lock:
            with self._lock:
                if not self._running:
                    raise RuntimeError("the kubelet stand-in is not running")
                existing = self._pods.get(uid)
                if existing is not None and existing.admitted:
                    raise ValueError(f"pod {namespace}/{name} ({uid}) is already admitted")
                state = _Pod(uid, name, namespace, dict(pod), containers)
                state.grants.update(self._orphans.pop(uid, {}))  # a pod the checkpoint remembers
                self._orphans.clear()  # UpdateAllocatedDevices: pods no longer active free their devices
                self._pods[uid] = state
                self.rejected.pop(uid, None)
            try:
                reusable: dict[str, list[str]] = {}
                for c in containers:
                    for resource, size in c.wants.items():
                        if size <= 0 or not self._is_plugin_resource(resource):
                            continue
                        grant = state.grants.get((c.name, resource))
                        forced = (force or {}).get(c.name, {}).get(resource)
                        if grant is None:
                            grant = self._allocate(state, c, resource, size, reusable, forced)
                        if c.init and not c.restartable:
                            pool = reusable.setdefault(resource, [])
                            pool.extend(i for i in grant.device_ids if i not in pool)
                        else:
                            reusable[resource] = [i for i in reusable.get(resource, []) if i not in grant.device_ids]
            except AdmissionError as err:
                with self._lock:
                    self._pods.pop(uid, None)
                    self.rejected[uid] = err
                    self._write_checkpoint()
                if self.pod_status is not None:
                    self.pod_status(pod, "Failed", err.reason, str(err))
                raise
            with self._lock:
                state.admitted = True
        if start:
            self._prestart(state)
            if self.pod_status is not None:
                self.pod_status(pod, "Running", "", "")
        return self.grants(uid)

    def _is_plugin_resource(self, resource: str) -> bool:
        with self._lock:
            return resource in self._devices or resource in self._endpoints

    def _order(self, ids: list[str]) -> list[str]:
        if self._shuffle is None:
            return ids
        shuffled = list(ids)
        self._shuffle.shuffle(shuffled)
        return shuffled

    def _preferred(self, ep: _Endpoint, available: list[str], must_include: list[str], size: int) -> list[str]:
        req = deviceplugin_pb2.PreferredAllocationRequest(
            container_requests=[
                deviceplugin_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=self._order(available),
                    must_include_deviceIDs=self._order(list(must_include)),
                    allocation_size=size,
                )
            ]
        )
        call = Call("GetPreferredAllocation", ep.resource, req)
        self.calls.append(call)
        try:
            resp = ep.stub.GetPreferredAllocation(req, timeout=self.rpc_timeout)
        except grpc.RpcError as err:
            call.error = f"rpc error: code = {go_status(err.code())} desc = {err.details()}"
            raise
        call.response = resp
        return list(resp.container_responses[0].deviceIDs) if resp.container_responses else []

    def _allocate(
        self,
        pod: _Pod,
        c: _Container,
        resource: str,
        size: int,
        reusable: dict[str, list[str]],
        forced: list[str] | None = None,
    ) -> Grant:
        def fail(error: str, err: grpc.RpcError | None = None) -> AdmissionError:
            if err is None:
                return AdmissionError(pod.uid, c.name, resource, error)
            return AdmissionError(pod.uid, c.name, resource, error, err.code(), err.details() or "")

        allocated: list[str] = list(forced) if forced is not None else list(reusable.get(resource, []))[:size]
        with self._lock:
            ep = self._endpoints.get(resource)
            held = self._held(resource)
            available = [i for i in self.healthy(resource) if i not in held]
        needed = 0 if forced is not None else size - len(allocated)
        if needed > 0:
            if ep is None:
                raise fail(f"endpoint for {resource} is stopped (its plugin has not registered since the restart)")
            if len(available) < needed:
                raise fail(
                    f"requested number of devices unavailable for {resource}. "
                    f"Requested: {needed}, Available: {len(available)}"
                )
            if ep.options is not None and ep.options.get_preferred_allocation_available:
                try:
                    preferred = self._preferred(ep, available + allocated, allocated, size)
                except grpc.RpcError as err:
                    error = f"rpc error: code = {go_status(err.code())} desc = {err.details()}"
                    raise fail(f"device plugin GetPreferredAllocation rpc failed with err: {error}", err) from None
                for dev in preferred:
                    if needed and dev in available and dev not in allocated:
                        allocated.append(dev)
                        needed -= 1
            for dev in available:
                if not needed:
                    break
                if dev not in allocated:
                    allocated.append(dev)
                    needed -= 1
        if ep is None:
            raise fail(f"endpoint for {resource} is stopped (its plugin has not registered since the restart)")
        # the devices are the container's from here on (the kubelet's allocatedDevices), the
        # pod-resources view shows them only once Allocate answered (podDevices.insert)
        areq = deviceplugin_pb2.AllocateRequest(
            container_requests=[deviceplugin_pb2.ContainerAllocateRequest(devices_ids=self._order(allocated))]
        )
        call = Call("Allocate", resource, areq)
        self.calls.append(call)
        try:
            aresp = ep.stub.Allocate(areq, timeout=self.rpc_timeout)
        except grpc.RpcError as err:
            call.error = f"rpc error: code = {go_status(err.code())} desc = {err.details()}"
            raise fail(call.error, err) from None
        call.response = aresp
        if not aresp.container_responses:
            raise fail(f"no containers return in allocation response {aresp}")
        response = deviceplugin_pb2.ContainerAllocateResponse()
        response.CopyFrom(aresp.container_responses[0])
        with self._lock:
            devs = self._devices.get(resource, {})
            numa: dict[int, list[str]] = {}
            for dev in allocated:
                nodes = [n.ID for n in devs[dev].topology.nodes] if dev in devs else []
                for n in nodes or [ckpt.NO_TOPOLOGY]:
                    numa.setdefault(n, []).append(dev)
            grant = Grant(c.name, resource, allocated, numa, response)
            pod.grants[(c.name, resource)] = grant
            self._write_checkpoint()
        return grant

    def _prestart(self, pod: _Pod) -> None:
        for (container, resource), grant in list(pod.grants.items()):
            with self._lock:
                ep = self._endpoints.get(resource)
            if ep is None or ep.options is None or not ep.options.pre_start_required:
                continue
            req = deviceplugin_pb2.PreStartContainerRequest(devices_ids=grant.device_ids)
            call = Call("PreStartContainer", resource, req)
            self.calls.append(call)
            try:
                call.response = ep.stub.PreStartContainer(req, timeout=PRESTART_TIMEOUT)
            except grpc.RpcError as err:
                call.error = f"rpc error: code = {go_status(err.code())} desc = {err.details()}"
                raise StartError(f"container {container} of pod {pod.namespace}/{pod.name}: {call.error}") from None

    def remove(self, pod_uid: str) -> bool:
        """The Pod is gone: its devices are free (the next admission may take them). False if unknown."""
        with self._cond:
            gone = self._pods.pop(pod_uid, None) is not None
            gone = self._orphans.pop(pod_uid, None) is not None or gone
            self.rejected.pop(pod_uid, None)
            self._write_checkpoint()
            self._cond.notify_all()
            return gone

    def pods(self) -> list[str]:
        with self._lock:
            return list(self._pods)

    def grants(self, pod_uid: str) -> dict[str, dict[str, Grant]]:
        with self._lock:
            pod = self._pods.get(pod_uid)
            grants = pod.grants if pod else self._orphans.get(pod_uid, {})
            out: dict[str, dict[str, Grant]] = {}
            for (container, resource), grant in grants.items():
                out.setdefault(container, {})[resource] = grant
            return out

    def results(self, pod_uid: str) -> dict[str, dict[str, deviceplugin_pb2.ContainerAllocateResponse]]:
        """Per container, per resource, the ``ContainerAllocateResponse`` the plugin answered."""
        return {c: {r: g.response for r, g in res.items()} for c, res in self.grants(pod_uid).items()}

    def envs(self, pod_uid: str, container: str) -> dict[str, str]:
        """The env a container gets: every granted resource's ``envs`` merged (in resource order)."""
        merged: dict[str, str] = {}
        for _, resp in sorted(self.results(pod_uid).get(container, {}).items()):
            merged.update(resp.envs)
        return merged

    # --- pod-resources view ------------------------------------------------------------------------

    def pod_resources(self) -> list[podresources_pb2.PodResources]:
        with self._lock:
            out = []
            for pod in self._pods.values():
                listed = [c for c in pod.containers if c.restartable] + [c for c in pod.containers if not c.init]
                containers = []
                for c in listed:
                    devices = []
                    for (cname, resource), grant in pod.grants.items():
                        if cname != c.name:
                            continue
                        for numa, ids in sorted(grant.numa.items()):
                            for dev in ids:
                                devices.append(
                                    podresources_pb2.ContainerDevices(
                                        resource_name=resource, device_ids=[dev], topology=_topology([numa])
                                    )
                                )
                    containers.append(podresources_pb2.ContainerResources(name=c.name, devices=devices))
                out.append(podresources_pb2.PodResources(name=pod.name, namespace=pod.namespace, containers=containers))
            return out

    def allocatable_devices(self) -> list[podresources_pb2.ContainerDevices]:
        with self._lock:
            out = []
            for resource in sorted(self._devices):
                for dev in self._devices[resource].values():
                    if dev.health == HEALTHY:
                        numa = [n.ID for n in dev.topology.nodes]
                        out.append(
                            podresources_pb2.ContainerDevices(
                                resource_name=resource, device_ids=[dev.ID], topology=_topology(numa)
                            )
                        )
            return out

    # --- checkpoint --------------------------------------------------------------------------------

    def _checkpoint_data(self) -> ckpt.Checkpoint:
        entries: list[ckpt.Entry] = []
        for uid, grants in [(p.uid, p.grants) for p in self._pods.values()] + list(self._orphans.items()):
            for (container, resource), g in grants.items():
                entries.append(
                    ckpt.Entry(
                        uid,
                        container,
                        resource,
                        {k: list(v) for k, v in g.numa.items()},
                        g.response.SerializeToString(),
                    )
                )
        registered: dict[str, list[str] | None] = {
            res: sorted(i for i, d in devs.items() if d.health == HEALTHY)
            for res, devs in sorted(self._devices.items())
        }
        return ckpt.Checkpoint(entries=entries or None, registered=registered)

    def _write_checkpoint(self) -> None:
        if self.checkpoint and self.plugin_dir.is_dir():
            ckpt.write(self.plugin_dir, self._checkpoint_data())

    def read_checkpoint(self) -> ckpt.Checkpoint | None:
        return ckpt.read(self.plugin_dir)

    def _load_checkpoint(self) -> None:
        self.checkpoint_error = ""
        try:
            cp = ckpt.read(self.plugin_dir)
        except ckpt.CheckpointError as err:
            self.checkpoint_error = str(err)
            log.info(
                "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date: %s", err
            )
            return
        if cp is None:
            return
        for res in cp.registered or {}:
            self._devices.setdefault(res, {})
        for e in cp.entries or []:
            response = deviceplugin_pb2.ContainerAllocateResponse()
            response.ParseFromString(e.alloc_resp or b"")
            numa = {k: list(v or []) for k, v in (e.devices or {}).items()}
            grant = Grant(e.container, e.resource, e.device_ids, numa, response)
            pod = self._pods.get(e.pod_uid)
            if pod is not None:
                pod.grants[(e.container, e.resource)] = grant
            else:
                self._orphans.setdefault(e.pod_uid, {})[(e.container, e.resource)] = grant
