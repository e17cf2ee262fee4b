"""Which per-slice host records are live (issue 16): the responders' neighbour reads and the ledger
follow one rule (supplement §1.8 rules 6, 7): a record is live while its Pod is on the node and its
slice is charged -- a finished (Succeeded/Failed) Pod's logical slice stops being charged unless
``GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS=false``; MetaX's and Cambricon's slices stay until the Pod
is gone. Each case runs a real Allocator and the vendor's real responder (tests/unit/respond/lifecycle.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gpustack_operator.allocator.ledger import Claim, Ledger
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.respond import (
    Family,
    RespondContext,
    charges,
    live_slice_pods,
)
from gpustack_operator.settings import Settings
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.respond import lifecycle
from tests.unit.respond.lifecycle import Bench


@pytest.fixture
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bench]:
    vendor, settings = request.param
    with lifecycle.bench(vendor, tmp_path, **settings) as bench:
        yield bench


def card(bench: Bench, index: int = 0) -> str:
    return bench.view.group.accelerators[index].id


def admitted(bench: Bench, pct: int, index: int = 0) -> str:
    uid, _, _, refused = bench.admit(pct, card(bench, index))
    assert refused is None, refused
    return uid


KEEP = {"ledger_release_terminated_pods": "false"}


# -- AMD: a new window goes where no running slice computes ---------------------------------------


@pytest.mark.parametrize("node", [("amd", {})], indirect=True)
def test_amd_places_a_new_window_on_a_finished_slices_cus_not_a_running_ones(node: Bench) -> None:
    running = admitted(node, 50)
    finished = admitted(node, 50)
    assert lifecycle.amd_window(node, running)[1:] == (0, 29)  # type: ignore[index]
    assert lifecycle.amd_window(node, finished)[1:] == (30, 59)  # type: ignore[index]
    node.finish(1)  # the second one
    new = admitted(node, 50)
    assert lifecycle.amd_window(node, new)[1:] == (30, 59)  # type: ignore[index]


@pytest.mark.parametrize("node", [("amd", KEEP)], indirect=True)
def test_amd_with_finished_pods_kept_charged_their_windows_stay_occupied(node: Bench) -> None:
    admitted(node, 10)  # cores overcommit: a small memory share, and the CUs of 10%
    admitted(node, 10)
    node.finish(1)
    new = admitted(node, 10)
    assert lifecycle.amd_window(node, new)[1:] == (12, 17)  # type: ignore[index]


# -- Hygon: CUs, vdev_id and pipe_id of a finished slice are free again -----------------------------


@pytest.mark.parametrize("node", [("hygon", {})], indirect=True)
def test_hygon_admits_the_slice_the_ledger_and_the_hint_say_fits(node: Bench) -> None:
    first = admitted(node, 50)
    second = admitted(node, 50)
    node.finish(1)
    uid, ids, room, refused = node.admit(50)  # on the hint's own card
    assert room and ids[0].split(":")[1] == card(node)
    assert refused is None, refused
    mine, other = lifecycle.hygon_vdev(node, uid), lifecycle.hygon_vdev(node, first)
    assert mine is not None and other is not None
    assert mine.mask == ((1 << 60) - 1) << 60 and mine.vdev_id == 1 and mine.pipe_id == 1
    assert lifecycle.hygon_vdev(node, second) == mine  # the finished slice's ids, reused


@pytest.mark.parametrize("node", [("hygon", KEEP)], indirect=True)
def test_hygon_with_finished_pods_kept_charged_refuses_in_the_ledger_first(node: Bench) -> None:
    admitted(node, 50)
    admitted(node, 50)
    node.finish(1)
    _, _, room, refused = node.admit(50, card(node))
    assert not room and refused is not None and "units" in refused.message


# -- Ascend: the lowest vNPU id no running container holds -------------------------------------------


@pytest.mark.parametrize("node", [("ascend", {})], indirect=True)
def test_ascend_hands_out_a_finished_slices_vnpu_id_again(node: Bench) -> None:
    admitted(node, 10)
    admitted(node, 10)
    node.finish(0)
    new = admitted(node, 10)
    assert lifecycle.ascend_ids(node, new) == (0, 0)


@pytest.mark.parametrize("node", [("ascend", KEEP)], indirect=True)
def test_ascend_with_finished_pods_kept_charged_keeps_their_ids(node: Bench) -> None:
    admitted(node, 10)
    admitted(node, 10)
    node.finish(0)
    new = admitted(node, 10)
    assert lifecycle.ascend_ids(node, new) == (0, 2)


# -- MetaX: held until the Pod is gone --------------------------------------------------------------


@pytest.mark.parametrize("node", [("metax", {})], indirect=True)
def test_metax_subdevices_stay_held_until_the_pod_is_gone(node: Bench) -> None:
    admitted(node, 25)
    admitted(node, 25)
    node.finish(0)
    assert lifecycle.metax_index(node, admitted(node, 25)) == ("0000:0e:00.0", 2)
    node.delete(0, reconcile=True)  # the finished one
    assert lifecycle.metax_index(node, admitted(node, 25)) == ("0000:0e:00.0", 0)


# -- the one rule -----------------------------------------------------------------------------------


@given(
    manufacturer=st.sampled_from(["amd", "hygon", "ascend", "metax", "cambricon", "nvidia", "thead"]),
    family=st.sampled_from(list(Family)),
    terminal=st.booleans(),
    release=st.booleans(),
)
def test_the_ledger_charges_by_the_one_rule(manufacturer: str, family: Family, terminal: bool, release: bool) -> None:
    ledger = Ledger(manufacturer=manufacturer, release_terminated=release)
    claim = Claim("u", "ns", "p", "main", family, ("GPU-0",), terminal=terminal)
    assert ledger.charging(claim) is charges(manufacturer, family, terminal, release)


@pytest.mark.parametrize(
    ("manufacturer", "family", "finished", "release", "charged"),
    [
        ("amd", Family.SLICED, False, True, True),  # an entry charges until its Pod is gone (rule 6)
        ("amd", Family.SLICED, True, True, False),  # rule 7: a finished Pod's logical slice stops
        ("amd", Family.EXCLUSIVE, True, True, False),
        ("amd", Family.SHARED, True, True, False),
        ("amd", Family.SLICED, True, False, True),  # GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS=false
        ("nvidia", Family.PARTITIONED, True, True, True),  # hardware partitions stay until gone
        ("metax", Family.SLICED, True, True, True),  # MetaX/Cambricon slices stay until gone
        ("cambricon", Family.SLICED, True, True, True),
        ("metax", Family.EXCLUSIVE, True, True, False),
        ("amd", Family.VISIBILITY, False, True, False),  # visibility costs nothing
    ],
)
def test_charges_is_supplement_rule_7(
    manufacturer: str, family: Family, finished: bool, release: bool, charged: bool
) -> None:
    assert charges(manufacturer, family, finished, release) is charged


@given(
    pods=st.dictionaries(st.text(min_size=1, max_size=4), st.booleans(), max_size=6),
    manufacturer=st.sampled_from(["amd", "hygon", "metax", "cambricon"]),
    release=st.booleans(),
)
def test_live_slice_pods_are_the_pods_whose_slice_the_ledger_charges(
    pods: dict[str, bool], manufacturer: str, release: bool
) -> None:
    live = live_slice_pods(manufacturer, pods, release)
    assert live == {uid for uid, done in pods.items() if charges(manufacturer, Family.SLICED, done, release)}
    root = HostRoot(Path(__file__).parent)
    ctx = RespondContext(view=root, host=root, settings=Settings(), live_pods=live)
    assert all(ctx.record_live(uid) is (uid in live) for uid in [*pods, "gone"])
    assert RespondContext(view=root, host=root, settings=Settings()).record_live("any")  # on its own: all
