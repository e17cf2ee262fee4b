"""Ascend's responder (issue 10): visibility index per generation, container-share outcomes, the
vcann-rt slice (npu_info.config, library mount, vNPU ids), against the DCMI stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.ascend import detect
from gpustack_operator.manufacturers.ascend.respond import CONFIG_CONTAINER_PATH, LIB_CONTAINER_DIR, RESPONDER
from gpustack_operator.manufacturers.base import Detected
from gpustack_operator.manufacturers.respond import (
    PRELOAD_FILE,
    ContainerRef,
    Family,
    Grant,
    Granted,
    RefusedError,
    RespondContext,
    SliceBudget,
)
from gpustack_operator.settings import load_settings

from tests.stubs.ascend import fixture
from tests.stubs.ascend.fixture import copy_host
from tests.unit.test_ascend_dcmi import ctx as detect_ctx

V1 = "ascend-910b-8x"
V2 = "ascend-950pr-v2"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CANN_HOME", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)


class Node:
    """A private copy of a fixture node, its detected group and a host tree with the libraries staged."""

    def __init__(self, tmp_path: Path, name: str = V1, variant: str | None = None) -> None:
        self.root = copy_host(name, tmp_path)
        if variant is not None:  # before anything loads the library (a loaded one stays loaded)
            fixture.install_variant(self.root, variant)
        self.detect = detect_ctx(self.root)
        outcome = detect.detect(self.detect)
        assert isinstance(outcome, Detected)
        self.group: DevicesGroup = outcome.groups[0]
        self.host_dir = tmp_path / "host"
        self.host_dir.mkdir()
        self.ctx = RespondContext(
            view=HostRoot(self.root), host=HostRoot(self.host_dir), settings=load_settings(), detect=self.detect
        )

    def stage(self, subtree: str) -> Path:
        lib = self.host_dir / self.ctx.lib_dir.lstrip("/") / subtree
        lib.mkdir(parents=True)
        (lib / "libvruntime.so").write_bytes(b"\x7fELF")
        return lib

    def grant(
        self,
        family: Family,
        *indexes: int,
        uid: str = "uid-1",
        container: str = "main",
        env: dict[str, str] | None = None,
        budget: SliceBudget | None = None,
        group: DevicesGroup | None = None,
    ) -> Grant:
        g = group or self.group
        return Grant(
            manufacturer="ascend",
            family=family,
            accelerators=tuple(Granted(g, g.accelerators[i]) for i in indexes),
            container=ContainerRef(namespace="ns", pod="p", pod_uid=uid, container=container, env=env or {}),
            budget=budget if budget is not None else (SliceBudget(25, 16384) if family is Family.SLICED else None),
        )

    def config(self, uid: str = "uid-1", container: str = "main") -> str:
        path = self.host_dir / self.ctx.pod_dir(uid, container, "npu_info.config").lstrip("/")
        return path.read_text()


def with_indexes(group: DevicesGroup, index: int, physical: list[int], family: str | None = None) -> DevicesGroup:
    copy = group.model_copy(deep=True)
    copy.accelerators[index].physical_indexes = physical
    if family is not None:
        copy.family = family
    return copy


# -- ASCEND_VISIBLE_DEVICES (reference rules §9) ---------------------------------------------------


@pytest.mark.parametrize(
    ("family", "expected"),
    [("910B", "7"), ("950", "3")],
)
@pytest.mark.parametrize("mode", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_visible_devices_per_generation(tmp_path: Path, family: str, expected: str, mode: Family) -> None:
    node = Node(tmp_path)
    fixture.set_npu(node.root, 3, share=1)  # {7, 3, 0} addresses card 3 for the flag
    group = with_indexes(node.group, 0, [7, 3, 0], family)
    injection = RESPONDER.respond(node.grant(mode, 0, group=group), node.ctx)
    assert injection.envs == {"ASCEND_VISIBLE_DEVICES": expected}
    assert injection.mounts == [] and injection.devices == []


def test_several_npus_are_listed_in_grant_order_by_driver_index(tmp_path: Path) -> None:
    node = Node(tmp_path)
    group = with_indexes(with_indexes(node.group, 2, [5, 2, 0]), 4, [6, 4, 0])
    injection = RESPONDER.respond(node.grant(Family.EXCLUSIVE, 2, 4, group=group), node.ctx)
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == "5,6"


def test_950_with_one_index_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path, V2)
    group = with_indexes(node.group, 0, [7])
    with pytest.raises(RefusedError, match="carries no dcmi device index"):
        RESPONDER.respond(node.grant(Family.EXCLUSIVE, 0, group=group), node.ctx)


# -- container-share (supplement §1.6) -------------------------------------------------------------


def test_exclusive_never_touches_the_flag(tmp_path: Path) -> None:
    node = Node(tmp_path)
    fixture.set_global(node.root, share_get_rc=-8005, share_set_rc=-8002)  # any touch would fail
    RESPONDER.respond(node.grant(Family.EXCLUSIVE, 1), node.ctx)
    assert fixture.npu_value(node.root, 1, "share") == "0"


@pytest.mark.parametrize("mode", [Family.SHARED, Family.VISIBILITY, Family.SLICED])
def test_tenanted_modes_turn_the_flag_on(tmp_path: Path, mode: Family) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")
    injection = RESPONDER.respond(node.grant(mode, 2), node.ctx)
    assert fixture.npu_value(node.root, 2, "share") == "1"
    assert fixture.npu_value(node.root, 3, "share") == "0"
    assert any("npu-smi set -t device-share -i 2 -c 0 -d 1" in line for line in injection.log)


def test_flag_already_on_is_not_written(tmp_path: Path) -> None:
    node = Node(tmp_path)
    fixture.set_npu(node.root, 4, share=1, share_set_rc=-8002)  # a write would fail
    injection = RESPONDER.respond(node.grant(Family.SHARED, 4), node.ctx)
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == "4" and injection.log == []


def test_missing_entry_point_refuses_without_writing_or_a_command(tmp_path: Path) -> None:
    node = Node(tmp_path, variant="fake_dcmi_noshare.c")
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.SHARED, 0), node.ctx)
    assert "libdcmi exports no dcmi_get_device_share_enable" in err.value.message
    assert "nothing was written" in err.value.message and "npu-smi set" not in err.value.message
    assert fixture.npu_value(node.root, 0, "share") == "0"


def test_library_not_loaded_refuses_without_a_command(tmp_path: Path) -> None:
    node = Node(tmp_path)
    (node.root / fixture.LIB).unlink()
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.VISIBILITY, 0), node.ctx)
    assert "libdcmi is not loaded" in err.value.message and "npu-smi set" not in err.value.message


def test_v2_declares_no_flag_and_is_allowed_with_a_log(tmp_path: Path) -> None:
    node = Node(tmp_path, V2)
    injection = RESPONDER.respond(node.grant(Family.SHARED, 1), node.ctx)
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == "1"
    assert any(node.group.accelerators[1].id in line and "declares no" in line for line in injection.log)


def test_other_read_failure_still_writes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    fixture.set_npu(node.root, 5, share_get_rc=-8005)
    RESPONDER.respond(node.grant(Family.SHARED, 5), node.ctx)
    assert fixture.npu_value(node.root, 5, "share") == "1"


def test_read_and_write_failure_reports_both_and_the_remedy(tmp_path: Path) -> None:
    node = Node(tmp_path)
    fixture.set_npu(node.root, 1, share_get_rc=-8005, share_set_rc=-8002)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.SHARED, 1), node.ctx)
    message = err.value.message
    assert node.group.accelerators[1].id in message and "container-share" in message
    assert "read failed: dcmi_get_device_share_enable returned -8005" in message
    assert "write failed: dcmi_set_device_share_enable returned -8002" in message
    assert "remedy: run `npu-smi set -t device-share -i 1 -c 0 -d 1` on the host" in message
    assert fixture.npu_value(node.root, 1, "share") == "0"


# -- sliced (vcann-rt) ----------------------------------------------------------------------------


def test_sliced_writes_npu_info_config_and_mounts_the_library(tmp_path: Path) -> None:
    node = Node(tmp_path)
    lib = node.stage("ascend/cann-8-910b")
    group = with_indexes(node.group, 3, [6, 3, 0])
    injection = RESPONDER.respond(node.grant(Family.SLICED, 3, group=group, budget=SliceBudget(10, 16384)), node.ctx)
    accel_id = node.group.accelerators[3].id
    assert node.config() == (
        "physical-npu-id=6\n"
        "virtual-npu-id=0\n"
        "aicore-quota=10\n"
        "memory-quota=16384\n"
        f"shm-id={accel_id.replace(' ', '-')}\n"
        "scheduling-policy=2\n"
    )
    assert " " not in node.config().split("shm-id=")[1].strip()
    mounts = {m.container_path: (m.host_path, m.read_only) for m in injection.mounts}
    lib_host = "/" + str(lib.relative_to(node.host_dir))
    assert mounts[LIB_CONTAINER_DIR] == (lib_host, True)
    preload = node.ctx.pod_dir("uid-1", "_preload", "main")  # per container, outside its working dir
    assert mounts[PRELOAD_FILE] == (preload, True)
    assert node.ctx.host.read_text(preload) == f"{LIB_CONTAINER_DIR}/libvruntime.so\n"
    assert mounts[CONFIG_CONTAINER_PATH] == (node.ctx.pod_dir("uid-1", "main", "npu_info.config"), True)
    assert injection.envs == {"ASCEND_VISIBLE_DEVICES": "6", "ENPU_LOG_LEVEL": "1", "ENPU_DSMI_HOOK": "1"}


def test_sliced_950_config_keeps_the_physical_id_while_the_env_takes_the_device_id(tmp_path: Path) -> None:
    node = Node(tmp_path, V2)
    node.stage("ascend/cann-9-950")
    group = with_indexes(node.group, 0, [7, 3, 0])
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0, group=group), node.ctx)
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == "3"
    assert node.config().startswith("physical-npu-id=7\n")


def test_never_overwrite_the_containers_own_env(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")
    env = {"ENPU_LOG_LEVEL": "3", "ENPU_DSMI_HOOK": "0"}
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0, env=env), node.ctx)
    assert "ENPU_LOG_LEVEL" not in injection.envs and "ENPU_DSMI_HOOK" not in injection.envs


def test_virtual_npu_ids_are_lowest_free_per_physical_npu_and_idempotent(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")

    def vnpu(uid: str, index: int, container: str = "main") -> int:
        RESPONDER.respond(node.grant(Family.SLICED, index, uid=uid, container=container), node.ctx)
        line = next(ln for ln in node.config(uid, container).splitlines() if ln.startswith("virtual-npu-id="))
        return int(line.split("=")[1])

    assert vnpu("a", 0) == 0
    assert vnpu("b", 0) == 1
    assert vnpu("c", 1) == 0  # another physical NPU starts again at 0
    assert vnpu("a", 0) == 0  # a retried container keeps its id
    assert vnpu("b", 0, container="second") == 2
    # a gone pod's directory frees its id
    (node.host_dir / node.ctx.pod_dir("a").lstrip("/") / "main" / "npu_info.config").unlink()
    assert vnpu("d", 0) == 0


def test_a_corrupt_neighbour_config_fails_closed(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")
    bad = node.host_dir / node.ctx.pod_dir("x", "main").lstrip("/")
    bad.mkdir(parents=True)
    (bad / "npu_info.config").write_text("garbage\n")
    with pytest.raises(RefusedError, match="names no physical-npu-id"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)


@pytest.mark.parametrize(
    "text",
    [
        "physical-npu-id=\u0660\nvirtual-npu-id=\u0660\n",  # Arabic-Indic zeros: int() reads them, the file is not ours
        "physical-npu-id=0\nvirtual-npu-id=1_0\n",  # int() reads 10
        "physical-npu-id=0\nvirtual-npu-id=+1\n",
        "physical-npu-id=0\nvirtual-npu-id=" + "9" * 5000 + "\n",
        "physical-npu-id=0\nvirtual-npu-id=63\n",  # past the 63 vNPUs a device serves
    ],
)
def test_a_neighbour_config_with_ids_no_slice_could_hold_fails_closed(tmp_path: Path, text: str) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")
    bad = node.host_dir / node.ctx.pod_dir("x", "main").lstrip("/")
    bad.mkdir(parents=True)
    (bad / "npu_info.config").write_text(text)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert "/pods/x/main/npu_info.config" in err.value.message and "repair or remove it" in err.value.message
    assert not (node.host_dir / node.ctx.pod_dir("uid-1", "main", "npu_info.config").lstrip("/")).exists()


def test_multi_accelerator_slice_is_refused_before_the_flag(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage("ascend/cann-8-910b")
    with pytest.raises(RefusedError, match=r"npu_info\.config models a single physical NPU"):
        RESPONDER.respond(node.grant(Family.SLICED, 0, 1), node.ctx)
    assert fixture.npu_value(node.root, 0, "share") == "0"


@pytest.mark.parametrize(
    ("family", "runtime"),
    [("310P", "8.0"), ("950", "8.0"), ("910B", "10.0"), ("", "8.0")],
)
def test_unsupported_family_cann_pair_is_refused(tmp_path: Path, family: str, runtime: str) -> None:
    node = Node(tmp_path)
    group = node.group.model_copy(update={"family": family or None, "runtime_version": runtime})
    with pytest.raises(RefusedError, match="has no vcann-rt build"):
        RESPONDER.respond(node.grant(Family.SLICED, 0, group=group), node.ctx)
    assert fixture.npu_value(node.root, 0, "share") == "0"


def test_unstaged_library_is_refused_before_the_flag(tmp_path: Path) -> None:
    node = Node(tmp_path)
    with pytest.raises(RefusedError, match=r"cann-8-910b/libvruntime\.so is not staged"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert fixture.npu_value(node.root, 0, "share") == "0"


def test_partitioned_is_not_served(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert Family.PARTITIONED not in RESPONDER.families
    with pytest.raises(RefusedError):
        RESPONDER.respond(node.grant(Family.PARTITIONED, 0), node.ctx)
