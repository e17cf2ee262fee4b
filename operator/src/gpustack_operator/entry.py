"""The ``gpustack-operator`` console script: process-wide choices made before the package loads.

pydantic looks for plugins at the first model class it builds by scanning the entry points of every
distribution installed beside it -- 50-120 ms in an environment that also holds Ansible, paid by every
CLI call for plugins this program never uses. The command is its own process, so it turns the scan off
unless the caller set ``PYDANTIC_DISABLE_PLUGINS`` (set it empty to have plugins loaded again), and
with the plugins off it stands in for pydantic's plugin loader, whose import alone is ~20 ms
(:mod:`gpustack_operator.pydantic_plugins`).

The command then ends its process the way ``os._exit`` does once the output is out: stdout and stderr
flushed, the ``atexit`` handlers run (logging's flush among them), and the interpreter's teardown --
tearing down some 250 modules and the objects they hold, 25-50 ms of every call measured here, with
nothing left to do -- skipped. When a flush fails (stdout closed under it) or a thread other than the main one is
still running, the process exits the ordinary way, so such an exit reads exactly as it always has.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from gpustack_operator.pydantic_plugins import stand_in_loader


def main() -> int:
    """The console script: runs the command and ends the process (:func:`end`). To run a command in
    this process and get its exit code back, call :func:`gpustack_operator.cli.main`."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    stand_in_loader()
    from gpustack_operator.cli import main as cli_main  # noqa: PLC0415 -- after the environment is set

    return end(cli_main())


def end(code: int) -> int:
    """End the process with ``code`` without the interpreter's teardown (see the module docstring);
    returns ``code`` for an ordinary exit where that would differ."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    if threading.active_count() > 1:
        return code
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    os._exit(code)
