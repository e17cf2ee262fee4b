"""The allocator core against the product's reference rules, one row per rule (issue 10).

Every row's id names the rule it pins: ``ref5-*`` reference-rules.md §5 (sliced memory arithmetic
and units), ``ref6-*`` §6 (tokens, resource names, preferred allocation, the room check),
``s18-<n>-*`` supplement §1.8 rule n, ``s19-*`` §1.9, ``s53-*`` §5.2/§5.3 request rules that reach
``Allocate``, ``s43-*`` §4.3 switches.

Not applicable to this layer (said once here, not as rows):
- the per-vendor output of §5 (``CUDA_DEVICE_MEMORY_LIMIT_<i>``, bare MiB, ``memory-quota=``) is the
  responders' (manufacturers/*/respond.py), which receive the :class:`SliceBudget` pinned here;
- §5.3's "both memory keys set" rejection is the Pod webhook's; at ``Allocate`` the reference's
  arithmetic applies (§5: percentage wins), row ``ref5-pct-wins``;
- the older ``.sliced.mig-<profile>`` naming is the reference's legacy spelling; this product serves
  only the newer ``.partitioned.mig-<profile>`` (row ``ref6-name-partitioned-profile``);
- §1.8 rule 5 (the node mutex) is pinned by test_allocator.py's lock test; rule 8's "give-back
  retried until it lands" concerns the annotation patch, which the gRPC edge (deviceplugin/) owns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

import pytest
from gpustack_operator.allocator import identify as ident
from gpustack_operator.allocator.budget import partition_profile, slice_budget
from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.ledger import (
    AllocatedEntry,
    Claim,
    D,
    Ledger,
    cards_to_credits,
    cost_per_token,
    credits_to_cards,
    memory_mib_to_units,
    render_allocated,
    sliced_units,
)
from gpustack_operator.allocator.placement import CardRoom, preferred_sliced
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION, KubeletContainer, KubeletPod, PodSpec
from gpustack_operator.allocator.resources import ResourceNames, parse_token, token_id, tokens_per_card
from gpustack_operator.ledger.models import Accelerator, AcceleratorLogicalSliced, AcceleratorStatus
from gpustack_operator.manufacturers.respond import Code, Family, RefusedError, SliceBudget

from tests.unit.allocator.fakes import (
    BASE,
    PARTITIONED,
    SHARED,
    SLICED,
    VISIBILITY,
    FakePartitioner,
    FakePods,
    FakeResponder,
    card,
    ctr,
    group,
    make_allocator,
    mig_card,
    pod,
    sliced_ctr,
    token,
)

G = "nvidia-a100"
N = ResourceNames(BASE, "nvidia")
PCT, MIB, CORES, UNITS = (N.sliced_memory_percentage, N.sliced_memory_mib, N.sliced_cores_percentage, N.sliced_units)


def refused(fn: Callable[..., object], *args: object) -> RefusedError:
    with pytest.raises(RefusedError) as err:
        fn(*args)
    return err.value


def two_cards(slices: int = 8) -> list:  # type: ignore[type-arg]
    return [group([card(0, slices=slices), card(1, slices=slices)])]


def running(p: PodSpec) -> PodSpec:
    return PodSpec(**{**p.__dict__, "phase": "Running"})


def healthy(alloc: Allocator, resource: str) -> dict[str, bool]:
    return {d.id: d.healthy for d in alloc.devices(resource)}


# == §5 sliced memory arithmetic ===================================================================


@pytest.mark.parametrize(
    ("resources", "vram", "memory", "cores"),
    [
        pytest.param({PCT: "50", MIB: "1024"}, 24576, 12288, 100, id="ref5-pct-wins"),
        pytest.param({PCT: "25"}, 24576, 6144, 100, id="ref5-pct-of-vram"),
        pytest.param({PCT: "33"}, 24576, 8110, 100, id="ref5-floor"),
        pytest.param({PCT: "50"}, 24564, 12282, 100, id="ref5-docs-12282m"),
        pytest.param({MIB: "3072"}, 24576, 3072, 100, id="ref5-mib-alone"),
        pytest.param({MIB: "99999"}, 24576, 24576, 100, id="ref5-cap-mib"),
        pytest.param({PCT: "150"}, 24576, 24576, 100, id="ref5-cap-pct"),
        # a non-positive percentage is not set: the MiB is used (the reference reads q.Value() > 0)
        pytest.param({PCT: "0", MIB: "2048"}, 24576, 2048, 100, id="ref5-pct-zero-falls-to-mib"),
        pytest.param({PCT: "10", CORES: "10"}, 24576, 2457, 10, id="ref5-cores-explicit"),
        pytest.param({PCT: "10", CORES: "100"}, 24576, 2457, 100, id="ref5-cores-100"),
        pytest.param({PCT: "10"}, 24576, 2457, 100, id="ref5-cores-absent-100"),
        pytest.param({PCT: "10", CORES: "0"}, 24576, 2457, 100, id="ref5-cores-zero-100"),
        pytest.param({PCT: "10", CORES: "-7"}, 24576, 2457, 100, id="ref5-cores-negative-100"),
    ],
)
def test_ref5_slice_budget(resources: dict[str, str], vram: int, memory: int, cores: int) -> None:
    got = slice_budget(N, resources, vram)
    assert (got.memory_mib, got.cores_percent) == (memory, cores)
    assert got.units == memory_mib_to_units(memory, vram)  # no .sliced.units: derived from the memory


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param({}, id="ref5-neither-is-an-error"),
        pytest.param({PCT: "0"}, id="ref5-neither-positive-is-an-error"),
        pytest.param({MIB: "0", PCT: "-1"}, id="ref5-neither-positive-both-set"),
    ],
)
def test_ref5_neither_memory_budget_is_an_error(resources: dict[str, str]) -> None:
    err = refused(slice_budget, N, {SLICED: "1", **resources}, 24576)
    assert err.code is Code.INVALID_ARGUMENT
    assert f"must set {PCT} or {MIB}" in err.message


def test_ref5_webhook_units_are_the_slice_cost() -> None:
    got = slice_budget(N, {PCT: "50", UNITS: "200k"}, 81920)
    assert got == SliceBudget(cores_percent=100, memory_mib=40960, units=200_000)


# == §5 units ======================================================================================


def test_ref5_d_is_resource_max_units() -> None:
    assert D == 1_600_000


@pytest.mark.parametrize(
    ("cards", "credits"),
    [
        pytest.param(1, 1_600_000, id="ref5-cards-1-is-1600k"),
        pytest.param(4, 6_400_000, id="ref5-cards-4-is-6400k"),
        pytest.param(0, 0, id="ref5-cards-0"),
    ],
)
def test_ref5_cards_to_credits(cards: int, credits: int) -> None:
    assert cards_to_credits(cards) == credits


@pytest.mark.parametrize(
    ("credits", "cards"),
    [
        pytest.param(1_600_000, Decimal(1), id="ref5-credits-whole-card"),
        pytest.param(6_400_000, Decimal(4), id="ref5-credits-four-cards"),
        pytest.param(200_000, Decimal("0.125"), id="ref5-credits-1/8-slice"),
        pytest.param(400_000, Decimal("0.25"), id="ref5-credits-2/8-slice"),
        pytest.param(5_800_000, Decimal("3.625"), id="ref5-credits-29-eighths"),
        pytest.param(3125, Decimal("0.001953"), id="ref5-credits-1/512-micro"),
        pytest.param(0, Decimal(0), id="ref5-credits-zero"),
        pytest.param(Decimal("199999.5"), Decimal("0.125"), id="ref5-credits-ceil-fraction-first"),
    ],
)
def test_ref5_credits_to_cards(credits: int | Decimal, cards: Decimal) -> None:
    got = credits_to_cards(credits)
    assert isinstance(got, Decimal) and got == cards


@pytest.mark.parametrize(
    ("q", "partitions", "units"),
    [
        pytest.param(1, 8, 200_000, id="ref5-units-1-card-sliced-8-is-200k"),
        pytest.param(1, 2, 800_000, id="ref5-units-partitions-2"),
        pytest.param(1, 512, 3125, id="ref5-units-partitions-512"),
        pytest.param(3, 4, 1_200_000, id="ref5-units-q-times"),
    ],
)
def test_ref5_sliced_units(q: int, partitions: int, units: int) -> None:
    assert sliced_units(q, partitions) == units


@pytest.mark.parametrize(
    "partitions",
    [
        pytest.param(1, id="ref5-units-partitions-below-2"),
        pytest.param(1024, id="ref5-units-partitions-above-512"),
        pytest.param(12, id="ref5-units-partitions-not-power-of-two"),
    ],
)
def test_ref5_sliced_units_partitions_range(partitions: int) -> None:
    with pytest.raises(ValueError, match="power of two in"):
        sliced_units(1, partitions)


@pytest.mark.parametrize(
    ("mib", "vram", "units"),
    [
        pytest.param(10240, 81920, 200_000, id="ref5-mib-to-units-10240-of-81920"),
        pytest.param(1, 81920, 19, id="ref5-mib-to-units-floor"),
        pytest.param(81920, 81920, D, id="ref5-mib-to-units-whole"),
    ],
)
def test_ref5_memory_mib_to_units(mib: int, vram: int, units: int) -> None:
    assert memory_mib_to_units(mib, vram) == units


@pytest.mark.parametrize(
    ("family", "own", "cost"),
    [
        pytest.param(Family.EXCLUSIVE, 123, D, id="ref5-cost-exclusive-D"),
        pytest.param(Family.SHARED, 123, D // 10, id="ref5-cost-shared-D/10"),
        pytest.param(Family.SLICED, 200_000, 200_000, id="ref5-cost-sliced-own-units"),
        pytest.param(Family.PARTITIONED, 785_000, 785_000, id="ref5-cost-partitioned-own-units"),
        # supplement §1.7: the sidecar consumes nothing
        pytest.param(Family.VISIBILITY, 123, 0, id="ref5-cost-visibility-none"),
    ],
)
def test_ref5_ledger_cost_per_token(family: Family, own: int, cost: int) -> None:
    assert cost_per_token(family, own) == cost
    claim = Claim("u", "ns", "p", "c", family, ("GPU-0",), units=own)
    assert claim.cost() == cost


# == §6 tokens and names ===========================================================================


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        pytest.param(0, "g:GPU-0:0000", id="ref6-padding-0"),
        pytest.param(7, "g:GPU-0:0007", id="ref6-padding-1-digit"),
        pytest.param(511, "g:GPU-0:0511", id="ref6-padding-3-digits"),
        pytest.param(9999, "g:GPU-0:9999", id="ref6-padding-4-digits"),
        pytest.param(12345, "g:GPU-0:12345", id="ref6-longer-not-truncated"),
    ],
)
def test_ref6_token_id(index: int, expected: str) -> None:
    assert token_id("g", "GPU-0", index) == expected
    assert parse_token(expected) == ("g", "GPU-0", index)


def _sliceable(count: int | None) -> Accelerator:
    status = AcceleratorStatus(logical_sliced=None if count is None else AcceleratorLogicalSliced(count=count))
    return Accelerator(id="GPU-0", index=0, status=status)


@pytest.mark.parametrize(
    ("accelerator", "family", "count"),
    [
        pytest.param(_sliceable(8), Family.EXCLUSIVE, 1, id="ref6-tokens-exclusive-1"),
        pytest.param(_sliceable(8), Family.SHARED, 10, id="ref6-tokens-shared-10"),
        pytest.param(_sliceable(8), Family.SLICED, 8, id="ref6-tokens-sliced-slice-count"),
        pytest.param(_sliceable(4), Family.SLICED, 4, id="ref6-tokens-sliced-hygon-4"),
        pytest.param(_sliceable(0), Family.SLICED, 0, id="ref6-zero-pool-advertises-none"),
        pytest.param(_sliceable(None), Family.SLICED, 0, id="ref6-no-slicing-advertises-none"),
        pytest.param(_sliceable(8), Family.VISIBILITY, 512, id="ref6-tokens-visibility-512"),
        pytest.param(_sliceable(8), Family.PARTITIONED, 0, id="ref6-unpartitioned-no-partitioned"),
        pytest.param(mig_card(0), Family.PARTITIONED, 7, id="ref6-tokens-partitioned-ceiling"),
        pytest.param(mig_card(0), Family.EXCLUSIVE, 0, id="ref6-partitioning-only-partitioned"),
        pytest.param(mig_card(0), Family.VISIBILITY, 512, id="ref6-partitioning-visibility-512"),
    ],
)
def test_ref6_tokens_per_card(accelerator: Accelerator, family: Family, count: int) -> None:
    assert tokens_per_card(accelerator, family) == count


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(N.exclusive, "nvidia.com/gpu", id="ref6-name-exclusive"),
        pytest.param(N.shared, "nvidia.com/gpu.shared", id="ref6-name-shared"),
        pytest.param(N.sliced, "nvidia.com/gpu.sliced", id="ref6-name-sliced"),
        pytest.param(N.sliced_units, "nvidia.com/gpu.sliced.units", id="ref6-name-sliced-units"),
        pytest.param(N.sliced_cores_percentage, "nvidia.com/gpu.sliced.cores-percentage", id="ref6-name-cores"),
        pytest.param(N.sliced_memory_percentage, "nvidia.com/gpu.sliced.memory-percentage", id="ref6-name-mem-pct"),
        pytest.param(N.sliced_memory_mib, "nvidia.com/gpu.sliced.memory-mib", id="ref6-name-mem-mib"),
        pytest.param(N.visibility, "device.gpustack.ai/nvidia.visibility", id="ref6-name-visibility"),
        pytest.param(N.partitioned, "nvidia.com/gpu.partitioned", id="ref6-name-partitioned"),
        pytest.param(
            N.partitioned_profile("3g.40gb"),
            "nvidia.com/gpu.partitioned.mig-3g.40gb",
            id="ref6-name-partitioned-profile",
        ),
    ],
)
def test_ref6_resource_names(name: str, expected: str) -> None:
    assert name == expected


def test_ref6_profile_of_reads_the_partitioned_profile_key() -> None:
    assert N.profile_of("nvidia.com/gpu.partitioned.mig-3g.40gb") == "3g.40gb"
    assert N.profile_of("nvidia.com/gpu.sliced.mig-3g.40gb") is None  # legacy spelling: not served


# == §6 a card held in another mode ================================================================


@pytest.mark.parametrize(
    ("holder", "holder_ids", "other", "other_ids"),
    [
        pytest.param(BASE, [token(G, "GPU-0")], SLICED, [token(G, "GPU-0", 3)], id="ref6-exclusive-blocks-sliced"),
        pytest.param(SLICED, [token(G, "GPU-0", 0)], SHARED, [token(G, "GPU-0", 2)], id="ref6-sliced-blocks-shared"),
        pytest.param(SHARED, [token(G, "GPU-0", 1)], BASE, [token(G, "GPU-0")], id="ref6-shared-blocks-exclusive"),
    ],
)
def test_ref6_a_card_held_in_another_mode(
    tmp_path: Path, holder: str, holder_ids: list[str], other: str, other_ids: list[str]
) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("a", [ctr("main", {holder: "1", PCT: "10"})], created=1)]
    alloc.allocate(holder, [holder_ids])
    pods.pods = [running(pods.pods[0]), pod("b", [ctr("main", {other: "1", PCT: "10"})], created=2)]
    # stays advertised, but Unhealthy; the other card and visibility stay Healthy
    states = healthy(alloc, other)
    assert states[other_ids[0]] is False
    assert all(ok for t, ok in states.items() if ":GPU-1:" in t)
    assert all(healthy(alloc, VISIBILITY).values())
    err = refused(alloc.allocate, other, [other_ids])
    assert err.code is Code.FAILED_PRECONDITION and "is held" in err.message


# == §6 GetPreferredAllocation for sliced ==========================================================


def _rooms(*specs: tuple[str, int, int]) -> dict[str, CardRoom]:
    return {c: CardRoom(c, (0, i), remaining=r, slices=s, slot_limit=8) for i, (c, r, s) in enumerate(specs)}


def _toks(*cards: str) -> list[str]:
    return [f"g:{c}:{i:04d}" for c in cards for i in range(2)]


def _card_of(t: str) -> str | None:
    parsed = parse_token(t)
    return parsed[1] if parsed else None


@pytest.mark.parametrize(
    ("rooms", "must", "size", "units", "expected"),
    [
        pytest.param(
            _rooms(("A", D, 0), ("B", 400_000, 3)), ["g:A:0001"], 2, 100_000, ["A", "B"], id="ref6-must-include-first"
        ),
        pytest.param(
            _rooms(("A", D, 0), ("B", 900_000, 1), ("C", 300_000, 2)),
            [],
            3,
            200_000,
            ["C", "B", "A"],
            id="ref6-fitting-fullest-first",
        ),
        pytest.param(
            _rooms(("A", 100_000, 5), ("B", 150_000, 4), ("C", D, 0)),
            [],
            3,
            400_000,
            ["C", "B", "A"],
            id="ref6-non-fitting-emptiest-after-fitting",
        ),
        pytest.param(
            _rooms(("A", 800_000, 1), ("B", 800_000, 1)), [], 2, 100_000, ["A", "B"], id="ref6-ties-lower-position"
        ),
        # Remaining alone measures fullness: more slices on an equally full card is no reason
        pytest.param(
            _rooms(("A", 800_000, 1), ("B", 800_000, 4)), [], 2, 100_000, ["A", "B"], id="ref6-ties-not-by-slices"
        ),
        pytest.param(
            _rooms(("A", 100_000, 1), ("B", 100_000, 6)), [], 2, 400_000, ["A", "B"], id="ref6-unfit-ties-position"
        ),
        pytest.param(_rooms(("A", 200_000, 1)), [], 1, 200_000, ["A"], id="ref6-exactly-filling-fits"),
    ],
)
def test_ref6_preferred_sliced(
    rooms: dict[str, CardRoom], must: list[str], size: int, units: int, expected: list[str]
) -> None:
    got = preferred_sliced(_toks(*rooms), must, size, rooms=rooms, card_of=_card_of, units=units)
    assert [_card_of(t) for t in got] == expected
    assert set(must) <= set(got)


def test_ref6_in_process_reservations_count_as_occupancy(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("a", [sliced_ctr(pct="20")], created=1)]
    alloc.allocate(SLICED, [[token(G, "GPU-1", 0)]])  # only a reservation: no Devices status written
    pods.pods = [running(pods.pods[0]), pod("b", [sliced_ctr(pct="20")], created=2)]
    avail = [d.id for d in alloc.devices(SLICED) if d.id != token(G, "GPU-1", 0)]
    assert alloc.preferred(SLICED, avail, [], 1) == [token(G, "GPU-1", 1)]  # the fuller card that fits


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param(VISIBILITY, id="ref6-visibility-empty-hint"),
        pytest.param(PARTITIONED, id="ref6-partitioned-empty-hint"),
    ],
)
def test_ref6_fungible_pools_have_an_empty_hint(tmp_path: Path, resource: str) -> None:
    alloc, _, _ = make_allocator(tmp_path, [group([card(0), mig_card(1)])], partitioner=FakePartitioner())
    avail = [d.id for d in alloc.devices(resource)]
    assert avail  # the pool has tokens, yet no hint
    assert alloc.preferred(resource, avail, [], 1) == []


# == §6 the Allocate room check ====================================================================


def _fill(alloc: Allocator, pods: FakePods, pct: str, n: int = 1, card_id: str = "GPU-0") -> None:
    for i in range(n):
        pods.pods.append(pod(f"f{i}", [sliced_ctr(pct=pct)], created=i))
        alloc.allocate(SLICED, [[token(G, card_id, i)]])
        pods.pods[-1] = running(pods.pods[-1])


@pytest.mark.parametrize(
    ("first", "second", "gate", "refused_with"),
    [
        pytest.param(
            "70", "50", "true", "the slice needs 800000 units, 480000 remain", id="ref6-room-refuses-no-units"
        ),
        pytest.param("70", "30", "true", None, id="ref6-room-admits-what-fits"),
        pytest.param("70", "50", "false", None, id="ref6-room-gate-off-no-refusal"),
    ],
)
def test_ref6_room_check(tmp_path: Path, first: str, second: str, gate: str, refused_with: str | None) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), device_plugin_sliced_allocate_gate=gate)
    _fill(alloc, pods, first)
    pods.pods.append(pod("late", [sliced_ctr(pct=second)], created=50))
    if refused_with is None:
        alloc.allocate(SLICED, [[token(G, "GPU-0", 5)]])
        assert len([c for c in alloc.claims() if "GPU-0" in c.accelerators]) == 2
    else:
        err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 5)]])
        assert err.code is Code.FAILED_PRECONDITION and refused_with in err.message


def test_ref6_room_check_per_card_slice_count(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards(slices=4))  # Hygon: 4 slices per card
    _fill(alloc, pods, "5", n=4)
    pods.pods.append(pod("fifth", [sliced_ctr(pct="5")], created=50))
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 3)]])
    assert err.code is Code.FAILED_PRECONDITION and "(4 of 4 hosted)" in err.message


def test_ref6_room_check_a_retried_container_is_not_refused(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, [group([card(0, slices=1)])])
    pods.pods = [pod("p", [sliced_ctr(pct="100")])]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])  # its own slice is not counted against it
    assert len(responder.grants) == 2 and alloc.status()[0].accelerators[0].remaining == 0


@pytest.mark.parametrize(
    "end",
    [
        pytest.param("Succeeded", id="ref6-room-finished-pod-free"),
        pytest.param("Failed", id="ref6-room-failed-pod-free"),
        pytest.param("gone", id="ref6-room-deleted-pod-free"),
    ],
)
def test_ref6_room_check_finished_or_deleted_pods_do_not_refuse(tmp_path: Path, end: str) -> None:
    alloc, pods, _ = make_allocator(tmp_path, [group([card(0, slices=1)])])
    pods.pods = [pod("old", [sliced_ctr(pct="100")], created=1)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    old = PodSpec(**{**pods.pods[0].__dict__, "phase": end}) if end != "gone" else None
    pods.pods = ([old] if old else []) + [pod("new", [sliced_ctr(pct="100")], created=2)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    assert any(c.pod == "new" for c in alloc.claims())


# == supplement §1.8 ===============================================================================


def _cands(*pods_: PodSpec) -> list[PodSpec]:
    return list(pods_)


def _identify(
    pods_: list[PodSpec],
    requests: list[list[str]],
    *,
    kubelet: list[KubeletPod] | None = None,
    reserved: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    feasible: Callable[[ident.Candidate, list[str]], bool] = lambda c, ids: True,
) -> list[tuple[str, str]]:
    got = ident.identify(
        SLICED, requests, pods=pods_, kubelet=kubelet, reserved=reserved or {}, feasible=feasible, node="node-1"
    )
    return [(t.pod.name, t.container.name) for t in got]


def _kubelet(*entries: tuple[str, str, bool]) -> list[KubeletPod]:
    return [
        KubeletPod("default", name, (KubeletContainer(c, {SLICED: ("x",)} if holds else {}),))
        for name, c, holds in entries
    ]


OLD, NEW = pod("old", [sliced_ctr()], created=1), pod("new", [sliced_ctr()], created=2)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"kubelet": _kubelet(("old", "main", True), ("new", "main", False))},
            [("new", "main")],
            id="s18-1-kubelet-outranks-age",
        ),
        pytest.param({}, [("old", "main")], id="s18-2-oldest-pending"),
        pytest.param(
            {"kubelet": _kubelet(("old", "main", False), ("new", "main", False))},
            [("old", "main")],
            id="s18-2-kubelet-names-several-oldest",
        ),
        pytest.param(
            {"feasible": lambda c, ids: c.pod.name == "new"}, [("new", "main")], id="s18-2-feasibility-disambiguates"
        ),
        pytest.param(
            {"feasible": lambda c, ids: False}, [("old", "main")], id="s18-2-all-infeasible-unfiltered-oldest"
        ),
        pytest.param({"reserved": {("uid-old", "main"): ("y",)}}, [("new", "main")], id="s18-2-skip-reserved"),
    ],
)
def test_s18_identification(kwargs: dict[str, object], expected: list[tuple[str, str]]) -> None:
    assert _identify(_cands(NEW, OLD), [["g:GPU-0:0000"]], **kwargs) == expected  # type: ignore[arg-type]


def test_s18_11_a_batch_maps_one_to_one() -> None:
    batch = [pod(f"p{i}", [sliced_ctr()], created=5) for i in range(3)]
    got = _identify(batch, [["g:GPU-0:0000"], ["g:GPU-1:0000"], ["g:GPU-0:0001"]])
    assert sorted(got) == [("p0", "main"), ("p1", "main"), ("p2", "main")]


def test_s18_3_the_room_check_reads_the_annotation_of_other_containers(tmp_path: Path) -> None:
    entry = AllocatedEntry.of(Claim("uid-old", "default", "old", "main", Family.SLICED, ("GPU-0",), units=D), "nvidia")
    old = pod(
        "old",
        [sliced_ctr()],
        created=1,
        phase="Running",
        annotations={ALLOCATED_ANNOTATION: render_allocated({"main": entry})},
    )
    alloc, pods, _ = make_allocator(tmp_path, two_cards())  # a restarted Device Manager: no reservation
    pods.pods = [old, pod("new", [sliced_ctr(pct="10")], created=2)]
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 1)]])
    assert "0 remain" in err.message
    alloc.allocate(SLICED, [[token(G, "GPU-1", 1)]])  # the other card is free


def test_s18_6_reservations_keyed_by_pod_uid_and_container(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    twin = [pod("p", [ctr("main", {SHARED: "1"})], uid=f"u{i}", namespace=f"ns{i}", created=i) for i in range(2)]
    pods.pods = twin
    alloc.allocate(SHARED, [[token(G, "GPU-0", 0)]])
    pods.pods = [running(twin[0]), twin[1]]
    alloc.allocate(SHARED, [[token(G, "GPU-0", 1)]])
    assert sorted((c.pod_uid, c.container) for c in alloc.claims()) == [("u0", "main"), ("u1", "main")]


def test_s18_6_the_annotation_is_a_map_keyed_by_container_name(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("ssh", [sliced_ctr("main"), ctr("sshd", {VISIBILITY: "1"})])]
    alloc.allocate(SLICED, [[token(G, "GPU-1", 0)]])
    alloc.allocate(VISIBILITY, [[token(G, "GPU-0", 9)]])
    entries = json.loads(alloc.annotation("uid-ssh") or "{}")
    assert list(entries) == ["main"]  # the sidecar holds nothing of its own
    assert entries["main"]["accelerators"] == ["GPU-1"] and entries["main"]["mode"] == "sliced"


@pytest.mark.parametrize(
    ("manufacturer", "family", "release", "charged"),
    [
        pytest.param("nvidia", Family.EXCLUSIVE, True, False, id="s18-7-finished-exclusive-free"),
        pytest.param("nvidia", Family.SHARED, True, False, id="s18-7-finished-shared-free"),
        pytest.param("nvidia", Family.SLICED, True, False, id="s18-7-finished-slice-free"),
        pytest.param("nvidia", Family.PARTITIONED, True, True, id="s18-7-finished-partition-charged"),
        pytest.param("metax", Family.SLICED, True, True, id="s18-7-finished-metax-slice-charged"),
        pytest.param("cambricon", Family.SLICED, True, True, id="s18-7-finished-cambricon-slice-charged"),
        pytest.param("metax", Family.EXCLUSIVE, True, False, id="s18-7-finished-metax-exclusive-free"),
        pytest.param("nvidia", Family.EXCLUSIVE, False, True, id="s43-release-terminated-off-charges"),
        pytest.param("nvidia", Family.SLICED, False, True, id="s43-release-terminated-off-slice-charges"),
    ],
)
def test_s18_7_terminal_phase_exception(manufacturer: str, family: Family, release: bool, charged: bool) -> None:
    ledger = Ledger.of(manufacturer, two_cards(), release_terminated=release)
    claim = Claim("u", "ns", "p", "c", family, ("GPU-0",), units=400_000, terminal=True)
    ledger.claims[claim.key] = claim
    assert ledger.charging(claim) is charged
    assert (ledger.remaining("GPU-0") < D) is charged


def test_s18_8_give_back_restores_a_prior_claim(tmp_path: Path) -> None:
    responder = FakeResponder()
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), responder=responder)
    pods.pods = [pod("p", [sliced_ctr(pct="40")])]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    before = alloc.claims()
    responder.refuse = "the driver said no"
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-1", 0)]])  # re-picked by the kubelet, refused
    assert err.message == "the driver said no"
    assert alloc.claims() == before  # the earlier claim is back, nothing else charged


def test_s18_8_give_back_of_a_first_claim_frees_the_card(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards(), responder=FakeResponder(refuse="no"))
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    refused(alloc.allocate, BASE, [[token(G, "GPU-0")]])
    assert alloc.claims() == [] and all(healthy(alloc, SLICED).values())
    assert responder.grants  # the responder was asked


def test_s18_11_sshd_refinds_the_non_self_allocation(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("ssh", [ctr("main", {BASE: "1"}), ctr("sshd", {VISIBILITY: "1"})])]
    alloc.allocate(BASE, [[token(G, "GPU-1")]])
    [inj] = alloc.allocate(VISIBILITY, [[token(G, "GPU-0", 42)]])  # whatever token the kubelet gives
    assert inj.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-1"
    assert responder.grants[-1].container.container == "sshd"
    [again] = alloc.allocate(VISIBILITY, [[token(G, "GPU-1", 7)]])  # retried: never its own claim
    assert again.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-1"


# == supplement §1.9 ===============================================================================


def test_s19_returned_ids_are_the_offered_full_form_unknown_dropped(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [sliced_ctr()])]
    offered = ["junk", "other:GPU-9:0000", token(G, "GPU-0", 2), token(G, "GPU-1", 3)]
    got = alloc.preferred(SLICED, offered, ["also-junk"], 2)
    assert got and set(got) <= set(offered[2:])
    assert all(parse_token(t) is not None and t.count(":") == 2 for t in got)


def test_s19_partitions_pack_and_a_retry_reuses(tmp_path: Path) -> None:
    part = FakePartitioner()
    alloc, pods, _ = make_allocator(tmp_path, [group([mig_card(0), mig_card(1)], gid="mig")], partitioner=part)
    mig = {PARTITIONED: "1", N.partitioned_profile("1g.10gb"): "1"}
    pods.pods = [pod(f"p{i}", [ctr("main", mig)], created=i) for i in range(2)]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    alloc.allocate(PARTITIONED, [[ids[-1]]])
    alloc.allocate(PARTITIONED, [[ids[-2]]])
    assert [c.accelerator for c in part.created] == ["MIGCARD-0", "MIGCARD-0"]  # packed
    pods.pods[0] = running(pods.pods[0])
    pods.pods[1] = running(pods.pods[1])
    pods.kubelet_holds(("p0", "main", {}))  # the kubelet retries p0's container with another token
    alloc.allocate(PARTITIONED, [[ids[0]]])
    assert len(part.created) == 2  # the live instance is reused, nothing new materialised
    # health: a node-level count over stable ids, no NUMA
    states = alloc.devices(PARTITIONED)
    assert all(d.numa == () for d in states)
    assert sum(d.healthy for d in states) == 2 + 5 + 7  # allocated + remaining (card 0: 5, card 1: 7)


# == supplement §5.2/§5.3: request rules that reach Allocate =======================================


@pytest.mark.parametrize(
    ("resource", "resources", "ids", "message"),
    [
        pytest.param(
            SLICED,
            {SLICED: "2", PCT: "10"},
            [token(G, "GPU-0", 0), token(G, "GPU-1", 0)],
            'Invalid value: "2": a logical slice request is always a single accelerator',
            id="s53-2-sliced-is-exactly-1",
        ),
        pytest.param(
            SLICED,
            {SLICED: "1"},
            [token(G, "GPU-0", 0)],
            f"must set {PCT} or {MIB}",
            id="s53-2b-slice-names-a-memory-budget",
        ),
        pytest.param(
            PARTITIONED,
            {PARTITIONED: "2", f"{PARTITIONED}.mig-1g.10gb": "1"},
            ["mig:MIGCARD-0:0000", "mig:MIGCARD-0:0001"],
            'Invalid value: "2": a partition request is always a single accelerator; request one Pod per instance',
            id="s53-3-partitioned-is-exactly-1",
        ),
        pytest.param(
            PARTITIONED,
            {PARTITIONED: "1"},
            ["mig:MIGCARD-0:0000"],
            "must name a profile, e.g. nvidia.com/gpu.partitioned.mig-<profile>",
            id="s53-3-partitioned-names-a-profile",
        ),
        pytest.param(
            PARTITIONED,
            {PARTITIONED: "1", f"{PARTITIONED}.mig-1g.10gb": "2"},
            ["mig:MIGCARD-0:0000"],
            "a partition profile request must be exactly 1 instance",
            id="s53-5-profile-key-is-exactly-1",
        ),
    ],
)
def test_s53_request_rules_at_allocate(
    tmp_path: Path, resource: str, resources: dict[str, str], ids: list[str], message: str
) -> None:
    part = FakePartitioner()
    groups = [group([card(0), card(1)]), group([mig_card(0)], gid="mig")]
    alloc, pods, responder = make_allocator(tmp_path, groups, partitioner=part)
    pods.pods = [pod("p", [ctr("main", resources)])]
    err = refused(alloc.allocate, resource, [ids])
    assert err.code is Code.INVALID_ARGUMENT and message in err.message
    assert alloc.claims() == [] and responder.grants == [] and part.created == []


def test_s53_partition_profile_reads_one_profile() -> None:
    with pytest.raises(RefusedError, match=r"only one partition profile, found \[1g.10gb 3g.40gb\]"):
        partition_profile(N, {N.partitioned_profile("1g.10gb"): "1", N.partitioned_profile("3g.40gb"): "1"})


# == supplement §4.3: the three switches ===========================================================


@pytest.mark.parametrize(
    ("switch", "expected"),
    [
        pytest.param("true", "new", id="s43-identify-by-kubelet-on"),
        pytest.param("false", "old", id="s43-identify-by-kubelet-off-pending-heuristic"),
    ],
)
def test_s43_identify_by_kubelet(tmp_path: Path, switch: str, expected: str) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards(), device_plugin_identify_by_kubelet=switch)
    pods.pods = [OLD, NEW]
    pods.kubelet = _kubelet(("old", "main", True), ("new", "main", False))
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    assert responder.grants[0].container.pod == expected


def test_s43_sliced_gate_off_clamps_remaining_at_zero(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), device_plugin_sliced_allocate_gate="false")
    _fill(alloc, pods, "70", n=2)
    assert alloc.status()[0].accelerators[0].remaining == 0
