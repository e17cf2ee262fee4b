"""Hostile input for preload staging's parsers (issues 8 and 16): tar member names and link targets,
subtree names, and whole archives -- cut at every byte offset, bytes flipped, compressed streams
truncated, members of every type with hostile names, trees nested past any real one, symlink and
hard-link chains. :func:`plan` gives a plan or a :class:`StageError`, nothing else (a truncated gzip
stream raises ``EOFError`` inside tarfile, a hard link to a missing member ``KeyError``, a deep tree
``RecursionError``); plan and apply write nothing outside the staged subtree; and the link resolution
agrees with the kernel's."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpustack_operator.preload.source import MAX_STEPS, PATH_MAX, LinkLoopError, fs_lookup, resolve
from gpustack_operator.preload.stage import (
    LIB_DIR,
    MAX_DEPTH,
    StageError,
    StagePlan,
    apply,
    plan,
    validate_member_name,
    validate_subtree,
)
from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.hostile import hostile_text

pytestmark = pytest.mark.hostile

NAME_PIECES = st.sampled_from(["amd", "lib", "x.so", "..", ".", "", "/", "\x00", "\ud800", "\udcff", "a" * 300, "é"])
NAMES = st.one_of(hostile_text(), st.lists(NAME_PIECES | st.text(max_size=4), max_size=8).map("/".join))


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w", fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as tar:  # type: ignore[call-overload]
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", linkname: str = "", mode: int = 0o644
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname, info.mode = kind, len(data), linkname, mode
    return info


def _real_members() -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [
        (_info("amd", tarfile.DIRTYPE, mode=0o755), None),
        (_info("amd/lib", tarfile.DIRTYPE, mode=0o755), None),
        (_info("amd/lib/libvrocm.so", data=b"\x7fELF" + b"x" * 300, mode=0o755), b"\x7fELF" + b"x" * 300),
        (_info("amd/lib/libvrocm.so.1", tarfile.SYMTYPE, linkname="libvrocm.so"), None),
        (_info("amd/lib/hard", tarfile.LNKTYPE, linkname="amd/lib/libvrocm.so"), None),
    ]


REAL = {mode: _tar(_real_members(), mode) for mode in ("w", "w:gz", "w:bz2", "w:xz")}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The examples' scratch space: in memory when the machine has a tmpfs (the hostile profile's
    100 ms deadline is for the code under test, not for a busy disk's journal), else a tmp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="hostile-preload-", dir=shm))
        (root / "dest").mkdir()
        yield root
        shutil.rmtree(root, ignore_errors=True)
        return
    root = tmp_path_factory.mktemp("hostile-preload")
    (root / "dest").mkdir()
    yield root


def _plan(workdir: Path, data: bytes, subtrees: tuple[str, ...] = ("amd",)) -> StagePlan | StageError:
    source = workdir / "source.tar"
    source.write_bytes(data)
    try:
        with plan(source, workdir / "dest", list(subtrees)) as staged:
            return staged
    except StageError as exc:
        return exc


def test_the_real_archives_plan(workdir: Path) -> None:
    for data in REAL.values():
        staged = _plan(workdir, data)
        assert isinstance(staged, StagePlan), staged
        assert staged.subtrees[0].added == ["lib/", "lib/hard", "lib/libvrocm.so", "lib/libvrocm.so.1"]


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
def test_compressed_archives_cut_at_every_offset(workdir: Path, mode: str) -> None:
    data = REAL[mode]
    for cut in range(len(data)):
        assert isinstance(_plan(workdir, data[:cut]), StagePlan | StageError)


def test_plain_archive_cut_at_every_offset_of_its_headers(workdir: Path) -> None:
    data = REAL["w"]
    for cut in [*range(0, 2048), *range(2048, len(data), 97)]:
        assert isinstance(_plan(workdir, data[:cut]), StagePlan | StageError)


@given(st.sampled_from(sorted(REAL)), st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 255)), max_size=6))
def test_archives_with_bytes_flipped(workdir: Path, mode: str, flips: list[tuple[int, int]]) -> None:
    data = bytearray(REAL[mode])
    for at, byte in flips:
        data[at % len(data)] = byte
    assert isinstance(_plan(workdir, bytes(data)), StagePlan | StageError)


_KINDS = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE, b"7", b"Z"]
)
_MEMBER = st.builds(
    lambda name, kind, link, mode: (
        _info(name, kind, linkname=link, mode=mode),
        b"" if kind == tarfile.REGTYPE else None,
    ),
    NAMES | NAMES.map(lambda n: "amd/" + n),
    _KINDS,
    NAMES | st.sampled_from(["amd/lib", "x.so", "../x", "/etc/passwd", "."]),
    st.integers(0, 0o7777),
)


@given(st.lists(_MEMBER, max_size=5), st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]))
@example([(_info("amd/b", tarfile.LNKTYPE, linkname="amd/missing"), None)], tarfile.PAX_FORMAT)
@example([(_info("amd/" + "a/" * 1500 + "f"), b"")], tarfile.PAX_FORMAT)
@example([(_info("amd/x", tarfile.LNKTYPE, linkname="amd/x"), None)], tarfile.GNU_FORMAT)
@example([(_info("amd/" + "2" * 20_000), b"")], tarfile.PAX_FORMAT)  # CVE-2024-6232 on Python < 3.12.6
@example([(_info("amd/" + "2" * 1_000, linkname="3" * 1_000), b"")] * 5, tarfile.PAX_FORMAT)
def test_archives_of_hostile_members(
    workdir: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int
) -> None:
    try:
        data = _tar(members, fmt=fmt)
    except (ValueError, UnicodeError, tarfile.TarError):
        return  # tarfile cannot even write it
    assert isinstance(_plan(workdir, data), StagePlan | StageError)


@given(st.binary(max_size=2048))
def test_any_bytes_as_an_archive(workdir: Path, data: bytes) -> None:
    assert isinstance(_plan(workdir, data), StagePlan | StageError)


def test_a_directory_source_nested_too_deep(workdir: Path) -> None:
    source = workdir / "deep-source"
    path = source / "amd"
    for _ in range(MAX_DEPTH + 2):
        path = path / "a"
    path.mkdir(parents=True)
    with pytest.raises(StageError, match="nested more than"):
        plan(source, workdir / "dest", ["amd"])


# -- the name checks -----------------------------------------------------------------------------


@given(NAMES)
@example("a/" * 10_000)
def test_validate_member_name(name: str) -> None:
    try:
        out = validate_member_name(name)
    except StageError:
        return
    assert "\x00" not in out and not out.startswith("/") and ".." not in out.split("/")


@given(NAMES, NAMES)
def test_resolve_any_names(member: str, target: str) -> None:
    start = tuple(p for p in member.split("/") if p not in ("", ".", ".."))
    try:
        out = resolve(lambda _: None, (), start, target)
    except LinkLoopError:
        long_target = len(target) > PATH_MAX or target.count("/") >= MAX_STEPS
        assert long_target or len(start) + target.count("/") >= MAX_DEPTH, "no link was met, and the path is short"
        return
    assert out is None or all(p not in ("", ".", "..") for p in out)


@given(NAMES)
def test_validate_subtree(subtree: str) -> None:
    try:
        parts = validate_subtree(subtree)
    except StageError:
        return
    assert parts and all(p and not p.startswith(".") and "/" not in p for p in parts)


# -- link resolution against the kernel's ------------------------------------------------------------

_PIECE = st.sampled_from(["a", "b", "s", "x", "..", ".", ""])
_REL = st.lists(_PIECE, min_size=1, max_size=5).map("/".join)
_TARGET = _REL | _REL.map(lambda t: "/" + t)
_PATH = st.lists(st.sampled_from(["a", "b", "s"]), min_size=1, max_size=3).map(tuple)
_NODE = st.tuples(_PATH, st.sampled_from(["dir", "file", "link"]), _TARGET)


@contextlib.contextmanager
def _fresh(parent: Path) -> Iterator[Path]:
    """A new directory named so no generated piece can name it (a climb out cannot come back in)."""
    root = Path(tempfile.mkdtemp(prefix="root-", dir=parent))
    try:
        yield Path(os.path.realpath(root))
    finally:
        shutil.rmtree(root)


def _materialise(root: Path, nodes: list[tuple[tuple[str, ...], str, str]]) -> list[tuple[str, ...]]:
    links = []
    for path, kind, target in nodes:
        where = root.joinpath(*path)
        parent_ok = all(
            root.joinpath(*path[:i]).is_dir() and not root.joinpath(*path[:i]).is_symlink() for i in range(1, len(path))
        )
        if not parent_ok and any(os.path.lexists(root.joinpath(*path[:i])) for i in range(1, len(path))):
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(where):
            continue
        if kind == "dir":
            where.mkdir()
        elif kind == "file":
            where.write_bytes(b"x")
        elif target:
            os.symlink(target, where)
            links.append(path)
    return links


@given(st.lists(_NODE, min_size=1, max_size=8))
@example([(("s",), "link", "."), (("a",), "link", "s/s/s/../x")])
@example([(("a", "b"), "dir", ""), (("a", "b", "s"), "link", "../.."), (("x",), "link", "a/b/s/../../x")])
def test_resolution_agrees_with_the_kernel(workdir: Path, nodes: list[tuple[tuple[str, ...], str, str]]) -> None:
    """Every link of a generated tree: where :func:`resolve` says it leads (through the tree's real
    files, ``lstat`` only) is where the kernel's resolution leads, and "outside" is outside (the
    names cannot climb out and back in: the root's name is none of them). A loop or a chain past 40
    is refused, which is always safe, and is not compared."""
    with _fresh(workdir) as root:
        links = _materialise(root, nodes)
        lookup = fs_lookup(str(root))
        for path in links:
            try:
                mine = resolve(lookup, (), path[:-1], os.readlink(root.joinpath(*path)))
            except LinkLoopError:
                continue
            kernel = os.path.realpath(root.joinpath(*path))
            inside = kernel == str(root) or kernel.startswith(f"{root}/")
            if mine is None:
                assert not inside, (path, kernel)
            else:
                assert kernel == str(root.joinpath(*mine)), (path, mine, kernel)


# -- whole archives, planned and applied: nothing outside the staged subtree -------------------------

_ANAME = st.lists(st.sampled_from(["a", "s", "l", "x", "..", ".", "", "amd"]), min_size=1, max_size=4).map("/".join)
_AKIND = st.sampled_from(
    [
        tarfile.REGTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.FIFOTYPE,
        tarfile.CONTTYPE,
    ]
)
_AMEMBER = st.tuples(
    st.one_of(_ANAME.map(lambda n: "amd/" + n), _ANAME, _ANAME.map(lambda n: "/" + n)),
    _AKIND,
    st.one_of(_ANAME, _ANAME.map(lambda n: "/" + n), _ANAME.map(lambda n: "amd/" + n)),
)


def _archive(members: list[tuple[str, bytes, str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, link, 0o755
            data = f"{name}\n".encode() if kind in (tarfile.REGTYPE, tarfile.CONTTYPE) else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _everything(top: Path) -> set[str]:
    return {str(Path(d, n).relative_to(top)) for d, ds, fs in os.walk(top) for n in ds + fs}


@given(st.lists(_AMEMBER, min_size=1, max_size=8))
@example([("amd/s", tarfile.SYMTYPE, ".."), ("amd/s/x", tarfile.REGTYPE, "")])
@example(
    [("amd/a", tarfile.DIRTYPE, ""), ("amd/a/s", tarfile.SYMTYPE, "../.."), ("amd/l", tarfile.SYMTYPE, "a/s/../../x")]
)
@example([("amd/l", tarfile.SYMTYPE, "s"), ("amd/s", tarfile.SYMTYPE, "l")])
@example([("amd/x", tarfile.REGTYPE, ""), ("amd/s", tarfile.SYMTYPE, "."), ("amd/h", tarfile.LNKTYPE, "amd/s/x")])
@example([("x", tarfile.REGTYPE, ""), ("amd/l", tarfile.SYMTYPE, "../x"), ("amd/a", tarfile.SYMTYPE, "l")])
def test_hostile_archives_write_only_the_staged_subtree(workdir: Path, members: list[tuple[str, bytes, str]]) -> None:
    """A generated archive (names with ``..``, absolute names, symlink and hard-link chains, devices,
    pipes) planned, then applied, under a private ``$TMPDIR`` nested in the sandbox: a plan or a
    :class:`StageError`, never anything else; the plan writes nothing; the apply writes only the
    subtree (and the directories leading to it); every link staged resolves, by the kernel, inside it."""
    try:
        data = _archive(members)
    except (ValueError, UnicodeError, tarfile.TarError):
        return
    with _fresh(workdir) as box:
        tmp = box / "t" / "m" / "p"
        tmp.mkdir(parents=True)
        host = box / "h" / "o" / "s" / "t"
        host.mkdir(parents=True)
        source = tmp / "lib.tar"
        source.write_bytes(data)
        before = _everything(box)
        saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
        try:
            with plan(source, host, ["amd"]) as staged:
                assert _everything(box) == before
                apply(staged)
        except StageError as exc:
            assert exc.problem and exc.remedy
        finally:
            tempfile.tempdir = saved
        lib = host / LIB_DIR
        allowed = {str((host / LIB_DIR).relative_to(box))} | {
            str(p.relative_to(box)) for p in (host / LIB_DIR).parents if p.is_relative_to(box) and p != box
        }
        amd = lib / "amd"
        for extra in _everything(box) - before:
            assert extra in allowed or (box / extra).is_relative_to(amd), extra
        if amd.exists():
            for d, ds, fs in os.walk(amd):
                for n in ds + fs:
                    path = Path(d, n)
                    if path.is_symlink():
                        real = os.path.realpath(path)
                        assert real == str(amd) or real.startswith(f"{amd}/"), (path, os.readlink(path))
                    else:
                        assert stat.S_ISDIR(path.lstat().st_mode) or stat.S_ISREG(path.lstat().st_mode)
