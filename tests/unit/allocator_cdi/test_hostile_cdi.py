"""Hostile input for the CDI resolver (issue 8 / issue 10): whatever ``config.toml``, its imports and
the CDI specification files hold -- garbage, cut short, nested 10,000 levels, NUL bytes, a real file
mutated -- ``auto`` returns a decision and ``cdi-annotations`` a decision or a
:class:`RefusedError`, never anything else."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gpustack_operator.allocator.cdi import CdiDecision, CdiResolver, Strategy
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.respond import Channel, RefusedError
from hypothesis import example, given
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


@given(config=CONFIG, dropin=st.none() | CONFIG, etc=st.none() | SPEC, run=st.none() | SPEC, json=st.none() | SPEC)
@example(config="[" * 10_000, dropin=None, etc="[" * 10_000, run="- " * 10_000, json="[" * 10_000)
@example(config=CONTAINERD_V3, dropin=None, etc=nvidia_yaml(GPU_A, GPU_B), run=None, json=None)
def test_garbage_never_raises(
    tmp_path_factory: pytest.TempPathFactory,
    config: str,
    dropin: str | None,
    etc: str | None,
    run: str | None,
    json: str | None,
) -> None:
    root = _tree(
        tmp_path_factory.getbasetemp() / "hostile-cdi",
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
