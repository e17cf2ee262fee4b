"""The worker process: startup steps, the watch caches, leader election and the controllers' loop.

:class:`Worker` wires it together:

* startup (every replica, before the election): :func:`~gpustack_operator.worker.startup.apply_crds`,
  then the :class:`~gpustack_operator.worker.startup.RuleApplier` thread;
* two watch caches (:class:`~gpustack_operator.kube.objectwatch.ObjectWatch`): the Nodes and the
  ``Devices``, each trimmed to what the controllers read (:func:`node_view`, :func:`devices_view`);
  every change of that marks the name dirty and wakes the loop;
* image mode (``options.install``): the chart install of ``worker/install.py``, started on its own
  thread the first time this replica leads;
* the loop (:meth:`Worker.run`): each round ticks the :class:`~gpustack_operator.worker.leader.Elector`
  and, only while leading *and* with both caches synced, reconciles every dirty name through each
  controller (``nodekey.py``, ``managed.py``, ``devicesgc.py``) with the cached Node and Devices.
  Becoming leader, and every ``resync_period``, marks every cached name dirty. A controller that
  fails for a name (an API error) keeps that name dirty and retries it after ``retry_delay``.

:meth:`Worker.stop` (SIGTERM) ends the loop, stops the watches and releases the Lease.

Health (:meth:`Worker.live`, :meth:`Worker.ready`, served as ``/livez`` and ``/readyz`` by ``health.py``):
alive until the loop has been told to stop; ready once startup applied the CRDs and both caches have
listed -- on every replica, leading or not (a standby is ready to take over).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpustack_operator.kube import crds
from gpustack_operator.kube.apply import DEVICES_COLLECTION, NODES
from gpustack_operator.kube.lease import LeaseLock
from gpustack_operator.kube.objectwatch import ObjectWatch
from gpustack_operator.kube.rest import KubeRequestError
from gpustack_operator.settings import PciVendorMatch
from gpustack_operator.worker.devicesgc import DevicesGcController
from gpustack_operator.worker.install import ChartInstaller, InstallPlan
from gpustack_operator.worker.leader import Elector
from gpustack_operator.worker.managed import MANAGED, ManagedMarkController
from gpustack_operator.worker.nodekey import CPU_NAME_ANNOTATION, NodeKeyController
from gpustack_operator.worker.rule import cpu_info_rule
from gpustack_operator.worker.startup import RuleApplier, apply_crds

if TYPE_CHECKING:  # the client is imported by gpustack_operator.kube alone
    import kubernetes.client

log = logging.getLogger(__name__)


# What the controllers read of a Node's annotations and a Devices' labels (nodekey.py, managed.py): only
# these are cached, so NFD's other annotations (its feature-labels list) and a Devices' other labels are
# no change. A Node's labels are kept whole: a label change wakes its reconcile (which writes nothing
# when the key holds), as tests/unit/worker/test_worker.py expects.
NODE_ANNOTATIONS_READ = frozenset({CPU_NAME_ANNOTATION})
DEVICES_LABELS_READ = frozenset({MANAGED})


def _only(found: Any, keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in found.items() if k in keys} if isinstance(found, dict) else {}


def node_view(node: dict[str, Any]) -> dict[str, Any]:
    """What the controllers read of a Node: its name, uid and labels, the annotation of
    :data:`NODE_ANNOTATIONS_READ`, its CPU capacity."""
    meta = node.get("metadata") or {}
    kept: dict[str, Any] = {k: meta[k] for k in ("name", "uid", "labels") if k in meta}
    if annotations := _only(meta.get("annotations"), NODE_ANNOTATIONS_READ):
        kept["annotations"] = annotations
    capacity = (node.get("status") or {}).get("capacity") or {}
    view: dict[str, Any] = {"metadata": kept}
    if isinstance(capacity, dict) and "cpu" in capacity:
        view["status"] = {"capacity": {"cpu": capacity["cpu"]}}
    return view


def devices_view(devices: dict[str, Any]) -> dict[str, Any]:
    """What the controllers read of a ``Devices``: its name, uid and managed mark (never the ledger)."""
    meta = devices.get("metadata") or {}
    kept: dict[str, Any] = {k: meta[k] for k in ("name", "uid") if k in meta}
    if labels := _only(meta.get("labels"), DEVICES_LABELS_READ):
        kept["labels"] = labels
    return {"metadata": kept}


class Controller(Protocol):
    name: str

    def reconcile(self, name: str, node: dict[str, Any] | None, devices: dict[str, Any] | None) -> None: ...


@dataclass
class WorkerOptions:
    namespace: str  # the system namespace (NodeFeatures, the Lease)
    vendors: Sequence[PciVendorMatch]  # the managed manufacturers' PCI identities (the rule)
    identity: str  # this replica's name in the Lease
    leader_election: bool = True
    lease_name: str = "worker.gpustack.ai"
    lease_namespace: str | None = None  # default: namespace
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resync_period: float = 3600.0
    retry_delay: float = 1.0
    watch_timeout: int = 300
    backoff_max: float = 30.0
    install: InstallPlan | None = None  # image mode's chart install (worker/install.py), run once leading
    node_management_manual: bool = False  # GPUSTACK_NODE_MANAGEMENT_MANUAL: no auto managed mark (nodekey.py)


class Worker:
    def __init__(self, client: kubernetes.client.ApiClient, options: WorkerOptions) -> None:
        self.client = client
        self.options = options
        watching: dict[str, Any] = {"watch_timeout": options.watch_timeout, "backoff_max": options.backoff_max}
        self.nodes = ObjectWatch(client, NODES, keep=node_view, **watching)
        self.devices = ObjectWatch(client, DEVICES_COLLECTION, keep=devices_view, **watching)
        self.controllers: list[Controller] = [
            NodeKeyController(client, options.namespace, manual=options.node_management_manual),
            ManagedMarkController(client),
            DevicesGcController(client),
        ]
        lock = None
        if options.leader_election:
            lock = LeaseLock(
                client,
                options.lease_namespace or options.namespace,
                options.lease_name,
                options.identity,
                lease_seconds=options.lease_duration,
            )
        self.elector = Elector(lock, renew_deadline=options.renew_deadline, retry_period=options.retry_period)
        self.rule = RuleApplier(client, cpu_info_rule(options.vendors), backoff_max=options.backoff_max)
        self.installer = ChartInstaller(options.install) if options.install is not None else None
        self.reconciled = 0  # reconcile rounds that wrote or checked something (for tests and logs)
        self._dirty: dict[str, float] = {}  # name -> not before (monotonic)
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._was_leading = False
        self._next_resync = 0.0
        self._crds_applied = threading.Event()

    # -- startup -----------------------------------------------------------------------------------

    def start(self) -> Worker:
        """The startup steps, then the watches (raises ``StartupError`` when the CRDs cannot be applied)."""
        apply_crds(self.client, [crds.devices_crd()])
        self._crds_applied.set()
        self.rule.start()
        self.nodes.subscribe(self._changed)
        self.devices.subscribe(self._changed)
        self.nodes.start()
        self.devices.start()
        return self

    def _changed(self, name: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        del old, new
        self.mark([name])

    def mark(self, names: Sequence[str], at: float = 0.0) -> None:
        with self._wake:
            for name in names:
                self._dirty[name] = min(self._dirty.get(name, at), at)
            self._wake.notify_all()

    # -- health (health.HealthSource) ---------------------------------------------------------------

    def live(self) -> tuple[bool, str]:
        """``/livez``: the process is alive and its loop has not been told to stop."""
        if self._stop.is_set():
            return False, "the worker is stopping"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: startup applied the CRDs and both caches have listed (the reason when not)."""
        if not self._crds_applied.is_set():
            return False, "startup has not applied the CustomResourceDefinitions yet"
        for what, watch in (("Nodes", self.nodes), ("Devices", self.devices)):
            if not watch.synced:
                why = f" ({watch.last_error})" if watch.last_error else ""
                return False, f"the {what} cache has not listed yet{why}"
        return True, "ok"

    # -- the loop ----------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.devices.synced

    def run(self, clock: Callable[[], float] = time.monotonic) -> None:
        """Until :meth:`stop`."""
        while not self._stop.is_set():
            self.step(clock)
            with self._wake:
                now = clock()
                ready = [at for at in self._dirty.values() if at <= now]
                if not (ready and self.elector.leading and self.synced):
                    pending = [at - now for at in self._dirty.values() if at > now]
                    wait = min([self.elector.due_in() or self.options.retry_period, 1.0, *pending])
                    self._wake.wait(max(0.01, wait))
        self._shutdown()

    def step(self, clock: Callable[[], float] = time.monotonic) -> int:
        """One round (see the module docstring); how many names it reconciled."""
        leading = self.elector.tick()
        if not leading:
            self._was_leading = False
            return 0
        if self.installer is not None:
            self.installer.start()  # once per process (a no-op after the first), never waited for
        if not self.synced:
            return 0  # never act on a cache that has not listed yet
        now = clock()
        if not self._was_leading or now >= self._next_resync:
            self._was_leading = True
            self._next_resync = now + self.options.resync_period
            self.mark(sorted(set(self.nodes.names()) | set(self.devices.names())))
        with self._wake:
            batch = sorted(name for name, at in self._dirty.items() if at <= now)
            for name in batch:
                del self._dirty[name]
        for name in batch:
            if self._stop.is_set():
                break
            self._reconcile(name, clock)
        return len(batch)

    def _reconcile(self, name: str, clock: Callable[[], float]) -> None:
        node, devices = self.nodes.get(name), self.devices.get(name)
        for controller in self.controllers:
            try:
                controller.reconcile(name, node, devices)
            except KubeRequestError as exc:
                log.warning(
                    "%s for %s failed (retrying in %.0fs): %s", controller.name, name, self.options.retry_delay, exc
                )
                self.mark([name], clock() + self.options.retry_delay)
            except Exception:  # a bug in one controller never stops the others
                log.exception("%s for %s failed", controller.name, name)
                self.mark([name], clock() + self.options.retry_delay)
        self.reconciled += 1

    # -- stopping ----------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def _shutdown(self) -> None:
        self.rule.stop()
        if self.installer is not None:
            self.installer.stop()
        self.nodes.stop()
        self.devices.stop()
        self.elector.release()
        log.info("the worker stopped")


__all__ = ["Controller", "Worker", "WorkerOptions"]
