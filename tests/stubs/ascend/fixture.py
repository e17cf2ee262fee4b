"""Editing the data the DCMI stand-in serves (``<libdcmi.so>.fixture``, format in fake_dcmi.c).

Tests that change it work on a copy of the host (``tests.conftest.copy_host``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.conftest import fresh_node, host
from tests.stubs.build import compile_stub

LIB = "usr/local/Ascend/driver/lib64/driver/libdcmi.so"
STUBS = Path(__file__).resolve().parent


def copy_host(name: str, dest: Path) -> Path:
    """A private copy of a fixture host, like ``tests.conftest.copy_host`` but about ten times faster.

    The tree is hard-linked (a full copy of a sysfs tree costs seconds here); everything under
    ``usr/local/Ascend`` is then copied for real, so a write to the DCMI data never reaches the shared
    fixture and the copied ``libdcmi.so`` is its own inode (``dlopen`` treats two paths to one inode
    as one library, and the stand-in finds its data through its own path).
    """
    target = dest / name
    shutil.copytree(host(name), target, symlinks=True, copy_function=os.link, ignore=fresh_node)
    for file in (target / "usr/local/Ascend").rglob("*"):
        if file.is_file() and not file.is_symlink():
            private = file.with_name(file.name + ".private")
            shutil.copy2(file, private)
            os.replace(private, file)
    return target


def path(root: Path) -> Path:
    return root / (LIB + ".fixture")


def set_global(root: Path, **values: object) -> None:
    """Set top-level keys (the stand-in reads the file top to bottom; the last assignment wins)."""
    with path(root).open("a", encoding="utf-8") as fh:
        for key, value in values.items():
            fh.write(f"{key}={value}\n")


def _address(tokens: list[str]) -> int | None:
    for token in tokens:
        key, _, value = token.partition("=")
        if key in ("card", "dev_id"):
            return int(value)
    return None


def set_npu(root: Path, address: int, /, **values: object) -> None:
    """Set keys on the device line whose card id (V1) or device id (V2) is ``address``."""
    lines = path(root).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        tokens = line.split()
        if not tokens or tokens[0] != "npu" or _address(tokens[1:]) != address:
            continue
        kept = [t for t in tokens[1:] if t.partition("=")[0] not in values]
        lines[i] = " ".join(["npu", *kept, *(f"{k}={v}" for k, v in values.items())])
        break
    else:
        raise AssertionError(f"no npu line for card {address} in {path(root)}")
    path(root).write_text("\n".join(lines) + "\n", encoding="utf-8")


def npu_value(root: Path, card: int, key: str) -> str | None:
    for line in path(root).read_text(encoding="utf-8").splitlines():
        tokens = line.split()
        if tokens and tokens[0] == "npu" and _address(tokens[1:]) == card:
            for token in tokens[1:]:
                k, _, v = token.partition("=")
                if k == key:
                    return v
    return None


def install_variant(root: Path, variant: str) -> None:
    """Replace the host's stand-in by a variant build (``fake_dcmi_v2only.c``, ``fake_dcmi_noshare.c``)."""
    source = STUBS / variant
    built = compile_stub(source)
    if built.stat().st_mtime < (STUBS / "fake_dcmi.c").stat().st_mtime:  # the variant includes it
        built.unlink()
        built = compile_stub(source)
    target = root / LIB
    target.unlink()
    shutil.copy2(built, target)
