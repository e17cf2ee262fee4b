"""The CDI injection-strategy resolver (issue 10; reference rules §11, supplement §1.4 and §4.4).

Every scenario is a real node tree under ``tmp_path``: a containerd ``config.toml`` and CDI
specifications in ``/etc/cdi`` / ``/var/run/cdi`` as a generator writes them."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.allocator import cdi
from gpustack_operator.allocator.cdi import (
    CdiDecision,
    CdiResolver,
    Strategy,
    annotation,
    load_specs,
    parse_strategy,
    read_engine,
    resolver_for,
)
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.respond import Channel, Code, RefusedError
from gpustack_operator.settings import SettingsError

from tests.unit.allocator_cdi.specs import (
    AMD_YAML,
    CONTAINERD_V2,
    CONTAINERD_V2_CDI,
    CONTAINERD_V2_NVIDIA,
    CONTAINERD_V3,
    GPU_A,
    GPU_B,
    GPU_C,
    KIND,
    nvidia_json,
    nvidia_yaml,
    write,
)

CONFIG = "/etc/containerd/config.toml"
ETC = "/etc/cdi/nvidia.yaml"
RUN = "/var/run/cdi/nvidia.yaml"
VAR = "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY"
MANUFACTURERS = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]


def resolver(root: Path, strategy: Strategy = Strategy.AUTO, **kw: object) -> CdiResolver:
    return CdiResolver(strategy, KIND, "nvidia", HostRoot(root), **kw)  # type: ignore[arg-type]


# -- the strategy variable ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Strategy.ENVVAR),
        ("", Strategy.ENVVAR),
        ("  ", Strategy.ENVVAR),
        ("envvar", Strategy.ENVVAR),
        ("cdi-annotations", Strategy.CDI_ANNOTATIONS),
        ("auto", Strategy.AUTO),
        (" auto\n", Strategy.AUTO),
    ],
)
def test_parse_strategy(raw: str | None, expected: Strategy) -> None:
    assert parse_strategy(raw, "nvidia") is expected


@pytest.mark.parametrize("raw", ["cdi", "AUTO", "Envvar", "cdi_annotations", "envvar,auto", "\x00", "\ud800"])
def test_parse_strategy_refuses_anything_else(raw: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_strategy(raw, "nvidia")
    message = str(err.value)
    assert VAR in message
    for value in ("envvar", "cdi-annotations", "auto"):
        assert value in message
    assert repr(raw) in message


def test_resolver_for_reads_both_variables_once(tmp_path: Path) -> None:
    env = {VAR: "auto", "GPUSTACK_CONTAINERD_CONFIG_DIR": "/var/lib/rancher/k3s/agent/etc/containerd"}
    made, error = resolver_for("nvidia", KIND, HostRoot(tmp_path), env)
    assert error is None and made is not None
    assert made.strategy is Strategy.AUTO
    assert made.containerd_config_dir == "/var/lib/rancher/k3s/agent/etc/containerd"
    assert made.kind == KIND
    env.clear()  # read once: changing the environment afterwards changes nothing
    assert made.strategy is Strategy.AUTO


@pytest.mark.parametrize(
    ("env", "strategy", "config_dir"),
    [
        ({}, Strategy.ENVVAR, "/etc/containerd"),
        ({VAR: "", "GPUSTACK_CONTAINERD_CONFIG_DIR": ""}, Strategy.ENVVAR, "/etc/containerd"),
        ({VAR: "cdi-annotations", "GPUSTACK_CONTAINERD_CONFIG_DIR": " /opt/c "}, Strategy.CDI_ANNOTATIONS, "/opt/c"),
    ],
)
def test_resolver_for_defaults(tmp_path: Path, env: dict[str, str], strategy: Strategy, config_dir: str) -> None:
    made, error = resolver_for("nvidia", KIND, HostRoot(tmp_path), env)
    assert error is None and made is not None
    assert (made.strategy, made.containerd_config_dir) == (strategy, config_dir)


def test_resolver_for_invalid_value_keeps_envvar_and_reports(tmp_path: Path) -> None:
    made, error = resolver_for("nvidia", KIND, HostRoot(tmp_path), {VAR: "cdi"})
    assert made is None
    assert error is not None and VAR in error and "'cdi'" in error and "keeps envvar" in error


def test_resolver_for_reads_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "auto")
    made, _ = resolver_for("nvidia", KIND, HostRoot(tmp_path))
    assert made is not None and made.strategy is Strategy.AUTO


def test_resolver_for_a_manufacturer_without_cdi(tmp_path: Path) -> None:
    # No CDI kind: the variable has no effect, not even an invalid one is reported.
    assert resolver_for("amd", None, HostRoot(tmp_path), {"GPUSTACK_AMD_DEVICE_INJECTION_STRATEGY": "x"}) == (
        None,
        None,
    )


# -- the annotation ----------------------------------------------------------------------------


def test_annotation_shape() -> None:
    key, value = annotation("nvidia", KIND, [GPU_A, GPU_B])
    assert key == "cdi.k8s.io/gpustack-nvidia"
    assert value == f"nvidia.com/gpu={GPU_A},nvidia.com/gpu={GPU_B}"
    assert annotation("nvidia", KIND, [GPU_A])[1] == f"nvidia.com/gpu={GPU_A}"


@pytest.mark.parametrize("manufacturer", MANUFACTURERS)
def test_annotation_key_within_the_63_character_limit(manufacturer: str) -> None:
    key, _ = annotation(manufacturer, "vendor.com/class", ["x"])
    prefix, _, name = key.partition("/")
    assert prefix == "cdi.k8s.io"
    assert name == f"gpustack-{manufacturer}"
    assert len(name) <= 63


def test_annotation_refuses_a_key_past_the_limit_and_an_empty_grant() -> None:
    assert len(annotation("m" * 54, KIND, ["x"])[0].partition("/")[2]) == 63
    with pytest.raises(ValueError, match="63"):
        annotation("m" * 55, KIND, ["x"])
    with pytest.raises(ValueError, match="at least one"):
        annotation("nvidia", KIND, [])


# -- auto: the fallbacks in order ----------------------------------------------------------------


@dataclass
class Case:
    name: str
    files: dict[str, str | None]
    channel: Channel
    evidence: str
    ids: list[str] = field(default_factory=lambda: [GPU_A])
    runtime_class: str | None = None
    absent: tuple[str, ...] = ()  # text the reason must not hold


GOOD = {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A, GPU_B)}
NAMED = "name every granted accelerator"
NOT_NAMED = "no loaded CDI specification names"
UNREAD = "could not be read"
VENDOR = "vendor runtime"
NO_CDI = "does not resolve CDI"

AUTO_CASES = [
    Case("all supported: CDI", GOOD, Channel.CDI, NAMED, ids=[GPU_A, GPU_B]),
    # 1. runtimeClassName, first of all
    Case("runtimeClassName", GOOD, Channel.ENVVAR, "runtimeClassName", runtime_class="nvidia"),
    Case("runtimeClassName before an unreadable config", {}, Channel.ENVVAR, "runtimeClassName", runtime_class="kata"),
    Case("empty runtimeClassName is none", GOOD, Channel.CDI, NAMED, runtime_class=""),
    # 2. engine config could not be read
    Case("no config.toml", {ETC: nvidia_yaml(GPU_A)}, Channel.ENVVAR, UNREAD),
    Case("config.toml not TOML", {**GOOD, CONFIG: "version = 3\n[plugins\n"}, Channel.ENVVAR, UNREAD),
    Case("config.toml is a directory", {**GOOD, CONFIG: None}, Channel.ENVVAR, UNREAD),
    Case("version not an integer", {**GOOD, CONFIG: 'version = "3"\n'}, Channel.ENVVAR, UNREAD),
    Case("version a bool", {**GOOD, CONFIG: "version = true\n"}, Channel.ENVVAR, UNREAD),
    Case(
        "enable_cdi not a bool",
        {**GOOD, CONFIG: CONTAINERD_V2.replace("sandbox_image", 'enable_cdi = "true"\n  sandbox_image')},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "default_runtime_name not a string",
        {**GOOD, CONFIG: CONTAINERD_V3.replace('"runc"\n', "7\n", 1)},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "unreadable config before a missing spec",
        {CONFIG: "[[["},
        Channel.ENVVAR,
        UNREAD,
        absent=(NOT_NAMED,),
    ),
    # 3. default runtime handler is a vendor runtime
    Case("v2 nvidia default runtime", {**GOOD, CONFIG: CONTAINERD_V2_NVIDIA}, Channel.ENVVAR, VENDOR),
    Case(
        "vendor runtime before does-not-resolve",
        {**GOOD, CONFIG: CONTAINERD_V2_NVIDIA.replace("enable_cdi = true", "enable_cdi = false")},
        Channel.ENVVAR,
        VENDOR,
        absent=(NO_CDI,),
    ),
    Case(
        "v3 nvidia default runtime",
        {**GOOD, CONFIG: CONTAINERD_V3.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"')},
        Channel.ENVVAR,
        VENDOR,
    ),
    Case(
        "v3 amd default runtime",
        {**GOOD, CONFIG: CONTAINERD_V3.replace('default_runtime_name = "runc"', 'default_runtime_name = "amd"')},
        Channel.ENVVAR,
        VENDOR,
    ),
    Case(
        "a neutral name whose BinaryName is the vendor's",
        {
            **GOOD,
            CONFIG: CONTAINERD_V3.replace(
                "SystemdCgroup = true", 'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"'
            ),
        },
        Channel.ENVVAR,
        VENDOR,
    ),
    Case(
        "a vendor runtime configured but not the default",
        {
            **GOOD,
            CONFIG: CONTAINERD_V3
            + '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
            + '  BinaryName = "/usr/bin/nvidia-container-runtime"\n',
        },
        Channel.CDI,
        NAMED,
    ),
    # 4. engine does not resolve CDI
    Case("v2 without enable_cdi", {**GOOD, CONFIG: CONTAINERD_V2}, Channel.ENVVAR, NO_CDI),
    Case("v2 with enable_cdi = true", {**GOOD, CONFIG: CONTAINERD_V2_CDI}, Channel.CDI, NAMED),
    Case(
        "v3 with enable_cdi = false",
        {**GOOD, CONFIG: CONTAINERD_V3 + '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n'},
        Channel.ENVVAR,
        NO_CDI,
    ),
    Case(
        "v3 with enable_cdi = true",
        {**GOOD, CONFIG: CONTAINERD_V3 + '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n'},
        Channel.CDI,
        NAMED,
    ),
    Case("v1 (no version) without enable_cdi", {**GOOD, CONFIG: "[plugins.cri]\n"}, Channel.ENVVAR, NO_CDI),
    Case("v1 with enable_cdi", {**GOOD, CONFIG: "[plugins.cri]\nenable_cdi = true\n"}, Channel.CDI, NAMED),
    Case("empty config.toml is v1", {**GOOD, CONFIG: ""}, Channel.ENVVAR, NO_CDI),
    Case(
        "v2 with enable_cdi in the v3 table shape",
        {**GOOD, CONFIG: 'version = 2\n[plugins."io.containerd.cri.v1.runtime"]\nenable_cdi = true\n'},
        Channel.CDI,
        NAMED,
    ),
    Case(
        "v2 with the nvidia runtime in a drop-in import",
        {
            **GOOD,
            CONFIG: 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + CONTAINERD_V2_CDI,
            "/etc/containerd/conf.d/99-nvidia.toml": CONTAINERD_V2_NVIDIA,
        },
        Channel.ENVVAR,
        VENDOR,
    ),
    Case(
        "v2 whose import (relative) enables CDI",
        {
            **GOOD,
            CONFIG: 'imports = ["conf.d/cdi.toml"]\n' + CONTAINERD_V2,
            "/etc/containerd/conf.d/cdi.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n',
        },
        Channel.CDI,
        NAMED,
    ),
    Case(
        "an import that is not TOML",
        {
            **GOOD,
            CONFIG: 'imports = ["/etc/containerd/conf.d/x.toml"]\n' + CONTAINERD_V3,
            "/etc/containerd/conf.d/x.toml": "==",
        },
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "an import naming nothing",
        {**GOOD, CONFIG: 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + CONTAINERD_V3},
        Channel.CDI,
        NAMED,
    ),
    # 5. specs do not name every granted accelerator
    Case("no spec at all", {CONFIG: CONTAINERD_V3}, Channel.ENVVAR, NOT_NAMED),
    Case(
        "partial match is none",
        GOOD,
        Channel.ENVVAR,
        f"{NOT_NAMED} {KIND}={GPU_C}",
        ids=[GPU_A, GPU_C],
        absent=(f"={GPU_A}",),
    ),
    Case("index names only (no fallback to the index)", {**GOOD, ETC: nvidia_yaml("0")}, Channel.ENVVAR, NOT_NAMED),
    Case("another kind names the id", {**GOOD, ETC: nvidia_yaml(GPU_A, kind="amd.com/gpu")}, Channel.ENVVAR, NOT_NAMED),
    Case(
        "a .yml file is not read",
        {CONFIG: CONTAINERD_V3, "/etc/cdi/nvidia.yml": nvidia_yaml(GPU_A)},
        Channel.ENVVAR,
        NOT_NAMED,
    ),
    Case("JSON spec", {CONFIG: CONTAINERD_V3, "/var/run/cdi/nvidia.json": nvidia_json(GPU_A)}, Channel.CDI, NAMED),
    Case("spec in /var/run/cdi only", {CONFIG: CONTAINERD_V3, RUN: nvidia_yaml(GPU_A)}, Channel.CDI, NAMED),
    Case(
        "names spread over two files",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), "/var/run/cdi/more.json": nvidia_json(GPU_C)},
        Channel.CDI,
        NAMED,
        ids=[GPU_A, GPU_C],
    ),
    Case(
        "own spec unreadable, partial",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), "/etc/cdi/nvidia-more.yaml": "kind: [\n"},
        Channel.ENVVAR,
        UNREAD,
        ids=[GPU_A, GPU_C],
        absent=(NOT_NAMED,),
    ),
    Case(
        "someone else's spec unreadable does not undo a found name",
        {**GOOD, "/etc/cdi/amd.yaml": "{{{", "/var/run/cdi/x.json": None},
        Channel.CDI,
        NAMED,
    ),
    Case("readable foreign spec", {**GOOD, "/etc/cdi/amd.yaml": AMD_YAML}, Channel.CDI, NAMED),
    Case(
        "spec without kind",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A).replace(f"kind: {KIND}\n", "")},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "spec without cdiVersion",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A, version=None)},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "cdiVersion a number", {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A, version="0.5")}, Channel.ENVVAR, UNREAD
    ),
    Case("spec a YAML list", {CONFIG: CONTAINERD_V3, ETC: "- a\n- b\n"}, Channel.ENVVAR, UNREAD),
    Case("JSON spec not JSON", {CONFIG: CONTAINERD_V3, "/etc/cdi/nvidia.json": "{'kind': 1"}, Channel.ENVVAR, UNREAD),
    Case(
        "/etc/cdi not a directory",
        {CONFIG: CONTAINERD_V3, "/etc/cdi": "x", RUN: nvidia_yaml(GPU_B)},
        Channel.ENVVAR,
        UNREAD,
    ),
    # /var/run/cdi overrides /etc/cdi, file by file
    Case(
        "run/cdi file replaces the same-named etc/cdi file",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), RUN: nvidia_yaml(GPU_B)},
        Channel.ENVVAR,
        NOT_NAMED,
    ),
    Case(
        "the replacing run/cdi file names the id",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), RUN: nvidia_yaml(GPU_B)},
        Channel.CDI,
        NAMED,
        ids=[GPU_B],
    ),
    Case(
        "an unreadable run/cdi copy still replaces",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), RUN: "cdiVersion: [\n"},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "an unreadable run/cdi directory entry still replaces",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), RUN: None},
        Channel.ENVVAR,
        UNREAD,
    ),
    Case(
        "two files of one directory naming the id conflict",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), "/etc/cdi/copy.yaml": nvidia_yaml(GPU_A)},
        Channel.ENVVAR,
        NOT_NAMED,
    ),
    Case(
        "a differently named run/cdi file overrides a device without conflict",
        {CONFIG: CONTAINERD_V3, ETC: nvidia_yaml(GPU_A), "/var/run/cdi/other.yaml": nvidia_yaml(GPU_A)},
        Channel.CDI,
        "/var/run/cdi/other.yaml",
    ),
]


@pytest.mark.parametrize("case", AUTO_CASES, ids=[c.name for c in AUTO_CASES])
def test_auto(tmp_path: Path, case: Case) -> None:
    decision = resolver(write(tmp_path, case.files)).decide(case.ids, case.runtime_class)
    assert isinstance(decision, CdiDecision)
    assert decision.channel is case.channel, decision.reason
    assert case.evidence in decision.reason
    assert decision.kind == (KIND if case.channel is Channel.CDI else None)
    for text in case.absent:
        assert text not in decision.reason


def test_auto_unlistable_directory(tmp_path: Path) -> None:
    write(tmp_path, GOOD)
    (tmp_path / "var/run").mkdir(parents=True)
    os.symlink("cdi", tmp_path / "var/run/cdi")  # a link to itself: ELOOP, not absent
    ok = resolver(tmp_path).decide([GPU_A], None)
    assert ok.channel is Channel.CDI  # someone else's failure does not undo the found name
    missing = resolver(tmp_path).decide([GPU_C], None)
    assert missing.channel is Channel.ENVVAR
    assert UNREAD in missing.reason and "/var/run/cdi" in missing.reason


def test_auto_oversized_spec_is_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, GOOD)
    monkeypatch.setattr(cdi, "SPEC_READ_LIMIT", 64)
    decision = resolver(tmp_path).decide([GPU_A], None)
    assert decision.channel is Channel.ENVVAR
    assert UNREAD in decision.reason and "read cap" in decision.reason


def test_auto_custom_vendor_runtimes(tmp_path: Path) -> None:
    write(tmp_path, {**GOOD, CONFIG: CONTAINERD_V2_NVIDIA})
    assert resolver(tmp_path).decide([GPU_A], None).channel is Channel.ENVVAR
    relaxed = resolver(tmp_path, vendor_runtimes=frozenset({"ascend"}))
    assert relaxed.decide([GPU_A], None).channel is Channel.CDI


def test_auto_containerd_config_dir(tmp_path: Path) -> None:
    k3s = "/var/lib/rancher/k3s/agent/etc/containerd"
    write(tmp_path, {ETC: nvidia_yaml(GPU_A), f"{k3s}/config.toml": CONTAINERD_V3, CONFIG: CONTAINERD_V2})
    assert resolver(tmp_path).decide([GPU_A], None).channel is Channel.ENVVAR
    assert resolver(tmp_path, containerd_config_dir=k3s).decide([GPU_A], None).channel is Channel.CDI


def test_auto_sees_specs_change_between_calls(tmp_path: Path) -> None:
    write(tmp_path, {CONFIG: CONTAINERD_V3})
    made = resolver(tmp_path)
    assert made.decide([GPU_A], None).channel is Channel.ENVVAR
    write(tmp_path, {RUN: nvidia_yaml(GPU_A)})
    assert made.decide([GPU_A], None).channel is Channel.CDI
    (tmp_path / RUN.lstrip("/")).unlink()
    assert made.decide([GPU_A], None).channel is Channel.ENVVAR


def test_never_writes(tmp_path: Path) -> None:
    write(tmp_path, {**GOOD, RUN: nvidia_yaml(GPU_B), "/etc/cdi/bad.json": "{"})

    def snapshot() -> dict[str, tuple[int, bytes]]:
        return {
            str(p.relative_to(tmp_path)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
            for p in sorted(tmp_path.rglob("*"))
        }

    before = snapshot()
    for strategy in Strategy:
        for ids in ([GPU_A], [GPU_B], [GPU_C]):
            with contextlib.suppress(RefusedError):
                resolver(tmp_path, strategy).decide(ids, None)
    assert snapshot() == before


# -- explicit strategies -------------------------------------------------------------------------


@pytest.mark.parametrize("runtime_class", [None, "nvidia"])
@pytest.mark.parametrize("files", [GOOD, {}, {CONFIG: CONTAINERD_V2_NVIDIA}])
def test_envvar_is_always_envvar(tmp_path: Path, files: dict[str, str | None], runtime_class: str | None) -> None:
    decision = resolver(write(tmp_path, files), Strategy.ENVVAR).decide([GPU_A], runtime_class)
    assert (decision.channel, decision.kind) == (Channel.ENVVAR, None)
    assert "envvar" in decision.reason


@pytest.mark.parametrize(
    "files",
    [
        {ETC: nvidia_yaml(GPU_A, GPU_B)},  # no engine config at all (CRI-O: set cdi-annotations)
        {CONFIG: CONTAINERD_V2, ETC: nvidia_yaml(GPU_A, GPU_B)},  # an engine auto would refuse
        {CONFIG: CONTAINERD_V2_NVIDIA, RUN: nvidia_json(GPU_A, GPU_B)},
        {ETC: nvidia_yaml(GPU_A, GPU_B), "/etc/cdi/broken.yaml": "]["},
    ],
)
@pytest.mark.parametrize("runtime_class", [None, "nvidia"])
def test_cdi_annotations_is_always_cdi(tmp_path: Path, files: dict[str, str | None], runtime_class: str | None) -> None:
    decision = resolver(write(tmp_path, files), Strategy.CDI_ANNOTATIONS).decide([GPU_A, GPU_B], runtime_class)
    assert (decision.channel, decision.kind) == (Channel.CDI, KIND)
    assert NAMED in decision.reason


@pytest.mark.parametrize(
    ("files", "more"),
    [
        ({ETC: nvidia_yaml(GPU_A)}, ""),
        ({ETC: nvidia_yaml("0")}, ""),  # the index is named, the id is not: no fallback
        ({}, ""),
        ({ETC: nvidia_yaml(GPU_A), "/etc/cdi/more.yaml": "kind: ["}, UNREAD),
    ],
)
def test_cdi_annotations_refuses_an_unnamed_id(tmp_path: Path, files: dict[str, str | None], more: str) -> None:
    with pytest.raises(RefusedError) as err:
        resolver(write(tmp_path, files), Strategy.CDI_ANNOTATIONS).decide([GPU_A, GPU_C], None)
    assert err.value.code is Code.FAILED_PRECONDITION
    message = err.value.message
    assert f"{KIND}={GPU_C}" in message
    assert VAR in message and "nvidia-ctk cdi generate" in message
    assert more in message
    if GPU_A in str(files):
        assert f"={GPU_A}" not in message  # only the missing one is named


# -- the building blocks -------------------------------------------------------------------------


def test_load_specs_names_every_device(tmp_path: Path) -> None:
    view = load_specs(HostRoot(write(tmp_path, {ETC: nvidia_yaml(GPU_A, GPU_B)})))
    assert set(view.names) == {f"{KIND}={n}" for n in ("0", "1", GPU_A, GPU_B, "all")}
    assert set(view.names.values()) == {ETC}
    assert view.unreadable == [] and view.conflicts == {}
    assert view.missing(KIND, [GPU_A, GPU_C, GPU_C]) == [GPU_C]


def test_load_specs_absent_dirs_are_empty_not_unreadable(tmp_path: Path) -> None:
    view = load_specs(HostRoot(tmp_path))
    assert (view.names, view.unreadable) == ({}, [])


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        (CONTAINERD_V3, (3, True, "runc", None)),
        (CONTAINERD_V2, (2, False, "runc", None)),
        (CONTAINERD_V2_CDI, (2, True, "runc", None)),
        (CONTAINERD_V2_NVIDIA, (2, True, "nvidia", "/usr/bin/nvidia-container-runtime")),
        ("version = 4\n", (4, True, "runc", None)),
        ("", (1, False, "runc", None)),
    ],
)
def test_read_engine(tmp_path: Path, text: str, facts: tuple[int, bool, str, str | None]) -> None:
    got = read_engine(HostRoot(write(tmp_path, {CONFIG: text})), "/etc/containerd")
    assert not isinstance(got, str), got
    assert (got.version, got.resolves_cdi, got.default_runtime, got.binary) == facts
    assert got.path == CONFIG


def test_read_engine_unknown_names_the_file(tmp_path: Path) -> None:
    got = read_engine(HostRoot(tmp_path), "/etc/containerd/")
    assert isinstance(got, str) and CONFIG in got


def test_auto_sees_a_relinked_spec(tmp_path: Path) -> None:
    # Generators publish specs through links; each decision resolves them afresh (a HostRoot
    # remembers the links it resolved for one pass).
    write(
        tmp_path,
        {CONFIG: CONTAINERD_V3, "/opt/specs/a.yaml": nvidia_yaml(GPU_B), "/opt/specs/b.yaml": nvidia_yaml(GPU_A)},
    )
    link = tmp_path / RUN.lstrip("/")
    link.parent.mkdir(parents=True)
    link.symlink_to("/opt/specs/a.yaml")
    made = resolver(tmp_path)
    assert made.decide([GPU_A], None).channel is Channel.ENVVAR
    link.unlink()
    link.symlink_to("/opt/specs/b.yaml")
    assert made.decide([GPU_A], None).channel is Channel.CDI


@pytest.mark.parametrize(
    ("imports", "channel", "evidence"),
    [
        ('["/etc/containerd/missing.toml"]', Channel.CDI, NAMED),  # containerd ignores a missing import
        ('["/etc/containerd/conf.d"]', Channel.ENVVAR, UNREAD),  # one that exists but is no file
        ('["/etc/*/conf.d/*.toml"]', Channel.ENVVAR, VENDOR),  # a glob in any component
        ("7", Channel.ENVVAR, UNREAD),
    ],
)
def test_auto_imports(tmp_path: Path, imports: str, channel: Channel, evidence: str) -> None:
    write(
        tmp_path,
        {
            **GOOD,
            CONFIG: f"imports = {imports}\n" + CONTAINERD_V3,
            "/etc/containerd/conf.d/nvidia.toml": CONTAINERD_V2_NVIDIA,
        },
    )
    decision = resolver(tmp_path).decide([GPU_A], None)
    assert decision.channel is channel, decision.reason
    assert evidence in decision.reason


def test_an_import_does_not_change_the_version(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            **GOOD,
            CONFIG: 'imports = ["conf.d/a.toml"]\n' + CONTAINERD_V3,
            "/etc/containerd/conf.d/a.toml": "version = 2\n",
        },
    )
    facts = read_engine(HostRoot(tmp_path), "/etc/containerd")
    assert not isinstance(facts, str) and facts.version == 3 and facts.resolves_cdi


def test_a_v1_import_into_a_v2_config_lands_in_the_v2_table(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            CONFIG: 'imports = ["conf.d/a.toml"]\n' + CONTAINERD_V2,
            "/etc/containerd/conf.d/a.toml": "[plugins.cri]\nenable_cdi = true\n",
        },
    )
    facts = read_engine(HostRoot(tmp_path), "/etc/containerd")
    assert not isinstance(facts, str) and facts.version == 2 and facts.resolves_cdi
    assert facts.cdi_evidence == "plugins.io.containerd.grpc.v1.cri.enable_cdi = true"
