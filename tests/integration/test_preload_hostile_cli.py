"""Issue 16, end to end: ``dm preflight --dry-run`` and the ``preload_libraries`` module's check mode
change nothing on disk -- the node, the source, and ``$TMPDIR`` snapshotted before and after -- with a
good tarball and with the hostile one (the long symlink chain that placed a file two levels above
``$TMPDIR`` when the plan extracted the archive). A real run with the hostile tarball fails naming it
and writes nothing either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO, fresh_node, make_enterable
from tests.unit.preload_archives import add, long_symlink_chain

FIXTURES = REPO / "tests/fixtures/hosts"
CLI = BIN / "gpustack-operator"


def snapshot(top: Path) -> dict[str, tuple[int, int, str]]:
    """Every path under ``top``, links not followed: mode, size, link target."""
    out: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(top))] = (st.st_mode, st.st_size, os.readlink(path) if path.is_symlink() else "")
    return out


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "tmp/inner").mkdir(parents=True)
    return tmp_path


def _good(path: Path, prefix: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        add(tar, prefix, tarfile.DIRTYPE)
        add(tar, f"{prefix}/libshim.so", data=b"\x7fELF stand-in\n")
        add(tar, f"{prefix}/libshim.so.1", tarfile.SYMTYPE, "libshim.so")
    return path


def _archives(sandbox: Path, prefix: str) -> dict[str, Path]:
    extract_dir_len = len(str(sandbox / "tmp/inner")) + len("/gpustack-preload-xxxxxxxx")
    return {
        "good": _good(sandbox / "good.tar.gz", prefix),
        "hostile": long_symlink_chain(sandbox / "hostile.tar", extract_dir_len, prefix=prefix),
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
@pytest.mark.parametrize("which", ["good", "hostile"])
def test_preflight_dry_run_writes_nothing_anywhere(sandbox: Path, which: str) -> None:
    node = sandbox / "node"
    shutil.copytree(FIXTURES / "h100-sxm-8x", node, symlinks=True, ignore=fresh_node)
    make_enterable(node)
    archive = _archives(sandbox, "nvidia/cuda-12")[which]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    env["TMPDIR"] = str(sandbox / "tmp/inner")
    before = snapshot(sandbox)
    proc = subprocess.run(
        [
            str(CLI),
            "dm",
            "preflight",
            "--manufacturer=nvidia",
            "--detect-root",
            str(node),
            "--host-root",
            str(node),
            "--runtime",
            "docker",
            "--preload-source",
            str(archive),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert snapshot(sandbox) == before
    assert not (sandbox / "pwned").exists()
    doc = yaml.safe_load(proc.stdout)
    assert doc["accelerators"], proc.stderr


@pytest.mark.ansible
@pytest.mark.parametrize("which", ["good", "hostile"])
def test_module_check_mode_writes_nothing_anywhere(ansible_env: dict[str, str], sandbox: Path, which: str) -> None:
    host = sandbox / "host"
    shutil.copytree(FIXTURES / "mi300x-8x", host, symlinks=True, ignore=fresh_node)
    archive = _archives(sandbox, "amd")[which]
    env = {
        **ansible_env,
        "TMPDIR": str(sandbox / "tmp/inner"),
        "ANSIBLE_LOCAL_TEMP": str(sandbox.parent / f"{sandbox.name}-ansible"),  # outside the snapshot
        "ANSIBLE_REMOTE_TEMP": str(sandbox.parent / f"{sandbox.name}-ansible"),
        "HOME": str(sandbox.parent / f"{sandbox.name}-home"),  # ansible's own ~/.ansible, outside it too
    }
    inv = sandbox.parent / f"{sandbox.name}-inventory.json"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {
                        "node": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(BIN / "python"),
                            "gpustack_host_root": str(host),
                        }
                    }
                }
            }
        )
    )
    before = snapshot(sandbox)
    for flags in (["--check", "--diff"], []):
        proc = subprocess.run(
            [
                str(BIN / "ansible"),
                "all",
                "-i",
                str(inv),
                "-m",
                "gpustack.accelerators.preload_libraries",
                "-a",
                f"src={archive}",
                *flags,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if flags or which == "hostile":
            assert snapshot(sandbox) == before, (flags, proc.stdout)
        assert "Traceback" not in proc.stdout, proc.stdout
        if which == "hostile":
            assert proc.returncode != 0 and "FAILED" in proc.stdout, proc.stdout
            assert f"{archive}: " in proc.stdout and "rebuild the archive" in proc.stdout
        else:
            assert proc.returncode == 0, proc.stdout
    assert not (sandbox / "pwned").exists()
    if which == "good":
        assert (host / "var/lib/gpustack/operator/lib/amd/libshim.so").read_bytes() == b"\x7fELF stand-in\n"
