"""Question 1's cross-check: ask the host's own vendor CLI what it sees.

From inside a container with no device mounts, "this machine has no accelerators" and "this machine
has eight you cannot reach" are the same sentence; the host's own CLI answers with no ``/dev`` mount
in this process at all, which separates them.
"""

from __future__ import annotations

import os

from gpustack_operator.manufacturers.base import HostCli
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.models import Detection, HostView, State


def count_matching_lines(output: str, match: str) -> int:
    """Accelerators are counted by the lines carrying the CLI's per-accelerator marker (counting
    bare lines would count the header rules these tools draw)."""
    return sum(1 for line in output.splitlines() if match in line)


def absent_here(mounts: tuple[str, ...]) -> list[str]:
    """Keep only what this process really lacks: path-shaped entries that exist are dropped (a remedy
    naming a mount that is already there sends the reader to fix what is not broken); sentences are
    always kept, since nothing here can establish whether they hold."""
    return [m for m in mounts if not (m.startswith("/") and " " not in m and os.path.exists(m))]


def unresolvable_lib_dir(lib_dir: str | None) -> str | None:
    """A library directory that is here yet dangles: name the link target and the mount that fixes it."""
    if not lib_dir or not os.path.lexists(lib_dir) or os.path.exists(lib_dir):
        return None
    try:
        target = os.readlink(lib_dir)
    except OSError:
        return None
    return (
        f"{lib_dir} is mounted but does not resolve: it links to {target}, which is not in this "
        f"container -- mount {lib_dir} itself, which resolves the link on the host"
    )


def cross_check(host: HostExec, cli: HostCli, detection: Detection) -> Detection:
    """Attach the host's view; turn the detection ``unavailable`` when the host sees more.

    The discrepancy runs one way only: the host seeing fewer is not a bring-up mistake (the CLI may
    list differently, or be missing where the driver is fine). Partial visibility counts the same as
    none. A detection that already failed keeps its own reason.
    """
    view = read_host_view(host, cli)
    if view.accelerators <= detection.accelerators:
        return detection.model_copy(update={"host": view})
    missing = absent_here(cli.mounts)
    note = unresolvable_lib_dir(cli.lib_dir)
    if note:
        missing.append(note)
    view = view.model_copy(update={"missing_mounts": missing})
    if detection.state is State.UNAVAILABLE:
        return detection.model_copy(update={"host": view})
    reason = (
        f"the host's own {cli.name} reports {view.accelerators} accelerator(s) where this container "
        f"detected {detection.accelerators}, so what is missing is this container's access to them "
        "rather than the hardware"
    )
    return detection.model_copy(update={"host": view, "state": State.UNAVAILABLE, "detail": None, "reason": reason})


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
    return HostView(
        command=command, accelerators=count_matching_lines(output, cli.match), detail=output.strip() or None
    )
