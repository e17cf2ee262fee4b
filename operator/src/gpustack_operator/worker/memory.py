"""The worker's heap: a list answer's text is returned to the system once it is freed (issue 19: RSS
<= 80 MiB with 1,000 Nodes cached).

glibc serves an allocation of 128 KiB or more with its own ``mmap`` and gives it back on ``free`` --
but it raises that threshold to the size of each such block freed (up to 32 MiB), so after the first
list of the Nodes (a ~6 MiB page of text), every later page, watch buffer and JSON text of that size
comes from the main heap, where a freed block in the middle stays resident. :func:`pin_mmap_threshold`
sets ``M_MMAP_THRESHOLD`` to glibc's own initial 128 KiB, which also turns the raising off (mallopt(3)):
large blocks always come from and go back to the system. Elsewhere it does nothing (musl's mallopt answers 0;
macOS has none).
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 128 * 1024


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; whether it was set (``False`` off glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: the C library Python runs on
    except (OSError, AttributeError):  # none to load, or a C library without mallopt
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    log.debug("glibc mmap threshold %s at %d bytes", "pinned" if done else "not pinned", threshold)
    return done


__all__ = ["MMAP_THRESHOLD", "pin_mmap_threshold"]
