"""``gpustack-operator device-manager serve``: the detection loop, the plugin servers, the health endpoint.

``serve`` starts the detection loop (:class:`~gpustack_operator.deviceplugin.manager.DeviceManager`,
``--monitor-period``) and ``/readyz`` / ``/livez`` over HTTPS (``health.py``,
``--bind-address:--secure-port``) and runs until SIGTERM or SIGINT; it never exits because nothing was
found. When a pass first detects a manufacturer with accelerators (:meth:`Wiring.on_detected`), one
:class:`~gpustack_operator.allocator.core.Allocator` is built for it -- every one sharing the node-wide
lock (:data:`~gpustack_operator.allocator.core.NODE_LOCK`, supplement §1.8 rule 5) -- what is held is
recovered, and per pool one plugin server (``deviceplugin/server.py``) is started and registered.
Every later pass is applied to the allocators (an accelerator gone turns its tokens Unhealthy, Healthy
again when back), and the node capacity keys are patched onto the Node and the NodeFeature / ``Devices``
published when they change (``kube/nodestatus.py``, ``kube/publish.py``). On the way out every server
stops and removes the socket it created.

What is durable (issue 18): every grant is recorded on its Pod in the
``device.gpustack.ai/accelerator.allocated`` annotation before ``Allocate`` answers (and, for sliced and
partitioned Pods, in the node-local ``allocation.json`` before that), and the Pods are read from a
watch (``kube/podwatch.py``). Before any plugin registers, the claims are rebuilt from those records
and from the kubelet's pod-resources ``List`` (:func:`recover`), so a restarted Device Manager
advertises the held cards Unhealthy for the other families from its first device list.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

from gpustack_operator import api
from gpustack_operator.allocator.core import NODE_LOCK, Allocator, CdiResolverLike, FamilyOptions
from gpustack_operator.allocator.durable import stop_retries
from gpustack_operator.allocator.ledger import DevicesAllocationGroup
from gpustack_operator.allocator.pods import AnnotationRecorder, PodSource, PodSpec
from gpustack_operator.deviceplugin.manager import (
    DeviceManager,
    ManagerOptions,
    ManagerUsageError,
    NotYetError,
    make_sinks,
)
from gpustack_operator.deviceplugin.podresources import POD_RESOURCES_SOCKET, KubeletPodSource
from gpustack_operator.deviceplugin.server import KUBELET_SOCKET, PluginServer, PluginSet
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.arch import node_arch
from gpustack_operator.manufacturers.base import DetectContext, Detected, Unmeasured
from gpustack_operator.manufacturers.respond import LIB_DIR, Partitioner, RefusedError, RespondContext, Responder

log = logging.getLogger(__name__)

IN_MEMORY_NOTE = (
    "Reservations are durable: each grant is recorded on its Pod in the device.gpustack.ai/accelerator.allocated "
    "annotation (sliced and partitioned ones also in the node-local allocation.json) before Allocate answers, "
    "and a restarted Device Manager rebuilds the ledger from those records and the kubelet's pod-resources List "
    "before it registers any plugin."
)
RECONCILE_PERIOD = 30.0  # the sweep behind the watch's events (working directories a restart orphaned)
ONCE_REGISTERED_TIMEOUT = 60.0
RETRY_STOP_TIMEOUT = 5.0  # how long shutdown waits for the give-back retry threads in all


class ServeUsageError(ValueError):
    """A flag or the environment cannot be served with (exit 2, the message names the remedy)."""


@dataclass(frozen=True)
class ServeOptions:
    node_name: str
    kube_socket: str = KUBELET_SOCKET
    pod_resources_socket: str = POD_RESOURCES_SOCKET
    kubeconfig: str | None = None
    kube_api_server: str | None = None
    host_write_root: str = "/"
    families: FamilyOptions = field(default_factory=FamilyOptions)
    once_registered: bool = False
    once_registered_timeout: float = ONCE_REGISTERED_TIMEOUT


@dataclass
class Served:
    """What one process serves: the allocators (one per manufacturer) and their plugin servers."""

    allocators: dict[str, Allocator]
    plugins: PluginSet
    skipped: dict[str, str]  # manufacturer -> why it serves nothing


def node_name(flag: str | None) -> str:
    """``--node-name``, else ``KUBERNETES_NODE_NAME`` (supplement §4.6: required)."""
    name = (flag if flag is not None else os.environ.get("KUBERNETES_NODE_NAME", "")).strip()
    if not name:
        raise ServeUsageError(
            "the node name is unknown: pass --node-name or set KUBERNETES_NODE_NAME (the DaemonSet sets it "
            "from spec.nodeName)"
        )
    return name


class PodView(Protocol):
    """What ``serve`` needs of the watch-backed view (:class:`gpustack_operator.kube.podwatch.PodWatch`)."""

    def node_pods(self) -> list[PodSpec]: ...

    def refresh(self) -> bool: ...

    def subscribe(self, callback: Callable[[Any], None]) -> None: ...

    def wait_synced(self, timeout: float) -> bool: ...

    def stop(self, timeout: float = 5.0) -> None: ...


@dataclass
class Cluster:
    """What ``serve`` holds of the cluster: the pod source the allocators identify from, the
    watch-backed view behind it, and where the durable annotation is written."""

    pods: PodSource
    view: PodView
    recorder: AnnotationRecorder | None
    client: Any = None  # the API client the node capacity keys and the published objects are written with


def pod_source(opts: ServeOptions, manager: ManagerOptions | None = None) -> Cluster:
    """The kubelet's pod-resources socket plus the watch-backed view of this node's pods (started), and
    the annotation patcher on the same API server. Every request of that one client is rate-limited by
    ``manager``'s ``--kube-conn-qps`` / ``--kube-conn-burst`` (supplement §3.5; default: their defaults)."""
    from gpustack_operator.kube.annotations import AnnotationPatcher  # noqa: PLC0415
    from gpustack_operator.kube.pods import KubeConfigError, make_api_client  # noqa: PLC0415
    from gpustack_operator.kube.podwatch import PodWatch  # noqa: PLC0415

    try:
        limits = manager or ManagerOptions()
        client = make_api_client(
            opts.kubeconfig, opts.kube_api_server, qps=limits.kube_conn_qps, burst=limits.kube_conn_burst
        )
        watch = PodWatch(client, opts.node_name)
    except KubeConfigError as exc:
        raise ServeUsageError(str(exc)) from None
    watch.start()
    source = KubeletPodSource(watch.node_pods, socket=opts.pod_resources_socket, refresh=watch.refresh)
    return Cluster(source, watch, AnnotationPatcher(client), client)


def release_on_event(allocators: list[Allocator]) -> Callable[[Any], None]:
    """The watch's callback for a Pod deleted or finished: every allocator syncs from the view at once
    (its claims released, its version bumped, so ListAndWatch re-sends the card's tokens Healthy)."""

    def release(note: Any) -> None:
        for allocator in allocators:
            try:
                allocator.reconcile()
            except Exception:
                log.exception("%s: releasing what %s held failed", allocator.manufacturer.name, note)

    return release


def _cdi_kind(responder: Responder) -> str | None:
    """The CDI kind a responder's module declares (``CDI_KIND``; today NVIDIA's alone, supplement §4.4:
    the strategy variable has no effect for the others)."""
    module = sys.modules.get(type(responder).__module__)
    kind = getattr(module, "CDI_KIND", None)
    return kind if isinstance(kind, str) else None


def _cdi_resolver(name: str, responder: Responder, view: HostRoot) -> CdiResolverLike | None:
    kind = _cdi_kind(responder)
    if kind is None:
        return None
    from gpustack_operator.allocator.cdi import resolver_for  # noqa: PLC0415 -- only a CDI-capable vendor

    resolver, problem = resolver_for(name, kind, view)
    if problem:
        log.warning("%s: %s", name, problem)
    return resolver


def _partitioner(name: str, make: Callable[[HostRoot], Partitioner] | None, view: HostRoot) -> Partitioner | None:
    if make is None:
        return None
    try:
        return make(view)
    except Exception as exc:  # a partition that cannot be made is refused at allocation, never a dead plugin
        log.warning("%s: the partition calls are unavailable (%s: %s)", name, type(exc).__name__, exc)
        return None


def build(
    req: api.Request,
    result: NodeDetection,
    opts: ServeOptions,
    pods: PodSource,
    recorder: AnnotationRecorder | None = None,
) -> Served:
    """The allocators and plugin servers for what the pass detected (nothing is started)."""
    view = HostRoot(req.root)
    host = HostRoot(opts.host_write_root)
    arch = node_arch(view)
    allocators: dict[str, Allocator] = {}
    servers: list[PluginServer] = []
    skipped: dict[str, str] = {}
    for name in req.manufacturers:
        outcome = result.outcomes.get(name)
        if isinstance(outcome, Unmeasured):
            skipped[name] = f"could not be measured: {outcome.reason}"
            continue
        if not isinstance(outcome, Detected) or not outcome.groups:
            log.info("%s is not served: no accelerator detected", name)
            continue
        manufacturer = REGISTRY[name]
        backend = manufacturer.loaded()
        if backend.responder is None:
            skipped[name] = "its backend has no responder in this version"
            continue
        detect_ctx = DetectContext(
            view=view,
            pci=result.pci,
            settings=req.settings,
            manufacturer=req.resolved[name],
            no_pci_check=req.no_pci_check,
        )
        ctx = RespondContext(
            view=view,
            host=host,
            settings=req.settings,
            lib_dir=req.settings.lib_dir or LIB_DIR,
            arch=arch,
            partitioner=_partitioner(name, backend.partitioner, view),
            detect=detect_ctx,
        )
        allocator = Allocator(
            req.resolved[name],
            outcome.groups,
            responder=backend.responder,
            ctx=ctx,
            pods=pods,
            options=opts.families,
            cdi=_cdi_resolver(name, backend.responder, view),
            lock=NODE_LOCK,
            node_name=opts.node_name,
            recorder=recorder,
        )
        pools = allocator.pools()
        if not pools:
            skipped[name] = "no family is left to serve (the --no-* flags, or no token)"
            continue
        allocators[name] = allocator
        servers.extend(PluginServer(allocator, pool, name, kube_socket=opts.kube_socket) for pool in pools)
    return Served(allocators, PluginSet(servers), skipped)


SYNC_LOG_PERIOD = 10.0  # how often a Device Manager waiting for the API server says so


def recover(
    allocators: list[Allocator],
    view: PodView,
    stop: threading.Event,
    limit: float | None = None,
    status: list[DevicesAllocationGroup] | None = None,
) -> bool:
    """Restart recovery before any plugin registers (``Allocator.recover``): wait for the pod view's
    first sync (saying so every ``SYNC_LOG_PERIOD``; an unread node is never advertised as free), then
    rebuild every allocator's claims -- ``status``, the node's ``Devices`` status as read before this
    process published anything, is their third source. False when ``stop`` was set, or ``limit``
    seconds passed, first."""
    deadline = None if limit is None else time.monotonic() + limit
    said = time.monotonic()
    while not view.wait_synced(0.5):
        now = time.monotonic()
        if stop.is_set() or (deadline is not None and now >= deadline):
            return False
        if now - said >= SYNC_LOG_PERIOD:
            said = now
            log.warning(
                "the node's pods are not read from the API server yet; nothing is registered until what is "
                "held is recovered from them (still waiting)"
            )
    for allocator in allocators:
        while True:
            try:
                allocator.recover(status=status)
                break
            except RefusedError as exc:
                log.warning("%s: restart recovery: %s", allocator.manufacturer.name, exc.message)
                if stop.wait(1.0) or (deadline is not None and time.monotonic() >= deadline):
                    return False
    return not stop.is_set()


def _reconcile_loop(allocators: Callable[[], list[Allocator]], stop: threading.Event) -> None:
    while not stop.wait(RECONCILE_PERIOD):
        for allocator in allocators():
            try:
                allocator.reconcile()
            except Exception:
                log.exception("%s: reclaiming gone Pods failed", allocator.manufacturer.name)


def serve(
    req: api.Request,
    opts: ServeOptions,
    *,
    stop: threading.Event | None = None,
    manager: ManagerOptions | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop``); the exit code. Raises :class:`ServeUsageError` and
    ``HostRootError`` before anything is served. ``manager``: the loop's and the health endpoint's flags
    (default: their defaults, ``0.0.0.0:32443``)."""
    if not os.path.isdir(opts.host_write_root):
        raise ServeUsageError(
            f"--host-write-root {opts.host_write_root} is not a directory: name where the host's paths this "
            "process writes are reachable (/ in the DaemonSet)"
        )
    mopts = manager or ManagerOptions()
    cluster = pod_source(opts, mopts)
    try:
        return _serve(req, opts, cluster, stop, mopts)
    finally:
        cluster.view.stop()


class Wiring:
    """What serve holds while it runs: the allocators (one per manufacturer, filled by the detection loop
    as manufacturers are first detected -- the loop, the watch's callback and the reconciler read it
    live) and the plugin sets started for them."""

    def __init__(
        self, req: api.Request, opts: ServeOptions, cluster: Cluster, stop: threading.Event, mopts: ManagerOptions
    ):
        self.req = req
        self.opts = opts
        self.cluster = cluster
        self.stop = stop
        self.mopts = mopts
        self.allocators: dict[str, Allocator] = {}
        self.plugin_sets: list[PluginSet] = []
        self.problem: str | None = None  # why the last on_detected registered nothing
        # the node's Devices status as this process found it, before its first publish overwrote it
        # from a ledger not yet recovered: restart recovery's third source (kube/devicesread.py)
        self.status: list[DevicesAllocationGroup] | None = None
        self._lock = threading.Lock()

    def current(self) -> list[Allocator]:
        return list(self.allocators.values())

    def release(self, note: Any) -> None:
        release_on_event(self.current())(note)

    def on_detected(self, names: list[str], result: NodeDetection) -> None:
        """The loop found ``names`` with accelerators for the first time: build their allocators and
        plugin servers, recover what is held, then start and register them. Runs in the loop's thread;
        :class:`NotYetError` (nothing registered) when the node's pods are not read yet -- the next pass tries
        again."""
        served = build(
            replace(self.req, manufacturers=names), result, self.opts, self.cluster.pods, self.cluster.recorder
        )
        for name, why in sorted(served.skipped.items()):
            log.warning("%s is not served: %s", name, why)
        if not served.plugins.servers:
            return
        allocators = list(served.allocators.values())
        if not recover(allocators, self.cluster.view, self.stop, self.mopts.monitor_period, self.status):
            self.problem = (
                "the node's pods are not read from the API server yet, so what is held cannot be recovered: "
                f"{', '.join(sorted(served.allocators))} not registered (tried again next pass)"
            )
            raise NotYetError(self.problem)
        self.problem = None
        with self._lock:
            if self.stop.is_set():
                return
            log.info(
                "serving %s on node %s", ", ".join(s.resource for s in served.plugins.servers), self.opts.node_name
            )
            served.plugins.start()
            self.plugin_sets.append(served.plugins)
            self.allocators.update(served.allocators)

    def registered(self) -> bool:
        sets = list(self.plugin_sets)
        return bool(sets) and all(s.registrations > 0 for p in sets for s in p.servers)

    def wait_registered(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.registered():
            if self.stop.is_set() or time.monotonic() >= deadline:
                return False
            self.stop.wait(0.1)
        return True

    def stop_plugins(self) -> None:
        with self._lock:
            for plugins in self.plugin_sets:
                plugins.stop()


def _serve(
    req: api.Request, opts: ServeOptions, cluster: Cluster, stop: threading.Event | None, mopts: ManagerOptions
) -> int:
    from gpustack_operator.health import HealthServer, HealthUsageError  # noqa: PLC0415

    stop = stop or threading.Event()
    wiring = Wiring(req, opts, cluster, stop, mopts)
    if cluster.client is not None:  # before the loop's first publish rewrites it
        from gpustack_operator.kube.devicesread import read_devices_status  # noqa: PLC0415

        wiring.status = read_devices_status(cluster.client, opts.node_name)
    capacity, publisher = (
        (None, None) if cluster.client is None else make_sinks(cluster.client, opts.node_name, req, mopts)
    )
    manager = DeviceManager(
        req, mopts, allocators=wiring.allocators, on_detected=wiring.on_detected, capacity=capacity, publisher=publisher
    )
    manager.set_registered_check(wiring.registered)
    health = HealthServer(
        manager,
        name="gpustack-operator-device-manager",
        bind_address=mopts.bind_address,
        port=mopts.secure_port,
        cert_dir=mopts.cert_dir,
        hosts=[opts.node_name],
    )
    try:
        health.start()
    except HealthUsageError as exc:
        raise ServeUsageError(str(exc)) from None
    restore = _handle_signals(stop)
    log.info("%s", IN_MEMORY_NOTE)
    cluster.view.subscribe(wiring.release)
    reconciler = threading.Thread(target=_reconcile_loop, args=(wiring.current, stop), name="reconcile", daemon=True)
    code = 0
    try:
        manager.start()
        reconciler.start()
        if opts.once_registered:
            if not wiring.wait_registered(opts.once_registered_timeout) and not stop.is_set():
                _, why = manager.ready()
                missing = [s.resource for p in wiring.plugin_sets for s in p.servers if s.registrations == 0]
                detail = f"not registered: {', '.join(missing)}" if missing else (wiring.problem or why)
                print(
                    f"gpustack-operator: error: not every plugin registered with the kubelet at {opts.kube_socket} "
                    f"within {opts.once_registered_timeout:.0f}s ({detail}); check what the node offers with: "
                    "gpustack-operator dm detect",
                    file=sys.stderr,
                )
                code = 1
        else:
            stop.wait()
    finally:
        stop.set()
        manager.stop()
        wiring.stop_plugins()
        for name in stop_retries(wiring.current(), timeout=RETRY_STOP_TIMEOUT):
            log.warning("%s: still inside its patch at shutdown (bounded by the request timeout)", name)
        if reconciler.is_alive():
            reconciler.join(5)
        health.stop()
        restore()
    log.info("stopped: every plugin socket this process created is removed")
    return code


def _handle_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT end the serve loop cleanly; returns what puts the old handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        log.warning("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


__all__ = [
    "IN_MEMORY_NOTE",
    "FamilyOptions",
    "ManagerOptions",
    "ManagerUsageError",
    "ServeOptions",
    "ServeUsageError",
    "Served",
    "build",
    "node_name",
    "pod_source",
    "serve",
]
