"""Scratch trees for the hostile property tests that write a node per example: in ``/dev/shm`` when
there is one (the profile's 100 ms deadline is for the code under test, not a busy disk), removed when
the test process ends; and the per-example deadline for an example that reads several files."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from datetime import timedelta
from functools import cache
from pathlib import Path

from hypothesis import settings

PER_FILE = 100  # ms: the hostile profile's deadline, which is a parser's -- for one input


@cache
def scratch(name: str) -> Path:
    """A private directory for ``name``'s example trees (the same one for every example)."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    atexit.register(shutil.rmtree, path, True)
    return path


def files_deadline(files: int) -> timedelta | None:
    """The deadline of an example that writes and reads ``files`` host files: the profile's per-input
    deadline for each (None when the profile has none, as ``ci`` does)."""
    current = settings.default.deadline
    if current is None:
        return None
    return timedelta(milliseconds=max(current / timedelta(milliseconds=1), PER_FILE) * files)
