"""The Device Manager's detection loop (device-discovery "Stage 2", supplement §1.3 failure rules, §3.5).

:class:`DeviceManager` re-detects the node every ``--monitor-period`` (15 s; sooner when :meth:`poke`\\ d)
and decides, per manufacturer, what the pass means:

* **Detected with accelerators**: the manufacturer's groups are these.
* **Unmeasured** (the pass could not measure -- a library that would not load, a child that died, a node
  view that could not be read): no claim about the hardware. The manufacturer is reported *as it was last
  detected* (carried forward); one that has never answered stays absent.
* **Detected, empty** (a clean pass that found nothing): the manufacturer is *undetected*; what was held
  for it is dropped, so a later failure cannot carry a pulled card forward again.
* **Fast-failed**: before the first accepted pass, a Device Manager asked for exactly one manufacturer
  holds back a pass that detected nothing for it (empty or unmeasured) -- nothing is published, nothing
  reaches an allocator -- and repeats it every period, logging a warning each time.
  ``--no-fast-failed`` turns the hold-back off: the empty first pass is published like any other. Neither
  ever ends the process.

An accepted pass is applied to the allocators serve built (``allocators``, a mapping serve keeps filling):
each gets :meth:`Allocator.update` with its manufacturer's groups *plus every accelerator it had before
that this pass lacks, marked unhealthy* -- so an accelerator gone from a pass keeps its token ids and turns
Unhealthy in ListAndWatch, and turns Healthy again when it returns -- and only when that differs from what
it was last given. Manufacturers detected with accelerators that have no allocator yet are reported once
to ``on_detected(names, result)`` (serve builds their allocators and plugin servers there).

Then the node capacity keys (``allocator/capacity.py``) are synced and the NodeFeature / ``Devices`` are
published (``kube/nodestatus.py``, ``kube/publish.py``) through the injected ``capacity`` and ``publisher``
-- only when what they would carry changed (detection, or a ledger version between periods, read every
``ledger_poll`` seconds), plus a forced resync every ``resync_periods`` periods (a kubelet that
re-registers its Node zeroes extended resources; an object deleted behind our back). A failed sync or
publish is logged and tried again on the next period; it is never fatal.

Readiness (``/readyz``, ``health.py``): the first accepted pass is synced and published and
the plugins are registered (serve tells the manager how to ask, :meth:`set_registered_check`).
Liveness (``/livez``): the loop thread is alive and has completed a pass within 3 periods.

Nothing here talks to the API server or the kubelet itself: the sinks are injected (fakes in tests).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpustack_operator import api
from gpustack_operator.allocator.capacity import ManufacturerCapacity, node_capacity
from gpustack_operator.allocator.ledger import DevicesAllocationGroup
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.discovery.network import InterfaceInventory, InventoryOk
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.base import Detected, Unmeasured
from gpustack_operator.manufacturers.respond import Family

log = logging.getLogger(__name__)

MONITOR_PERIOD = 15.0  # --monitor-period
SECURE_PORT = 32443  # --secure-port
BIND_ADDRESS = "0.0.0.0"
KUBE_CONN_QPS = 200.0
KUBE_CONN_BURST = 400
KUBE_CONN_TIMEOUT = 300.0  # 5m
LIVENESS_PERIODS = 3  # /livez fails when no pass completed within this many periods
RESYNC_PERIODS = 4  # a forced capacity sync and publish every this many periods
LEDGER_POLL = 1.0  # how often the allocators' versions are read between periods
MAX_DURATION = 7 * 24 * 3600.0  # a duration flag longer than a week is a typo

# Publisher outcomes (kube/publish.py ``Outcome``, a StrEnum; not imported: no kubernetes client here).
PUBLISHED = frozenset({"wrote", "unchanged"})


class ManagerUsageError(ValueError):
    """A flag value the loop cannot run with (a usage error naming the flag, exit 2)."""


class NotYetError(RuntimeError):
    """``on_detected`` could not finish for a reason the next pass may not have (the node's pods not read
    yet): logged as a warning, without a traceback, and reported again next pass."""


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, flag: str) -> float:
    """A Go-style duration (``15s``, ``1m30s``, ``500ms``, ``5m``) or a plain number of seconds, as
    seconds. Positive, finite and at most a week; anything else raises :class:`ManagerUsageError`
    naming ``flag``."""
    value = text.strip()
    shown = repr(value[:40])
    if not value:
        raise ManagerUsageError(f"{flag} is empty: give a duration such as 15s, 1m30s or 500ms")
    seconds: float | None = None
    try:
        seconds = float(value) if re.fullmatch(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", value) else None
    except ValueError:
        seconds = None
    if seconds is None:
        pos, total = 0, 0.0
        for match in _DURATION_PART.finditer(value):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(value) or pos == 0:
            raise ManagerUsageError(
                f"{flag} {shown} is not a duration: use a number with a unit (ns, us, ms, s, m, h), e.g. 15s or 1m30s"
            )
        seconds = total
    if not math.isfinite(seconds) or seconds <= 0:
        raise ManagerUsageError(f"{flag} {shown} must be longer than 0 (e.g. 15s)")
    if seconds > MAX_DURATION:
        raise ManagerUsageError(f"{flag} {shown} is longer than a week; give a shorter duration (e.g. 15s)")
    return seconds


@dataclass(frozen=True)
class ManagerOptions:
    """The loop's and the health endpoint's flags (supplement §3.5), validated on construction."""

    monitor_period: float = MONITOR_PERIOD
    no_fast_failed: bool = False
    secure_port: int = SECURE_PORT
    bind_address: str = BIND_ADDRESS
    cert_dir: str | None = None
    kube_conn_qps: float = KUBE_CONN_QPS
    kube_conn_burst: int = KUBE_CONN_BURST
    kube_conn_timeout: float = KUBE_CONN_TIMEOUT
    resync_periods: int = RESYNC_PERIODS
    ledger_poll: float = LEDGER_POLL

    def __post_init__(self) -> None:
        def positive(value: float, flag: str, example: str) -> None:
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ManagerUsageError(f"{flag} {value!r} must be a number greater than 0 (e.g. {example})")

        positive(self.monitor_period, "--monitor-period", "15s")
        positive(self.kube_conn_qps, "--kube-conn-qps", "200")
        positive(self.kube_conn_burst, "--kube-conn-burst", "400")
        positive(self.kube_conn_timeout, "--kube-conn-timeout", "5m")
        positive(self.ledger_poll, "ledger_poll", "1")
        if self.monitor_period > MAX_DURATION or self.kube_conn_timeout > MAX_DURATION:
            raise ManagerUsageError("--monitor-period and --kube-conn-timeout are at most a week")
        if not isinstance(self.secure_port, int) or not 0 <= self.secure_port <= 65535:
            raise ManagerUsageError(
                f"--secure-port {self.secure_port!r} is not a TCP port: give 1-65535 (0: any free port)"
            )
        if not isinstance(self.kube_conn_burst, int):
            raise ManagerUsageError(f"--kube-conn-burst {self.kube_conn_burst!r} must be a whole number")
        if self.resync_periods < 1:
            raise ManagerUsageError("resync_periods must be at least 1")
        check_bind_address(self.bind_address)
        if self.cert_dir is not None and (not self.cert_dir.strip() or "\0" in self.cert_dir):
            raise ManagerUsageError(
                "--cert-dir is empty or holds a NUL byte: name the directory holding tls.crt/tls.key"
            )

    @property
    def request_timeout(self) -> float:
        """The per-request timeout of the loop's API calls: ``--kube-conn-timeout``, at most 10 s (a
        round trip that hangs longer would stall the loop past its liveness window)."""
        return min(self.kube_conn_timeout, 10.0)


def check_bind_address(value: str) -> str:
    """``--bind-address``: an IPv4 or IPv6 address (``0.0.0.0`` / ``::`` for every interface)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ManagerUsageError(
            f"--bind-address {value[:60]!r} is not an IP address: give one of this node's addresses, "
            "0.0.0.0 (every IPv4 interface) or :: (every interface)"
        ) from None
    return value


class AllocatorLike(Protocol):
    """What the loop needs of :class:`~gpustack_operator.allocator.core.Allocator`."""

    names: ResourceNames

    def pools(self) -> Sequence[Any]: ...

    def status(self) -> list[DevicesAllocationGroup]: ...

    def update(self, groups: list[DevicesGroup]) -> None: ...

    @property
    def version(self) -> int: ...


class CapacitySink(Protocol):
    """:class:`~gpustack_operator.kube.nodestatus.NodeCapacityWriter`."""

    def sync(self, desired: Mapping[str, str]) -> bool: ...


class PublishSink(Protocol):
    """:class:`~gpustack_operator.kube.publish.Publisher` (outcomes compared as strings)."""

    def publish(
        self,
        groups: Sequence[DevicesGroup],
        interfaces: InterfaceInventory | None,
        status: Iterable[DevicesAllocationGroup],
        *,
        force: bool = False,
    ) -> tuple[Any, Any]: ...


Detect = Callable[[api.Request], NodeDetection]
OnDetected = Callable[[list[str], NodeDetection], None]


def default_detect(req: api.Request) -> NodeDetection:
    """One pass as ``dm detect`` runs it, the network inventory included (``Devices.spec.interfaces``)."""
    return api.run_detect(req, interfaces=True)


def _dump(groups: Iterable[DevicesGroup]) -> list[dict[str, Any]]:
    return [g.model_dump(mode="json") for g in groups]


def merge_known(known: Sequence[DevicesGroup], current: Sequence[DevicesGroup]) -> list[DevicesGroup]:
    """``current`` plus every accelerator of ``known`` it lacks, marked unhealthy (in its known group,
    after the current ones). What an allocator is given: a gone accelerator keeps its token ids and is
    advertised Unhealthy, and is Healthy again when a pass brings it back. Pure."""
    present = {a.id for g in current for a in g.accelerators}
    out: list[DevicesGroup] = []
    by_id: dict[str, DevicesGroup] = {}
    for group in current:
        copy = group.model_copy(deep=True)
        out.append(copy)
        by_id.setdefault(copy.id, copy)
    for group in known:
        gone = [a for a in group.accelerators if a.id not in present]
        if not gone:
            continue
        target = by_id.get(group.id)
        if target is None:
            target = group.model_copy(deep=True, update={"accelerators": []})
            out.append(target)
            by_id[target.id] = target
        for accelerator in gone:
            target.accelerators.append(_unhealthy(accelerator))
            present.add(accelerator.id)
    return out


def _unhealthy(accelerator: Accelerator) -> Accelerator:
    copy = accelerator.model_copy(deep=True)
    copy.status.unhealthy = True
    return copy


def _families(allocator: AllocatorLike) -> set[Family]:
    return {pool.family for pool in allocator.pools()}


def _status_of(
    allocators: Mapping[str, AllocatorLike], current: Mapping[str, list[DevicesGroup]]
) -> list[DevicesAllocationGroup]:
    """The ledger of every allocator, restricted to the accelerators the published spec holds (an
    accelerator gone from detection is not offered in the ``Devices`` status either)."""
    out: list[DevicesAllocationGroup] = []
    for name, allocator in allocators.items():
        present = {a.id for g in current.get(name, []) for a in g.accelerators}
        for group in allocator.status():
            kept = [a for a in group.accelerators if a.id in present]
            if kept:
                out.append(group.model_copy(update={"accelerators": kept}))
    return out


class DeviceManager:
    """The detection loop (see the module docstring). ``allocators`` is serve's own mapping (manufacturer
    → allocator), read on every pass and filled by ``on_detected``."""

    def __init__(
        self,
        req: api.Request,
        opts: ManagerOptions,
        *,
        allocators: Mapping[str, AllocatorLike] | None = None,
        on_detected: OnDetected | None = None,
        capacity: CapacitySink | None = None,
        publisher: PublishSink | None = None,
        detect: Detect = default_detect,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.req = req
        self.opts = opts
        self.allocators: Mapping[str, AllocatorLike] = allocators if allocators is not None else {}
        self.on_detected = on_detected
        self.capacity = capacity
        self.publisher = publisher
        self.detect = detect
        self.clock = clock
        self.fast_failed = len(req.manufacturers) == 1 and not opts.no_fast_failed
        # what the loop holds
        self.current: dict[str, list[DevicesGroup]] = {}  # manufacturer -> groups (carried forward)
        self.known: dict[str, list[DevicesGroup]] = {}  # manufacturer -> every accelerator it ever had
        self.given: dict[str, list[dict[str, Any]]] = {}  # manufacturer -> what its allocator was given
        self.reported: set[str] = set()  # manufacturers handed to on_detected
        self.interfaces: InterfaceInventory | None = None
        self.accepted = 0  # passes accepted (published or to be published)
        self.passes = 0  # passes completed
        self.held_back: str | None = None  # why the first pass is held back (fast-failed)
        self.last_result: NodeDetection | None = None
        # the sinks
        self._synced_capacity: dict[str, str] | None = None
        self._published: tuple[Any, ...] | None = None
        self._published_once = False
        self._sink_error: str | None = None
        self._versions: dict[str, int] = {}
        self._since_resync = 0
        # the thread
        self._registered: Callable[[], bool] = lambda: False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = clock()
        self._last_pass_at: float | None = None
        self._pass_done = threading.Condition()

    # -- one pass -------------------------------------------------------------------------------

    def run_pass(self) -> bool:
        """Detect once and apply what the pass means; ``True`` when it was accepted (not held back)."""
        reason = ""
        try:
            result = self.detect(self.req)
        except Exception as exc:  # a node view that cannot be read is an unmeasured pass, never fatal
            log.warning("detection failed, every manufacturer is carried forward as last detected: %s", exc)
            result = None
            reason = f"{type(exc).__name__}: {exc}"
        with self._lock:
            try:
                accepted = self._accept(result, reason)
            finally:
                self.passes += 1
                self._last_pass_at = self.clock()
        with self._pass_done:
            self._pass_done.notify_all()
        return accepted

    def _outcome(self, result: NodeDetection | None, name: str, reason: str) -> Detected | Unmeasured:
        if result is None:
            return Unmeasured(reason)
        outcome = result.outcomes.get(name)
        return outcome if outcome is not None else Unmeasured("the pass did not answer for it")

    def _accept(self, result: NodeDetection | None, reason: str) -> bool:
        outcomes = {name: self._outcome(result, name, reason) for name in self.req.manufacturers}
        if self.accepted == 0 and self.fast_failed:
            (name,) = self.req.manufacturers
            outcome = outcomes[name]
            if not (isinstance(outcome, Detected) and outcome.groups):
                why = outcome.reason if isinstance(outcome, Unmeasured) else "no accelerator detected"
                self.held_back = (
                    f"the first detection of {name} found nothing ({why}): held back and repeated every "
                    f"{self.opts.monitor_period:g}s until its driver answers (--no-fast-failed publishes it)"
                )
                log.warning("%s", self.held_back)
                return False
        self.held_back = None
        self.last_result = result
        for name, outcome in outcomes.items():
            if isinstance(outcome, Unmeasured):
                if name in self.current:
                    log.warning("%s could not be measured (%s): reported as last detected", name, outcome.reason)
                else:
                    log.warning("%s could not be measured (%s): never detected, still absent", name, outcome.reason)
                continue
            if outcome.groups:
                if name not in self.current:
                    count = sum(len(g.accelerators) for g in outcome.groups)
                    log.info("%s detected: %d accelerator(s)", name, count)
                self.current[name] = [g.model_copy(deep=True) for g in outcome.groups]
            elif name in self.current:
                log.warning("%s: a clean pass found no accelerator: undetected (what was held for it is dropped)", name)
                del self.current[name]
                self.reported.discard(name)
        inventory = result.interfaces if result is not None else None
        if inventory is not None and (isinstance(inventory, InventoryOk) or self.interfaces is None):
            self.interfaces = inventory  # a failed inventory keeps the last list (it claims nothing)
        self.accepted += 1
        self._apply(result)
        self._sync()
        return True

    def _apply(self, result: NodeDetection | None) -> None:
        """Every allocator follows the pass; new manufacturers are reported to serve."""
        for name in self.req.manufacturers:
            groups = self.current.get(name, [])
            merged = merge_known(self.known.get(name, []), groups)
            self.known[name] = merged
            allocator = self.allocators.get(name)
            if allocator is None:
                continue
            dumped = _dump(merged)
            if self.given.get(name) != dumped:
                self._log_health(name, self.given.get(name), merged)
                allocator.update(merged)
                self.given[name] = dumped
        fresh = [
            n
            for n in self.req.manufacturers
            if n in self.current and n not in self.allocators and n not in self.reported
        ]
        if fresh and self.on_detected is not None and result is not None:
            try:
                self.on_detected(fresh, result)
            except NotYetError as exc:
                log.warning("%s", exc)
                return
            except Exception:
                log.exception("building the allocators of %s failed; tried again next pass", ", ".join(fresh))
                return
            self.reported.update(fresh)
            for name in fresh:
                if name in self.allocators:
                    self.given[name] = _dump(self.known.get(name, []))

    @staticmethod
    def _log_health(name: str, before: list[dict[str, Any]] | None, after: list[DevicesGroup]) -> None:
        if before is None:
            return
        was = {a["id"]: a["status"].get("unhealthy", False) for g in before for a in g["accelerators"]}
        for group in after:
            for accelerator in group.accelerators:
                old = was.get(accelerator.id)
                if old is None:
                    log.info("%s: accelerator %s appeared", name, accelerator.id)
                elif old != accelerator.status.unhealthy:
                    log.warning(
                        "%s: accelerator %s is %s",
                        name,
                        accelerator.id,
                        "Unhealthy" if accelerator.status.unhealthy else "Healthy again",
                    )

    # -- what leaves the node -----------------------------------------------------------------------

    def desired_capacity(self) -> dict[str, str]:
        return node_capacity(
            ManufacturerCapacity(a.names, self.current.get(m, []), _families(a), a.status())
            for m, a in self.allocators.items()
        )

    def _groups(self) -> list[DevicesGroup]:
        return [g for name in self.req.manufacturers for g in self.current.get(name, [])]

    def _sync(self, *, force: bool = False) -> None:
        """Sync the capacity keys and publish, each only when it changed (or ``force``); failures logged."""
        errors: list[str] = []
        if self.capacity is not None:
            desired = self.desired_capacity()
            if force or desired != self._synced_capacity:
                try:
                    self.capacity.sync(desired)
                    self._synced_capacity = desired
                except Exception as exc:
                    self._synced_capacity = None
                    errors.append(f"the node capacity keys: {exc}")
                    log.warning("syncing the node capacity keys failed (tried again next period): %s", exc)
        if self.publisher is not None:
            groups = self._groups()
            status = _status_of(self.allocators, self.current)
            key = (_dump(groups), self.interfaces, [s.model_dump(mode="json") for s in status])
            if force or key != self._published:
                try:
                    outcomes = self.publisher.publish(groups, self.interfaces, status, force=force)
                except Exception as exc:
                    outcomes = ("failed", "failed")
                    log.warning("publishing failed (tried again next period): %s", exc)
                if all(str(o) in PUBLISHED for o in outcomes):
                    self._published = key
                else:
                    self._published = None
                    named = getattr(self.publisher, "errors", None)
                    errors.append(f"publishing: {named or [str(o) for o in outcomes]}")
        self._sink_error = "; ".join(errors) or None
        if not errors:
            self._published_once = True
        self._versions = {m: a.version for m, a in self.allocators.items()}

    def refresh(self) -> bool:
        """Between periods: re-sync and re-publish when an allocator's ledger changed (its version);
        ``True`` when it did."""
        with self._lock:
            if self.accepted == 0:
                return False
            versions = {m: a.version for m, a in self.allocators.items()}
            if versions == self._versions:
                return False
            self._sync()
            return True

    # -- readiness and liveness --------------------------------------------------------------------

    def set_registered_check(self, check: Callable[[], bool]) -> None:
        """How readiness asks whether the plugins are registered with the kubelet (serve:
        ``lambda: all(s.registrations > 0 for s in plugins.servers)``)."""
        self._registered = check

    def ready(self) -> tuple[bool, str]:
        # No lock: a pass holds it through its API calls and serve's build, and a probe must not wait on
        # them. Each field read is one attribute load; a probe racing a pass sees the one before or after.
        held_back, accepted, published, error = self.held_back, self.accepted, self._published_once, self._sink_error
        if held_back is not None and accepted == 0:
            return False, held_back
        if accepted == 0:
            return False, "no detection pass has completed yet"
        if not published:
            return False, f"the first pass is not published yet ({error or 'in progress'})"
        try:
            registered = self._registered()
        except Exception as exc:
            return False, f"the plugins' registration could not be read: {exc}"
        if not registered:
            return False, "the device plugins are not registered with the kubelet yet"
        return True, "ok"

    def live(self) -> tuple[bool, str]:
        if self._thread is None or not self._thread.is_alive():
            return False, "the detection loop is not running"
        since = self._last_pass_at if self._last_pass_at is not None else self._started_at
        limit = LIVENESS_PERIODS * self.opts.monitor_period
        late = self.clock() - since
        if late > limit:
            return False, f"no detection pass completed for {late:.0f}s (more than {LIVENESS_PERIODS} periods)"
        return True, "ok"

    # -- the thread -----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the detection loop is already started")
        self._started_at = self.clock()
        self._thread = threading.Thread(target=self._run, name="device-manager", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Detect again now (a health event, a test)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait_passes(self, count: int, timeout: float) -> bool:
        """Block until ``count`` passes completed (or ``timeout``)."""
        with self._pass_done:
            return self._pass_done.wait_for(lambda: self.passes >= count, timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pass()
            except Exception:  # a bug in one pass must not end the loop (liveness reports it)
                log.exception("a detection pass failed")
            with self._lock:
                self._since_resync += 1
                resync = self._since_resync >= self.opts.resync_periods and self.accepted > 0
            if resync:
                self._since_resync = 0
                with self._lock:
                    try:
                        self._sync(force=True)
                    except Exception:
                        log.exception("the periodic resync failed")
            due = self.clock() + self.opts.monitor_period
            while not self._stop.is_set():
                left = due - self.clock()
                if left <= 0:
                    break
                if self._wake.wait(min(left, self.opts.ledger_poll)):
                    self._wake.clear()
                    break
                try:
                    self.refresh()
                except Exception:
                    log.exception("publishing a ledger change failed")


def make_sinks(client: Any, node: str, req: api.Request, opts: ManagerOptions) -> tuple[CapacitySink, PublishSink]:
    """The real sinks on one API client: the Node's capacity-key writer (owning the capacity keys of every
    manufacturer asked about, served or not) and the NodeFeature / ``Devices`` publisher, each request
    bounded by :attr:`ManagerOptions.request_timeout`. No API call is made here."""
    from gpustack_operator.allocator.capacity import names_of  # noqa: PLC0415
    from gpustack_operator.kube.nodestatus import NodeCapacityWriter  # noqa: PLC0415 -- the kubernetes client
    from gpustack_operator.kube.publish import Publisher  # noqa: PLC0415

    bases = [names_of(r).base for r in req.resolved.values()]
    timeout = opts.request_timeout
    return NodeCapacityWriter(client, node, bases, timeout=timeout), Publisher(client, node, timeout=timeout)


__all__ = [
    "DeviceManager",
    "ManagerOptions",
    "ManagerUsageError",
    "NotYetError",
    "check_bind_address",
    "make_sinks",
    "merge_known",
    "parse_duration",
]
