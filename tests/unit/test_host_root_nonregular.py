"""Every host read refuses a non-regular file and never blocks (issue 16, "Hostile input"): a FIFO
(or a socket, a directory, a character device) where a file is expected is an error naming the path
and what it is, returned at once -- never a read that waits for a writer that never comes, never the
device's contents. Writes never follow a link planted beside their target."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from gpustack_operator.host import HostPathError, HostRoot

from tests.unit.nonregular import KINDS, plant, refused_words, within


@pytest.mark.parametrize("kind", KINDS)
def test_read_text_refuses_a_non_regular_file_at_once(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "etc/thing", kind)
    host = HostRoot(tmp_path)
    with pytest.raises(HostPathError) as err:
        within(tmp_path, lambda: host.read_text("/etc/thing"))
    assert str(err.value) == f"/etc/thing: {refused_words(kind)}" + (
        "" if kind == "directory" else ", so it was not read (replace it with the file expected there)"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_read_optional_does_not_take_a_non_regular_file_for_an_absent_one(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "etc/thing", kind)
    host = HostRoot(tmp_path)
    with pytest.raises(HostPathError, match=re.escape(refused_words(kind))):
        within(tmp_path, lambda: host.read_optional("/etc/thing"))


@pytest.mark.parametrize("kind", KINDS)
def test_read_bytes_refuses_it_too(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "etc/thing", kind)
    with pytest.raises(HostPathError) as err:
        within(tmp_path, lambda: HostRoot(tmp_path).read_bytes("/etc/thing"))
    assert refused_words(kind) in str(err.value)


def test_a_link_to_a_fifo_is_refused_like_the_fifo(tmp_path: Path) -> None:
    plant(tmp_path / "run/pipe", "fifo")
    (tmp_path / "etc").mkdir()
    os.symlink("/run/pipe", tmp_path / "etc/config")
    with pytest.raises(HostPathError, match=r"^/etc/config: .*FIFO"):
        within(tmp_path, lambda: HostRoot(tmp_path).read_text("/etc/config"))


def test_regular_files_still_read_whole_and_capped(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 200_000)
    host = HostRoot(tmp_path)
    assert host.read_bytes("/big", limit=200_000) == b"x" * 200_000
    assert host.read_text("/big", limit=200_000) == "x" * 200_000
    with pytest.raises(HostPathError, match="read cap"):
        host.read_bytes("/big", limit=199_999)
    assert host.read_optional("/absent") is None


def test_a_write_never_follows_a_link_planted_at_its_temporary_name(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "var/lib").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text("untouched\n")
    # Whatever name the temporary file would take next to the target, a link sits there pointing out.
    for name in (f"record.tmp-{os.getpid()}", f"record.json.tmp-{os.getpid()}"):
        os.symlink(outside, root / "var/lib" / name)
    HostRoot(root).write_text("/var/lib/record.json", "inside\n")
    assert outside.read_text() == "untouched\n"
    assert (root / "var/lib/record.json").read_text() == "inside\n"
    assert not (root / "var/lib/record.json").is_symlink()
    leftovers = {p.name for p in (root / "var/lib").iterdir()} - {"record.json"}
    assert all((root / "var/lib" / n).is_symlink() for n in leftovers)  # only the planted links


def test_a_write_over_a_fifo_target_returns(tmp_path: Path) -> None:
    plant(tmp_path / "var/lib/record.json", "fifo")
    host = HostRoot(tmp_path)
    within(tmp_path, lambda: host.write_text("/var/lib/record.json", "x\n"))
    assert (tmp_path / "var/lib/record.json").read_text() == "x\n"


@pytest.mark.parametrize("kind", ["fifo", "directory", "chardev"])
def test_an_in_place_attribute_write_refuses_a_non_regular_file_at_once(tmp_path: Path, kind: str) -> None:
    plant(tmp_path / "sys/ctl", kind)
    with pytest.raises(HostPathError) as err:
        within(tmp_path, lambda: HostRoot(tmp_path).write_attribute("/sys/ctl", "1\n"))
    assert str(err.value).startswith(f"/sys/ctl: {refused_words(kind)}")


def test_an_in_place_attribute_write_writes_a_regular_file_without_replacing_it(tmp_path: Path) -> None:
    attr = tmp_path / "sys/ctl"
    attr.parent.mkdir(parents=True)
    attr.write_text("0\n")
    inode = attr.stat().st_ino
    HostRoot(tmp_path).write_attribute("/sys/ctl", "1\n")
    assert attr.read_text() == "1\n"
    assert attr.stat().st_ino == inode
    attr.write_text("a longer stale value\n")
    HostRoot(tmp_path).write_attribute("/sys/ctl", "2\n")
    assert attr.read_text() == "2\n"  # as `echo 2 > attr` leaves it: no stale tail
    with pytest.raises(HostPathError, match="/sys/absent"):
        HostRoot(tmp_path).write_attribute("/sys/absent", "1\n")
    assert not (tmp_path / "sys/absent").exists()


@pytest.mark.parametrize("attribute", ["vendor", "numa_node"])
def test_a_fifo_among_a_pci_devices_attributes_costs_that_entry_only(tmp_path: Path, attribute: str) -> None:
    from gpustack_operator.node.pci import scan_pci

    for bdf, vendor in (("0000:01:00.0", "0x10de"), ("0000:02:00.0", "0x1002")):
        dev = tmp_path / "sys/devices/pci0000:00" / bdf
        dev.mkdir(parents=True)
        for name, text in (("vendor", vendor), ("device", "0x2684"), ("class", "0x030000"), ("numa_node", "0")):
            (dev / name).write_text(text + "\n")
        (tmp_path / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/{bdf}", tmp_path / "sys/bus/pci/devices" / bdf)
    plant(tmp_path / "sys/devices/pci0000:00/0000:01:00.0" / attribute, "fifo")
    scan = within(tmp_path, lambda: scan_pci(HostRoot(tmp_path)))
    assert [d.bus_id for d in scan.devices] == ["0000:02:00.0"]
    (error,) = scan.errors
    assert error.bus_id == "0000:01:00.0" and f"{attribute} unreadable" in error.message and "FIFO" in error.message
