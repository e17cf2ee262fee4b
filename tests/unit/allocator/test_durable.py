"""The allocator against a watch-backed view, the durable annotation and restart recovery (issue 18):
the miss path (a view a few milliseconds behind the kubelet is refreshed once), the annotation patch
after reserve and its give-back, and the rebuild from annotations and the kubelet's List."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.allocator.pods import PodSpec
from gpustack_operator.manufacturers.respond import Code, RefusedError

from tests.unit.allocator.fakes import BASE, FakePods, card, ctr, group, make_allocator, pod, token

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
