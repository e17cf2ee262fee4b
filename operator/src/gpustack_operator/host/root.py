"""The host root: every read of the node goes through it.

A detection runs in one of three places: directly on a node (root ``/``), inside the Device Manager
container with the node's filesystem bind-mounted at ``/host``, or in a test against a fixture tree.
In all three the code asks for *host* paths (``/sys/bus/pci/devices``) and this class maps them onto
the tree, resolving each component the way the kernel would inside a ``chroot`` to that tree:

* a relative symlink is followed from the directory that holds it (sysfs is made of them:
  ``/sys/bus/pci/devices/<bdf>`` points at ``../../../devices/pci0000:00/...``);
* an absolute symlink target is re-rooted at the host root, never at the machine running the check;
* ``..`` at the root stays at the root, so no path or link can escape the tree;
* more than 40 links in one walk is ``ELOOP``, as in the kernel.

Reads are capped (sysfs files are small; the spec caps interface reads at 64 KiB) so a garbled or
hostile file cannot exhaust memory. Every read opens the resolved file non-blocking, without following
a link and close-on-exec, and refuses anything ``fstat`` does not call a regular file: a FIFO planted
where ``/proc/cpuinfo`` or a configuration file is expected would otherwise block the open (and the
pass, or the allocation lock held around it) until a writer appears, and a character device would be
read as if it were the file. sysfs and procfs attributes are regular files, so nothing real is lost.
This is the one guarded reader: code that reads a host file goes through :meth:`HostRoot.read_bytes`,
:meth:`HostRoot.read_text` or :meth:`HostRoot.read_optional`, never ``open()``.

A ``HostRoot`` is a view for one pass: it remembers what each path component is (file, directory or
link and its target), because a detection pass resolves the same sysfs prefixes thousands of times.
Create a new one per pass (the detection loop does) so a changed tree is seen.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections import deque
from pathlib import Path

MAX_SYMLINKS = 40
DEFAULT_READ_LIMIT = 64 * 1024
_CHUNK = 64 * 1024
# The last component is resolved already (canonical()), so a link there now is one planted since: refused.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
# O_TRUNC as a shell's "echo 1 > attr" opens it (sysfs ignores it; a regular file keeps no stale tail).
_ATTRIBUTE_FLAGS = os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class HostRootError(Exception):
    """The host root itself is unusable (missing, not a directory)."""


class HostPathError(OSError):
    """A host path could not be resolved or read; carries the host path and the OS reason."""

    def __init__(self, host_path: str, err: int, reason: str | None = None) -> None:
        super().__init__(err, reason or os.strerror(err))
        self.host_path = host_path

    def __str__(self) -> str:
        return f"{self.host_path}: {self.strerror}"


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words: ``"a FIFO (named pipe)"``, ``"a directory"``, ..."""
    for test, words in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return words
    return "a special file"


def not_regular(host_path: str, mode: int) -> HostPathError:
    """The error for a host path that is there but is no regular file, naming what it is: a directory
    is the kernel's own ``EISDIR`` ("Is a directory", as reading one always said); anything else is
    ``EINVAL`` with the kind of file in words."""
    if stat.S_ISDIR(mode):
        return HostPathError(host_path, errno.EISDIR)
    return HostPathError(
        host_path,
        errno.EINVAL,
        f"{file_kind(mode)}, not a regular file, so it was not read (replace it with the file expected there)",
    )


# Named for every caller: the CLI flag, the modules' option and the inventory variable behind it.
REMEDY = (
    "point the host root (--host-root; in Ansible the host_root option or the gpustack_host_root "
    "inventory variable) at the directory the node's / is mounted at"
)


class HostRoot:
    """A node's filesystem, rooted at ``root`` (``/`` on the node itself)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        path = Path(root)
        try:
            st = path.stat()
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte or an unencodable name
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise HostRootError(f"host root {str(root)!r} cannot be used: {why}; " + REMEDY) from exc
        if not stat.S_ISDIR(st.st_mode):
            raise HostRootError(f"host root {str(root)!r} is not a directory; " + REMEDY)
        self.root = path.resolve()
        self._root_str = str(self.root).rstrip("/")
        # disk path -> link target (None when the component is not a symlink); absent entries raise
        self._lstat: dict[str, str | None] = {}
        # host path -> (components, links followed) where a walk of it ended with nothing absent: the
        # walk of "<it>/<name>" takes it up there (a pass reads thousands of files under a few dozen
        # resolved sysfs directories). Every component of such a walk is in _lstat already, so this
        # gives exactly what walking again would.
        self._walked: dict[str, tuple[tuple[str, ...], int]] = {}

    def __repr__(self) -> str:
        return f"HostRoot({str(self.root)!r})"

    @property
    def is_live(self) -> bool:
        """True when the root is this machine's own ``/``."""
        return self.root == Path("/")

    # -- resolution ----------------------------------------------------------------------------

    def canonical(self, host_path: str) -> str:
        """The host path with every symlink resolved, e.g. ``/sys/devices/pci0000:00/0000:00:01.0``.

        Components that do not exist are kept as given, so the result can be used to report what was
        looked for. Raises :class:`HostPathError` (``ELOOP``) on a symlink loop, and (``EINVAL``) on a
        path no filesystem can hold: a NUL byte, or a name the filesystem encoding cannot spell.
        """
        if "\x00" in host_path:
            raise HostPathError(host_path, errno.EINVAL, "the path holds a NUL byte")
        try:
            os.fsencode(host_path)
        except UnicodeEncodeError:  # a lone surrogate that is no escaped byte ("\ud800")
            raise HostPathError(host_path, errno.EINVAL, "the path is not encodable as a file name") from None
        parts, pending, links = self._resume(host_path)
        absent_at = 0  # len(parts) when parts[-1] was found absent; nothing below it can exist
        absent: set[str] = set()  # this walk's absent paths ("a/../a/../..." looks each up once)
        while pending:
            comp = pending.popleft()
            if comp in ("", "."):
                continue
            if comp == "..":
                if parts:
                    parts.pop()
                if len(parts) < absent_at:
                    absent_at = 0
                continue
            parts.append(comp)
            if absent_at:
                continue  # no lstat per component of a long absent path (quadratic in its length)
            disk = self._root_str + "/" + "/".join(parts)
            try:
                if disk in absent:
                    raise FileNotFoundError(errno.ENOENT, disk)
                target = self._link_target(disk)
            except FileNotFoundError:
                absent.add(disk)
                absent_at = len(parts)
                continue
            except NotADirectoryError:
                raise HostPathError(host_path, errno.ENOTDIR) from None
            except OSError as exc:
                raise HostPathError(host_path, exc.errno or errno.EIO) from None
            if target is None:
                continue
            parts.pop()
            links += 1
            if links > MAX_SYMLINKS:
                raise HostPathError(host_path, errno.ELOOP)
            if target.startswith("/"):
                parts = []
            pending.extendleft(reversed(_split(target)))
        resolved = "/" + "/".join(parts)
        if not absent:
            self._remember(host_path, resolved, parts, links)
        return resolved

    def _resume(self, host_path: str) -> tuple[list[str], deque[str], int]:
        """Where the walk of ``host_path`` starts (components, pending, links followed): from the
        root, or where the walk of its parent ended -- the state the whole walk reaches once past the
        parent's components."""
        parent, sep, name = host_path.rpartition("/")
        walked = self._walked.get(parent) if sep and name not in ("", ".", "..") else None
        if walked is None:
            return [], deque(_split(host_path)), 0
        return list(walked[0]), deque((name,)), walked[1]

    def _remember(self, host_path: str, resolved: str, parts: list[str], links: int) -> None:
        """Record a walk that found nothing absent, under the path asked for and under the path it
        resolved to (walking that one follows no link: each of its components is a known non-link)."""
        known = tuple(parts)
        self._walked[host_path] = (known, links)
        self._walked.setdefault(resolved, (known, 0))

    def _link_target(self, disk: str) -> str | None:
        """The symlink target of an on-disk path, ``None`` if it is not a link (memoized)."""
        try:
            return self._lstat[disk]
        except KeyError:
            pass
        st = os.lstat(disk)
        target = os.readlink(disk) if stat.S_ISLNK(st.st_mode) else None
        self._lstat[disk] = target
        return target

    def _disk(self, host_path: str) -> str:
        canonical = self.canonical(host_path)
        return self._root_str + canonical if canonical != "/" else self._root_str or "/"

    def path(self, host_path: str) -> Path:
        """The on-disk path (inside the root) that ``host_path`` resolves to."""
        return Path(self._disk(host_path))

    # -- reads ---------------------------------------------------------------------------------

    def exists(self, host_path: str) -> bool:
        try:
            return os.path.exists(self._disk(host_path))
        except HostPathError:
            return False

    def is_dir(self, host_path: str) -> bool:
        try:
            return os.path.isdir(self._disk(host_path))
        except HostPathError:
            return False

    def _open(self, host_path: str, disk: str, flags: int) -> int:
        """Open ``disk`` (what ``host_path`` resolved to) with ``flags`` -- non-blocking, never
        following a link -- and make sure it is a regular file; raises :class:`HostPathError`. What
        ``lstat`` already shows is no regular file is refused without being opened at all (opening a
        device can do something); ``fstat`` of the open file decides (it may have been swapped)."""
        try:
            mode = os.lstat(disk).st_mode
        except OSError:
            pass  # absent or unreachable: the open below says which
        else:
            if not stat.S_ISREG(mode):
                raise not_regular(host_path, mode)
        try:
            fd = os.open(disk, flags)
        except OSError as exc:
            err = exc.errno or errno.EIO
            mode = stat.S_IFREG
            if err in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP, errno.EISDIR, errno.ELOOP):
                with contextlib.suppress(OSError):  # a socket, a device with no driver, ...: say which
                    mode = os.lstat(disk).st_mode
            if not stat.S_ISREG(mode):
                raise not_regular(host_path, mode) from None
            raise HostPathError(host_path, err) from None
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            os.close(fd)
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise not_regular(host_path, mode)
        return fd

    def read_bytes(self, host_path: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        """A (small) regular file's bytes, at most ``limit``; raises :class:`HostPathError` naming the
        host path: absent, unreadable, larger than ``limit`` (``EFBIG``), or not a regular file (a FIFO,
        a socket, a device, a directory -- refused at once, never waited on)."""
        fd = self._open(host_path, self._disk(host_path), _READ_FLAGS)
        chunks: list[bytes] = []
        size = 0
        try:
            while size <= limit:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        finally:
            os.close(fd)
        if size > limit:
            raise HostPathError(host_path, errno.EFBIG, f"larger than the {limit}-byte read cap")
        return b"".join(chunks)

    def read_text(self, host_path: str, limit: int = DEFAULT_READ_LIMIT) -> str:
        """:meth:`read_bytes` decoded as UTF-8 (an undecodable byte becomes U+FFFD)."""
        return self.read_bytes(host_path, limit).decode("utf-8", errors="replace")

    def read_optional(self, host_path: str, limit: int = DEFAULT_READ_LIMIT) -> str | None:
        """Like :meth:`read_text`, but an absent file is ``None`` (other failures still raise, a
        non-regular file among them: it is there, and it is not the file)."""
        try:
            return self.read_text(host_path, limit)
        except HostPathError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names of a host directory; raises :class:`HostPathError`."""
        disk = self._disk(host_path)
        try:
            return sorted(os.listdir(disk))
        except OSError as exc:
            raise HostPathError(host_path, exc.errno or errno.EIO) from None

    def readlink(self, host_path: str) -> str | None:
        """The raw target of a symlink (its last component only is not followed), or ``None``."""
        parent, _, name = host_path.rstrip("/").rpartition("/")
        disk = self._disk(parent or "/") + "/" + name
        try:
            return os.readlink(disk)
        except (OSError, ValueError):  # ValueError: a NUL byte in the name
            return None

    # -- writes (the allocator's host directories: per-pod working dirs, Hygon's vdev files) ---------

    def _forget(self) -> None:
        """Writes change what exists: drop the resolution caches."""
        self._lstat.clear()
        self._walked.clear()

    def makedirs(self, host_path: str, mode: int = 0o755) -> None:
        """Create a directory (and parents) inside the root; raises :class:`HostPathError`."""
        disk = self._disk(host_path)
        try:
            os.makedirs(disk, mode=mode, exist_ok=True)
        except OSError as exc:
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        finally:
            self._forget()

    def write_text(self, host_path: str, text: str, mode: int = 0o644) -> None:
        """Write a file atomically inside the root: a fresh temporary file beside it (created
        exclusively, never through a link planted at its name) renamed over it."""
        disk = self._disk(host_path)
        directory, _, name = disk.rpartition("/")
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f"{name}.tmp-", dir=directory or "/")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, disk)
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        finally:
            self._forget()

    def write_attribute(self, host_path: str, text: str) -> None:
        """Write an existing regular file in place (a sysfs control attribute cannot be replaced by a
        rename): opened non-blocking without creating it, and refused unless it is a regular file --
        a FIFO at the path is an error at once, never a write that waits for a reader."""
        fd = self._open(host_path, self._disk(host_path), _ATTRIBUTE_FLAGS)
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
        except OSError as exc:
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        finally:
            os.close(fd)

    def remove_tree(self, host_path: str) -> None:
        """Remove a file or directory tree inside the root (absent is fine)."""
        disk = self._disk(host_path)
        try:
            if os.path.isdir(disk) and not os.path.islink(disk):
                shutil.rmtree(disk)
            elif os.path.lexists(disk):
                os.unlink(disk)
        except OSError as exc:
            raise HostPathError(host_path, exc.errno or errno.EIO) from None
        finally:
            self._forget()


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p]
