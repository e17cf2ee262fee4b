"""The PCI scan over sysfs-shaped trees (relative symlinks, bridges, garbled files)."""

import os
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.node.pci import parse_hex_id, parse_numa_node, scan_pci
from hypothesis import given
from hypothesis import strategies as st


def add_device(
    root: Path,
    chain: list[str],
    vendor: str,
    device: str,
    klass: str,
    numa: str = "0\n",
    driver: str | None = None,
) -> None:
    bdf = chain[-1]
    rel = "pci" + chain[0][:7] + "/" + "/".join(chain)
    d = root / "sys/devices" / rel
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"0x{vendor}\n")
    (d / "device").write_text(f"0x{device}\n")
    (d / "class").write_text(f"0x{klass}\n")
    (d / "numa_node").write_text(numa)
    (d / "local_cpulist").write_text("0-7\n")
    if driver:
        (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        depth = len(rel.split("/")) + 2
        os.symlink("../" * depth + f"bus/pci/drivers/{driver}", d / "driver")
    links = root / "sys/bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/{rel}", links / bdf)


def test_scan_reads_bridges_numa_and_driver(tmp_path: Path) -> None:
    add_device(tmp_path, ["0000:15:01.0", "0000:16:00.0", "0000:18:00.0"], "10de", "2330", "030200", driver="nvidia")
    add_device(tmp_path, ["0000:00:02.0"], "1af4", "1041", "020000", numa="-1\n")
    scan = scan_pci(HostRoot(tmp_path))
    assert scan.failure is None and scan.errors == []
    gpu, nic = sorted(scan.devices, key=lambda d: d.vendor)
    assert (gpu.bus_id, gpu.class_code, gpu.numa_node, gpu.driver) == ("0000:18:00.0", "030200", 0, "nvidia")
    assert gpu.root_id == "0000:15:01.0"
    assert gpu.switches == ["0000:16:00.0", "0000:15:01.0"]
    assert nic.numa_node is None and nic.root_id == ""


def test_garbled_class_is_an_error_for_that_vendor_only(tmp_path: Path) -> None:
    add_device(tmp_path, ["0000:01:00.0"], "10de", "2330", "zzzz")
    add_device(tmp_path, ["0000:02:00.0"], "1002", "74a1", "038000")
    scan = scan_pci(HostRoot(tmp_path))
    assert [d.vendor for d in scan.devices] == ["1002"]
    assert scan.unreadable_for("10de") and not scan.unreadable_for("1002")
    assert "0000:01:00.0" in scan.unreadable_for("10de")[0]


def test_unreadable_vendor_blocks_every_manufacturer(tmp_path: Path) -> None:
    add_device(tmp_path, ["0000:01:00.0"], "10de", "2330", "030200")
    (tmp_path / "sys/devices/pci0000:01/0000:01:00.0/vendor").write_text("garbage\n")
    scan = scan_pci(HostRoot(tmp_path))
    assert scan.unreadable_for("1002") and scan.unreadable_for("10de")


def test_listing_failure_is_a_failed_scan(tmp_path: Path) -> None:
    (tmp_path / "sys/bus/pci").mkdir(parents=True)
    os.symlink("devices", tmp_path / "sys/bus/pci/devices")
    scan = scan_pci(HostRoot(tmp_path))
    assert scan.failure and "Too many levels of symbolic links" in scan.failure
    assert scan.unreadable_for("10de") == [scan.failure]


@given(st.text(max_size=20))
def test_hex_id_parser(text: str) -> None:
    try:
        out = parse_hex_id(text, "vendor", 4)
    except ValueError as exc:
        assert "vendor holds" in str(exc)
    else:
        assert all(c in "0123456789abcdef" for c in out) and len(out) >= 4


@given(st.one_of(st.none(), st.text(max_size=12), st.integers(-5, 64).map(lambda n: f"{n}\n")))
def test_numa_parser(text: str | None) -> None:
    try:
        out = parse_numa_node(text)
    except ValueError as exc:
        assert "numa_node holds" in str(exc)
    else:
        assert out is None or out >= 0


@pytest.mark.parametrize(
    ("raw", "out"), [("0x10de\n", "10de"), ("0x030200", "030200"), ("10DE", "10de"), ("0x8\n", "0008")]
)
def test_hex_examples(raw: str, out: str) -> None:
    width = 6 if len(out) == 6 else 4
    assert parse_hex_id(raw, "x", width) == out
