"""Host-root resolution: relative links from their directory, absolute links re-rooted, no escape."""

import errno
import os
from pathlib import Path

import pytest
from gpustack_operator.host import HostPathError, HostRoot, HostRootError


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    dev = root / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0", root / "sys/bus/pci/devices/0000:01:00.0")
    (root / "etc").mkdir()
    (root / "etc/hostname").write_text("inside\n")
    (tmp_path / "outside").write_text("secret\n")
    return root


def test_relative_symlink_is_followed_from_its_directory(tree: Path) -> None:
    host = HostRoot(tree)
    assert host.canonical("/sys/bus/pci/devices/0000:01:00.0") == "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    assert host.read_text("/sys/bus/pci/devices/0000:01:00.0/vendor") == "0x10de\n"


def test_absolute_symlink_is_rerooted(tree: Path) -> None:
    os.symlink("/etc/hostname", tree / "sys/abs")
    assert HostRoot(tree).read_text("/sys/abs") == "inside\n"


def test_dotdot_cannot_escape(tree: Path) -> None:
    os.symlink("../../../../../../../outside", tree / "sys/escape")
    host = HostRoot(tree)
    assert host.canonical("/sys/escape") == "/outside"
    assert not host.exists("/sys/escape")
    assert host.canonical("/../../etc/hostname") == "/etc/hostname"


def test_symlink_loop_is_eloop(tree: Path) -> None:
    os.symlink("loop", tree / "sys/loop")
    with pytest.raises(HostPathError) as err:
        HostRoot(tree).listdir("/sys/loop")
    assert err.value.errno == errno.ELOOP
    assert "/sys/loop" in str(err.value)


def test_missing_file_names_the_host_path(tree: Path) -> None:
    with pytest.raises(HostPathError, match="/sys/nothing"):
        HostRoot(tree).read_text("/sys/nothing")
    assert HostRoot(tree).read_optional("/sys/nothing") is None


def test_read_cap(tree: Path) -> None:
    (tree / "big").write_bytes(b"x" * 100)
    with pytest.raises(HostPathError) as err:
        HostRoot(tree).read_text("/big", limit=10)
    assert err.value.errno == errno.EFBIG


def test_unusable_root(tmp_path: Path) -> None:
    with pytest.raises(HostRootError, match="--host-root"):
        HostRoot(tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(HostRootError, match="not a directory"):
        HostRoot(tmp_path / "file")
