"""The kubelet's configuration as the node states it: its CRI endpoint and its TopologyManager policy.

Both preflight readings that depend on the kubelet — the container runtime (supplement §2.4
"Runtime resolution") and the ``topology`` section (§2.8) — are read here, once, "off the same
command line and out of the same configuration" (preflight-operations, Reading the result). All reads
go through the :class:`~gpustack_operator.host.HostRoot`.

Where the configuration comes from (§2.4 resolution steps 1, 2 and 4):

1. **A running kubelet** is found in the host's process table (``<root>/proc/<pid>``, ``comm`` or the
   ``exe`` link named ``kubelet``; the lowest pid when there are several — the node's own kubelet is
   started by its init before anything a workload could add). Its command line is the whole story:
   ``--config`` names the file it loaded, ``--config-dir`` the drop-ins merged over that file, and a
   setting on the command line overrides both. Files it did not name are never read — a file at a
   standard path is this node's kubelet's only if this node's kubelet reads it.
2. **No kubelet running** (a machine before it joins a cluster, or a distribution such as k3s that
   embeds the kubelet in its agent process): ``/var/lib/kubelet/kubeadm-flags.env``
   (``KUBELET_KUBEADM_ARGS``), then ``/var/lib/kubelet/config.yaml``, then the distribution's own
   ``kubelet.conf.d`` tree — in that order, the first source naming a setting wins.
4. **No host process table** (``<root>/proc/1`` absent: a host root mounted without the host's
   ``/proc``): nothing is read at all, because nothing can say which kubelet runs here.

The distribution trees (a node carries at most one of these in practice):

* ``/etc/kubernetes/kubelet.conf.d`` — the drop-in directory the Kubernetes documentation uses
  for ``--config-dir`` ("Set Kubelet Parameters Via A Configuration File", kubelet-conf-d);
* ``/var/lib/rancher/*/agent/etc/kubelet.conf.d`` — k3s (``…/k3s/…``, where k3s writes
  ``00-k3s-defaults.conf`` and copies a user's ``--kubelet-arg=config-dir`` into
  ``20-cli-config-dir/``; K3s docs "Kubelet Configuration Files") and RKE2 (``…/rke2/…``, its
  kubelet runs with ``--config-dir=/var/lib/rancher/rke2/agent/etc/kubelet.conf.d``).

A drop-in tree is merged the way the kubelet merges ``--config-dir`` (KEP-3983; kubernetes.io
"Kubelet Configuration Directory Merging"): every ``*.conf`` file in the tree, subdirectories
included, in lexical walk order, a later file overriding an earlier one. Two *trees* that name
different values are two configurations of which only one can be this node's: a conflict (§2.4 step
5; §2.8 "two distribution trees disagree"), never a pick.

A source that exists and cannot be read (unreadable, malformed YAML or env, not a
``KubeletConfiguration``) is never skipped: it may be the one that decides, so the setting it could
have named is answered "unreadable", naming the file and why.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.host import HostPathError, HostRoot

KUBELET = "kubelet"
PROC = "/proc"
INIT = "/proc/1"
KUBEADM_FLAGS_ENV = "/var/lib/kubelet/kubeadm-flags.env"
KUBEADM_ARGS_VARIABLE = "KUBELET_KUBEADM_ARGS"
STANDARD_CONFIG = "/var/lib/kubelet/config.yaml"
KUBEADM_DROPIN_TREE = "/etc/kubernetes/kubelet.conf.d"
RANCHER_PARENT = "/var/lib/rancher"
RANCHER_TREE_SUFFIX = "agent/etc/kubelet.conf.d"
DROPIN_SUFFIX = ".conf"
KUBELET_API_GROUP = "kubelet.config.k8s.io/"
KUBELET_KIND = "KubeletConfiguration"

# A KubeletConfiguration is a few KiB (kubeadm's is 1.5); the cap only stops a hostile file -- and what
# libyaml takes to scan one (~1 s for 64 KiB of the worst shapes on a busy node).
CONFIG_LIMIT = 64 * 1024
# A KubeletConfiguration is a few hundred YAML nodes, a dozen levels at most. Past these, with every
# alias counted as the nodes it stands for, a file is refused before anything is built or rendered
# (host/safeyaml.py): nine levels of nine aliases ("billion laughs") stand for 387 million.
MAX_YAML_NODES = 100_000
MAX_YAML_DEPTH = 64
CMDLINE_LIMIT = 256 * 1024
MAX_DROPINS = 512  # per tree
MAX_TREE_DEPTH = 8
PID_DIGITS = 10  # pid_max is at most 2**22; a longer all-digit name under /proc is no process


class Setting(StrEnum):
    """The two settings preflight needs, by their KubeletConfiguration field names."""

    ENDPOINT = "containerRuntimeEndpoint"
    POLICY = "topologyManagerPolicy"

    @property
    def flag(self) -> str:
        return FLAG_FOR[self]


FLAG_CONFIG = "config"
FLAG_CONFIG_DIR = "config-dir"
FLAG_FOR = {Setting.ENDPOINT: "container-runtime-endpoint", Setting.POLICY: "topology-manager-policy"}
WANTED_FLAGS = frozenset({FLAG_CONFIG, FLAG_CONFIG_DIR, *FLAG_FOR.values()})
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SourceKind(StrEnum):
    COMMAND_LINE = "command-line"  # the running kubelet's argv
    CONFIG = "config"  # the file the running kubelet's --config names
    CONFIG_DIR = "config-dir"  # a drop-in under the running kubelet's --config-dir
    KUBEADM_FLAGS = "kubeadm-flags"  # /var/lib/kubelet/kubeadm-flags.env
    STANDARD_CONFIG = "standard-config"  # /var/lib/kubelet/config.yaml
    DISTRIBUTION = "distribution"  # a drop-in under a distribution's kubelet.conf.d tree


class Source(BaseModel):
    """One thing read. ``error`` set means it exists and could not be read (``values`` is then empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    path: str  # host path (for the command line: /proc/<pid>/cmdline)
    tree: str | None = None  # the drop-in tree this file belongs to
    values: dict[Setting, str] = Field(default_factory=dict)
    error: str | None = None

    def describe(self, setting: Setting) -> str:
        """Where a value came from, in words a reader can go and check."""
        if self.kind is SourceKind.COMMAND_LINE:
            return f"--{setting.flag} on the running kubelet's command line ({self.path})"
        if self.kind is SourceKind.KUBEADM_FLAGS:
            return f"--{setting.flag} in {KUBEADM_ARGS_VARIABLE} of {self.path}"
        return f"{setting.value} in {self.path}"


class Outcome(StrEnum):
    NAMED = "named"  # a source names it
    NOTHING = "nothing"  # every source was read, none names it
    UNREADABLE = "unreadable"  # a source that could decide could not be read
    CONFLICT = "conflict"  # two distribution trees name different values
    NOT_READ = "not-read"  # the host's process table is not visible: nothing was read


class Statement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    value: str
    source: str


class Answer(BaseModel):
    """One setting as the node states it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outcome: Outcome
    value: str | None = None  # NAMED
    source: str | None = None  # NAMED: where
    detail: str | None = None  # UNREADABLE: "<path>: <why>"; NOT_READ: why; NOTHING: what was read
    conflict: list[Statement] | None = None  # CONFLICT: every tree's statement


class KubeletProcess(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    argv: list[str]


class KubeletReading(BaseModel):
    """Everything read about the kubelet in one pass, and the two settings it answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process_table: bool  # the host's process table is visible under the root
    not_visible: str | None = None  # why not, when it is not
    process: KubeletProcess | None = None  # the running kubelet, when one is
    sources: list[Source] = Field(default_factory=list)  # in the order read
    endpoint: Answer
    policy: Answer

    def answer(self, setting: Setting) -> Answer:
        return self.endpoint if setting is Setting.ENDPOINT else self.policy


# -- parsers (pure; never raise on any input) ------------------------------------------------------


class ParseError(ValueError):
    """A file's contents could not be read as what it should be; the message says why."""


def split_cmdline(raw: bytes | str) -> list[str]:
    """``/proc/<pid>/cmdline``: arguments separated (and usually terminated) by NUL."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    args = text.split("\0")
    if args and args[-1] == "":
        args.pop()
    return args


def clean_value(value: str) -> str:
    """A setting's value as stated, without the blanks and quotes around it: ``"unix:///x.sock"``,
    ``'restricted'`` and ``restricted  `` are the value inside (a value copied out of a shell line
    keeps its quotes in a drop-in or ``kubeadm-flags.env``; a quoted YAML scalar keeps its blanks).
    What is left empty states nothing (reference rules §7: "a key with nothing after it counts as
    absent")."""
    start, end = 0, len(value)
    while True:  # indexes, not slices: a value of a million quotes is one pass, not a million copies
        while start < end and value[start].isspace():
            start += 1
        while end > start and value[end - 1].isspace():
            end -= 1
        if end - start < 2 or value[start] != value[end - 1] or value[start] not in "\"'":
            return value[start:end]
        start, end = start + 1, end - 1


def normalize_flag(name: str) -> str:
    """The kubelet normalises flag names with ``cliflag.WordSepNormalizeFunc``: ``_`` is ``-``."""
    return name.replace("_", "-")


def parse_flags(args: Sequence[str], wanted: Iterable[str] = WANTED_FLAGS) -> dict[str, str]:
    """The values of the ``wanted`` long flags in ``args`` (argv without argv[0]), pflag's way.

    ``--flag=value`` and ``--flag value`` both set a flag; a later setting overrides an earlier one;
    ``--`` ends the flags. A wanted flag with no value after it is left out (the kubelet would have
    refused to start). Unknown flags are skipped: a value-taking unknown flag written with a space
    leaves its value as a positional, which names no wanted flag.
    """
    want = frozenset(wanted)
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("--") or len(arg) == 2:
            continue
        name, eq, value = arg[2:].partition("=")
        name = normalize_flag(name)
        if name not in want:
            continue
        if not eq:
            if i >= len(args):
                continue
            value = args[i]
            i += 1
        found[name] = value
    return found


def parse_env_file(text: str) -> dict[str, str]:
    """A systemd ``EnvironmentFile=`` (what kubeadm writes ``kubeadm-flags.env`` for).

    ``KEY=VALUE`` lines; ``#`` and ``;`` start comment lines; a value may be double-quoted (``\\``
    escapes ``"`` ``\\`` ``$`` and a newline), single-quoted (literal), or bare (surrounding blanks
    dropped, a trailing ``\\`` continues the line). A later assignment wins. A line that is no
    assignment is ignored, as systemd ignores it; an unterminated quote raises :class:`ParseError`
    naming the line, because the value it opens cannot be known.
    """
    env: dict[str, str] = {}
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        line = lines[n].strip()
        lineno = n + 1
        n += 1
        if not line or line[0] in "#;":
            continue
        line = line.removeprefix("export ").lstrip()
        key, eq, rest = line.partition("=")
        key = key.strip()
        if not eq or not _ENV_KEY.fullmatch(key):
            continue
        rest = rest.lstrip()
        if rest[:1] in ('"', "'"):
            value, n = _quoted(rest[1:], rest[0], lines, n, lineno)
        else:
            value = rest
            while value.endswith("\\") and n < len(lines):
                value = value[:-1] + lines[n]
                n += 1
            value = value.strip()
        env[key] = value
    return env


def _quoted(rest: str, quote: str, lines: list[str], n: int, lineno: int) -> tuple[str, int]:
    """The quoted value starting at ``rest`` (after the opening quote), possibly over several lines;
    what follows the closing quote is ignored. Returns the value and the next line to read."""
    out: list[str] = []
    while True:
        i = 0
        while i < len(rest):
            c = rest[i]
            if c == quote:
                return "".join(out), n
            if quote == '"' and c == "\\" and i + 1 < len(rest):
                out.append(rest[i + 1])
                i += 2
                continue
            if quote == '"' and c == "\\":  # a backslash ending the line joins the next
                i += 1
                break
            out.append(c)
            i += 1
        else:
            out.append("\n")
        if n >= len(lines):
            raise ParseError(f"line {lineno}: the {quote} quote opened here is never closed")
        rest = lines[n]
        n += 1


def kubeadm_args(text: str) -> list[str]:
    """The kubelet arguments in a ``kubeadm-flags.env``: ``$KUBELET_KUBEADM_ARGS`` as the kubeadm
    systemd drop-in expands it in ``ExecStart`` — unquoted, so split at whitespace."""
    return parse_env_file(text).get(KUBEADM_ARGS_VARIABLE, "").split()


def _show(value: str, limit: int = 80) -> str:
    """A string read from a file, for a message: quoted, and cut to ``limit`` characters."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def _stated(value: object) -> str:
    """A value for a message: a string quoted and bounded; anything else by what it is."""
    from gpustack_operator.host.safeyaml import yaml_kind  # noqa: PLC0415 - see parse_kubelet_config

    return _show(value) if isinstance(value, str) else yaml_kind(value)


def parse_kubelet_config(text: str) -> dict[Setting, str]:
    """The settings a KubeletConfiguration file (or drop-in) states. Raises :class:`ParseError`.

    The kubelet needs ``apiVersion``/``kind`` on every file; a file without them is still read (it
    cannot name another kind), but one that names another kind or API group is refused. A setting
    with an empty value states nothing; one whose value is not a string is malformed. Whatever the
    file holds, what the error says is bounded (a value is quoted cut short, or named by its kind) and
    nothing else escapes (:func:`~gpustack_operator.host.safeyaml.load_yaml` refuses alias bombs,
    runaway nesting and tags their value cannot hold, before anything is built or rendered).

    PyYAML is imported here, by the first file read: a node with no kubelet configuration (and every
    preflight of one) never pays for it.
    """
    from gpustack_operator.host.safeyaml import YamlError, load_yaml, yaml_kind  # noqa: PLC0415

    try:
        doc = load_yaml(text, MAX_YAML_NODES, MAX_YAML_DEPTH)
    except YamlError as exc:
        raise ParseError(str(exc)) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ParseError(f"a {KUBELET_KIND} is a mapping, this is {yaml_kind(doc)}")
    kind, api = doc.get("kind"), doc.get("apiVersion")
    if kind is not None and kind != KUBELET_KIND:
        raise ParseError(f"kind is {_stated(kind)}, not {KUBELET_KIND}")
    if api is not None and not (isinstance(api, str) and api.startswith(KUBELET_API_GROUP)):
        raise ParseError(f"apiVersion is {_stated(api)}, not {KUBELET_API_GROUP}<version>")
    found: dict[Setting, str] = {}
    for setting in Setting:
        value = doc.get(setting.value)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ParseError(f"{setting.value} is {yaml_kind(value)}, not a string")
        if value := clean_value(value):
            found[setting] = value
    return found


def settings_from_flags(flags: dict[str, str]) -> dict[Setting, str]:
    """The settings a command line (or ``KUBELET_KUBEADM_ARGS``) states, values cleaned; an empty one
    states nothing."""
    cleaned = {s: clean_value(flags.get(s.flag, "")) for s in Setting}
    return {s: v for s, v in cleaned.items() if v}


# -- reading the host ------------------------------------------------------------------------------


def _why(exc: OSError) -> str:
    return exc.strerror or os.strerror(exc.errno or errno.EIO)


def process_table_visible(host: HostRoot) -> str | None:
    """``None`` when the host's process table is visible under the root, else why not."""
    if host.is_dir(INIT) and any(_is_pid(name) for name in _listdir(host, PROC)):
        return None
    return (
        f"{str(host.root).rstrip('/')}{INIT} is absent, so the host's process table is not visible (the node's / "
        "was mounted without its /proc; docker -v /:/host mounts it recursively, a non-recursive bind does not)"
    )


def _is_pid(name: str) -> bool:
    """A process directory's name: ASCII digits only (``"²".isdigit()`` holds, ``int("²")`` raises),
    short enough to be a pid."""
    return name.isascii() and name.isdigit() and len(name) <= PID_DIGITS


def _listdir(host: HostRoot, path: str) -> list[str]:
    try:
        return host.listdir(path)
    except HostPathError:
        return []


def _is_kubelet(host: HostRoot, pid: str) -> bool:
    """``comm`` names the executable a process was started as (what ``ps -e`` shows); where it cannot be
    read, the ``exe`` link names the file it runs."""
    try:
        return host.read_text(f"{PROC}/{pid}/comm", limit=256).strip() == KUBELET
    except HostPathError:
        pass
    exe = host.readlink(f"{PROC}/{pid}/exe")
    return exe is not None and posixpath.basename(exe.removesuffix(" (deleted)")) == KUBELET


def find_kubelet(host: HostRoot) -> int | None:
    """The running kubelet's pid; the lowest where there are several (the node's own kubelet is
    started by its init, before anything a workload could add), so every pass reads the same one."""
    pids = sorted(int(name) for name in _listdir(host, PROC) if _is_pid(name))
    return next((pid for pid in pids if _is_kubelet(host, str(pid))), None)


def _read(host: HostRoot, path: str, limit: int = CONFIG_LIMIT) -> str | None:
    """The file's text; ``None`` when absent; :class:`HostPathError` when present and unreadable."""
    if not host.exists(path) and host.readlink(path) is None:
        return None
    return host.read_text(path, limit)


def _config_source(host: HostRoot, kind: SourceKind, path: str, tree: str | None = None) -> Source | None:
    """A KubeletConfiguration file as a source; ``None`` when it does not exist."""
    try:
        text = _read(host, path)
    except HostPathError as exc:
        return Source(kind=kind, path=path, tree=tree, error=_why(exc))
    if text is None:
        return None
    try:
        return Source(kind=kind, path=path, tree=tree, values=parse_kubelet_config(text))
    except ParseError as exc:
        return Source(kind=kind, path=path, tree=tree, error=str(exc))


def walk_dropins(host: HostRoot, tree: str) -> list[str | HostPathError]:
    """Every ``*.conf`` under ``tree`` in the order the kubelet merges them — a lexical walk with
    subdirectories visited in place, as Go's ``filepath.WalkDir`` (which does not follow a link to a
    directory) — with a directory that could not be listed in its place, as the error: a drop-in in
    it may be the one that decides."""
    found: list[str | HostPathError] = []

    def walk(directory: str, depth: int) -> None:
        try:
            names = host.listdir(directory)
        except HostPathError as exc:
            found.append(exc)
            return
        for name in names:
            if len(found) >= MAX_DROPINS:
                return
            path = f"{directory}/{name}"
            if host.is_dir(path):
                if host.readlink(path) is None and depth < MAX_TREE_DEPTH:
                    walk(path, depth + 1)
            elif name.endswith(DROPIN_SUFFIX):
                found.append(path)

    walk(tree.rstrip("/"), 0)
    return found


def _tree_sources(host: HostRoot, kind: SourceKind, tree: str) -> list[Source]:
    """A drop-in tree as sources in merge order (earliest first)."""
    sources: list[Source] = []
    for entry in walk_dropins(host, tree):
        if isinstance(entry, HostPathError):
            sources.append(Source(kind=kind, path=entry.host_path, tree=tree, error=_why(entry)))
        elif (source := _config_source(host, kind, entry, tree)) is not None:
            sources.append(source)
    return sources


def distribution_trees(host: HostRoot) -> list[str]:
    """The distribution kubelet.conf.d trees present on the host (see the module docstring)."""
    trees = [KUBEADM_DROPIN_TREE] if host.is_dir(KUBEADM_DROPIN_TREE) else []
    for name in _listdir(host, RANCHER_PARENT):
        tree = f"{RANCHER_PARENT}/{name}/{RANCHER_TREE_SUFFIX}"
        if host.is_dir(tree):
            trees.append(tree)
    return trees


def _absolute(path: str, cwd: str | None) -> str:
    """A path from the kubelet's command line as a host path: a relative one taken from the kubelet's
    working directory (its ``/proc/<pid>/cwd`` link), which is itself taken from ``/`` -- so the
    answer is absolute even when that link is not (a real one always is)."""
    return "/" + posixpath.normpath(posixpath.join("/", cwd or "/", path)).lstrip("/")  # "//x" is "/x"


# -- precedence ------------------------------------------------------------------------------------


def first_named(chain: Sequence[Source], setting: Setting) -> Answer | None:
    """Walk ``chain`` from the highest precedence down: the first source naming ``setting`` answers;
    an unreadable source met first answers "unreadable" (it may be the one that decides). ``None``
    when no source names it."""
    for source in chain:
        if source.error is not None:
            return Answer(outcome=Outcome.UNREADABLE, detail=f"{source.path}: {source.error}")
        if setting in source.values:
            return Answer(outcome=Outcome.NAMED, value=source.values[setting], source=source.describe(setting))
    return None


def across_trees(trees: dict[str, list[Source]], setting: Setting) -> Answer | None:
    """Peer trees: each is one configuration (its files in merge order); two naming different values
    is a conflict; an unreadable one is unreadable; ``None`` when none names it."""
    named: list[Answer] = []
    for sources in trees.values():
        answer = first_named(list(reversed(sources)), setting)
        if answer is None:
            continue
        if answer.outcome is Outcome.UNREADABLE:
            return answer
        named.append(answer)
    if not named:
        return None
    if len({a.value for a in named}) > 1:
        statements = [Statement(value=a.value or "", source=a.source or "") for a in named]
        return Answer(outcome=Outcome.CONFLICT, conflict=statements)
    return named[0]


def read_kubelet(host: HostRoot) -> KubeletReading:
    """Read what the node states about its kubelet (see the module docstring for the order)."""
    not_visible = process_table_visible(host)
    if not_visible is not None:
        nothing = Answer(outcome=Outcome.NOT_READ, detail=not_visible)
        return KubeletReading(process_table=False, not_visible=not_visible, endpoint=nothing, policy=nothing)
    pid = find_kubelet(host)
    return _running(host, pid) if pid is not None else _not_running(host)


def _running(host: HostRoot, pid: int) -> KubeletReading:
    cmdline_path = f"{PROC}/{pid}/cmdline"
    try:
        raw = host.read_text(cmdline_path, limit=CMDLINE_LIMIT)
    except HostPathError as exc:
        source = Source(kind=SourceKind.COMMAND_LINE, path=cmdline_path, error=_why(exc))
        unreadable = Answer(outcome=Outcome.UNREADABLE, detail=f"{cmdline_path}: {source.error}")
        return KubeletReading(
            process_table=True,
            process=KubeletProcess(pid=pid, argv=[]),
            sources=[source],
            endpoint=unreadable,
            policy=unreadable,
        )
    argv = split_cmdline(raw)
    flags = parse_flags(argv[1:])
    sources = [Source(kind=SourceKind.COMMAND_LINE, path=cmdline_path, values=settings_from_flags(flags))]
    cwd = host.readlink(f"{PROC}/{pid}/cwd")
    read: list[str] = [f"its command line ({cmdline_path})"]
    config: Source | None = None
    if flags.get(FLAG_CONFIG):
        path = _absolute(flags[FLAG_CONFIG], cwd)
        config = _config_source(host, SourceKind.CONFIG, path) or Source(
            kind=SourceKind.CONFIG, path=path, error="named by the kubelet's --config, and absent"
        )
        read.append(f"the --config file {path}")
    dropins: list[Source] = []
    if flags.get(FLAG_CONFIG_DIR):
        tree = _absolute(flags[FLAG_CONFIG_DIR], cwd)
        if host.is_dir(tree):
            dropins = _tree_sources(host, SourceKind.CONFIG_DIR, tree)
        else:
            dropins = [
                Source(kind=SourceKind.CONFIG_DIR, path=tree, tree=tree, error="named by --config-dir, and absent")
            ]
        read.append(f"the --config-dir drop-ins under {tree}")
    # Highest precedence first: the command line, the drop-ins (last file first), the --config file.
    chain = [sources[0], *reversed(dropins), *([config] if config else [])]
    sources += [*([config] if config else []), *dropins]
    summary = f"the running kubelet (pid {pid}): " + ", ".join(read)

    def answer(setting: Setting) -> Answer:
        return first_named(chain, setting) or Answer(outcome=Outcome.NOTHING, detail=summary)

    return KubeletReading(
        process_table=True,
        process=KubeletProcess(pid=pid, argv=argv),
        sources=sources,
        endpoint=answer(Setting.ENDPOINT),
        policy=answer(Setting.POLICY),
    )


def _not_running(host: HostRoot) -> KubeletReading:
    sources: list[Source] = []
    try:
        text = _read(host, KUBEADM_FLAGS_ENV)
    except HostPathError as exc:
        sources.append(Source(kind=SourceKind.KUBEADM_FLAGS, path=KUBEADM_FLAGS_ENV, error=_why(exc)))
    else:
        if text is not None:
            try:
                values = settings_from_flags(parse_flags(kubeadm_args(text)))
                sources.append(Source(kind=SourceKind.KUBEADM_FLAGS, path=KUBEADM_FLAGS_ENV, values=values))
            except ParseError as exc:
                sources.append(Source(kind=SourceKind.KUBEADM_FLAGS, path=KUBEADM_FLAGS_ENV, error=str(exc)))
    standard = _config_source(host, SourceKind.STANDARD_CONFIG, STANDARD_CONFIG)
    if standard is not None:
        sources.append(standard)
    trees = {tree: _tree_sources(host, SourceKind.DISTRIBUTION, tree) for tree in distribution_trees(host)}
    for tree_sources in trees.values():
        sources.extend(tree_sources)
    looked = [KUBEADM_FLAGS_ENV, STANDARD_CONFIG, *(trees or ["a distribution's kubelet.conf.d tree (none present)"])]
    summary = "no kubelet is running, so there is no command line to read; looked instead at " + ", ".join(looked)
    fixed = [s for s in sources if s.kind is not SourceKind.DISTRIBUTION]

    def answer(setting: Setting) -> Answer:
        return (
            first_named(fixed, setting)
            or across_trees(trees, setting)
            or Answer(outcome=Outcome.NOTHING, detail=summary)
        )

    return KubeletReading(
        process_table=True, sources=sources, endpoint=answer(Setting.ENDPOINT), policy=answer(Setting.POLICY)
    )
