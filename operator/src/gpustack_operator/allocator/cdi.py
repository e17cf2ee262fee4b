"""The CDI injection strategy: how one container's visibility grant travels (reference rules §11).

``GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY`` picks the channel per manufacturer (supplement
§1.4 "CDI channel table", §4.4):

- ``envvar`` (the default, also when empty): the visibility variable (``NVIDIA_VISIBLE_DEVICES=…``),
  which the vendor's container runtime turns into device nodes;
- ``cdi-annotations``: the annotation ``cdi.k8s.io/gpustack-<manufacturer>: <kind>=<id>,…``, which the
  container engine resolves against the CDI specifications already on the node. A granted id no
  loaded specification names is refused (naming the id): there is no fallback to an index or ``all``;
- ``auto``: per container, ``envvar`` at the *first* of these that holds, else CDI (spec "Exclusive
  and shared"):

  1. the Pod sets ``runtimeClassName`` (its handler owns injection, its configuration is not ours);
  2. the container engine's configuration could not be read;
  3. the engine's default runtime handler is a vendor runtime (the variable already works there, and a
     CDI request would be a second injection path for one container);
  4. the engine does not resolve CDI requests;
  5. the loaded specifications do not name *every* granted accelerator (a request naming one they do
     not carry fails the whole container, so a partial match is no better than none).

Engine facts come from containerd's ``config.toml`` (``GPUSTACK_CONTAINERD_CONFIG_DIR``, default
``/etc/containerd``, plus the files its ``imports`` name): config version 3 (containerd 2.x) resolves
CDI by default, versions 1 and 2 (containerd 1.x) do not, and an explicit ``enable_cdi`` wins in
either. A missing or malformed configuration is *unknown*, which is fallback 2.

Specifications are read from ``/etc/cdi`` then ``/var/run/cdi`` (interfaces.md §6: directory order is
priority, so ``/var/run/cdi`` overrides). Both directories and the engine configuration are only ever
read, never written: the manufacturer's generator owns what a CDI name means, this operator only
writes the name of what one container was granted.

The view is read afresh by each :meth:`CdiResolver.decide` (specifications change as generators
run) and only as far as the decision needs it.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpustack_operator.host import HostRoot
from gpustack_operator.host.root import HostPathError, HostRootError
from gpustack_operator.host.safeyaml import YamlError, load_yaml
from gpustack_operator.manufacturers.respond import Channel, Code, RefusedError
from gpustack_operator.settings import SettingsError

ANNOTATION_PREFIX = "cdi.k8s.io/"
# The CDI library's AnnotationKey limit on the key's name part (interfaces.md §6), which is also the
# Kubernetes limit on an annotation key's name.
ANNOTATION_NAME_MAX = 63
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # in priority order: the later overrides the earlier
SPEC_SUFFIXES = (".json", ".yaml")  # the only files the CDI library reads
DEFAULT_CONTAINERD_CONFIG_DIR = "/etc/containerd"
CONTAINERD_CONFIG_FILE = "config.toml"
CONFIG_DIR_VAR = "GPUSTACK_CONTAINERD_CONFIG_DIR"
# Read caps: a generated NVIDIA spec of a large node (every driver library a mount) is tens of KiB,
# a containerd configuration a few; anything past these is not one of them.
SPEC_READ_LIMIT = 4 * 1024 * 1024
# A YAML specification is refused past this many nodes with its aliases expanded (an alias bomb) --
# ten times what a spec of SPEC_READ_LIMIT bytes could hold written out.
SPEC_MAX_NODES = 1_000_000
CONFIG_READ_LIMIT = 1024 * 1024
MAX_CONFIG_FILES = 32  # config.toml plus what its imports name, at most
# containerd's deepest real table is plugins."<id>".containerd.runtimes.<name>.options (6 levels); a
# document nested past this is no configuration containerd writes, and is not walked (the import merge
# would otherwise recurse once per level).
MAX_CONFIG_DEPTH = 64
# TOML integers are 64-bit signed (toml.io v1.0.0 "Integer": one that cannot be represented losslessly
# is an error); Python's tomllib takes any size, containerd's parser does not.
TOML_INT_MIN, TOML_INT_MAX = -(2**63), 2**63 - 1
# A default runtime handler is a vendor runtime when its name, or the basename of its BinaryName,
# contains one of these (case-insensitive): the container runtimes the accelerator vendors ship
# (nvidia-container-runtime, amd-container-runtime, ascend-docker-runtime, cambricon / mthreads /
# hygon (dcu) / iluvatar / metax / enflame / kunlun runtimes; ROCm's is named rocm in some installs).
VENDOR_RUNTIMES = frozenset(
    {"nvidia", "amd", "rocm", "ascend", "cambricon", "mthreads", "hygon", "iluvatar", "metax", "enflame", "kunlun"}
)
# Where the CRI plugin's table sits per config shape: version 3 (containerd 2.x), version 2
# (containerd 1.x), version 1 (containerd 1.x, no ``version`` key).
_CRI_TABLES = {
    3: ("plugins", "io.containerd.cri.v1.runtime"),
    2: ("plugins", "io.containerd.grpc.v1.cri"),
    1: ("plugins", "cri"),
}


class Strategy(StrEnum):
    ENVVAR = "envvar"
    CDI_ANNOTATIONS = "cdi-annotations"
    AUTO = "auto"


def strategy_var(manufacturer: str) -> str:
    return f"GPUSTACK_{manufacturer.upper()}_DEVICE_INJECTION_STRATEGY"


def parse_strategy(raw: str | None, manufacturer: str) -> Strategy:
    """The strategy a ``GPUSTACK_<M>_DEVICE_INJECTION_STRATEGY`` value names: empty or unset is
    ``envvar``; the values are exact (surrounding whitespace aside); anything else is a
    :class:`~gpustack_operator.settings.SettingsError` naming the variable and the three values."""
    value = (raw or "").strip()
    if not value:
        return Strategy.ENVVAR
    try:
        return Strategy(value)
    except ValueError:
        raise SettingsError(
            f"{strategy_var(manufacturer)}: {raw!r} is not a device injection strategy; "
            "set envvar (the default), cdi-annotations or auto"
        ) from None


@dataclass(frozen=True)
class CdiDecision:
    """The channel one container's grant travels by; ``kind`` is set when it is CDI; ``reason`` is what
    the allocator logs (the evidence of the fallback taken, or why CDI)."""

    channel: Channel
    kind: str | None
    reason: str


def annotation(manufacturer: str, kind: str, device_ids: list[str]) -> tuple[str, str]:
    """The CDI request for one container: ``("cdi.k8s.io/gpustack-<manufacturer>", "kind=id1,kind=id2")``.

    The key's name part is at most 63 characters (the CDI library's ``AnnotationKey`` and Kubernetes
    both refuse longer); a manufacturer name that would exceed it, or an empty grant, is a
    ``ValueError`` (a programming error: manufacturer names are short and a grant names one id)."""
    name = f"gpustack-{manufacturer}"
    if len(name) > ANNOTATION_NAME_MAX:
        raise ValueError(f"CDI annotation key name {name!r} is longer than {ANNOTATION_NAME_MAX} characters")
    if not device_ids:
        raise ValueError("a CDI request names at least one device")
    return ANNOTATION_PREFIX + name, ",".join(f"{kind}={device}" for device in device_ids)


# -- the container engine (containerd config.toml) -----------------------------------------------


@dataclass(frozen=True)
class EngineFacts:
    """What the engine's configuration says (``None`` from :func:`read_engine` means unknown)."""

    path: str
    version: int
    resolves_cdi: bool
    cdi_evidence: str  # "enable_cdi = true", "config version 3 resolves CDI by default", …
    default_runtime: str
    binary: str | None  # the default runtime's options.BinaryName, when configured


class _MalformedError(Exception):
    pass


def _show(value: object, limit: int = 80) -> str:
    """A value read from a file, for a message: bounded whatever it holds -- an integer of thousands
    of digits is named by its size (``str()`` of it raises past 4,300 digits), a string or a table is
    cut to ``limit`` characters."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not TOML_INT_MIN <= value <= TOML_INT_MAX:
        return f"a {value.bit_length()}-bit integer"
    if isinstance(value, dict):
        return f"a table of {len(value)} keys"
    if isinstance(value, list):
        return f"an array of {len(value)} values"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check_document(path: str, doc: dict[str, object]) -> None:
    """Refuse, as malformed TOML, what containerd's own parser refuses or no configuration holds: an
    integer outside TOML's 64-bit range, and nesting past :data:`MAX_CONFIG_DEPTH` (each checked
    without recursion, so the walk itself cannot be what fails)."""
    pending: list[tuple[object, tuple[str, ...]]] = [(doc, ())]
    while pending:
        value, where = pending.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            if not TOML_INT_MIN <= value <= TOML_INT_MAX:
                raise _MalformedError(
                    f"{path}: {_dotted(where)} is {_show(value)}, past TOML's 64-bit integers "
                    "(not TOML containerd reads)"
                )
            continue
        if not isinstance(value, dict | list):
            continue
        if len(where) >= MAX_CONFIG_DEPTH:
            raise _MalformedError(
                f"{path}: {_dotted(where)} is nested more than {MAX_CONFIG_DEPTH} tables or arrays deep, "
                "which no containerd configuration is"
            )
        items = value.items() if isinstance(value, dict) else ((f"[{i}]", v) for i, v in enumerate(value))
        pending.extend((child, (*where, str(key))) for key, child in items)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _dotted(keys: tuple[str, ...], most: int = 8) -> str:
    """Where a value sits, as TOML spells the key (``plugins."io.containerd.grpc.v1.cri".enable_cdi``,
    ``imports[0]``): at most ``most`` levels, each cut to 64 characters."""
    shown = ""
    for key in keys[:most]:
        if key.startswith("["):
            shown += key
            continue
        name = key if _BARE_KEY.fullmatch(key) else json.dumps(key[:64] + ("..." if len(key) > 64 else ""))
        shown += f".{name}" if shown else name
    return (shown + (f"... ({len(keys)} levels)" if len(keys) > most else "")) or "the document"


def _get(table: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(table, dict):
            return None
        table = table.get(key)
    return table


def _merge(base: dict[str, object], over: Mapping[str, object]) -> None:
    """containerd's import merge: tables merge key by key, anything else the later file replaces."""
    for key, value in over.items():
        current = base.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            _merge(current, value)
        else:
            base[key] = value


def _glob(host: HostRoot, pattern: str) -> list[str]:
    """Host paths matching ``pattern`` as containerd's ``filepath.Glob`` of an import finds them: any
    component may be a glob, and a path without one is kept only if it exists (a missing import is
    no error to containerd; one that exists but cannot be read is)."""
    paths = ["/"]
    for part in (p for p in pattern.split("/") if p):
        found: list[str] = []
        for base in paths:
            joined = base.rstrip("/") + "/"
            if not any(c in part for c in "*?["):
                found.append(joined + part)
                continue
            try:
                entries = host.listdir(base)
            except HostPathError:
                continue
            found.extend(joined + entry for entry in entries if fnmatch.fnmatchcase(entry, part))
        paths = found[: MAX_CONFIG_FILES + 1]
    return [p for p in paths if host.exists(p) or host.readlink(p) is not None]


def _load_toml(host: HostRoot, path: str) -> dict[str, object]:
    try:
        text = host.read_text(path, limit=CONFIG_READ_LIMIT)
    except HostPathError as exc:
        raise _MalformedError(str(exc)) from None
    try:
        doc: dict[str, object] = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError, OverflowError) as exc:
        raise _MalformedError(f"{path}: not TOML ({str(exc)[:200]})") from None
    _check_document(path, doc)
    return doc


def _version(path: str, doc: Mapping[str, object]) -> int:
    raw = doc.get("version", 1)
    if type(raw) is not int or raw < 1:
        raise _MalformedError(f"{path}: version {_show(raw)} is not a containerd config version")
    return raw


def _reshape(path: str, doc: dict[str, object], main_version: object) -> None:
    """An imported file in another config version, moved to the main file's (containerd migrates each
    import before merging): its CRI plugin table goes where the main version keeps it, and its
    ``version`` is dropped (the main file's is the configuration's)."""
    version = _version(path, doc)
    doc.pop("version", None)
    if type(main_version) is not int or main_version < 1:
        return  # the main file's own version check reports it
    src, dst = _CRI_TABLES[min(version, 3)][1], _CRI_TABLES[min(main_version, 3)][1]
    plugins = doc.get("plugins")
    if src == dst or not isinstance(plugins, dict) or src not in plugins:
        return
    table = plugins.pop(src)
    if isinstance(plugins.get(dst), dict) and isinstance(table, dict):
        _merge(plugins[dst], table)
    else:
        plugins[dst] = table


def _load_config(host: HostRoot, path: str) -> dict[str, object]:
    """``config.toml`` merged with the files its ``imports`` name (recursively, each once, at most
    :data:`MAX_CONFIG_FILES`), each import first moved to the main file's config version."""
    merged = _load_toml(host, path)
    seen = {path}
    pending = [(path, merged.pop("imports", None))]
    while pending:
        owner, imports = pending.pop(0)
        if imports is None:
            continue
        if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
            raise _MalformedError(f"{owner}: imports is not a list of paths")
        owner_dir = owner.rpartition("/")[0] or "/"
        for item in imports:
            pattern = item if item.startswith("/") else f"{owner_dir}/{item}"
            for imported in _glob(host, pattern):
                if imported in seen:
                    continue
                seen.add(imported)
                if len(seen) > MAX_CONFIG_FILES:
                    raise _MalformedError(f"{path}: imports name more than {MAX_CONFIG_FILES} files")
                doc = _load_toml(host, imported)
                _reshape(imported, doc, merged.get("version", 1))
                pending.append((imported, doc.pop("imports", None)))
                _merge(merged, doc)
    return merged


def read_engine(host: HostRoot, config_dir: str) -> EngineFacts | str:
    """The engine facts from ``<config_dir>/config.toml``, or why they are unknown (missing file,
    unreadable, not TOML, a key of the wrong type)."""
    path = "/" + "/".join(p for p in f"{config_dir}/{CONTAINERD_CONFIG_FILE}".split("/") if p)
    try:
        config = _load_config(host, path)
        return _engine_facts(path, config)
    except _MalformedError as exc:
        return str(exc)


def _engine_facts(path: str, config: dict[str, object]) -> EngineFacts:
    version = _version(path, config)
    shape = _CRI_TABLES.get(min(version, 3), _CRI_TABLES[3])
    # The table of the declared shape first, then the others ("check both shapes").
    tables = [shape, *(t for t in _CRI_TABLES.values() if t != shape)]

    resolves = version >= 3
    evidence = f"config version {version} " + ("resolves CDI by default" if resolves else "leaves CDI off by default")
    for keys in tables:
        explicit = _get(config, *keys, "enable_cdi")
        if explicit is None:
            continue
        if not isinstance(explicit, bool):
            raise _MalformedError(f"{path}: {'.'.join(keys)}.enable_cdi is {_show(explicit)}, not true or false")
        resolves = explicit
        evidence = f"{'.'.join(keys)}.enable_cdi = {'true' if explicit else 'false'}"
        break

    runtime: object = None
    runtimes: object = None
    default_options: object = None
    for keys in tables:
        containerd = _get(config, *keys, "containerd")
        if containerd is None:
            continue
        if not isinstance(containerd, dict):
            raise _MalformedError(f"{path}: {'.'.join(keys)}.containerd is not a table")
        runtime = containerd.get("default_runtime_name")
        runtimes = containerd.get("runtimes")
        default_options = _get(containerd, "default_runtime", "options")  # the pre-1.3 shape
        break
    if runtime is None:
        runtime = "runc"
    if not isinstance(runtime, str):
        raise _MalformedError(f"{path}: default_runtime_name is {_show(runtime)}, not a runtime handler name")
    options = _get(runtimes, runtime, "options")
    binary = _get(options, "BinaryName")
    if binary is None:
        binary = _get(default_options, "BinaryName")
    if binary is not None and not isinstance(binary, str):
        raise _MalformedError(f"{path}: BinaryName of runtime {_show(runtime)} is {_show(binary)}, not a path")
    return EngineFacts(path, version, resolves, evidence, runtime, binary or None)


def vendor_runtime(facts: EngineFacts, vendors: frozenset[str] = VENDOR_RUNTIMES) -> str | None:
    """The vendor marker the default runtime's name or binary carries, if any."""
    names = [facts.default_runtime.lower()]
    if facts.binary:
        names.append(facts.binary.rstrip("/").rpartition("/")[2].lower())
    for vendor in sorted(vendors):
        if any(vendor.lower() in name for name in names):
            return vendor
    return None


# -- the CDI specifications ----------------------------------------------------------------------


@dataclass
class SpecView:
    """The names the loaded specifications carry (``<kind>=<device>`` → the file that names it)."""

    names: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # named twice at one priority
    unreadable: list[str] = field(default_factory=list)  # "<path>: why" for each file / dir not read

    def missing(self, kind: str, device_ids: list[str]) -> list[str]:
        """The granted ids (each once, in grant order) no loaded specification names unambiguously."""
        out: list[str] = []
        for device in device_ids:
            if f"{kind}={device}" not in self.names and device not in out:
                out.append(device)
        return out


def _parse_spec(path: str, text: str) -> list[str]:
    """The qualified names a spec file defines; :class:`_MalformedError` for a file the engine cannot load."""
    try:
        if path.endswith(".json"):
            doc: object = json.loads(text)
        else:
            doc = load_yaml(text, max_nodes=SPEC_MAX_NODES)
    except YamlError as exc:
        raise _MalformedError(str(exc)) from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise _MalformedError(f"not JSON ({str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise _MalformedError("not a CDI specification (no mapping at the top)")
    kind, version = doc.get("kind"), doc.get("cdiVersion")
    if not isinstance(kind, str) or not kind:
        raise _MalformedError("no kind")
    if not isinstance(version, str) or not version:
        raise _MalformedError("no cdiVersion")
    devices = doc.get("devices", [])
    if not isinstance(devices, list):
        raise _MalformedError("devices is not a list")
    names: list[str] = []
    for device in devices:
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str) or not name:
            raise _MalformedError("a device without a name")
        names.append(f"{kind}={name}")
    return names


def load_specs(host: HostRoot) -> SpecView:
    """Read every ``.json`` / ``.yaml`` file of :data:`SPEC_DIRS`.

    A file in a later directory replaces the same-named file of an earlier one, even when the later
    copy cannot be read (reference rules §11). An absent directory holds nothing; one that cannot be
    listed, and a file that cannot be read, parsed, or lacks ``kind`` / ``cdiVersion``, is recorded as
    unreadable. A device named by files of a later directory overrides an earlier one; two files of one
    directory naming it is a conflict the CDI cache drops the device for (interfaces.md §6)."""
    view = SpecView()
    files: dict[str, tuple[int, str]] = {}  # file name -> (priority, host path)
    for priority, directory in enumerate(SPEC_DIRS):
        try:
            entries = host.listdir(directory)
        except HostPathError as exc:
            if exc.errno != errno.ENOENT:
                view.unreadable.append(f"{directory}: cannot be listed ({exc.strerror})")
            continue
        for entry in entries:
            if entry.endswith(SPEC_SUFFIXES):
                files[entry] = (priority, f"{directory}/{entry}")
    best: dict[str, tuple[int, list[str]]] = {}
    for priority, path in sorted(files.values()):
        try:
            names = _parse_spec(path, host.read_text(path, limit=SPEC_READ_LIMIT))
        except HostPathError as exc:
            view.unreadable.append(f"{path}: {exc.strerror}")
            continue
        except _MalformedError as exc:
            view.unreadable.append(f"{path}: {exc}")
            continue
        for name in names:
            held = best.get(name)
            if held is None or priority > held[0]:
                best[name] = (priority, [path])
            elif priority == held[0] and path not in held[1]:
                held[1].append(path)
    for name, (_, paths) in best.items():
        if len(paths) == 1:
            view.names[name] = paths[0]
        else:
            view.conflicts[name] = tuple(paths)
    return view


# -- the resolver -------------------------------------------------------------------------------


class CdiResolver:
    """One manufacturer's channel per container (built once per allocator, :func:`resolver_for`)."""

    def __init__(
        self,
        strategy: Strategy,
        kind: str,
        manufacturer: str,
        host: HostRoot,
        *,
        containerd_config_dir: str = DEFAULT_CONTAINERD_CONFIG_DIR,
        vendor_runtimes: frozenset[str] = VENDOR_RUNTIMES,
    ) -> None:
        self.strategy = strategy
        self.kind = kind
        self.manufacturer = manufacturer
        self.host = host
        self.containerd_config_dir = containerd_config_dir
        self.vendor_runtimes = vendor_runtimes

    def _view(self) -> HostRoot:
        """A fresh view of the node root: a HostRoot remembers resolved links for one pass, and the
        specifications and the configuration change between allocations."""
        try:
            return HostRoot(self.host.root)
        except HostRootError:
            return self.host

    def decide(self, device_ids: list[str], runtime_class: str | None) -> CdiDecision:
        """The channel for one container granted ``device_ids`` in a Pod with ``runtime_class``.

        Raises :class:`RefusedError` (``FAILED_PRECONDITION``) only under ``cdi-annotations``, when a
        granted id is named by no loaded specification."""
        var = strategy_var(self.manufacturer)
        if self.strategy is Strategy.ENVVAR:
            return CdiDecision(Channel.ENVVAR, None, f"{var} is envvar: the visibility variable carries the grant")
        host = self._view()
        if self.strategy is Strategy.CDI_ANNOTATIONS:
            return self._explicit(host, device_ids, var)
        return self._auto(host, device_ids, runtime_class)

    def _explicit(self, host: HostRoot, device_ids: list[str], var: str) -> CdiDecision:
        view = load_specs(host)
        missing = view.missing(self.kind, device_ids)
        if missing:
            names = ", ".join(f"{self.kind}={d}" for d in missing)
            detail = _why_missing(view, self.kind, missing)
            raise RefusedError(
                f"{var} is cdi-annotations but no loaded CDI specification names {names}{detail}; "
                f"generate the specification into {' or '.join(SPEC_DIRS)} (for NVIDIA: nvidia-ctk cdi generate), "
                f"or set {var} to auto or envvar",
                Code.FAILED_PRECONDITION,
            )
        return CdiDecision(Channel.CDI, self.kind, f"{var} is cdi-annotations: {self._named(view, device_ids)}")

    def _named(self, view: SpecView, device_ids: list[str]) -> str:
        files = sorted({view.names[f"{self.kind}={d}"] for d in device_ids})
        return f"the loaded CDI specifications name every granted accelerator ({', '.join(files)})"

    def _auto(self, host: HostRoot, device_ids: list[str], runtime_class: str | None) -> CdiDecision:
        def envvar(reason: str) -> CdiDecision:
            return CdiDecision(Channel.ENVVAR, None, f"auto keeps envvar: {reason}")

        if runtime_class:
            return envvar(
                f"the Pod sets runtimeClassName {runtime_class!r}, whose handler owns injection "
                "and whose configuration cannot be read here"
            )
        facts = read_engine(host, self.containerd_config_dir)
        if isinstance(facts, str):
            return envvar(f"the container engine configuration could not be read ({facts})")
        vendor = vendor_runtime(facts, self.vendor_runtimes)
        if vendor is not None:
            binary = f" (BinaryName {_show(facts.binary)})" if facts.binary else ""
            return envvar(
                f"the engine's default runtime handler {_show(facts.default_runtime)}{binary} is a vendor runtime "
                f"({vendor}): the variable already works there and a CDI request would be a second injection path"
            )
        if not facts.resolves_cdi:
            return envvar(f"the engine does not resolve CDI requests ({facts.path}: {facts.cdi_evidence})")
        view = load_specs(host)
        missing = view.missing(self.kind, device_ids)
        if missing:
            names = ", ".join(f"{self.kind}={d}" for d in missing)
            if view.unreadable:
                conflicts = _why_missing(SpecView(conflicts=view.conflicts), self.kind, missing)
                return envvar(
                    f"some CDI specifications could not be read ({'; '.join(view.unreadable)}) and none read "
                    f"carries {names}{conflicts}; a request naming a device the engine cannot find fails the container"
                )
            return envvar(f"no loaded CDI specification names {names}{_why_missing(view, self.kind, missing)}")
        return CdiDecision(Channel.CDI, self.kind, f"auto requests CDI: {self._named(view, device_ids)}")


def _why_missing(view: SpecView, kind: str, missing: list[str]) -> str:
    parts = []
    for device in missing:
        paths = view.conflicts.get(f"{kind}={device}")
        if paths:
            parts.append(f"{kind}={device} is defined by both {' and '.join(paths)}, which the engine refuses")
    if view.unreadable:
        parts.append(f"could not be read: {'; '.join(view.unreadable)}")
    return f" ({'; '.join(parts)})" if parts else ""


def resolver_for(
    manufacturer: str, kind: str | None, host: HostRoot, env: Mapping[str, str] | None = None
) -> tuple[CdiResolver | None, str | None]:
    """The resolver an allocator builds once: ``(None, None)`` for a manufacturer with no CDI kind (the
    variable has no effect there); ``(None, message)`` for an invalid strategy value (the node keeps
    envvar and the message is reported); else the resolver for the configured strategy."""
    if kind is None:
        return None, None
    source = os.environ if env is None else env
    try:
        strategy = parse_strategy(source.get(strategy_var(manufacturer)), manufacturer)
    except SettingsError as exc:
        return None, f"{exc}; the node keeps envvar"
    config_dir = (source.get(CONFIG_DIR_VAR) or "").strip() or DEFAULT_CONTAINERD_CONFIG_DIR
    return CdiResolver(strategy, kind, manufacturer, host, containerd_config_dir=config_dir), None


__all__ = [
    "ANNOTATION_PREFIX",
    "SPEC_DIRS",
    "VENDOR_RUNTIMES",
    "CdiDecision",
    "CdiResolver",
    "EngineFacts",
    "SpecView",
    "Strategy",
    "annotation",
    "load_specs",
    "parse_strategy",
    "read_engine",
    "resolver_for",
    "strategy_var",
    "vendor_runtime",
]
