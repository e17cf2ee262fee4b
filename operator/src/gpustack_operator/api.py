"""The public functions the CLI and the Ansible modules share (one entry, no logic duplicated)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_operator.discovery.detect import (
    NodeDetection,
    detect_document,
    facts_document,
    monitor_document,
    monitor_node,
    resolve_manufacturers,
)
from gpustack_operator.discovery.isolate import isolated_detect, isolated_monitor
from gpustack_operator.host import HostRoot, HostRootError
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import parse_manufacturers
from gpustack_operator.manufacturers.base import (
    DetectContext,
    ModeChange,
    ModeError,
    ModeState,
    Resolved,
    Unmeasured,
)
from gpustack_operator.settings import Settings, load_settings

if TYPE_CHECKING:
    # imported by run_preflight itself: detect and the modules that only detect never load preflight
    from gpustack_operator.preflight.models import Report

# The driver-mode functions import manufacturers.modes (and the pod records) themselves, for the same
# reason: a detect pass never reads or sets a mode.

CONTAINER_HOST_ROOT = "/host"
NODE_VIEW = "/"


class RootArgumentError(ValueError):
    """A root option that names no directory (empty, blank, a NUL byte): a usage error naming it."""


def check_root(value: str | None, what: str) -> str | None:
    """``None`` stays ``None`` (the caller's default applies); an empty or blank path, or one with a
    NUL byte, is refused naming the option -- never read as ``/`` or as the current directory."""
    if value is None:
        return None
    if not value.strip():
        raise RootArgumentError(f"{what} is empty: name the directory it is mounted at (e.g. / or /host)")
    if "\0" in value:
        raise RootArgumentError(f"{what} {value!r} holds a NUL byte, so it names no directory")
    return value


def default_host_root() -> str:
    """For the Ansible modules, which run on the node: ``/host`` when the node's root is mounted
    there (the container shape), else ``/``. Both of their contexts are this one root.

    A directory merely named ``/host`` does not count: it must look like a root (``proc``, ``sys``).
    Preflight's own ``--host-root`` has no such fallback (see :func:`run_preflight`).
    """
    candidate = Path(CONTAINER_HOST_ROOT)
    if (candidate / "proc").is_dir() and (candidate / "sys").is_dir():
        return CONTAINER_HOST_ROOT
    return NODE_VIEW


@dataclass(frozen=True)
class Request:
    """What a caller asked for. ``root`` is the node view the detect pass reads (``/``: this
    process's own ``/sys``, ``/dev`` and vendor-library mounts; a fixture tree in tests)."""

    root: str
    manufacturers: list[str]
    settings: Settings
    resolved: dict[str, Resolved]
    no_pci_check: bool = False

    @property
    def host_root(self) -> str:
        """Where a command that runs on the node itself (``detect``, ``mode``, the modules) finds the
        node's files: the same root as the view."""
        return self.root


def make_request(
    root: str | None,
    manufacturers: list[str] | None,
    settings: Settings | None = None,
    *,
    no_pci_check: bool = False,
) -> Request:
    """Validate what a caller asked for. Raises ``UnknownManufacturerError`` / ``SettingsError`` /
    :class:`RootArgumentError`. ``root`` defaults to ``/``, the process's own view of the node."""
    names = parse_manufacturers(manufacturers)
    return Request(
        root=check_root(root, "the node view (--detect-root)") or NODE_VIEW,
        manufacturers=names,
        settings=settings or load_settings(),
        resolved=resolve_manufacturers(names),
        no_pci_check=no_pci_check,
    )


def run_detect(req: Request, *, interfaces: bool = True) -> NodeDetection:
    """One detection pass (``interfaces=False``: without the network inventory), each manufacturer's
    vendor code in a child process of its own (``discovery/isolate.py``: a library that kills its
    process leaves that manufacturer unmeasured, naming the library and the signal). What ``detect``,
    ``serve``, ``mode`` and the modules detect with. Raises ``HostRootError`` when the host root is
    unusable."""
    return isolated_detect(HostRoot(req.root), req.resolved, req.settings, req.no_pci_check, interfaces=interfaces)


def detect(req: Request) -> dict[str, object]:
    """The ``device-manager detect`` document."""
    return detect_document(run_detect(req))


def facts(req: Request) -> dict[str, object]:
    """The ``accelerator_facts`` document (:func:`facts_document`). Raises ``HostRootError``."""
    return facts_document(run_detect(req))


def run_preflight(
    req: Request,
    dry_run: bool = False,
    runtime: str | None = None,
    probe_image: str | None = None,
    *,
    host_root: str | None = CONTAINER_HOST_ROOT,
    capabilities: bool = True,
    preload_source: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """The preflight report: question 1, and (``capabilities``, the default) questions 2 and 3
    (preflight/capability.py: driver-read rows, the synthetic allocation through the allocator's own
    responder, the probes; the lock, the stale sweep and the library staging around them).
    ``preload_source`` is the preload-library tree staging copies from (``--preload-source``; default the
    image's /opt/gpustack/lib); ``progress`` receives one line per long step. Never raises for what the node holds: an
    unusable node view is every manufacturer ``unavailable`` with the reason, and the document is still produced.

    Two contexts, as in production: the detect pass reads ``req.root`` (the node as this container
    sees it); ``host_root`` (``--host-root``, default ``/host``) is entered only for the host's own
    vendor CLI, the kubelet's files and the runtime. There is no fallback to ``/``: a host root that
    is absent or does not look like one (no ``/etc``) means the host cross-check is not asked, the
    topology section says it was never looked for and every container step is emitted, each naming
    why -- and the run carries on as a dry run, writing nothing, no driver mode included
    (preflight/run.py ``withheld``). ``host_root=None`` runs without one at all.

    ``runtime`` (``--runtime``: docker, nerdctl or ctr) overrides the runtime resolved from the
    kubelet; ``probe_image`` (``--probe-image``) is validated as an OCI image reference. Both are
    checked before the pass: a bad value raises ``RuntimeChoiceError`` / ``ImageRefError`` (both
    ``ValueError``, a usage error naming the problem), as does an empty ``host_root``
    (:class:`RootArgumentError`). The resolution travels on the report (``report.runtime``,
    ``report.probe_image``) and stays out of its document (``wire()``).
    """
    # preflight's modules load here, not with the api: detect (accelerator_facts) never pays for them
    from gpustack_operator.preflight.run import HostContext, preflight, unusable_root_report  # noqa: PLC0415
    from gpustack_operator.preflight.runtime import parse_runtime_name  # noqa: PLC0415
    from gpustack_operator.preflight.staging import DEFAULT_SOURCE  # noqa: PLC0415

    wanted = parse_runtime_name(runtime)
    image = None
    if probe_image is not None:  # the reference parser loads only for a reference to parse
        from gpustack_operator.preflight.imageref import parse_image_ref  # noqa: PLC0415

        image = parse_image_ref(probe_image)
    checked = check_root(host_root, "the host root (--host-root)") if host_root is not None else None
    host = HostContext.enter(checked) if checked is not None else None
    try:
        view = HostRoot(req.root)
    except HostRootError as exc:
        return unusable_root_report(req.manufacturers, str(exc), host, runtime=wanted, probe_image=image)
    result = isolated_detect(view, req.resolved, req.settings, req.no_pci_check)
    return preflight(
        result,
        host,
        runtime=wanted,
        probe_image=image,
        view=view,
        settings=req.settings if capabilities else None,
        dry_run=dry_run,
        preload_source=preload_source or image_tree(view, DEFAULT_SOURCE),
        progress=progress,
    )


def image_tree(view: HostRoot, path: str) -> str:
    """The operator image's preload tree in the container's own view (the node view the detect pass
    reads: ``/`` in production); a path that cannot be resolved inside it names the view's lexical
    path, which staging then reports as absent."""
    try:
        return str(view.path(path))
    except Exception:  # a hostile view (a loop, an escaping link) is staging's "not there"
        return str(view.root / path.lstrip("/"))


def monitor(req: Request) -> dict[str, object]:
    """The ``device-manager monitor`` document, each manufacturer sampled in a child process of its
    own (as :func:`run_detect`). Raises ``HostRootError``."""
    return monitor_document(monitor_node(HostRoot(req.root), req.resolved, req.settings, sampler=isolated_monitor))


def _mode_context(req: Request, manufacturer: str) -> tuple[DetectContext, list[DevicesGroup]]:
    """Detect ``manufacturer`` and build the context its mode driver reads through."""
    from gpustack_operator.manufacturers.modes import ModeUsageError  # noqa: PLC0415

    if manufacturer not in req.resolved:
        raise ModeUsageError(f"{manufacturer} was not asked about in this request")
    host = HostRoot(req.root)
    result = isolated_detect(host, {manufacturer: req.resolved[manufacturer]}, req.settings, interfaces=False)
    outcome = result.outcomes[manufacturer]
    if isinstance(outcome, Unmeasured):
        raise ModeError("all", "detection", f"{manufacturer} could not be measured: {outcome.reason}")
    ctx = DetectContext(view=host, pci=result.pci, settings=req.settings, manufacturer=req.resolved[manufacturer])
    return ctx, outcome.groups


def read_modes(req: Request, manufacturer: str, mode: str) -> list[ModeState]:
    """The mode as read on every accelerator of ``manufacturer``."""
    from gpustack_operator.manufacturers.modes import driver_for  # noqa: PLC0415

    driver = driver_for(manufacturer, mode)
    ctx, groups = _mode_context(req, manufacturer)
    return driver.read(ctx, groups)


def select_modes(states: list[ModeState], accelerator: str | list[str]) -> list[ModeState]:
    """``all``, a driver index or an accelerator id → the matching states (``ModeUsageError``)."""
    from gpustack_operator.manufacturers.modes import select  # noqa: PLC0415

    return select(states, accelerator)


def set_mode(
    req: Request,
    manufacturer: str,
    mode: str,
    accelerator: str | list[str],
    enabled: bool,
    *,
    dry_run: bool = False,
    force: bool = False,
) -> list[ModeChange]:
    """Converge the mode on ``accelerator`` (``all``, an index or an id); idempotent. Turning a mode
    off under pods that hold slices raises ``SlicesHeldError`` unless ``force``."""
    from gpustack_operator.manufacturers.modes import converge, driver_for  # noqa: PLC0415

    driver = driver_for(manufacturer, mode)
    ctx, groups = _mode_context(req, manufacturer)
    return converge(ctx, driver, groups, accelerator, enabled, dry_run=dry_run, force=force)
