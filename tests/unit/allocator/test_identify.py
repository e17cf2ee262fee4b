"""Which container an anonymous Allocate serves (supplement §1.8 rules 1, 2, 6, 11)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from gpustack_operator.allocator.identify import Candidate, Target, identify
from gpustack_operator.allocator.pods import KubeletContainer, KubeletPod, PodSpec
from gpustack_operator.manufacturers.respond import Code, RefusedError

from tests.unit.allocator.fakes import SLICED, ctr, pod, sliced_ctr

R = SLICED


def run(
    requests: list[list[str]],
    pods: list[PodSpec],
    kubelet: list[KubeletPod] | None = None,
    reserved: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    feasible: Callable[[Candidate, list[str]], bool] = lambda c, ids: True,
) -> list[Target]:
    return identify(R, requests, pods=pods, kubelet=kubelet, reserved=reserved or {}, feasible=feasible)


def names(targets: list[Target]) -> list[str]:
    return [f"{t.pod.name}/{t.container.name}" for t in targets]


def kpod(name: str, *containers: tuple[str, tuple[str, ...]]) -> KubeletPod:
    return KubeletPod("default", name, tuple(KubeletContainer(c, {R: d} if d else {}) for c, d in containers))


def test_the_oldest_pending_candidate_is_taken() -> None:
    pods = [pod("young", [sliced_ctr()], created=200), pod("old", [sliced_ctr()], created=100)]
    assert names(run([["t"]], pods)) == ["old/main"]


def test_equal_timestamps_break_by_namespace_and_name() -> None:
    pods = [pod("b", [sliced_ctr()]), pod("a", [sliced_ctr()]), pod("a", [sliced_ctr()], namespace="aa", uid="x")]
    assert names(run([["t"]], pods)) == ["a/main"]
    assert run([["t"]], pods)[0].pod.namespace == "aa"


def test_the_kubelet_answer_outranks_the_timestamp() -> None:
    # two slices created in the same second, bound in the other order
    pods = [pod("first", [sliced_ctr()], created=100), pod("second", [sliced_ctr()], created=100)]
    kubelet = [kpod("first", ("main", ("g:A:0000",))), kpod("second", ("main", ()))]
    targets = run([["t"]], pods, kubelet)
    assert names(targets) == ["second/main"]
    assert targets[0].how == "kubelet"


def test_a_kubelet_naming_several_narrows_the_match_to_them() -> None:
    pods = [
        pod("p0", [sliced_ctr()], created=50),
        pod("p1", [sliced_ctr()], created=100),
        pod("p2", [sliced_ctr()], created=150),
    ]
    kubelet = [kpod("p1", ("main", ())), kpod("p2", ("main", ()))]
    assert names(run([["t"]], pods, kubelet)) == ["p1/main"]  # p0 is older but the kubelet does not hold it


def test_a_kubelet_naming_none_falls_back_to_pending_pods_it_does_not_serve() -> None:
    pods = [pod("served", [sliced_ctr()], created=50), pod("new", [sliced_ctr()], created=100)]
    kubelet = [kpod("served", ("main", ("g:A:0000",)))]
    assert names(run([["t"]], pods, kubelet)) == ["new/main"]


def test_candidates_request_the_resource_with_the_call_quantity() -> None:
    pods = [
        pod("two", [ctr("main", {R: "2"})], created=10),
        pod("other", [ctr("main", {"amd.com/gpu": "1"})], created=20),
        pod("one", [sliced_ctr()], created=30),
    ]
    assert names(run([["t"]], pods)) == ["one/main"]
    assert names(run([["t", "u"]], pods)) == ["two/main"]


@pytest.mark.parametrize(
    "skip", [{"phase": "Succeeded"}, {"phase": "Failed"}, {"deleting": True}, {"phase": "Running"}]
)
def test_finished_deleting_and_running_pods_are_not_matched(skip: dict[str, object]) -> None:
    pods = [pod("gone", [sliced_ctr()], created=10, **skip), pod("live", [sliced_ctr()], created=20)]  # type: ignore[arg-type]
    assert names(run([["t"]], pods)) == ["live/main"]


def test_a_reserved_container_is_skipped() -> None:
    pods = [pod("old", [sliced_ctr()], created=10), pod("new", [sliced_ctr()], created=20)]
    targets = run([["g:B:0000"]], pods, reserved={("uid-old", "main"): ("g:A:0000",)})
    assert names(targets) == ["new/main"] and not targets[0].retry


def test_a_retried_call_is_recognised() -> None:
    pods = [pod("old", [sliced_ctr()], created=10), pod("new", [sliced_ctr()], created=20)]
    targets = run([["g:A:0000"]], pods, reserved={("uid-old", "main"): ("g:A:0000",)})
    assert names(targets) == ["old/main"] and targets[0].retry


def test_a_kubelet_named_reserved_container_is_a_retry() -> None:
    pods = [pod("p", [sliced_ctr()])]
    targets = run([["g:B:0000"]], pods, [kpod("p", ("main", ()))], reserved={("uid-p", "main"): ("g:A:0000",)})
    assert targets[0].retry and targets[0].how == "kubelet"


def test_infeasible_candidates_are_dropped() -> None:
    pods = [pod("big", [sliced_ctr(pct="90")], created=10), pod("small", [sliced_ctr(pct="10")], created=20)]

    def fits(c: Candidate, ids: list[str]) -> bool:
        return c.container.resources[f"{R}.memory-percentage"] == "10"

    assert names(run([["t"]], pods, feasible=fits)) == ["small/main"]


def test_all_infeasible_takes_the_unfiltered_oldest() -> None:
    pods = [pod("young", [sliced_ctr()], created=20), pod("old", [sliced_ctr()], created=10)]
    targets = run([["t"]], pods, feasible=lambda c, ids: False)
    assert names(targets) == ["old/main"] and "none feasible" in targets[0].how


def test_a_feasibility_refusal_counts_as_infeasible() -> None:
    pods = [pod("bad", [sliced_ctr()], created=10), pod("good", [sliced_ctr()], created=20)]

    def check(c: Candidate, ids: list[str]) -> bool:
        if c.pod.name == "bad":
            raise RefusedError("no memory key")
        return True

    assert names(run([["t"]], pods, feasible=check)) == ["good/main"]


def test_a_batch_maps_one_to_one_onto_identical_pods() -> None:
    pods = [pod(f"w{i}", [sliced_ctr()], created=100) for i in range(3)]
    targets = run([["a"], ["b"], ["c"]], pods)
    assert sorted(names(targets)) == ["w0/main", "w1/main", "w2/main"]


def test_a_batch_of_containers_of_one_pod() -> None:
    pods = [pod("p", [ctr("a", {R: "1"}), ctr("b", {R: "1"})])]
    assert names(run([["x"], ["y"]], pods)) == ["p/a", "p/b"]


def test_a_batch_with_the_kubelet_naming_both() -> None:
    pods = [pod("p1", [sliced_ctr()], created=20), pod("p2", [sliced_ctr()], created=10)]
    kubelet = [kpod("p1", ("main", ())), kpod("p2", ("main", ()))]
    assert names(run([["x"], ["y"]], pods, kubelet)) == ["p2/main", "p1/main"]


def test_no_candidate_is_refused_not_found() -> None:
    with pytest.raises(RefusedError, match="no container on this node waits for 1") as err:
        run([["t"]], [pod("p", [ctr("main")])])
    assert err.value.code is Code.NOT_FOUND


def test_more_requests_than_candidates_is_refused() -> None:
    with pytest.raises(RefusedError) as err:
        run([["a"], ["b"]], [pod("p", [sliced_ctr()])])
    assert err.value.code is Code.NOT_FOUND


def test_several_reserved_and_no_match_is_refused_rather_than_guessed() -> None:
    pods = [pod("a", [sliced_ctr()]), pod("b", [sliced_ctr()])]
    reserved = {("uid-a", "main"): ("x",), ("uid-b", "main"): ("y",)}
    with pytest.raises(RefusedError, match="already holds a reservation"):
        run([["z"]], pods, reserved=reserved)


def test_the_one_reserved_candidate_asked_with_new_ids_is_its_retry() -> None:
    targets = run([["z"]], [pod("a", [sliced_ctr()])], reserved={("uid-a", "main"): ("x",)})
    assert names(targets) == ["a/main"] and targets[0].retry
