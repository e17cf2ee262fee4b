"""Iluvatar's responder (manufacturers/iluvatar/respond.py): IX_VISIBLE_DEVICES for whole cards and
the sidecar, HAMi-core on corex for a slice (flat ``iluvatar`` subtree), and the runtime-class
refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.iluvatar.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    LIB_DIR,
    PODS_DIR,
    ContainerRef,
    Family,
    Grant,
    Granted,
    Mount,
    PartitionInstance,
    RefusedError,
    SliceBudget,
)

from tests.unit.respond.test_nvidia import staged

UUIDS = [f"a1b2c3d4-0000-0000-0000-{i:012x}" for i in range(8)]  # IXML's uuids (iluvatar-bi150 shape)
GROUP = DevicesGroup(
    id="bi-v150",
    manufacturer="iluvatar",
    name="Iluvatar BI-V150",
    memory=32768,
    runtime_version="10.2",
    accelerators=[Accelerator(id=UUIDS[i], index=i, physical_indexes=[7 - i]) for i in range(8)],
)


def accs(*indexes: int) -> tuple[Granted, ...]:
    return tuple(Granted(group=GROUP, accelerator=GROUP.accelerators[i]) for i in indexes)


def grant(
    family: Family,
    indexes: tuple[int, ...],
    runtime_class: str | None = "iluvatar",
    env: dict[str, str] | None = None,
    **kw: Any,
) -> Grant:
    ctr = ContainerRef(
        namespace="ns", pod="p", pod_uid="uid-7", container="main", env=env or {}, runtime_class=runtime_class
    )
    budget = SliceBudget(cores_percent=30, memory_mib=16384) if family is Family.SLICED else None
    return Grant(
        manufacturer="iluvatar", family=family, accelerators=accs(*indexes), container=ctr, budget=budget, **kw
    )


def test_registered_families() -> None:
    assert REGISTRY["iluvatar"].responder is RESPONDER
    assert RESPONDER.families == {Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY}


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
@pytest.mark.parametrize("indexes", [(0,), (2, 5), (0, 1, 2, 3, 4, 5, 6, 7)])
@pytest.mark.parametrize("runtime_class", [None, "iluvatar"])
def test_whole_cards_are_the_uuids(
    tmp_path: Path, family: Family, indexes: tuple[int, ...], runtime_class: str | None
) -> None:
    out = RESPONDER.respond(grant(family, indexes, runtime_class), staged(tmp_path))
    # the uuid, never the driver index (physical_indexes run backwards here, so they would differ)
    assert out.envs == {"IX_VISIBLE_DEVICES": ",".join(UUIDS[i] for i in indexes)}
    assert (out.mounts, out.devices, out.annotations) == ([], [], {})


def test_sliced_is_hami_core_from_the_flat_directory(tmp_path: Path) -> None:
    ctx = staged(tmp_path, "iluvatar")
    out = RESPONDER.respond(grant(Family.SLICED, (1, 3)), ctx)
    assert out.envs == {
        "CUDA_DEVICE_MEMORY_LIMIT_0": "16384m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "16384m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache",
        "LIBCUDA_LOG_LEVEL": "0",
        "IX_VISIBLE_DEVICES": f"{UUIDS[1]},{UUIDS[3]}",
    }
    assert "CUDA_DEVICE_ORDER" not in out.envs  # NVIDIA's alone
    lib = f"{LIB_DIR}/iluvatar"
    assert out.mounts == [
        Mount(container_path="/usr/local/vgpu", host_path=lib),
        Mount(container_path="/etc/ld.so.preload", host_path=f"{PODS_DIR}/uid-7/_preload/main"),
        Mount(container_path="/tmp/vgpu", host_path=f"{PODS_DIR}/uid-7/main", read_only=False),
    ]


def test_sliced_never_overwrites_log_level(tmp_path: Path) -> None:
    out = RESPONDER.respond(grant(Family.SLICED, (0,), env={"LIBCUDA_LOG_LEVEL": "3"}), staged(tmp_path, "iluvatar"))
    assert "LIBCUDA_LOG_LEVEL" not in out.envs
    assert out.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "16384m"


@pytest.mark.parametrize("runtime_class", [None, "nvidia", "runc", ""])
def test_sliced_without_the_runtime_class_is_refused(tmp_path: Path, runtime_class: str | None) -> None:
    ctx = staged(tmp_path, "iluvatar")
    with pytest.raises(RefusedError) as info:
        RESPONDER.respond(grant(Family.SLICED, (0,), runtime_class), ctx)
    assert "must carry runtimeClassName: iluvatar" in info.value.message
    assert "libcuda.so.1" in info.value.message  # and why
    assert not ctx.host.exists(f"{PODS_DIR}/uid-7")


def test_sliced_runtime_class_follows_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_ILUVATAR_ACCELERATABLE_RUNTIME_NAME", "ix-custom")
    ctx = staged(tmp_path, "iluvatar")
    with pytest.raises(RefusedError, match="runtimeClassName: ix-custom"):
        RESPONDER.respond(grant(Family.SLICED, (0,), "iluvatar"), ctx)
    out = RESPONDER.respond(grant(Family.SLICED, (0,), "ix-custom"), ctx)
    assert out.envs["IX_VISIBLE_DEVICES"] == UUIDS[0]


def test_sliced_library_not_staged_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match=r"/iluvatar/libvgpu.so is not staged"):
        RESPONDER.respond(grant(Family.SLICED, (0,)), staged(tmp_path, "nvidia/cuda-12"))


@pytest.mark.parametrize("family", [Family.PARTITIONED, Family.VISIBILITY])
def test_partitions_are_refused(tmp_path: Path, family: Family) -> None:
    instance = PartitionInstance(accelerator=UUIDS[0], profile="1g", uuid="MIG-x")
    with pytest.raises(RefusedError):
        RESPONDER.respond(grant(family, (0,), partition=instance), staged(tmp_path))


def test_duplicate_accelerator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="granted twice"):
        RESPONDER.respond(grant(Family.SHARED, (4, 4)), staged(tmp_path))
