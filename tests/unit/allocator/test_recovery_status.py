"""Restart recovery from the node's last published ``Devices`` status (issue 18, source 3 of
``allocator/recovery.py``): which holders are rebuilt, in what order of authority, what is reported
unrecoverable -- and the give-back retry threads ending when the Device Manager stops."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.allocator import durable, recovery
from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.ledger import (
    SHARE_UNITS,
    AcceleratorAllocation,
    AllocatedEntry,
    AllocationMode,
    Claim,
    D,
    DevicesAllocationGroup,
    Holder,
    Ledger,
    render_allocated,
)
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION, AnnotationWriteError, PodSpec
from gpustack_operator.manufacturers.respond import Family, RefusedError

from tests.unit.allocator.fakes import (
    BASE,
    PARTITIONED,
    SHARED,
    SLICED,
    FakePods,
    card,
    ctr,
    group,
    make_allocator,
    pod,
    sliced_ctr,
    token,
)

G = "nvidia-a100"


def three_cards() -> list:  # type: ignore[type-arg]
    return [group([card(0), card(1), card(2)])]


def holder(p: PodSpec, mode: AllocationMode, units: int, container: str = "main", profile: str | None = None) -> Holder:
    return Holder(pod=p.key, pod_uid=p.uid, container=container, mode=mode, units=units, profile=profile)


def status_of(*held: tuple[str, Holder], manufacturer: str = "nvidia", gid: str = G) -> list[DevicesAllocationGroup]:
    """A status naming ``held`` = (accelerator id, holder) pairs (accelerators GPU-0..2)."""
    accelerators = []
    for index, acc in enumerate(("GPU-0", "GPU-1", "GPU-2")):
        holders = [h for a, h in held if a == acc]
        accelerators.append(AcceleratorAllocation(id=acc, index=index, holders=holders))
    return [DevicesAllocationGroup(id=gid, manufacturer=manufacturer, accelerators=accelerators)]


def from_status(
    alloc: Allocator,
    status: list[DevicesAllocationGroup],
    pods: list[PodSpec],
    held: dict | None = None,  # type: ignore[type-arg]
) -> tuple[list[Claim], list[str]]:
    return recovery.claims_from_status(status, pods, "nvidia", alloc._ledger.cards, held or {})


# -- the pure rebuild ---------------------------------------------------------------------------------


def test_each_mode_is_rebuilt_with_its_units_on_every_accelerator_in_index_order(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, three_cards())
    ex = pod("ex", [ctr("main", {BASE: "2"})], uid="u-ex", phase="Running")
    sh = pod("sh", [ctr("main", {SHARED: "1"})], uid="u-sh", phase="Running")
    sl = pod("sl", [sliced_ctr("main", "25")], uid="u-sl", phase="Running")
    status = status_of(
        ("GPU-2", holder(ex, AllocationMode.EXCLUSIVE, D)),  # listed before GPU-0's entry: ordered by index
        ("GPU-0", holder(ex, AllocationMode.EXCLUSIVE, D)),
        ("GPU-1", holder(sh, AllocationMode.SHARED, SHARE_UNITS)),
        ("GPU-1", holder(sl, AllocationMode.SLICED, 400_000)),
    )
    status[0].accelerators.reverse()
    claims, problems = from_status(alloc, status, [ex, sh, sl])
    assert problems == []
    got = {c.pod: (c.family, c.accelerators, c.units, c.recovered, c.devices) for c in claims}
    assert got == {
        "ex": (Family.EXCLUSIVE, ("GPU-0", "GPU-2"), 0, True, ()),
        "sh": (Family.SHARED, ("GPU-1",), SHARE_UNITS, True, ()),
        "sl": (Family.SLICED, ("GPU-1",), 400_000, True, ()),
    }
    assert {c.key for c in claims} == {
        ("u-ex", "main", "exclusive"),
        ("u-sh", "main", "shared"),
        ("u-sl", "main", "sliced"),
    }
    # charged as the status said
    ledger = Ledger.of("nvidia", three_cards())
    for c in claims:
        ledger.claims[c.key] = c
    assert [a.allocated for a in ledger.status(three_cards())[0].accelerators] == [D, SHARE_UNITS + 400_000, D]


def test_a_holder_whose_pod_is_gone_or_already_held_is_not_rebuilt(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, three_cards())
    live = pod("live", [ctr("main", {BASE: "1"})], uid="u-live")
    gone = pod("gone", [ctr("main", {BASE: "1"})], uid="u-gone")
    status = status_of(
        ("GPU-0", holder(live, AllocationMode.EXCLUSIVE, D)), ("GPU-1", holder(gone, AllocationMode.EXCLUSIVE, D))
    )
    prior = Claim("u-live", "default", "live", "main", Family.EXCLUSIVE, ("GPU-0",))
    claims, problems = from_status(alloc, status, [live], held={prior.key: prior})
    assert claims == [] and problems == []
    claims, _ = from_status(alloc, status, [live])
    assert [c.pod for c in claims] == ["live"]


def test_only_this_manufacturers_groups_are_read(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, three_cards())
    p = pod("p", [ctr("main", {BASE: "1"})], uid="u1")
    status = status_of(("GPU-0", holder(p, AllocationMode.EXCLUSIVE, D)), manufacturer="amd")
    assert from_status(alloc, status, [p]) == ([], [])


def test_what_the_status_cannot_rebuild_is_reported_and_skipped(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, three_cards())
    part = pod("m", [ctr("main", {PARTITIONED: "1"})], uid="u-m")
    lost = pod("lost", [ctr("main", {BASE: "2"})], uid="u-lost")
    odd = pod("odd", [ctr("main", {SLICED: "1"})], uid="u-odd")
    status = status_of(
        ("GPU-0", holder(part, AllocationMode.PARTITIONED, 200_000, profile="1g.10gb")),
        ("GPU-1", holder(lost, AllocationMode.EXCLUSIVE, D)),
        ("GPU-1", holder(odd, AllocationMode.SLICED, D + 1)),
        ("GPU-2", holder(odd, AllocationMode.FREE, 0, container="main")),
        ("GPU-2", holder(lost, AllocationMode.EXCLUSIVE, D, container="nosuch")),
    )
    # the lost Pod's second accelerator is no longer detected
    status[0].accelerators.append(
        AcceleratorAllocation(id="GPU-9", index=9, holders=[holder(lost, AllocationMode.EXCLUSIVE, D)])
    )
    claims, problems = from_status(alloc, status, [part, lost, odd])
    assert [(c.pod, c.accelerators) for c in claims] == [("lost", ("GPU-1",))]  # the detected card is kept
    text = "\n".join(problems)
    assert "default/m container main" in text and "cannot be rebuilt from the status" in text
    assert "GPU-9 is no accelerator detected on this node" in text
    assert f"for {D + 1} units, which no slice costs" in text
    assert "which is no grant" in text
    assert "container nosuch" in text and "no such container" in text
    assert len(problems) == 5


def test_a_partition_a_node_record_rebuilt_is_not_reported(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, three_cards())
    part = pod("m", [ctr("main", {PARTITIONED: "1"})], uid="u-m")
    status = status_of(("GPU-0", holder(part, AllocationMode.PARTITIONED, 200_000, profile="1g.10gb")))
    prior = Claim("u-m", "default", "m", "main", Family.PARTITIONED, ("GPU-0",), units=200_000)
    assert from_status(alloc, status, [part], held={prior.key: prior}) == ([], [])


# -- in Allocator.recover --------------------------------------------------------------------------------


def test_recover_rebuilds_a_holder_only_the_status_names_and_says_so(tmp_path: Path) -> None:
    p = pod("p", [ctr("main", {BASE: "1"})], uid="u1", phase="Running")
    alloc, _, _ = make_allocator(tmp_path, three_cards(), FakePods(pods=[p]))
    lines = alloc.recover(status=status_of(("GPU-1", holder(p, AllocationMode.EXCLUSIVE, D))))
    assert any("default/p container main" in ln and "recovered from the Devices status" in ln for ln in lines), lines
    [claim] = alloc.claims()
    assert (claim.family, claim.accelerators, claim.recovered) == (Family.EXCLUSIVE, ("GPU-1",), True)
    health = {d.id: d.healthy for d in alloc.devices(f"{BASE}.shared")}
    assert not any(h for t, h in health.items() if ":GPU-1:" in t)  # the held card is not offered to another mode
    with pytest.raises(RefusedError):  # and a second grant on it is refused
        q = pod("q", [ctr("main", {SHARED: "1"})], uid="u2", created=200.0)
        alloc._pods.pods.append(q)  # type: ignore[attr-defined]
        alloc.allocate(SHARED, [[token(G, "GPU-1", 1)]])


def test_recover_without_a_status_or_with_an_empty_one_rebuilds_nothing_from_it(tmp_path: Path) -> None:
    p = pod("p", [ctr("main", {BASE: "1"})], uid="u1", phase="Running")
    pods = FakePods(pods=[p], kubelet=[])
    alloc, _, _ = make_allocator(tmp_path, three_cards(), pods)
    assert alloc.recover() == [] and alloc.claims() == []
    assert alloc.recover(status=[]) == [] and alloc.claims() == []
    alloc.recover(status=status_of(("GPU-1", holder(p, AllocationMode.EXCLUSIVE, D))))
    assert [c.accelerators for c in alloc.claims()] == [("GPU-1",)]


def test_the_annotation_outranks_the_status_and_the_status_outranks_the_kubelet(tmp_path: Path) -> None:
    entry = AllocatedEntry(
        manufacturer="nvidia", mode=Family.SLICED, accelerators=["GPU-0"], devices=[token(G, "GPU-0", 1)], units=300_000
    )
    a = pod(
        "a",
        [sliced_ctr("main", "10")],
        uid="ua",
        phase="Running",
        annotations={ALLOCATED_ANNOTATION: render_allocated({"main": entry})},
    )
    b = pod("b", [ctr("main", {SHARED: "1"})], uid="ub", phase="Running")
    pods = FakePods(pods=[a, b])
    pods.kubelet_holds(("b", "main", {SHARED: (token(G, "GPU-2", 4),)}))  # the kubelet disagrees: the status wins
    alloc, _, _ = make_allocator(tmp_path, three_cards(), pods)
    status = status_of(
        ("GPU-1", holder(a, AllocationMode.SLICED, 999_000)),  # the annotation wins over this
        ("GPU-1", holder(b, AllocationMode.SHARED, SHARE_UNITS)),
    )
    lines = alloc.recover(status=status)
    got = {c.pod: (c.accelerators, c.units) for c in alloc.claims()}
    assert got == {"a": (("GPU-0",), 300_000), "b": (("GPU-1",), SHARE_UNITS)}
    assert not any("pod-resources List" in ln for ln in lines)
    assert sum("recovered from the Devices status" in ln for ln in lines) == 1


# -- the give-back retry threads stop with the Device Manager ----------------------------------------------


@dataclass
class BlockingRecorder:
    """Fails every patch; the ``block``-th call and later ones wait for ``release`` first (a patch hung
    on a slow API server). ``calls``: the monotonic time each patch started."""

    block: int = 10**9
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    calls: list[float] = field(default_factory=list)

    def record(self, pod: PodSpec, value: str | None) -> None:
        self.calls.append(time.monotonic())
        if len(self.calls) >= self.block:
            self.entered.set()
            self.release.wait(10)
        raise AnnotationWriteError("the API server at http://127.0.0.1:1 answered HTTP 500 InternalError")


def failing_allocator(tmp_path: Path, recorder: BlockingRecorder) -> Allocator:
    pods = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")])
    alloc, _, _ = make_allocator(tmp_path, three_cards(), pods)
    alloc._recorder = recorder
    with pytest.raises(RefusedError):  # the patch and the immediate give-back fail: a retry thread starts
        alloc.allocate(BASE, [[token(G, "GPU-0")]])
    return alloc


def retry_threads(alloc: Allocator) -> list[threading.Thread]:
    return [t for t in alloc._retries().threads if t.is_alive()]


def test_a_retry_thread_waiting_in_its_backoff_ends_at_once_on_stop(tmp_path: Path) -> None:
    recorder = BlockingRecorder()
    alloc = failing_allocator(tmp_path, recorder)
    [thread] = retry_threads(alloc)
    deadline = time.monotonic() + 10
    while len(recorder.calls) < 3 and time.monotonic() < deadline:  # the first retry (after 0.5 s) failed too
        time.sleep(0.05)
    assert len(recorder.calls) == 3
    started = time.monotonic()
    assert alloc.stop_retries(timeout=5) == []
    assert time.monotonic() - started < 0.5  # woken from its 1 s backoff, not waited out
    assert not thread.is_alive()
    stopped = time.monotonic()
    time.sleep(1.2)  # past the backoff it was in: nothing more is written
    assert [t for t in recorder.calls if t >= stopped] == []


def test_a_retry_thread_blocked_in_a_failing_patch_ends_after_it_and_never_patches_again(tmp_path: Path) -> None:
    recorder = BlockingRecorder(block=3)  # the first background retry hangs in the recorder
    alloc = failing_allocator(tmp_path, recorder)
    [thread] = retry_threads(alloc)
    assert recorder.entered.wait(10)
    started = time.monotonic()
    assert alloc.stop_retries(timeout=0.3) == [thread.name]  # still inside the patch: named, not waited on
    assert time.monotonic() - started < 1.0  # the bound held
    stopped = time.monotonic()
    recorder.release.set()  # the hung patch fails now
    thread.join(2)
    assert not thread.is_alive()  # it ended after that patch ...
    time.sleep(1.2)
    assert len(recorder.calls) == 3 and all(t < stopped for t in recorder.calls)  # ... without another


def test_no_retry_thread_starts_after_the_stop_and_stop_retries_ends_every_allocator(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = failing_allocator(tmp_path / "a", BlockingRecorder())
    second = failing_allocator(tmp_path / "b", BlockingRecorder())
    assert len(retry_threads(first)) == 1 and len(retry_threads(second)) == 1
    started = time.monotonic()
    assert durable.stop_retries([first, second], timeout=5) == []
    assert time.monotonic() - started < 0.5
    assert retry_threads(first) == [] and retry_threads(second) == []
    recorder = first._recorder
    assert isinstance(recorder, BlockingRecorder)
    before = len(recorder.calls)
    first._pods.pods.append(pod("q", [ctr("main", {BASE: "1"})], uid="u2", created=300.0))  # type: ignore[attr-defined]
    with pytest.raises(RefusedError):
        first.allocate(BASE, [[token(G, "GPU-2")]])
    assert retry_threads(first) == []  # the give-back failed again, but no thread was started
    time.sleep(0.8)
    assert len(recorder.calls) == before + 2  # the call's own patch and its immediate give-back only
