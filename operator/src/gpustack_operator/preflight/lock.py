"""One preflight per node: the run lock (supplement §2.5 host writes, §2.8 "Only one preflight runs on a
node at a time").

Why: every probe container carries the same label, so a second run's stale-container sweep would
remove the first run's live probes, and an accelerator whose probe was killed mid-measurement reports
as unable to slice. A second run therefore refuses *before it sweeps anything* -- and before it stages
a library tree or asks a driver mode on, which would change what the first run is measuring: the lock
is taken by every run that writes to the node, not only by one that starts a probe
(``preflight/run.py``: ``will_write``), and by none that writes nothing (``--dry-run``, no host root).

API (what ``preflight/run.py`` wires)::

    try:
        held = acquire(host.root)            # before any write; not by a run that writes nothing
    except LockHeldError as exc:             # another run holds it
        ...every manufacturer unavailable, reason str(exc); exit non-zero
    except LockUnusableError as exc:         # the host root cannot carry the lock (read-only, ...)
        ...the same refusal, reason str(exc)
    # ... sweep, probes ...
    held.release()                           # optional: the kernel releases it at exit anyway

* :func:`acquire` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on :data:`LOCK_PATH` under the host root
  (``<host root>/var/lib/gpustack/operator/preflight/lock``, resolved inside the root like every host
  path), creating the file and its parents when absent. The lock is the open file description's: it
  is held for as long as the process keeps the fd open and released by the kernel when the process
  exits, however it exits (SIGKILL included) -- so a killed run never leaves a stale lock to clean up.
  The fd is ``O_CLOEXEC``, so a container CLI the run starts never inherits (and outlives with) it.
  Two preflight containers on one node contend because both enter the same host file (``-v /:/host``):
  ``flock`` works on the inode, across mount and PID namespaces.
* The file is **never removed** (§2.5): removing it would let a third run lock a fresh inode while the
  second still holds the old one. :meth:`HeldLock.release` unlocks and closes; nothing unlinks.
  **The responder's rendered files share this directory** (§2.5 row 2, removed at the end of the pass):
  remove those files, never the directory tree, or the lock file goes with it.
* After acquiring, the holder's pid and start time are written into the file (:class:`Holder`). A
  refused run reads them back through its own fd and names them; the record is advisory only (the
  flock is the lock), so a missing or garbled record just leaves the pid out of the message.
* Taking the lock twice in one process also refuses (a new open file description is a new lock owner).

Errors: :class:`LockHeldError` (another run holds it: the message names the lock, the holder's pid and
start time when recorded, and the remedy), :class:`LockUnusableError` (the lock could not be created,
opened or locked: the message names the host path, the errno and the remedy). Both are
:class:`LockError`, whose ``str()`` is the text a refused run puts on its rows.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType

from gpustack_operator.host import HostPathError, HostRoot

LOCK_DIR = "/var/lib/gpustack/operator/preflight"
LOCK_PATH = f"{LOCK_DIR}/lock"
# The holder record is a few dozen bytes; anything past this is not ours and is not read.
RECORD_LIMIT = 4096
MAX_PID = 2**22  # the kernel's PID_MAX_LIMIT

_PID = re.compile(r"pid=([0-9]{1,7})")
_STARTED = re.compile(r"started=([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z)")

WHY = (
    "only one preflight runs on a node at a time, because a second run's stale-container sweep would "
    "remove the first run's live probes"
)


class LockError(Exception):
    """The lock could not be taken; ``str()`` is the reason a refused run reports."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path  # the host path of the lock


@dataclass(frozen=True)
class Holder:
    """What the run holding the lock recorded about itself (advisory)."""

    pid: int | None = None
    started: str | None = None  # UTC, ``YYYY-MM-DDTHH:MM:SSZ``

    def render(self) -> str:
        return f"pid={self.pid}\nstarted={self.started}\n"

    def words(self) -> str:
        parts = [f"pid {self.pid}" if self.pid is not None else None]
        parts.append(f"started {self.started}" if self.started else None)
        said = ", ".join(p for p in parts if p)
        return f"{said}, as it recorded" if said else "it recorded no pid"


def parse_holder(text: str) -> Holder:
    """The holder record read back; never raises -- whatever is not a pid line or a start-time line is
    ignored (the record is advisory, and a half-written or foreign file must not break the refusal)."""
    pid = started = None
    for line in text.splitlines():
        line = line.strip()
        if pid is None and (m := _PID.fullmatch(line)) and 0 < int(m.group(1)) <= MAX_PID:
            pid = int(m.group(1))
        elif started is None and (m := _STARTED.fullmatch(line)):
            started = m.group(1)
    return Holder(pid=pid, started=started)


class LockHeldError(LockError):
    """Another preflight run holds the lock."""

    def __init__(self, path: str, holder: Holder) -> None:
        find = (
            f"find it with its pid (`ps -o pid,lstart,args -p {holder.pid}` where it runs; a run inside a "
            "container records its pid in that container's own PID namespace)"
            if holder.pid is not None
            else "find it with `pgrep -af 'device-manager preflight'` on the node or in its container"
        )
        super().__init__(
            f"another preflight run holds this node's lock {path} ({holder.words()}): {WHY} -- wait for that "
            f"run to finish (the kernel releases the lock when it exits, so nothing needs removing) and run "
            f"this again, or {find}",
            path,
        )
        self.holder = holder


class LockUnusableError(LockError):
    """The lock file could not be created, opened or locked under this host root."""

    def __init__(self, path: str, root: str, err: int, doing: str) -> None:
        name = errno.errorcode.get(err, f"errno {err}")
        where = f" under the host root {root}" if root != "/" else ""
        super().__init__(
            f"the preflight lock {path}{where} could not be {doing}: {name} ({os.strerror(err)}); {WHY}, so "
            "a run that cannot take the lock starts nothing -- mount the node's / writable at the host root "
            "(-v /:/host, not :ro) and make sure /var/lib/gpustack/operator/preflight can be a directory "
            "there, or pass --dry-run, which starts nothing and takes no lock",
            path,
        )
        self.errno = err


@dataclass
class HeldLock:
    """The held lock: the open fd is the lock. Dropping this object does not release it (the fd is a
    plain int); the process exiting does, as does :meth:`release`."""

    path: str  # host path
    disk: str  # the file on disk, under the host root
    fd: int
    holder: Holder
    _released: bool = field(default=False, repr=False)

    @property
    def held(self) -> bool:
        return not self._released

    def release(self) -> None:
        """Unlock and close (idempotent). The file stays."""
        if self._released:
            return
        self._released = True
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def acquire(host: HostRoot) -> HeldLock:
    """Take this node's preflight lock (see the module docstring), or raise :class:`LockHeldError` /
    :class:`LockUnusableError`."""
    root = str(host.root)
    try:
        host.makedirs(LOCK_DIR)
        disk = str(host.path(LOCK_PATH))
    except HostPathError as exc:
        raise LockUnusableError(LOCK_PATH, root, exc.errno or errno.EIO, "created") from None
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the run (it is refused below).
        fd = os.open(disk, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise LockUnusableError(LOCK_PATH, root, exc.errno or errno.EIO, "created") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LockUnusableError(LOCK_PATH, root, errno.EINVAL, "used, as it is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise LockHeldError(LOCK_PATH, read_holder(fd)) from None
            raise LockUnusableError(LOCK_PATH, root, exc.errno or errno.EIO, "locked") from None
    except BaseException:
        os.close(fd)
        raise
    holder = Holder(pid=os.getpid(), started=now())
    record(fd, holder)
    return HeldLock(path=LOCK_PATH, disk=disk, fd=fd, holder=holder)


def record(fd: int, holder: Holder) -> None:
    """Write the holder record over the file's contents; a failure (a full disk) costs only the advice
    a refused run could give, never the lock."""
    data = holder.render().encode()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def read_holder(fd: int) -> Holder:
    """The record the holder wrote, read through our own fd (advisory; unreadable is no record)."""
    try:
        data = os.pread(fd, RECORD_LIMIT, 0)
    except OSError:
        return Holder()
    return parse_holder(data.decode("utf-8", errors="replace"))


__all__ = [
    "LOCK_PATH",
    "HeldLock",
    "Holder",
    "LockError",
    "LockHeldError",
    "LockUnusableError",
    "acquire",
    "parse_holder",
]
