"""Staging the preload-library tree: idempotence, replace/remove, atomic swap, and the refusals
(symlinks on the destination path, the pods directory, hostile tarballs)."""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Detected, Unmeasured
from gpustack_operator.node.cpu import CpuIdentity
from gpustack_operator.node.pci import PciScan
from gpustack_operator.preload import LIB_DIR, StageError, apply, plan, stage_node
from gpustack_operator.preload.source import resolve
from gpustack_operator.preload.stage import validate_member_name, validate_subtree
from hypothesis import given
from hypothesis import strategies as st

SUBTREES = ["amd", "nvidia/cuda-12"]


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    write(src / "amd/libvrocm.so", "vrocm v1")
    write(src / "amd/rocm-monitor", "#!/bin/sh\necho monitor\n", 0o755)
    write(src / "amd/rocm-cumask-check", "#!/bin/sh\n", 0o755)
    os.symlink("libvrocm.so", src / "amd/libvrocm.so.1")
    write(src / "nvidia/cuda-12/libvgpu.so", "hami-core cuda 12")
    write(src / "nvidia/cuda-12/bin/vgpu-monitor", "#!/bin/sh\n", 0o750)
    write(src / "nvidia/cuda-11/libvgpu.so", "hami-core cuda 11")
    return src


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    root.mkdir()
    return root


def lib(host: Path) -> Path:
    return host / LIB_DIR


def snapshot(top: Path) -> dict[str, tuple[str, int, str]]:
    """Everything under ``top``: kind, permission bits and content / link target."""
    found: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st_ = path.lstat()
            rel = str(path.relative_to(top))
            if stat.S_ISLNK(st_.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st_.st_mode), "")
            else:
                found[rel] = ("file", stat.S_IMODE(st_.st_mode), path.read_bytes().hex())
    return found


def stage(source: Path, host: Path, subtrees: list[str] = SUBTREES) -> list[str]:
    with plan(source, host, subtrees) as p:
        return apply(p).applied


# --- the normal path ------------------------------------------------------------------------------


def test_plan_writes_nothing(source: Path, host: Path) -> None:
    with plan(source, host, SUBTREES) as p:
        assert p.changed
        amd, nvidia = p.subtrees
        assert amd.added == ["libvrocm.so", "libvrocm.so.1", "rocm-cumask-check", "rocm-monitor"]
        assert nvidia.added == ["bin/", "bin/vgpu-monitor", "libvgpu.so"]
        assert not amd.exists and amd.replaced == [] and amd.removed == []
    assert list(host.iterdir()) == []


def test_apply_copies_files_modes_and_links_then_is_idempotent(source: Path, host: Path) -> None:
    assert stage(source, host) == ["amd", "nvidia/cuda-12"]
    assert snapshot(lib(host) / "amd") == snapshot(source / "amd")
    assert snapshot(lib(host) / "nvidia/cuda-12") == snapshot(source / "nvidia/cuda-12")
    assert os.readlink(lib(host) / "amd/libvrocm.so.1") == "libvrocm.so"
    assert stat.S_IMODE((lib(host) / "nvidia/cuda-12/bin/vgpu-monitor").stat().st_mode) == 0o750
    assert not (lib(host) / "nvidia/cuda-11").exists()  # not asked for
    for part in ("var", "var/lib", "var/lib/gpustack", "var/lib/gpustack/operator"):
        assert stat.S_IMODE((host / part).stat().st_mode) == 0o755

    before = snapshot(host)
    inode = (lib(host) / "amd").stat().st_ino
    with plan(source, host, SUBTREES) as p:
        assert not p.changed
        assert [s.unchanged for s in p.subtrees] == [4, 3]
        assert p.diff() == []
        result = apply(p)
    assert result.applied == [] and result.unchanged == SUBTREES and not result.changed
    assert snapshot(host) == before
    assert (lib(host) / "amd").stat().st_ino == inode  # not even swapped


def test_replace_swaps_the_subtree(source: Path, host: Path) -> None:
    stage(source, host)
    inode = (lib(host) / "amd").stat().st_ino
    write(source / "amd/libvrocm.so", "vrocm v2")
    (source / "amd/rocm-cumask-check").chmod(0o700)
    with plan(source, host, SUBTREES) as p:
        amd, nvidia = p.subtrees
        assert amd.replaced == ["libvrocm.so", "rocm-cumask-check"]
        assert amd.added == [] and amd.removed == []
        assert not nvidia.changed
        (diff,) = p.diff()
        assert "sha256:" in diff["before"] and diff["before"] != diff["after"]
        assert apply(p).applied == ["amd"]
    assert (lib(host) / "amd/libvrocm.so").read_text() == "vrocm v2"
    assert stat.S_IMODE((lib(host) / "amd/rocm-cumask-check").stat().st_mode) == 0o700
    assert (lib(host) / "amd").stat().st_ino != inode
    leftovers = [p.name for p in lib(host).iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_stale_files_are_removed(source: Path, host: Path) -> None:
    stage(source, host)
    write(lib(host) / "amd/old-shim.so", "old")
    write(lib(host) / "amd/retired/tool", "old")
    os.symlink("libvrocm.so", lib(host) / "amd/libvrocm.so.0")  # a link staged by an older tree
    with plan(source, host, SUBTREES) as p:
        assert p.subtrees[0].removed == ["libvrocm.so.0", "old-shim.so", "retired/", "retired/tool"]
        apply(p)
    assert snapshot(lib(host) / "amd") == snapshot(source / "amd")


def test_directory_mode_of_the_subtree_counts(source: Path, host: Path) -> None:
    stage(source, host)
    (lib(host) / "amd").chmod(0o700)
    with plan(source, host, ["amd"]) as p:
        assert p.subtrees[0].replaced == ["."]
        apply(p)
    assert stat.S_IMODE((lib(host) / "amd").stat().st_mode) == stat.S_IMODE((source / "amd").stat().st_mode)


def test_the_tree_and_other_subtrees_are_never_removed(source: Path, host: Path) -> None:
    write(lib(host) / "nvidia/cuda-11/libvgpu.so", "kept")
    write(lib(host) / "README", "kept")
    stage(source, host)
    assert (lib(host) / "nvidia/cuda-11/libvgpu.so").read_text() == "kept"
    assert (lib(host) / "README").read_text() == "kept"
    with plan(source, host, []) as p:
        assert p.subtrees == [] and not p.changed
        apply(p)
    assert (lib(host) / "amd/libvrocm.so").exists()


def test_leftovers_of_a_killed_run_are_swept(source: Path, host: Path) -> None:
    write(lib(host) / ".amd.staging-dead/libvrocm.so", "half")
    write(lib(host) / ".amd.old-dead/libvrocm.so", "old")
    stage(source, host, ["amd"])
    assert sorted(p.name for p in lib(host).iterdir()) == ["amd"]


def test_a_source_link_out_of_the_subtree_is_copied_as_its_file(source: Path, host: Path) -> None:
    (source / "iluvatar").mkdir()
    os.symlink("../nvidia/cuda-12/libvgpu.so", source / "iluvatar/libvgpu.so")
    stage(source, host, ["iluvatar"])
    staged = lib(host) / "iluvatar/libvgpu.so"
    assert not staged.is_symlink() and staged.read_text() == "hami-core cuda 12"


def test_a_source_subtree_may_be_a_link_inside_the_source(source: Path, host: Path) -> None:
    os.symlink("nvidia/cuda-12", source / "iluvatar")
    stage(source, host, ["iluvatar"])
    assert (lib(host) / "iluvatar/libvgpu.so").read_text() == "hami-core cuda 12"
    assert not (lib(host) / "iluvatar").is_symlink()


# --- bad input ------------------------------------------------------------------------------------


def test_missing_source_subtree_names_it(source: Path, host: Path) -> None:
    with pytest.raises(StageError) as err:
        plan(source, host, ["ascend/cann-8-910b"])
    assert "ascend/cann-8-910b" in str(err.value)
    assert "<manufacturer>[/<runtime-subdir>]" in err.value.remedy
    assert list(host.iterdir()) == []


@pytest.mark.parametrize("bad", ["", "..", "/abs", "a/../b", ".hidden", "amd/", "a//b", "amd\x00", "a b"])
def test_bad_subtree_names(source: Path, host: Path, bad: str) -> None:
    with pytest.raises(StageError):
        plan(source, host, [bad])


def test_nested_subtrees_are_refused(source: Path, host: Path) -> None:
    with pytest.raises(StageError, match="nested"):
        plan(source, host, ["nvidia", "nvidia/cuda-12"])


def test_missing_source_and_bad_host_root(tmp_path: Path, source: Path, host: Path) -> None:
    with pytest.raises(StageError, match="does not exist"):
        plan(tmp_path / "nope", host, ["amd"])
    not_tar = write(tmp_path / "libs.zip", "PK not a tar")
    with pytest.raises(StageError, match="not a tar archive"):
        plan(not_tar, host, ["amd"])
    with pytest.raises(StageError, match="host_root"):
        plan(source, tmp_path / "no-such-root", ["amd"])


def test_source_special_files_and_escaping_links_are_refused(source: Path, host: Path, tmp_path: Path) -> None:
    os.mkfifo(source / "amd/pipe")
    with pytest.raises(StageError, match="named pipe"):
        plan(source, host, ["amd"])
    (source / "amd/pipe").unlink()
    write(tmp_path / "outside.so", "outside")
    os.symlink(str(tmp_path / "outside.so"), source / "amd/escape.so")
    with pytest.raises(StageError, match="not a regular file inside the source") as err:
        plan(source, host, ["amd"])
    assert err.value.path.endswith("amd/escape.so")


def test_error_message_carries_path_problem_and_remedy() -> None:
    err = StageError("/x/y", "is odd", "fix it")
    assert str(err) == "/x/y: is odd; fix it"
    assert (err.path, err.problem, err.remedy) == ("/x/y", "is odd", "fix it")


# --- symlinks on the destination path -------------------------------------------------------------

LEVELS = [
    "var",
    "var/lib",
    "var/lib/gpustack",
    "var/lib/gpustack/operator",
    "var/lib/gpustack/operator/lib",
    "var/lib/gpustack/operator/lib/nvidia",
    "var/lib/gpustack/operator/lib/nvidia/cuda-12",
]


def plant(host: Path, level: str, elsewhere: Path) -> Path:
    """Replace ``level`` with a symlink to ``elsewhere``, a real tree of the same shape (so a writer
    that followed the link would succeed, and we would see it there)."""
    rest = Path(*LEVELS[-1].split("/")[len(level.split("/")) :]) if level != LEVELS[-1] else Path()
    (elsewhere / rest).mkdir(parents=True, exist_ok=True)
    link = host / level
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, link)
    return link


@pytest.mark.parametrize("level", LEVELS)
def test_symlink_at_any_level_is_refused_at_plan(source: Path, host: Path, tmp_path: Path, level: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    link = plant(host, level, elsewhere)
    with pytest.raises(StageError) as err:
        plan(source, host, ["nvidia/cuda-12"])
    assert err.value.path == str(link)
    assert "symlink" in err.value.problem
    assert not any(p.is_file() for p in elsewhere.rglob("*"))


@pytest.mark.parametrize("level", LEVELS)
def test_symlink_planted_between_plan_and_apply_is_refused(
    source: Path, host: Path, tmp_path: Path, level: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    with plan(source, host, ["nvidia/cuda-12"]) as p:
        plant(host, level, elsewhere)
        with pytest.raises(StageError) as err:
            apply(p)
    assert err.value.path == str(host / level)
    assert not any(p.is_file() for p in elsewhere.rglob("*"))
    assert not [p for p in host.rglob(".*") if ".staging-" in p.name or ".old-" in p.name]


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("libvgpu.so", "/etc/passwd"),
        ("escape", "../../../../../../../../outside"),
        ("sub", "/"),
    ],
)
def test_escaping_symlink_inside_the_subtree_is_refused(source: Path, host: Path, name: str, target: str) -> None:
    stage(source, host)
    victim = lib(host) / "nvidia/cuda-12" / name
    if victim.exists():
        victim.unlink()
    os.symlink(target, victim)
    with pytest.raises(StageError) as err:
        plan(source, host, ["nvidia/cuda-12"])
    assert err.value.path == str(victim)
    assert target in err.value.problem


def test_a_non_directory_on_the_path_is_refused(source: Path, host: Path) -> None:
    write(host / "var/lib/gpustack/operator/lib", "a file")
    with pytest.raises(StageError, match="not a directory"):
        plan(source, host, ["amd"])


# --- the pods directory ---------------------------------------------------------------------------


def test_pods_is_never_touched(source: Path, host: Path) -> None:
    pods = host / "var/lib/gpustack/operator/pods"
    write(pods / "uid-1/allocation.json", '{"pod": "ns/a"}')
    before = snapshot(pods)
    stage(source, host)
    write(source / "amd/libvrocm.so", "v2")
    stage(source, host)
    assert snapshot(pods) == before
    assert sorted(p.name for p in (host / "var/lib/gpustack/operator").iterdir()) == ["lib", "pods"]


def test_lib_pointing_at_pods_is_refused(source: Path, host: Path) -> None:
    pods = host / "var/lib/gpustack/operator/pods"
    write(pods / "uid-1/allocation.json", "{}")
    os.symlink("pods", host / "var/lib/gpustack/operator/lib")
    before = snapshot(pods)
    with pytest.raises(StageError, match="symlink"):
        plan(source, host, ["amd"])
    assert snapshot(pods) == before


def test_a_host_root_inside_pods_is_refused(source: Path, host: Path) -> None:
    inside = host / "var/lib/gpustack/operator/pods/uid-1"
    inside.mkdir(parents=True)
    with pytest.raises(StageError, match="pods"):
        plan(source, inside, ["amd"])
    assert list(inside.iterdir()) == []


# --- tarball sources ------------------------------------------------------------------------------


def tarball(path: Path, members: list[tarfile.TarInfo], data: dict[str, bytes] | None = None) -> Path:
    data = data or {}
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            payload = data.get(member.name)
            if payload is not None:
                member.size = len(payload)
                tar.addfile(member, io.BytesIO(payload))
            else:
                tar.addfile(member)
    return path


def info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = linkname
    member.mode = mode
    return member


def test_tarball_source_stages_like_the_directory(source: Path, host: Path, tmp_path: Path) -> None:
    archive = tmp_path / "lib.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=".")
    before = snapshot(tmp_path)
    with plan(archive, host, SUBTREES) as p:
        assert p.source_root == str(archive)  # read, never extracted
        assert snapshot(tmp_path) == before
        apply(p)
    assert snapshot(lib(host) / "amd") == snapshot(source / "amd")
    with plan(source, host, SUBTREES) as p:  # the directory form agrees: nothing to do
        assert not p.changed


def test_tarball_hard_links_inside_are_fine(host: Path, tmp_path: Path) -> None:
    archive = tarball(
        tmp_path / "ok.tgz",
        [info("amd/libvrocm.so"), info("amd/libvrocm.so.1", tarfile.LNKTYPE, "amd/libvrocm.so")],
        {"amd/libvrocm.so": b"lib"},
    )
    stage(archive, host, ["amd"])
    assert (lib(host) / "amd/libvrocm.so.1").read_bytes() == b"lib"


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (info("../evil.so"), "'..'"),
        (info("amd/../../evil.so"), "'..'"),
        (info("/etc/evil.so"), "absolute"),
        (info("amd/passwd", tarfile.SYMTYPE, "/etc/passwd"), "outside the archive"),
        (info("amd/up", tarfile.SYMTYPE, "../../.."), "outside the archive"),
        (info("amd/hard", tarfile.LNKTYPE, "../../etc/passwd"), "'..'"),
        (info("amd/null", tarfile.CHRTYPE), "character device"),
        (info("amd/sda", tarfile.BLKTYPE), "block device"),
        (info("amd/fifo", tarfile.FIFOTYPE), "named pipe"),
    ],
)
def test_hostile_tarball_members_are_refused(host: Path, tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    work = tmp_path / "w"
    work.mkdir()
    archive = tarball(work / "bad.tgz", [info("amd/ok.so"), member], {"amd/ok.so": b"ok", "../evil.so": b"x"})
    with pytest.raises(StageError) as err:
        plan(archive, host, ["amd"])
    assert problem in str(err.value)
    assert str(archive) in str(err.value)
    assert not (tmp_path / "evil.so").exists() and not Path("/etc/evil.so").exists()
    assert list(host.iterdir()) == []


# --- names, as properties -------------------------------------------------------------------------

name_parts = st.sampled_from(["", ".", "..", "amd", "cuda-12", "a b", "x..y", "...", "\\", "~"])


@given(st.one_of(st.text(max_size=40), st.lists(name_parts, max_size=6).map("/".join)))
def test_member_names_either_refused_or_inside(name: str) -> None:
    try:
        clean = validate_member_name(name)
    except StageError as err:
        undecodable = "is not UTF-8 text" in err.problem
        assert name.startswith("/") or ".." in name.split("/") or "\x00" in name or undecodable
        return
    assert not clean.startswith("/")
    parts = clean.split("/") if clean else []
    assert all(p not in ("", ".", "..") for p in parts)
    root = "/extract/here"
    joined = posixpath.normpath(posixpath.join(root, clean))
    assert joined == root or joined.startswith(root + "/")


@given(st.lists(name_parts, min_size=1, max_size=5).map("/".join), st.text(max_size=30))
def test_links_said_to_stay_inside_do(member: str, target: str) -> None:
    """With no other link on the way, a link resolved inside is inside read plainly too (the kernel
    comparison, links on the way included, is in test_hostile_preload.py)."""
    try:
        member = validate_member_name(member)
    except StageError:
        return
    if not member:
        return
    resolved = resolve(lambda _: None, (), tuple(member.split("/"))[:-1], target)
    if resolved is None:
        return
    root = "/extract/here"
    plain = posixpath.normpath(posixpath.join(root, posixpath.dirname(member), target))
    assert plain == posixpath.join(root, *resolved).rstrip("/")


@given(st.text(max_size=30))
def test_subtree_names_never_leave_the_lib_tree(name: str) -> None:
    try:
        parts = validate_subtree(name)
    except StageError:
        return
    joined = posixpath.normpath(posixpath.join("/lib", *parts))
    assert joined.startswith("/lib/") and not any(p.startswith(".") for p in parts)


# --- the node-level call --------------------------------------------------------------------------


def detection(host: Path, arch: str, outcomes: dict[str, Detected | Unmeasured]) -> NodeDetection:
    return NodeDetection(
        root=str(host),
        cpu=CpuIdentity(vendor_id="AMD", arch=arch),
        cpu_error=None,
        pci=PciScan(),
        resolved={},
        outcomes=dict(outcomes),
    )


def test_stage_node_check_then_apply(source: Path, host: Path) -> None:
    groups = [
        DevicesGroup(id="amd-mi300x", manufacturer="amd", name="AMD Instinct MI300X"),
        DevicesGroup(id="nv", manufacturer="nvidia", name="H100", runtime_version="12.4"),
        DevicesGroup(id="npu", manufacturer="ascend", name="Ascend910B3"),
    ]
    node = detection(
        host,
        "amd64",
        {
            "amd": Detected(groups[:1]),
            "nvidia": Detected(groups[1:2]),
            "ascend": Detected(groups[2:]),
            "hygon": Unmeasured("sysfs unreadable"),
        },
    )
    checked = stage_node(node, source, host, check=True)
    assert checked.changed and checked.staged == SUBTREES and checked.updated == SUBTREES
    assert "amd/libvrocm.so" in checked.added and "nvidia/cuda-12/bin/" in checked.added
    assert {(s.manufacturer, s.group) for s in checked.not_staged} == {("ascend", "npu"), ("hygon", None)}
    assert len(checked.diff) == 2
    assert list(host.iterdir()) == []

    done = stage_node(node, source, host, check=False)
    assert done.model_dump(exclude={"diff"}) == checked.model_dump(exclude={"diff"})
    again = stage_node(node, source, host, check=False)
    assert not again.changed and again.updated == [] and again.added == [] and again.diff == []
    assert again.staged == SUBTREES


def test_stage_node_on_arm64_without_cpu_identity(source: Path, host: Path) -> None:
    amd = DevicesGroup(id="a", manufacturer="amd", name="x")
    node = detection(host, "arm64", {"amd": Detected([amd])})
    assert stage_node(node, source, host, check=True).staged == []
    node.cpu = None  # unknown architecture excludes nothing
    assert stage_node(node, source, host, check=True).staged == ["amd"]


def test_directory_and_tarball_routes_stage_the_same_modes(tmp_path: Path) -> None:
    """Group/other write and set-id bits are dropped on both routes (the tar filter drops them from an
    archive), so staging the tarball over the directory's result changes nothing, and vice versa."""
    src = tmp_path / "src"
    write(src / "amd/libvrocm.so", "vrocm", 0o664)
    write(src / "amd/rocm-monitor", "#!/bin/sh\n", 0o4775)
    (src / "amd").chmod(0o775)
    archive = tmp_path / "lib.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(src, arcname=".")
    from_dir, from_tar = tmp_path / "host-dir", tmp_path / "host-tar"
    from_dir.mkdir()
    from_tar.mkdir()
    stage(src, from_dir, ["amd"])
    stage(archive, from_tar, ["amd"])
    assert snapshot(lib(from_dir)) == snapshot(lib(from_tar))
    assert stat.S_IMODE((lib(from_dir) / "amd/libvrocm.so").stat().st_mode) == 0o644
    assert stat.S_IMODE((lib(from_dir) / "amd/rocm-monitor").stat().st_mode) == 0o755
    assert stat.S_IMODE((lib(from_dir) / "amd").stat().st_mode) == 0o755
    for source_route, host in ((archive, from_dir), (src, from_tar)):
        with plan(source_route, host, ["amd"]) as p:
            assert not p.changed, p.diff()
