"""Two allocator rules no test held until issue 16 -- each test here fails when its rule is removed:

- partitioned ids a live allocation holds are never removed from the advertised list (supplement
  §1.9: node-level health over a *stable* id set), not even when a re-detection no longer offers them;
- identification drops the candidates the call cannot serve (supplement §1.8 rule 2, "drop candidates
  this call cannot serve on the offered accelerators"), judged by the allocator's real feasibility --
  the real ledger room, budgets, partition placement and owner lookup -- not a stand-in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.ledger.models import AcceleratorPhysicalSliced

from tests.unit.allocator.fakes import (
    BASE,
    PARTITIONED,
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
    token,
)

G = "nvidia-a100"


def mig_ctr(profile: str, name: str = "main") -> object:
    return ctr(name, {PARTITIONED: "1", f"{PARTITIONED}.mig-{profile}": "1"})


# -- the stable partitioned id set ------------------------------------------------------------------


@pytest.mark.parametrize("redetected", ["card-gone", "ceiling-shrunk"])
def test_a_held_partition_id_stays_listed_and_healthy_after_a_redetection_drops_it(
    tmp_path: Path, redetected: str
) -> None:
    part = FakePartitioner()
    alloc, pods, _ = make_allocator(tmp_path, [group([mig_card(0), mig_card(1)], gid="mig")], partitioner=part)
    pods.pods = [pod("p", [mig_ctr("1g.10gb")])]  # type: ignore[list-item]
    held = token("mig", "MIGCARD-1", 6)  # the last id of the second card: only this allocation names it
    alloc.allocate(PARTITIONED, [[held]])
    assert part.created and {d.id: d.healthy for d in alloc.devices(PARTITIONED)}[held]
    second = mig_card(1)
    if redetected == "card-gone":
        accelerators = [mig_card(0)]
    else:  # the card is there, but now offers 3 instances: ids 3..6 are no longer its tokens
        physical = second.status.physical_sliced
        assert physical is not None
        second.status.physical_sliced = AcceleratorPhysicalSliced(profiles=physical.profiles, count=3)
        accelerators = [mig_card(0), second]
    alloc.update([group(accelerators, gid="mig")])
    after = {d.id: d.healthy for d in alloc.devices(PARTITIONED)}
    assert held in after, "an id a live allocation holds was removed from the list"
    assert after[held], "an id a live allocation holds is advertised Unhealthy"
    assert token("mig", "MIGCARD-1", 5) not in after  # ids nobody holds follow the detection


# -- identification by real feasibility -------------------------------------------------------------


def test_a_sliced_call_skips_the_older_pod_its_card_has_no_room_for(tmp_path: Path) -> None:
    """GPU-0 already hosts 60%: the older pending Pod (50%) does not fit it, the younger (20%) does --
    so a call for a GPU-0 token serves the younger, by the ledger's real room and budgets."""
    alloc, pods, responder = make_allocator(tmp_path, [group([card(0), card(1)])])
    pods.pods = [pod("running", [sliced_ctr(pct="60")], created=1)]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 0)]])
    pods.pods = [
        pod("running", [sliced_ctr(pct="60")], created=1, phase="Running"),
        pod("big", [sliced_ctr(pct="50")], created=2),
        pod("small", [sliced_ctr(pct="20")], created=3),
    ]
    alloc.allocate(SLICED, [[token(G, "GPU-0", 1)]])
    assert responder.grants[-1].container.pod == "small"
    alloc.allocate(SLICED, [[token(G, "GPU-1", 0)]])  # the card the big one fits
    assert responder.grants[-1].container.pod == "big"


def test_a_partition_call_skips_the_older_pod_no_card_can_place(tmp_path: Path) -> None:
    """A 3g.40gb instance sits at 0-3: no 7g.80gb fits the only card, a 1g.10gb does."""
    alloc, pods, responder = make_allocator(tmp_path, [group([mig_card(0)], gid="mig")], partitioner=FakePartitioner())
    pods.pods = [pod("first", [mig_ctr("3g.40gb")], created=1)]  # type: ignore[list-item]
    ids = [d.id for d in alloc.devices(PARTITIONED)]
    alloc.allocate(PARTITIONED, [[ids[0]]])
    pods.pods = [
        pod("first", [mig_ctr("3g.40gb")], created=1, phase="Running"),  # type: ignore[list-item]
        pod("whole", [mig_ctr("7g.80gb")], created=2),  # type: ignore[list-item]
        pod("small", [mig_ctr("1g.10gb")], created=3),  # type: ignore[list-item]
    ]
    alloc.allocate(PARTITIONED, [[ids[1]]])
    assert responder.grants[-1].container.pod == "small"
    assert responder.grants[-1].partition is not None and responder.grants[-1].partition.profile == "1g.10gb"


def test_a_visibility_call_skips_the_older_sidecar_whose_owner_holds_nothing_yet(tmp_path: Path) -> None:
    """The older Pod's main has not been allocated, so its sidecar has no owner to substantiate it;
    the younger Pod's has one: a visibility call serves the younger sidecar."""
    alloc, pods, responder = make_allocator(tmp_path, [group([card(0), card(1)])])
    pods.pods = [
        pod("older", [ctr("main", {BASE: "1"}), ctr("sshd", {VISIBILITY: "1"})], created=1),
        pod("younger", [sliced_ctr(pct="10"), ctr("sshd", {VISIBILITY: "1"})], created=2),
    ]
    alloc.allocate(SLICED, [[token(G, "GPU-1", 0)]])  # the younger main: the only sliced candidate
    alloc.allocate(VISIBILITY, [[alloc.devices(VISIBILITY)[0].id]])
    grant = responder.grants[-1]
    assert (grant.container.pod, grant.container.container) == ("younger", "sshd")
    assert [a.id for a in grant.accelerators] == ["GPU-1"]
