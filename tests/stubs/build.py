"""Compile the vendor-library stand-ins and install them into the host-root fixtures.

Each ``tests/stubs/<vendor>/`` holds one or more ``<name>.c`` files and a ``targets.txt`` with lines
``<stub .c file> <fixture host> <host-relative library path>``, e.g.::

    fake_nvml.c  h100-sxm-8x  usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1

A stand-in is the vendor's library at its real path inside a fixture node: it exports the same
symbols and serves the data in ``<library path>.fixture`` next to it (found through ``dladdr``), so
the production binding code loads it exactly as it would load the real one. Built without an
SONAME, so two fixture nodes' copies loaded in one process stay two libraries.

Run directly (``python -m tests.stubs.build``) or through the pytest session fixture; rebuilds only
what changed. Needs gcc.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

STUBS = Path(__file__).resolve().parent
HOSTS = STUBS.parent / "fixtures" / "hosts"
BUILD = STUBS.parent / ".build"


def compile_stub(source: Path) -> Path:
    """``gcc -shared -fPIC`` into tests/.build; skipped when the output is newer than the source."""
    out = BUILD / source.parent.name / (source.stem + ".so")
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(source), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{proc.stderr}")
    return out


def targets() -> list[tuple[Path, Path]]:
    """(source .c, install path inside a fixture host) for every stub."""
    pairs: list[tuple[Path, Path]] = []
    for listing in sorted(STUBS.glob("*/targets.txt")):
        for lineno, line in enumerate(listing.read_text().splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                source, host, rel = line.split()
            except ValueError:
                raise RuntimeError(f"{listing}:{lineno}: expected '<source.c> <host> <path>'") from None
            pairs.append((listing.parent / source, HOSTS / host / rel))
    return pairs


def build_all(hosts_dir: Path | None = None) -> list[Path]:
    """Compile every stub and copy it to each target (under ``hosts_dir`` if given)."""
    installed = []
    for source, target in targets():
        if hosts_dir is not None:
            target = hosts_dir / target.relative_to(HOSTS)
        built = compile_stub(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.stat().st_mtime < built.stat().st_mtime:
            shutil.copy2(built, target)
        installed.append(target)
    return installed


if __name__ == "__main__":
    for path in build_all():
        print(path.relative_to(HOSTS.parent.parent.parent), file=sys.stderr)
