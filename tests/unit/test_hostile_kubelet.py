"""Hostile KubeletConfiguration files (issue 16, "Hostile input"): an alias bomb ("billion laughs"), a
recursive alias, numbers too large to print, nesting thousands deep, and documents of every odd shape
-- lists where mappings are expected, scalars, null, numbers as keys, wrong types nested anywhere --
in every file ``preflight/kubelet.py`` reads: the ``--config`` file, the ``--config-dir`` drop-ins,
``/var/lib/kubelet/config.yaml``, the distribution trees, ``kubeadm-flags.env``, ``/proc/<pid>``.
Nothing escapes but :class:`ParseError` from the parser, nothing at all from :func:`read_kubelet`;
what cannot be read is an "unreadable" answer that says why in a bounded number of words."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.kubelet import (
    KubeletReading,
    Outcome,
    ParseError,
    Setting,
    clean_value,
    parse_kubelet_config,
    read_kubelet,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import BIN, copy_host
from tests.tools import kubelet_nodes as kn
from tests.unit.hostile import hostile_numbers, hostile_text
from tests.unit.nonregular import plant, within
from tests.unit.scratch import files_deadline, scratch

MESSAGE_MAX = 2_000  # what a reason may cost the document, whatever the file held


def billion_laughs(levels: int = 9, fanout: int = 9, key: str = "topologyManagerPolicy") -> str:
    lines = ["kind: KubeletConfiguration", 'a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]")
    lines.append(f"{key}: *a{levels}")
    return "\n".join(lines) + "\n"


def _parse_or_reason(text: str) -> dict[Setting, str] | str:
    try:
        return parse_kubelet_config(text)
    except ParseError as exc:
        return str(exc)


@pytest.mark.parametrize("key", ["topologyManagerPolicy", "containerRuntimeEndpoint", "kind", "apiVersion", "other"])
def test_an_alias_bomb_is_refused_before_anything_is_rendered(key: str) -> None:
    started = time.monotonic()
    got = within(Path("/nonexistent"), lambda: _parse_or_reason(billion_laughs(key=key)), deadline=10)
    assert time.monotonic() - started < 5
    assert isinstance(got, str), got
    assert "alias" in got and len(got) < MESSAGE_MAX


def test_a_modest_alias_is_still_read() -> None:
    text = "kind: KubeletConfiguration\nx: &p single-numa-node\ntopologyManagerPolicy: *p\n"
    assert parse_kubelet_config(text) == {Setting.POLICY: "single-numa-node"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("kind: &k [*k]\n", "alias"),  # a sequence holding itself
        ("topologyManagerPolicy: &m {a: *m}\n", "alias"),
        ("kind: 0x" + "F" * 10_000 + "\n", "integer"),
        ("apiVersion: 0x" + "F" * 10_000 + "\n", "integer"),
        ("topologyManagerPolicy: 0x" + "F" * 10_000 + "\n", "integer"),
        ("kind: " + "[" * 5_000 + "]" * 5_000 + "\n", "nesting depth"),  # libyaml's own limit
        ("topologyManagerPolicy: " + "{a: " * 3_000 + "1" + "}" * 3_000 + "\n", "nesting depth"),
        ("kind:" + "".join(f"\n{' ' * i}- " for i in range(0, 400, 2)) + "x\n", "nested more than"),
        ("kind: " + "x" * 500_000 + "\n", "kind is"),
        ("containerRuntimeEndpoint: {unix: sock}\n", "a mapping"),
        ("topologyManagerPolicy: [none]\n", "a sequence"),
        ("topologyManagerPolicy: 3\n", "an integer"),
        ("topologyManagerPolicy: 2001-01-01\n", "a date"),
        ("topologyManagerPolicy: !!binary aGk=\n", "binary"),
        ("- kind: KubeletConfiguration\n", "a sequence"),
        ("42\n", "an integer"),
        ("'just text'\n", "a string"),
        ("? [a, b]\n: c\n", "not valid YAML"),  # a key YAML can hold and Python cannot
        ("kind: KubeletConfiguration\n---\nkind: Other\n", "another document"),
        ("x: " + "*a " * 10 + "\n", "not valid YAML"),
        # tags their value cannot hold: PyYAML's safe constructors raised AttributeError, KeyError,
        # IndexError, ValueError out of the parser
        ("topologyManagerPolicy: !!timestamp x\n", "a value its tag cannot hold (AttributeError"),
        ("kind: !!bool maybe\n", "a value its tag cannot hold (KeyError"),
        ("apiVersion: !!int ''\n", "a value its tag cannot hold (IndexError"),
        ("other: !!float ''\n", "a value its tag cannot hold (IndexError"),
        ("other: !!int 0x\n", "a value its tag cannot hold (ValueError"),
        ("other: 2001-13-45\n", "a value its tag cannot hold (ValueError"),
        ("other: !!omap [1]\n", "not valid YAML"),
    ],
)
def test_odd_shapes_are_a_parse_error_in_words(text: str, words: str) -> None:
    got = within(Path("/nonexistent"), lambda: _parse_or_reason(text), deadline=10)
    assert isinstance(got, str), got
    assert words in got and len(got) < MESSAGE_MAX, got


@pytest.mark.parametrize(
    "text",
    [
        "1: 2\ntrue: false\nnull: x\n3.5: y\ntopologyManagerPolicy: best-effort\n",  # numbers and null as keys
        "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1\ntopologyManagerPolicy: best-effort\n",
        "topologyManagerPolicy: best-effort\nnested: {a: [1, {b: [2, 3]}], c: null}\n",
    ],
)
def test_odd_keys_beside_the_setting_do_not_hide_it(text: str) -> None:
    assert parse_kubelet_config(text) == {Setting.POLICY: "best-effort"}


# -- every shape YAML can take ----------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**64, max_value=2**13_000),  # past 64 bits, within what str() (and a dump) prints
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["KubeletConfiguration", "kubelet.config.k8s.io/v1beta1", "single-numa-node", "", " ", "~"]),
    st.binary(max_size=20),
    st.dates(),
)
_KEYS = st.one_of(
    st.sampled_from(["kind", "apiVersion", "containerRuntimeEndpoint", "topologyManagerPolicy", "x"]),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.text(max_size=10),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=20,
)
DOCUMENTS = st.one_of(_VALUES, st.dictionaries(_KEYS, _VALUES, max_size=6))


def _dump(doc: object) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, default_flow_style=None)


YAML_PIECES = st.sampled_from(
    [
        "kind: KubeletConfiguration\n",
        "apiVersion: kubelet.config.k8s.io/v1beta1\n",
        "topologyManagerPolicy: ",
        "containerRuntimeEndpoint: ",
        "&a ",
        "*a",
        "&b [*a, *a, *a, *a]\n",
        "<<: *a\n",
        "!!set ",
        "!!omap ",
        "!!binary ",
        "!!timestamp ",
        "!!python/tuple ",
        "? ",
        "- ",
        ": ",
        "[",
        "]",
        "{",
        "}",
        "\n",
        "  ",
        "---\n",
        "...\n",
        "0x" + "F" * 5000,
        "9" * 5000,
    ]
)
TEXTS = st.one_of(
    DOCUMENTS.map(_dump),
    hostile_text(),
    hostile_numbers(),
    st.lists(YAML_PIECES | st.text(max_size=6), max_size=40).map("".join),
    st.integers(1, 12).map(lambda n: billion_laughs(levels=n)),
)


@pytest.mark.hostile
@given(TEXTS)
@example(billion_laughs())
@example("kind: &k [*k]\n")
@example("topologyManagerPolicy: 0x" + "F" * 10_000 + "\n")
def test_the_parser_raises_only_parse_error_in_bounded_words(text: str) -> None:
    try:
        found = parse_kubelet_config(text)
    except ParseError as exc:
        assert 0 < len(str(exc)) < MESSAGE_MAX
        return
    assert set(found) <= set(Setting)
    assert all(isinstance(v, str) and v and v == clean_value(v) for v in found.values())


def _node(base: Path, files: dict[str, str | bytes | None], *, running: bool) -> Path:
    root = base / "node"
    if root.exists():
        shutil.rmtree(root)
    kn.base(root)
    if running:
        kn.process(
            root,
            kn.KUBELET_PID,
            ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubelet.d"],
        )
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.mkdir(exist_ok=True)
        elif isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    return root


def _check(reading: KubeletReading, quoted: int = 300) -> None:
    """Every answer well formed; a reason costs at most MESSAGE_MAX beyond the ``quoted`` characters
    of paths it names (a path comes from the kubelet's own command line, which may be that long)."""
    for setting in Setting:
        answer = reading.answer(setting)
        if answer.outcome is Outcome.NAMED:
            assert answer.value and answer.value == clean_value(answer.value) and answer.source
        elif answer.outcome is Outcome.UNREADABLE:
            assert answer.detail and answer.detail.startswith("/") and len(answer.detail) < MESSAGE_MAX + quoted
        elif answer.outcome is Outcome.CONFLICT:
            assert answer.conflict and len(answer.conflict) >= 2
    for source in reading.sources:
        assert source.error is None or 0 < len(source.error) < MESSAGE_MAX + quoted


FILE = st.one_of(st.none(), TEXTS)


@pytest.mark.hostile
@settings(deadline=files_deadline(7))  # seven files written and read (each may be libyaml's slowest shape)
@given(
    config=FILE, dropin=FILE, nested=FILE, standard=FILE, k3s=FILE, kubeadm_tree=FILE, env=FILE, running=st.booleans()
)
@example(
    config=billion_laughs(),
    dropin="- a\n",
    nested="3\n",
    standard=None,
    k3s=None,
    kubeadm_tree=None,
    env=None,
    running=True,
)
@example(
    config=None,
    dropin=None,
    nested=None,
    standard=billion_laughs(),
    k3s="[",
    kubeadm_tree="1: 2\n",
    env='A="',
    running=False,
)
def test_read_kubelet_never_raises_whatever_its_files_hold(
    config: str | None,
    dropin: str | None,
    nested: str | None,
    standard: str | None,
    k3s: str | None,
    kubeadm_tree: str | None,
    env: str | None,
    running: bool,
) -> None:
    files: dict[str, str | bytes | None] = {
        "var/lib/kubelet/config.yaml": config if running else standard,
        "etc/kubelet.d/10-a.conf": dropin,
        "etc/kubelet.d/sub/20-b.conf": nested,
        "etc/kubelet.d/30-dir.conf": None,
        f"{kn.K3S_TREE}/00-k3s-defaults.conf": k3s,
        "etc/kubernetes/kubelet.conf.d/10-x.conf": kubeadm_tree,
        "var/lib/kubelet/kubeadm-flags.env": env,
    }
    root = _node(
        scratch("hostile-kubelet"),
        {k: v for k, v in files.items() if v is not None or k.endswith("dir.conf")},
        running=running,
    )
    _check(read_kubelet(HostRoot(root)))


@pytest.mark.parametrize("where", ["config", "dropin", "cmdline", "comm", "standard", "tree", "env"])
def test_a_fifo_in_any_file_it_reads_is_unreadable_at_once(tmp_path: Path, where: str) -> None:
    running = where in ("config", "dropin", "cmdline", "comm")
    root = _node(
        tmp_path,
        {
            "etc/kubelet.d/10-a.conf": "topologyManagerPolicy: best-effort\n",
            f"{kn.K3S_TREE}/00-a.conf": "kind: KubeletConfiguration\n",
        },
        running=running,
    )
    rel = {
        "config": "var/lib/kubelet/config.yaml",
        "dropin": "etc/kubelet.d/20-b.conf",
        "cmdline": f"proc/{kn.KUBELET_PID}/cmdline",
        "comm": f"proc/{kn.KUBELET_PID}/comm",
        "standard": "var/lib/kubelet/config.yaml",
        "tree": f"{kn.K3S_TREE}/10-b.conf",
        "env": "var/lib/kubelet/kubeadm-flags.env",
    }[where]
    plant(root / rel, "fifo")
    reading = within(root, lambda: read_kubelet(HostRoot(root)))
    _check(reading)
    if where == "comm":  # the exe link is read instead; there is none here, so no kubelet is found
        assert reading.process is None
        return
    answer = reading.answer(Setting.ENDPOINT)
    assert answer.outcome is Outcome.UNREADABLE, answer
    assert answer.detail is not None and f"/{rel}" in answer.detail and "FIFO" in answer.detail


# -- through the command -----------------------------------------------------------------------------


def test_preflight_on_an_alias_bomb_config_prints_a_bounded_reason_promptly(tmp_path: Path) -> None:
    root = kn.kubeadm_node(copy_host("cpu-only-vm", tmp_path), running=False)
    # kind: what a refusal quotes -- today's head printed all 387 million nodes of it (327 MB, ~30 s)
    (root / "var/lib/kubelet/config.yaml").write_text(billion_laughs(key="kind"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [
                str(BIN / "gpustack-operator"),
                "dm",
                "preflight",
                "--detect-root",
                str(root),
                "--host-root",
                str(root),
                "--manufacturer",
                "nvidia",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("preflight still running after 60 s on an alias bomb")
    elapsed = time.monotonic() - started
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stdout) < 200_000 and len(proc.stderr) < 200_000
    doc = yaml.safe_load(proc.stdout)
    topology = doc["topology"]
    assert topology["policy"] == "unknown"
    assert "/var/lib/kubelet/config.yaml" in topology["note"] and "alias" in topology["note"]
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 30


_ARG_PATHS = st.one_of(
    hostile_text(),
    st.sampled_from(["/var/lib/kubelet/config.yaml", "/etc/kubelet.d", "relative.yaml", "..", "/", "/proc/1/cmdline"]),
    st.lists(st.sampled_from(["..", ".", "etc", "kubelet.d", "\x00", "\ud800", "x" * 300, ""]), max_size=12).map(
        "/".join
    ),
)


@pytest.mark.hostile
@settings(deadline=files_deadline(4))  # the proc files, a drop-in, the cwd link
@given(
    config=_ARG_PATHS,
    config_dir=_ARG_PATHS,
    extra=st.lists(hostile_text(), max_size=4),
    cwd=st.none() | _ARG_PATHS,
    dropin=FILE,
)
@example(config="\x00", config_dir="\ud800", extra=[], cwd=None, dropin=None)
@example(config="/proc/1/cmdline", config_dir="/", extra=["--config"], cwd="\x00", dropin=billion_laughs())
def test_a_running_kubelets_command_line_of_any_shape(
    config: str,
    config_dir: str,
    extra: list[str],
    cwd: str | None,
    dropin: str | None,
) -> None:
    root = _node(
        scratch("hostile-kubelet-argv"),
        {"etc/kubelet.d/10-a.conf": dropin} if dropin is not None else {},
        running=False,
    )
    argv = ["/usr/bin/kubelet", f"--config={config}", "--config-dir", config_dir, *extra]
    raw = b"".join(a.encode("utf-8", errors="surrogatepass") + b"\0" for a in argv)
    kn.write(root, f"proc/{kn.KUBELET_PID}/cmdline", raw)
    kn.write(root, f"proc/{kn.KUBELET_PID}/comm", "kubelet\n")
    if cwd is not None and "\x00" not in cwd:
        with contextlib.suppress(OSError):  # a name the filesystem refuses
            os.symlink(cwd.encode("utf-8", errors="surrogatepass"), root / f"proc/{kn.KUBELET_PID}/cwd")
    reading = read_kubelet(HostRoot(root))
    assert reading.process is not None and reading.process.pid == kn.KUBELET_PID
    _check(reading, quoted=len(raw) + len(cwd or ""))


def test_a_config_past_the_cap_is_unreadable_naming_the_cap(tmp_path: Path) -> None:
    padding = "# " + "x" * 78 + "\n"
    text = "kind: KubeletConfiguration\ntopologyManagerPolicy: best-effort\n" + padding * 1000  # 80 KB
    root = _node(tmp_path, {"var/lib/kubelet/config.yaml": text}, running=False)
    answer = read_kubelet(HostRoot(root)).answer(Setting.POLICY)
    assert answer.outcome is Outcome.UNREADABLE
    assert answer.detail == f"/var/lib/kubelet/config.yaml: larger than the {64 * 1024}-byte read cap"
