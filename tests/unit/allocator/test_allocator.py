"""The Allocator: pools, health, allocation, every refusal, release (supplement §1.4, §1.7-§1.9)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.allocator.core import NODE_LOCK, DeviceState, FamilyOptions, parse_numa
from gpustack_operator.allocator.ledger import AllocatedEntry, Claim, D, render_allocated
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.podrecords import read_pod_records
from gpustack_operator.manufacturers.respond import Channel, Code, Family, RefusedError, RespondContext

from tests.unit.allocator.fakes import (
    BASE,
    PARTITIONED,
    SHARED,
    SLICED,
    VISIBILITY,
    FakeDecision,
    FakePartitioner,
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


def two_cards(**kw: object) -> list:  # type: ignore[type-arg]
    return [group([card(0, numa="0", **kw), card(1, numa="1", **kw)])]  # type: ignore[arg-type]


def healthy(devices: list[DeviceState]) -> dict[str, bool]:
    return {d.id: d.healthy for d in devices}


def refused(fn: object, *args: object) -> RefusedError:
    with pytest.raises(RefusedError) as err:
        fn(*args)  # type: ignore[operator]
    return err.value


# -- pools and devices ------------------------------------------------------------------------------


def test_pools_of_an_unpartitioned_node(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, two_cards())
    pools = {p.resource: (p.family, p.preferred_allocation) for p in alloc.pools()}
    assert pools == {
        BASE: (Family.EXCLUSIVE, True),
        SHARED: (Family.SHARED, True),
        SLICED: (Family.SLICED, True),
        VISIBILITY: (Family.VISIBILITY, False),
    }


def test_pools_of_a_partitioned_node_and_gates(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, [group([mig_card(0)])])
    assert [p.resource for p in alloc.pools()] == [PARTITIONED, VISIBILITY]
    gated, _, _ = make_allocator(
        tmp_path, two_cards(), options=FamilyOptions(shared=False, sliced=False, partitioned=False)
    )
    assert [p.resource for p in gated.pools()] == [BASE, VISIBILITY]
    narrow = FakeResponder(families=frozenset({Family.EXCLUSIVE}))
    only, _, _ = make_allocator(tmp_path, two_cards(), responder=narrow)
    assert [p.resource for p in only.pools()] == [BASE]
    assert only.devices(SHARED) == []


def test_devices_carry_tokens_and_numa(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, two_cards())
    exclusive = alloc.devices(BASE)
    assert exclusive == [DeviceState(token(G, "GPU-0"), True, (0,)), DeviceState(token(G, "GPU-1"), True, (1,))]
    assert len(alloc.devices(SHARED)) == 20
    assert len(alloc.devices(SLICED)) == 16
    assert len(alloc.devices(VISIBILITY)) == 1024


@pytest.mark.parametrize(
    ("text", "numa"), [("", ()), ("0", (0,)), ("0,1", (0, 1)), ("2-3", (2, 3)), ("-1", ()), ("x", ())]
)
def test_numa_affinity(text: str, numa: tuple[int, ...]) -> None:
    assert parse_numa(text) == numa


def test_an_unhealthy_accelerator_is_unhealthy_except_for_visibility(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, [group([card(0, unhealthy=True), card(1)])])
    assert healthy(alloc.devices(BASE)) == {token(G, "GPU-0"): False, token(G, "GPU-1"): True}
    assert all(d.healthy for d in alloc.devices(VISIBILITY))


def test_another_modes_tokens_go_unhealthy_and_come_back_on_release(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("ex", [ctr("main", {BASE: "1"})])]
    v0 = alloc.version
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert alloc.version > v0
    shared = healthy(alloc.devices(SHARED))
    assert not shared[token(G, "GPU-0", 3)] and shared[token(G, "GPU-1", 3)]
    assert not healthy(alloc.devices(SLICED))[token(G, "GPU-0", 0)]
    assert healthy(alloc.devices(BASE))[token(G, "GPU-0")]  # its own mode stays healthy
    assert all(d.healthy for d in alloc.devices(VISIBILITY))
    v1 = alloc.version
    pods.pods = []
    alloc.reconcile()
    assert alloc.version > v1
    assert all(d.healthy for d in alloc.devices(SHARED))


# -- exclusive / shared -----------------------------------------------------------------------------


def test_an_exclusive_grant(tmp_path: Path) -> None:
    cards = [group([card(1, numa="0"), card(0)])]
    alloc, pods, responder = make_allocator(tmp_path, cards)
    pods.pods = [pod("p", [ctr("main", {BASE: "2"}, env={"A": "1"})], runtime_class="nvidia")]
    [inj] = alloc.allocate(BASE, [[token(G, "GPU-1"), token(G, "GPU-0")]])
    assert inj.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}  # ascending accelerator index
    [grant] = responder.grants
    assert grant.family is Family.EXCLUSIVE and [g.index for g in grant.accelerators] == [0, 1]
    assert (grant.container.label, dict(grant.container.env), grant.container.runtime_class) == (
        "default/p container main",
        {"A": "1"},
        "nvidia",
    )
    assert grant.channel is Channel.ENVVAR and "identified by matched" in inj.log[0]
    status = alloc.status()[0].accelerators
    assert [(a.mode, a.remaining) for a in status] == [("exclusive", 0), ("exclusive", 0)]


def test_the_cross_mode_invariant_names_accelerator_and_holder(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("ex", [ctr("main", {BASE: "1"})], created=1), pod("sl", [sliced_ctr()], created=2)]
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 2)]])
    assert err.code is Code.FAILED_PRECONDITION
    assert "accelerator GPU-0 (nvidia-a100 index 0) is held exclusive by default/ex container main" in err.message
    # nothing was reserved for the refused container
    assert [c.pod for c in alloc.claims()] == ["ex"]


def test_a_second_exclusive_tenant_is_refused(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("a", [ctr("main", {BASE: "1"})], created=1), pod("b", [ctr("main", {BASE: "1"})], created=2)]
    alloc.allocate(BASE, [[token(G, "GPU-1")]])
    pods.pods[0] = pod("a", [ctr("main", {BASE: "1"})], created=1, phase="Running")  # (a restarted kubelet)
    assert "held exclusive by default/a" in refused(alloc.allocate, BASE, [[token(G, "GPU-1")]]).message


def test_shared_with_two_tokens_on_one_accelerator_is_refused(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {SHARED: "2"})])]
    err = refused(alloc.allocate, SHARED, [[token(G, "GPU-0", 1), token(G, "GPU-0", 2)]])
    assert (
        err.code is Code.FAILED_PRECONDITION and "two nvidia.com/gpu.shared tokens on accelerator GPU-0" in err.message
    )
    alloc.allocate(SHARED, [[token(G, "GPU-0", 1), token(G, "GPU-1", 2)]])
    assert [a.remaining for a in alloc.status()[0].accelerators] == [D - D // 10, D - D // 10]


def test_shared_hint_and_exclusive_hint(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, two_cards())
    avail = [d.id for d in alloc.devices(SHARED)]
    got = alloc.preferred(SHARED, avail, [], 2)
    assert len({t.split(":")[1] for t in got}) == 2
    assert alloc.preferred(BASE, [token(G, "GPU-1"), token(G, "GPU-0")], [], 1) == [token(G, "GPU-0")]
    assert alloc.preferred(VISIBILITY, avail, [], 1) == []


def test_an_unknown_token_and_an_unknown_resource(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    err = refused(alloc.allocate, BASE, [["nvidia-a100:GPU-9:0000"]])
    assert err.code is Code.NOT_FOUND and "GPU-9" in err.message
    assert refused(alloc.allocate, "amd.com/gpu", [["x"]]).code is Code.NOT_FOUND


def test_a_token_of_a_mode_the_accelerator_no_longer_serves(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, [group([card(0, slices=4)])])
    pods.pods = [pod("p", [sliced_ctr()])]
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 6)]])
    assert "does not serve nvidia.com/gpu.sliced" in err.message


# -- sliced -----------------------------------------------------------------------------------------


def test_the_sliced_gate_refuses_a_full_slot_count(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, [group([card(0, slices=4)])])  # Hygon: 4 slices
    pods.pods = [pod(f"p{i}", [sliced_ctr(pct="10")], created=i) for i in range(5)]
    for i in range(4):
        alloc.allocate(SLICED, [[token(G, "GPU-0", i)]])
        pods.pods[i] = pod(f"p{i}", [sliced_ctr(pct="10")], created=i, phase="Running")
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 3)]])
    assert err.code is Code.FAILED_PRECONDITION
    assert "has no free slice slot (4 of 4 hosted)" in err.message and "default/p4" in err.message


def test_the_sliced_gate_refuses_too_few_units_and_the_hint_agrees(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("a", [sliced_ctr(pct="70")], created=1)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    pods.pods.append(pod("b", [sliced_ctr(pct="50")], created=2))
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 1)]])
    assert "the slice needs 800000 units, 480000 remain" in err.message
    # the hint, reading the same room, points the same container at the other card
    avail = [d.id for d in alloc.devices(SLICED) if d.healthy and d.id != token(G, "GPU-0", 0)]
    assert alloc.preferred(SLICED, avail, [], 1) == [token(G, "GPU-1", 0)]
    # and a small slice packs onto the fuller card
    pods.pods[1] = pod("b", [sliced_ctr(pct="20")], created=2)
    assert alloc.preferred(SLICED, avail, [], 1) == [token(G, "GPU-0", 1)]


def test_gate_off_allocates_anyway_and_clamps_remaining(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), device_plugin_sliced_allocate_gate="false")
    pods.pods = [pod("a", [sliced_ctr(pct="70")], created=1), pod("b", [sliced_ctr(pct="70")], created=2)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    [inj] = alloc.allocate(SLICED, [[token(G, "GPU-0", 1)]])
    assert any("allocated anyway" in line for line in inj.log)
    assert alloc.status()[0].accelerators[0].remaining == 0


def test_a_sliced_grant_carries_its_budget_and_writes_the_pod_record(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [sliced_ctr(pct="25", extra={f"{SLICED}.cores-percentage": "30"})])]
    alloc.allocate(SLICED, [[token(G, "GPU-1", 5)]])
    budget = responder.grants[0].budget
    assert budget is not None and (budget.cores_percent, budget.memory_mib, budget.units) == (30, 20480, 400_000)
    [record] = read_pod_records(HostRoot(tmp_path))
    assert (record.uid, record.pod, record.manufacturer, record.mode, record.accelerators) == (
        "uid-p",
        "default/p",
        "nvidia",
        "sliced",
        ["GPU-1"],
    )


def test_a_retried_slice_is_not_charged_twice(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, [group([card(0, slices=1)])])
    pods.pods = [pod("p", [sliced_ctr(pct="60")])]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    before = alloc.status()
    [inj] = alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])  # the kubelet retries the same call
    assert alloc.status() == before
    assert responder.grants[0] == responder.grants[1]
    assert "not charged again" in inj.log[0]


def test_a_slice_missing_its_memory_key_is_an_invalid_argument(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [sliced_ctr(pct=None)])]
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-0", 0)]])
    assert err.code is Code.INVALID_ARGUMENT and "must set nvidia.com/gpu.sliced.memory-percentage" in err.message
    assert alloc.claims() == []


# -- identification through the allocator -----------------------------------------------------------


def test_the_kubelet_answer_is_used_unless_switched_off(tmp_path: Path) -> None:
    for switch, expected in (("true", "second"), ("false", "first")):
        alloc, pods, responder = make_allocator(tmp_path, two_cards(), device_plugin_identify_by_kubelet=switch)
        pods.pods = [pod("first", [sliced_ctr()], created=100), pod("second", [sliced_ctr()], created=100)]
        pods.kubelet_holds(("first", "main", {}), ("second", "main", {}))
        pods.kubelet_holds(("second", "main", {}))
        alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
        assert responder.grants[0].container.pod == expected


def test_node_pods_unreadable_is_unavailable_and_reclaims_nothing(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [sliced_ctr()])]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    pods.fail = "https://10.0.0.1:443: connection refused"
    err = refused(alloc.allocate, SLICED, [[token(G, "GPU-1", 0)]])
    assert err.code is Code.UNAVAILABLE and "connection refused" in err.message
    alloc.reconcile()
    assert [c.pod for c in alloc.claims()] == ["p"]
    assert (tmp_path / "var/lib/gpustack/operator/pods/uid-p/allocation.json").exists()


def test_a_batch_maps_one_to_one_and_is_given_back_whole(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("w0", [sliced_ctr()], created=5), pod("w1", [sliced_ctr()], created=5)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)], [token(G, "GPU-1", 0)]])
    assert sorted((c.pod, c.accelerators) for c in alloc.claims()) == [("w0", ("GPU-0",)), ("w1", ("GPU-1",))]
    alloc2, pods2, _ = make_allocator(tmp_path, two_cards())
    pods2.pods = [pod("w0", [sliced_ctr()], created=5), pod("w1", [sliced_ctr()], created=5)]
    refused(alloc2.allocate, SLICED, [[token(G, "GPU-0", 0)], ["nvidia-a100:NOPE:0000"]])
    assert alloc2.claims() == []


# -- responder outcomes -----------------------------------------------------------------------------


def test_a_responder_refusal_gives_the_reservation_back(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    responder.refuse = "device node /dev/nvidia0 does not exist"
    err = refused(alloc.allocate, BASE, [[token(G, "GPU-0")]])
    assert err.message == "device node /dev/nvidia0 does not exist"
    assert alloc.claims() == [] and all(d.healthy for d in alloc.devices(SHARED))


def test_a_refused_retry_restores_the_prior_claim(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [sliced_ctr()])]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    prior = alloc.claims()
    responder.refuse = "library not staged"
    refused(alloc.allocate, SLICED, [[token(G, "GPU-1", 0)]])  # re-picked by the kubelet, then refused
    assert alloc.claims() == prior


def test_a_responder_crash_is_internal(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    responder.crash = True
    err = refused(alloc.allocate, BASE, [[token(G, "GPU-0")]])
    assert err.code is Code.INTERNAL and "KeyError" in err.message and "default/p container main" in err.message
    assert alloc.claims() == []


def test_the_cdi_decision_travels_in_the_grant_and_the_log(tmp_path: Path) -> None:
    calls: list[tuple[list[str], str | None]] = []

    class Cdi:
        def decide(self, device_ids: list[str], runtime_class: str | None) -> FakeDecision:
            calls.append((device_ids, runtime_class))
            return FakeDecision(Channel.CDI, "nvidia.com/gpu", "every granted accelerator is named")

    alloc, pods, responder = make_allocator(tmp_path, two_cards(), cdi=Cdi())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    [inj] = alloc.allocate(BASE, [[token(G, "GPU-1")]])
    assert calls == [(["GPU-1"], None)]
    assert (responder.grants[0].channel, responder.grants[0].cdi_kind) == (Channel.CDI, "nvidia.com/gpu")
    assert any("every granted accelerator is named" in line for line in inj.log)


# -- partitioned ------------------------------------------------------------------------------------


def mig_node(tmp_path: Path, n: int = 2, **kw: object):  # type: ignore[no-untyped-def]
    part = FakePartitioner()
    alloc, pods, responder = make_allocator(
        tmp_path, [group([mig_card(i) for i in range(n)], gid="mig")], partitioner=part, **kw
    )  # type: ignore[arg-type]
    return alloc, pods, responder, part


def mig_ctr(profile: str, name: str = "main") -> object:
    return ctr(name, {PARTITIONED: "1", f"{PARTITIONED}.mig-{profile}": "1"})


def test_partitions_pack_and_materialise(tmp_path: Path) -> None:
    alloc, pods, responder, part = mig_node(tmp_path)
    pods.pods = [pod(f"p{i}", [mig_ctr("1g.10gb")], created=i) for i in range(3)]  # type: ignore[list-item]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    for i in range(3):
        alloc.allocate(PARTITIONED, [[ids[-1 - i]]])  # the token names no accelerator: fungible
    assert [(c.accelerator, c.start) for c in part.created] == [("MIGCARD-0", 0), ("MIGCARD-0", 1), ("MIGCARD-0", 2)]
    grant = responder.grants[-1]
    assert grant.partition is not None and grant.partition.uuid == "MIG-2" and grant.channel is Channel.ENVVAR
    # a whole-card profile goes to the sibling kept whole
    pods.pods.append(pod("big", [mig_ctr("7g.80gb")], created=9))  # type: ignore[list-item]
    alloc.allocate(PARTITIONED, [[ids[0]]])
    assert part.created[-1].accelerator == "MIGCARD-1"
    pods.pods.append(pod("more", [mig_ctr("7g.80gb")], created=10))  # type: ignore[list-item]
    err = refused(alloc.allocate, PARTITIONED, [[ids[1]]])
    assert err.code is Code.FAILED_PRECONDITION and "can place a 7g.80gb partition" in err.message
    [record] = [r for r in read_pod_records(HostRoot(tmp_path)) if r.uid == "uid-p0"]
    assert (record.mode, record.accelerators) == ("partitioned", ["MIGCARD-0"])


def test_partition_health_is_a_node_level_count_without_numa(tmp_path: Path) -> None:
    alloc, pods, _, _ = mig_node(tmp_path, n=1)
    devices = alloc.devices(PARTITIONED)
    assert len(devices) == 7 and all(d.healthy for d in devices) and all(d.numa == () for d in devices)
    pods.pods = [pod("big", [mig_ctr("3g.40gb")])]  # type: ignore[list-item]
    held = devices[6].id
    alloc.allocate(PARTITIONED, [[held]])
    after = healthy(alloc.devices(PARTITIONED))
    assert len(after) == 7 and after[held]  # the held id stays healthy and listed
    assert sum(after.values()) == 1 + 3  # allocated + 3 more 1g instances placeable at 4..6


def test_a_retried_partition_reuses_its_live_instance(tmp_path: Path) -> None:
    alloc, pods, _, part = mig_node(tmp_path)
    pods.pods = [pod("p", [mig_ctr("3g.40gb")])]  # type: ignore[list-item]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    alloc.allocate(PARTITIONED, [[ids[0]]])
    alloc.allocate(PARTITIONED, [[ids[5]]])  # fungible: other ids, same container
    assert len(part.created) == 1 and len(alloc.claims()) == 1
    part.dead.add(part.created[0].uuid)  # gone behind our back: recreated on the same accelerator
    alloc.allocate(PARTITIONED, [[ids[5]]])
    assert len(part.created) == 2 and part.created[1].accelerator == part.created[0].accelerator


def test_partition_refusals(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, [group([mig_card(0)], gid="mig")])
    pods.pods = [pod("p", [mig_ctr("3g.40gb")])]  # type: ignore[list-item]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    assert "no partition capability" in refused(alloc.allocate, PARTITIONED, [[ids[0]]]).message
    alloc, pods, responder, part = mig_node(tmp_path)
    pods.pods = [pod("p", [ctr("main", {PARTITIONED: "1"})])]
    err = refused(alloc.allocate, PARTITIONED, [[ids[0]]])
    assert err.code is Code.INVALID_ARGUMENT and "must name a profile" in err.message
    pods.pods = [pod("p", [mig_ctr("3g.40gb")])]  # type: ignore[list-item]
    part.refuse = "NVML_ERROR_INSUFFICIENT_RESOURCES"
    assert refused(alloc.allocate, PARTITIONED, [[ids[0]]]).message == "NVML_ERROR_INSUFFICIENT_RESOURCES"
    part.refuse = None
    responder.refuse = "no /dev/nvidia-caps"
    refused(alloc.allocate, PARTITIONED, [[ids[0]]])
    assert part.destroyed_uuids == part.created_uuids and alloc.claims() == []  # given back: the instance too


# -- visibility -------------------------------------------------------------------------------------


def ssh_pod(main: object, count: str = "1", **kw: object) -> object:
    return pod("ssh", [main, ctr("sshd", {VISIBILITY: count})], **kw)  # type: ignore[list-item,arg-type]


def test_the_sidecar_gets_exactly_the_owners_accelerators_and_no_charge(tmp_path: Path) -> None:
    alloc, pods, responder = make_allocator(tmp_path, two_cards())
    pods.pods = [ssh_pod(sliced_ctr())]  # type: ignore[list-item]
    alloc.allocate(SLICED, [[token(G, "GPU-1", 0)]])
    before = alloc.status()
    [inj] = alloc.allocate(VISIBILITY, [[token(G, "GPU-0", 77)]])
    assert inj.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-1"
    grant = responder.grants[-1]
    assert (grant.family, grant.owner_family, grant.container.container) == (Family.VISIBILITY, Family.SLICED, "sshd")
    assert alloc.status() == before


def test_the_sidecar_without_an_owner_fails_closed(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [ssh_pod(sliced_ctr())]  # type: ignore[list-item]
    err = refused(alloc.allocate, VISIBILITY, [[token(G, "GPU-0", 1)]])
    assert err.code is Code.FAILED_PRECONDITION and "cannot be substantiated" in err.message


def test_a_partition_backed_sidecar_names_the_live_partition(tmp_path: Path) -> None:
    calls: list[object] = []

    class Cdi:
        def decide(self, device_ids: list[str], runtime_class: str | None) -> FakeDecision:
            calls.append(device_ids)
            return FakeDecision(Channel.CDI, "nvidia.com/gpu", "x")

    alloc, pods, responder, part = mig_node(tmp_path, cdi=Cdi())
    pods.pods = [ssh_pod(mig_ctr("1g.10gb"))]  # type: ignore[list-item]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    alloc.allocate(PARTITIONED, [[ids[0]]])
    [inj] = alloc.allocate(VISIBILITY, [[token("mig", "MIGCARD-1", 3)]])
    assert inj.envs["NVIDIA_VISIBLE_DEVICES"] == part.created[0].uuid
    granted = responder.grants[-1]
    assert granted.partition is not None and granted.partition.uuid == part.created[0].uuid
    assert granted.channel is Channel.ENVVAR
    assert calls == []  # the partitioned family never takes the CDI channel
    part.dead.add(part.created[0].uuid)
    alloc2, pods2, _, part2 = mig_node(tmp_path)
    pods2.pods = [ssh_pod(mig_ctr("1g.10gb"))]  # type: ignore[list-item]
    alloc2.allocate(PARTITIONED, [[ids[0]]])
    part2.dead.add(part2.created[0].uuid)
    err = refused(alloc2.allocate, VISIBILITY, [[token("mig", "MIGCARD-1", 3)]])
    assert "is not live" in err.message


def test_after_a_restart_the_annotation_recovers_the_owner_and_its_charge(tmp_path: Path) -> None:
    entry = AllocatedEntry.of(
        Claim("uid-ssh", "default", "ssh", "main", Family.SLICED, ("GPU-0",), units=900_000), "nvidia"
    )
    annotations = {ALLOCATED_ANNOTATION: render_allocated({"main": entry})}
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [ssh_pod(sliced_ctr(), annotations=annotations, phase="Pending")]  # type: ignore[list-item]
    [inj] = alloc.allocate(VISIBILITY, [[token(G, "GPU-1", 0)]])
    assert inj.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-0"
    assert alloc.status()[0].accelerators[0].remaining == D - 900_000
    assert json.loads(alloc.annotation("uid-ssh") or "{}")["main"]["accelerators"] == ["GPU-0"]


# -- release ----------------------------------------------------------------------------------------


def test_a_gone_pod_is_reclaimed_with_its_directory_and_partition(tmp_path: Path) -> None:
    alloc, pods, _, part = mig_node(tmp_path)
    pods.pods = [pod("p", [mig_ctr("1g.10gb")])]  # type: ignore[list-item]
    alloc.allocate(PARTITIONED, [[alloc.devices(PARTITIONED)[0].id]])
    pod_dir = tmp_path / "var/lib/gpustack/operator/pods/uid-p"
    assert pod_dir.is_dir()
    pods.pods = []
    alloc.reconcile()
    assert alloc.claims() == [] and not pod_dir.exists() and part.destroyed_uuids == part.created_uuids


def test_a_restart_sweeps_only_this_manufacturers_orphan_records(tmp_path: Path) -> None:
    root = tmp_path / "var/lib/gpustack/operator/pods"
    for uid, manufacturer in (("mine", "nvidia"), ("theirs", "amd")):
        (root / uid).mkdir(parents=True)
        (root / uid / "allocation.json").write_text(
            json.dumps({"pod": "a/b", "manufacturer": manufacturer, "mode": "sliced", "accelerators": []})
        )
    (root / "alive").mkdir()
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("x", [ctr()], uid="alive")]
    alloc.reconcile()
    assert sorted(p.name for p in root.iterdir()) == ["alive", "theirs"]


@pytest.mark.parametrize(("release", "charged"), [("true", False), ("false", True)])
def test_a_finished_pod_stops_charging_unless_switched_off(tmp_path: Path, release: str, charged: bool) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), ledger_release_terminated_pods=release)
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})], phase="Succeeded")]
    alloc.reconcile()
    assert (alloc.status()[0].accelerators[0].mode == "exclusive") is charged
    assert healthy(alloc.devices(SLICED))[token(G, "GPU-0", 0)] is not charged


def test_a_finished_pods_partition_stays_charged(tmp_path: Path) -> None:
    alloc, pods, _, part = mig_node(tmp_path)
    pods.pods = [pod("p", [mig_ctr("1g.10gb")])]  # type: ignore[list-item]
    alloc.allocate(PARTITIONED, [[alloc.devices(PARTITIONED)[0].id]])
    pods.pods = [pod("p", [mig_ctr("1g.10gb")], phase="Failed")]  # type: ignore[list-item]
    alloc.reconcile()
    assert alloc.status()[0].accelerators[0].mode == "partitioned" and part.destroyed == []


# -- concurrency ------------------------------------------------------------------------------------


def test_wait_change_wakes_on_a_reservation(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    start = alloc.version
    assert alloc.wait_change(start, 0.01) == start  # times out unchanged
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(alloc.wait_change(start, 10)))
    waiter.start()
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    waiter.join(5)
    assert woke and woke[0] != start


def test_one_node_lock_serialises_every_allocator(tmp_path: Path) -> None:
    alloc, pods, _ = make_allocator(tmp_path, two_cards())
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})])]
    done = threading.Event()
    with NODE_LOCK:

        def work() -> None:
            alloc.allocate(BASE, [[token(G, "GPU-0")]])
            done.set()

        worker = threading.Thread(target=work)
        worker.start()
        time.sleep(0.1)
        assert not done.is_set()  # blocked behind the lock another allocator (here: the test) holds
    worker.join(5)
    assert done.is_set()


@dataclass
class ReclaimingResponder(FakeResponder):
    """A responder whose slices outlive the container in the driver (respond.Reclaimer)."""

    reclaimed: list[str] = field(default_factory=list)
    fail: bool = False

    def reclaim(self, pod_uid: str, ctx: RespondContext) -> list[str]:
        if self.fail:
            raise RefusedError("the driver would not destroy it")
        self.reclaimed.append(pod_uid)
        return [f"destroyed what {pod_uid} held"]


def test_the_responders_reclaim_runs_before_a_gone_pods_directory_is_removed(tmp_path: Path) -> None:
    responder = ReclaimingResponder()
    alloc, pods, _ = make_allocator(tmp_path, two_cards(), responder=responder)
    pods.pods = [pod("p", [sliced_ctr()])]
    alloc.allocate(SLICED, [[alloc.devices(SLICED)[0].id]])
    pod_dir = tmp_path / "var/lib/gpustack/operator/pods/uid-p"
    assert pod_dir.is_dir()
    responder.fail = True
    pods.pods = []
    alloc.reconcile()
    assert alloc.claims() == [] and pod_dir.is_dir()  # what the driver holds is recorded there: kept
    responder.fail = False
    alloc.reconcile()  # the sweep finds the kept record and retries
    assert responder.reclaimed == ["uid-p"] and not pod_dir.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory", "garbage"])
def test_a_restart_sweep_leaves_an_unreadable_record_alone_and_carries_on(tmp_path: Path, kind: str) -> None:
    """An ``allocation.json`` that is not a regular file (or not a record) names no manufacturer: the
    sweep neither hangs on it nor raises, leaves that directory alone and still sweeps its own."""
    from tests.unit.nonregular import no_leftover_fifo_readers, plant, within

    root = tmp_path / "var/lib/gpustack/operator/pods"
    (root / "mine").mkdir(parents=True)
    (root / "mine/allocation.json").write_text(
        json.dumps({"pod": "a/b", "manufacturer": "nvidia", "mode": "sliced", "accelerators": []})
    )
    odd = root / "odd/allocation.json"
    if kind == "garbage":
        odd.parent.mkdir(parents=True)
        odd.write_text('{"manufacturer": Infinity}')
    else:
        plant(odd, kind)
    alloc, _, _ = make_allocator(tmp_path, two_cards())
    with no_leftover_fifo_readers(tmp_path):
        within(tmp_path, alloc.reconcile)
    assert sorted(p.name for p in root.iterdir()) == ["odd"]
