"""A preload source -- a directory or a tar archive -- read as a namespace of entries, writing nothing.

A plan is made from this namespace alone (issue 16: ``--dry-run`` and the module's check mode wrote a
tarball's members to ``$TMPDIR``, and a member placed through a chain of symlinks landed outside it).
The rules, one function each:

* **Names** (:func:`validate_member_name`): relative, no ``..``, no NUL, at most :data:`MAX_DEPTH` deep.
* **Placement** (:meth:`TarSource._place`): a member lies under directories only. A member whose path passes
  through an earlier symlink or file (``amd/s`` -> ``..``, then ``amd/s/x``) is refused: nothing is
  ever written through a link, so the question of where such a write would land never arises.
* **Links** (:func:`resolve`): a symlink's target is followed component by component through the
  archive's (or the directory's) own entries -- never ``os.path.realpath`` of the real filesystem, which
  silently stops resolving past PATH_MAX (the stdlib extraction filter before 3.12.11 relied on it,
  CVE-2025-4517) -- up to :data:`MAX_LINKS` links, the kernel's own limit. A target that is absolute,
  empty, or climbs above the root is outside; a hard link names an earlier regular-file member exactly.
* **Kinds**: regular files, directories and symlinks; no devices, pipes, sockets or sparse members.
* **Sizes** (:class:`Budget`): one file at most :data:`MEMBER_MAX` bytes, the whole at most
  :data:`TOTAL_MAX` and :data:`ENTRIES_MAX` entries, taken from the member header (or ``lstat``) before a
  byte of it is read; every copy counts (a hard link, a link copied as its file).

Bytes are read twice: to hash them when planning, and to copy them into the staging's private work
directory when applying (:meth:`Source.contents`), each time checked against the size and digest the
plan recorded, so an archive changed in between is refused rather than staged.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import hashlib
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal, Self

MIB = 1 << 20
# How deep a preload tree may nest (a real one is a handful of levels: amd/lib/rocm/...). Deeper is
# refused: the walks recurse once per level.
MAX_DEPTH = 64
# Symlinks followed while resolving one path: Linux's MAXSYMLINKS. A longer chain (or a loop) is refused,
# and so is a resolution of more than MAX_STEPS components in all (40 links of 2,000 ``./`` each, for
# each of thousands of links, would otherwise be minutes of work; a real one takes a dozen).
MAX_LINKS = 40
MAX_STEPS = 1024
# ... and all the resolutions of one source together: 10,000 links of 1,000 components each ("a/.."
# five hundred times) would take minutes; a real tree's few hundred links take a few thousand steps.
TOTAL_STEPS = 200_000
# One file, and the whole tree, as staged (a real preload library is a few MiB; the image's whole lib
# tree well under a GiB). Checked from the header before reading: a 10 KiB archive can claim a 1 TiB
# sparse member, which hashing reads as a terabyte of zeros and staging would write out in full.
MEMBER_MAX = 512 * MIB
TOTAL_MAX = 2048 * MIB
ENTRIES_MAX = 10_000
# A pax extended header longer than this is refused: Python's tarfile before 3.12.6 searches each one
# with a regular expression quadratic in a run of digits (CVE-2024-6232; 4,000 digits take 25 ms, 20,000
# a second, per header). A preload tree's headers carry a short path and link target (lib/libx.so.1).
PAX_HEADER_MAX = 1024
# A GNU long-name / long-link header longer than PATH_MAX is refused: tarfile reads it whole into memory.
NAME_HEADER_MAX = 4096
CHUNK = MIB
PATH_MAX = 4096

_PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_NAME_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
# What a damaged compressed archive raises besides tarfile.TarError: a truncated gzip or xz stream
# (EOFError), a corrupt deflate or xz block.
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

REMEDY_REBUILD = "rebuild the archive from the tree itself (tar -C <lib-tree> -cf lib.tar .)"
REMEDY_SIZE = (
    "a preload library is a few MiB: remove the oversized or sparse file from the source (it is not "
    "a library the allocator mounts) and build the source again"
)
REMEDY_LINK_OUT = "replace it with the file it stands for (cp -L / tar -h)"


class StageError(Exception):
    """Bad input or an unsafe destination: ``path`` is what is wrong, ``remedy`` what to do."""

    def __init__(self, path: str | os.PathLike[str], problem: str, remedy: str) -> None:
        self.path = printable(os.fspath(path))
        self.problem = printable(problem)
        self.remedy = remedy
        super().__init__(f"{self.path}: {self.problem}; {remedy}")


def printable(text: str) -> str:
    """``text`` as valid UTF-8: a byte a name could not decode (``surrogateescape``) shown as
    ``\\xff``. Ansible refuses a module's answer carrying a lone surrogate, which would hide the error."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def refuse_undecodable(where: str, text: str, what: str) -> None:
    """A name or link target that is not UTF-8 text is refused: staged, it could be reported nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StageError(
            where, f"{what} '{printable(text)}' is not UTF-8 text", "rename it (a preload tree's names are ASCII)"
        ) from None


# --- entries ----------------------------------------------------------------------------------

Kind = Literal["file", "dir", "link", "special"]
Parts = tuple[str, ...]


@dataclass(frozen=True)
class Entry:
    """One thing in a tree: a regular file (its sha256, empty when not read), a directory, a symlink
    (``digest`` is its target) or -- in a source, only to be refused -- a special file (``digest``
    says which kind)."""

    kind: Kind
    mode: int
    digest: str
    size: int = 0
    origin: str | None = None  # a directory source: the file the bytes are read from
    member: int | None = None  # a tar source: the index of the member holding them

    def signature(self) -> tuple[str, int, str]:
        return (self.kind, self.mode, self.digest)

    @property
    def key(self) -> str | int | None:
        """Where the bytes come from: one read serves every entry with the same key."""
        return self.origin if self.origin is not None else self.member

    def describe(self, path: str) -> str:
        if self.kind == "file":
            content = f"sha256:{self.digest}" if self.digest else f"{self.size} bytes (over the size cap, not read)"
            return f"{path}  {self.mode:04o}  {content}"
        if self.kind == "dir":
            return f"{path}/  {self.mode:04o}"
        return f"{path} -> {self.digest}"


# The permission bits a staged entry keeps, whatever the source: no set-id / sticky bits and no
# group/other write -- what the stdlib tar filter leaves of an archive member, applied to a directory
# source too, so a tree staged from a directory and from a tarball of it is the same tree (and neither
# route rewrites the other's modes on every run).
STAGED_MODE_MASK = 0o755


def staged_mode(mode: int) -> int:
    """``mode`` as staged: ``0o664`` → ``0o644``, ``0o4755`` → ``0o755``."""
    return stat.S_IMODE(mode) & STAGED_MODE_MASK


def special_kind(mode: int) -> str:
    """What a non-regular, non-directory, non-link file is, in words."""
    for test, word in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return word
    return "special file"


def _size(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n} bytes ({n / scale:.1f} {unit})"
    return f"{n} bytes"


@dataclass
class Budget:
    """The caps on what one staging reads or writes: entries, one file's size, the total (every copy
    counted). ``what`` names the whole in messages ("the archive", "the staged subtrees")."""

    what: str
    total: int = 0
    entries: int = 0

    def count(self, where: str) -> None:
        self.entries += 1
        if self.entries > ENTRIES_MAX:
            raise StageError(
                where,
                f"is entry {self.entries} of {self.what}, over the cap of {ENTRIES_MAX} entries",
                "a preload tree holds a few hundred files: stage only the lib tree",
            )

    def take(self, where: str, size: int) -> None:
        """Count a file of ``size`` bytes, refusing it over :data:`MEMBER_MAX` or the :data:`TOTAL_MAX`."""
        refuse_size(where, size)
        if self.total + size > TOTAL_MAX:
            raise StageError(
                where,
                f"is {_size(size)}, which takes {self.what} to {_size(self.total + size)}, over the cap of "
                f"{_size(TOTAL_MAX)} on the whole tree",
                REMEDY_SIZE,
            )
        self.total += size

    def fits(self, size: int) -> bool:
        """Count a file of ``size`` bytes when it is within both caps; ``False`` (nothing counted) when not."""
        if size > MEMBER_MAX or self.total + size > TOTAL_MAX:
            return False
        self.total += size
        return True


def refuse_size(where: str, size: int) -> None:
    """The cap on one file: over :data:`MEMBER_MAX` bytes (apparent size: holes count) is refused."""
    if size > MEMBER_MAX:
        raise StageError(where, f"is {_size(size)}, over the cap of {_size(MEMBER_MAX)} on one file", REMEDY_SIZE)


# --- names and links -----------------------------------------------------------------------------


def validate_member_name(name: str) -> str:
    """A tar member's name, normalised (``./amd/x`` → ``amd/x``, ``amd/`` → ``amd``; the archive
    root ``.`` → ``""``). Raises :class:`StageError` for an absolute name, a ``..`` component or a
    NUL byte, which would place the member outside the extraction directory, and for a name more
    than :data:`MAX_DEPTH` components deep."""
    if "\x00" in name:
        raise StageError(repr(name), "tar member name carries a NUL byte", "rebuild the archive")
    refuse_undecodable(name[:200], name, "tar member name")
    if name.startswith("/"):
        raise StageError(name, "tar member has an absolute name", "rebuild the archive with relative names (tar -C)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StageError(name, "tar member name climbs out with '..'", "rebuild the archive without '..' in names")
    if len(parts) > MAX_DEPTH:
        raise StageError(name[:200], f"tar member is nested more than {MAX_DEPTH} levels deep", "rebuild the archive")
    return "/".join(parts)


class LinkLoopError(Exception):
    """A path :func:`resolve` gave up on: more than :data:`MAX_LINKS` symlinks (a loop, or a chain that
    long), more than :data:`MAX_STEPS` components, deeper than :data:`MAX_DEPTH`, a target longer than
    :data:`PATH_MAX`, or the source's :class:`Steps` spent. The message says which."""


@dataclass
class Steps:
    """The components left to every :func:`resolve` of one source together (:data:`TOTAL_STEPS`)."""

    left: int = field(default_factory=lambda: TOTAL_STEPS)


Lookup = Callable[[Parts], "Entry | None"]


def resolve(
    lookup: Lookup, root: Parts, start: Parts, target: str, *, anchor: Parts | None = None, steps: Steps | None = None
) -> Parts | None:
    """Where ``target``, read in directory ``root + start``, leads: a path relative to ``root``, or
    ``None`` when it is empty, absolute, or climbs above ``root``.

    Component by component, as the kernel does, through ``lookup`` (the namespace's entries, a link
    never followed by it): a symlink met is replaced by its target, read from the directory holding
    it; a ``..`` after it climbs from where it led. A component the namespace lacks is a plain name (it
    cannot be a link). ``anchor`` (a directory source's own absolute path) lets an absolute target
    that names the root lead inside it. Raises :class:`LinkLoopError` past :data:`MAX_LINKS` links,
    :data:`MAX_STEPS` components or :data:`MAX_DEPTH` levels, on a target over :data:`PATH_MAX`, or
    when ``steps`` (shared by a source's resolutions) runs out: each bound keeps a hostile target's
    cost small.

    Never ``os.path.realpath``: it stops resolving a path past PATH_MAX and returns the rest as
    written, which a chain of long-named links exploits (issue 16)."""
    stack = list(start)
    pending: list[str] = []

    def push(link: str) -> bool:
        nonlocal stack
        if not link or "\x00" in link:
            return False
        if len(link) > PATH_MAX:
            raise LinkLoopError(f"a link target longer than {PATH_MAX} characters (PATH_MAX)")
        if link.startswith("/"):
            parts = [p for p in link.split("/") if p not in ("", ".")]
            if anchor is None or tuple(parts[: len(anchor)]) != anchor:
                return False
            stack = []
            link = "/".join(parts[len(anchor) :])
        pending.extend(reversed(link.split("/")))
        return True

    if not push(target):
        return None
    hops = taken = 0
    while pending:
        taken += 1
        if taken > MAX_STEPS:
            raise LinkLoopError(f"more than {MAX_STEPS} path components")
        if len(stack) > MAX_DEPTH:
            raise LinkLoopError(f"the path leads more than {MAX_DEPTH} levels deep")
        if steps is not None:
            steps.left -= 1
            if steps.left < 0:
                raise LinkLoopError(f"resolving the tree's links takes more than {TOTAL_STEPS} path components in all")
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return None
            stack.pop()
            continue
        node = lookup((*root, *stack, part))
        if node is not None and node.kind == "link":
            hops += 1
            if hops > MAX_LINKS:
                raise LinkLoopError(f"more than {MAX_LINKS} symlinks in a loop or chain")
            if not push(node.digest):
                return None
            continue
        stack.append(part)
    return tuple(stack)


def shown(text: str, limit: int = 200) -> str:
    """``text`` for a message: cut at ``limit`` characters (a hostile name can be thousands long)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def loop_problem(target: str, exc: LinkLoopError) -> str:
    """The problem of a symlink :func:`resolve` gave up on."""
    return f"is a symlink to {shown(target)}, which does not resolve: {exc}"


# --- sources ----------------------------------------------------------------------------------------


class Source(abc.ABC):
    """A preload tree to stage from, as a namespace: :meth:`lookup` (never following a link),
    :meth:`children`, and the bytes of its files."""

    path: Path
    anchor: Parts | None = None

    def __init__(self) -> None:
        self.steps = Steps()

    def resolve(self, root: Parts, start: Parts, target: str, *, anchored: bool = False) -> Parts | None:
        """:func:`resolve` through this source (``anchored``: an absolute target naming it leads in)."""
        return resolve(self.lookup, root, start, target, anchor=self.anchor if anchored else None, steps=self.steps)

    @abc.abstractmethod
    def lookup(self, parts: Parts) -> Entry | None:
        """The entry at ``parts`` (``()`` is the root), a link not followed; ``None`` when absent."""

    @abc.abstractmethod
    def children(self, parts: Parts) -> list[str]:
        """The names in directory ``parts``, sorted."""

    @abc.abstractmethod
    def where(self, parts: Parts) -> str:
        """``parts`` as a message names it."""

    @abc.abstractmethod
    def read(self, parts: Parts, entry: Entry) -> Entry:
        """The file ``entry`` at ``parts``, hashed (its size already counted)."""

    @abc.abstractmethod
    def contents(self, wanted: Iterable[Entry]) -> Iterator[tuple[Entry, Iterator[bytes]]]:
        """The bytes of each of ``wanted``'s files, once per :attr:`Entry.key`, checked against the
        size and digest the plan recorded (each chunk iterator to be consumed before the next)."""

    def close(self) -> None:  # noqa: B027 -- nothing held by default
        """Release what the source holds."""


def _changed(where: str) -> StageError:
    return StageError(where, "changed since it was planned", "run again (and leave the source alone meanwhile)")


def _checked(where: str, entry: Entry, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` passed through, failing unless they are ``entry``'s size and sha256 exactly."""
    digest = hashlib.sha256()
    seen = 0
    for chunk in chunks:
        seen += len(chunk)
        if seen > entry.size:
            raise _changed(where)
        digest.update(chunk)
        yield chunk
    if seen != entry.size or digest.hexdigest() != entry.digest:
        raise _changed(where)


def open_regular(path: str) -> int:
    """A read-only descriptor of the regular file ``path`` (a symlink, pipe or device refused without
    blocking on it)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StageError(path, f"is a {special_kind(os.fstat(fd).st_mode)}, not a regular file", "replace it")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fd_chunks(fd: int, limit: int) -> Iterator[bytes]:
    """At most ``limit + 1`` bytes of ``fd`` (one more than expected shows it grew)."""
    left = limit + 1
    while left > 0 and (chunk := os.read(fd, min(CHUNK, left))):
        left -= len(chunk)
        yield chunk


def hash_file(path: str, size: int) -> str:
    """The sha256 of regular file ``path``, which ``lstat`` said is ``size`` bytes (capped already)."""
    fd = open_regular(path)
    try:
        digest = hashlib.sha256()
        seen = 0
        for chunk in _fd_chunks(fd, size):
            seen += len(chunk)
            digest.update(chunk)
        if seen != size:
            raise StageError(path, "changed while it was being read", "run again")
        return digest.hexdigest()
    finally:
        os.close(fd)


def fs_lookup(base: str) -> Lookup:
    """A :data:`Lookup` over the real directory ``base``: ``lstat``, never following a link (modes
    as staged)."""

    def lookup(parts: Parts) -> Entry | None:
        path = os.path.join(base, *parts)
        try:
            st = os.lstat(path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise
        if stat.S_ISLNK(st.st_mode):
            return Entry("link", 0, os.readlink(path))
        if stat.S_ISDIR(st.st_mode):
            return Entry("dir", staged_mode(st.st_mode), "")
        if stat.S_ISREG(st.st_mode):
            return Entry("file", staged_mode(st.st_mode), "", st.st_size, origin=path)
        return Entry("special", 0, special_kind(st.st_mode))

    return lookup


class DirSource(Source):
    """A directory on this machine (the operator image's ``lib``). Its own path may be a symlink;
    nothing below it is followed except through :func:`resolve`."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.anchor = Path(os.path.realpath(path)).parts[1:]  # the root as given: the one realpath taken
        self._lookup = fs_lookup(str(path))

    def lookup(self, parts: Parts) -> Entry | None:
        return self._lookup(parts)

    def children(self, parts: Parts) -> list[str]:
        directory = self.where(parts)
        try:
            return sorted(os.listdir(directory))
        except OSError as exc:
            raise StageError(directory, f"cannot be listed: {exc.strerror}", "make the source readable") from None

    def where(self, parts: Parts) -> str:
        return os.path.join(str(self.path), *parts)

    def read(self, parts: Parts, entry: Entry) -> Entry:
        assert entry.origin is not None
        return Entry("file", entry.mode, hash_file(entry.origin, entry.size), entry.size, origin=entry.origin)

    def contents(self, wanted: Iterable[Entry]) -> Iterator[tuple[Entry, Iterator[bytes]]]:
        done: set[str] = set()
        for entry in wanted:
            if entry.origin is None or entry.origin in done:
                continue
            done.add(entry.origin)
            fd = open_regular(entry.origin)
            try:
                yield entry, _checked(entry.origin, entry, _fd_chunks(fd, entry.size))
            finally:
                os.close(fd)


# --- tar archives ---------------------------------------------------------------------------------


class _TarInfo(tarfile.TarInfo):
    """A member header as tarfile reads it, refusing -- before tarfile reads what follows it -- a pax
    header over :data:`PAX_HEADER_MAX`, a GNU long name over :data:`NAME_HEADER_MAX`, and sparse
    members (GNU ``S``, pax 1.0: their maps are read whole, unbounded, and the holes read back as data).
    The refusals are :class:`StageError`, which tarfile never catches (a ``TarError`` may end the member
    list quietly)."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _PAX_TYPES and info.size > PAX_HEADER_MAX:
            raise StageError(
                info.name[:200], f"a pax header of {info.size} bytes, over {PAX_HEADER_MAX}", REMEDY_REBUILD
            )
        if info.type in _NAME_TYPES and info.size > NAME_HEADER_MAX:
            raise StageError(
                info.name[:200], f"a GNU long-name header of {info.size} bytes, over {NAME_HEADER_MAX}", REMEDY_REBUILD
            )
        if info.type == tarfile.GNUTYPE_SPARSE:
            structs = getattr(info, "_sparse_structs", None)
            _refuse_sparse(info.name, structs[2] if isinstance(structs, tuple) and len(structs) == 3 else None)
        return info

    def _proc_gnusparse_10(self, member: tarfile.TarInfo, pax_headers: dict[str, str], _tar: object) -> None:
        """GNU sparse 1.0 (in a pax header): refused before its map is read from the data."""
        size = pax_headers.get("GNU.sparse.realsize", "")
        number = int(size) if size.isascii() and size.isdigit() and len(size) <= 30 else None
        _refuse_sparse(pax_headers.get("GNU.sparse.name", member.name), number)


def _refuse_sparse(name: str, size: int | None) -> None:
    where = name[:200]
    if size is not None:
        refuse_size(where, size)
    shown = "" if size is None else f" of {_size(size)}"
    raise StageError(
        where, f"tar member is a sparse file{shown}: a preload tree holds none", "rebuild the archive without --sparse"
    )


def _chunks(data: IO[bytes]) -> Iterator[bytes]:
    while chunk := data.read(CHUNK):
        yield chunk


def _member_kind(member: tarfile.TarInfo) -> str:
    return {
        tarfile.CHRTYPE: "character device",
        tarfile.BLKTYPE: "block device",
        tarfile.FIFOTYPE: "named pipe",
    }.get(member.type, f"member of type {member.type!r}")


class TarSource(Source):
    """A tar archive (plain, gzip, bzip2 or xz), read once into a namespace of entries -- names, kinds,
    modes, link targets, and each file's size and sha256 -- without writing anything."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.entries: dict[Parts, Entry] = {(): Entry("dir", 0o755, "")}
        self.names: dict[int, str] = {}  # member index -> its name, to check the archive did not change
        self._children: dict[Parts, list[str]] = {}
        try:
            self._read()
        except StageError as exc:
            if exc.path == str(path):
                raise
            raise StageError(f"{path}: {exc.path}", exc.problem, exc.remedy) from None
        except ARCHIVE_ERRORS as exc:
            raise StageError(
                path, f"cannot be read: {exc}", "provide a readable .tar / .tar.gz of the lib tree"
            ) from None
        except OSError as exc:
            raise StageError(path, f"cannot be read: {exc.strerror or exc}", "make it readable") from None
        for parts in self.entries:
            if parts:
                self._children.setdefault(parts[:-1], []).append(parts[-1])
        for names in self._children.values():
            names.sort()

    @contextlib.contextmanager
    def _opened(self) -> Iterator[tarfile.TarFile]:
        """The archive, opened as a regular file without blocking (tarfile's own open would hang on a
        pipe put in its place); its first header is read (and checked) here already."""
        fileobj: IO[bytes]
        with os.fdopen(open_regular(str(self.path)), "rb") as fileobj:
            try:
                tar = tarfile.open(fileobj=fileobj, mode="r:*", tarinfo=_TarInfo)  # noqa: SIM115 -- entered below
            except tarfile.ReadError:
                raise StageError(
                    self.path, "is a file but not a tar archive", "give a directory, a .tar or a .tar.gz"
                ) from None
            with tar:
                yield tar

    def _read(self) -> None:
        budget = Budget("the archive")
        with self._opened() as tar:
            for index, member in enumerate(tar):
                budget.count(member.name[:200])
                name = validate_member_name(member.name)
                parts = tuple(name.split("/")) if name else ()
                entry = self._entry(tar, index, member, name, budget)
                self._place(parts, entry, member.name)
                self.names[index] = name
        for parts, entry in self.entries.items():
            if entry.kind == "link":
                self._check_link(parts, entry.digest)

    def _entry(self, tar: tarfile.TarFile, index: int, member: tarfile.TarInfo, name: str, budget: Budget) -> Entry:
        if member.isdir():
            return Entry("dir", staged_mode(member.mode), "")
        if member.issym():
            if not member.linkname:
                raise StageError(member.name, "tar member is a symlink with an empty target", REMEDY_REBUILD)
            refuse_undecodable(member.name, member.linkname, "tar member's link target")
            if member.linkname.startswith("/"):
                raise StageError(
                    member.name,
                    f"tar member is a symlink to {shown(member.linkname)}, outside the archive",
                    "rebuild the archive with relative links that stay inside it (or tar -h)",
                )
            return Entry("link", 0, member.linkname)
        if member.islnk():
            return self._hard_link(member, name, budget)
        if member.isreg():
            budget.take(name, member.size)
            if member.sparse is not None:  # GNU sparse 0.0 / 0.1 (maps in the pax header, bounded)
                _refuse_sparse(member.name, member.size)
            data = tar.extractfile(member)
            assert data is not None
            with data:
                digest = hashlib.sha256()
                seen = 0
                for chunk in _chunks(data):
                    seen += len(chunk)
                    digest.update(chunk)
            if seen != member.size:
                raise StageError(member.name, "tar member is cut short", "provide the whole archive")
            return Entry("file", staged_mode(member.mode), digest.hexdigest(), member.size, member=index)
        raise StageError(
            member.name, f"tar member is a {_member_kind(member)}", "a preload tree holds no special files"
        )

    def _hard_link(self, member: tarfile.TarInfo, name: str, budget: Budget) -> Entry:
        target = validate_member_name(member.linkname)
        if not target:
            raise StageError(member.name, "tar member hard-links the archive root", REMEDY_REBUILD)
        node = self.entries.get(tuple(target.split("/")))
        if node is None or node.kind != "file":
            what = "no earlier member of the archive is" if node is None else f"is a {node.kind}, not a file"
            raise StageError(member.name, f"tar member hard-links {target}, which {what}", REMEDY_REBUILD)
        budget.take(name, node.size)  # staged as a copy: it counts again
        return node

    def _place(self, parts: Parts, entry: Entry, member: str) -> None:
        """Put ``entry`` at ``parts``: every directory above it a directory (made, mode 0755, when no
        member names it), never a symlink or a file -- nothing is ever placed through a link."""
        for depth in range(1, len(parts)):
            above = self.entries.get(parts[:depth])
            if above is None:
                self.entries[parts[:depth]] = Entry("dir", 0o755, "")
            elif above.kind != "dir":
                what = f"a symlink (to {shown(above.digest)})" if above.kind == "link" else "a file"
                raise StageError(
                    member,
                    f"tar member is placed through {'/'.join(parts[:depth])}, which is {what}; refusing to write "
                    "through it",
                    REMEDY_REBUILD,
                )
        if not parts and entry.kind != "dir":
            raise StageError(member, f"tar member names the archive root but is a {entry.kind}", REMEDY_REBUILD)
        before = self.entries.get(parts)
        if before is not None and before.kind == "dir" and entry.kind != "dir":
            raise StageError(
                member, f"tar member (a {entry.kind}) replaces a directory an earlier member made", REMEDY_REBUILD
            )
        self.entries[parts] = entry

    def _check_link(self, parts: Parts, target: str) -> None:
        try:
            inside = self.resolve((), parts[:-1], target)
        except LinkLoopError as exc:
            raise StageError("/".join(parts), f"tar member {loop_problem(target, exc)}", REMEDY_REBUILD) from None
        if inside is None:
            raise StageError(
                "/".join(parts),
                f"tar member is a symlink to {shown(target)}, outside the archive",
                "rebuild the archive with relative links that stay inside it (or tar -h)",
            )

    def lookup(self, parts: Parts) -> Entry | None:
        return self.entries.get(parts)

    def children(self, parts: Parts) -> list[str]:
        return self._children.get(parts, [])

    def where(self, parts: Parts) -> str:
        return f"{self.path}: {'/'.join(parts)}"

    def read(self, parts: Parts, entry: Entry) -> Entry:
        return entry

    def contents(self, wanted: Iterable[Entry]) -> Iterator[tuple[Entry, Iterator[bytes]]]:
        by_member = {e.member: e for e in wanted if e.member is not None}
        if not by_member:
            return
        try:
            with self._opened() as tar:
                for index, member in enumerate(tar):
                    entry = by_member.pop(index, None)
                    if entry is None:
                        if not by_member:
                            break
                        continue
                    where = f"{self.path}: {self.names.get(index, member.name)}"
                    try:
                        same = validate_member_name(member.name) == self.names.get(index)
                    except StageError:
                        same = False
                    if not same or not member.isreg() or member.size != entry.size:
                        raise _changed(where)
                    data = tar.extractfile(member)
                    assert data is not None
                    with data:
                        yield entry, _checked(where, entry, _chunks(data))
        except ARCHIVE_ERRORS as exc:
            raise StageError(self.path, f"cannot be read: {exc}", "run again with an intact archive") from None
        if by_member:
            raise _changed(str(self.path))


def open_source(path: Path) -> Source:
    """The source at ``path``: a directory, or a tar archive read into memory (nothing written)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise StageError(path, "is a dangling symlink", "point src at the preload-library tree") from None
        raise StageError(path, "does not exist", "point src at the preload-library tree or a tarball of it") from None
    if stat.S_ISDIR(st.st_mode):
        return DirSource(path)
    if not stat.S_ISREG(st.st_mode):
        raise StageError(path, "is neither a directory nor a file", "point src at the tree or a tarball of it")
    return TarSource(path)
