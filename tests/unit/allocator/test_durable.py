"""The allocator against a watch-backed view, the durable annotation and restart recovery (issue 18):
the miss path (a view a few milliseconds behind the kubelet is refreshed once), the annotation patch
after reserve and its give-back, and the rebuild from annotations and the kubelet's List."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.allocator import recovery
from gpustack_operator.allocator.core import NODE_LOCK, Allocator
from gpustack_operator.allocator.ledger import AllocatedEntry, render_allocated
from gpustack_operator.allocator.pods import (
    ALLOCATED_ANNOTATION,
    AnnotationWriteError,
    KubeletContainer,
    KubeletPod,
    PodSpec,
)
from gpustack_operator.manufacturers.respond import Code, Family, RefusedError

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


@dataclass
class LaggingPods(FakePods):
    """A view that lacks ``late`` until refreshed (the watch has not delivered it yet)."""

    late: list[PodSpec] = field(default_factory=list)
    refreshes: int = 0
    refresh_works: bool = True

    def refresh(self) -> bool:
        self.refreshes += 1
        if not self.refresh_works:
            return False
        self.pods = [*self.pods, *self.late]
        self.late = []
        return True


def two_cards() -> list:  # type: ignore[type-arg]
    return [group([card(0, numa="0"), card(1, numa="1")])]


def test_a_container_missing_from_the_view_is_found_after_one_refresh(tmp_path: Path) -> None:
    pods = LaggingPods(late=[pod("p", [ctr("main", {BASE: "1"})])])
    alloc, _, _ = make_allocator(tmp_path, two_cards(), pods)
    [inj] = alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert inj.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}
    assert pods.refreshes == 1


def test_a_failed_refresh_keeps_the_first_refusal(tmp_path: Path) -> None:
    pods = LaggingPods(late=[pod("p", [ctr("main", {BASE: "1"})])], refresh_works=False)
    alloc, _, _ = make_allocator(tmp_path, two_cards(), pods)
    with pytest.raises(RefusedError) as err:
        alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert err.value.code is Code.NOT_FOUND and "no container on this node waits" in err.value.message
    assert pods.refreshes == 1


# -- the durable annotation -----------------------------------------------------------------------


@dataclass
class FakeRecorder:
    """The annotation patches the allocator made; ``fail`` refuses the next ones."""

    written: list[tuple[str, str | None]] = field(default_factory=list)
    fail: int = 0
    during: Callable[[], None] | None = None

    def record(self, pod: PodSpec, value: str | None) -> None:
        if self.during is not None:
            self.during()
        if self.fail:
            self.fail -= 1
            raise AnnotationWriteError("the API server at http://127.0.0.1:1 answered HTTP 500 InternalError")
        self.written.append((pod.uid, value))


def with_recorder(tmp_path: Path, pods: FakePods, recorder: FakeRecorder) -> Allocator:
    alloc, _, _ = make_allocator(tmp_path, two_cards(), pods)
    alloc._recorder = recorder
    return alloc


def test_a_grant_is_recorded_on_its_pod_in_the_spec_shape(tmp_path: Path) -> None:
    recorder = FakeRecorder()
    pods = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")])
    alloc = with_recorder(tmp_path, pods, recorder)
    alloc.allocate(BASE, [[token(G, "GPU-1")]])
    [(uid, value)] = recorder.written
    assert uid == "u1" and value is not None
    assert json.loads(value) == {
        "main": {
            "manufacturer": "nvidia",
            "mode": "exclusive",
            "accelerators": ["GPU-1"],
            "devices": [token(G, "GPU-1")],
            "units": 0,
        }
    }
    assert value == alloc.annotation("u1")


def test_a_retried_call_whose_record_the_view_shows_is_not_patched_again(tmp_path: Path) -> None:
    recorder = FakeRecorder()
    pods = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")])
    alloc = with_recorder(tmp_path, pods, recorder)
    alloc.allocate(BASE, [[token(G, "GPU-1")]])
    [(_, value)] = recorder.written
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})], uid="u1", annotations={ALLOCATED_ANNOTATION: value or ""})]
    alloc.allocate(BASE, [[token(G, "GPU-1")]])
    assert len(recorder.written) == 1


def test_another_manufacturers_entries_are_kept(tmp_path: Path) -> None:
    other = render_allocated({"amd": AllocatedEntry(manufacturer="amd", mode=Family.EXCLUSIVE, accelerators=["a0"])})
    recorder = FakeRecorder()
    pods = FakePods(
        pods=[pod("p", [ctr("main", {BASE: "1"}), ctr("amd")], uid="u1", annotations={ALLOCATED_ANNOTATION: other})]
    )
    alloc = with_recorder(tmp_path, pods, recorder)
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    [(_, value)] = recorder.written
    assert sorted(json.loads(value or "{}")) == ["amd", "main"]


def test_a_failed_patch_gives_the_reservation_back_and_refuses_naming_the_error(tmp_path: Path) -> None:
    recorder = FakeRecorder(fail=1)
    pods = FakePods(
        pods=[
            pod("p", [ctr("main", {BASE: "1"})], uid="u1"),
            pod("q", [ctr("main", {BASE: "1"})], uid="u2", created=200.0),
        ]
    )
    alloc = with_recorder(tmp_path, pods, recorder)
    with pytest.raises(RefusedError) as err:
        alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert err.value.code is Code.UNAVAILABLE
    assert "HTTP 500" in err.value.message and "given back" in err.value.message
    assert alloc.claims() == []
    assert all(d.healthy for d in alloc.devices(f"{BASE}.shared"))
    # a second Allocate takes the card
    [inj] = alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert inj.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}
    assert [c.pod for c in alloc.claims()] == ["p"]


def test_the_patch_runs_outside_the_node_lock(tmp_path: Path) -> None:
    seen: list[bool] = []

    def probe() -> None:  # another thread must be able to take the lock while the patch is out
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(NODE_LOCK.acquire(timeout=5) and (NODE_LOCK.release() or True)))
        t.start()
        t.join()
        seen.extend(got)

    recorder = FakeRecorder(during=probe)
    pods = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")])
    alloc = with_recorder(tmp_path, pods, recorder)
    alloc.allocate(BASE, [[token(G, "GPU-0")]])
    assert seen == [True]


# -- restart recovery -------------------------------------------------------------------------------


def test_a_holding_only_the_kubelet_names_is_recovered_and_logged(tmp_path: Path) -> None:
    pods = FakePods(pods=[pod("p", [ctr("main", {SHARED: "1"})], uid="u1", phase="Running")])
    pods.kubelet_holds(("p", "main", {SHARED: (token(G, "GPU-1", 3),)}))
    alloc, _, _ = make_allocator(tmp_path, two_cards(), pods)
    lines = alloc.recover()
    assert any("recovered from the kubelet's pod-resources List" in line for line in lines)
    [claim] = alloc.claims()
    assert (claim.pod, claim.family, claim.accelerators, claim.recovered) == ("p", Family.SHARED, ("GPU-1",), True)
    health = {d.id: d.healthy for d in alloc.devices(BASE)}
    assert health == {token(G, "GPU-0"): True, token(G, "GPU-1"): False}


def test_the_annotation_outranks_the_kubelet_and_a_second_recovery_adds_nothing(tmp_path: Path) -> None:
    first, _, _ = make_allocator(tmp_path, two_cards(), FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")]))
    first.allocate(BASE, [[token(G, "GPU-0")]])
    value = first.annotation("u1") or ""
    view = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1", annotations={ALLOCATED_ANNOTATION: value})])
    view.kubelet_holds(("p", "main", {BASE: (token(G, "GPU-0"),)}))
    restarted, _, _ = make_allocator(tmp_path, two_cards(), view)
    assert restarted.recover() == []  # nothing beyond the annotation, nothing unrecoverable
    assert [(c.pod, c.accelerators) for c in restarted.claims()] == [("p", ("GPU-0",))]
    assert restarted.recover() == [] and len(restarted.claims()) == 1


def test_a_slice_whose_annotation_never_landed_is_recovered_from_its_node_record(tmp_path: Path) -> None:
    spec = [pod("s", [sliced_ctr("main", "50")], uid="u9")]
    first, _, _ = make_allocator(tmp_path, two_cards(), FakePods(pods=list(spec)))
    first.allocate(SLICED, [[token(G, "GPU-1", 2)]])  # the record is written; no recorder: no annotation
    restarted, _, _ = make_allocator(tmp_path, two_cards(), FakePods(pods=list(spec)))
    lines = restarted.recover()
    assert any("recovered from its node record" in line for line in lines), lines
    [claim] = restarted.claims()
    assert (claim.family, claim.accelerators) == (Family.SLICED, ("GPU-1",))
    assert claim.units == first.claims()[0].units


def test_a_partition_only_the_kubelet_names_is_reported_unrecoverable(tmp_path: Path) -> None:
    alloc, _, _ = make_allocator(tmp_path, two_cards())
    p = pod("m", [ctr("main", {PARTITIONED: "1"})], uid="u3")
    kubelet = [KubeletPod("default", "m", (KubeletContainer("main", {PARTITIONED: ("x",)}),))]
    claims, problems = recovery.claims_from_kubelet(kubelet, [p], alloc.names, alloc._ledger.cards, {})
    assert claims == [] and "cannot be rebuilt" in problems[0]


def test_a_given_back_slice_is_not_recovered_from_its_node_record(tmp_path: Path) -> None:
    spec = [pod("s", [sliced_ctr("main", "50")], uid="u9")]
    recorder = FakeRecorder(fail=2)  # the patch and the given-back annotation's patch both fail
    first = with_recorder(tmp_path, FakePods(pods=list(spec)), recorder)
    with pytest.raises(RefusedError):
        first.allocate(SLICED, [[token(G, "GPU-1", 2)]])
    record = json.loads((tmp_path / "var/lib/gpustack/operator/pods/u9/allocation.json").read_text())
    assert record["manufacturer"] == "nvidia" and record["allocated"] == {}  # still the Pod's, names nothing
    restarted, _, _ = make_allocator(tmp_path, two_cards(), FakePods(pods=list(spec)))
    restarted.recover()
    assert restarted.claims() == []


def test_each_annotation_is_parsed_once_per_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpustack_operator.allocator import durable

    calls: list[str] = []
    real = durable.parse_allocated

    def counting(raw: str | None) -> dict[str, AllocatedEntry]:
        calls.append(raw or "")
        return real(raw)

    monkeypatch.setattr(durable, "parse_allocated", counting)
    entry = AllocatedEntry(
        manufacturer="nvidia", mode=Family.EXCLUSIVE, accelerators=["GPU-0"], devices=[token(G, "GPU-0")]
    )
    value = render_allocated({"main": entry})
    pods = FakePods(
        pods=[
            pod("p", [ctr("main", {BASE: "1"})], uid="u1", phase="Running", annotations={ALLOCATED_ANNOTATION: value})
        ]
    )
    alloc, _, _ = make_allocator(tmp_path, two_cards(), pods)
    for _ in range(3):
        alloc.reconcile()
    assert calls == [value]
    assert [c.accelerators for c in alloc.claims()] == [("GPU-0",)]
    other = render_allocated(
        {"side": entry.model_copy(update={"accelerators": ["GPU-1"], "devices": [token(G, "GPU-1")]})}
    )
    pods.pods = [
        pod(
            "p",
            [ctr("main", {BASE: "1"}), ctr("side", {BASE: "1"})],
            uid="u1",
            phase="Running",
            annotations={ALLOCATED_ANNOTATION: other},
        )
    ]
    alloc.reconcile()
    assert calls == [value, other]  # a new value is read again
    assert sorted(c.container for c in alloc.claims()) == ["main", "side"]


def test_a_give_back_is_retried_until_it_lands_and_a_landed_record_is_not_recovered(tmp_path: Path) -> None:
    """Supplement §1.8 rule 8: the patch timed out but landed (the view shows it), and the first
    give-back patches fail: the given-back claim is not recovered from that record, and the give-back
    is retried in the background until it lands."""
    landed = threading.Event()

    @dataclass
    class Flaky(FakeRecorder):
        def record(self, pod: PodSpec, value: str | None) -> None:
            super().record(pod, value)
            landed.set()

    recorder = Flaky(fail=3)  # the patch, the immediate give-back, the first background retry
    pods = FakePods(pods=[pod("p", [ctr("main", {BASE: "1"})], uid="u1")])
    alloc = with_recorder(tmp_path, pods, recorder)
    with pytest.raises(RefusedError):
        alloc.allocate(BASE, [[token(G, "GPU-0")]])
    tried = render_allocated(
        {
            "main": AllocatedEntry(
                manufacturer="nvidia", mode=Family.EXCLUSIVE, accelerators=["GPU-0"], devices=[token(G, "GPU-0")]
            )
        }
    )
    pods.pods = [pod("p", [ctr("main", {BASE: "1"})], uid="u1", annotations={ALLOCATED_ANNOTATION: tried})]
    alloc.reconcile()
    assert alloc.claims() == []  # the landed record of a given-back claim is not recovered
    assert landed.wait(10), "the give-back was not retried"
    assert recorder.written == [("u1", None)]  # the annotation as it stands: nothing held


def test_a_terminating_holder_is_recovered_and_keeps_its_card(tmp_path: Path) -> None:
    entry = AllocatedEntry(
        manufacturer="nvidia", mode=Family.EXCLUSIVE, accelerators=["GPU-1"], devices=[token(G, "GPU-1")]
    )
    value = render_allocated({"main": entry})
    holder = pod(
        "h",
        [ctr("main", {BASE: "1"})],
        uid="u1",
        phase="Running",
        deleting=True,
        annotations={ALLOCATED_ANNOTATION: value},
    )
    alloc, _, _ = make_allocator(tmp_path, two_cards(), FakePods(pods=[holder]))
    alloc.recover()
    [claim] = alloc.claims()
    assert (claim.pod, claim.accelerators, claim.recovered) == ("h", ("GPU-1",), True)
    health = {d.id: d.healthy for d in alloc.devices(f"{BASE}.shared")}
    assert not any(h for t, h in health.items() if ":GPU-1:" in t)  # held until the Pod is gone
