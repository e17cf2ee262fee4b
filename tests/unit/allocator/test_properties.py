"""Properties of the Allocator over random nodes and random grant/release sequences.

Whatever the kubelet hands it (tokens from the hint, or any advertised token at all), and whatever
Pods finish or go away: no accelerator is ever held by two modes (or two exclusive tenants), no
accelerator hosts more slices than its slot count or more units than a card while the gate is on,
no two partitions overlap, a sidecar never sees more than its owner holds, and the same sequence on
the same node gives the same ledger (placement is deterministic).
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.ledger import Claim, D
from gpustack_operator.allocator.pods import PodSpec
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.respond import Family, RefusedError
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.allocator.fakes import (
    BASE,
    PARTITIONED,
    SHARED,
    SLICED,
    VISIBILITY,
    FakePartitioner,
    card,
    ctr,
    group,
    make_allocator,
    mig_card,
    pod,
    sliced_ctr,
)

RESOURCE = {Family.EXCLUSIVE: BASE, Family.SHARED: SHARED, Family.SLICED: SLICED, Family.PARTITIONED: PARTITIONED}


@st.composite
def nodes(draw: st.DrawFn) -> list[DevicesGroup]:
    groups = []
    index = 0
    for gi in range(draw(st.integers(1, 2))):
        accelerators: list[Accelerator] = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 3)) == 0:
                accelerators.append(mig_card(index))
            else:
                accelerators.append(card(index, slices=draw(st.sampled_from([1, 2, 4, 8]))))
            index += 1
        groups.append(group(accelerators, gid=f"g{gi}", memory=draw(st.sampled_from([16384, 81920]))))
    return groups


@dataclass(frozen=True)
class Op:
    kind: str  # "alloc", "ssh", "finish", "delete", "reconcile"
    family: Family = Family.EXCLUSIVE
    count: int = 1
    pct: int = 50
    profile: str = "1g.10gb"
    pick: int = 0  # which advertised tokens (None-hint path when negative)
    target: int = 0


OPS = st.builds(
    Op,
    kind=st.sampled_from(["alloc", "alloc", "alloc", "alloc", "ssh", "finish", "delete", "reconcile"]),
    family=st.sampled_from(list(RESOURCE)),
    count=st.integers(1, 2),
    pct=st.sampled_from([5, 20, 45, 70, 100]),
    profile=st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb"]),
    pick=st.integers(-3, 5),
    target=st.integers(0, 20),
)


def container(op: Op, name: str = "main") -> object:
    if op.family is Family.SLICED:
        return sliced_ctr(name, pct=str(op.pct))
    if op.family is Family.PARTITIONED:
        return ctr(name, {PARTITIONED: "1", f"{PARTITIONED}.mig-{op.profile}": "1"})
    return ctr(name, {RESOURCE[op.family]: str(op.count)})


def run(groups: list[DevicesGroup], ops: list[Op], root: Path) -> Allocator:
    partitioner = FakePartitioner()
    alloc, pods, _ = make_allocator(root, groups, partitioner=partitioner)
    serial = 0
    for op in ops:
        if op.kind in ("finish", "delete", "reconcile"):
            if op.kind != "reconcile" and pods.pods:
                i = op.target % len(pods.pods)
                if op.kind == "delete":
                    pods.pods.pop(i)
                else:
                    p = pods.pods[i]
                    pods.pods[i] = PodSpec(**{**p.__dict__, "phase": "Succeeded"})
            alloc.reconcile()
            check(alloc, groups)
            continue
        serial += 1
        family = op.family
        count = 1 if family in (Family.SLICED, Family.PARTITIONED) else op.count
        main = container(op)
        containers = [main, ctr("sshd", {VISIBILITY: str(count)})] if op.kind == "ssh" else [main]
        pods.pods.append(pod(f"p{serial}", containers, created=float(serial)))  # type: ignore[arg-type]
        resource = RESOURCE[family]
        advertised = [d.id for d in alloc.devices(resource) if d.healthy]
        if not advertised:
            continue
        if op.pick < 0:
            ids = alloc.preferred(resource, advertised, [], count) or advertised[:count]
        else:
            ids = [advertised[(op.pick + k * 7) % len(advertised)] for k in range(count)]
        with contextlib.suppress(RefusedError):
            alloc.allocate(resource, [ids])
        check(alloc, groups)
        if op.kind == "ssh":
            vis = [d.id for d in alloc.devices(VISIBILITY)][: max(count, 1)]
            with contextlib.suppress(RefusedError):
                alloc.allocate(VISIBILITY, [vis])
            check(alloc, groups)
        # admitted: the Pod runs, so a later call naming the same token (a kubelet that lost its
        # checkpoint) is another container's, not this one retried
        started = pods.pods[-1]
        pods.pods[-1] = PodSpec(**{**started.__dict__, "phase": "Running"})
    return alloc


def check(alloc: Allocator, groups: list[DevicesGroup]) -> None:
    limits = {a.id: a for g in groups for a in g.accelerators}
    claims = alloc.claims()
    charging = [c for c in claims if c.family is not Family.VISIBILITY and not c.terminal]
    for acc, accelerator in limits.items():
        on = [c for c in charging if acc in c.accelerators]
        families = {c.family for c in on}
        assert len(families) <= 1, f"{acc} held by {families}"
        if Family.EXCLUSIVE in families:
            assert len(on) == 1
        if Family.SHARED in families:
            assert len(on) <= 10
        if Family.SLICED in families:
            sliced = accelerator.status.logical_sliced
            assert sliced is not None and len(on) <= sliced.count
            assert sum(c.units for c in on) <= D
        if Family.PARTITIONED in families:
            spans = sorted((c.partition.start, c.partition.start + c.partition.size) for c in on if c.partition)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
        for c in on:
            if c.family in (Family.SHARED, Family.SLICED):
                assert len(set(c.accelerators)) == len(c.accelerators)
    by_pod: dict[str, list[Claim]] = {}
    for c in claims:
        by_pod.setdefault(c.pod_uid, []).append(c)
    for c in claims:
        if c.family is Family.VISIBILITY:
            owners = [o for o in by_pod[c.pod_uid] if o.family is not Family.VISIBILITY and o.container != c.container]
            assert owners and set(c.accelerators) <= set(owners[0].accelerators)
    for status in alloc.status():
        for acc_status in status.accelerators:
            assert 0 <= acc_status.remaining <= D


@given(groups=nodes(), ops=st.lists(OPS, max_size=14))
def test_random_grants_and_releases_keep_the_invariants_and_are_deterministic(
    groups: list[DevicesGroup], ops: list[Op]
) -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        first = run(groups, ops, Path(one))
        second = run(groups, ops, Path(two))
        assert first.status() == second.status()
        assert [(c.key, c.accelerators, c.units) for c in first.claims()] == [
            (c.key, c.accelerators, c.units) for c in second.claims()
        ]
        for family in (Family.EXCLUSIVE, Family.SHARED, Family.SLICED):
            resource = RESOURCE[family]
            available = [d.id for d in first.devices(resource) if d.healthy]
            assert first.preferred(resource, available, [], 2) == second.preferred(resource, available, [], 2)
            assert set(first.preferred(resource, available, [], 2)) <= set(available)
