"""Random slice lifecycles on every vendor with per-slice host records (AMD, Hygon, Ascend, MetaX,
Cambricon): Pods admitted on the allocator's own hint, finished and deleted, through a real
:class:`Allocator` and the vendor's real responder (issue 16, "the refusal reads the same room the
allocation hint does").

Whatever the order:

- a card the hint names with room in the ledger (free slot, enough units) is never refused;
- a new slice is placed by the vendor's rule against exactly the slices that are live (supplement
  §1.8 rule 7: a finished Pod stops being charged for a logical slice, MetaX/Cambricon slices stay
  until the Pod is gone): AMD's lowest free CU window (reference rules §4), Hygon's lowest free CU
  bits, ``vdev_id`` and ``pipe_id`` (§9), Ascend's lowest free vNPU id (§9), MetaX's lowest free sGPU
  index;
- no two live slices share CUs, a ``vdev_id``, a ``pipe_id``, a vNPU id, an sGPU index or an sMLU
  instance, and a Cambricon instance lives exactly as long as its Pod.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.respond import lifecycle
from tests.unit.respond.lifecycle import Bench

# cores% = memory% for every slice, from values where each vendor's own compute room is the ledger's
# (Hygon: ceil(pct * 120 / 100) is exact; AMD's windows are on its 6-CU grid)
PERCENTS = {
    "amd": [10, 20, 30, 50],
    "hygon": [5, 10, 20, 25, 40, 50],
    "ascend": [5, 10, 25, 50],
    "metax": [10, 25, 50, 100],
    "cambricon": [10, 25, 50],
}


@dataclass(frozen=True)
class Op:
    kind: str  # admit, finish, delete
    pct: int = 0
    which: int = 0
    reconcile: bool = False


def ops(vendor: str) -> st.SearchStrategy[list[Op]]:
    admit = st.builds(Op, kind=st.just("admit"), pct=st.sampled_from(PERCENTS[vendor]))
    finish = st.builds(Op, kind=st.just("finish"), which=st.integers(0, 40))
    delete = st.builds(Op, kind=st.just("delete"), which=st.integers(0, 40), reconcile=st.booleans())
    return st.lists(st.one_of(admit, admit, finish, delete), max_size=18)


def charged(bench: Bench) -> list[str]:
    """The Pods whose slices the ledger charges (the default switch: finished Pods stop, except MetaX's
    and Cambricon's slices, which stay until the Pod is gone)."""
    if bench.vendor in ("metax", "cambricon"):
        return [p.uid for p in bench.pods.pods]
    return bench.uids("Running", "Pending")


def lowest_free(taken: set[int]) -> int:
    return next(i for i in range(1 << 10) if i not in taken)


def check_placement(bench: Bench, uid: str) -> None:
    """The new slice of ``uid`` was placed by the vendor's rule against the live slices alone."""
    others = [u for u in charged(bench) if u != uid]
    if bench.vendor == "amd":
        mine = lifecycle.amd_window(bench, uid)
        assert mine is not None
        windows = [w for w in (lifecycle.amd_window(bench, u) for u in others) if w and w[0] == mine[0]]
        size = mine[2] - mine[1] + 1
        free = lifecycle.lowest_free_start(size, [(w[1], w[2]) for w in windows], 60, lifecycle.AMD_QUANTUM)
        if free is not None:  # a window no live slice holds exists: it is the one taken, the lowest
            assert mine[1] == free, (mine, windows)
    elif bench.vendor == "hygon":
        vdev = lifecycle.hygon_vdev(bench, uid)
        assert vdev is not None
        live = [v for v in (lifecycle.hygon_vdev(bench, u) for u in others) if v]
        held = 0
        for v in live:
            held |= v.mask if v.bus == vdev.bus else 0
        assert vdev.mask == lifecycle.lowest_bits(vdev.mask.bit_count(), held, lifecycle.HYGON_CUS)
        assert vdev.vdev_id == lowest_free({v.vdev_id for v in live})
        assert vdev.pipe_id == lowest_free({v.pipe_id for v in live if v.bus == vdev.bus})
    elif bench.vendor == "ascend":
        ids = lifecycle.ascend_ids(bench, uid)
        assert ids is not None
        live = [i for i in (lifecycle.ascend_ids(bench, u) for u in others) if i and i[0] == ids[0]]
        assert ids[1] == lowest_free({i[1] for i in live})
    elif bench.vendor == "metax":
        index = lifecycle.metax_index(bench, uid)
        if index is not None:  # a whole-GPU slice takes the native path and records none
            live = [i for i in (lifecycle.metax_index(bench, u) for u in others) if i and i[0] == index[0]]
            assert index[1] == lowest_free({i[1] for i in live})


def check_invariants(bench: Bench, made: dict[str, list[tuple[int, int, str]]], reconciled: bool) -> None:
    running = bench.uids("Running")
    if bench.vendor == "hygon":
        live = [v for v in (lifecycle.hygon_vdev(bench, u) for u in running) if v]
        assert len({v.vdev_id for v in live}) == len(live)
        for bus in {v.bus for v in live}:
            on = [v for v in live if v.bus == bus]
            assert len({v.pipe_id for v in on}) == len(on)
            union = 0
            for v in on:
                assert not union & v.mask, "two live Hygon slices share CUs"
                union |= v.mask
    elif bench.vendor == "ascend":
        ids = [i for i in (lifecycle.ascend_ids(bench, u) for u in running) if i]
        assert len(set(ids)) == len(ids), "two live vNPUs share an id"
    elif bench.vendor == "metax":
        present = [i for i in (lifecycle.metax_index(bench, p.uid) for p in bench.pods.pods) if i]
        assert len(set(present)) == len(present), "two held sGPU subdevices share an index"
    elif bench.vendor == "cambricon":
        present = {p.uid for p in bench.pods.pods}
        held = [(i, n) for u in present for i, n, _ in made.get(u, [])]
        assert len(set(held)) == len(held), "two held sMLU instances share a slot"
        for uid, instances in made.items():
            for index, instance, name in instances:
                listed = lifecycle.cndev_instance(bench, index, instance)
                if uid in present:  # held until the Pod is gone: never destroyed under it
                    assert listed is not None and listed.endswith(f":{name}"), (uid, listed)
                elif reconciled:  # gone and reclaimed: destroyed
                    assert listed is None or not listed.endswith(f":{name}"), (uid, listed)


def run(vendor: str, steps: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as host, lifecycle.bench(vendor, Path(host)) as bench:
        made: dict[str, list[tuple[int, int, str]]] = {}
        reconciled = True
        for op in steps:
            if op.kind == "admit":
                uid, ids, room, refused = bench.admit(op.pct)
                reconciled = True  # every Allocate first reclaims what Pods gone from the node held
                assert ids, "the hint named no card although the node advertises healthy tokens"
                if room:
                    assert refused is None, f"the hint's card {ids[0]} had room in the ledger: {refused}"
                if refused is None:
                    check_placement(bench, uid)
                    made[uid] = lifecycle.cambricon_instances(bench, uid) if vendor == "cambricon" else []
            elif op.kind == "finish":
                bench.finish(op.which)
            else:
                bench.delete(op.which, op.reconcile)
                reconciled = op.reconcile
            check_invariants(bench, made, reconciled)


@pytest.mark.parametrize("vendor", lifecycle.VENDORS)
def test_random_slice_lifecycles_read_the_room_the_ledger_reads(vendor: str) -> None:
    @given(steps=ops(vendor))
    def lifecycles(steps: list[Op]) -> None:
        run(vendor, steps)

    lifecycles()
