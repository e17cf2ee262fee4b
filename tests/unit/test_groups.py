"""``build_groups``: one group per model (name and memory), ids that never collide within a pass."""

from __future__ import annotations

from gpustack_operator.manufacturers.groups import Found, build_groups
from gpustack_operator.node.pci import PciScan
from gpustack_operator.settings import Settings


def found(uuid: str, name: str, mib: int) -> Found:
    return Found(uuid=uuid, name=name, memory_mib=mib)


def test_two_memory_sizes_of_one_name_are_two_groups_with_two_ids() -> None:
    items = [
        found("GPU-0", "NVIDIA A100-SXM4", 40960),
        found("GPU-1", "NVIDIA A100-SXM4", 81920),
        found("GPU-2", "NVIDIA A100-SXM4", 40960),
    ]
    groups = build_groups("nvidia", items, PciScan(), Settings())
    assert [(g.id, g.memory, [a.id for a in g.accelerators]) for g in groups] == [
        ("a100-sxm4-40g", 40960, ["GPU-0", "GPU-2"]),
        ("a100-sxm4-80g", 81920, ["GPU-1"]),
    ]
    assert [a.index for g in groups for a in g.accelerators] == [0, 2, 1]  # enumeration order kept


def test_a_unique_group_keeps_the_reference_id() -> None:
    (group,) = build_groups("nvidia", [found("GPU-0", "NVIDIA H100 80GB HBM3", 81559)], PciScan(), Settings())
    assert group.id == "h100-80gb-hbm3"
