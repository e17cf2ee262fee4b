"""Compile the vendor-library stand-ins and install them into the host-root fixtures.

Each ``tests/stubs/<vendor>/`` holds one or more ``<name>.c`` files and a ``targets.txt`` with lines
``<stub .c file> <fixture host> <host-relative library path>``, e.g.::

    fake_nvml.c  h100-sxm-8x  usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1

A stand-in is the vendor's library at its real path inside a fixture node: it exports the same
symbols and serves the data in ``<library path>.fixture`` next to it (found through ``dladdr``), so
the production binding code loads it exactly as it would load the real one. Built without an
SONAME, so two fixture nodes' copies loaded in one process stay two libraries.

What every stand-in shares lives in ``tests/stubs/common/`` (the fixture store ``fixture.h``, the
NVML-shaped entry points ``nvml_shaped.h``), included as ``"../common/<header>"``.

Run directly (``python -m tests.stubs.build``) or through the pytest session fixture; rebuilds only
what changed (the source or a shared header). Needs gcc.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.stubs import node_extras

STUBS = Path(__file__).resolve().parent
HOSTS = STUBS.parent / "fixtures" / "hosts"
BUILD = STUBS.parent / ".build"
COMMON = STUBS / "common"


def compile_stub(source: Path) -> Path:
    """``gcc -shared -fPIC`` into tests/.build; skipped when the output is newer than the source and
    every shared header."""
    out = BUILD / source.parent.name / (source.stem + ".so")
    newest = max(p.stat().st_mtime for p in [source, *COMMON.glob("*.h")])
    if out.exists() and out.stat().st_mtime >= newest:
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


HOST_CLIS = ("usr/bin/nvidia-smi", "usr/bin/rocm-smi", "usr/local/sbin/npu-smi")


def install_shell(root: Path) -> None:
    """Give a fixture node this machine's ``/bin/dash`` as ``/bin/sh`` plus the libraries it loads,
    so its vendor CLIs (``#!/bin/sh`` scripts) run inside it under a real ``chroot``. Never committed."""
    import re

    shell = Path("/bin/dash").resolve()
    ldd = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, check=True).stdout
    for src in [str(shell), *re.findall(r"(/\S+\.so[\w.]*)", ldd)]:
        dest = root / src.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copy2(src, dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "sh").exists():
        shutil.copy2(shell, root / "bin" / "sh")


def build_all(hosts_dir: Path | None = None) -> list[Path]:
    """Compile every stub and copy it to each target (under ``hosts_dir`` if given); give every node
    that carries a vendor CLI a shell to run it with."""
    installed = []
    for source, target in targets():
        if hosts_dir is not None:
            target = hosts_dir / target.relative_to(HOSTS)
        built = compile_stub(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.stat().st_mtime < built.stat().st_mtime:
            shutil.copy2(built, target)
        installed.append(target)
    for node in sorted((hosts_dir or HOSTS).iterdir()):
        if node.is_dir() and any((node / cli).exists() for cli in HOST_CLIS):
            install_shell(node)
    node_extras.install(hosts_dir or HOSTS)  # device nodes, the image's library tree, installer records
    return installed


if __name__ == "__main__":
    for path in build_all():
        print(path.relative_to(HOSTS.parent.parent.parent), file=sys.stderr)
