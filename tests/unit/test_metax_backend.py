"""MetaX over MXSML: detection, failure injection, monitor and the read-only sGPU registry mode, against
the libmxsml stand-in (tests/stubs/metax/fake_mxsml.c) and the sysfs registry of ``metax-c500``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import monitor_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import DetectContext, Detected, Measured, ModeError, Unmeasured
from gpustack_operator.manufacturers.metax.detect import metax_family, parse_drm_nodes
from gpustack_operator.manufacturers.metax.modes import SGPU, parse_sched_class, parse_subdevices
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import copy_host, empty, host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "opt/maca/lib/libmxsml.so"
BUSES = ["0000:0e:00.0", "0000:0f:00.0", "0000:10:00.0", "0000:12:00.0", "0000:35:00.0"]


def edit_fixture(root: Path, **values: object) -> None:
    edit_kv_fixture(root / (LIB + ".fixture"), **values)


def detect(root: Path) -> Detected | Unmeasured:
    return detect_one(root, "metax")


def context(root: Path) -> DetectContext:
    host_root = HostRoot(root)
    return DetectContext(
        view=host_root,
        pci=scan_pci(host_root),
        settings=load_settings(),
        manufacturer=resolve_manufacturers(["metax"])["metax"],
    )


# -- parsers -----------------------------------------------------------------------------------


@given(st.integers(0, 4096), st.integers(128, 4096), st.lists(st.sampled_from(["controlD64", "foo", "card"])))
def test_drm_nodes_card_then_render(card: int, render: int, noise: list[str]) -> None:
    entries = [*noise, f"renderD{render}", f"card{card}"]
    assert parse_drm_nodes(entries) == [card, render]
    assert parse_drm_nodes([*noise, f"card{card}"]) == [card]
    assert parse_drm_nodes([*noise, f"renderD{render}"]) == []


@given(st.lists(st.text(max_size=12)))
def test_drm_nodes_never_raise(entries: list[str]) -> None:
    result = parse_drm_nodes(entries)
    assert len(result) <= 2 and all(n >= 0 for n in result)


@given(st.sampled_from("CNGcng"), st.integers(10, 9999), st.sampled_from(["MX", "MetaX ", ""]))
def test_family_is_the_series_letter(letter: str, number: int, prefix: str) -> None:
    assert metax_family(f"{prefix}{letter}{number}") == f"MX{letter.upper()}"


@given(st.text(alphabet="ABDEFHIJKLMOPQRSTUVWXYZ- ", max_size=20))
def test_family_absent_without_a_series(name: str) -> None:
    assert metax_family(name) is None


@given(st.lists(st.integers(0, 63), unique=True), st.lists(st.sampled_from(["create", "destroy", "sched_class"])))
def test_subdevices_are_the_sgpu_entries(indexes: list[int], controls: list[str]) -> None:
    entries = [*controls, *(f"sgpu{n}" for n in indexes), "sgpux", "sgpu"]
    assert parse_subdevices(entries) == sorted(indexes)


@given(st.text(max_size=8))
def test_sched_class_only_known_values(text: str) -> None:
    value = parse_sched_class(text)
    assert value in (None, "best-effort", "fixed-share", "burst-share")
    if value is not None:
        assert int(text.strip()) in (0, 1, 2)


def test_sched_class_names() -> None:
    assert [parse_sched_class(t) for t in ("0\n", "1", " 2 ", "3", None)] == [
        "best-effort",
        "fixed-share",
        "burst-share",
        None,
        None,
    ]


# -- detection ---------------------------------------------------------------------------------


def test_detects_eight_mxc500_with_drm_indexes() -> None:
    outcome = detect(host("metax-c500"))
    assert isinstance(outcome, Detected)
    (group,) = outcome.groups
    assert (group.id, group.name, group.memory, group.family) == ("mxc500", "MXC500", 65536, "MXC")
    assert (group.driver_version, group.runtime_version) == ("3.6.11", "3.5.3.18")
    accs = group.accelerators
    assert [a.topology.pci_bus_id for a in accs][:5] == BUSES
    assert [a.physical_indexes for a in accs] == [[i + 1, 128 + i] for i in range(8)]  # card1.. / renderD128..
    assert all(a.id.startswith("GPU-") for a in accs)
    assert {a.topology.numa_affinity for a in accs} == {"0"}
    assert all(a.status.logical_sliced and a.status.logical_sliced.count == 16 for a in accs)


def test_init_failure_and_absent_library_are_no_hardware(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    edit_fixture(root, init=1)
    assert empty(detect(root))
    (root / LIB).unlink()
    assert empty(detect(root))


def test_a_gpu_whose_info_fails_is_dropped(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    edit_fixture(root, device_2_info_error=6, device_6_mode=2)  # one unreadable, one a VF
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    accs = outcome.groups[0].accelerators
    assert len(accs) == 6
    buses = [a.topology.pci_bus_id for a in accs]
    assert "0000:10:00.0" not in buses and "0000:37:00.0" not in buses


def test_missing_drm_nodes_fall_back_to_the_mxsml_index(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    shutil.rmtree(root / "sys/module")
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    assert [a.physical_indexes for a in outcome.groups[0].accelerators] == [[i] for i in range(8)]


def test_monitor_converts_units() -> None:
    sample = monitor_node(HostRoot(host("metax-c500")), resolve_manufacturers(["metax"]), load_settings())
    outcome = sample.outcomes["metax"]
    assert isinstance(outcome, Measured) and len(outcome.samples) == 8
    s1 = outcome.samples[1]
    # 926 MiB used of 64 GiB; 36.00 °C from hundredths; 28.1 W + 29.2 W summed over the power ways
    assert (s1.memory, s1.memory_usage, s1.memory_utilization) == (65536, 926, 1)
    assert (s1.temperature, s1.power_usage, s1.cores_utilization) == (36, 57, 3)


# -- sGPU registry mode ------------------------------------------------------------------------


def _groups(root: Path):  # type: ignore[no-untyped-def]
    outcome = detect(root)
    assert isinstance(outcome, Detected)
    return outcome.groups


def test_sgpu_read_reports_existing_subdevices() -> None:
    states = SGPU.read(context(host("metax-c500")), _groups(host("metax-c500")))
    assert len(states) == 8 and all(s.mode == "sgpu" and s.declared for s in states)
    assert states[0].enabled is True and "sgpu0, sgpu1" in (states[0].detail or "")
    assert "fixed-share" in (states[0].detail or "")
    assert [s.enabled for s in states[1:]] == [False] * 7
    assert "holds no subdevice" in (states[1].detail or "")
    assert SGPU.writable is False


def test_sgpu_absent_registry_is_not_in_mode_yet(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    groups = _groups(root)
    shutil.rmtree(HostRoot(root).path("/sys/bus/pci/devices/0000:0f:00.0/sgpu"))
    states = SGPU.read(context(root), groups)
    assert states[1].enabled is False and "no sgpu registry" in (states[1].detail or "")


def test_sgpu_unreadable_registry_is_an_error(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    groups = _groups(root)
    registry = HostRoot(root).path("/sys/bus/pci/devices/0000:10:00.0/sgpu")
    shutil.rmtree(registry)
    registry.write_text("not a directory\n")
    with pytest.raises(ModeError) as err:
        SGPU.read(context(root), groups)
    assert "0000:10:00.0" in str(err.value) and "could not be read" in str(err.value)
    assert err.value.accelerator == groups[0].accelerators[2].id


def test_sgpu_missing_device_is_an_error(tmp_path: Path) -> None:
    root = copy_host("metax-c500", tmp_path)
    groups = _groups(root)
    (root / "sys/bus/pci/devices/0000:35:00.0").unlink()
    with pytest.raises(ModeError, match=re.escape("0000:35:00.0 is absent")):
        SGPU.read(context(root), groups)


def test_sgpu_is_read_only() -> None:
    root = host("metax-c500")
    state = SGPU.read(context(root), _groups(root))[1]
    with pytest.raises(ModeError, match="read only"):
        SGPU.set(context(root), state, True)
