"""The node capacity keys written onto the Node's status through the official client, against the
API-server stand-in (tests/kube/routes_publish.py): set, unchanged (no write), changed, removed (an
accelerator gone), the kubelet's and others' keys untouched, quantities compared as quantities, errors
bounded and named; and a property test of the patch over any capacity map the server could answer."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from gpustack_operator import api
from gpustack_operator.allocator.capacity import ManufacturerCapacity, is_capacity_key, names_of, node_capacity
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.kube.nodestatus import NodeCapacityWriter, capacity_patch
from gpustack_operator.kube.pods import make_api_client
from gpustack_operator.kube.rest import KubeRequestError
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.respond import Family
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import host
from tests.kube.apiserver import merge_patch
from tests.kube.routes_publish import PublishStandIn

BASES = ["nvidia.com/gpu", "hygon.com/dcu"]
KUBELET = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8", "nvidia.com/gpu.sliced": "1024"}


@functools.cache
def h100() -> tuple[list[DevicesGroup], ResourceNames]:
    """The fixture node detected once (before any stand-in thread runs: detection forks)."""
    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia"])
    return api.run_detect(req, interfaces=False).groups, names_of(req.resolved["nvidia"])


@pytest.fixture
def server() -> Iterator[PublishStandIn]:
    h100()
    with PublishStandIn() as stand_in:
        stand_in.add_node("node-a", capacity=KUBELET)
        yield stand_in


@pytest.fixture
def writer(server: PublishStandIn) -> NodeCapacityWriter:
    return NodeCapacityWriter(make_api_client(None, server.url), "node-a", BASES, timeout=5)


def h100_capacity(cards: int = 8) -> dict[str, str]:
    detected, names = h100()
    groups = [g.model_copy(deep=True) for g in detected]
    groups[0].accelerators = groups[0].accelerators[:cards]
    return node_capacity([ManufacturerCapacity(names, groups, set(Family))])


def status(server: PublishStandIn) -> dict[str, Any]:
    node = server.obj("nodes", "node-a")
    assert node is not None
    return node["status"]  # type: ignore[no-any-return]


def patches(server: PublishStandIn) -> int:
    return server.count("PATCH", "/api/v1/nodes/node-a")


def test_the_keys_land_in_capacity_and_allocatable_beside_the_kubelets(
    server: PublishStandIn, writer: NodeCapacityWriter
) -> None:
    desired = h100_capacity()
    assert writer.sync(desired) is True
    st_ = status(server)
    for name in ("capacity", "allocatable"):
        assert {k: v for k, v in st_[name].items() if k in desired} == desired
        assert {k: v for k, v in st_[name].items() if k not in desired} == KUBELET  # never touched
    assert st_["capacity"]["nvidia.com/gpu.sliced.memory-percentage"] == "800"
    (patch,) = [r for r in server.requests if r.method == "PATCH"]
    assert patch.path == "/api/v1/nodes/node-a/status" and patch.content_type == "application/merge-patch+json"


def test_no_write_when_unchanged(server: PublishStandIn, writer: NodeCapacityWriter) -> None:
    desired = h100_capacity()
    writer.sync(desired)
    rv = server.obj("nodes", "node-a")["metadata"]["resourceVersion"]  # type: ignore[index]
    assert writer.sync(dict(desired)) is False
    assert patches(server) == 1
    assert server.obj("nodes", "node-a")["metadata"]["resourceVersion"] == rv  # type: ignore[index]


def test_values_are_compared_as_quantities(server: PublishStandIn, writer: NodeCapacityWriter) -> None:
    """The API server canonicalises 12800000 as 12800k: that is no change."""

    def canonical(node: dict[str, Any]) -> dict[str, Any]:
        for name in ("capacity", "allocatable"):
            node["status"][name]["nvidia.com/gpu.sliced.units"] = "12800k"
        return node

    desired = h100_capacity()
    writer.sync(desired)
    server.write_object("nodes", "", "node-a", canonical, status=True, status_subresource=True)
    assert writer.sync(desired) is False and patches(server) == 1


def test_an_accelerator_gone_takes_its_budget_and_a_manufacturer_gone_its_keys(
    server: PublishStandIn, writer: NodeCapacityWriter
) -> None:
    writer.sync(h100_capacity())
    assert writer.sync(h100_capacity(cards=6)) is True
    assert status(server)["allocatable"]["nvidia.com/gpu.sliced.units"] == str(6 * 1_600_000)
    assert status(server)["capacity"]["nvidia.com/gpu.sliced.memory-mib"] == str(6 * 81559)
    assert writer.sync({}) is True
    for name in ("capacity", "allocatable"):
        assert status(server)[name] == KUBELET  # ours all gone, the kubelet's kept


def test_a_kubelet_that_zeroed_our_keys_gets_them_back(server: PublishStandIn, writer: NodeCapacityWriter) -> None:
    """A re-registering kubelet zeroes extended resources it does not serve; the next sync repairs it."""
    desired = h100_capacity()
    writer.sync(desired)

    def zero(node: dict[str, Any]) -> dict[str, Any]:
        for key in desired:
            node["status"]["capacity"][key] = "0"
            node["status"]["allocatable"][key] = "0"
        return node

    server.write_object("nodes", "", "node-a", zero, status=True, status_subresource=True)
    assert writer.sync(desired) is True
    assert {k: status(server)["capacity"][k] for k in desired} == desired


def test_keys_of_a_base_we_do_not_own_are_left_alone(server: PublishStandIn, writer: NodeCapacityWriter) -> None:
    def other(node: dict[str, Any]) -> dict[str, Any]:
        node["status"]["capacity"]["amd.com/gpu.sliced.units"] = "1600k"
        node["status"]["capacity"]["example.com/dongle"] = "4"
        return node

    server.write_object("nodes", "", "node-a", other, status=True, status_subresource=True)
    writer.sync({})
    assert status(server)["capacity"]["amd.com/gpu.sliced.units"] == "1600k"
    assert status(server)["capacity"]["example.com/dongle"] == "4"
    assert patches(server) == 0


def test_a_key_that_is_not_a_capacity_key_is_refused(writer: NodeCapacityWriter) -> None:
    with pytest.raises(ValueError, match=r"nvidia\.com/gpu\.shared is not a capacity key"):
        writer.sync({"nvidia.com/gpu.shared": "10"})


def test_errors_are_named_and_leave_the_state_for_the_next_call(
    server: PublishStandIn, writer: NodeCapacityWriter
) -> None:
    server.fail(503, count=1, when=lambda r: r.method == "PATCH")
    desired = h100_capacity()
    with pytest.raises(
        KubeRequestError, match=r"PATCH /api/v1/nodes/node-a/status at http://127\.0\.0\.1:\d+: HTTP 503"
    ):
        writer.sync(desired)
    assert writer.written is None
    assert writer.sync(desired) is True  # the next period retries
    missing = NodeCapacityWriter(make_api_client(None, server.url), "node-b", BASES, timeout=5)
    with pytest.raises(KubeRequestError, match='HTTP 404: nodes "node-b" not found') as err:
        missing.sync(desired)
    assert err.value.status == 404


def test_an_unreachable_server_fails_within_the_timeout() -> None:
    with PublishStandIn() as gone:
        url = gone.url
    writer = NodeCapacityWriter(make_api_client(None, url), "node-a", BASES, timeout=2)
    with pytest.raises(KubeRequestError) as err:
        writer.sync({})
    assert err.value.status == 0 and "GET /api/v1/nodes/node-a" in str(err.value)


QUANTITY = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(str),
    st.sampled_from(["1600k", "1Gi", "0", "12800k", "1e3", "garbage", "", "-1"]),
    st.text(max_size=8),
)
KEY = st.one_of(
    st.sampled_from(
        [
            "cpu",
            "nvidia.com/gpu",
            "nvidia.com/gpu.sliced",
            "nvidia.com/gpu.sliced.units",
            "nvidia.com/gpu.sliced.memory-mib",
            "nvidia.com/gpu.partitioned.mig-1g.10gb",
            "hygon.com/dcu.partitioned.units",
            "amd.com/gpu.sliced.units",
        ]
    ),
    st.text(max_size=30),
)
OURS = st.sampled_from(
    [
        "nvidia.com/gpu.sliced.units",
        "nvidia.com/gpu.sliced.cores-percentage",
        "nvidia.com/gpu.partitioned.mig-3g.40gb",
        "hygon.com/dcu.partitioned.units",
    ]
)


@given(
    current=st.dictionaries(KEY, QUANTITY, max_size=10),
    allocatable=st.one_of(st.none(), st.dictionaries(KEY, QUANTITY, max_size=5), st.just("not a map")),
    desired=st.dictionaries(OURS, st.integers(min_value=0, max_value=10**8).map(str), max_size=4),
)
def test_the_patch_converges_and_touches_only_our_keys(
    current: dict[str, str], allocatable: Any, desired: dict[str, str]
) -> None:
    """Whatever the Node answers (garbage quantities, a missing or malformed map): one patch makes our
    keys exactly ``desired`` in both maps, a second finds nothing to change, others' keys never move."""
    node: dict[str, Any] = {"status": {"capacity": current}}
    if allocatable is not None:
        node["status"]["allocatable"] = allocatable
    patch = capacity_patch(node, desired, BASES)
    after = merge_patch(node, patch) if patch is not None else node
    for name in ("capacity", "allocatable"):
        held = after["status"].get(name)
        held = held if isinstance(held, dict) else {}
        before = node["status"].get(name)
        before = before if isinstance(before, dict) else {}
        assert {k: v for k, v in held.items() if is_capacity_key(k, BASES)} == desired
        assert {k: v for k, v in held.items() if not is_capacity_key(k, BASES)} == {
            k: v for k, v in before.items() if not is_capacity_key(k, BASES)
        }
    assert capacity_patch(after, desired, BASES) is None
