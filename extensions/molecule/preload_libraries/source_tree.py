"""The preload-library tree scenario `preload_libraries` ships from the controller (prepare.yml runs this).

Laid out like the operator image's ``lib`` directory, ``<manufacturer>[/<runtime-subdir>]/...``, with
more than any one node needs: two CUDA majors, three CANN major/family pairs, and the flat AMD,
Iluvatar and T-Head directories. Every file has content of its own (a header naming it, then bytes
derived from its path), so a file staged into the wrong place cannot pass for the right one. Writes
under ``--out``:

* ``source/``           the tree (files 0644 / 0755 / 0640, one 0750 directory, relative symlinks);
* ``source.tar.gz``     the same tree as an archive (members ``./<manufacturer>/...``);
* ``source-next/``      the next release: a few files replaced, added and removed (also in subtrees
                        no node here needs);
* ``source-next.json``  what staging ``source-next`` over ``source`` changes, per subtree, in the
                        module's own terms (``added`` / ``replaced`` / ``removed``, ``<subtree>/<path>``,
                        directories ending in ``/``), found by comparing the two trees.

Prints ``{"source", "tarball", "next", "next_changes"}`` (paths) as JSON.

    python extensions/molecule/preload_libraries/source_tree.py --out tests/.build/molecule/preload_libraries
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import sys
import tarfile
from pathlib import Path

# path -> mode. The directories are 0755 unless DIRS says otherwise. No mode has group/other write or
# set-id bits: shipped from the controller, a source passes through a tar archive, whose extraction
# (Python's tar data filter) drops those, while a directory staged in place keeps them.
FILES = {
    "nvidia/cuda-12/libvgpu.so": 0o755,
    "nvidia/cuda-12/ld.so.preload": 0o644,
    "nvidia/cuda-12/LICENSE": 0o640,
    "nvidia/cuda-12/bin/vgpu-monitor": 0o755,
    "nvidia/cuda-13/libvgpu.so": 0o755,
    "nvidia/cuda-13/ld.so.preload": 0o644,
    "ascend/cann-8-910b/libvcann-rt.so": 0o755,
    "ascend/cann-8-910b/ld.so.preload": 0o644,
    "ascend/cann-8-910c/libvcann-rt.so": 0o755,
    "ascend/cann-9-910b/libvcann-rt.so": 0o755,
    "amd/libvrocm.so": 0o755,
    "amd/rocm-monitor": 0o755,
    "iluvatar/libvgpu.so": 0o755,
    "thead/libvppu.so": 0o755,
}
DIRS = {"nvidia/cuda-12/bin": 0o750}
LINKS = {
    "nvidia/cuda-12/libvgpu.so.1": "libvgpu.so",
    "nvidia/cuda-13/libvgpu.so.1": "libvgpu.so",
    "ascend/cann-8-910b/libvcann-rt.so.8": "libvcann-rt.so",
}
# The next release, relative to FILES.
NEXT_REPLACED = ["nvidia/cuda-12/libvgpu.so", "nvidia/cuda-13/libvgpu.so", "ascend/cann-8-910b/libvcann-rt.so"]
NEXT_ADDED = {"nvidia/cuda-12/libvgpu-ipc.so": 0o755, "ascend/cann-8-910b/libvcann-ipc.so": 0o755}
NEXT_REMOVED = ["nvidia/cuda-12/bin/vgpu-monitor", "ascend/cann-8-910b/ld.so.preload"]
# Manufacturers whose libraries sit one runtime subdirectory down.
NESTED = {"nvidia", "ascend"}


def subtree_of(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2] if parts[0] in NESTED else parts[:1])


def content(path: str, release: str) -> bytes:
    """A few KiB to a few tens of KiB, different for every path and release."""
    seed = hashlib.sha256(f"{release}:{path}".encode()).digest()
    size = 4096 + int.from_bytes(seed[:2], "big") % 28672
    blocks = b"".join(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(size // 32))
    return f"GPUStack preload-library stand-in: {path} ({release})\n".encode() + blocks


def write_tree(top: Path, files: dict[str, int], release: str, replaced: set[str]) -> None:
    if top.exists():
        shutil.rmtree(top)
    for path, mode in files.items():
        target = top / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content(path, release if path in replaced else "1.0"))
        target.chmod(mode)
    for path, link in LINKS.items():
        os.symlink(link, top / path)
    for directory in sorted({p for p in top.rglob("*") if p.is_dir() and not p.is_symlink()}):
        directory.chmod(DIRS.get(str(directory.relative_to(top)), 0o755))
    top.chmod(0o755)


def state(top: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``top`` by relative path (a directory's ending in ``/``): kind, mode, and
    sha256 or link target."""
    out: dict[str, tuple[str, int, str]] = {}
    for path in top.rglob("*"):
        rel, st = str(path.relative_to(top)), path.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", 0, str(path.readlink()))
        elif stat.S_ISDIR(st.st_mode):
            out[rel + "/"] = ("dir", stat.S_IMODE(st.st_mode), "")
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def changes(before: Path, after: Path) -> dict[str, dict[str, list[str]]]:
    """Per subtree that differs: what staging ``after`` over ``before`` adds, replaces and removes."""
    old, new = state(before), state(after)
    out: dict[str, dict[str, list[str]]] = {}
    for path in sorted(old.keys() | new.keys()):
        key = "added" if path not in old else "removed" if path not in new else "replaced"
        if key == "replaced" and old[path] == new[path]:
            continue
        name = path.rstrip("/")
        subtree = subtree_of(name)
        if len(name.split("/")) < len(subtree.split("/")):
            continue  # a manufacturer directory above its runtime subdirectories
        entry = out.setdefault(subtree, {"added": [], "replaced": [], "removed": []})
        if name == subtree:  # the subtree's own directory: the module names it bare (its mode)
            if key == "replaced":
                entry[key].append(subtree)
            continue
        entry[key].append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the scenario's build directory")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    source = out / "source"
    write_tree(source, FILES, "1.0", set())
    tarball = out / "source.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(source, arcname=".")

    upcoming = {p: m for p, m in FILES.items() if p not in NEXT_REMOVED} | NEXT_ADDED
    nxt = out / "source-next"
    write_tree(nxt, upcoming, "1.1", set(NEXT_REPLACED))
    changes_json = out / "source-next.json"
    changes_json.write_text(json.dumps(changes(source, nxt), indent=1) + "\n", encoding="utf-8")

    doc = {"source": str(source), "tarball": str(tarball), "next": str(nxt), "next_changes": str(changes_json)}
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
