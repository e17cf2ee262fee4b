"""Stage preload-library subtrees onto a host: plan (a pure read) and apply (spec: "Where the preload
libraries come from"; preflight side effects: the lib tree is never removed, ``.../operator/pods``
is never written).

The source is a directory, or a tar archive (optionally compressed) extracted into a private
temporary directory after every member has been checked. Either way it is laid out like the
destination: ``<manufacturer>[/<runtime-subdir>]/...``.

The destination of subtree ``S`` is ``<dest_root>/var/lib/gpustack/operator/lib/S``. Staging is

- **idempotent by checksum**: a subtree whose files (sha256), symlinks (target) and directories
  match the source, modes included, is left alone;
- **atomic per subtree**: the new subtree is built in a hidden directory beside it (same filesystem),
  the old one is renamed aside, the new one renamed into place, the old one deleted;
- **confined**: no component of the destination path (``var``, ``lib``, ``gpustack``, ``operator``,
  ``lib``, the subtree) may be a symlink — each is opened with ``O_NOFOLLOW`` relative to its parent
  — and a symlink inside an existing subtree is refused unless it is relative and stays inside that
  subtree (the kind staging itself writes). Nothing resolving to the allocator's ``pods`` directory
  is ever touched.

Subtrees not asked for are never removed, and neither is the tree itself.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import lzma
import os
import posixpath
import secrets
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

LIB_DIR = PurePosixPath("var/lib/gpustack/operator/lib")
PODS_DIR = PurePosixPath("var/lib/gpustack/operator/pods")

_SUBTREE_PART = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
_CHUNK = 1024 * 1024
# How deep a preload tree may nest (a real one is a handful of levels: amd/lib/rocm/...). Deeper is
# refused: the walks below recurse once per level, and so does the extraction's os.makedirs.
MAX_DEPTH = 64
# What a damaged compressed archive raises besides tarfile.TarError: a truncated gzip or xz stream
# (EOFError), a corrupt deflate or xz block.
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError)
# A pax extended header longer than this is refused: Python's tarfile before 3.12.6 searches each one
# with a regular expression quadratic in a run of digits (CVE-2024-6232; 4,000 digits take 25 ms, 20,000
# a second, per header). A preload tree's headers carry a short path and link target (lib/libx.so.1).
PAX_HEADER_MAX = 1024
_PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_PAX_REFUSED = f"a pax header longer than {PAX_HEADER_MAX} bytes"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

REMEDY_LINK = (
    "remove the symlink (the preload tree must be real directories on the host's own filesystem) and run again"
)
REMEDY_LAYOUT = "lay the source out as <manufacturer>[/<runtime-subdir>]/... (the operator image's lib tree)"


class StageError(Exception):
    """Bad input or an unsafe destination: ``path`` is what is wrong, ``remedy`` what to do."""

    def __init__(self, path: str | os.PathLike[str], problem: str, remedy: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        self.remedy = remedy
        super().__init__(f"{self.path}: {problem}; {remedy}")


# --- names ------------------------------------------------------------------------------------


def validate_subtree(subtree: str) -> tuple[str, ...]:
    """``nvidia/cuda-12`` → ``("nvidia", "cuda-12")``. Components are plain names (letters,
    digits, ``._+-``, not starting with a dot), so a subtree can neither leave the lib tree nor
    collide with staging's hidden work directories."""
    parts = tuple(subtree.split("/"))
    for part in parts:
        if not part or part.startswith(".") or not set(part) <= _SUBTREE_PART:
            raise StageError(
                subtree or "(empty)",
                "is not a subtree name (plain relative components, none empty or starting with '.')",
                "name a subtree such as amd, nvidia/cuda-12 or ascend/cann-8-910b",
            )
    return parts


def validate_member_name(name: str) -> str:
    """A tar member's name, normalised (``./amd/x`` → ``amd/x``, ``amd/`` → ``amd``; the archive
    root ``.`` → ``""``). Raises :class:`StageError` for an absolute name, a ``..`` component or a
    NUL byte, which would place the member outside the extraction directory, and for a name more
    than :data:`MAX_DEPTH` components deep."""
    if "\x00" in name:
        raise StageError(repr(name), "tar member name carries a NUL byte", "rebuild the archive")
    if name.startswith("/"):
        raise StageError(name, "tar member has an absolute name", "rebuild the archive with relative names (tar -C)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StageError(name, "tar member name climbs out with '..'", "rebuild the archive without '..' in names")
    if len(parts) > MAX_DEPTH:
        raise StageError(name[:200], f"tar member is nested more than {MAX_DEPTH} levels deep", "rebuild the archive")
    return "/".join(parts)


def link_stays_inside(member: str, target: str) -> bool:
    """Whether a symlink at relative path ``member`` pointing at ``target`` resolves, lexically,
    inside the directory ``member`` is relative to (a relative target that never climbs above it)."""
    if not target or target.startswith("/") or "\x00" in target:
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member), target))
    return resolved != ".." and not resolved.startswith("../")


# --- entries ----------------------------------------------------------------------------------

Kind = Literal["file", "dir", "link"]


@dataclass(frozen=True)
class Entry:
    """One thing in a subtree: a regular file (sha256), a directory, or a symlink (its target)."""

    kind: Kind
    mode: int
    digest: str
    origin: str | None = None  # where a source file's bytes are read from

    def signature(self) -> tuple[str, int, str]:
        return (self.kind, self.mode, self.digest)

    def describe(self, path: str) -> str:
        if self.kind == "file":
            return f"{path}  {self.mode:04o}  sha256:{self.digest}"
        if self.kind == "dir":
            return f"{path}/  {self.mode:04o}"
        return f"{path} -> {self.digest}"


def _sha256_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _sha256(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return _sha256_fd(fd)
    finally:
        os.close(fd)


def _kind_of(mode: int) -> str:
    for test, word in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return word
    return "special file"


# The permission bits a staged entry keeps, whatever the source: no set-id / sticky bits and no
# group/other write -- what the stdlib tar filter leaves of an archive member, applied to a directory
# source too, so a tree staged from a directory and from a tarball of it is the same tree (and neither
# route rewrites the other's modes on every run).
STAGED_MODE_MASK = 0o755


def staged_mode(mode: int) -> int:
    """``mode`` as staged: ``0o664`` → ``0o644``, ``0o4755`` → ``0o755``."""
    return stat.S_IMODE(mode) & STAGED_MODE_MASK


def _refuse_depth(directory: str, prefix: str) -> None:
    if prefix.count("/") >= MAX_DEPTH:
        raise StageError(
            directory, f"is nested more than {MAX_DEPTH} levels deep", "a preload tree is a few levels deep"
        )


def _scan_source(top: str, source_root: str) -> dict[str, Entry]:
    """Every entry under the source subtree ``top``. Relative symlinks that stay inside the subtree
    are kept as symlinks; one that leaves it is copied as the regular file it resolves to, provided
    that is still inside the source; anything else is refused."""
    entries: dict[str, Entry] = {}

    def walk(directory: str, prefix: str) -> None:
        _refuse_depth(directory, prefix)
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise StageError(directory, f"cannot be listed: {exc.strerror}", "make the source readable") from None
        for name in names:
            path = os.path.join(directory, name)
            rel = prefix + name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                if link_stays_inside(rel, target):
                    entries[rel] = Entry("link", 0, target)
                    continue
                real = os.path.realpath(path)
                if os.path.commonpath([real, source_root]) != source_root or not os.path.isfile(real):
                    raise StageError(
                        path,
                        f"is a symlink to {target}, which is not a regular file inside the source",
                        "replace it with the file it stands for (cp -L / tar -h)",
                    )
                entries[rel] = Entry("file", staged_mode(os.stat(real).st_mode), _sha256(real), real)
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = Entry("dir", staged_mode(st.st_mode), "")
                walk(path, rel + "/")
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = Entry("file", staged_mode(st.st_mode), _sha256(path), path)
            else:
                raise StageError(
                    path, f"is a {_kind_of(st.st_mode)}", "a preload tree holds only files, directories and symlinks"
                )

    walk(top, "")
    return entries


def _scan_dest(top: str) -> dict[str, Entry]:
    """Every entry under an existing destination subtree, read without following any symlink."""
    entries: dict[str, Entry] = {}

    def walk(directory: str, prefix: str) -> None:
        _refuse_depth(directory, prefix)
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            rel = prefix + name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                if not link_stays_inside(rel, target):
                    raise StageError(
                        path,
                        f"is a symlink to {target}, leaving the staged tree; refusing to follow or replace through it",
                        REMEDY_LINK,
                    )
                entries[rel] = Entry("link", 0, target)
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = Entry("dir", stat.S_IMODE(st.st_mode), "")
                walk(path, rel + "/")
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = Entry("file", stat.S_IMODE(st.st_mode), _sha256(path))
            else:
                raise StageError(path, f"is a {_kind_of(st.st_mode)} inside the staged tree", "remove it and run again")

    walk(top, "")
    return entries


# --- the plan -----------------------------------------------------------------------------------


def _display(path: str, entries: dict[str, Entry]) -> str:
    return path + "/" if entries[path].kind == "dir" else path


class SubtreePlan(BaseModel):
    """What staging one subtree changes. Paths are relative to the subtree; directories end in ``/``;
    ``.`` is the subtree directory itself (its mode)."""

    model_config = ConfigDict(extra="forbid")

    subtree: str
    source: str
    destination: str
    exists: bool
    added: list[str] = Field(default_factory=list)
    replaced: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    unchanged: int = 0

    _entries: dict[str, Entry] = PrivateAttr(default_factory=dict)
    _root_mode: int = PrivateAttr(default=0o755)
    _before: list[str] = PrivateAttr(default_factory=list)
    _after: list[str] = PrivateAttr(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.removed) or not self.exists

    def diff(self) -> dict[str, str]:
        """An Ansible diff entry: the subtree's listing before and after (path, mode, sha256)."""
        return {
            "before_header": self.destination if self.exists else f"{self.destination} (absent)",
            "after_header": self.destination,
            "before": "".join(line + "\n" for line in self._before),
            "after": "".join(line + "\n" for line in self._after),
        }


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _pods_identities(dest_root: Path) -> set[tuple[int, int]]:
    """(device, inode) of the pods directory on the host root and on this machine's ``/``."""
    found = set()
    for base in {dest_root, Path("/")}:
        with contextlib.suppress(OSError):
            st = os.stat(base / PODS_DIR)
            if stat.S_ISDIR(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found


def _refuse_pods(path: Path | str, st: os.stat_result, pods: set[tuple[int, int]]) -> None:
    if (st.st_dev, st.st_ino) in pods:
        raise StageError(
            path,
            "is the allocator's pods directory (/var/lib/gpustack/operator/pods), which staging never writes",
            "undo the mount or link that puts it on the path of the preload tree",
        )


def _check_destination(dest_root: Path, parts: tuple[str, ...], pods: set[tuple[int, int]]) -> bool:
    """Walk ``var/lib/gpustack/operator/lib/<parts>`` under ``dest_root`` with lstat. Refuse a
    symlink, a non-directory, or the pods directory at any level. True when the subtree exists."""
    path = dest_root
    for part in (*LIB_DIR.parts, *parts):
        path = path / part
        st = _lstat(path)
        if st is None:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise StageError(
                path,
                f"is a symlink (to {os.readlink(path)}); refusing to follow or write through it",
                REMEDY_LINK,
            )
        if not stat.S_ISDIR(st.st_mode):
            raise StageError(path, "exists and is not a directory", "move it out of the way and run again")
        _refuse_pods(path, st, pods)
    return True


def _refuse_pods_root(dest_root: Path) -> None:
    """The destination must not lie inside a pods directory: neither this machine's, nor one of
    any root the host root is nested in (its real path passing through ``var/lib/gpustack/operator/pods``)."""
    real = Path(os.path.realpath(dest_root))
    pods = PODS_DIR.parts
    parts = real.parts
    nested = any(parts[i : i + len(pods)] == pods for i in range(len(parts) - len(pods) + 1))
    real_pods = Path(os.path.realpath(Path("/") / PODS_DIR))
    if nested or real == real_pods or real.is_relative_to(real_pods):
        raise StageError(
            dest_root,
            "lies inside the allocator's pods directory (var/lib/gpustack/operator/pods), which staging never writes",
            "point host_root at the node's root filesystem",
        )


@dataclass
class StagePlan:
    """The outcome of :func:`plan`. Holds the extracted tarball (if any) until :meth:`close`; use it
    as a context manager."""

    source: str
    dest_root: str
    lib_dir: str
    subtrees: list[SubtreePlan]
    source_root: str
    _workdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def changed(self) -> bool:
        return any(s.changed for s in self.subtrees)

    def diff(self) -> list[dict[str, str]]:
        return [s.diff() for s in self.subtrees if s.changed]

    def close(self) -> None:
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> StagePlan:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _TarInfo(tarfile.TarInfo):
    """A member header as tarfile reads it, refusing a pax header over :data:`PAX_HEADER_MAX`."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _PAX_TYPES and info.size > PAX_HEADER_MAX:
            # ReadError, not a HeaderError: tarfile ends the member list quietly on some of those
            raise tarfile.ReadError(f"{_PAX_REFUSED} ({info.size})")
        return info


def _is_tarfile(path: Path) -> bool:
    """``tarfile.is_tarfile``, reading the first header the way :func:`_extract` reads them all."""
    try:
        with tarfile.open(path, "r:*", tarinfo=_TarInfo):
            return True
    except tarfile.TarError as exc:
        if _PAX_REFUSED in str(exc):
            raise StageError(
                path, f"cannot be read as an archive: it holds {_PAX_REFUSED}", "rebuild the archive"
            ) from None
        return False


def _extract(tarball: Path, into: Path) -> None:
    """Extract ``tarball`` into ``into`` after checking every member: names relative without
    ``..``, symlinks relative and inside the archive, hard links to other members, no devices,
    pipes or sockets. The stdlib ``tar`` filter runs as well; ownership is not restored."""

    def owner_free(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        checked = tarfile.tar_filter(member, dest)
        return checked.replace(uid=None, gid=None, uname=None, gname=None, deep=False)  # type: ignore[arg-type]

    try:
        with tarfile.open(tarball, "r:*", tarinfo=_TarInfo) as tar:
            members = []
            seen: set[str] = set()
            for member in tar:
                name = validate_member_name(member.name)
                if member.issym():
                    if not link_stays_inside(name, member.linkname):
                        raise StageError(
                            member.name,
                            f"tar member is a symlink to {member.linkname}, outside the archive",
                            "rebuild the archive with relative links that stay inside it (or tar -h)",
                        )
                elif member.islnk():
                    if not validate_member_name(member.linkname):
                        raise StageError(member.name, "tar member hard-links the archive root", "rebuild the archive")
                    member.linkname = validate_member_name(member.linkname)
                    if member.linkname not in seen:  # tarfile would raise KeyError on extraction
                        raise StageError(
                            member.name,
                            f"tar member hard-links {member.linkname}, which no earlier member of the archive is",
                            "rebuild the archive",
                        )
                elif not (member.isfile() or member.isdir()):
                    kind = {
                        tarfile.CHRTYPE: "character device",
                        tarfile.BLKTYPE: "block device",
                        tarfile.FIFOTYPE: "named pipe",
                    }.get(member.type, f"member of type {member.type!r}")
                    raise StageError(member.name, f"tar member is a {kind}", "a preload tree holds no special files")
                if not name:
                    continue
                member.name = name
                members.append(member)
                seen.add(name)
            tar.extractall(into, members=members, filter=owner_free)
    except StageError as exc:
        raise StageError(f"{tarball}: {exc.path}", exc.problem, exc.remedy) from None
    except _ARCHIVE_ERRORS as exc:
        raise StageError(
            tarball, f"cannot be extracted: {exc}", "provide a readable .tar / .tar.gz of the lib tree"
        ) from None
    except OSError as exc:
        raise StageError(
            tarball, f"cannot be extracted: {exc}", "check the archive and the temporary directory"
        ) from None


def _open_source(source: Path) -> tuple[str, tempfile.TemporaryDirectory[str] | None]:
    """The source tree's real path, extracting a tarball first (the directory is kept by the caller)."""
    if not os.path.lexists(source):
        raise StageError(source, "does not exist", "point src at the preload-library tree or a tarball of it")
    if source.is_dir():
        return os.path.realpath(source), None
    if not source.is_file():
        raise StageError(source, "is neither a directory nor a file", "point src at the tree or a tarball of it")
    try:
        is_tar = _is_tarfile(source)
    except OSError as exc:
        raise StageError(source, f"cannot be read: {exc.strerror}", "make it readable") from None
    except _ARCHIVE_ERRORS as exc:  # a compressed archive cut short or corrupt
        raise StageError(
            source, f"cannot be read as an archive: {exc}", "provide a readable .tar / .tar.gz of the lib tree"
        ) from None
    if not is_tar:
        raise StageError(source, "is a file but not a tar archive", "give a directory, a .tar or a .tar.gz")
    workdir = tempfile.TemporaryDirectory(prefix="gpustack-preload-")
    try:
        _extract(source, Path(workdir.name))
    except BaseException:
        workdir.cleanup()
        raise
    return os.path.realpath(workdir.name), workdir


def _source_subtree(source_root: str, subtree: str, parts: tuple[str, ...], shown: str) -> str:
    path = os.path.join(source_root, *parts)
    if not os.path.lexists(path):
        raise StageError(
            os.path.join(shown, subtree),
            f"the source has no {subtree}, which this node needs",
            f"{REMEDY_LAYOUT}, or limit manufacturers to those the source carries",
        )
    real = os.path.realpath(path)
    if os.path.commonpath([real, source_root]) != source_root:
        raise StageError(os.path.join(shown, subtree), "leaves the source through a symlink", REMEDY_LAYOUT)
    if not os.path.isdir(real):
        raise StageError(os.path.join(shown, subtree), "is not a directory", REMEDY_LAYOUT)
    return real


def _plan_subtree(
    source_root: str, shown_source: str, dest_root: Path, subtree: str, pods: set[tuple[int, int]]
) -> SubtreePlan:
    parts = validate_subtree(subtree)
    top = _source_subtree(source_root, subtree, parts, shown_source)
    wanted = _scan_source(top, source_root)
    root_mode = staged_mode(os.stat(top).st_mode)
    destination = dest_root / LIB_DIR / Path(*parts)
    exists = _check_destination(dest_root, parts, pods)
    present = _scan_dest(str(destination)) if exists else {}
    dest_root_mode = stat.S_IMODE(os.lstat(destination).st_mode) if exists else None

    added = [_display(p, wanted) for p in sorted(wanted) if p not in present]
    removed = [_display(p, present) for p in sorted(present) if p not in wanted]
    replaced = [
        _display(p, wanted) for p in sorted(wanted) if p in present and present[p].signature() != wanted[p].signature()
    ]
    if exists and dest_root_mode != root_mode:
        replaced.insert(0, ".")
    unchanged = sum(1 for p in wanted if p in present and present[p].signature() == wanted[p].signature())
    result = SubtreePlan(
        subtree=subtree,
        source=os.path.join(shown_source, subtree),
        destination=str(destination),
        exists=exists,
        added=added,
        replaced=replaced,
        removed=removed,
        unchanged=unchanged,
    )
    result._entries = wanted
    result._root_mode = root_mode
    if exists and dest_root_mode is not None:
        result._before = [f"./  {dest_root_mode:04o}"] + [present[p].describe(p) for p in sorted(present)]
    result._after = [f"./  {root_mode:04o}"] + [wanted[p].describe(p) for p in sorted(wanted)]
    return result


def _read_error(exc: OSError, fallback: Path) -> StageError:
    return StageError(
        exc.filename or fallback,
        f"cannot be read: {exc.strerror or exc}",
        "run as a user that can read the source and the destination (root on a node)",
    )


def plan(source: Path, dest_root: Path, subtrees: list[str]) -> StagePlan:
    """What staging ``subtrees`` from ``source`` under host root ``dest_root`` would change. A read:
    nothing is written on the host (a tarball source is extracted into a private temporary
    directory, removed by :meth:`StagePlan.close`). Raises :class:`StageError`."""
    source = Path(source)
    dest_root = Path(dest_root)
    if not dest_root.is_dir():
        raise StageError(dest_root, "is not a directory", "point host_root at the node's root filesystem")
    names = sorted(dict.fromkeys(subtrees))
    for name in names:
        validate_subtree(name)
    for a in names:
        for b in names:
            if b.startswith(a + "/"):
                raise StageError(b, f"is nested inside {a}, also asked for", "stage one or the other")
    _refuse_pods_root(dest_root)
    pods = _pods_identities(dest_root)
    try:
        source_root, workdir = _open_source(source)
    except OSError as exc:
        raise _read_error(exc, source) from None
    try:
        plans = [_plan_subtree(source_root, str(source), dest_root, name, pods) for name in names]
    except BaseException as exc:
        if workdir is not None:
            workdir.cleanup()
        if isinstance(exc, OSError):
            raise _read_error(exc, source) from None
        raise
    return StagePlan(
        source=str(source),
        dest_root=str(dest_root),
        lib_dir=str(dest_root / LIB_DIR),
        subtrees=plans,
        source_root=source_root,
        _workdir=workdir,
    )


# --- applying -------------------------------------------------------------------------------------


class StageResult(BaseModel):
    """What :func:`apply` did: ``applied`` subtrees were rewritten, ``unchanged`` left alone."""

    model_config = ConfigDict(extra="forbid")

    changed: bool
    applied: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    subtrees: list[SubtreePlan] = Field(default_factory=list)


@contextlib.contextmanager
def _dir_fd(name: str, parent: int | None, path: Path, pods: set[tuple[int, int]], create: bool) -> Iterator[int]:
    """Open directory ``name`` under the directory open at ``parent`` without following a symlink,
    creating it (0755) when missing and ``create``. ``path`` is only used in messages."""
    fd = -1
    created = False
    for attempt in range(2):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            break
        except FileNotFoundError:
            if not create or attempt:
                raise StageError(path, "disappeared while staging", "run again") from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
                created = True
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    raise StageError(
                        path,
                        f"is a symlink (to {os.readlink(name, dir_fd=parent)}); refusing to follow or write through it",
                        REMEDY_LINK,
                    ) from None
                raise StageError(
                    path, "exists and is not a directory", "move it out of the way and run again"
                ) from None
            raise
    try:
        _refuse_pods(path, os.fstat(fd), pods)
        if created:  # readable by the runtime whatever the umask
            os.fchmod(fd, 0o755)
        yield fd
    finally:
        os.close(fd)


def _write_tree(entries: dict[str, Entry], into: int) -> None:
    """Create ``entries`` under the (fresh, private) directory open at ``into``."""
    directories: list[tuple[str, int]] = []
    for rel in sorted(entries):
        entry = entries[rel]
        if entry.kind == "dir":
            os.mkdir(rel, 0o700, dir_fd=into)
            directories.append((rel, entry.mode))
        elif entry.kind == "link":
            os.symlink(entry.digest, rel, dir_fd=into)
        else:
            assert entry.origin is not None
            src = os.open(entry.origin, os.O_RDONLY | os.O_CLOEXEC)
            try:
                dst = os.open(rel, _NEW_FILE_FLAGS, 0o600, dir_fd=into)
                try:
                    digest = hashlib.sha256()
                    while chunk := os.read(src, _CHUNK):
                        digest.update(chunk)
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(dst, view) :]
                    if digest.hexdigest() != entry.digest:
                        raise StageError(entry.origin, "changed while it was being staged", "run again")
                    os.fchmod(dst, entry.mode)
                    os.fsync(dst)
                finally:
                    os.close(dst)
            finally:
                os.close(src)
    for rel, mode in reversed(directories):  # deepest first: a read-only directory is filled already
        os.chmod(rel, mode, dir_fd=into)


def _sweep(parent: int, leaf: str) -> None:
    """Remove work directories a killed earlier run left beside ``leaf``."""
    for name in os.listdir(parent):
        if name.startswith((f".{leaf}.staging-", f".{leaf}.old-")):
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)


def _apply_subtree(dest_root: Path, sub: SubtreePlan, pods: set[tuple[int, int]]) -> None:
    parts = validate_subtree(sub.subtree)
    chain = (*LIB_DIR.parts, *parts[:-1])
    leaf = parts[-1]
    with contextlib.ExitStack() as stack:
        parent = os.open(dest_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack.callback(os.close, parent)
        path = dest_root
        for name in chain:
            path = path / name
            parent = stack.enter_context(_dir_fd(name, parent, path, pods, create=True))
        _sweep(parent, leaf)
        work = f".{leaf}.staging-{secrets.token_hex(6)}"
        os.mkdir(work, 0o700, dir_fd=parent)
        pending: str | None = work
        try:
            with _dir_fd(work, parent, path / work, pods, create=False) as into:
                _write_tree(sub._entries, into)
                os.fchmod(into, sub._root_mode)
                os.fsync(into)
            aside: str | None = None
            try:
                st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISLNK(st.st_mode):
                    raise StageError(path / leaf, "is a symlink; refusing to follow or write through it", REMEDY_LINK)
                if not stat.S_ISDIR(st.st_mode):
                    raise StageError(path / leaf, "exists and is not a directory", "move it out of the way")
                _refuse_pods(path / leaf, st, pods)
                aside = f".{leaf}.old-{secrets.token_hex(6)}"
                os.rename(leaf, aside, src_dir_fd=parent, dst_dir_fd=parent)
            try:
                os.rename(work, leaf, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError:
                if aside is not None:
                    os.rename(aside, leaf, src_dir_fd=parent, dst_dir_fd=parent)
                raise
            pending = None
            os.fsync(parent)
            if aside is not None:
                shutil.rmtree(aside, dir_fd=parent)
        finally:
            if pending is not None:
                shutil.rmtree(pending, dir_fd=parent, ignore_errors=True)


def apply(staged: StagePlan) -> StageResult:
    """Make the destination match the plan: every subtree with a change is rebuilt beside itself
    and swapped in. A subtree without changes is not touched. Raises :class:`StageError`."""
    dest_root = Path(staged.dest_root)
    _refuse_pods_root(dest_root)
    pods = _pods_identities(dest_root)
    applied: list[str] = []
    unchanged: list[str] = []
    for sub in staged.subtrees:
        if not sub.changed:
            unchanged.append(sub.subtree)
            continue
        try:
            _apply_subtree(dest_root, sub, pods)
        except StageError:
            raise
        except OSError as exc:
            raise StageError(
                exc.filename or sub.destination,
                f"staging {sub.subtree} failed: {exc.strerror or exc}",
                "fix the destination (space, permissions, read-only filesystem) and run again",
            ) from None
        applied.append(sub.subtree)
    return StageResult(changed=bool(applied), applied=applied, unchanged=unchanged, subtrees=staged.subtrees)
