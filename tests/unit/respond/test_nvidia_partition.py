"""NVIDIA MIG partitions (manufacturers/nvidia/partition.py) against the compiled NVML stand-in
(tests/stubs/nvidia/fake_nvml.c) carrying the ``a100-mig`` node's data: create → the MIG UUID the
responder injects → live → destroy → not live, and every refusal naming the accelerator, the profile
and NVML's error.

Each test works on its own copy of the node's library and data file (the stand-in keeps the
instances in ``<data file>.instances``), so one test's partitions are never another's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.nvidia.partition import NvmlPartitioner
from gpustack_operator.manufacturers.nvidia.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    Channel,
    Code,
    ContainerRef,
    Family,
    Grant,
    Granted,
    PartitionInstance,
    RefusedError,
    RespondContext,
)
from gpustack_operator.settings import load_settings

from tests.conftest import host
from tests.stubs.nvidia.data import data_file, library, read_values, set_values

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node holding only the a100-mig NVML stand-in and its data (MIG on for NVML 0-3, off 4-7)."""
    src = host("a100-mig")
    root = tmp_path / "node"
    lib = library(src)
    dest = root / lib.relative_to(src).parent
    dest.mkdir(parents=True)
    shutil.copy2(lib, dest / lib.name)
    shutil.copy2(data_file(src), dest / data_file(src).name)
    return root


def card(root: Path, index: int) -> tuple[DevicesGroup, Accelerator]:
    acc = Accelerator(id=read_values(root, index)["uuid"], index=index, physical_indexes=[index])
    group = DevicesGroup(id="a100", manufacturer="nvidia", name="NVIDIA A100-SXM4-80GB", memory=81920)
    group.accelerators.append(acc)
    return group, acc


def create(root: Path, index: int, profile: str, start: int) -> PartitionInstance:
    group, acc = card(root, index)
    return NvmlPartitioner(HostRoot(root)).create(group, acc, profile, start)


def instances(root: Path) -> list[str]:
    path = data_file(root).with_name(data_file(root).name + ".instances")
    return path.read_text().splitlines() if path.exists() else []


def test_backend_exports_the_partitioner(node: Path) -> None:
    factory = REGISTRY["nvidia"].loaded().partitioner
    assert factory is not None
    made = factory(HostRoot(node))
    assert isinstance(made, NvmlPartitioner) and made.view.root == HostRoot(node).root


def test_create_inject_live_destroy(node: Path) -> None:
    group, acc = card(node, 1)
    part = NvmlPartitioner(HostRoot(node))
    instance = part.create(group, acc, "1g.10gb", 3)
    assert instance.uuid.startswith("MIG-") and instance.uuid != acc.id
    assert (instance.accelerator, instance.profile, instance.start, instance.size) == (acc.id, "1g.10gb", 3, 1)
    assert set(instance.handle) >= {"gpu_instance_id", "compute_instance_id"}
    assert instance.handle["gpu_instance_profile_id"] == 19  # 1g.10gb's profile id on an A100-80GB

    grant = Grant(
        manufacturer="nvidia",
        family=Family.PARTITIONED,
        accelerators=(Granted(group=group, accelerator=acc),),
        container=ContainerRef(namespace="ns", pod="p", pod_uid="u", container="main"),
        partition=instance,
        channel=Channel.CDI,  # a partition never takes it
    )
    ctx = RespondContext(view=HostRoot(node), host=HostRoot(node), settings=load_settings({}), partitioner=part)
    assert RESPONDER.respond(grant, ctx).envs == {"NVIDIA_VISIBLE_DEVICES": instance.uuid}

    assert part.live(instance)
    assert len(instances(node)) == 2  # one GPU instance, one compute instance
    part.destroy(instance)
    assert not part.live(instance)
    assert instances(node) == []
    part.destroy(instance)  # already gone: not an error


@pytest.mark.parametrize(
    ("profile", "start", "size", "slices"),
    [("1g.10gb", 0, 1, 1), ("2g.20gb", 4, 2, 2), ("3g.40gb", 4, 4, 3), ("4g.40gb", 0, 4, 4), ("7g.80gb", 0, 8, 7)],
)
def test_every_exposed_profile_gets_a_full_compute_instance(
    node: Path, profile: str, start: int, size: int, slices: int
) -> None:
    instance = create(node, 0, profile, start)
    assert (instance.start, instance.size) == (start, size)
    ci_line = next(line for line in instances(node) if line.startswith("ci "))
    assert ci_line.split()[-1] == str(slices)  # the compute instance spans the GPU instance


def test_two_partitions_on_one_card_are_distinct(node: Path) -> None:
    a = create(node, 2, "1g.10gb", 0)
    b = create(node, 2, "2g.20gb", 2)
    assert a.uuid != b.uuid and a.handle["gpu_instance_id"] != b.handle["gpu_instance_id"]
    part = NvmlPartitioner(HostRoot(node))
    part.destroy(a)
    assert not part.live(a) and part.live(b)


def test_taken_placement_is_refused_naming_nvml(node: Path) -> None:
    create(node, 0, "2g.20gb", 0)
    _, acc = card(node, 0)
    with pytest.raises(RefusedError) as info:
        create(node, 0, "1g.10gb", 1)  # inside the 2g.20gb's slices 0-1
    message = info.value.message
    assert acc.id in message and "1g.10gb" in message and "placement 1" in message
    assert "Insufficient Resources (NVML error 23)" in message
    assert len(instances(node)) == 2  # nothing half-made


def test_illegal_start_is_refused_listing_the_legal_ones(node: Path) -> None:
    with pytest.raises(RefusedError, match=r"3 is not a legal placement of 3g.40gb \(legal starts: 0, 4\)"):
        create(node, 0, "3g.40gb", 3)


@pytest.mark.parametrize("profile", ["9g.90gb", "1g.10gb+me"])
def test_unknown_or_unexposed_profile_is_refused(node: Path, profile: str) -> None:
    with pytest.raises(RefusedError, match=r"no GPU-instance profile named .*it offers 1g.10gb, 2g.20gb"):
        create(node, 0, profile, 0)


def test_card_without_mig_on_is_refused(node: Path) -> None:
    _, acc = card(node, 5)
    with pytest.raises(RefusedError) as info:
        create(node, 5, "1g.10gb", 0)
    assert acc.id in info.value.message and "MIG is not enabled" in info.value.message


def test_create_failure_from_the_stand_in(node: Path) -> None:
    set_values(node, 1, create_gi_error=4)
    _, acc = card(node, 1)
    with pytest.raises(RefusedError) as info:
        create(node, 1, "1g.10gb", 0)
    message = info.value.message
    assert acc.id in message and "MIG 1g.10gb" in message
    assert "nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Permissions (NVML error 4)" in message
    assert "CAP_SYS_ADMIN" in message
    assert info.value.code is Code.FAILED_PRECONDITION


def test_compute_instance_failure_leaves_no_gpu_instance(node: Path) -> None:
    set_values(node, 1, create_ci_error=999)
    with pytest.raises(RefusedError, match=r"nvmlGpuInstanceCreateComputeInstance: Unknown Error \(NVML error 999\)"):
        create(node, 1, "1g.10gb", 0)
    assert instances(node) == []  # the GPU instance was removed again
    set_values(node, 1, create_ci_error=0)
    assert create(node, 1, "1g.10gb", 0).start == 0  # the placement is free


def test_failed_cleanup_names_both_errors(node: Path) -> None:
    set_values(node, 1, create_ci_error=999, destroy_gi_error=19)
    with pytest.raises(RefusedError) as info:
        create(node, 1, "1g.10gb", 0)
    assert "Unknown Error" in info.value.message
    assert "could not be removed" in info.value.message and "In use by another client" in info.value.message


def test_destroy_failure_is_refused_and_the_instance_stays(node: Path) -> None:
    instance = create(node, 3, "1g.10gb", 6)
    set_values(node, 3, destroy_ci_error=19)
    part = NvmlPartitioner(HostRoot(node))
    with pytest.raises(RefusedError, match=r"could not be destroyed: nvmlComputeInstanceDestroy: In use"):
        part.destroy(instance)
    assert part.live(instance)


def test_reused_ids_are_not_the_recorded_instance(node: Path) -> None:
    part = NvmlPartitioner(HostRoot(node))
    old = create(node, 0, "1g.10gb", 0)
    part.destroy(old)
    new = create(node, 0, "1g.10gb", 5)  # NVML hands out the freed ids again
    assert new.handle["gpu_instance_id"] == old.handle["gpu_instance_id"]
    assert not part.live(old)
    part.destroy(old)  # must not remove the new tenant's partition
    assert part.live(new)


def test_live_is_seen_by_another_process(node: Path) -> None:
    instance = create(node, 2, "3g.40gb", 0)
    code = (
        "import sys\n"
        "from gpustack_operator.host import HostRoot\n"
        "from gpustack_operator.manufacturers.nvidia.partition import NvmlPartitioner\n"
        "from gpustack_operator.manufacturers.respond import PartitionInstance\n"
        f"i = PartitionInstance(accelerator={instance.accelerator!r}, profile='3g.40gb', uuid={instance.uuid!r},"
        f" start=0, size=4, handle={dict(instance.handle)!r})\n"
        "p = NvmlPartitioner(HostRoot(sys.argv[1]))\n"
        "print(p.live(i)); p.destroy(i); print(p.live(i))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(node)], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["True", "False"]
    assert not NvmlPartitioner(HostRoot(node)).live(instance)  # this process sees the other's destroy


def test_instance_without_ids_is_not_live(node: Path) -> None:
    instance = PartitionInstance(accelerator=card(node, 0)[1].id, profile="1g.10gb", uuid="MIG-x")
    assert not NvmlPartitioner(HostRoot(node)).live(instance)


def test_no_nvml_on_the_node_is_unavailable(tmp_path: Path) -> None:
    group, acc = card_like()
    with pytest.raises(RefusedError, match=r"libnvidia-ml\.so\.1 was not found") as info:
        NvmlPartitioner(HostRoot(tmp_path)).create(group, acc, "1g.10gb", 0)
    assert info.value.code is Code.UNAVAILABLE and acc.id in info.value.message
    instance = PartitionInstance(
        accelerator=acc.id, profile="1g.10gb", uuid="MIG-x", handle={"gpu_instance_id": 1, "compute_instance_id": 0}
    )
    with pytest.raises(RefusedError, match="cannot verify the partition"):
        NvmlPartitioner(HostRoot(tmp_path)).live(instance)


def card_like() -> tuple[DevicesGroup, Accelerator]:
    acc = Accelerator(id="GPU-00000000-0000-0000-0000-000000000000", index=0)
    return DevicesGroup(id="a100", manufacturer="nvidia", name="A100", memory=81920, accelerators=[acc]), acc
