"""What an unreadable PCI entry keeps from being measured (``PciScan.unreadable_for``): a readable
vendor id scopes it to that vendor; a readable class no manufacturer's accelerators present as, to
none; a driver link naming a manufacturer's kernel driver, to that manufacturer; nothing readable --
to every one. The reason names the entry and what failed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import detect_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import Detected, Unmeasured
from gpustack_operator.node.pci import PciClaim, PciReadError, scan_pci
from gpustack_operator.settings import load_settings

from tests.conftest import copy_host, host
from tests.unit.test_pci import add_device

VENDORS = {"amd": "1002", "ascend": "19e5", "nvidia": "10de", "hygon": "1d94"}
ENTRY = "sys/devices/pci0000:01/0000:01:00.0"


def broken_entry(root: Path, klass: str | None, driver: str | None, vendor_text: str = "garbage\n") -> None:
    """0000:01:00.0 with an unreadable vendor id, and a class (``None``: unreadable too) and driver."""
    add_device(root, ["0000:01:00.0"], "10de", "2330", klass or "030200", driver=driver)
    (root / ENTRY / "vendor").write_text(vendor_text)
    if klass is None:
        (root / ENTRY / "class").unlink()


def scoped(root: Path) -> dict[str, bool]:
    scan = scan_pci(HostRoot(root))
    return {name: bool(scan.unreadable_for(vendor)) for name, vendor in VENDORS.items()}


def test_a_readable_class_that_is_no_accelerator_affects_none(tmp_path: Path) -> None:
    broken_entry(tmp_path, "020000", None)  # a network controller: no manufacturer's accelerator
    assert scoped(tmp_path) == dict.fromkeys(VENDORS, False)


def test_an_accelerator_class_with_a_known_driver_affects_that_manufacturer(tmp_path: Path) -> None:
    broken_entry(tmp_path, "030200", "nvidia")
    assert scoped(tmp_path) == {"amd": False, "ascend": False, "nvidia": True, "hygon": False}


def test_a_known_driver_scopes_an_entry_whose_class_is_unreadable(tmp_path: Path) -> None:
    broken_entry(tmp_path, None, "amdgpu")
    assert scoped(tmp_path) == {"amd": True, "ascend": False, "nvidia": False, "hygon": False}
    broken_entry(tmp_path / "b", None, "hycu")
    assert scoped(tmp_path / "b") == {"amd": False, "ascend": False, "nvidia": False, "hygon": True}


@pytest.mark.parametrize("driver", [None, "vfio-pci"])
def test_nothing_that_scopes_it_affects_every_manufacturer(tmp_path: Path, driver: str | None) -> None:
    broken_entry(tmp_path, "120000", driver)  # an accelerator class several manufacturers use
    assert scoped(tmp_path) == dict.fromkeys(VENDORS, True)
    broken_entry(tmp_path / "b", None, driver)
    assert scoped(tmp_path / "b") == dict.fromkeys(VENDORS, True)


def test_the_reason_names_the_entry_and_what_failed(tmp_path: Path) -> None:
    broken_entry(tmp_path, None, None)
    (reason,) = scan_pci(HostRoot(tmp_path)).unreadable_for("10de")
    assert "0000:01:00.0" in reason
    assert "vendor unreadable" in reason and "class unreadable" in reason and "garbage" in reason


def test_what_could_be_read_is_kept(tmp_path: Path) -> None:
    broken_entry(tmp_path, "0b4000", "hycu")
    (error,) = scan_pci(HostRoot(tmp_path)).errors
    assert (error.vendor, error.class_code, error.driver) == (None, "0b4000", "hycu")


def test_a_readable_vendor_still_scopes_to_that_vendor(tmp_path: Path) -> None:
    add_device(tmp_path, ["0000:01:00.0"], "1002", "74a1", "120000", driver="amdgpu")
    (tmp_path / ENTRY / "numa_node").write_text("many\n")
    scan = scan_pci(HostRoot(tmp_path))
    assert [e.vendor for e in scan.errors] == ["1002"]
    assert scoped(tmp_path) == {"amd": True, "ascend": False, "nvidia": False, "hygon": False}
    assert "numa_node" in scan.unreadable_for("1002")[0]


def test_the_rule_itself() -> None:
    claims = [PciClaim("10de", ("03",), ("nvidia",)), PciClaim("1002", ("03", "12"), ("amdgpu",))]
    err = PciReadError(bus_id="0000:01:00.0", message="x")
    assert err.affects("10de", claims) and err.affects("1002", claims)
    assert not err.model_copy(update={"class_code": "0b4000"}).affects("10de", claims)
    assert not err.model_copy(update={"class_code": "120000", "driver": "amdgpu"}).affects("10de", claims)
    assert err.model_copy(update={"class_code": "120000", "driver": "other"}).affects("10de", claims)
    assert not err.model_copy(update={"vendor": "1002", "class_code": "030000"}).affects("10de", claims)


def test_every_manufacturer_declares_its_kernel_drivers() -> None:
    for entry in REGISTRY.values():
        assert entry.identity.kernel_drivers, entry.name


def test_an_unreadable_nic_leaves_the_gpus_measured(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    scan = scan_pci(HostRoot(root))
    nic = next(d for d in scan.devices if d.vendor == "15b3")
    (root / nic.sysfs_path.lstrip("/") / "vendor").write_text("\n")
    result = detect_node(HostRoot(root), resolve_manufacturers(["nvidia", "amd"]), load_settings(), interfaces=False)
    assert isinstance(result.outcomes["nvidia"], Detected) and len(result.groups[0].accelerators) == 8
    assert isinstance(result.outcomes["amd"], Detected)


@pytest.mark.parametrize("name", ["escaping-symlink", "unreadable-sysfs"])
def test_fixtures_that_cannot_vouch_for_anyone(name: str) -> None:
    result = detect_node(
        HostRoot(host(name)), resolve_manufacturers(sorted(REGISTRY)), load_settings(), interfaces=False
    )
    assert all(isinstance(o, Unmeasured) for o in result.outcomes.values())
    reason = result.outcomes["nvidia"].reason  # type: ignore[union-attr]
    if name == "escaping-symlink":  # entries resolving to /etc: nothing of them readable
        assert "0000:00:05.0" in reason and "0000:00:06.0" in reason and "vendor unreadable" in reason
    else:
        assert "could not be listed" in reason


def test_a_symlinked_entry_outside_the_tree_is_named(tmp_path: Path) -> None:
    add_device(tmp_path, ["0000:02:00.0"], "1002", "74a1", "120000")
    os.symlink("/nonexistent/device", tmp_path / "sys/bus/pci/devices/0000:03:00.0")
    reasons = scan_pci(HostRoot(tmp_path)).unreadable_for("1002")
    assert len(reasons) == 1 and reasons[0].startswith("PCI entry 0000:03:00.0: ")
