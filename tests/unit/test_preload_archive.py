"""Hostile preload tarballs (issue 16): nothing is ever written outside the staged subtree -- not by
the plan (``--dry-run``, the module's check mode), which writes nothing at all, $TMPDIR included, and
not by the apply -- and a member of huge apparent size is refused from its header, before a byte of
it is read.

The escape: a chain of symlinks that expands past PATH_MAX, where ``os.path.realpath`` (and so the
interpreter's own extraction filter before 3.12.11) stops resolving, places a file two levels above
the extraction directory. The sizes: a 10 KiB GNU-sparse archive of a 1 TiB file hung the plan
(hashing a terabyte of holes) and would have filled the disk on apply."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Detected
from gpustack_operator.node.cpu import CpuIdentity
from gpustack_operator.node.pci import PciScan
from gpustack_operator.preflight import staging
from gpustack_operator.preload import LIB_DIR, StageError, apply, plan, stage_node
from gpustack_operator.preload import source as preload_source

from tests.unit.preload_archives import TIB, add, claimed_size, long_symlink_chain

REPO = Path(__file__).resolve().parents[2]


def snapshot(top: Path) -> dict[str, tuple[str, int, str]]:
    """Every path under ``top`` (links not followed): kind, mode, content or link target."""
    found: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(top))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", stat.S_IMODE(st.st_mode), str(st.st_size))
            else:
                found[rel] = ("other", st.st_mode, "")
    return found


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``tmp_path`` with a private, nested $TMPDIR (``tmp/inner``, so an escape two levels up lands
    in the sandbox where it is seen) and an empty host root (``host``)."""
    inner = tmp_path / "tmp" / "inner"
    inner.mkdir(parents=True)
    (tmp_path / "host").mkdir()
    monkeypatch.setenv("TMPDIR", str(inner))
    monkeypatch.setattr(tempfile, "tempdir", str(inner))
    yield tmp_path


def _extract_dir_len(sandbox: Path) -> int:
    """How long the private extraction directory of the plan before issue 16 was named."""
    return len(str(sandbox / "tmp" / "inner")) + len("/gpustack-preload-xxxxxxxx")


def _node(host: Path) -> NodeDetection:
    amd = DevicesGroup(id="amd-mi300x", manufacturer="amd", name="AMD Instinct MI300X")
    return NodeDetection(
        root=str(host),
        cpu=CpuIdentity(vendor_id="AMD", arch="amd64"),
        cpu_error=None,
        pci=PciScan(),
        resolved={},
        outcomes={"amd": Detected([amd])},
    )


# --- the long symlink chain -------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["plan", "check-mode", "apply", "dry-run", "preflight-apply"])
def test_the_long_symlink_chain_writes_nothing_anywhere(sandbox: Path, route: str) -> None:
    archive = long_symlink_chain(sandbox / "evil.tar", _extract_dir_len(sandbox))
    host = sandbox / "host"
    before = snapshot(sandbox)
    error: str | None = None
    if route == "plan":
        with pytest.raises(StageError) as err:
            plan(archive, host, ["amd"])
        error = str(err.value)
    elif route in ("check-mode", "apply"):
        with pytest.raises(StageError) as err:
            stage_node(_node(host), archive, host, check=route == "check-mode")
        error = str(err.value)
    else:
        amd = _node(host).groups
        staged = staging.stage(amd, "amd64", str(host), str(archive), dry_run=route == "dry-run")
        assert staged.error is not None
        error = staged.error
    assert snapshot(sandbox) == before
    assert not (sandbox / "pwned").exists()
    assert error is not None and str(archive) in error
    assert "symlink" in error and "rebuild the archive" in error


def test_a_member_is_never_placed_through_a_symlink(sandbox: Path) -> None:
    """The class, not the sample: ``amd/s`` -> ``..`` is harmless alone, ``amd/s/x`` is not a file
    inside ``amd`` at all."""
    archive = sandbox / "through.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "amd", tarfile.DIRTYPE)
        add(tar, "amd/s", tarfile.SYMTYPE, "..")
        add(tar, "amd/s/x.so", data=b"x")
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "amd/s/x.so" in str(err.value) and "amd/s, which is a symlink" in str(err.value)


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        # lexically inside (amd/a/b/s/../../x = amd/a/x), but s is amd itself: amd/../../x
        (
            [
                ("amd/a/b", tarfile.DIRTYPE, ""),
                ("amd/a/b/s", tarfile.SYMTYPE, "../.."),
                ("amd/e", tarfile.SYMTYPE, "a/b/s/../../x"),
            ],
            "outside the archive",
        ),
        ([("amd/l1", tarfile.SYMTYPE, "l2"), ("amd/l2", tarfile.SYMTYPE, "l1")], "symlinks in a loop"),
        ([("amd/e", tarfile.SYMTYPE, "")], "empty target"),
    ],
)
def test_links_are_resolved_through_the_archive(
    sandbox: Path, members: list[tuple[str, bytes, str]], problem: str
) -> None:
    archive = sandbox / "links.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "amd", tarfile.DIRTYPE)
        for name, kind, link in members:
            add(tar, name, kind, link)
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert problem in str(err.value)


def test_a_hard_link_through_a_symlink_is_refused(sandbox: Path) -> None:
    archive = sandbox / "hard.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "amd", tarfile.DIRTYPE)
        add(tar, "amd/real.so", data=b"x")
        add(tar, "amd/up", tarfile.SYMTYPE, ".")
        add(tar, "amd/hard.so", tarfile.LNKTYPE, "amd/up/real.so")
    with pytest.raises(StageError, match="no earlier member"):
        plan(archive, sandbox / "host", ["amd"])


# --- plan writes nothing ----------------------------------------------------------------------------


def _good_archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        add(tar, "amd", tarfile.DIRTYPE)
        add(tar, "amd/lib", tarfile.DIRTYPE)
        add(tar, "amd/lib/libvrocm.so", data=b"\x7fELF vrocm")
        add(tar, "amd/lib/libvrocm.so.1", tarfile.SYMTYPE, "libvrocm.so")
        add(tar, "amd/lib/hard.so", tarfile.LNKTYPE, "amd/lib/libvrocm.so")
        add(tar, "nvidia/cuda-12/libvgpu.so", data=b"hami")
        add(tar, "amd/vgpu.so", tarfile.SYMTYPE, "../nvidia/cuda-12/libvgpu.so")
    return path


def test_a_tarball_plan_writes_nothing_not_even_to_tmpdir(sandbox: Path) -> None:
    archive = _good_archive(sandbox / "lib.tar.gz")
    host = sandbox / "host"
    before = snapshot(sandbox)
    with plan(archive, host, ["amd"]) as staged:
        assert staged.subtrees[0].added == ["lib/", "lib/hard.so", "lib/libvrocm.so", "lib/libvrocm.so.1", "vgpu.so"]
        assert snapshot(sandbox) == before, "the plan wrote something"
    checked = stage_node(_node(host), archive, host, check=True)
    assert checked.updated == ["amd"]
    dry = staging.stage(_node(host).groups, "amd64", str(host), str(archive), dry_run=True)
    assert dry.error is None and dry.changed == ["amd"]
    # what the tree would hold, for the responder's dry-run view (the archive cannot be read as a tree)
    assert {"amd", "amd/lib", "amd/lib/libvrocm.so", "amd/lib/libvrocm.so.1", "amd/vgpu.so"} <= dry.planned
    assert snapshot(sandbox) == before

    done = stage_node(_node(host), archive, host, check=False)
    assert done.updated == ["amd"]
    after = snapshot(sandbox)
    new = sorted(set(after) - set(before))
    assert all(p.startswith(f"host/{LIB_DIR}") or f"host/{LIB_DIR}".startswith(p) for p in new), new
    lib = host / LIB_DIR / "amd"
    assert (lib / "lib/hard.so").read_bytes() == b"\x7fELF vrocm"
    assert os.readlink(lib / "lib/libvrocm.so.1") == "libvrocm.so"
    assert not (lib / "vgpu.so").is_symlink() and (lib / "vgpu.so").read_bytes() == b"hami"
    assert list((sandbox / "tmp" / "inner").iterdir()) == []
    assert not stage_node(_node(host), archive, host, check=False).changed  # idempotent


def test_an_archive_changed_between_plan_and_apply_is_refused(sandbox: Path) -> None:
    archive = _good_archive(sandbox / "lib.tar.gz")
    host = sandbox / "host"
    with plan(archive, host, ["amd"]) as staged:
        with tarfile.open(archive, "w:gz") as tar:
            add(tar, "amd", tarfile.DIRTYPE)
            add(tar, "amd/lib", tarfile.DIRTYPE)
            add(tar, "amd/lib/libvrocm.so", data=b"\x7fELF other")
        with pytest.raises(StageError, match="changed"):
            apply(staged)
    assert not (host / LIB_DIR / "amd").exists()
    assert [p.name for p in (host / LIB_DIR).iterdir()] == []


# --- sizes ------------------------------------------------------------------------------------------


def _plan_in_child(source: Path, host: Path, timeout: float = 60) -> dict[str, str]:
    """``plan`` in a child process, so a hang fails the test instead of stopping the suite."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from gpustack_operator.preload import StageError, plan\n"
        "try:\n"
        "    with plan(Path(sys.argv[1]), Path(sys.argv[2]), ['amd']) as p:\n"
        "        print(json.dumps({'planned': p.subtrees[0].added}))\n"
        "except StageError as exc:\n"
        "    print(json.dumps({'error': str(exc), 'problem': exc.problem}))\n"
    )
    env = {**os.environ, "TMPDIR": str(host.parent / "tmp" / "inner")}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(source), str(host)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"plan of {source.name} did not finish in {timeout} s")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    result: dict[str, str] = json.loads(proc.stdout)
    return result


def _sparse_tree(top: Path) -> Path:
    (top / "amd").mkdir(parents=True)
    with (top / "amd/libhuge.so").open("wb") as huge:
        huge.truncate(TIB)
    return top


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar to write a sparse archive")
@pytest.mark.parametrize(
    "flags",
    [["--sparse"], ["--sparse", "--format=posix", "--sparse-version=1.0"], ["--sparse", "--format=posix"]],
    ids=["gnu", "pax-1.0", "pax-0.1"],
)
def test_a_sparse_terabyte_in_a_small_archive_is_refused(sandbox: Path, flags: list[str]) -> None:
    tree = _sparse_tree(sandbox / "src")
    archive = sandbox / "sparse.tar"
    subprocess.run(["tar", *flags, "-cf", str(archive), "-C", str(tree), "amd"], check=True)
    (tree / "amd/libhuge.so").unlink()
    assert archive.stat().st_size <= 64 * 1024
    before = snapshot(sandbox)
    result = _plan_in_child(archive, sandbox / "host")
    assert "error" in result, result
    assert "amd/libhuge.so" in result["error"] and str(TIB) in result["error"]
    assert snapshot(sandbox) == before


def test_a_header_claiming_a_terabyte_is_refused_before_reading(sandbox: Path) -> None:
    archive = claimed_size(sandbox / "claims.tar")
    result = _plan_in_child(archive, sandbox / "host")
    assert "error" in result, result
    assert "amd/libhuge.so" in result["error"]
    assert f"{TIB} bytes" in result["problem"] and f"{preload_source.MEMBER_MAX} bytes" in result["problem"]


def test_a_sparse_terabyte_in_a_directory_source_is_refused(sandbox: Path) -> None:
    tree = _sparse_tree(sandbox / "src")
    result = _plan_in_child(tree, sandbox / "host")
    assert "error" in result, result
    assert "libhuge.so" in result["error"] and f"{TIB} bytes" in result["problem"]


def test_the_total_counts_every_copy(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file under the per-file cap, hard-linked or linked out of its subtree many times, is written
    once per copy: the cap on the whole tree counts the copies (the caps lowered to keep it small)."""
    monkeypatch.setattr(preload_source, "MEMBER_MAX", 1000)
    monkeypatch.setattr(preload_source, "TOTAL_MAX", 2500)
    archive = sandbox / "copies.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "amd/lib.so", data=b"x" * 900)
        add(tar, "amd/hard1.so", tarfile.LNKTYPE, "amd/lib.so")
        add(tar, "amd/hard2.so", tarfile.LNKTYPE, "amd/lib.so")
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "amd/hard2.so" in str(err.value) and "2500 bytes" in err.value.problem

    archive = sandbox / "outlinks.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "nvidia/lib.so", data=b"x" * 900)
        for i in range(3):
            add(tar, f"amd/copy{i}.so", tarfile.SYMTYPE, "../nvidia/lib.so")
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "2500 bytes" in err.value.problem
    assert list((sandbox / "host").iterdir()) == []


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar to write a sparse archive")
@pytest.mark.parametrize(
    "flags",
    [["--sparse"], ["--sparse", "--format=posix", "--sparse-version=1.0"], ["--sparse", "--format=posix"]],
    ids=["gnu", "pax-1.0", "pax-0.1"],
)
def test_a_small_sparse_member_is_refused_too(sandbox: Path, flags: list[str]) -> None:
    """Under the cap, a sparse member is still refused: its map is read whole (unbounded, before any
    size is known) and no preload library has holes."""
    (sandbox / "src/amd").mkdir(parents=True)
    with (sandbox / "src/amd/holes.so").open("wb") as holes:
        holes.write(b"\x7fELF")
        holes.seek(4 * 1024 * 1024)
        holes.write(b"end")
    archive = sandbox / "holes.tar"
    subprocess.run(["tar", *flags, "-cf", str(archive), "-C", str(sandbox / "src"), "amd"], check=True)
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "amd/holes.so" in str(err.value) and "sparse file" in err.value.problem
    assert "without --sparse" in err.value.remedy


def test_headers_tarfile_would_read_whole_are_capped(sandbox: Path) -> None:
    """A GNU long name is read into memory whole: one longer than PATH_MAX is refused from its header."""
    archive = sandbox / "longname.tar"
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = 1 << 30
    archive.write_bytes(header.tobuf(tarfile.GNU_FORMAT) + b"a" * 10240)
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "long-name header of 1073741824 bytes" in err.value.problem


def test_the_entry_count_is_capped(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preload_source, "ENTRIES_MAX", 3)
    archive = sandbox / "many.tar"
    with tarfile.open(archive, "w") as tar:
        for i in range(5):
            add(tar, f"amd/{i}.so", data=b"x")
    with pytest.raises(StageError, match="over the cap of 3 entries"):
        plan(archive, sandbox / "host", ["amd"])


class _DeadlineError(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _DeadlineError


def test_a_pipe_swapped_in_after_the_plan_never_blocks_the_apply(sandbox: Path) -> None:
    """The apply opens every source file without blocking and refuses what is not a regular file
    (a read of a pipe with no writer would wait for ever)."""
    src = sandbox / "src/amd"
    src.mkdir(parents=True)
    (src / "libvrocm.so").write_bytes(b"vrocm")
    with plan(sandbox / "src", sandbox / "host", ["amd"]) as staged:
        (src / "libvrocm.so").unlink()
        os.mkfifo(src / "libvrocm.so")
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(10)
        try:
            with pytest.raises(StageError) as err:
                apply(staged)
        except _DeadlineError:
            pytest.fail("apply blocked on a named pipe")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    assert "named pipe" in err.value.problem and str(src / "libvrocm.so") in str(err.value)
    assert [p.name for p in (sandbox / "host" / LIB_DIR).iterdir()] == []


def test_a_huge_file_in_the_destination_is_listed_by_size_not_read(sandbox: Path) -> None:
    src = sandbox / "src/amd"
    src.mkdir(parents=True)
    (src / "libvrocm.so").write_bytes(b"vrocm")
    host = sandbox / "host"
    with plan(sandbox / "src", host, ["amd"]) as staged:
        apply(staged)
    with (host / LIB_DIR / "amd/libvrocm.so").open("r+b") as planted:
        planted.truncate(TIB)
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from gpustack_operator.preload import plan\n"
        "with plan(Path(sys.argv[1]), Path(sys.argv[2]), ['amd']) as p:\n"
        "    print(json.dumps({'replaced': p.subtrees[0].replaced, 'diff': p.diff()}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(sandbox / "src"), str(host)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["replaced"] == ["libvrocm.so"]
    assert f"libvrocm.so  0644  {TIB} bytes (over the size cap, not read)" in result["diff"][0]["before"]


def test_resolving_the_links_is_bounded_in_all(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each link resolves within its own limits, but the archive's together are refused past the
    budget shared by all of them (lowered here: at the real one, 10,000 such links would take minutes)."""
    monkeypatch.setattr(preload_source, "TOTAL_STEPS", 1000)
    archive = sandbox / "slow.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, "amd/x", data=b"x")
        for i in range(20):
            add(tar, f"amd/l{i}", tarfile.SYMTYPE, "a/.." * 50 + "x")
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "more than 1000 path components in all" in err.value.problem
    monkeypatch.setattr(preload_source, "TOTAL_STEPS", 200_000)
    with pytest.raises(StageError, match="more than 1024 path components"):
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
            add(tar, "amd/l", tarfile.SYMTYPE, "./" * 1100 + "x")
        plan(archive, sandbox / "host", ["amd"])


def test_undecodable_names_are_refused_readably(sandbox: Path) -> None:
    """A name that is not UTF-8 would make the module's answer one Ansible refuses to read, hiding the
    error: it is refused, named with the bytes escaped (every message encodes as UTF-8)."""
    archive = sandbox / "bytes.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT, errors="surrogateescape") as tar:
        add(tar, "amd/lib\udcff.so", data=b"x")
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert "amd/lib\\xff.so" in str(err.value) and "not UTF-8" in err.value.problem
    str(err.value).encode("utf-8")

    src = sandbox / "src"
    (src / "amd").mkdir(parents=True)
    (src / "amd" / os.fsdecode(b"lib\xfe.so")).write_bytes(b"x")
    with pytest.raises(StageError) as err:
        plan(src, sandbox / "host", ["amd"])
    assert "lib\\xfe.so" in str(err.value)
    str(err.value).encode("utf-8")


def test_an_undecodable_name_planted_in_the_destination_is_reported_readably(sandbox: Path) -> None:
    src = sandbox / "src"
    (src / "amd").mkdir(parents=True)
    (src / "amd/libvrocm.so").write_bytes(b"vrocm")
    host = sandbox / "host"
    stage_node(_node(host), src, host, check=False)
    (host / LIB_DIR / "amd" / os.fsdecode(b"planted\xff")).write_bytes(b"x")
    checked = stage_node(_node(host), src, host, check=True)
    assert checked.removed == ["amd/planted\\xff"]
    checked.model_dump_json().encode("utf-8")
    json.dumps(checked.diff, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ([(".", tarfile.SYMTYPE, "amd")], "names the archive root but is a link"),
        ([("amd/x/y.so", tarfile.REGTYPE, ""), ("amd/x", tarfile.REGTYPE, "")], "replaces a directory"),
        ([("amd/d", tarfile.DIRTYPE, ""), ("amd/h", tarfile.LNKTYPE, "amd/d")], "is a dir, not a file"),
    ],
)
def test_members_that_cannot_be_laid_out(sandbox: Path, members: list[tuple[str, bytes, str]], problem: str) -> None:
    archive = sandbox / "layout.tar"
    with tarfile.open(archive, "w") as tar:
        for name, kind, link in members:
            add(tar, name, kind, link)
    with pytest.raises(StageError) as err:
        plan(archive, sandbox / "host", ["amd"])
    assert problem in err.value.problem
