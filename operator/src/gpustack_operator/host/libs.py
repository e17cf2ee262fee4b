"""Finding and loading a manufacturer's native library (supplement §4.5).

Search order for each library name: the manufacturer's own variables (e.g. ``CANN_HOME``, first the
ones documented as "searched first"), then ``LD_LIBRARY_PATH``, then the manufacturer's default
directories. Every directory is looked up in the *node view* -- the filesystem the detect pass reads
as its own: ``/`` in production, where the vendor library is wherever the container's mounts
(``-v /usr/local/Ascend:/usr/local/Ascend``) or the vendor runtime (``--runtime nvidia``) put it; a
fixture tree in tests. Never in the preflight's host root: a library the container cannot load is
one its workloads cannot load either, and finding the host's copy would turn "your container cannot
see them" into "ok".

Loading is explicit by path (``ctypes.CDLL(path)``), so a library found in the view is the one
loaded, never another copy the dynamic linker would pick by name; the path is resolved inside the
view first, so nothing is loaded from outside the root it was given.

Calling into it: the ctypes bindings (``cndev.py``, ``mxsml.py``, ``ixml.py``, ``mtml.py``,
``hgml.py``) share :class:`Binding` — look an entry point up (a missing one is
:class:`MissingEntryPointError`), declare its signature, turn a non-success status into the binding's
:class:`LibraryCallError` — and :func:`c_text` for the C strings they return.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gpustack_operator.host.root import HostPathError, HostRoot


class LibraryLoadError(Exception):
    """A library was found but could not be loaded (wrong architecture, missing dependency…)."""


@dataclass(frozen=True)
class LibrarySpec:
    """Where one native library may live."""

    names: Sequence[str]  # e.g. ("libnvidia-ml.so.1", "libnvidia-ml.so")
    env_dirs: Sequence[str] = ()  # variables naming a directory, searched first, in order
    env_roots: Sequence[str] = ()  # variables naming a toolkit root; <root>/{lib64,lib,.} searched
    default_dirs: Sequence[str] = ()  # host paths; glob patterns allowed (/usr/local/Ascend/driver/lib64/*)


def _candidate_dirs(spec: LibrarySpec, environ: dict[str, str]) -> list[str]:
    dirs: list[str] = []
    for var in spec.env_dirs:
        if environ.get(var):
            dirs.append(environ[var])
    for var in spec.env_roots:
        root = environ.get(var)
        if root:
            dirs.extend([f"{root}/lib64", f"{root}/lib", root])
    for entry in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if entry:
            dirs.append(entry)
    dirs.extend(spec.default_dirs)
    return list(dict.fromkeys(dirs))


def _glob(view: HostRoot, pattern: str) -> list[str]:
    """Expand a glob pattern of host paths *inside the view*, component by component (each directory
    listed and each link resolved through :class:`HostRoot`, so a link pointing outside the root is
    re-rooted like any other read, never followed onto this machine's own files). Returns host
    paths, sorted."""
    parts = [p for p in pattern.split("/") if p]
    paths = ["/"]
    for part in parts:
        nxt: list[str] = []
        for base in paths:
            prefix = base.rstrip("/")
            if not any(c in part for c in "*?["):
                nxt.append(f"{prefix}/{part}")
                continue
            if not view.is_dir(base):
                continue
            try:
                names = view.listdir(base)
            except HostPathError:
                continue
            nxt.extend(f"{prefix}/{n}" for n in names if fnmatch.fnmatchcase(n, part))
        paths = nxt
    return sorted(paths)


def find_library(view: HostRoot, spec: LibrarySpec, environ: dict[str, str] | None = None) -> str | None:
    """The first existing file among ``spec.names`` in the candidate directories, looked up in the
    node view only (``/`` in production: this process's own mounts), or ``None``.

    The answer is the on-disk path the host path resolves to inside the view, every symlink already
    resolved there -- so what ``dlopen`` is handed is never outside the root it was given (a path
    with a NUL byte, an unreadable component or a link loop is simply not a candidate)."""
    env = dict(os.environ if environ is None else environ)
    for directory in _candidate_dirs(spec, env):
        if "\0" in directory or not directory.startswith("/"):
            continue  # a relative LD_LIBRARY_PATH entry means this process's cwd, not the node
        expanded = _glob(view, directory) if any(c in directory for c in "*?[") else [directory]
        for host_dir in expanded:
            for name in spec.names:
                try:
                    disk = view.path(f"{host_dir.rstrip('/')}/{name}")
                except HostPathError:
                    continue
                if disk.is_file():
                    return str(disk)
    return None


# Called with a library's path just before it is loaded: preflight's process isolation records it, so
# a library that kills its process (SIGSEGV/SIGBUS in the vendor's code) is named by the parent.
LOAD_HOOK: list[Callable[[str], None]] = []


def load_library(path: str) -> ctypes.CDLL:
    """``dlopen`` by path; a failure is a :class:`LibraryLoadError` naming the path and the reason."""
    for hook in LOAD_HOOK:
        hook(path)
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise LibraryLoadError(f"{path}: {exc}") from None


# -- calling into a loaded library -----------------------------------------------------------------


class LibraryCallError(Exception):
    """A call into a vendor library returned a status other than success.

    A binding subclasses it once, naming its status codes (``return_names``) and the C type a code
    outside them is reported as (``return_type``). ``call`` and ``code`` stay for callers that branch
    on them.
    """

    return_names: ClassVar[Mapping[int, str]] = {}
    return_type: ClassVar[str] = "int"
    library: ClassVar[str] = "library"  # "libcndev": how a missing entry point names the library

    def __init__(self, call: str, code: int, message: str | None = None) -> None:
        self.call = call
        self.code = code
        super().__init__(message or f"{call} returned {self.return_names.get(code, self.return_type)} ({code})")


class MissingEntryPointError(LibraryCallError):
    """The loaded library does not export this entry point (an older library or driver): the "no such
    API" case a caller may have to tell apart from the library refusing. A binding's own
    ``MissingSymbolError`` derives from this and from its error class, so catching either works."""

    def __init__(self, call: str) -> None:
        super().__init__(call, -1, f"{call} is not exported by this {self.library}")


class Binding:
    """One loaded library whose entry points return a status code, ``0`` meaning success.

    A binding names its error classes and the C type of its status; its methods declare each entry
    point's signature where they call it (``_call(name, argtypes, *args)``).
    """

    error: ClassVar[type[LibraryCallError]] = LibraryCallError
    missing: ClassVar[type[MissingEntryPointError]] = MissingEntryPointError
    status: ClassVar[type[ctypes.c_int] | type[ctypes.c_uint]] = ctypes.c_int

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib

    def has(self, name: str) -> bool:
        return hasattr(self._lib, name)

    def _fn(self, name: str, restype: Any, *argtypes: Any) -> Any:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise self.missing(name) from None
        fn.restype = restype
        fn.argtypes = list(argtypes)
        return fn

    def _call(self, name: str, argtypes: tuple[Any, ...], *args: Any) -> None:
        code = int(self._fn(name, self.status, *argtypes)(*args))
        if code != 0:
            raise self.error(name, code)


def c_text(raw: bytes) -> str:
    """A fixed-size C char buffer as text: up to the first NUL, stripped, undecodable bytes replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()
