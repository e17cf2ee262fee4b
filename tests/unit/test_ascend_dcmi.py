"""The libdcmi binding and the Ascend detector, in process, against the DCMI stand-in.

The stand-in (tests/stubs/ascend/fake_dcmi.c) exports the vendor's symbols with the vendor's C
signatures; the production ctypes code loads it unchanged from the fixture host's
``/usr/local/Ascend/driver/lib64/driver/libdcmi.so``.
"""

from __future__ import annotations

import ctypes
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.ascend import dcmi, detect
from gpustack_operator.manufacturers.ascend.identity import IDENTITY
from gpustack_operator.manufacturers.base import DetectContext, Detected, Measured, Unmeasured, resolve
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import load_settings

from tests.conftest import empty, host
from tests.stubs.ascend import fixture
from tests.stubs.ascend.fixture import copy_host

STUB = Path(fixture.__file__).resolve().parent / "fake_dcmi.c"
ENV = ("CANN_HOME", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def ctx(root: Path, no_pci_check: bool = False) -> DetectContext:
    h = HostRoot(root)
    return DetectContext(
        view=h, pci=scan_pci(h), settings=load_settings(), manufacturer=resolve(IDENTITY), no_pci_check=no_pci_check
    )


def accelerators(outcome: object) -> list[dict[str, object]]:
    assert isinstance(outcome, Detected), outcome
    return [a.wire() for g in outcome.groups for a in g.accelerators]


# -- the binding matches the C side ------------------------------------------------------------


def test_every_bound_entry_point_is_exported_by_the_stand_in_and_vice_versa() -> None:
    exported = set(re.findall(r"^int (dcmi\w+)\(", STUB.read_text(), flags=re.MULTILINE))
    assert exported == set(dcmi.SIGNATURES)


STRUCTS = {
    "dcmi_chip_info": dcmi.ChipInfo,
    "dcmi_chip_info_v2": dcmi.ChipInfoV2,
    "dcmi_die_id": dcmi.DieId,
    "dcmi_hbm_info": dcmi.HbmInfo,
    "dcmi_memory_info": dcmi.MemoryInfo,
    "dcmi_get_memory_info_stru": dcmi.MemoryInfoV3,
    "dcmi_pcie_info": dcmi.PcieInfo,
    "dcmi_pcie_info_all": dcmi.PcieInfoAll,
    "dcmi_spod_info": dcmi.SpodInfo,
}


def test_struct_layouts_match_the_c_declarations(tmp_path: Path) -> None:
    """sizeof and every field offset, as gcc lays the header's structs out, equal ctypes'."""
    lines = [f'#include "{STUB}"', "#include <stddef.h>", "int main(void) {"]
    expected: list[str] = []
    for c_name, cls in STRUCTS.items():
        lines.append(f'    printf("{c_name} %zu\\n", sizeof(struct {c_name}));')
        expected.append(f"{c_name} {ctypes.sizeof(cls)}")
        for field, *_ in cls._fields_:
            lines.append(f'    printf("{c_name}.{field} %zu\\n", offsetof(struct {c_name}, {field}));')
            expected.append(f"{c_name}.{field} {getattr(cls, field).offset}")
    lines += ["    return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-Wall", "-o", str(exe), str(source), "-ldl"], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert [line for line in out if line] == expected
    assert ctypes.sizeof(dcmi.PcieInfoAll) == 64  # the header's own comment
    assert ctypes.sizeof(dcmi.ChipInfo) == 3 * 32 + 4
    assert ctypes.sizeof(dcmi.SpodInfo) == 48  # the header's own comment


def test_not_support_is_the_vendor_code() -> None:
    assert dcmi.ERR_NOT_SUPPORT == -8255


# -- V1 -----------------------------------------------------------------------------------------


def test_v1_host_enumerates_cards_in_driver_order() -> None:
    api, found, _ = detect.found_npus(ctx(host("ascend-910b-8x")))
    assert api == "v1"
    assert [f.extra["dcmi_api"] for f in found] == ["v1"] * 8
    assert [f.pci_bus_id for f in found][:4] == ["0000:c1:00.0", "0000:01:00.0", "0000:c2:00.0", "0000:02:00.0"]
    assert {(f.name, f.memory_mib, f.cores, f.family) for f in found} == {("Ascend910B2", 65536, 24, "910B")}
    assert [f.physical_indexes for f in found] == [[i, i, 0] for i in range(8)]
    assert {(f.driver_version, f.runtime_version, f.extra["cann_version"]) for f in found} == {
        ("24.1.rc2", "8.0", "8.0.RC2")
    }
    assert len({f.uuid for f in found}) == 8
    assert all(re.fullmatch(r"([0-9A-F]+ ){4}[0-9A-F]+", f.uuid) for f in found)


def test_physical_indexes_are_the_drivers_numbers(tmp_path: Path) -> None:
    """[physical id, card id, device-in-card], each read from the driver, none the logical index."""
    root = copy_host("ascend-910b-8x", tmp_path)
    for card in range(8):
        fixture.set_npu(root, card, card=10 + card, logic=card, phy=7 - card)
    _, found, _ = detect.found_npus(ctx(root))
    assert [f.physical_indexes for f in found] == [[7 - i, 10 + i, 0] for i in range(8)]


def test_device_whose_die_cannot_be_read_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_npu(root, 2, die_rc=-8005)
    dropped_bus = "0000:c2:00.0"
    with caplog.at_level(logging.WARNING):
        accs = accelerators(detect.detect(ctx(root)))
    assert len(accs) == 7
    assert dropped_bus not in [a["topology"]["pciBusId"] for a in accs]  # type: ignore[index]
    assert all(not str(a["id"]).startswith("0000:") for a in accs)  # never the PCI address
    # later devices keep the driver's index, below which their logical index now sits
    assert [(a["index"], a["physicalIndexes"][0]) for a in accs][2:4] == [(2, 3), (3, 4)]  # type: ignore[index]
    assert "identity die cannot be read" in caplog.text and "-8005" in caplog.text


def test_other_unreadable_identity_fields_drop_only_that_device(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_npu(root, 0, phy_rc=-8005)
    fixture.set_npu(root, 5, pcie_rc=-8007)
    accs = accelerators(detect.detect(ctx(root)))
    assert sorted(a["physicalIndexes"][1] for a in accs) == [1, 2, 3, 4, 6, 7]  # type: ignore[index]


def test_library_that_will_not_initialise_is_an_empty_answer(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_global(root, init_rc=-8005)
    assert empty(detect.detect(ctx(root)))


def test_absent_library_is_an_empty_answer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    (root / fixture.LIB).unlink()
    with caplog.at_level(logging.INFO):
        assert empty(detect.detect(ctx(root)))
    assert "libdcmi.so not found" in caplog.text


def test_failing_enumeration_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_global(root, card_list_rc=-8005)
    outcome = detect.detect(ctx(root))
    assert isinstance(outcome, Unmeasured)
    assert "dcmi_get_card_list returned -8005 (INNER_ERR)" in outcome.reason


def test_library_found_under_cann_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    moved = root / "opt/ascend/driver/lib64/driver"
    moved.mkdir(parents=True)
    for name in ("libdcmi.so", "libdcmi.so.fixture"):
        shutil.move(root / fixture.LIB.replace("libdcmi.so", name), moved / name)
    assert empty(detect.detect(ctx(root)))
    monkeypatch.setenv("CANN_HOME", "/opt/ascend")
    assert len(accelerators(detect.detect(ctx(root)))) == 8


def test_pci_check_gates_the_library(tmp_path: Path) -> None:
    """No Ascend accelerator on the bus: nothing, though the library would answer."""
    root = copy_host("ascend-950pr-v2", tmp_path)
    bus = root / "sys/bus/pci/devices"
    for entry in bus.iterdir():
        if (entry / "class").read_text().startswith("0x12"):
            entry.unlink()
    assert empty(detect.detect(ctx(root)))
    assert len(accelerators(detect.detect(ctx(root, no_pci_check=True)))) == 8


def test_driver_version_falls_back_to_version_info_on_v1(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_global(root, driver_version_rc=-8255)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=24.1.rc9\n")
    _, found, _ = detect.found_npus(ctx(root))
    assert {f.driver_version for f in found} == {"24.1.rc9"}


def test_device_without_hbm_reads_the_detailed_memory_info(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_npu(root, 0, hbm_rc=-8255, ddr_mb=44280, ddr_avail_mb=40000, chip_name="310P3")
    _, found, _ = detect.found_npus(ctx(root))
    first = found[0]
    assert (first.name, first.memory_mib, first.family) == ("Ascend310P3", 44280, "310P")
    assert first.logical_sliced is None  # 310P slices on CANN 9 only; this host has CANN 8.0


def test_non_npu_units_are_skipped(tmp_path: Path) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)
    fixture.set_npu(root, 4, type=1)  # the card's MCU, not an NPU
    _, found, _ = detect.found_npus(ctx(root))
    assert [f.physical_indexes[1] for f in found] == [0, 1, 2, 3, 5, 6, 7]


# -- V2 and the fallback ------------------------------------------------------------------------


def test_v2_host_falls_back_when_v1_answers_not_support() -> None:
    api, found, _ = detect.found_npus(ctx(host("ascend-950pr-v2")))
    assert api == "v2"
    assert len(found) == 8
    assert {f.extra["dcmi_api"] for f in found} == {"v2"}
    assert [f.physical_indexes for f in found] == [[i, i, 0] for i in range(8)]
    assert {(f.name, f.extra["soc_name"], f.family, f.memory_mib) for f in found} == {
        ("Ascend950PR", "Ascend950", "950", 131072)
    }
    # absent on V2 although the driver's version.info is on disk
    assert {f.driver_version for f in found} == {None}
    assert {f.runtime_version for f in found} == {"9.0"}
    assert all(f.logical_sliced is not None and f.logical_sliced.count == 63 for f in found)


def test_v2_reads_the_a5_product_type(tmp_path: Path) -> None:
    _, found, _ = detect.found_npus(ctx(host("ascend-950pr-v2")))
    assert {(f.extra["product_type"], f.extra["product_code"]) for f in found} == {("server-8p", 0)}
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_global(root, mainboard_id=0x68, spod_rc=-8255)  # a card never asks the super pod
    _, found, _ = detect.found_npus(ctx(root))
    assert {(f.extra["product_type"], f.extra["product_code"]) for f in found} == {("card-1p", 5)}
    fixture.set_global(root, mainboard_id=0x44)
    _, found, _ = detect.found_npus(ctx(root))
    assert len(found) == 8 and all("product_type" not in f.extra for f in found)  # optional reading
    _, v1, _ = detect.found_npus(ctx(host("ascend-910b-8x")))
    assert all("product_type" not in f.extra for f in v1)


def test_v2_physical_id_comes_from_its_own_entry_point(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    for dev in range(8):
        fixture.set_npu(root, dev, phy=(dev + 3) % 8)
    _, found, _ = detect.found_npus(ctx(root))
    assert [f.physical_indexes for f in found] == [[(i + 3) % 8, i, 0] for i in range(8)]


def test_v1_init_accepted_but_enumeration_refused_still_falls_back(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_global(root, v1_init_rc=0)
    api, found, _ = detect.found_npus(ctx(root))
    assert (api, len(found)) == ("v2", 8)


def test_missing_v1_symbols_count_as_refusal(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.install_variant(root, "fake_dcmi_v2only.c")
    lib = dcmi.load(HostRoot(root))
    assert not lib.has("dcmi_init") and lib.has("dcmiv2_init")
    api, found, _ = detect.found_npus(ctx(root))
    assert (api, len(found)) == ("v2", 8)


def test_v2_die_failure_drops_the_device(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_npu(root, 6, die_rc=-8005)
    accs = accelerators(detect.detect(ctx(root)))
    assert [a["physicalIndexes"][1] for a in accs] == [0, 1, 2, 3, 4, 5, 7]  # type: ignore[index]


def test_v2_addresses_only_device_zero_of_a_card() -> None:
    session = dcmi.open_dcmi(HostRoot(host("ascend-950pr-v2")))
    assert session.api == "v2"
    assert session.devices_in_card(3) == 1
    with pytest.raises(dcmi.DcmiError) as excinfo:
        session.chip(dcmi.DeviceRef(3, 1))
    assert excinfo.value.code == dcmi.ERR_INVALID_DEVICE_ID
    with pytest.raises(dcmi.DcmiError):
        session.driver_version()


def test_neither_generation_initialising_is_an_empty_answer(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_global(root, init_rc=-8005)
    refused = "V1 dcmi_init returned -8255.*V2 dcmiv2_init returned -8005"
    with pytest.raises(dcmi.DcmiUnavailableError, match=refused):
        dcmi.open_dcmi(HostRoot(root))
    assert empty(detect.detect(ctx(root)))


# -- monitor ------------------------------------------------------------------------------------


def test_monitor_samples_hbm_aicore_temperature_power() -> None:
    outcome = detect.monitor(ctx(host("ascend-910b-8x")))
    assert isinstance(outcome, Measured)
    first = outcome.samples[0]
    assert (first.memory, first.memory_usage, first.memory_utilization) == (65536, 3392, 5)
    assert (first.cores_utilization, first.temperature, first.power_usage) == (0, 41, 95)
    assert len(outcome.samples) == 8


def test_monitor_reports_an_unserved_figure_as_absent(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_npu(root, 0, power_rc=-8255, util_rc=-8255, util_aicore=37)
    fixture.set_npu(root, 1, util_aicore=37, die_rc=-8005)
    outcome = detect.monitor(ctx(root))
    assert isinstance(outcome, Measured)
    first = outcome.samples[0]
    assert (first.power_usage, first.cores_utilization, first.temperature) == (None, None, 38)
    assert len(outcome.samples) == 7  # the device without a die is not sampled either


def test_monitor_enumeration_failure_is_unmeasured(tmp_path: Path) -> None:
    root = copy_host("ascend-950pr-v2", tmp_path)
    fixture.set_global(root, card_list_rc=-8005)
    outcome = detect.monitor(ctx(root))
    assert isinstance(outcome, Unmeasured)
    assert "dcmiv2_get_device_list" in outcome.reason
