"""Question 1's cross-check: ask the host's own vendor CLI what it sees.

From inside a container with no device mounts, "this machine has no accelerators" and "this machine
has eight you cannot reach" are the same sentence; the host's own CLI answers with no ``/dev`` mount
in this process at all, which separates them.
"""

from __future__ import annotations

from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, DetectOutcome, HostCli, Unmeasured
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.models import Detection, HostView, State


def absent_here(mounts: tuple[str, ...], view: HostRoot | None = None) -> list[str]:
    """Keep only what the node view really lacks: path-shaped entries that exist there are dropped (a
    remedy naming a mount that is already there sends the reader to fix what is not broken);
    sentences are always kept, since nothing here can establish whether they hold."""
    node = view if view is not None else HostRoot("/")
    return [m for m in mounts if not (m.startswith("/") and " " not in m and node.exists(m))]


def unresolvable_lib_dir(lib_dir: str | None, view: HostRoot | None = None) -> str | None:
    """A library directory that is in the view yet dangles: name the link target and the mount that
    fixes it."""
    node = view if view is not None else HostRoot("/")
    if not lib_dir or node.exists(lib_dir):
        return None
    target = node.readlink(lib_dir)
    if target is None:
        return None
    return (
        f"{lib_dir} is mounted but does not resolve: it links to {target}, which is not in this "
        f"container -- mount {lib_dir} itself, which resolves the link on the host"
    )


def cross_check(
    host: HostExec,
    cli: HostCli,
    detection: Detection,
    outcome: DetectOutcome | None = None,
    view: HostRoot | None = None,
) -> Detection:
    """Attach the host's view; turn the detection ``unavailable`` when the host sees more than this
    container can reach.

    The discrepancy runs one way only: the host seeing fewer is not a bring-up mistake (the CLI may
    list differently, or be missing where the driver is fine). Partial visibility counts the same as
    none. Accelerators the container saw but could not identify (``outcome.dropped``) are not a
    visibility gap: when they account for the host's surplus the detection keeps its own reason and
    no mount is blamed. Only a genuine gap -- the host sees accelerators this container does not see
    at all -- names the missing mounts and runtime (those the node view lacks), replacing a
    half-installed reason, since the host's own CLI answering proves the driver is there.
    """
    host_view = read_host_view(host, cli)
    dropped = len(outcome.dropped) if isinstance(outcome, Detected) else 0
    if host_view.accelerators <= detection.accelerators + dropped:
        return detection.model_copy(update={"host": host_view})
    missing = absent_here(cli.mounts, view)
    note = unresolvable_lib_dir(cli.lib_dir, view)
    if note:
        missing.append(note)
    host_view = host_view.model_copy(update={"missing_mounts": missing})
    if isinstance(outcome, Unmeasured):
        return detection.model_copy(update={"host": host_view})
    seen = detection.accelerators + dropped
    reason = (
        f"the host's own {cli.name} reports {host_view.accelerators} accelerator(s) where this container "
        f"detected {seen}, so what is missing is this container's access to them rather than the hardware"
    )
    driver = outcome.driver if isinstance(outcome, Detected) else None
    if driver:
        reason += f" (this container's library said: {driver})"
    if missing:
        reason += "; give it: " + "; ".join(missing)
    if dropped and detection.reason:
        reason += f"; besides: {detection.reason}"
    return detection.model_copy(
        update={"host": host_view, "state": State.UNAVAILABLE, "detail": None, "reason": reason}
    )


def read_host_view(host: HostExec, cli: HostCli) -> HostView:
    """What the host's CLI answers, or why it could not be asked (no root, no CLI, CLI failed)."""
    command = host.shell(cli.name, *cli.args)
    try:
        host.validate()
        if host.which(cli.name) is None:
            return HostView(
                command=command, reason=f"the host carries no {cli.name}, so it cannot be asked what it sees"
            )
        output = host.run(cli.name, *cli.args)
    except HostExecError as exc:
        return HostView(command=command, reason=str(exc))
    # The vendor's own parser counts in the detector's unit (physical GPU, DCMI chip, KFD node); what
    # it could not read is the reason beside the count, never a silent zero.
    listing = cli.count(output)
    return HostView(
        command=command, accelerators=listing.accelerators, detail=output.strip() or None, reason=listing.problem
    )
