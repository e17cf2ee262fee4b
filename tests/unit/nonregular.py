"""Non-regular files where a host file is expected (issue 16): a FIFO, a socket, a directory, a
character device. Helpers to plant them in a tree and to call something with a deadline, so a read that
blocks on a FIFO FAILS the test instead of hanging the suite."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

KINDS = ("fifo", "socket", "directory", "chardev")
DEADLINE = 10.0  # seconds: a non-blocking refusal takes milliseconds; a blocked open() takes forever


def plant(path: Path, kind: str) -> Path:
    """Put a ``kind`` non-regular file at ``path`` (replacing what is there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # Bound at a short path and moved into place: a deep tmp path is longer than sun_path.
        short = tempfile.mkdtemp(prefix="s", dir="/tmp")
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(f"{short}/s")
            os.rename(f"{short}/s", path)
        except OSError as exc:
            pytest.skip(f"cannot place a unix socket at {path}: {exc}")
        finally:
            shutil.rmtree(short, ignore_errors=True)
    elif kind == "directory":
        path.mkdir()
    elif kind == "chardev":
        try:
            os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except OSError as exc:
            pytest.skip(f"cannot mknod here: {exc}")
    else:
        raise ValueError(kind)
    return path


def _unblock(root: Path) -> None:
    """Open the write end of every FIFO under ``root`` and close it: a reader blocked in ``open()``
    returns (and sees end of file), so a failed test leaves no thread stuck."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                if stat.S_ISFIFO(os.lstat(path).st_mode):
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    os.close(fd)


def within[T](root: Path, call: Callable[[], T], deadline: float = DEADLINE) -> T:
    """``call()``'s result (or its exception, re-raised); a call still running after ``deadline``
    seconds fails the test (the FIFOs under ``root`` are then opened for writing, so it ends)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed back to the test thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        for _ in range(50):
            _unblock(root)
            worker.join(0.1)
            if not worker.is_alive():
                break
        pytest.fail(f"still running after {deadline:.0f} s: a read blocked on a non-regular file under {root}")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@contextlib.contextmanager
def no_leftover_fifo_readers(root: Path) -> Iterator[None]:
    try:
        yield
    finally:
        _unblock(root)


def refused_words(kind: str) -> str:
    """The words a refusal of ``kind`` carries (a directory: the kernel's own EISDIR text)."""
    return {
        "fifo": "a FIFO (named pipe), not a regular file",
        "socket": "a socket, not a regular file",
        "directory": "Is a directory",
        "chardev": "a character device, not a regular file",
    }[kind]
