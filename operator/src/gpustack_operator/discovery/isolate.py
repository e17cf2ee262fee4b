"""Each manufacturer's vendor code in a child process of its own -- for every command that loads it.

The node this product runs on may be half-installed: its vendor library truncated, built for another
driver, or simply buggy. A library that faults inside the vendor's own code (SIGSEGV, a SIGBUS from a
truncated file that ``dlopen`` maps past its end, an ``abort()``) kills the process that loaded it, and
no ``try`` can catch that. So every manufacturer whose bus shows accelerators (the only case in which
vendor code is loaded at all, see :func:`~gpustack_operator.manufacturers.base.bus_shows_none`) is
detected -- or sampled -- in a ``fork``ed child that sends its outcome back over a pipe. A child that
dies, exits without an answer or does not answer in time leaves that manufacturer ``Unmeasured``,
naming the library it was loading (recorded by ``host.libs.LOAD_HOOK`` just before the ``dlopen``) and
the signal; every other manufacturer is answered as usual and the document is still written.

That is the spec's failure semantics (device-discovery "A pass that failed is not a manufacturer with
no accelerators ... an error means that pass could not measure, and carries no claim about the
hardware"; for the monitor "A manufacturer it could not measure is simply absent from the sample, and
is named as unmeasured"). ``detect``, ``monitor``, ``mode``, ``serve``, preflight and the Ansible
modules all detect through :func:`isolated_detector` (``api.run_detect``), ``monitor`` samples through
:func:`isolated_monitor`; a detector's own exception is answered the same way, in one line (its trace
goes to the debug log only).

Cost: one ``fork`` + pickle round trip per manufacturer with accelerators on the bus (a few
milliseconds; ``bench/run.py --only isolation`` measures it), nothing for the others.
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
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeGuard

from gpustack_operator.discovery.detect import NodeDetection, detect_node, run_detector, run_monitor
from gpustack_operator.host import HostRoot, libs
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import (
    DetectContext,
    Detected,
    DetectOutcome,
    Measured,
    MonitorOutcome,
    Resolved,
    Unmeasured,
    bus_shows_none,
)
from gpustack_operator.settings import Settings

log = logging.getLogger(__name__)

TIMEOUT_S = 120.0
_FRAME = struct.Struct("!cI")  # kind ('L' loading a library, 'O' outcome, 'E' exception), length
_CHILD_FAILED = 70  # the child could not even report (EX_SOFTWARE)


@dataclass(frozen=True)
class Pass:
    """Which pass a child ran, in the words its reasons use."""

    label: str  # "detect pass": "the nvidia detect pass was killed by SIGBUS ..."
    runner: str  # "detector": "the nvidia detector crashed: ..." (as the in-process panic guard says)


DETECT = Pass("detect pass", "detector")
MONITOR = Pass("monitor pass", "monitor")


@dataclass(frozen=True)
class ChildResult:
    """What one child sent and how it ended."""

    outcome: object | None  # the unpickled answer, checked by the caller
    error: str | None  # an exception the pass raised: its first line, then the trace
    loading: str | None  # the last library the child was about to load
    status: int | None  # waitpid status
    timed_out: bool = False  # killed for not answering in time


def _send(fd: int, kind: bytes, payload: bytes) -> None:
    data = _FRAME.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _child(fd: int, call: Callable[[], object]) -> None:  # pragma: no cover - runs in the child
    """Run ``call``, send its answer, leave without running the parent's exit handlers."""
    code = 0
    try:
        libs.LOAD_HOOK.append(lambda path: _send(fd, b"L", path.encode("utf-8", "surrogateescape")))
        try:
            answer = call()
            _send(fd, b"O", pickle.dumps(answer))
        except Exception as exc:
            _send(fd, b"E", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}".encode("utf-8", "replace"))
    except BaseException:
        code = _CHILD_FAILED
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


def run_forked(call: Callable[[], object], timeout: float = TIMEOUT_S) -> ChildResult:
    """Run ``call`` in a forked child; its answer, exception, last library and exit status."""
    read_fd, write_fd = os.pipe()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        _child(write_fd, call)
    os.close(write_fd)
    try:
        frames, timed_out = _read_frames(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    answer: object | None = None
    error: str | None = None
    loading: str | None = None
    for kind, payload in frames:
        if kind == b"L":
            loading = payload.decode("utf-8", "replace")
        elif kind == b"O":
            try:
                answer = pickle.loads(payload)  # our own child's answer, never another process's
            except Exception as exc:
                error = f"the answer could not be read back: {type(exc).__name__}: {exc}"
        elif kind == b"E":
            error = payload.decode("utf-8", "replace")
    if timed_out and answer is None:
        return ChildResult(None, f"did not answer within {timeout:.0f}s and was killed", loading, status, True)
    return ChildResult(answer, error, loading, status)


def death(name: str, result: ChildResult, what: Pass = DETECT) -> str:
    """Why a child gave no answer, in words: the signal, the library it was in, the remedy."""
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
    return f"the {name} {what.label} {how}{where}: {remedy}"


def contained[T](
    name: str, what: Pass, call: Callable[[], T], answers: Callable[[object], TypeGuard[T]]
) -> T | Unmeasured:
    """``call`` (one manufacturer's pass) in a child: its answer, or ``Unmeasured`` naming why there
    is none -- the exception in one line (the trace at debug level), or the death (:func:`death`)."""
    result = run_forked(call)
    if result.outcome is not None and answers(result.outcome):
        return result.outcome
    if result.error is not None and not result.timed_out:
        first, _, trace = result.error.partition("\n")
        log.debug("the %s %s crashed in its child process:\n%s", name, what.runner, trace)
        reason = f"the {name} {what.runner} crashed: {first}"
    else:
        reason = death(name, result, what)
    log.info("%s", reason)  # every caller names it (the document, the command's own stderr line)
    return Unmeasured(reason)


def _is_detect_outcome(value: object) -> TypeGuard[DetectOutcome]:
    return isinstance(value, Detected | Unmeasured)


def _is_monitor_outcome(value: object) -> TypeGuard[MonitorOutcome]:
    return isinstance(value, Measured | Unmeasured)


def isolated_detector(name: str, ctx: DetectContext) -> DetectOutcome:
    """The detector :func:`detect_node` calls: in this process when the bus already settles the
    manufacturer (no vendor code is loaded then, not even imported), in a child otherwise."""
    if bus_shows_none(ctx):
        return run_detector(name, ctx)
    REGISTRY[name].loaded()  # its Python imported here, once: the child runs only the vendor's code
    return contained(name, DETECT, partial(run_detector, name, ctx), _is_detect_outcome)


def isolated_monitor(name: str, ctx: DetectContext) -> MonitorOutcome:
    """The sampler :func:`~gpustack_operator.discovery.detect.monitor_node` calls: as
    :func:`isolated_detector` (every monitor's own PCI gate answers a bus showing none of its
    accelerators with an empty sample before any library is loaded)."""
    if bus_shows_none(ctx):
        return run_monitor(name, ctx)
    REGISTRY[name].loaded()
    return contained(name, MONITOR, partial(run_monitor, name, ctx), _is_monitor_outcome)


def isolated_detect(
    view: HostRoot,
    resolved: dict[str, Resolved],
    settings: Settings,
    no_pci_check: bool = False,
    *,
    interfaces: bool = True,
) -> NodeDetection:
    """:func:`detect_node` with every manufacturer's vendor code isolated (see the module docstring)."""
    return detect_node(view, resolved, settings, no_pci_check, interfaces=interfaces, detector=isolated_detector)


__all__ = [
    "DETECT",
    "MONITOR",
    "ChildResult",
    "Pass",
    "contained",
    "death",
    "isolated_detect",
    "isolated_detector",
    "isolated_monitor",
    "run_forked",
]
