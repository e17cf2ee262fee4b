"""Stage preload-library subtrees onto a host: plan (a pure read) and apply (spec: "Where the preload
libraries come from"; preflight side effects: the lib tree is never removed, ``.../operator/pods``
is never written).

The source is a directory, or a tar archive (optionally compressed), read as a namespace of entries
(:mod:`.source`): names, kinds, modes, link targets and each file's size and sha256. Either way it is
laid out like the destination: ``<manufacturer>[/<runtime-subdir>]/...``. Planning writes nothing
anywhere -- an archive is never extracted, so ``--dry-run`` and check mode leave ``$TMPDIR`` alone too
(issue 16) -- and applying writes the planned entries, and nothing else, into the subtree's private
work directory, one at a time, each through directory descriptors opened ``O_NOFOLLOW``. A member
placed through a symlink, a link leaving the archive (resolved link by link, never by
``realpath``), a device, pipe or sparse member, or a file over the size caps is refused from the
member list, before anything is written.

The destination of subtree ``S`` is ``<dest_root>/var/lib/gpustack/operator/lib/S``. Staging is

- **idempotent by checksum**: a subtree whose files (sha256), symlinks (target) and directories
  match the source, modes included, is left alone;
- **atomic per subtree**: the new subtree is built in a hidden directory beside it (same filesystem),
  the old one is renamed aside, the new one renamed into place, the old one deleted;
- **confined**: no component of the destination path (``var``, ``lib``, ``gpustack``, ``operator``,
  ``lib``, the subtree) may be a symlink — each is opened with ``O_NOFOLLOW`` relative to its parent
  — and a symlink inside an existing subtree is refused unless it resolves, link by link, inside that
  subtree (the kind staging itself writes). Nothing resolving to the allocator's ``pods`` directory
  is ever touched.

Subtrees not asked for are never removed, and neither is the tree itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from gpustack_operator.preload.source import (
    MAX_DEPTH,
    REMEDY_LINK_OUT,
    Budget,
    Entry,
    LinkLoopError,
    Parts,
    Source,
    StageError,
    Steps,
    fs_lookup,
    hash_file,
    loop_problem,
    open_source,
    printable,
    refuse_undecodable,
    resolve,
    shown,
    special_kind,
    staged_mode,
    validate_member_name,
)

LIB_DIR = PurePosixPath("var/lib/gpustack/operator/lib")
PODS_DIR = PurePosixPath("var/lib/gpustack/operator/pods")

_SUBTREE_PART = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

REMEDY_LINK = (
    "remove the symlink (the preload tree must be real directories on the host's own filesystem) and run again"
)
REMEDY_LAYOUT = "lay the source out as <manufacturer>[/<runtime-subdir>]/... (the operator image's lib tree)"


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


# --- entries ----------------------------------------------------------------------------------


def _refuse_depth(where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise StageError(where, f"is nested more than {MAX_DEPTH} levels deep", "a preload tree is a few levels deep")


def _scan_source(source: Source, top: Parts, budget: Budget) -> dict[str, Entry]:
    """Every entry under the source subtree ``top`` as it will be staged. A symlink whose target,
    resolved through the subtree (:func:`~.source.resolve`), stays inside it is kept as a symlink;
    one that leaves it is copied as the regular file it resolves to through the whole source,
    provided there is one; anything else is refused. Every file counts against ``budget``."""
    entries: dict[str, Entry] = {}

    def visit(rel: Parts) -> None:
        _refuse_depth(source.where((*top, *rel)), len(rel) + 1)
        for name in source.children((*top, *rel)):
            path = (*rel, name)
            where = source.where((*top, *path))
            refuse_undecodable(where, name, "the name")
            node = source.lookup((*top, *path))
            if node is None:
                raise StageError(where, "disappeared while it was being read", "run again")
            budget.count(where)
            key = "/".join(path)
            if node.kind == "dir":
                entries[key] = node
                visit(path)
            elif node.kind == "file":
                budget.take(where, node.size)
                entries[key] = source.read((*top, *path), node)
            elif node.kind == "link":
                refuse_undecodable(where, node.digest, "the link target")
                entries[key] = _source_link(source, top, path, node.digest, budget)
            else:
                raise StageError(
                    where, f"is a {node.digest}", "a preload tree holds only files, directories and symlinks"
                )

    visit(())
    return entries


def _source_link(source: Source, top: Parts, path: Parts, target: str, budget: Budget) -> Entry:
    where = source.where((*top, *path))
    try:
        if source.resolve(top, path[:-1], target) is not None:
            return Entry("link", 0, target)
        real = source.resolve((), (*top, *path[:-1]), target, anchored=True)
    except LinkLoopError as exc:
        raise StageError(where, loop_problem(target, exc), REMEDY_LINK_OUT) from None
    node = source.lookup(real) if real is not None else None
    if real is None or node is None or node.kind != "file":
        raise StageError(
            where,
            f"is a symlink to {shown(target)}, which is not a regular file inside the source",
            REMEDY_LINK_OUT,
        )
    budget.take(where, node.size)
    return source.read(real, node)


def _scan_dest(top: str, budget: Budget) -> dict[str, Entry]:
    """Every entry under an existing destination subtree, read without following any symlink. A
    symlink must resolve inside the subtree (the kind staging writes); a file is hashed while
    ``budget`` lasts (over it, or over the cap on one file, it is listed by size and differs)."""
    entries: dict[str, Entry] = {}
    lookup = fs_lookup(top)
    steps = Steps()

    def walk(directory: str, prefix: Parts) -> None:
        _refuse_depth(directory, len(prefix) + 1)
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            rel = (*prefix, name)
            key = "/".join(rel)
            st = os.lstat(path)
            budget.count(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                try:
                    inside = resolve(lookup, (), prefix, target, steps=steps) is not None
                except LinkLoopError:
                    inside = False
                if not inside:
                    raise StageError(
                        path,
                        f"is a symlink to {shown(target)}, leaving the staged tree; refusing to follow or replace "
                        "through it",
                        REMEDY_LINK,
                    )
                entries[key] = Entry("link", 0, target)
            elif stat.S_ISDIR(st.st_mode):
                entries[key] = Entry("dir", stat.S_IMODE(st.st_mode), "")
                walk(path, rel)
            elif stat.S_ISREG(st.st_mode):
                digest = hash_file(path, st.st_size) if budget.fits(st.st_size) else ""
                entries[key] = Entry("file", stat.S_IMODE(st.st_mode), digest, st.st_size)
            else:
                raise StageError(
                    path, f"is a {special_kind(st.st_mode)} inside the staged tree", "remove it and run again"
                )

    walk(top, ())
    return entries


# --- the plan -----------------------------------------------------------------------------------


def _display(path: str, entries: dict[str, Entry]) -> str:
    return printable(path + "/" if entries[path].kind == "dir" else path)


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

    def paths(self) -> list[str]:
        """Every path the subtree holds once staged, relative to it (sorted; directories without ``/``)."""
        return sorted(self._entries)

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
    """The outcome of :func:`plan`: what each subtree would change, and the source read to make it
    (held for :func:`apply`, which copies the bytes from it). Nothing was written. A context manager,
    for callers that scope it."""

    source: str
    dest_root: str
    lib_dir: str
    subtrees: list[SubtreePlan]
    source_root: str  # the directory or archive read (an archive is never extracted to plan)
    _source: Source | None = field(default=None, repr=False)

    @property
    def changed(self) -> bool:
        return any(s.changed for s in self.subtrees)

    def diff(self) -> list[dict[str, str]]:
        return [s.diff() for s in self.subtrees if s.changed]

    def close(self) -> None:
        if self._source is not None:
            self._source.close()

    def __enter__(self) -> StagePlan:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _source_subtree(source: Source, subtree: str, parts: Parts) -> Parts:
    """Where subtree ``parts`` is in the source: itself, or -- when it (or a directory above it) is a
    symlink -- the directory that resolves to inside the source."""
    shown = source.where(parts)
    try:
        top = source.resolve((), (), "/".join(parts), anchored=True)
    except LinkLoopError:
        top = None
    if top is None:
        raise StageError(shown, "leaves the source through a symlink", REMEDY_LAYOUT)
    node = source.lookup(top)
    if node is None:
        raise StageError(
            shown,
            f"the source has no {subtree}, which this node needs",
            f"{REMEDY_LAYOUT}, or limit manufacturers to those the source carries",
        )
    if node.kind != "dir":
        raise StageError(shown, "is not a directory", REMEDY_LAYOUT)
    return top


def _plan_subtree(
    source: Source, dest_root: Path, subtree: str, pods: set[tuple[int, int]], budget: Budget
) -> SubtreePlan:
    parts = validate_subtree(subtree)
    top = _source_subtree(source, subtree, parts)
    wanted = _scan_source(source, top, budget)
    root = source.lookup(top)
    root_mode = root.mode if root is not None else 0o755
    destination = dest_root / LIB_DIR / Path(*parts)
    exists = _check_destination(dest_root, parts, pods)
    present = _scan_dest(str(destination), Budget("the staged subtree")) if exists else {}
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
        source=os.path.join(str(source.path), subtree),
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
        result._before = [f"./  {dest_root_mode:04o}"] + [printable(present[p].describe(p)) for p in sorted(present)]
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
    nothing is written anywhere -- not on the host, not in ``$TMPDIR`` (a tarball is read member by
    member, never extracted; issue 16). Raises :class:`StageError`."""
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
        opened = open_source(source)
        budget = Budget("the staged subtrees")
        plans = [_plan_subtree(opened, dest_root, name, pods, budget) for name in names]
    except OSError as exc:
        raise _read_error(exc, source) from None
    return StagePlan(
        source=str(source),
        dest_root=str(dest_root),
        lib_dir=str(dest_root / LIB_DIR),
        subtrees=plans,
        source_root=str(source),
        _source=opened,
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


class _DirWalk:
    """Directory descriptors along one path below the private work directory ``into``, each opened
    ``O_NOFOLLOW`` relative to its parent: every write is resolved member by member against that
    directory, never through a path string the kernel would resolve (or a link it would follow)."""

    def __init__(self, into: int) -> None:
        self._names: list[str] = []
        self._fds = [into]

    def at(self, directory: Parts) -> int:
        """An open descriptor of ``directory`` (relative to ``into``)."""
        common = 0
        while common < min(len(self._names), len(directory)) and self._names[common] == directory[common]:
            common += 1
        while len(self._names) > common:
            self._names.pop()
            os.close(self._fds.pop())
        for name in directory[common:]:
            self._fds.append(os.open(name, _DIR_FLAGS, dir_fd=self._fds[-1]))
            self._names.append(name)
        return self._fds[-1]

    def close(self) -> None:
        self.at(())


def _write_tree(entries: dict[str, Entry], into: int, source: Source) -> None:
    """Create ``entries`` under the (fresh, private) directory open at ``into``: directories, links,
    then each file's bytes as :meth:`Source.contents` gives them (checked against the plan)."""
    paths = {rel: tuple(rel.split("/")) for rel in entries}
    order = sorted(entries, key=paths.__getitem__)
    walk = _DirWalk(into)
    try:
        for rel in order:
            entry, parts = entries[rel], paths[rel]
            if entry.kind == "dir":
                os.mkdir(parts[-1], 0o700, dir_fd=walk.at(parts[:-1]))
            elif entry.kind == "link":
                os.symlink(entry.digest, parts[-1], dir_fd=walk.at(parts[:-1]))
        copies: dict[str | int | None, list[str]] = {}
        for rel in order:
            if entries[rel].kind == "file":
                copies.setdefault(entries[rel].key, []).append(rel)
        files = [entries[rels[0]] for rels in copies.values()]
        for entry, chunks in source.contents(files):
            _write_copies(walk, [paths[rel] for rel in copies[entry.key]], entry.mode, chunks)
        for rel in reversed(order):  # deepest first: a read-only directory is filled already
            if entries[rel].kind == "dir":
                os.fchmod(walk.at(paths[rel]), entries[rel].mode)
    finally:
        walk.close()


def _write_copies(walk: _DirWalk, targets: list[Parts], mode: int, chunks: Iterator[bytes]) -> None:
    """Write ``chunks`` to every one of ``targets`` (new files, ``mode``, synced)."""
    fds: list[int] = []
    try:
        for parts in targets:
            fds.append(os.open(parts[-1], _NEW_FILE_FLAGS, 0o600, dir_fd=walk.at(parts[:-1])))
        for chunk in chunks:
            for fd in fds:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        for fd in fds:
            os.fchmod(fd, mode)
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _sweep(parent: int, leaf: str) -> None:
    """Remove work directories a killed earlier run left beside ``leaf``."""
    for name in os.listdir(parent):
        if name.startswith((f".{leaf}.staging-", f".{leaf}.old-")):
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)


def _apply_subtree(dest_root: Path, sub: SubtreePlan, pods: set[tuple[int, int]], source: Source) -> None:
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
                _write_tree(sub._entries, into, source)
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
        if staged._source is None:
            raise StageError(staged.source, "the plan holds no source to copy from", "plan again, then apply")
        try:
            _apply_subtree(dest_root, sub, pods, staged._source)
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


__all__ = [
    "LIB_DIR",
    "MAX_DEPTH",
    "PODS_DIR",
    "StageError",
    "StagePlan",
    "StageResult",
    "SubtreePlan",
    "apply",
    "plan",
    "staged_mode",
    "validate_member_name",
    "validate_subtree",
]
