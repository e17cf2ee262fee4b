"""Finding and loading a manufacturer's native library (supplement §4.5).

Search order for each library name: the manufacturer's own variables (e.g. ``CANN_HOME``, first the
ones documented as "searched first"), then ``LD_LIBRARY_PATH``, then the manufacturer's default
directories. Every directory is looked up under the host root first (the node's own copy — on a
direct run the root *is* ``/``), then, when the root is not ``/``, in this process's own filesystem
(the container's mounts: ``-v /usr/local/Ascend:/usr/local/Ascend``).

Loading is explicit by path (``ctypes.CDLL(path)``), so a library found under a host root is the one
loaded, never another copy the dynamic linker would pick by name.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


def _expand(host: HostRoot | None, pattern: str) -> Iterable[str]:
    """Expand a glob pattern of host paths; returns on-disk paths."""
    if host is None:
        yield from sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        return
    if not any(c in pattern for c in "*?["):
        try:
            yield str(host.path(pattern))
        except HostPathError:
            return
        return
    base = str(host.root).rstrip("/")
    yield from sorted(glob.glob(base + pattern))


def find_library(host: HostRoot, spec: LibrarySpec, environ: dict[str, str] | None = None) -> str | None:
    """The first existing file among ``spec.names`` in the candidate directories, or ``None``."""
    env = dict(os.environ if environ is None else environ)
    views: list[HostRoot | None] = [host] if host.is_live else [host, None]
    for directory in _candidate_dirs(spec, env):
        for view in views:
            for expanded in _expand(view, directory):
                for name in spec.names:
                    candidate = os.path.join(expanded, name)
                    if os.path.isfile(candidate):
                        return candidate
    return None


def load_library(path: str) -> ctypes.CDLL:
    """``dlopen`` by path; a failure is a :class:`LibraryLoadError` naming the path and the reason."""
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise LibraryLoadError(f"{path}: {exc}") from None
