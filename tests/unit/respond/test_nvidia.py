"""NVIDIA's responder (manufacturers/nvidia/respond.py), table-driven over the five families: exactly
one visibility channel, the HAMi-core slice (quota env, library, working directory, never-overwrite,
positional order), the partition instance only, and every refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.nvidia.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    LIB_DIR,
    PODS_DIR,
    Channel,
    ContainerRef,
    Family,
    Grant,
    Granted,
    Injection,
    Mount,
    PartitionInstance,
    RefusedError,
    RespondContext,
    SliceBudget,
)
from gpustack_operator.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st

UUIDS = [f"GPU-{i:08x}-1111-2222-3333-{i:012x}" for i in range(8)]
MIG_UUID = "MIG-5a7e0c35-89cc-5b5e-a4c7-0e8d4d1e2a61"


def group(n: int = 4, runtime: str | None = "12.4", gid: str = "h100", first: int = 0) -> DevicesGroup:
    return DevicesGroup(
        id=gid,
        manufacturer="nvidia",
        name="NVIDIA H100 80GB HBM3",
        memory=81559,
        runtime_version=runtime,
        accelerators=[Accelerator(id=UUIDS[i], index=i, physical_indexes=[i]) for i in range(first, first + n)],
    )


def granted(g: DevicesGroup, *indexes: int) -> tuple[Granted, ...]:
    by_index = {a.index: a for a in g.accelerators}
    return tuple(Granted(group=g, accelerator=by_index[i]) for i in indexes)


def container(env: dict[str, str] | None = None, runtime_class: str | None = None) -> ContainerRef:
    return ContainerRef(
        namespace="ns", pod="p", pod_uid="uid-1", container="main", env=env or {}, runtime_class=runtime_class
    )


def staged(tmp_path: Path, *subtrees: str, library: str = "libvgpu.so") -> RespondContext:
    """A host tree with the named preload subtrees staged (the library)."""
    host = tmp_path / "host"
    for subtree in subtrees:
        d = host / LIB_DIR.lstrip("/") / subtree
        d.mkdir(parents=True)
        (d / library).write_text("ELF")
    host.mkdir(exist_ok=True)
    return RespondContext(view=HostRoot(host), host=HostRoot(host), settings=load_settings({}))


def sliced(accs: tuple[Granted, ...], memory: int = 12282, cores: int = 50, **kw: Any) -> Grant:
    return Grant(
        manufacturer="nvidia",
        family=Family.SLICED,
        accelerators=accs,
        container=kw.pop("ctr", container()),
        budget=SliceBudget(cores_percent=cores, memory_mib=memory),
        **kw,
    )


def whole(family: Family, accs: tuple[Granted, ...], channel: Channel = Channel.ENVVAR) -> Grant:
    return Grant(
        manufacturer="nvidia",
        family=family,
        accelerators=accs,
        container=container(),
        channel=channel,
        cdi_kind="nvidia.com/gpu" if channel is Channel.CDI else None,
    )


def partition(acc: str = UUIDS[1], uuid: str = MIG_UUID) -> PartitionInstance:
    return PartitionInstance(accelerator=acc, profile="1g.10gb", uuid=uuid, start=2, size=1)


def test_registered_for_all_five_families() -> None:
    assert REGISTRY["nvidia"].responder is RESPONDER
    assert RESPONDER.families == frozenset(Family)


# -- exclusive / shared / visibility: exactly one channel -------------------------------------------

WHOLE = [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY]


@pytest.mark.parametrize("family", WHOLE)
@pytest.mark.parametrize("indexes", [(0,), (1, 3), (0, 1, 2, 3)])
def test_envvar_channel_names_uuids_in_grant_order(tmp_path: Path, family: Family, indexes: tuple[int, ...]) -> None:
    out = RESPONDER.respond(whole(family, granted(group(), *indexes)), staged(tmp_path))
    assert out.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(UUIDS[i] for i in indexes)}
    assert (out.annotations, out.mounts, out.devices, out.cdi_devices) == ({}, [], [], [])


@pytest.mark.parametrize("family", WHOLE)
def test_cdi_channel_is_the_annotation_and_not_the_variable(tmp_path: Path, family: Family) -> None:
    out = RESPONDER.respond(whole(family, granted(group(), 0, 2), Channel.CDI), staged(tmp_path))
    assert out.annotations == {"cdi.k8s.io/gpustack-nvidia": f"nvidia.com/gpu={UUIDS[0]},nvidia.com/gpu={UUIDS[2]}"}
    assert "NVIDIA_VISIBLE_DEVICES" not in out.envs
    assert out.envs == {}


@given(st.sets(st.integers(0, 7), min_size=1), st.sampled_from(list(Channel)))
def test_exactly_one_channel_carries_every_granted_uuid(indexes: set[int], channel: Channel) -> None:
    g = group(8)
    grant = whole(Family.EXCLUSIVE, granted(g, *sorted(indexes)), channel)
    ctx = RespondContext(view=HostRoot("/"), host=HostRoot("/"), settings=load_settings({}))
    out = RESPONDER.respond(grant, ctx)
    carriers = [v for v in (out.envs.get("NVIDIA_VISIBLE_DEVICES"), *out.annotations.values()) if v]
    assert len(carriers) == 1
    named = [item.removeprefix("nvidia.com/gpu=") for item in carriers[0].split(",")]
    assert named == [UUIDS[i] for i in sorted(indexes)]


def test_duplicate_accelerator_is_refused(tmp_path: Path) -> None:
    g = group()
    twice = granted(g, 1) * 2
    with pytest.raises(RefusedError, match=f"{UUIDS[1]} was granted twice"):
        RESPONDER.respond(whole(Family.SHARED, twice), staged(tmp_path))


def test_empty_grant_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="names no accelerator"):
        RESPONDER.respond(whole(Family.EXCLUSIVE, ()), staged(tmp_path))


# -- sliced: HAMi-core --------------------------------------------------------------------------------


def test_sliced_reference_example(tmp_path: Path) -> None:
    """Reference rules §5: a 24564 MiB card at 50 % is 12282m (the allocator computed the MiB)."""
    ctx = staged(tmp_path, "nvidia/cuda-12")
    grant = sliced(granted(group(), 0), memory=24564 * 50 // 100, cores=50)
    out = RESPONDER.respond(grant, ctx)
    assert out.envs == {
        "CUDA_DEVICE_MEMORY_LIMIT_0": "12282m",
        "CUDA_DEVICE_SM_LIMIT": "50",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache",
        "LIBCUDA_LOG_LEVEL": "0",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": UUIDS[0],
    }
    lib = f"{LIB_DIR}/nvidia/cuda-12"
    pod_dir = f"{PODS_DIR}/uid-1/main"
    assert out.mounts == [
        Mount(container_path="/usr/local/vgpu", host_path=lib, read_only=True),
        Mount(container_path="/etc/ld.so.preload", host_path=f"{PODS_DIR}/uid-1/_preload/main", read_only=True),
        Mount(container_path="/tmp/vgpu", host_path=pod_dir, read_only=False),
    ]
    assert ctx.host.is_dir(pod_dir)  # the working directory exists on the host


@pytest.mark.parametrize(
    ("indexes", "memory", "cores"), [((0,), 1024, 100), ((1, 2), 40000, 25), ((0, 1, 2, 3), 81559, 1)]
)
def test_sliced_memory_limit_per_position(tmp_path: Path, indexes: tuple[int, ...], memory: int, cores: int) -> None:
    out = RESPONDER.respond(sliced(granted(group(), *indexes), memory, cores), staged(tmp_path, "nvidia/cuda-12"))
    limits = {k: v for k, v in out.envs.items() if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_")}
    assert limits == {f"CUDA_DEVICE_MEMORY_LIMIT_{p}": f"{memory}m" for p in range(len(indexes))}
    assert out.envs["CUDA_DEVICE_SM_LIMIT"] == str(cores)
    # position i is the i-th granted accelerator: the visibility list is in the same (ascending) order
    assert out.envs["NVIDIA_VISIBLE_DEVICES"].split(",") == [UUIDS[i] for i in indexes]


@pytest.mark.parametrize(
    ("runtime", "subtree"), [("12.4", "nvidia/cuda-12"), ("11.8", "nvidia/cuda-11"), (None, "nvidia/cuda-12")]
)
def test_sliced_library_follows_the_cuda_major(tmp_path: Path, runtime: str | None, subtree: str) -> None:
    out = RESPONDER.respond(sliced(granted(group(runtime=runtime), 0)), staged(tmp_path, subtree))
    assert Mount(container_path="/usr/local/vgpu", host_path=f"{LIB_DIR}/{subtree}") in out.mounts


def test_sliced_library_not_staged_is_refused(tmp_path: Path) -> None:
    ctx = staged(tmp_path, "nvidia/cuda-11")  # the node runs CUDA 12: its build is absent
    with pytest.raises(RefusedError, match=r"nvidia/cuda-12/libvgpu.so is not staged") as info:
        RESPONDER.respond(sliced(granted(group(), 0)), ctx)
    assert "init container" in info.value.message
    assert not ctx.host.exists(f"{PODS_DIR}/uid-1")  # nothing was created for a refused grant


def test_sliced_mixed_cuda_majors_are_refused_naming_both(tmp_path: Path) -> None:
    g12 = group(2, "12.4", "h100")
    g11 = group(2, "11.8", "v100", first=2)
    accs = granted(g12, 0) + granted(g11, 2)
    with pytest.raises(RefusedError) as info:
        RESPONDER.respond(sliced(accs), staged(tmp_path, "nvidia/cuda-12", "nvidia/cuda-11"))
    assert "CUDA 12" in info.value.message and "CUDA 11" in info.value.message
    assert UUIDS[0] in info.value.message and UUIDS[2] in info.value.message


def test_sliced_unknown_runtime_counts_as_the_default_major(tmp_path: Path) -> None:
    accs = granted(group(1, "12.2", "a"), 0) + granted(group(1, None, "b", first=1), 1)
    out = RESPONDER.respond(sliced(accs), staged(tmp_path, "nvidia/cuda-12"))
    assert out.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "12282m"


@pytest.mark.parametrize(
    "env",
    [
        {"LIBCUDA_LOG_LEVEL": "4"},
        {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
        {"LIBCUDA_LOG_LEVEL": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    ],
)
def test_sliced_never_overwrites_the_containers_own_env(tmp_path: Path, env: dict[str, str]) -> None:
    out = RESPONDER.respond(sliced(granted(group(), 0), ctr=container(env)), staged(tmp_path, "nvidia/cuda-12"))
    for name in ("LIBCUDA_LOG_LEVEL", "CUDA_DEVICE_ORDER"):
        assert (name in out.envs) == (name not in env)
    assert out.envs["CUDA_DEVICE_SM_LIMIT"] == "50"  # quotas are not defaults


def test_sliced_over_cdi_is_the_annotation(tmp_path: Path) -> None:
    grant = sliced(granted(group(), 0, 1), channel=Channel.CDI, cdi_kind="nvidia.com/gpu")
    out = RESPONDER.respond(grant, staged(tmp_path, "nvidia/cuda-12"))
    assert "NVIDIA_VISIBLE_DEVICES" not in out.envs
    assert out.annotations["cdi.k8s.io/gpustack-nvidia"] == f"nvidia.com/gpu={UUIDS[0]},nvidia.com/gpu={UUIDS[1]}"
    assert out.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "12282m"


@pytest.mark.parametrize(("memory", "match"), [(0, "memory budget is 0 MiB")])
def test_sliced_without_memory_budget_is_refused(tmp_path: Path, memory: int, match: str) -> None:
    with pytest.raises(RefusedError, match=match):
        RESPONDER.respond(sliced(granted(group(), 0), memory=memory), staged(tmp_path, "nvidia/cuda-12"))


def test_sliced_without_budget_is_refused(tmp_path: Path) -> None:
    grant = Grant(manufacturer="nvidia", family=Family.SLICED, accelerators=granted(group(), 0), container=container())
    with pytest.raises(RefusedError, match="no slice budget"):
        RESPONDER.respond(grant, staged(tmp_path, "nvidia/cuda-12"))


def test_respond_does_not_mutate_the_grant(tmp_path: Path) -> None:
    grant = sliced(granted(group(), 0, 1), ctr=container({"A": "1"}))
    before = repr(grant)
    RESPONDER.respond(grant, staged(tmp_path, "nvidia/cuda-12"))
    assert repr(grant) == before


# -- partitioned, and the sidecar of a partition-backed owner ----------------------------------------


@pytest.mark.parametrize("channel", list(Channel))
@pytest.mark.parametrize("family", [Family.PARTITIONED, Family.VISIBILITY])
def test_partition_injects_only_the_instance(tmp_path: Path, channel: Channel, family: Family) -> None:
    grant = Grant(
        manufacturer="nvidia",
        family=family,
        accelerators=granted(group(), 1),
        container=container(),
        partition=partition(),
        owner_family=Family.PARTITIONED if family is Family.VISIBILITY else None,
        channel=channel,
    )
    out = RESPONDER.respond(grant, staged(tmp_path))
    assert out.envs == {"NVIDIA_VISIBLE_DEVICES": MIG_UUID}
    assert out.annotations == {} and out.mounts == [] and out.cdi_devices == []
    assert UUIDS[1] not in repr(out.model_dump(exclude={"log"}))  # never the parent


@pytest.mark.parametrize("family", [Family.PARTITIONED, Family.VISIBILITY])
def test_partition_missing_fails_closed(tmp_path: Path, family: Family) -> None:
    grant = Grant(
        manufacturer="nvidia",
        family=family,
        accelerators=granted(group(), 1),
        container=container(),
        owner_family=Family.PARTITIONED,
    )
    with pytest.raises(RefusedError, match="refusing rather than exposing the parent"):
        RESPONDER.respond(grant, staged(tmp_path))


@pytest.mark.parametrize("uuid", [UUIDS[1], "", "GPU-abc"])
def test_partition_that_is_not_a_mig_device_is_refused(tmp_path: Path, uuid: str) -> None:
    grant = Grant(
        manufacturer="nvidia",
        family=Family.PARTITIONED,
        accelerators=granted(group(), 1),
        container=container(),
        partition=partition(uuid=uuid),
    )
    with pytest.raises(RefusedError, match="not a MIG device UUID"):
        RESPONDER.respond(grant, staged(tmp_path))


def test_injection_is_the_contract_model(tmp_path: Path) -> None:
    out = RESPONDER.respond(whole(Family.EXCLUSIVE, granted(group(), 0)), staged(tmp_path))
    assert isinstance(out, Injection)
