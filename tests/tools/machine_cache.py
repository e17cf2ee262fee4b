"""The machine's cache for what the test suite builds or downloads once (tests/tools/cache_dir.sh says
what is kept there and why): ``GPUSTACK_TEST_CACHE``, else /var/cache/gpustack-accelerators-tests as
root, else ``${XDG_CACHE_HOME:-~/.cache}/gpustack-accelerators-tests``.

Outside the checkout on purpose: a clean clone on the same machine (what CI runs) finds the Debian
rootfs, the wheels and the lowest ansible-core venv already made."""

from __future__ import annotations

import os
from pathlib import Path


def machine_cache(*parts: str) -> Path:
    """``<cache>/<parts...>``, the cache directory created (the entry itself is the caller's)."""
    chosen = os.environ.get("GPUSTACK_TEST_CACHE")
    if chosen:
        base = Path(chosen)
    elif os.geteuid() == 0:
        base = Path("/var/cache/gpustack-accelerators-tests")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpustack-accelerators-tests"
    base.mkdir(parents=True, exist_ok=True)
    return base.joinpath(*parts)
