"""Running the host's own tools by entering the host root with ``chroot``.

Preflight's own code never runs in host context: only the host's CLIs do, at their own versions.
On a direct run (host root ``/``) nothing is entered and the command runs as is.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass

from gpustack_operator.host import HostPathError, HostRoot

HOST_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# A host root has to look like one: a path that merely resembles a host root counts as none.
MARKER = "/etc"


def which(host: HostRoot, name: str, *, executable: bool = False) -> str | None:
    """Where the host carries ``name`` on its standard PATH (:data:`HOST_PATH`), read through the
    host root (links resolved inside it), or ``None``. ``executable``: only a regular file with an
    execute bit counts, not any entry of that name."""
    for directory in HOST_PATH:
        path = f"{directory}/{name}"
        if not executable:
            if host.exists(path):
                return path
            continue
        try:
            disk = host.path(path)
        except HostPathError:
            continue
        if disk.is_file() and os.access(disk, os.X_OK):
            return path
    return None


class HostExecError(Exception):
    """The host could not be entered or the command failed; the message is the reason, in words."""


@dataclass(frozen=True)
class HostExec:
    root: str  # "/" for a direct run
    chroot: str = "/usr/sbin/chroot"
    timeout: float = 30.0

    def command(self, name: str, *args: str) -> list[str]:
        """The argv that runs ``name`` as the host: ``chroot <root> name args`` unless root is ``/``."""
        if self.root == "/":
            return [name, *args]
        return [self.chroot, self.root, name, *args]

    def shell(self, name: str, *args: str) -> str:
        """The same command, shell-quoted, for a reader to paste."""
        return shlex.join(self.command(name, *args))

    def validate(self) -> None:
        """Raise :class:`HostExecError` unless the root can be entered (exists, carries ``/etc``)."""
        try:
            host = HostRoot(self.root)
        except Exception as exc:
            raise HostExecError(f"no host root to enter: {exc}") from None
        if not host.is_dir(MARKER):
            raise HostExecError(
                f"no host root to enter: {self.root} carries no {MARKER}, so it is not a node's root "
                "(mount the node's / there, e.g. -v /:/host)"
            )

    def which(self, name: str) -> str | None:
        """Where the host carries ``name`` on its standard PATH, read through the host root."""
        return which(HostRoot(self.root), name)

    def run(self, name: str, *args: str) -> str:
        """Run the host's ``name``; its stdout, or :class:`HostExecError` naming what failed.

        The output is the host tool's, in whatever bytes it prints: it is decoded as UTF-8 with
        undecodable bytes replaced (U+FFFD), so a vendor CLI printing Latin-1 or garbage is read,
        never a ``UnicodeDecodeError``."""
        argv = self.command(name, *args)
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=self.timeout, check=False)
        except OSError as exc:  # no chroot, not executable, ...
            raise HostExecError(f"{argv[0]}: {exc.strerror or exc}") from None
        except subprocess.TimeoutExpired:
            raise HostExecError(f"{name} did not answer within {self.timeout:.0f}s") from None
        stdout = decode(proc.stdout)
        if proc.returncode != 0:
            err = (decode(proc.stderr) or stdout).strip().splitlines()
            tail = err[-1] if err else "no output"
            raise HostExecError(f"{name}: exit status {proc.returncode}: {tail}")
        return stdout


def decode(data: bytes | None) -> str:
    """A host tool's output as text: UTF-8, undecodable bytes replaced."""
    return data.decode("utf-8", errors="replace") if data else ""
