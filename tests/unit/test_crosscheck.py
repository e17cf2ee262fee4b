"""Question 1's host cross-check, entering a node root with a real chroot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpustack_operator.manufacturers.amd.hostcli import HOST_CLI as AMD_CLI
from gpustack_operator.manufacturers.ascend.hostcli import HOST_CLI as ASCEND_CLI
from gpustack_operator.manufacturers.base import Unmeasured
from gpustack_operator.manufacturers.nvidia.hostcli import HOST_CLI as NVIDIA_CLI
from gpustack_operator.preflight.crosscheck import absent_here, cross_check, read_host_view
from gpustack_operator.preflight.hostexec import HostExec
from gpustack_operator.preflight.models import Detection, State

from tests.conftest import make_enterable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")

NVIDIA_SMI_L = "".join(
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-6d3c7a1e-2f0b-4a8e-9c1d-0000000000{i:02d})\n" for i in range(8)
)
MIG_LINES = (
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b2c3d4e-0000-1111-2222-333344445555)\n"
    "  MIG 3g.40gb     Device  0: (UUID: MIG-7a8b9c0d-1111-2222-3333-444455556666)\n"
    "  MIG 3g.40gb     Device  1: (UUID: MIG-8a8b9c0d-1111-2222-3333-444455556666)\n"
)
NPU_SMI = (
    "        Total Count                    : 2\n\n"
    "        NPU ID                         : 0\n        Product Name                   : IT21PDAB01\n"
    "        Chip Count                     : 1\n\n"
    "        NPU ID                         : 1\n        Product Name                   : IT21PDAB01\n"
    "        Chip Count                     : 1\n"
)
ROCM_SMI = (
    "\n\n============================ ROCm System Management Interface ============================\n"
    "====================================== Unique ID =======================================\n"
    "GPU[0]\t\t: Unique ID: 0x18a7e1c9e2ce7b3c\nGPU[1]\t\t: Unique ID: 0x28a7e1c9e2ce7b3c\n"
    "==========================================================================================\n"
    "================================== End of ROCm SMI Log ===================================\n"
)


def node(tmp_path: Path, cli: str | None, output: str = "", status: int = 0) -> HostExec:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    make_enterable(root)
    if cli:
        script = root / "usr/bin" / cli
        script.parent.mkdir(parents=True, exist_ok=True)
        printf = output.replace("%", "%%").replace("'", "'\\''")
        script.write_text(f"#!/bin/sh\nprintf '{printf}'\nexit {status}\n")
        script.chmod(0o755)
    return HostExec(str(root))


def test_each_cli_counts_in_the_detectors_unit() -> None:
    assert NVIDIA_CLI.count(NVIDIA_SMI_L).accelerators == 8
    assert NVIDIA_CLI.count(MIG_LINES).accelerators == 1  # MIG partitions are not cards
    assert ASCEND_CLI.count(NPU_SMI).accelerators == 2
    assert ASCEND_CLI.count(NPU_SMI.replace("Chip Count                     : 1", "Chip Count : 2")).accelerators == 4
    assert AMD_CLI.count(ROCM_SMI).accelerators == 2


def test_host_sees_what_detection_saw(tmp_path: Path) -> None:
    det = Detection(state=State.OK, accelerators=8, detail="NVIDIA H100 80GB HBM3 x8")
    out = cross_check(node(tmp_path, "nvidia-smi", NVIDIA_SMI_L), NVIDIA_CLI, det)
    assert out.state is State.OK and out.host is not None
    assert out.host.accelerators == 8 and out.host.reason is None
    assert out.host.command.endswith("nvidia-smi -L") and "chroot" in out.host.command


def test_host_sees_more_is_unavailable_naming_the_mounts(tmp_path: Path) -> None:
    det = Detection(state=State.NOT_DECLARED, reason="the detect pass found no accelerator of this manufacturer")
    out = cross_check(node(tmp_path, "nvidia-smi", NVIDIA_SMI_L), NVIDIA_CLI, det)
    assert out.state is State.UNAVAILABLE
    assert (
        out.reason is not None and "nvidia-smi reports 8 accelerator(s) where this container detected 0" in out.reason
    )
    assert out.host is not None and out.host.missing_mounts
    assert any("container runtime" in m for m in out.host.missing_mounts)


def test_partial_visibility_is_the_same_mistake(tmp_path: Path) -> None:
    det = Detection(state=State.OK, accelerators=1, detail="x")
    out = cross_check(node(tmp_path, "nvidia-smi", NVIDIA_SMI_L), NVIDIA_CLI, det)
    assert out.state is State.UNAVAILABLE


def test_host_seeing_fewer_is_not_a_failure(tmp_path: Path) -> None:
    det = Detection(state=State.OK, accelerators=4, detail="x")
    out = cross_check(node(tmp_path, "npu-smi", NPU_SMI), ASCEND_CLI, det)
    assert out.state is State.OK and out.host is not None and out.host.accelerators == 2


def test_failed_detection_keeps_its_reason(tmp_path: Path) -> None:
    det = Detection(state=State.UNAVAILABLE, reason="could not measure")
    out = cross_check(node(tmp_path, "rocm-smi", ROCM_SMI), AMD_CLI, det, Unmeasured("could not measure"))
    assert out.reason == "could not measure" and out.host is not None and out.host.accelerators == 2


def test_no_cli_on_the_host(tmp_path: Path) -> None:
    det = Detection(state=State.NOT_DECLARED, reason="none")
    out = cross_check(node(tmp_path, None), NVIDIA_CLI, det)
    assert out.state is State.NOT_DECLARED
    assert (
        out.host is not None and out.host.reason == "the host carries no nvidia-smi, so it cannot be asked what it sees"
    )


def test_cli_that_fails(tmp_path: Path) -> None:
    det = Detection(state=State.NOT_DECLARED, reason="none")
    out = cross_check(node(tmp_path, "nvidia-smi", "NVIDIA-SMI has failed\n", status=9), NVIDIA_CLI, det)
    assert out.state is State.NOT_DECLARED
    assert out.host is not None and out.host.reason == "nvidia-smi: exit status 9: NVIDIA-SMI has failed"


def test_root_without_etc_is_no_host_root(tmp_path: Path) -> None:
    det = Detection(state=State.NOT_DECLARED, reason="none")
    out = cross_check(HostExec(str(tmp_path)), NVIDIA_CLI, det)
    assert out.host is not None and out.host.reason is not None and "no host root to enter" in out.host.reason


def test_absent_here_keeps_sentences_and_missing_paths(tmp_path: Path) -> None:
    present = tmp_path / "present"
    present.mkdir()
    assert absent_here((str(present), "/definitely/not/here", "a sentence about a runtime")) == [
        "/definitely/not/here",
        "a sentence about a runtime",
    ]


def test_a_310p_duo_host_counts_chips_not_cards(tmp_path: Path) -> None:
    duo = NPU_SMI.replace("Chip Count                     : 1", "Chip Count                     : 2")
    det = Detection(state=State.OK, accelerators=2, detail="x")
    out = cross_check(node(tmp_path, "npu-smi", duo), ASCEND_CLI, det)
    assert out.state is State.UNAVAILABLE and out.host is not None and out.host.accelerators == 4
    assert out.reason is not None and "npu-smi reports 4 accelerator(s) where this container detected 2" in out.reason


def test_undecodable_output_is_read_not_raised(tmp_path: Path) -> None:
    garbled = "GPU 0: NVIDIA \\377\\376 H100 (UUID: GPU-\\300)\nGPU 1: \\351t\\351\n"  # printf's octal escapes
    view = read_host_view(node(tmp_path, "nvidia-smi", garbled), NVIDIA_CLI)
    assert view.reason is None and view.accelerators == 2
    assert view.detail is not None and "\ufffd" in view.detail


def test_output_that_is_no_listing_says_so(tmp_path: Path) -> None:
    view = read_host_view(node(tmp_path, "rocm-smi", "Segmentation fault\n"), AMD_CLI)
    assert view.accelerators == 0
    assert view.reason is not None and view.reason.startswith("rocm-smi --showuniqueid printed neither its banner")


def test_unreadable_lines_are_named_beside_the_count(tmp_path: Path) -> None:
    view = read_host_view(node(tmp_path, "nvidia-smi", NVIDIA_SMI_L + "GPU 99999999999999999999999: x\n"), NVIDIA_CLI)
    assert view.accelerators == 8
    assert view.reason is not None and "'GPU 99999999999999999999999: x'" in view.reason


def test_failing_cli_with_undecodable_stderr(tmp_path: Path) -> None:
    host = node(tmp_path, "npu-smi", "", status=3)
    script = Path(host.root) / "usr/bin/npu-smi"
    script.write_text("#!/bin/sh\nprintf 'dcmi \\377 failed\\n' >&2\nexit 3\n")
    view = read_host_view(host, ASCEND_CLI)
    assert view.reason == "npu-smi: exit status 3: dcmi \ufffd failed"
