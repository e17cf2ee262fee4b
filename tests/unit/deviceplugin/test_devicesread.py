"""Reading the node's ``Devices`` status back for restart recovery (issue 18, ``kube/devicesread.py``)
against the API-server stand-in: absent is ``[]``, what the publisher wrote reads back, any failure or
malformed status is ``None`` with the reason logged -- and never an exception, whatever the JSON."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from gpustack_operator.allocator import recovery
from gpustack_operator.allocator.ledger import AllocationMode, Claim, D, DevicesAllocationGroup, Ledger
from gpustack_operator.kube import crds
from gpustack_operator.kube.devicesread import devices_path, parse_devices_status, read_devices_status
from gpustack_operator.kube.pods import make_api_client
from gpustack_operator.kube.publish import Publisher
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.respond import Family
from hypothesis import given
from hypothesis import strategies as st

from tests.kube.routes_publish import PublishStandIn
from tests.unit.allocator.fakes import card, ctr, group, pod

NODE = "node-a"


def groups() -> list[DevicesGroup]:
    accelerators = [Accelerator(id=f"GPU-{i}", index=i) for i in range(2)]
    return [DevicesGroup(id="nvidia-a100", manufacturer="nvidia", name="A100", memory=81920, accelerators=accelerators)]


def ledger_status(*claims: Claim) -> list[DevicesAllocationGroup]:
    ledger = Ledger.of("nvidia", groups())
    for claim in claims:
        ledger.claims[claim.key] = claim
    return ledger.status(groups())


HELD = Claim("u1", "default", "p", "main", Family.EXCLUSIVE, ("GPU-1",))


@pytest.fixture
def server() -> Iterator[PublishStandIn]:
    with PublishStandIn(schema=crds.openapi_schema()) as stand_in:
        stand_in.add_node(NODE)
        yield stand_in


def read(server: PublishStandIn) -> list[DevicesAllocationGroup] | None:
    return read_devices_status(make_api_client(None, server.url), NODE, timeout=5)


def seed(server: PublishStandIn, status: Any) -> None:
    """A Devices object as stored, status and all (the stand-in without a schema keeps what it is given)."""
    body = {"apiVersion": crds.API_VERSION, "kind": crds.KIND, "metadata": {"name": NODE}, "spec": {}, "status": status}
    server.create_object("devices", "", body, status_subresource=True, keep_status=True)


def test_an_absent_devices_object_is_nothing_to_recover_from(server: PublishStandIn) -> None:
    assert read(server) == []
    assert server.count("GET", devices_path(NODE)) == 1


def test_what_the_publisher_wrote_reads_back_as_written(server: PublishStandIn) -> None:
    status = ledger_status(HELD)
    publisher = Publisher(make_api_client(None, server.url), NODE, namespace="gpustack-system", timeout=5)
    publisher.publish(groups(), None, status)
    got = read(server)
    assert got is not None
    assert crds.DevicesStatus(groups=got).wire() == crds.DevicesStatus(groups=status).wire()
    assert got[0].accelerators[1].mode is AllocationMode.EXCLUSIVE and got[0].accelerators[1].allocated == D
    # the status names who holds the exclusive card: what restart recovery rebuilds from
    assert [h.container for h in got[0].accelerators[1].holders] and all(
        a.holders == [] for a in got[0].accelerators if a.mode is AllocationMode.FREE
    )


def test_holders_a_status_carries_are_read_and_rebuild_the_claim() -> None:
    with PublishStandIn() as server:  # no schema: the status is stored with its holders
        seed(server, {"groups": [g.wire() for g in ledger_status(HELD)]})
        got = read(server)
    assert got is not None
    [holder] = got[0].accelerators[1].holders
    assert (holder.pod, holder.pod_uid, holder.container, holder.mode) == ("default/p", "u1", "main", "exclusive")
    ledger = Ledger.of("nvidia", [group([card(0), card(1)])])
    claims, problems = recovery.claims_from_status(got, [pod("p", [ctr("main")], uid="u1")], "nvidia", ledger.cards, {})
    assert problems == [] and [(c.key, c.accelerators) for c in claims] == [(HELD.key, ("GPU-1",))]


@pytest.mark.parametrize(
    "status",
    [
        {"groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"id": "a", "index": 0, "mode": "bogus"}]}]},
        {"groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"id": "a", "index": "0"}]}]},
        {"groups": [{"id": "g", "manufacturer": "nvidia", "extra": 1}]},
        {"groups": "nvidia"},
    ],
    ids=["mode-outside-the-enum", "index-a-string", "unknown-key", "groups-not-a-list"],
)
def test_a_malformed_status_is_logged_and_ignored(status: Any, caplog: pytest.LogCaptureFixture) -> None:
    with PublishStandIn() as server:
        seed(server, status)
        with caplog.at_level(logging.WARNING, "gpustack_operator.kube.devicesread"):
            assert read(server) is None
    assert "status is malformed" in caplog.text and "recovery goes on without it" in caplog.text


def test_an_api_error_is_none_with_the_reason_logged(server: PublishStandIn, caplog: pytest.LogCaptureFixture) -> None:
    server.fail(500, reason="InternalError")
    with caplog.at_level(logging.WARNING, "gpustack_operator.kube.devicesread"):
        assert read(server) is None
    assert "HTTP 500" in caplog.text and "could not be read" in caplog.text


def test_an_unreachable_api_server_is_none(caplog: pytest.LogCaptureFixture) -> None:
    with PublishStandIn() as server:
        url = server.url
    with caplog.at_level(logging.WARNING, "gpustack_operator.kube.devicesread"):
        assert read_devices_status(make_api_client(None, url), NODE, timeout=2) is None
    assert "could not be read" in caplog.text


def test_no_node_name_is_none_without_a_request() -> None:
    assert read_devices_status(None, "") is None  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
camel_keys = st.sampled_from(
    ["groups", "id", "manufacturer", "accelerators", "index", "mode", "allocated", "remaining", "allocatedSlices",
     "allocatedProfiles", "remainingProfiles", "holders", "pod", "podUid", "container", "units", "profile", "name",
     "count", "status"]
)  # fmt: skip
shaped = st.recursive(
    st.none() | st.integers() | st.floats() | st.sampled_from(["free", "exclusive", "sliced", "", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(camel_keys, inner, max_size=6),
    max_leaves=40,
)


@pytest.mark.hostile
@given(st.one_of(json_values, shaped, st.fixed_dictionaries({"status": shaped})))
def test_any_answer_never_raises(doc: Any) -> None:
    got = parse_devices_status(doc, NODE)
    assert got is None or all(isinstance(g, DevicesAllocationGroup) for g in got)
