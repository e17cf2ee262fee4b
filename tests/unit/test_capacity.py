"""The node capacity keys (supplement §5.2) on fixture nodes, one table row per manufacturer: detected
through ``api.run_detect`` exactly as ``serve`` detects, then summed by ``allocator/capacity.py``."""

from __future__ import annotations

from functools import cache

import pytest
from gpustack_operator import api
from gpustack_operator.allocator.capacity import (
    ManufacturerCapacity,
    is_capacity_key,
    manufacturer_capacity,
    names_of,
    node_capacity,
)
from gpustack_operator.allocator.ledger import Claim, D, Ledger
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorStatus,
    DevicesGroup,
)
from gpustack_operator.manufacturers.respond import Family, PartitionInstance
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import host

ALL = frozenset(Family)


@cache
def detected(fixture: str, manufacturer: str) -> NodeDetection:
    result = api.run_detect(api.make_request(str(host(fixture)), [manufacturer]), interfaces=False)
    assert not result.unmeasured, result.unmeasured
    return result


def capacity_of(fixture: str, manufacturer: str, families: frozenset[Family] = ALL) -> dict[str, str]:
    req = api.make_request(str(host(fixture)), [manufacturer])
    result = detected(fixture, manufacturer)
    return node_capacity([ManufacturerCapacity(names_of(req.resolved[manufacturer]), result.groups, families)])


def sliced(base: str, cards: int, vram_mib: int, cores: int) -> dict[str, str]:
    """The four sliced keys of ``cards`` accelerators of ``vram_mib`` each, ``cores`` percent each."""
    return {
        f"{base}.sliced.cores-percentage": str(cards * cores),
        f"{base}.sliced.memory-mib": str(cards * vram_mib),
        f"{base}.sliced.memory-percentage": str(cards * 100),
        f"{base}.sliced.units": str(cards * D),
    }


# (fixture, manufacturer, expected keys). Per accelerator: units D, memory-percentage 100, memory-mib its
# VRAM, cores-percentage 100 -- times its logical slice count where its slicing overcommits compute.
TABLE = [
    ("h100-sxm-8x", "nvidia", sliced("nvidia.com/gpu", 8, 81559, 128 * 100)),
    ("rtx4090", "nvidia", sliced("nvidia.com/gpu", 1, 24564, 128 * 100)),
    ("mi300x-8x", "amd", sliced("amd.com/gpu", 8, 196592, 128 * 100)),
    ("ascend-910b-8x", "ascend", sliced("huawei.com/npu", 8, 65536, 63 * 100)),
    ("mlu370-x8", "cambricon", sliced("cambricon.com/mlu", 8, 49152, 100)),
    ("metax-c500", "metax", sliced("metax-tech.com/gpu", 8, 65536, 100)),
    ("mthreads-s4000", "mthreads", sliced("mthreads.com/gpu", 8, 49152, 100)),
    ("iluvatar-bi150", "iluvatar", sliced("iluvatar.com/gpu", 8, 32768, 128 * 100)),
    ("hygon-k100", "hygon", sliced("hygon.com/dcu", 4, 65520, 100)),
    (
        "hygon-k100-mig",
        "hygon",
        {
            "hygon.com/dcu.partitioned.mig-2g.15gb": str(4 * 4),
            "hygon.com/dcu.partitioned.mig-4g.31gb": str(4 * 2),
            "hygon.com/dcu.partitioned.mig-8g.63gb": str(4 * 1),
            "hygon.com/dcu.partitioned.units": str(4 * D),
        },
    ),
    (
        # 4 cards in MIG mode (partitioned keys only), 4 not (sliced keys only): never both on one card
        "a100-mig",
        "nvidia",
        {
            "nvidia.com/gpu.partitioned.mig-1g.10gb": "28",
            "nvidia.com/gpu.partitioned.mig-1g.20gb": "16",
            "nvidia.com/gpu.partitioned.mig-2g.20gb": "12",
            "nvidia.com/gpu.partitioned.mig-3g.40gb": "8",
            "nvidia.com/gpu.partitioned.mig-4g.40gb": "4",
            "nvidia.com/gpu.partitioned.mig-7g.80gb": "4",
            "nvidia.com/gpu.partitioned.units": str(4 * D),
            **sliced("nvidia.com/gpu", 4, 81920, 128 * 100),
        },
    ),
    (
        # T-Head: 2 PPUs partitioned, 6 logically sliced
        "thead-ppu",
        "thead",
        {
            "alibabacloud.com/ppu.partitioned.mig-1g.12gb": "16",
            "alibabacloud.com/ppu.partitioned.mig-2g.24gb": "8",
            "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "4",
            "alibabacloud.com/ppu.partitioned.mig-8g.96gb": "2",
            "alibabacloud.com/ppu.partitioned.units": str(2 * D),
            **sliced("alibabacloud.com/ppu", 6, 98304, 128 * 100),
        },
    ),
]


@pytest.mark.parametrize(("fixture", "manufacturer", "expected"), TABLE, ids=[f"{r[0]}-{r[1]}" for r in TABLE])
def test_capacity_keys_per_manufacturer(fixture: str, manufacturer: str, expected: dict[str, str]) -> None:
    assert capacity_of(fixture, manufacturer) == dict(sorted(expected.items()))


def test_the_table_states_each_fixtures_own_cards() -> None:
    """The table's per-card numbers are the detection's own (VRAM, slice count, overcommit)."""
    for fixture, manufacturer, expected in TABLE:
        groups = detected(fixture, manufacturer).groups
        vram = {g.memory for g in groups}
        mib_key = next((k for k in expected if k.endswith(".sliced.memory-mib")), None)
        if mib_key is not None:
            cards = int(expected[mib_key.replace("memory-mib", "memory-percentage")]) // 100
            assert int(expected[mib_key]) == cards * max(vram), fixture


def test_families_not_served_have_no_keys() -> None:
    assert capacity_of("h100-sxm-8x", "nvidia", frozenset({Family.EXCLUSIVE, Family.SHARED})) == {}
    only_sliced = capacity_of("a100-mig", "nvidia", frozenset({Family.SLICED}))
    assert only_sliced and all(".sliced." in k for k in only_sliced)
    only_partitioned = capacity_of("a100-mig", "nvidia", frozenset({Family.PARTITIONED}))
    assert only_partitioned and all(".partitioned." in k for k in only_partitioned)


def test_an_accelerator_gone_or_unhealthy_takes_its_budget_with_it() -> None:
    groups = detected("h100-sxm-8x", "nvidia").groups
    names = ResourceNames("nvidia.com/gpu", "nvidia")
    fewer = [g.model_copy(deep=True) for g in groups]
    fewer[0].accelerators = fewer[0].accelerators[:6]
    fewer[0].accelerators[0].status.unhealthy = True
    keys = node_capacity([ManufacturerCapacity(names, fewer, ALL)])
    assert keys == sliced("nvidia.com/gpu", 5, 81559, 128 * 100)
    assert node_capacity([ManufacturerCapacity(names, [], ALL)]) == {}  # every key absent: the writer removes them


def test_partition_profile_keys_follow_the_ledger() -> None:
    """``.partitioned.<kind>-<profile>`` = Σ allocated + remaining: a 3g.40gb placed on an A100 in
    MIG mode blocks the 1g.10gb slots it covers, so the 1g key drops by those 4 and 3g keeps its 2."""
    groups = [g.model_copy(deep=True) for g in detected("a100-mig", "nvidia").groups]
    names = ResourceNames("nvidia.com/gpu", "nvidia")
    ledger = Ledger.of("nvidia", groups)
    mig = next(a for g in groups for a in g.accelerators if a.status.physical_sliced is not None)
    inst = PartitionInstance(accelerator=mig.id, profile="3g.40gb", uuid="MIG-x", start=0, size=4)
    claim = Claim(
        "u", "ns", "p", "main", Family.PARTITIONED, (mig.id,), units=800_000, partition=inst, profile="3g.40gb"
    )
    ledger.claims[claim.key] = claim
    before = node_capacity([ManufacturerCapacity(names, groups, ALL)])
    after = node_capacity([ManufacturerCapacity(names, groups, ALL, ledger.status(groups))])
    assert after["nvidia.com/gpu.partitioned.mig-3g.40gb"] == before["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "8"
    assert (
        int(after["nvidia.com/gpu.partitioned.mig-1g.10gb"])
        == int(before["nvidia.com/gpu.partitioned.mig-1g.10gb"]) - 4
    )
    assert (
        int(after["nvidia.com/gpu.partitioned.mig-7g.80gb"])
        == int(before["nvidia.com/gpu.partitioned.mig-7g.80gb"]) - 1
    )
    assert after["nvidia.com/gpu.partitioned.units"] == before["nvidia.com/gpu.partitioned.units"]  # units: Σ cards × D


def test_manufacturers_sum_side_by_side_and_partition_kind_follows_the_override() -> None:
    nvidia = ManufacturerCapacity(ResourceNames("nvidia.com/gpu", "nvidia"), detected("rtx4090", "nvidia").groups, ALL)
    hygon = ManufacturerCapacity(
        ResourceNames("hygon.com/dcu", "hygon", "dcupart"), detected("hygon-k100-mig", "hygon").groups, ALL
    )
    keys = node_capacity([nvidia, hygon])
    assert keys["nvidia.com/gpu.sliced.units"] == str(D)
    assert keys["hygon.com/dcu.partitioned.dcupart-2g.15gb"] == "16"
    assert not any(k.startswith("hygon.com/dcu.partitioned.mig-") for k in keys)
    assert list(keys) == sorted(keys)
    assert manufacturer_capacity(nvidia) == {k: int(v) for k, v in keys.items() if k.startswith("nvidia.com/")}


def test_names_of_applies_the_resource_name_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME", "example.com/gpu")
    req = api.make_request(str(host("rtx4090")), ["nvidia"])
    names = names_of(req.resolved["nvidia"])
    assert names.sliced_units == "example.com/gpu.sliced.units"
    assert names.partitioned_profile("1g.10gb") == "example.com/gpu.partitioned.mig-1g.10gb"


@pytest.mark.parametrize(
    ("key", "ours"),
    [
        ("nvidia.com/gpu.sliced.units", True),
        ("nvidia.com/gpu.sliced.memory-mib", True),
        ("nvidia.com/gpu.partitioned.units", True),
        ("nvidia.com/gpu.partitioned.mig-1g.10gb", True),
        ("nvidia.com/gpu", False),  # the kubelet's device-plugin keys
        ("nvidia.com/gpu.shared", False),
        ("nvidia.com/gpu.sliced", False),
        ("nvidia.com/gpu.partitioned", False),
        ("device.gpustack.ai/nvidia.visibility", False),
        ("nvidia.com/gpu.slicedx", False),
        ("amd.com/gpu.sliced.units", False),  # not a base we own
        ("cpu", False),
    ],
)
def test_which_keys_a_writer_owns(key: str, ours: bool) -> None:
    assert is_capacity_key(key, ["nvidia.com/gpu", "hygon.com/dcu"]) is ours


def test_an_empty_group_or_unknown_vram_is_no_error() -> None:
    group = DevicesGroup(id="x", manufacturer="nvidia", name="X", memory=0)
    assert node_capacity([ManufacturerCapacity(ResourceNames("nvidia.com/gpu", "nvidia"), [group], ALL)]) == {}


CARD = st.builds(
    lambda n, slices, overcommit, unhealthy, mig: (n, slices, overcommit, unhealthy, mig),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=-1, max_value=130),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)


def synthetic_group(gid: str, memory: int, cards: list[tuple[int, int, bool, bool, bool]]) -> DevicesGroup:
    accelerators: list[Accelerator] = []
    for n, (copies, slices, overcommit, unhealthy, mig) in enumerate(cards):
        for c in range(copies):
            status = AcceleratorStatus(
                unhealthy=unhealthy,
                logical_sliced=AcceleratorLogicalSliced(
                    count=0 if mig else slices, cores_percentage_overcommit=overcommit
                ),
                physical_sliced=AcceleratorPhysicalSliced(
                    profiles=[AcceleratorPhysicalSlicedProfile(name="1g.10gb", memory_slices=1, count=7)], count=7
                )
                if mig
                else None,
            )
            accelerators.append(Accelerator(id=f"{gid}-{n}-{c}", index=len(accelerators), status=status))
    return DevicesGroup(id=gid, manufacturer="nvidia", name=gid, memory=memory, accelerators=accelerators)


@given(
    st.lists(st.lists(CARD, max_size=4), min_size=1, max_size=3),
    st.integers(min_value=-5, max_value=200_000),
    st.sets(st.sampled_from(list(Family))),
)
def test_capacity_is_a_sum_over_groups_of_whole_non_negative_numbers(
    cards: list[list[tuple[int, int, bool, bool, bool]]], memory: int, families: set[Family]
) -> None:
    """Whatever a detection reports: every key is ours, every value a whole number >= 0, and the node's
    keys are the sum of each group's -- so a group (an accelerator) gone takes exactly its share."""
    names = ResourceNames("nvidia.com/gpu", "nvidia")
    groups = [synthetic_group(f"g{i}", memory, c) for i, c in enumerate(cards)]
    whole = node_capacity([ManufacturerCapacity(names, groups, families)])
    assert all(is_capacity_key(k, [names.base]) for k in whole)
    assert all(v.isdigit() for v in whole.values())
    parts: dict[str, int] = {}
    for group in groups:
        for key, value in manufacturer_capacity(ManufacturerCapacity(names, [group], families)).items():
            parts[key] = parts.get(key, 0) + value
    assert whole == {k: str(v) for k, v in sorted(parts.items())}
    healthy = [a for g in groups for a in g.accelerators if not a.status.unhealthy]
    sliceable = [a for a in healthy if a.status.physical_sliced is None and a.status.logical_sliced.count > 0]  # type: ignore[union-attr]
    if Family.SLICED in families and sliceable:
        assert whole["nvidia.com/gpu.sliced.units"] == str(len(sliceable) * D)
    else:
        assert "nvidia.com/gpu.sliced.units" not in whole
