"""The NVML binding and the detector called in-process: pynvml's global state bound per node, the
PCI gate, the session lifecycle, and the stand-in's C structs read back through pynvml."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pynvml
import pytest
from gpustack_operator.discovery.detect import detect_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import Detected, Unmeasured
from gpustack_operator.manufacturers.nvidia import nvml as codes
from gpustack_operator.manufacturers.nvidia.nvml import NvmlError, NvmlUnavailableError, open_nvml
from gpustack_operator.settings import load_settings

from tests.conftest import copy_host, empty, host
from tests.stubs.nvidia.data import data_file, library, set_values


def detect(root: Path, no_pci_check: bool = False) -> Detected | Unmeasured:
    result = detect_node(HostRoot(root), resolve_manufacturers(["nvidia"]), load_settings(), no_pci_check)
    return result.outcomes["nvidia"]


def names(root: Path) -> list[str]:
    with open_nvml(HostRoot(root)) as nvml:
        return [nvml.name(nvml.handle(i)) for i in range(nvml.device_count())]


def test_each_node_gets_its_own_library_in_one_process() -> None:
    # pynvml's module-global library and function-pointer cache are rebound on every change of node
    for _ in range(2):
        assert names(host("h100-sxm-8x")) == ["NVIDIA H100 80GB HBM3"] * 8
        assert names(host("rtx4090")) == ["NVIDIA GeForce RTX 4090"]
        assert names(host("mixed-nvidia-mellanox")) == ["NVIDIA L40S"] * 4
    assert pynvml.nvmlLib is not None


def test_session_is_shut_down_after_the_pass() -> None:
    with open_nvml(HostRoot(host("rtx4090"))) as nvml:
        assert nvml.device_count() == 1
    with pytest.raises(pynvml.NVMLError) as err:  # the stand-in counts init/shutdown like NVML
        pynvml.nvmlDeviceGetCount()
    assert err.value.value == pynvml.NVML_ERROR_UNINITIALIZED


def test_concurrent_passes_on_different_nodes_stay_apart() -> None:
    expected = {
        "h100-sxm-8x": ("NVIDIA H100 80GB HBM3", 8),
        "a100-mig": ("NVIDIA A100-SXM4-80GB", 8),
        "rtx4090": ("NVIDIA GeForce RTX 4090", 1),
    }

    def one(name: str) -> tuple[str, int]:
        outcome = detect(host(name))
        assert isinstance(outcome, Detected)
        (group,) = outcome.groups
        return group.name, len(group.accelerators)

    jobs = [name for name in expected for _ in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(one, jobs))
    assert results == [expected[name] for name in jobs]


def test_init_failure_is_unavailable_with_the_nvml_code() -> None:
    with pytest.raises(NvmlUnavailableError) as err, open_nvml(HostRoot(host("nvidia-driver-broken"))):
        pass
    assert err.value.code == codes.ERROR_DRIVER_NOT_LOADED
    assert "usr/lib64/libnvidia-ml.so.1" in err.value.reason and "Driver Not Loaded" in err.value.reason


def test_library_that_will_not_load_is_unavailable(tmp_path: Path) -> None:
    root = copy_host("rtx4090", tmp_path)
    library(root).write_bytes(b"\x7fELF not really")  # e.g. a truncated or foreign-architecture file
    with pytest.raises(NvmlUnavailableError, match="could not be loaded"), open_nvml(HostRoot(root)):
        pass
    outcome = detect(root)
    assert isinstance(outcome, Detected) and outcome.groups == []


def test_pci_gate_never_asks_nvml_on_a_node_without_nvidia_cards(tmp_path: Path) -> None:
    # a CPU-only node carrying an NVML that fails when asked: the PCI check never asks it
    root = copy_host("cpu-only-vm", tmp_path)
    dest = root / "usr/lib/x86_64-linux-gnu"
    dest.mkdir(parents=True, exist_ok=True)
    for f in (library(host("h100-sxm-8x")), data_file(host("h100-sxm-8x"))):
        shutil.copy2(f, dest)
    set_values(root, count_error=999)
    assert empty(detect(root))
    outcome = detect(root, no_pci_check=True)
    assert isinstance(outcome, Unmeasured) and "nvmlDeviceGetCount" in outcome.reason


def test_no_pci_check_still_detects(tmp_path: Path) -> None:
    outcome = detect(host("rtx4090"), no_pci_check=True)
    assert isinstance(outcome, Detected) and outcome.groups[0].name == "NVIDIA GeForce RTX 4090"


def test_struct_layouts_round_trip() -> None:
    """The stand-in writes nvml.h's structs; pynvml's ctypes definitions read them back intact."""
    with open_nvml(HostRoot(host("a100-mig"))) as nvml:
        h = nvml.handle(0)
        pci = nvml.pci_info(h)
        assert (pci.bus_id, pci.bus_id_legacy, pci.domain, pci.bus, pci.device) == (
            "00000000:07:00.0",
            "0000:07:00.0",
            0,
            7,
            0,
        )
        memory = nvml.memory(h)
        assert memory.total == 81920 << 20 and memory.used == 37 << 20
        info = nvml.gpu_instance_profile(h, 0x9)
        assert (info.id, info.name, info.slice_count, info.instance_count, info.memory_mib) == (
            15,
            "1g.20gb",
            1,
            4,
            19968,
        )
        assert nvml.gpu_instance_placements(h, 15) == [(0, 2), (2, 2), (4, 2), (6, 2)]
        assert nvml.mig_mode(h) == (1, 1)
        assert (nvml.index(h), nvml.minor_number(h)) == (0, 2)  # DGX A100: minor != NVML index
        assert nvml.compute_capability(h) == (8, 0) and nvml.architecture(h) == 7
        assert nvml.cuda_driver_version() == 12020 and nvml.driver_version() == "535.183.01"
        with pytest.raises(NvmlError) as err:
            nvml.utilization(h)  # MIG mode: not supported
        assert err.value.unsupported
        with pytest.raises(NvmlError) as err:
            nvml.gpu_instance_profile(h, 0x5)  # 8-slice profile: not on A100
        assert err.value.code == codes.ERROR_NOT_SUPPORTED


def test_memory_v2_excludes_reserved_memory() -> None:
    with open_nvml(HostRoot(host("h100-sxm-8x"))) as nvml:
        h = nvml.handle(0)
        assert nvml.memory(h).used == 71234 << 20  # v2: reserved (328 MiB) not counted as used
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert v1.used == (71234 + 328) << 20
