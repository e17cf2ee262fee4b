"""``gpustack-operator`` — the single command-line entry point."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import logging
import os
import stat
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from gpustack_operator import __version__, api
from gpustack_operator.api import CONTAINER_HOST_ROOT
from gpustack_operator.discovery.detect import detect_document
from gpustack_operator.host import HostRootError
from gpustack_operator.host.root import file_kind
from gpustack_operator.manufacturers import NAMES, UnknownManufacturerError
from gpustack_operator.manufacturers.base import ModeError
from gpustack_operator.settings import SettingsError

if TYPE_CHECKING:  # preflight's modules load with the command that needs them
    from gpustack_operator.deviceplugin.manager import ManagerOptions
    from gpustack_operator.preflight.models import Group, Report

NO_FAST_FAILED_HELP = (
    "report an empty first result for a single --manufacturer without the note that a Device Manager "
    "would hold it back (detection-failure rule 6)"
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


DETECT_ROOT_HELP = (
    "the node view the detect pass reads as its own -- /sys, /dev, /proc and the vendor library where "
    "this container's mounts or vendor runtime put it (default: /, this process's own view); relocate "
    "it only to replay a captured node"
)


def _add_logging(p: argparse.ArgumentParser) -> None:
    """The klog-style global flags the reference accepts (supplement §3.2)."""
    p.add_argument(
        "-v",
        "--v",
        "--verbose",
        dest="verbose",
        type=_klog_level,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="log verbosity: -v=2 what the DaemonSet runs, -v=3 adds per-decision lines (runtime resolution, "
        "kubelet reads); -vv is -v=3",
    )
    p.add_argument(
        "--vmodule",
        type=_vmodule_arg,
        default=[],
        metavar="PATTERN=N,...",
        help="per-file verbosity, comma separated: e.g. runtime=3,kubelet=3 (a glob over module names)",
    )
    p.add_argument(
        "--logtostderr",
        type=_klog_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="log to stderr (default true; logs never go anywhere else)",
    )
    p.add_argument(
        "--skip_headers",
        "--skip-headers",
        dest="skip_headers",
        action="store_true",
        help="log lines without the level and logger header",
    )
    p.add_argument(
        "--add_dir_header",
        "--add-dir-header",
        dest="add_dir_header",
        action="store_true",
        help="log lines carry the logger's full module path (the default here)",
    )


def _add_common(p: argparse.ArgumentParser, *, host_root_alias: bool = True) -> None:
    p.add_argument("--detect-root", metavar="PATH", help=DETECT_ROOT_HELP)
    if host_root_alias:
        p.add_argument(
            "--host-root",
            dest="detect_root_alias",
            metavar="PATH",
            help="the same as --detect-root for this command: run on the node itself, the node's / is the "
            "view the pass reads",
        )
    p.add_argument(
        "--manufacturer",
        action="append",
        metavar="M",
        help=f"manufacturer(s) to ask about, repeatable or comma-separated; one of {', '.join(NAMES)} "
        "(default: all nine)",
    )
    p.add_argument("--no-pci-check", action="store_true", help="skip the detect pass's PCI check")
    _add_logging(p)


def _klog_level(value: str) -> int:
    try:
        level = int(value.strip().lstrip("="))
    except ValueError:
        raise argparse.ArgumentTypeError(f"-v takes a verbosity level 0-10, not {value!r}") from None
    if not 0 <= level <= 10:
        raise argparse.ArgumentTypeError(f"-v takes a verbosity level 0-10, not {level}")
    return level


def _klog_bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "t", "yes"):
        return True
    if text in ("false", "0", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")


def _vmodule_arg(value: str) -> list[tuple[str, int]]:
    """``pattern=N,pattern=N`` (klog's ``--vmodule``)."""
    out = []
    for item in value.split(","):
        if not item.strip():
            continue
        pattern, sep, level = item.partition("=")
        if not sep or not pattern.strip():
            raise argparse.ArgumentTypeError(f"--vmodule takes pattern=N entries, not {item!r}")
        out.append((pattern.strip(), _klog_level(level)))
    return out


def _normalise_verbosity(argv: list[str]) -> list[str]:
    """``-vv`` / ``-vvv`` (the short count form) are ``-v=3``; everything else is left to argparse."""
    return ["-v=3" if len(a) > 2 and a.startswith("-v") and set(a[1:]) == {"v"} else a for a in argv]


def _python_level(verbosity: int) -> int:
    """klog verbosity → a logging level: 0 warnings, 1-2 info, 3+ every decision (debug)."""
    if verbosity >= 3:
        return logging.DEBUG
    return logging.INFO if verbosity >= 1 else logging.WARNING


class _VModule(logging.Filter):
    """klog's ``--vmodule``: a record passes at the level its module's pattern names, else at ``-v``'s.

    A filter on the handler rather than logger levels, because most modules are imported after the
    flags are parsed (preflight's load lazily), so no logger list exists to set levels on yet."""

    def __init__(self, default: int, patterns: list[tuple[str, int]]) -> None:
        super().__init__()
        self.default = default
        self.patterns = patterns

    def threshold(self, name: str) -> int:
        short = name.rsplit(".", 1)[-1]
        for pattern, level in self.patterns:
            if fnmatch.fnmatchcase(short, pattern) or fnmatch.fnmatchcase(name, pattern):
                return _python_level(level)
        return self.default

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.threshold(record.name)


def configure_logging(args: argparse.Namespace) -> None:
    fmt = "%(message)s" if args.skip_headers else "%(levelname)s %(name)s: %(message)s"
    default = _python_level(args.verbose)
    if not args.vmodule:
        logging.basicConfig(level=default, format=fmt, stream=sys.stderr, force=True)
        return
    lowest = min([default, *(_python_level(level) for _, level in args.vmodule)])
    logging.basicConfig(level=lowest, format=fmt, stream=sys.stderr, force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_VModule(default, args.vmodule))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpustack-operator",
        description="Get accelerator nodes ready for Kubernetes, and prove they are.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    dm = top.add_parser("device-manager", aliases=["dm"], help="node-side commands of the Device Manager")
    sub = dm.add_subparsers(dest="action", required=True, parser_class=_Parser)

    detect = sub.add_parser(
        "detect",
        help="what accelerators are here, in full (a pure read)",
        description="Detect the node's CPU identity, PCI devices and accelerators, and print the "
        "node key, the labels the node would carry and the Devices spec groups.",
    )
    _add_common(detect)
    detect.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="output format")
    detect.add_argument("--no-fast-failed", action="store_true", help=NO_FAST_FAILED_HELP)

    mon = sub.add_parser(
        "monitor",
        help="what the accelerators are doing right now (one usage sample, a pure read)",
        description="Take one usage sample per manufacturer: memory used, utilisation, temperature and "
        "power where the vendor reports them. A manufacturer that could not be measured is named under "
        "'unmeasured', never dropped.",
    )
    _add_common(mon)
    mon.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="output format")
    mon.add_argument("--no-fast-failed", action="store_true", help=NO_FAST_FAILED_HELP)

    mode = sub.add_parser(
        "mode",
        help="read, or set, a vendor driver mode (container-share, smlu, mig, sgpu)",
        description="Read a manufacturer's driver mode on every accelerator, or set it on some. A set "
        "is idempotent (no write when already there) and prints before/after with the vendor command "
        "that undoes it.",
    )
    mode.add_argument("manufacturer", help="the manufacturer (e.g. ascend)")
    mode.add_argument("mode", help="the mode (e.g. container-share, smlu, mig)")
    toggle = mode.add_mutually_exclusive_group()
    toggle.add_argument("--enable", action="store_true", help="turn the mode on")
    toggle.add_argument("--disable", action="store_true", help="turn the mode off")
    mode.add_argument("--accelerator", default="all", help="all (default), a driver index, or an id")
    mode.add_argument("--dry-run", action="store_true", help="print the change without making it")
    mode.add_argument(
        "--force",
        action="store_true",
        help="turn a mode off even where pods hold slices (their slices are stranded)",
    )
    mode.add_argument("--detect-root", metavar="PATH", help=DETECT_ROOT_HELP)
    mode.add_argument(
        "--host-root", dest="detect_root_alias", metavar="PATH", help="the same as --detect-root for this command"
    )
    _add_logging(mode)

    pre = sub.add_parser(
        "preflight",
        help="which accelerators this node can serve (exit 1 only for an unavailable answer)",
        description="Answer, per manufacturer, the three questions: are its devices detected, can they be "
        "sliced (the driver-read row, then a probe container granted a slice), can they be managed while "
        "sliced (sidecar visibility, co-tenancy); print one YAML document (JSON with -o json) on stdout and a "
        "short summary of it on stderr (-q leaves it out). Exits 1 only when an answer is unavailable. "
        "Without --dry-run it stages the preload-library tree onto the host, takes the node's preflight lock, "
        "sweeps containers an earlier run left behind and starts the probes.",
    )
    _add_common(pre, host_root_alias=False)
    pre.add_argument(
        "--host-root",
        metavar="PATH",
        default=None,
        help="where the host's / is mounted (-v /:/host); entered with chroot for the host's own vendor CLI "
        "and container CLI and read for the kubelet's configuration, never detected through (default: "
        "/host; when /host is absent or is not a node's root -- no /etc -- the cross-check is not asked, the "
        "run carries on as a dry run and the report says so; a path given here that does not exist or is no "
        "directory is a usage error)",
    )
    pre.add_argument(
        "-o",
        "--output",
        choices=["yaml", "json"],
        default="yaml",
        help="the document's format on stdout (default yaml)",
    )
    pre.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="leave out what stderr tells a person -- the progress lines and the summary after the document "
        "(per manufacturer: state, count, the first unavailable reason; what the exit code means); logs stay",
    )
    pre.add_argument("--dry-run", action="store_true", help="print container steps instead of taking them")
    pre.add_argument(
        "--runtime",
        type=_runtime_arg,
        metavar="{docker,nerdctl,ctr}",
        help="the container CLI to drive (default: resolved from the kubelet's CRI endpoint, else probed "
        "docker, nerdctl, ctr)",
    )
    pre.add_argument(
        "--probe-image",
        type=_probe_image_arg,
        metavar="IMAGE",
        help="image for the probe containers, [registry[:port]/]path[:tag][@sha256:<hex>] (default: the "
        "family's own, nvidia/cuda:<CUDA major>, quay.io/ascend/cann:<CANN major>-<family>, ubuntu:24.04 for "
        "AMD; required for Hygon and T-Head, whose slice rows otherwise stop at simulated; for air-gapped use)",
    )
    pre.add_argument(
        "--preload-source",
        metavar="PATH",
        default=None,
        help="the preload-library tree staged onto the host's /var/lib/gpustack/operator/lib (a directory or "
        "a .tar[.gz|.xz] in this process's filesystem; default /opt/gpustack/lib of the node view, where the "
        "operator image carries it)",
    )
    _add_serve(sub)
    top.add_parser(
        "crds",
        help="print the CustomResourceDefinitions this operator writes (YAML)",
        description="Print the Devices CustomResourceDefinition (worker.gpustack.ai), generated from the models the "
        "Device Manager writes; the same YAML is checked in at operator/crds/. Apply it with kubectl apply -f -.",
    )
    chart = top.add_parser(
        "chart-schema",
        help="print the Helm chart's values.schema.json, generated from its values model",
        description="Print the JSON schema of the chart's values (operator/chart/gpustack-operator), generated from "
        "gpustack_operator/chart_values.py; --write CHART_DIR rewrites the chart's generated files instead "
        "(values.schema.json, templates/_defaults.tpl). docs/chart.md.",
    )
    chart.add_argument("--write", metavar="CHART_DIR", help="rewrite the generated files of the chart in CHART_DIR")
    from gpustack_operator.worker.cli import add_parser as add_worker  # noqa: PLC0415 -- no client import

    add_worker(top, _add_logging)
    return parser


SERVE_DESCRIPTION = (
    "Detect the node every --monitor-period and serve what it offers to the kubelet as v1beta1 device "
    "plugins (one socket per resource beside --kube-socket; registered after its own server answers, "
    "registered again whenever the kubelet restarts) until SIGTERM or SIGINT, which remove the sockets it "
    "created. It never exits because nothing was found: a manufacturer is served from the first pass that "
    "detects it, an accelerator gone from a pass is advertised Unhealthy and Healthy again when it returns. "
    "Each pass patches the node capacity keys (<base>.sliced.*, <base>.partitioned.*) onto the Node's status "
    "and publishes the NodeFeature <node>-gpustack-device-manager and the Devices <node>, only on change. "
    "/readyz and /livez are served over HTTPS on --bind-address:--secure-port. "
    "Reservations are durable: each grant is recorded on its Pod in the "
    "device.gpustack.ai/accelerator.allocated annotation before Allocate answers, the node's Pods are read "
    "from a watch, and a restarted Device Manager rebuilds what is held from those records and the kubelet's "
    "pod-resources List before it registers any plugin."
)


def _add_serve(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``device-manager serve`` (supplement §3.5; the kubelet and API-server flags of this version)."""
    serve = sub.add_parser(
        "serve",
        help="serve the node's accelerators to the kubelet (the device-plugin allocator)",
        description=SERVE_DESCRIPTION,
    )
    _add_common(serve, host_root_alias=False)
    serve.add_argument("--no-shared", action="store_true", help="do not create shared devices")
    serve.add_argument("--no-sliced", action="store_true", help="do not create logically sliced devices")
    serve.add_argument("--no-partitioned", action="store_true", help="do not create hardware-partitioned devices")
    serve.add_argument(
        "--kube-socket",
        type=_socket_arg,
        default="/var/lib/kubelet/device-plugins/kubelet.sock",
        metavar="PATH",
        help="the kubelet's registration socket; the plugin sockets are created beside it "
        "(default: /var/lib/kubelet/device-plugins/kubelet.sock)",
    )
    serve.add_argument(
        "--pod-resources-socket",
        type=_socket_arg,
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        metavar="PATH",
        help="the kubelet's pod-resources socket, asked which container an allocation serves "
        "(default: /var/lib/kubelet/pod-resources/kubelet.sock)",
    )
    serve.add_argument(
        "--node-name", metavar="NAME", help="this node's name (default: $KUBERNETES_NODE_NAME, which is required)"
    )
    serve.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the API server (default: in-cluster when KUBERNETES_SERVICE_HOST is set, "
        "else $KUBECONFIG)",
    )
    serve.add_argument(
        "--kube-api-server",
        type=_url_arg,
        metavar="URL",
        help="the API server's URL (overrides the kubeconfig's server; alone: no credentials, for a local stand-in)",
    )
    serve.add_argument(
        "--host-write-root",
        metavar="PATH",
        default="/",
        help="where the host paths this process writes (per-pod working directories) are reachable (default: /)",
    )
    serve.add_argument(
        "--once-registered",
        action="store_true",
        help="exit 0 once every plugin has registered with the kubelet (a smoke test), 1 if one has not in 60 s "
        "(nothing detected by then included)",
    )
    _add_manager_flags(serve)


SERVE_NO_FAST_FAILED_HELP = (
    "publish an empty first detection instead of holding it back and repeating it every period (only when "
    "--manufacturer names exactly one; neither setting ends the process)"
)


def _add_manager_flags(serve: argparse.ArgumentParser) -> None:
    """The detection loop's and the health endpoint's flags (supplement §3.5; deviceplugin/manager.py)."""
    serve.add_argument("--no-fast-failed", action="store_true", help=SERVE_NO_FAST_FAILED_HELP)
    serve.add_argument(
        "--monitor-period",
        type=_duration_arg("--monitor-period"),
        default=15.0,
        metavar="DURATION",
        help="how often the node is detected again (a Go duration such as 15s or 1m, or seconds; default 15s)",
    )
    add_serving_flags(
        serve,
        who="the Device Manager",
        default_port=32443,
        own_requests="the detection loop's own requests use",
    )


def add_serving_flags(
    p: argparse.ArgumentParser,
    *,
    who: str,
    default_port: int,
    own_requests: str,
    cert_dir_type: Callable[[str], str] = str,
) -> None:
    """The health endpoint's flags (``--secure-port``, ``--bind-address``, ``--cert-dir``) and the API
    client's (``--kube-conn-qps``/``-burst``/``-timeout``), supplement §3.3/§3.5: one definition for
    ``device-manager serve`` and ``worker``."""
    p.add_argument(
        "--secure-port",
        type=_port_arg,
        default=default_port,
        metavar="PORT",
        help=f"the HTTPS port of /readyz and /livez (default {default_port}; 0: any free port, logged)",
    )
    p.add_argument(
        "--bind-address",
        type=_bind_address_arg,
        default="0.0.0.0",
        metavar="IP",
        help="the address /readyz and /livez are served on (default 0.0.0.0)",
    )
    p.add_argument(
        "--cert-dir",
        type=cert_dir_type,
        metavar="DIR",
        help="the directory holding tls.crt and tls.key for /readyz and /livez (neither there: a self-signed pair "
        "is generated into it; not given: into a private temporary directory)",
    )
    p.add_argument(
        "--kube-conn-qps",
        type=_positive_arg("--kube-conn-qps", float),
        default=200.0,
        metavar="QPS",
        help=f"API-server requests per second {who} allows itself (default 200)",
    )
    p.add_argument(
        "--kube-conn-burst",
        type=_positive_arg("--kube-conn-burst", int),
        default=400,
        metavar="N",
        help="API-server requests allowed in a burst (default 400)",
    )
    p.add_argument(
        "--kube-conn-timeout",
        type=_duration_arg("--kube-conn-timeout"),
        default=300.0,
        metavar="DURATION",
        help=f"the API-server request timeout (default 5m; {own_requests} at most 10s)",
    )


def _duration_arg(flag: str) -> Callable[[str], float]:
    def parse(value: str) -> float:
        from gpustack_operator.deviceplugin.manager import ManagerUsageError, parse_duration  # noqa: PLC0415

        try:
            return parse_duration(value, flag)
        except ManagerUsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag} ")) from None

    return parse


def _positive_arg(flag: str, kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = kind(value.strip())
        except ValueError:
            what = "a whole number (e.g. 400)" if kind is int else "a number (e.g. 200)"
            raise argparse.ArgumentTypeError(f"{_shown(value)} is not {what}") from None
        if not (0 < number < float("inf")):
            raise argparse.ArgumentTypeError(f"{_shown(value)} must be greater than 0")
        return number

    return parse


def _port_arg(value: str) -> int:
    try:
        port = int(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a port number: give 1-65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port: give 1-65535 (0: any free port)")
    return port


def _bind_address_arg(value: str) -> str:
    from gpustack_operator.deviceplugin.manager import ManagerUsageError, check_bind_address  # noqa: PLC0415

    try:
        return check_bind_address(value)
    except ManagerUsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--bind-address ")) from None


def manager_options(args: argparse.Namespace) -> ManagerOptions:
    """``dm serve``'s loop and health flags as :class:`~gpustack_operator.deviceplugin.manager.ManagerOptions`
    (raises ``ManagerUsageError``, a ``ValueError`` naming the flag)."""
    from gpustack_operator.deviceplugin.manager import ManagerOptions  # noqa: PLC0415

    return ManagerOptions(
        monitor_period=args.monitor_period,
        no_fast_failed=args.no_fast_failed,
        secure_port=args.secure_port,
        bind_address=args.bind_address,
        cert_dir=args.cert_dir,
        kube_conn_qps=args.kube_conn_qps,
        kube_conn_burst=int(args.kube_conn_burst),
        kube_conn_timeout=args.kube_conn_timeout,
    )


def _socket_arg(value: str) -> str:
    """A unix socket path: absolute, and short enough for sun_path (107 bytes) with a plugin's name."""
    if not value.startswith("/") or "\0" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not an absolute path")
    if len(os.fsencode(value)) > 80:
        raise argparse.ArgumentTypeError(
            f"{value!r} is too long for a unix socket directory (a socket path holds at most 107 bytes)"
        )
    return value


def _url_arg(value: str) -> str:
    if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a URL; use https://host:port")
    return value


def _runtime_arg(value: str) -> str:
    """``--runtime``: refused before the pass unless docker, nerdctl or ctr (supplement §2.4)."""
    from gpustack_operator.preflight.runtime import RuntimeChoiceError, parse_runtime_name  # noqa: PLC0415

    try:
        parse_runtime_name(value)
    except RuntimeChoiceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _probe_image_arg(value: str) -> str:
    """``--probe-image``: an OCI image reference, or a usage error naming what is wrong with it."""
    from gpustack_operator.preflight.imageref import ImageRefError, parse_image_ref  # noqa: PLC0415

    try:
        parse_image_ref(value)
    except ImageRefError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


# Keys longer than this go to the pure-Python emitter: near 128 characters it and libyaml's differ on
# when a key is written in the explicit "? key" form.
C_EMITTER_KEY_MAX = 100


def c_emits_alike(doc: object) -> bool:
    """True when libyaml's emitter writes ``doc`` byte for byte as PyYAML's pure-Python one does (at a
    quarter of the time): a dict or a list whose strings are all printable ASCII on one line, whose keys
    are non-empty strings of at most :data:`C_EMITTER_KEY_MAX` characters, and whose other values are
    None, bools, numbers, lists and dicts -- every detect document of the fixture nodes. The two differ
    elsewhere (a non-ASCII character escaped by one and not the other, a long double-quoted string
    folded differently, an empty key, the end marker after a lone scalar), which keeps the Python one."""
    if not isinstance(doc, dict | list):
        return False
    stack: list[object] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not (node.isascii() and node.isprintable()):
                return False
        elif isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str) or not 0 < len(key) <= C_EMITTER_KEY_MAX:
                    return False
                stack.append(key)
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif node is not None and not isinstance(node, int | float):
            return False
    return True


def _dump_yaml(doc: object) -> str:
    import yaml  # noqa: PLC0415 -- ~12 ms, paid only by the commands that print YAML

    fast = getattr(yaml, "CSafeDumper", None) if c_emits_alike(doc) else None
    return yaml.dump(doc, Dumper=fast or yaml.SafeDumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


class OutputError(Exception):
    """stdout would not take the document (a full disk, a closed pipe): where the output goes, not a bug."""


def _write(text: str) -> None:
    """The document to stdout, flushed here so a failure is named now. On failure stdout is pointed at
    /dev/null, so the interpreter's own flush at exit has nothing left to fail on ("Exception ignored")."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):  # a stdout with no descriptor (captured) keeps its own
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        raise OutputError(
            f"the document could not be written to stdout: {exc.strerror or exc} (check where the output goes)"
        ) from None


def _emit(doc: object, output: str) -> None:
    _write(json.dumps(doc, indent=2) + "\n" if output == "json" else _dump_yaml(doc))


def _mode(req: api.Request, args: argparse.Namespace) -> int:
    from gpustack_operator.manufacturers.modes import ModeUsageError  # noqa: PLC0415 -- only mode needs it

    manufacturer = req.manufacturers[0]
    try:
        if args.enable or args.disable:
            changes = api.set_mode(
                req,
                manufacturer,
                args.mode,
                args.accelerator,
                bool(args.enable),
                dry_run=args.dry_run,
                force=args.force,
            )
            _emit({"changes": [c.model_dump(exclude_none=True) for c in changes]}, "yaml")
            answered = bool(changes)
        else:
            states = api.read_modes(req, manufacturer, args.mode)
            _emit({"modes": [s.model_dump(exclude_none=True) for s in states]}, "yaml")
            answered = bool(states)
        if not answered:  # never a silent no-op: the node has no accelerator of this manufacturer
            print(
                f"gpustack-operator: error: no {manufacturer} accelerator was detected in {req.root}, so its "
                f"{args.mode} mode was neither read nor set (check with: gpustack-operator dm preflight "
                f"--manufacturer {manufacturer})",
                file=sys.stderr,
            )
            return EXIT_FAILED
    except ModeUsageError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModeError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_normalise_verbosity(list(sys.argv[1:] if argv is None else argv)))
    if args.command == "crds":
        return _crds()
    if args.command == "chart-schema":
        from gpustack_operator.chart_values import cli_main  # noqa: PLC0415 -- the model only here

        return cli_main(args.write)
    configure_logging(args)
    if args.command == "worker":
        from gpustack_operator.worker.cli import run as run_worker  # noqa: PLC0415 -- the client with it

        return run_worker(args)
    try:
        manufacturers = [args.manufacturer] if args.action == "mode" else args.manufacturer
        root = _detect_root(args)
        if root is not None:
            existing_root(root, *_root_flag(args))
        if args.action == "preflight" and args.host_root is not None:
            existing_root(args.host_root, "--host-root", HOST_ROOT_REMEDY)
        req = api.make_request(root, manufacturers, no_pci_check=getattr(args, "no_pci_check", False))
    except (UnknownManufacturerError, SettingsError, api.RootArgumentError) as exc:
        parser.exit(EXIT_USAGE, f"gpustack-operator: error: {exc}\n")
    try:
        return _run(args, req)
    except OutputError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # a bug: named in one line, the trace to the log, never to stdout
        logging.getLogger(__name__).debug("crashed", exc_info=True)
        print(
            f"gpustack-operator: error: {args.action} crashed: {type(exc).__name__}: {exc} (a bug: run it again "
            "with -v=3 and report the trace)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _crds() -> int:
    """``gpustack-operator crds``: the CustomResourceDefinitions as YAML (no node, no API server)."""
    from gpustack_operator.kube.crds import render  # noqa: PLC0415 -- the models, not the client

    try:
        _write(render())
    except OutputError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _detect_root(args: argparse.Namespace) -> str | None:
    """``--detect-root``, or the command's own ``--host-root`` where that means the same root."""
    root: str | None = args.detect_root
    alias = getattr(args, "detect_root_alias", None)
    if root is not None and alias is not None and root != alias:
        raise api.RootArgumentError(
            f"--detect-root {root} and --host-root {alias} name two roots; for this command they are one"
        )
    return root if root is not None else alias


def _root_flag(args: argparse.Namespace) -> tuple[str, str]:
    """The flag the user typed the node view with (``--host-root`` where that is its alias), and the
    remedy that fits it."""
    if args.detect_root is None:
        return "--host-root", ALIAS_REMEDY
    return "--detect-root", NODE_VIEW_REMEDY


NODE_VIEW_REMEDY = (
    "name the directory whose /sys, /dev and /proc the pass should read: / on the node itself, or a captured "
    "node's tree"
)
ALIAS_REMEDY = "name the directory the node's / is at: / on the node itself, or a captured node's tree"
HOST_ROOT_REMEDY = (
    "name the directory the node's / is mounted at (-v /:/host), or leave --host-root out: the default /host, "
    "when nothing is mounted there, carries on as a dry run"
)
# A typed value is shown at most this long in a message (a path is far shorter; hostile text need not be).
SHOWN_MAX = 200


def _shown(value: str) -> str:
    """``value`` quoted on one printable line (``repr``: every character that is not printable escaped),
    cut at :data:`SHOWN_MAX` characters."""
    shown = repr(value[:SHOWN_MAX])
    return shown[:SHOWN_MAX] + "..." if len(value) > SHOWN_MAX or len(shown) > SHOWN_MAX else shown


def existing_root(value: str, flag: str, remedy: str) -> str:
    """A root the user typed (``--detect-root``, ``--host-root``): ``value`` when it is a directory, else
    :class:`api.RootArgumentError` -- a usage error, exit 2 -- naming ``flag``, the value and the remedy.

    Only a typed root is held to this. The spec's "A run with no host root to enter carries on as a dry
    run rather than stopping" (preflight-operations, "The A5 host-state rows") is the default ``/host``
    not mounted, which preflight still answers; a path the user typed that names nothing is their typo,
    which no answer should absorb. The check is a ``stat``: nothing is opened, so a FIFO is refused at
    once, never waited on."""
    what = "node view" if flag == "--detect-root" else "host root"
    if not value.strip():
        raise api.RootArgumentError(f"{flag} is empty: {remedy}")
    if "\0" in value:
        raise api.RootArgumentError(f"{flag}: {what} {_shown(value)} holds a NUL byte, so it names no directory")
    try:
        mode = os.stat(value).st_mode
    except OSError as exc:
        why = exc.strerror or str(exc)
    except ValueError:  # a name the filesystem encoding cannot spell (a lone surrogate)
        why = "it is not encodable as a file name"
    else:
        if stat.S_ISDIR(mode):
            return value
        kind = "a regular file" if stat.S_ISREG(mode) else file_kind(mode)
        why = f"it is {kind}, not a directory"
    raise api.RootArgumentError(f"{flag}: {what} {_shown(value)} cannot be used: {why}; {remedy}")


def _fast_failed_note(args: argparse.Namespace, req: api.Request, empty: bool) -> None:
    """Detection-failure rule 6, as a one-shot command can honour it: a pass asked for exactly one
    manufacturer that answers nothing is what a Device Manager would hold back and retry."""
    if empty and len(req.manufacturers) == 1 and not args.no_fast_failed:
        print(
            f"gpustack-operator: {req.manufacturers[0]} answered no accelerator; a Device Manager asked for "
            "this manufacturer alone would hold this first result back and retry it every period "
            "(--no-fast-failed publishes it)",
            file=sys.stderr,
        )


def _serve(args: argparse.Namespace, req: api.Request) -> int:
    """``device-manager serve``: usage problems (node name, API-server configuration, node view) exit 2."""
    try:
        from gpustack_operator.deviceplugin import serve  # noqa: PLC0415 -- grpc and the kubernetes client
    except ImportError as exc:
        print(
            f"gpustack-operator: error: serve could not load its gRPC / Kubernetes dependencies ({exc}); they are "
            "the package's own (grpcio, protobuf, kubernetes): reinstall gpustack-operator",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        opts = serve.ServeOptions(
            node_name=serve.node_name(args.node_name),
            kube_socket=args.kube_socket,
            pod_resources_socket=args.pod_resources_socket,
            kubeconfig=args.kubeconfig,
            kube_api_server=args.kube_api_server,
            host_write_root=api.check_root(args.host_write_root, "--host-write-root") or "/",
            families=serve.FamilyOptions(
                shared=not args.no_shared, sliced=not args.no_sliced, partitioned=not args.no_partitioned
            ),
            once_registered=args.once_registered,
        )
        return serve.serve(req, opts, manager=manager_options(args))
    except (serve.ServeUsageError, serve.ManagerUsageError, api.RootArgumentError) as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace, req: api.Request) -> int:
    """The command; an unusable node view is a usage error, exit 2, for every command that reads one.
    :func:`main` refused a typed root that names no directory already, naming the flag; this catches one
    that stops being usable after that check."""
    try:
        return _command(args, req)
    except HostRootError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _command(args: argparse.Namespace, req: api.Request) -> int:
    if args.action == "detect":
        result = api.run_detect(req)
        _emit(detect_document(result), args.output)
        _fast_failed_note(args, req, not result.groups and not result.unmeasured)
        for manufacturer, reason in sorted(result.unmeasured.items()):
            print(f"gpustack-operator: {manufacturer} could not be measured: {reason}", file=sys.stderr)
        return EXIT_FAILED if result.unmeasured else EXIT_OK

    if args.action == "mode":
        return _mode(req, args)

    if args.action == "serve":
        return _serve(args, req)

    if args.action == "monitor":
        mdoc = api.monitor(req)
        _emit(mdoc, args.output)
        _fast_failed_note(args, req, not mdoc.get("groups") and not mdoc.get("unmeasured"))
        unmeasured = mdoc.get("unmeasured") or {}
        assert isinstance(unmeasured, dict)
        for manufacturer, reason in sorted(unmeasured.items()):
            print(f"gpustack-operator: {manufacturer} could not be measured: {reason}", file=sys.stderr)
        return EXIT_OK

    return _preflight(args, req)


def _preflight(args: argparse.Namespace, req: api.Request) -> int:
    """``device-manager preflight``: the document on stdout, exactly (``-o yaml|json``); after it, unless
    ``--quiet``, the summary on stderr. ``--host-root`` not given is the default ``/host``, whose absence
    the run answers (a dry run); one given was checked in :func:`main` already."""
    host_root = args.host_root if args.host_root is not None else CONTAINER_HOST_ROOT
    # --runtime, --probe-image and the roots were refused by argparse and main() already, so nothing
    # raised from here on is a usage error: a crash is contained and the document still written
    try:
        report = api.run_preflight(
            req,
            dry_run=args.dry_run,
            runtime=args.runtime,
            probe_image=args.probe_image,
            host_root=host_root,
            preload_source=args.preload_source,
            progress=None if args.quiet else _progress(),
        )
    except Exception as exc:
        from gpustack_operator.preflight.run import unusable_root_report  # noqa: PLC0415

        logging.getLogger(__name__).debug("preflight crashed", exc_info=True)  # the trace at -v=3 only
        report = unusable_root_report(
            req.manufacturers,
            f"the preflight pass crashed ({type(exc).__name__}: {exc}); a bug worth reporting with the -v=3 output",
        )
    _emit(report.wire(), args.output)
    if not args.quiet:
        with contextlib.suppress(OSError):  # a stderr that takes nothing loses the summary, not the answer
            print("\n".join(preflight_summary(report, dry_run=args.dry_run)), file=sys.stderr, flush=True)
    return EXIT_FAILED if report.failures() else EXIT_OK


SUMMARY_HEADER = "gpustack-operator: preflight: summary"
SUMMARY_WIDTH = 100  # every summary line fits in it, whatever the report holds: longer text wraps
SUMMARY_NAME_MAX = 40  # a manufacturer's name or a model, as the summary shows it
# The most lines one item takes: a manufacturer's line, its first unavailable reason (the document holds
# it whole), why no container step ran.
ENTRY_LINES, REASON_LINES, STEPS_LINES = 2, 4, 3
DRY_RUN_LINE = "  dry run (--dry-run): nothing was written to the node and no container was started"


def preflight_summary(report: Report, *, dry_run: bool) -> list[str]:
    """What stderr tells a person after the document, so a healthy node is a few lines, not the
    document's thousand (issue 17): per manufacturer its state, its accelerator count and -- where an
    answer is unavailable -- how many are and the first one's reason; the manufacturers with nothing
    detected on one line; manufacturers that would say the same thing (all nine, after a crash) said
    once; why no container step ran, where none did; and what the exit code means (supplement §2.8:
    non-zero only for an unavailable accelerator answer). Every line is printable and at most
    :data:`SUMMARY_WIDTH` long: the report's text comes from the host (a driver's message, a file)."""
    said: dict[tuple[str, str | None], list[str]] = {}  # (the words, the first reason) -> manufacturers
    nothing: list[str] = []
    for group in report.accelerators:
        name = _short(group.manufacturer, SUMMARY_NAME_MAX)
        summary = _group_words(group)
        if summary is None:
            nothing.append(name)
        else:
            said.setdefault(summary, []).append(name)
    lines = [SUMMARY_HEADER]
    for (words, first), names in said.items():
        lines += _wrapped(f"{', '.join(names)}: {words}", ENTRY_LINES)
        if first is not None:
            lines += _wrapped(first, REASON_LINES, indent="    ")
    if nothing:
        lines += _wrapped("not detected: " + ", ".join(nothing), ENTRY_LINES)
    if dry_run:
        lines.append(DRY_RUN_LINE)
    elif report.runtime is not None and report.runtime.emitted:
        why = report.runtime.reason or "the runtime resolution gave no reason"
        lines += _wrapped(f"container steps emitted, not run: {why}", STEPS_LINES)
    lines.append(_exit_line(len(report.failures())))
    return lines


def _group_words(group: Group) -> tuple[str, str | None] | None:
    """One manufacturer's summary -- its words and, when an answer is unavailable, the first one's
    reason -- or ``None`` when nothing of it was detected (the one line that names them all)."""
    from gpustack_operator.preflight.models import State  # noqa: PLC0415

    det = group.detection
    checks = group.checks or []
    unavailable = [f"detection: {det.reason}"] if det.state is State.UNAVAILABLE else []
    unavailable += [f"{c.capability} on {c.accelerator}: {c.reason}" for c in checks if c.state is State.UNAVAILABLE]
    if det.state is State.NOT_DECLARED and not det.accelerators and not checks:
        return None
    found = f"{det.accelerators} accelerator{'' if det.accelerators == 1 else 's'}"
    if det.detail:
        found += f" ({_short(det.detail, SUMMARY_NAME_MAX)})"
    if unavailable:
        n = len(unavailable)
        answers = "1 unavailable answer:" if n == 1 else f"{n} unavailable answers, the first:"
        return f"unavailable; {found}; {answers}", unavailable[0]
    counted = ", ".join(f"{n} {state.value}" for state in State if (n := sum(c.state is state for c in checks)))
    return f"{det.state.value}; {found}" + (f"; rows: {counted}" if counted else ""), None


def _exit_line(failures: int) -> str:
    if not failures:
        return "  exit 0: no accelerator answer is unavailable (network and topology never fail a run)"
    verb = "answers are" if failures > 1 else "answer is"
    return f"  exit 1: {failures} accelerator {verb} unavailable; every one is in the document"


def _wrapped(text: str, max_lines: int, indent: str = "  ") -> list[str]:
    """``text`` made printable and wrapped at :data:`SUMMARY_WIDTH`, continued two columns further in,
    in at most ``max_lines`` lines; what does not fit ends in `` ...`` (the document holds it whole)."""
    shown = _short(text, SUMMARY_WIDTH * max_lines)  # more than fits: textwrap's placeholder marks the cut
    return textwrap.wrap(
        shown,
        width=SUMMARY_WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        max_lines=max_lines,
        placeholder=" ...",
        break_on_hyphens=False,
    )


def _printable(text: str) -> str:
    """Host text on one line: runs of whitespace (newlines among them) one space, any other character
    that is not printable (an escape sequence, a lone surrogate) written as its escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))


def _short(text: str, limit: int) -> str:
    """:func:`_printable` of ``text``, at most ``limit`` long and ending in ``...`` where it was cut;
    only the head that can be shown is looked at (a 64 KiB reason costs no more than a short one)."""
    head = text[: 2 * limit]  # collapsed whitespace can shorten it, escapes only lengthen it
    shown = _printable(head) + (" ..." if len(head) < len(text) else "")
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _progress() -> Callable[[str], None]:
    """Long steps on stderr (which probe, which accelerator, elapsed since the run began); the YAML
    document alone goes to stdout."""
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"gpustack-operator: preflight: [{time.monotonic() - start:6.1f}s] {text}", file=sys.stderr, flush=True)

    return say


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
