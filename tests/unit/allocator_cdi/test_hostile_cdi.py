"""Hostile input for the CDI resolver (issue 8 / issue 10): whatever ``config.toml``, its imports and
the CDI specification files hold -- garbage, cut short, nested 10,000 levels, NUL bytes, a real file
mutated -- ``auto`` returns a decision and ``cdi-annotations`` a decision or a
:class:`RefusedError`, never anything else."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gpustack_operator.allocator.cdi import CdiDecision, CdiResolver, Strategy, read_engine
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.respond import Channel, RefusedError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.allocator_cdi.specs import (
    CONTAINERD_V2_NVIDIA,
    CONTAINERD_V3,
    GPU_A,
    GPU_B,
    KIND,
    nvidia_json,
    nvidia_yaml,
    write,
)
from tests.unit.hostile import deep_nesting, hostile_text, mutated
from tests.unit.nonregular import plant, within
from tests.unit.scratch import files_deadline, scratch

pytestmark = pytest.mark.hostile

REAL_CONFIGS = [CONTAINERD_V3, CONTAINERD_V2_NVIDIA, 'imports = ["conf.d/*.toml"]\n' + CONTAINERD_V3]
REAL_SPECS = [nvidia_yaml(GPU_A, GPU_B), nvidia_json(GPU_A, GPU_B)]


def _real_or_mutated(texts: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(texts).flatmap(lambda t: st.one_of(st.just(t), mutated(t)))


TEXT = st.one_of(hostile_text(), deep_nesting())
CONFIG = st.one_of(TEXT, _real_or_mutated(REAL_CONFIGS))
SPEC = st.one_of(TEXT, _real_or_mutated(REAL_SPECS))


def _tree(base: Path, files: dict[str, str | None]) -> Path:
    root = base / "node"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for host_path, text in files.items():
        if text is not None:
            # what a hostile file holds on disk: its text as UTF-8, lone surrogates as the bytes they escape
            path = root / host_path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    return root


@settings(deadline=files_deadline(5 * 3))  # five files, each read by up to three decisions
@given(config=CONFIG, dropin=st.none() | CONFIG, etc=st.none() | SPEC, run=st.none() | SPEC, json=st.none() | SPEC)
@example(config="[" * 10_000, dropin=None, etc="[" * 10_000, run="- " * 10_000, json="[" * 10_000)
@example(config=CONTAINERD_V3, dropin=None, etc=nvidia_yaml(GPU_A, GPU_B), run=None, json=None)
def test_garbage_never_raises(
    config: str,
    dropin: str | None,
    etc: str | None,
    run: str | None,
    json: str | None,
) -> None:
    root = _tree(
        scratch("hostile-cdi"),
        {
            "/etc/containerd/config.toml": config,
            "/etc/containerd/conf.d/99-x.toml": dropin,
            "/etc/cdi/nvidia.yaml": etc,
            "/var/run/cdi/nvidia.yaml": run,
            "/var/run/cdi/other.json": json,
        },
    )
    host = HostRoot(root)
    for runtime_class in (None, "nvidia"):
        decision = CdiResolver(Strategy.AUTO, KIND, "nvidia", host).decide([GPU_A, GPU_B], runtime_class)
        assert isinstance(decision, CdiDecision)
        assert decision.reason
        assert (decision.kind is not None) == (decision.channel is Channel.CDI)
    try:
        explicit = CdiResolver(Strategy.CDI_ANNOTATIONS, KIND, "nvidia", host).decide([GPU_A], None)
    except RefusedError as exc:
        assert GPU_A in exc.message
    else:
        assert explicit.channel is Channel.CDI


def test_the_example_tree_is_decided(tmp_path: Path) -> None:
    # The property's inputs reach the decision (a CDI outcome is possible, not only fallbacks).
    write(tmp_path, {"/etc/containerd/config.toml": CONTAINERD_V3, "/etc/cdi/nvidia.yaml": nvidia_yaml(GPU_A, GPU_B)})
    decision = CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A, GPU_B], None)
    assert decision.channel is Channel.CDI


# -- issue 16: numbers too large to print, keys nested past the interpreter's recursion, FIFOs ------

HUGE_HEX = "0x" + "F" * 10_000
DEEP_KEY = "a" + ".a" * 3000
V2_CRI = '[plugins."io.containerd.grpc.v1.cri"'
ENGINE_CONFIGS = {
    "huge-version": (f"version = {HUGE_HEX}\n", None),
    "huge-enable-cdi": (f"version = 2\n{V2_CRI}]\nenable_cdi = {HUGE_HEX}\n", None),
    "huge-runtime-name": (f"version = 2\n{V2_CRI}.containerd]\ndefault_runtime_name = {HUGE_HEX}\n", None),
    "huge-binary": (
        f'version = 2\n{V2_CRI}.containerd]\ndefault_runtime_name = "x"\n'
        f"{V2_CRI}.containerd.runtimes.x.options]\nBinaryName = {HUGE_HEX}\n",
        None,
    ),
    "huge-containerd": (f'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\ncontainerd = {HUGE_HEX}\n', None),
    "huge-imported-version": ('imports = ["x.toml"]\nversion = 2\n', f"version = {HUGE_HEX}\n"),
    "deep-keys-both": (f'imports = ["x.toml"]\nversion = 3\n{DEEP_KEY} = 1\n', f"{DEEP_KEY} = 2\n"),
    "deep-keys-via-imports": (
        'imports = ["x.toml"]\nversion = 3\n[plugins."io.containerd.cri.v1.runtime"]\n' + f"{DEEP_KEY} = 1\n",
        f'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n{DEEP_KEY} = 2\n',
    ),
    "deep-keys-reshaped": (
        'imports = ["x.toml"]\nversion = 3\n[plugins."io.containerd.cri.v1.runtime"]\n' + f"{DEEP_KEY} = 1\n",
        f"version = 2\n{V2_CRI}]\n{DEEP_KEY} = 2\n",
    ),
}


@pytest.mark.parametrize("name", sorted(ENGINE_CONFIGS))
def test_an_engine_config_that_cannot_be_read_is_the_envvar_fallback(tmp_path: Path, name: str) -> None:
    main, imported = ENGINE_CONFIGS[name]
    write(
        tmp_path,
        {
            "/etc/containerd/config.toml": main,
            "/etc/containerd/x.toml": imported or "",
            "/etc/cdi/nvidia.yaml": nvidia_yaml(GPU_A, GPU_B),
        },
    )
    facts = read_engine(HostRoot(tmp_path), "/etc/containerd")
    decision = CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A], None)
    # Malformed (reference rules §11: "a missing or malformed config is unknown"): fallback 2, the
    # reason naming the file, bounded -- never an exception out of the resolver (Allocate INTERNAL).
    assert isinstance(facts, str)
    assert isinstance(decision, CdiDecision) and decision.channel is Channel.ENVVAR
    assert "the container engine configuration could not be read" in decision.reason
    assert "/etc/containerd/" in decision.reason
    assert len(decision.reason) < 2_000


@pytest.mark.parametrize("name", ["huge-version", "huge-enable-cdi", "huge-runtime-name", "huge-binary"])
def test_a_number_too_large_to_print_is_named_by_its_size(tmp_path: Path, name: str) -> None:
    write(tmp_path, {"/etc/containerd/config.toml": ENGINE_CONFIGS[name][0]})
    facts = read_engine(HostRoot(tmp_path), "/etc/containerd")
    assert isinstance(facts, str)
    assert "40000-bit integer" in facts and "F" * 50 not in facts


@pytest.mark.parametrize(
    ("extra", "readable"),
    [
        ("x = 9223372036854775807\ny = -9223372036854775808\n", True),  # TOML's own bounds
        ("x = 9223372036854775808\n", False),
        ("y = [[-9223372036854775809]]\n", False),
        ("z = 0x7FFFFFFFFFFFFFFF\n", True),
        ("[" + ".".join(["t"] * 30) + "]\nk = 1\n", True),  # deep, but within any real configuration's reach
        ("[" + ".".join(["t"] * 80) + "]\nk = 1\n", False),
    ],
)
def test_integers_and_depth_at_the_bounds(tmp_path: Path, extra: str, readable: bool) -> None:
    write(tmp_path, {"/etc/containerd/config.toml": CONTAINERD_V3 + extra})
    facts = read_engine(HostRoot(tmp_path), "/etc/containerd")
    assert isinstance(facts, str) != readable, facts
    if readable:
        assert not isinstance(facts, str) and facts.resolves_cdi and facts.default_runtime == "runc"


@pytest.mark.parametrize(
    "where", ["/etc/containerd/config.toml", "/etc/containerd/conf.d/x.toml", "/etc/cdi/a.yaml", "/var/run/cdi/b.json"]
)
@pytest.mark.parametrize("strategy", [Strategy.AUTO, Strategy.CDI_ANNOTATIONS])
def test_a_fifo_in_the_view_is_decided_at_once_and_named(tmp_path: Path, where: str, strategy: Strategy) -> None:
    write(
        tmp_path,
        {
            "/etc/containerd/config.toml": 'imports = ["conf.d/*.toml"]\n' + CONTAINERD_V3,
            "/etc/cdi/nvidia.yaml": nvidia_yaml(GPU_A, GPU_B),
        },
    )
    plant(tmp_path / where.lstrip("/"), "fifo")
    resolver = CdiResolver(strategy, KIND, "nvidia", HostRoot(tmp_path))
    try:
        decision = within(tmp_path, lambda: resolver.decide([GPU_A], None))
    except RefusedError as exc:  # pragma: no cover - only if the FIFO hid the one spec naming GPU_A
        pytest.fail(f"refused: {exc.message}")
    if strategy is Strategy.AUTO and where.startswith("/etc/containerd"):
        assert decision.channel is Channel.ENVVAR
        assert where in decision.reason and "FIFO" in decision.reason
    else:  # the spec naming GPU_A is read; the FIFO spec beside it is only unreadable
        assert decision.channel is Channel.CDI


def test_a_fifo_spec_that_would_name_the_grant_is_refused_by_name(tmp_path: Path) -> None:
    write(tmp_path, {"/etc/containerd/config.toml": CONTAINERD_V3})
    plant(tmp_path / "etc/cdi/nvidia.yaml", "fifo")
    with pytest.raises(RefusedError) as err:
        within(
            tmp_path,
            lambda: CdiResolver(Strategy.CDI_ANNOTATIONS, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A], None),
        )
    assert "/etc/cdi/nvidia.yaml" in err.value.message and "FIFO" in err.value.message
    decision = within(
        tmp_path, lambda: CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A], None)
    )
    assert decision.channel is Channel.ENVVAR and "/etc/cdi/nvidia.yaml" in decision.reason


# Whatever TOML holds: integers of any size and base, keys nested thousands deep (dotted, in table
# headers, in inline tables), spread over an import that the main file also names.
_TOML_INT = st.one_of(
    st.integers().map(str),
    st.integers(1, 20_000).map(lambda n: "0x" + "F" * n),
    st.integers(1, 20_000).map(lambda n: "0o" + "7" * n),
    st.integers(1, 20_000).map(lambda n: "0b" + "1" * n),
    st.integers(4000, 5000).map(lambda n: "9" * n),
    st.sampled_from(["inf", "-inf", "nan", "1e999", "-0", "true", '"3"', "[]", "{}"]),
)
_TOML_KEY = st.sampled_from(
    ["version", "enable_cdi", "default_runtime_name", "BinaryName", "containerd", "imports", "a"]
)
_TOML_PATH = st.lists(
    st.sampled_from(
        [
            "plugins",
            '"io.containerd.grpc.v1.cri"',
            '"io.containerd.cri.v1.runtime"',
            "cri",
            "containerd",
            "runtimes",
            "runc",
            "options",
            "a",
        ]
    ),
    max_size=6,
)


@st.composite
def _toml(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        shape = draw(st.sampled_from(["value", "deep-dotted", "deep-header", "deep-inline", "table"]))
        if shape == "value":
            lines.append(f"{draw(_TOML_KEY)} = {draw(_TOML_INT)}")
        elif shape == "deep-dotted":
            lines.append("a" + ".a" * draw(st.integers(1, 4000)) + f" = {draw(_TOML_INT)}")
        elif shape == "deep-header":
            lines.append("[" + "a" + ".a" * draw(st.integers(1, 4000)) + "]")
        elif shape == "deep-inline":
            n = draw(st.integers(1, 3000))
            lines.append("x = " + "{a = " * n + "1" + "}" * n)
        else:
            path = draw(_TOML_PATH)
            if path:
                lines.append("[" + ".".join(path) + "]")
    return "\n".join(lines) + "\n"


ENGINE_TOML = st.one_of(_toml(), CONFIG)


@settings(deadline=files_deadline(2 * 2))  # two files, each read by the reader and by a decision
@given(main=ENGINE_TOML, imported=ENGINE_TOML, imports=st.booleans())
@example(main=ENGINE_CONFIGS["deep-keys-both"][0], imported=ENGINE_CONFIGS["deep-keys-both"][1], imports=True)
@example(main=ENGINE_CONFIGS["huge-binary"][0], imported="", imports=False)
def test_engine_reader_never_raises(main: str, imported: str, imports: bool) -> None:
    head = 'imports = ["x.toml"]\n' if imports else ""
    root = _tree(
        scratch("hostile-engine"),
        {"/etc/containerd/config.toml": head + main, "/etc/containerd/x.toml": imported},
    )
    facts = read_engine(HostRoot(root), "/etc/containerd")
    if isinstance(facts, str):
        assert facts.startswith("/etc/containerd/") and len(facts) < 2_000
    else:
        assert type(facts.version) is int and facts.version >= 1
        assert isinstance(facts.default_runtime, str) and isinstance(facts.resolves_cdi, bool)
        assert facts.binary is None or isinstance(facts.binary, str)
    decision = CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(root)).decide([GPU_A], None)
    assert decision.channel is Channel.ENVVAR  # no specification is on this node


_BOMB = 'a0: &a0 ["lol"]\n' + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: !!timestamp x\n", "AttributeError"),
        ("cdiVersion: !!bool maybe\nkind: nvidia.com/gpu\n", "KeyError"),
        ("cdiVersion: 0.6.0\nkind: !!int ''\n", "IndexError"),
        ("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n" + _BOMB + "devices: *a9\n", "alias"),
        ("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: &d [*d]\n", "holds it"),
    ],
)
def test_a_spec_yaml_cannot_build_is_unreadable_never_an_exception(tmp_path: Path, spec: str, words: str) -> None:
    write(tmp_path, {"/etc/containerd/config.toml": CONTAINERD_V3, "/etc/cdi/nvidia.yaml": spec})
    decision = within(
        tmp_path, lambda: CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A], None)
    )
    assert decision.channel is Channel.ENVVAR
    assert "/etc/cdi/nvidia.yaml" in decision.reason and words in decision.reason
    with pytest.raises(RefusedError) as err:
        CdiResolver(Strategy.CDI_ANNOTATIONS, KIND, "nvidia", HostRoot(tmp_path)).decide([GPU_A], None)
    assert "/etc/cdi/nvidia.yaml" in err.value.message and words in err.value.message


_SPEC_PIECES = st.sampled_from(
    [
        "cdiVersion: ",
        "kind: ",
        "devices:\n",
        "- name: ",
        "&a ",
        "*a",
        "!!timestamp ",
        "!!bool ",
        "!!int ",
        "!!float ",
        "!!set ",
        "!!omap ",
        "''",
        "x",
        "0.6.0",
        "nvidia.com/gpu",
        GPU_A,
        "\n",
        "  ",
        "[",
        "]",
        "{",
        "}",
        ": ",
    ]
)


@settings(deadline=files_deadline(2))  # the engine configuration and the spec
@given(spec=st.lists(_SPEC_PIECES, max_size=40).map("".join) | st.integers(1, 10).map(lambda n: _BOMB[: 30 * n]))
@example(spec="cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: !!timestamp x\n")
def test_spec_yaml_of_any_tag_is_decided(spec: str) -> None:
    root = _tree(
        scratch("hostile-spec-tags"),
        {"/etc/containerd/config.toml": CONTAINERD_V3, "/etc/cdi/nvidia.yaml": spec},
    )
    decision = CdiResolver(Strategy.AUTO, KIND, "nvidia", HostRoot(root)).decide([GPU_A], None)
    assert isinstance(decision, CdiDecision) and decision.reason
