"""Preflight's detect pass with each manufacturer's vendor code in a child process of its own.

Preflight is run on the node this product exists for: a half-installed one, whose vendor library may
be truncated, built for another driver, or simply buggy. A library that faults inside the vendor's
own code (SIGSEGV, SIGBUS, an ``abort()``) kills the process that loaded it, and no ``try`` can
catch that. So every manufacturer whose bus shows accelerators (the only case in which vendor code
is loaded at all, see :func:`~gpustack_operator.manufacturers.base.bus_shows_none`) is detected in a
``fork``ed child that sends its outcome back over a pipe. A child that dies, exits without an
answer or does not answer in time leaves that manufacturer ``Unmeasured`` -- preflight reports it
``unavailable`` -- naming the library it was loading (recorded by ``host.libs.LOAD_HOOK`` just before
the ``dlopen``) and the signal; every other manufacturer is answered as usual.

Cost: one ``fork`` + pickle round trip per manufacturer with accelerators on the bus (a few
milliseconds; ``bench/run.py`` measures it), nothing for the others. ``detect``, ``monitor`` and the
Ansible modules keep the in-process pass: they are pure reads a person re-runs, and preflight is the
command that must always produce its document.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from dataclasses import dataclass

from gpustack_operator.discovery.detect import NodeDetection, detect_node, run_detector
from gpustack_operator.host import HostRoot, libs
from gpustack_operator.manufacturers.base import (
    DetectContext,
    Detected,
    DetectOutcome,
    Resolved,
    Unmeasured,
    bus_shows_none,
)
from gpustack_operator.settings import Settings

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0
_FRAME = struct.Struct("!cI")  # kind ('L' loading a library, 'O' outcome, 'E' exception), length


@dataclass(frozen=True)
class ChildResult:
    """What one child sent and how it ended."""

    outcome: DetectOutcome | None
    error: str | None  # an exception the detector raised (the loop's panic guard answers it)
    loading: str | None  # the last library the child was about to load
    status: int | None  # waitpid status, None while it could not be reaped
    timed_out: bool = False  # killed for not answering in time


def _send(fd: int, kind: bytes, payload: bytes) -> None:
    data = _FRAME.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _child(fd: int, name: str, ctx: DetectContext) -> None:  # pragma: no cover - runs in the child
    """Detect, send the outcome, leave without running the parent's exit handlers."""
    code = 0
    try:
        libs.LOAD_HOOK.append(lambda path: _send(fd, b"L", path.encode("utf-8", "surrogateescape")))
        try:
            outcome = run_detector(name, ctx)
            _send(fd, b"O", pickle.dumps(outcome))
        except Exception as exc:
            _send(fd, b"E", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}".encode("utf-8", "replace"))
    except BaseException:
        code = 70
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def _read_frames(fd: int, deadline: float) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Every frame until EOF; ``timed_out`` when the deadline passed first."""
    buf = b""
    frames: list[tuple[bytes, bytes]] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return frames, True
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return frames, False
        buf += chunk
        while len(buf) >= _FRAME.size:
            kind, length = _FRAME.unpack_from(buf)
            if len(buf) < _FRAME.size + length:
                break
            frames.append((kind, buf[_FRAME.size : _FRAME.size + length]))
            buf = buf[_FRAME.size + length :]


def run_forked(name: str, ctx: DetectContext, timeout: float = TIMEOUT_S) -> ChildResult:
    """Run ``name``'s detector in a child; its outcome, exception, last library and exit status."""
    read_fd, write_fd = os.pipe()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        _child(write_fd, name, ctx)
    os.close(write_fd)
    try:
        frames, timed_out = _read_frames(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    outcome: DetectOutcome | None = None
    error: str | None = None
    loading: str | None = None
    for kind, payload in frames:
        if kind == b"L":
            loading = payload.decode("utf-8", "replace")
        elif kind == b"O":
            try:
                value = pickle.loads(payload)  # our own child's answer, never another process's
            except Exception as exc:
                error = f"the answer could not be read back: {type(exc).__name__}: {exc}"
                continue
            if isinstance(value, Detected | Unmeasured):
                outcome = value
        elif kind == b"E":
            error = payload.decode("utf-8", "replace")
    if timed_out and outcome is None:
        error = None
        return ChildResult(None, f"did not answer within {timeout:.0f}s and was killed", loading, status, True)
    return ChildResult(outcome, error, loading, status)


def death(name: str, result: ChildResult) -> str:
    """Why a child gave no answer, in words: the signal, and the library it was in."""
    where = f" while it was loading or calling {result.loading}" if result.loading else " in the vendor's code"
    status = result.status
    if result.timed_out and result.error:
        how = result.error
    elif status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signame = signal.Signals(sig).name
        except ValueError:
            signame = f"signal {sig}"
        how = f"was killed by {signame}"
    elif status is not None and os.WIFEXITED(status):
        how = f"exited with status {os.WEXITSTATUS(status)} without answering"
    else:
        how = "ended without answering"
    remedy = (
        "the vendor library is broken or does not match the driver (reinstall the driver, or mount the "
        "library that belongs to it)"
        if result.loading
        else "the vendor's code crashed"
    )
    return f"the {name} detect pass {how}{where}: {remedy}"


def isolated_detector(name: str, ctx: DetectContext) -> DetectOutcome:
    """The detector :func:`detect_node` calls in preflight: nothing forked when the bus already
    settles the manufacturer (no vendor code is loaded then), a child otherwise."""
    if bus_shows_none(ctx):
        return Detected([])
    result = run_forked(name, ctx)
    if result.outcome is not None:
        return result.outcome
    if result.error is not None and not result.timed_out:
        log.error("the %s detector crashed (in its child process): %s", name, result.error)
        first = result.error.splitlines()[0]
        return Unmeasured(f"the {name} detector crashed: {first}")
    reason = death(name, result)
    log.error("%s", reason)
    return Unmeasured(reason)


def isolated_detect(
    view: HostRoot, resolved: dict[str, Resolved], settings: Settings, no_pci_check: bool
) -> NodeDetection:
    """:func:`detect_node` with every manufacturer's vendor code isolated (see the module docstring)."""
    return detect_node(view, resolved, settings, no_pci_check, detector=isolated_detector)


__all__ = ["ChildResult", "isolated_detect", "isolated_detector", "run_forked"]
