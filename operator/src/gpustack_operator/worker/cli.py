"""``gpustack-operator worker`` -- its flags (supplement §3.3) and its run.

Without ``*`` in ``--disable-applications`` the worker is in image mode (supplement §8) and installs its
packaged chart through ``helm`` (``--helm-binary``, ``--chart``; worker/install.py). ``/readyz`` and
``/livez`` are served over HTTPS on ``--bind-address:--secure-port`` (``health.py``, the Device Manager's
server; what they mean: ``worker/run.py``). The API client honours ``--kube-conn-qps``/``-burst``/``-timeout``
(``kube/bounded.py``). The flags of the reference's worker API, which is not served here, are accepted,
validated and have no effect (``worker/apiflags.py``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack_operator.worker.run import Worker

log = logging.getLogger(__name__)

APPLICATIONS = ("kueue", "node-feature-discovery", "csi-driver-nfs", "csi-driver-s3", "device-manager", "model-manager")

DESCRIPTION = (
    "Run the cluster-side worker: at startup (every replica) apply the Devices CRD and the gpustack-cpu-info "
    "NodeFeatureRule (retried while NFD's CRD is absent); then, while holding the Lease, keep each Node's "
    "NodeFeature <node>-gpustack-worker carrying its general node key and its gpustack.ai/managed mark (the "
    "Node's own, else true unless GPUSTACK_NODE_MANAGEMENT_MANUAL is true), copy that mark from each Node onto "
    "its Devices, and delete a departed node's Devices. Without * in --disable-applications "
    "(image mode) the leader also installs the packaged chart through helm. SIGTERM stops it and releases the "
    "Lease. /readyz and /livez are served over HTTPS on --bind-address:--secure-port."
)
HEALTH_NAME = "gpustack-operator-worker"  # the health endpoint's certificate CN and Server header


def parse_duration(value: str) -> float:
    """A Go duration (``15s``, ``1m30s``, ``500ms``) or plain seconds, as seconds: the Device Manager's
    own parser (``deviceplugin/manager.py``: positive, finite, at most a week), as an argparse type."""
    from gpustack_operator.deviceplugin.manager import ManagerUsageError  # noqa: PLC0415
    from gpustack_operator.deviceplugin.manager import parse_duration as parse  # noqa: PLC0415

    try:
        return parse(value, "duration")
    except ManagerUsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("duration ")) from None


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "t", "yes"):
        return True
    if text in ("false", "0", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")


def _applications(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        if item != "*" and item not in APPLICATIONS:
            raise argparse.ArgumentTypeError(f"unknown application {item!r}; choose from *, {', '.join(APPLICATIONS)}")
    return items


def add_parser(top: Any, add_logging: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``worker`` on the top-level subparsers (``add_logging``: the klog flags)."""
    p = top.add_parser(
        "worker", help="run the cluster-side worker (CRDs, NFD rule, node controllers)", description=DESCRIPTION
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    p.add_argument("--kube-api-server", metavar="URL", help="the API server's URL (overrides the kubeconfig's server)")
    p.add_argument(
        "--manufacturer",
        action="append",
        metavar="M",
        help="manufacturer(s) the gpustack-cpu-info rule marks acceleratable, repeatable or comma-separated "
        "(default: all nine)",
    )
    p.add_argument(
        "--disable-applications",
        type=_applications,
        action="extend",
        default=[],
        metavar="APPS",
        help="applications not to install, comma-separated, or * (chart mode's); without *, the worker installs "
        "its packaged chart as the release gpustack-operator-device-manager (image mode)",
    )
    p.add_argument(
        "--helm-binary",
        metavar="PATH",
        help="image mode: the helm binary (default: $HELM_BINARY, else helm on PATH)",
    )
    p.add_argument(
        "--chart",
        metavar="PATH",
        help="image mode: the chart to install (default: ${GPUSTACK_CONF_DIR:-/etc/gpustack}/charts/"
        "gpustack-operator-<version>.tgz)",
    )
    p.add_argument(
        "--kube-leader-election",
        "--leader-elect",
        dest="leader_election",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="run the controllers only while holding the Lease (default true)",
    )
    p.add_argument("--kube-leader-election-id", default="worker.gpustack.ai", metavar="NAME", help="the Lease's name")
    p.add_argument(
        "--kube-leader-election-namespace",
        metavar="NS",
        help="the Lease's namespace (default: $KUBERNETES_POD_NAMESPACE, else gpustack-system)",
    )
    p.add_argument("--kube-leader-lease", type=parse_duration, default=15.0, metavar="DURATION", help="default 15s")
    p.add_argument(
        "--kube-leader-renew-timeout", type=parse_duration, default=10.0, metavar="DURATION", help="default 10s"
    )
    p.add_argument(
        "--informer-cache-resync-period",
        type=parse_duration,
        default=3600.0,
        metavar="DURATION",
        help="how often every cached name is reconciled again (default 1h)",
    )
    _add_serving_flags(p)
    from gpustack_operator.worker.apiflags import add_flags  # noqa: PLC0415

    add_flags(p, _bool)
    add_logging(p)


def _add_serving_flags(p: argparse.ArgumentParser) -> None:
    """The health endpoint's and the API client's flags: ``device-manager serve``'s definition."""
    from gpustack_operator.cli import add_serving_flags  # noqa: PLC0415 -- loaded: it is building this parser

    add_serving_flags(
        p,
        who="the worker",
        default_port=31443,
        own_requests="each request of the worker uses",
        cert_dir_type=_cert_dir,
    )


def _cert_dir(value: str) -> str:
    if not value.strip() or "\0" in value:
        raise argparse.ArgumentTypeError("is empty: name the directory holding tls.crt and tls.key")
    return value


def run(args: argparse.Namespace) -> int:
    """The worker until SIGTERM/SIGINT; 0 on a clean stop, 1 when it could not start, 2 on bad input."""
    from gpustack_operator.kube.bounded import make_worker_client  # noqa: PLC0415
    from gpustack_operator.kube.pods import KubeConfigError  # noqa: PLC0415 -- the client
    from gpustack_operator.kube.publish import system_namespace  # noqa: PLC0415
    from gpustack_operator.manufacturers import UnknownManufacturerError, parse_manufacturers  # noqa: PLC0415
    from gpustack_operator.settings import SettingsError, node_management_manual  # noqa: PLC0415
    from gpustack_operator.worker.install import plan_install  # noqa: PLC0415
    from gpustack_operator.worker.memory import pin_mmap_threshold  # noqa: PLC0415
    from gpustack_operator.worker.rule import managed_vendors  # noqa: PLC0415
    from gpustack_operator.worker.run import Worker, WorkerOptions  # noqa: PLC0415

    if args.kube_leader_renew_timeout >= args.kube_leader_lease:
        print(
            "gpustack-operator: error: --kube-leader-renew-timeout must be shorter than --kube-leader-lease",
            file=sys.stderr,
        )
        return 2
    try:
        vendors = managed_vendors(parse_manufacturers(args.manufacturer))
        manual = node_management_manual()  # read once, here
    except (UnknownManufacturerError, SettingsError) as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return 2
    try:
        client = make_worker_client(
            args.kubeconfig,
            args.kube_api_server,
            qps=args.kube_conn_qps,
            burst=int(args.kube_conn_burst),
            conn_timeout=args.kube_conn_timeout,
        )
    except KubeConfigError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return 2
    pin_mmap_threshold()  # a freed list page goes back to the system (worker/memory.py)
    namespace = system_namespace()
    identity = os.environ.get("KUBERNETES_POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"
    options = WorkerOptions(
        namespace=namespace,
        vendors=vendors,
        identity=identity,
        leader_election=args.leader_election,
        lease_name=args.kube_leader_election_id,
        lease_namespace=args.kube_leader_election_namespace or namespace,
        lease_duration=args.kube_leader_lease,
        renew_deadline=args.kube_leader_renew_timeout,
        resync_period=args.informer_cache_resync_period,
        node_management_manual=manual,
        install=plan_install(
            args.disable_applications,
            os.environ,
            namespace=namespace,
            helm=args.helm_binary,
            chart=args.chart,
            kubeconfig=args.kubeconfig,
            api_server=args.kube_api_server,
        ),
    )
    log.info(
        "node management: %s",
        "manual (GPUSTACK_NODE_MANAGEMENT_MANUAL): a Node is marked gpustack.ai/managed only by its own label"
        if manual
        else "automatic: a Node without gpustack.ai/managed is marked true",
    )
    worker = Worker(client, options)
    _log_unserved(args)
    return _serve(worker, args)


def _log_unserved(args: argparse.Namespace) -> None:
    """Once: the flags of the API not served here have no effect (a warning when one was given)."""
    from gpustack_operator.worker.apiflags import given, unserved_note  # noqa: PLC0415

    log.log(logging.WARNING if given(args) else logging.INFO, "%s", unserved_note(args))


def _serve(worker: Worker, args: argparse.Namespace) -> int:
    """The health endpoint, then the worker until a signal; the endpoint is stopped last."""
    from gpustack_operator.health import HealthServer, HealthUsageError  # noqa: PLC0415

    health = HealthServer(
        worker,
        name=HEALTH_NAME,
        generate_in_child=True,  # cryptography would add ~11 MiB to the worker's RSS for its whole life
        bind_address=args.bind_address,
        port=args.secure_port,
        cert_dir=args.cert_dir,
        hosts=[socket.gethostname()],
    )
    try:
        health.start()
    except HealthUsageError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return 2
    if args.secure_port == 0:  # the chosen port is shown at every verbosity: nothing else tells it
        log.warning("--secure-port 0: /readyz and /livez are served on https://%s:%d", args.bind_address, health.port)
    try:
        return _run_worker(worker)
    finally:
        health.stop()


def _run_worker(worker: Worker) -> int:
    from gpustack_operator.worker.startup import StartupError  # noqa: PLC0415

    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stopping.set()
        worker.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        worker.start()
    except StartupError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return 1
    if stopping.is_set():
        worker.stop()
    worker.run()
    return 0


__all__ = ["add_parser", "parse_duration", "run"]
