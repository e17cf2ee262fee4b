"""``gpustack-operator`` — the single command-line entry point."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

import yaml

from gpustack_operator import __version__, api
from gpustack_operator.discovery.detect import detect_document
from gpustack_operator.host import HostRootError
from gpustack_operator.manufacturers import NAMES, UnknownManufacturerError
from gpustack_operator.manufacturers.base import ModeError
from gpustack_operator.manufacturers.modes import ModeUsageError
from gpustack_operator.settings import SettingsError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host-root",
        metavar="PATH",
        help="where the node's / is mounted (default: /host when the node's root is mounted there, otherwise /)",
    )
    p.add_argument(
        "--manufacturer",
        action="append",
        metavar="M",
        help=f"manufacturer(s) to ask about, repeatable or comma-separated; one of {', '.join(NAMES)} "
        "(default: all nine)",
    )
    p.add_argument("--no-pci-check", action="store_true", help="skip the detect pass's PCI check")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more to stderr (-v, -vv)")


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

    mon = sub.add_parser(
        "monitor",
        help="what the accelerators are doing right now (one usage sample, a pure read)",
        description="Take one usage sample per manufacturer: memory used, utilisation, temperature and "
        "power where the vendor reports them. A manufacturer that could not be measured is named under "
        "'unmeasured', never dropped.",
    )
    _add_common(mon)
    mon.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="output format")

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
    mode.add_argument("--host-root", metavar="PATH", help="where the node's / is mounted")
    mode.add_argument("-v", "--verbose", action="count", default=0)

    pre = sub.add_parser(
        "preflight",
        help="which accelerators this node can serve (exit 1 only for an unavailable answer)",
        description="Answer, per manufacturer, whether its devices are detected; print one YAML "
        "document. Exits 1 only when an answer is unavailable.",
    )
    _add_common(pre)
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
        help="image for probe containers, [registry[:port]/]path[:tag][@sha256:<hex>] (recorded and "
        "validated; this version starts no probe container)",
    )
    return parser


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


def _dump_yaml(doc: object) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _emit(doc: object, output: str) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if output == "json" else _dump_yaml(doc))


def _mode(req: api.Request, args: argparse.Namespace) -> int:
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
        else:
            states = api.read_modes(req, manufacturer, args.mode)
            _emit({"modes": [s.model_dump(exclude_none=True) for s in states]}, "yaml")
    except ModeUsageError as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ModeError, HostRootError) as exc:
        print(f"gpustack-operator: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        manufacturers = [args.manufacturer] if args.action == "mode" else args.manufacturer
        req = api.make_request(args.host_root, manufacturers, no_pci_check=getattr(args, "no_pci_check", False))
    except (UnknownManufacturerError, SettingsError) as exc:
        parser.exit(EXIT_USAGE, f"gpustack-operator: error: {exc}\n")

    if args.action == "detect":
        try:
            result = api.run_detect(req)
        except HostRootError as exc:
            print(f"gpustack-operator: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        _emit(detect_document(result), args.output)
        for manufacturer, reason in sorted(result.unmeasured.items()):
            print(f"gpustack-operator: {manufacturer} could not be measured: {reason}", file=sys.stderr)
        return EXIT_FAILED if result.unmeasured else EXIT_OK

    if args.action == "mode":
        return _mode(req, args)

    if args.action == "monitor":
        try:
            mdoc = api.monitor(req)
        except HostRootError as exc:
            print(f"gpustack-operator: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        _emit(mdoc, args.output)
        unmeasured = mdoc.get("unmeasured") or {}
        assert isinstance(unmeasured, dict)
        for manufacturer, reason in sorted(unmeasured.items()):
            print(f"gpustack-operator: {manufacturer} could not be measured: {reason}", file=sys.stderr)
        return EXIT_OK

    try:
        report = api.run_preflight(req, dry_run=args.dry_run, runtime=args.runtime, probe_image=args.probe_image)
    except ValueError as exc:  # RuntimeChoiceError / ImageRefError; argparse has already refused both
        parser.exit(EXIT_USAGE, f"gpustack-operator: error: {exc}\n")
    sys.stdout.write(_dump_yaml(report.wire()))
    failures = report.failures()
    for failure in failures:
        print(f"gpustack-operator: preflight: {failure}", file=sys.stderr)
    return EXIT_FAILED if failures else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
