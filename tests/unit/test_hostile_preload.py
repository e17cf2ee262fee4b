"""Hostile input for preload staging's parsers (issue 8): tar member names and link targets, subtree
names, and whole archives -- cut at every byte offset, bytes flipped, compressed streams truncated,
members of every type with hostile names, trees nested past any real one. :func:`plan` gives a plan
or a :class:`StageError`, nothing else (a truncated gzip stream raises ``EOFError`` inside tarfile, a
hard link to a missing member ``KeyError``, a deep tree ``RecursionError``)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from gpustack_operator.preload.stage import (
    MAX_DEPTH,
    StageError,
    StagePlan,
    link_stays_inside,
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
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-preload")
    (root / "dest").mkdir()
    return root


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
def test_link_stays_inside(member: str, target: str) -> None:
    assert isinstance(link_stays_inside(member, target), bool)


@given(NAMES)
def test_validate_subtree(subtree: str) -> None:
    try:
        parts = validate_subtree(subtree)
    except StageError:
        return
    assert parts and all(p and not p.startswith(".") and "/" not in p for p in parts)
