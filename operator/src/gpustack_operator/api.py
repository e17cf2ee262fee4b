"""The public functions the CLI and the Ansible modules share (one entry, no logic duplicated)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_operator.discovery.detect import (
    NodeDetection,
    detect_document,
    detect_node,
    facts_document,
    monitor_document,
    monitor_node,
    resolve_manufacturers,
)
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
from gpustack_operator.manufacturers.modes import ModeUsageError, converge, driver_for, select
from gpustack_operator.settings import Settings, load_settings

if TYPE_CHECKING:
    # imported by run_preflight itself: detect and the modules that only detect never load preflight
    from gpustack_operator.preflight.models import Report

CONTAINER_HOST_ROOT = "/host"


def default_host_root() -> str:
    """``/host`` when the node's root is mounted there (the container shape), else ``/``.

    A directory merely named ``/host`` does not count: it must look like a root (``proc``, ``sys``).
    """
    candidate = Path(CONTAINER_HOST_ROOT)
    if (candidate / "proc").is_dir() and (candidate / "sys").is_dir():
        return CONTAINER_HOST_ROOT
    return "/"


@dataclass(frozen=True)
class Request:
    host_root: str
    manufacturers: list[str]
    settings: Settings
    resolved: dict[str, Resolved]
    no_pci_check: bool = False


def make_request(
    host_root: str | None,
    manufacturers: list[str] | None,
    settings: Settings | None = None,
    *,
    no_pci_check: bool = False,
) -> Request:
    """Validate what a caller asked for. Raises ``UnknownManufacturerError`` / ``SettingsError``."""
    names = parse_manufacturers(manufacturers)
    return Request(
        host_root=host_root or default_host_root(),
        manufacturers=names,
        settings=settings or load_settings(),
        resolved=resolve_manufacturers(names),
        no_pci_check=no_pci_check,
    )


def run_detect(req: Request, *, interfaces: bool = True) -> NodeDetection:
    """One detection pass (``interfaces=False``: without the network inventory). Raises
    ``HostRootError`` when the host root is unusable."""
    return detect_node(HostRoot(req.host_root), req.resolved, req.settings, req.no_pci_check, interfaces=interfaces)


def detect(req: Request) -> dict[str, object]:
    """The ``device-manager detect`` document."""
    return detect_document(run_detect(req))


def facts(req: Request) -> dict[str, object]:
    """The ``accelerator_facts`` document (:func:`facts_document`). Raises ``HostRootError``."""
    return facts_document(run_detect(req))


def run_preflight(
    req: Request, dry_run: bool = False, runtime: str | None = None, probe_image: str | None = None
) -> Report:
    """The preflight report. Never raises for what the host holds: an unusable host root is every
    manufacturer ``unavailable`` with the reason, and the document is still produced.

    ``runtime`` (``--runtime``: docker, nerdctl or ctr) overrides the runtime resolved from the
    kubelet; ``probe_image`` (``--probe-image``) is validated as an OCI image reference. Both are
    checked before the pass: a bad value raises ``RuntimeChoiceError`` / ``ImageRefError`` (both
    ``ValueError``, a usage error naming the problem). The resolution travels on the report
    (``report.runtime``, ``report.probe_image``) and stays out of its document (``wire()``).
    """
    # preflight's modules load here, not with the api: detect (accelerator_facts) never pays for them
    from gpustack_operator.preflight.hostexec import HostExec  # noqa: PLC0415
    from gpustack_operator.preflight.imageref import parse_image_ref  # noqa: PLC0415
    from gpustack_operator.preflight.run import preflight, unusable_root_report  # noqa: PLC0415
    from gpustack_operator.preflight.runtime import parse_runtime_name  # noqa: PLC0415

    wanted = parse_runtime_name(runtime)
    image = parse_image_ref(probe_image) if probe_image is not None else None
    del dry_run  # nothing this version does writes to the host or starts a container
    try:
        host = HostRoot(req.host_root)
    except HostRootError as exc:
        return unusable_root_report(req.manufacturers, str(exc), runtime=wanted, probe_image=image)
    result = detect_node(host, req.resolved, req.settings, req.no_pci_check)
    return preflight(result, HostExec(str(host.root)), root=host, runtime=wanted, probe_image=image)


def monitor(req: Request) -> dict[str, object]:
    """The ``device-manager monitor`` document. Raises ``HostRootError``."""
    return monitor_document(monitor_node(HostRoot(req.host_root), req.resolved, req.settings))


def _mode_context(req: Request, manufacturer: str) -> tuple[DetectContext, list[DevicesGroup]]:
    """Detect ``manufacturer`` and build the context its mode driver reads through."""
    if manufacturer not in req.resolved:
        raise ModeUsageError(f"{manufacturer} was not asked about in this request")
    host = HostRoot(req.host_root)
    result = detect_node(host, {manufacturer: req.resolved[manufacturer]}, req.settings, interfaces=False)
    outcome = result.outcomes[manufacturer]
    if isinstance(outcome, Unmeasured):
        raise ModeError("all", "detection", f"{manufacturer} could not be measured: {outcome.reason}")
    ctx = DetectContext(view=host, pci=result.pci, settings=req.settings, manufacturer=req.resolved[manufacturer])
    return ctx, outcome.groups


def read_modes(req: Request, manufacturer: str, mode: str) -> list[ModeState]:
    """The mode as read on every accelerator of ``manufacturer``."""
    driver = driver_for(manufacturer, mode)
    ctx, groups = _mode_context(req, manufacturer)
    return driver.read(ctx, groups)


def select_modes(states: list[ModeState], accelerator: str | list[str]) -> list[ModeState]:
    """``all``, a driver index or an accelerator id → the matching states (``ModeUsageError``)."""
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
    driver = driver_for(manufacturer, mode)
    ctx, groups = _mode_context(req, manufacturer)
    return converge(ctx, driver, groups, accelerator, enabled, dry_run=dry_run, force=force)
