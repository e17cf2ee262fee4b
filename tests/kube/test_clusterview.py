"""kube/clusterview.py against the API-server stand-in (tests/kube/routes_publish.py, the Devices CRD
schema enforced): the four reads, absence (404) told from failure (named), the Device Manager's Pods
picked out of the node's, and -- end to end -- what the real Publisher writes for a detection agrees
with that detection's facts under verify.compare, and a card gone from the host is named."""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gpustack_operator import api
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import (
    ClusterConfigError,
    make_client,
    read_cluster_view,
    read_cluster_views,
)
from gpustack_operator.kube.publish import Publisher
from gpustack_operator.verify import compare

from tests.conftest import host
from tests.kube.apiserver import pod_manifest
from tests.kube.routes_publish import PublishStandIn

NS = "gpustack-system"
DS = "gpustack-operator-device-manager-nvidia"


@pytest.fixture(autouse=True)
def no_proxy_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)


@functools.cache
def detection(fixture: str = "mixed-nvidia-mellanox") -> tuple[Any, dict[str, Any]]:
    """The detection and its facts document, computed once before a stand-in thread runs."""
    req = api.make_request(str(host(fixture)), ["nvidia"])
    return api.run_detect(req), api.facts(req)


def dm_pod(name: str, node: str, *, owner: str = DS, phase: str = "Running", ready: bool = True) -> dict[str, Any]:
    pod = pod_manifest(name, namespace=NS, node_name=node)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner, "uid": "u"}]
    pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return pod


@pytest.fixture
def server() -> Iterator[PublishStandIn]:
    detection()
    with PublishStandIn(schema=crds.openapi_schema()) as stand_in:
        stand_in.add_node("node-a", capacity={"nvidia.com/gpu": "4", "cpu": "64"})
        yield stand_in


def publish(server: PublishStandIn) -> None:
    result, _facts = detection()
    publisher = Publisher(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert all(o.value == "wrote" for o in publisher.publish(result.groups, result.interfaces, []))


def test_what_the_publisher_wrote_agrees_with_the_facts(server: PublishStandIn) -> None:
    publish(server)
    server.add_pod(dm_pod("gpustack-operator-device-manager-nvidia-abcde", "node-a"))
    server.add_pod(pod_manifest("someone-else", namespace="default", node_name="node-a"))
    server.add_pod(dm_pod("gpustack-operator-device-manager-nvidia-zzzzz", "node-b"))
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert view.errors == {} and view.absent == []
    assert view.allocatable == {"nvidia.com/gpu": "4", "cpu": "64"}
    assert [p.name for p in view.pods or []] == ["gpustack-operator-device-manager-nvidia-abcde"]
    assert view.devices_groups and len(view.devices_groups[0]["accelerators"]) == 4
    assert (
        view.node_feature_labels and "acceleratable.feature.gpustack.ai/nvidia-l40s.count" in view.node_feature_labels
    )
    _result, facts = detection()
    assert compare(facts, view) == []
    # the pods are read once, by node, across every namespace
    (listed,) = [r for r in server.requests if r.path == "/api/v1/pods"]
    assert listed.query["fieldSelector"] == "spec.nodeName=node-a"


def test_a_card_fallen_off_the_host_is_named_by_id(server: PublishStandIn) -> None:
    publish(server)
    server.add_pod(dm_pod("gpustack-operator-device-manager-nvidia-abcde", "node-a"))
    _result, facts = detection()
    facts = copy.deepcopy(facts)
    group = facts["groups"][0]
    lost = group["accelerators"].pop()["id"]
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    lines = [d.text for d in compare(facts, view)]
    assert f"Devices advertises {lost} (nvidia {group['id']}) the host no longer has" in lines
    assert "allocatable nvidia.com/gpu 4, the host has 3" in lines


def test_nothing_published_and_no_pod(server: PublishStandIn) -> None:
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert view.absent == ["NodeFeature", "Devices"] and view.errors == {}
    assert view.node_feature_labels is None and view.devices_groups is None and view.pods == []
    _result, facts = detection()
    lines = [d.text for d in compare(facts, view)]
    assert lines == [
        "no NodeFeature node-a-gpustack-device-manager for a node with 4 accelerators",
        "no Devices node-a for a node with 4 accelerators",
        f"no device-manager pod (DaemonSet {DS}) on a node with 4 nvidia accelerators",
    ]


def test_a_node_not_in_the_cluster(server: PublishStandIn) -> None:
    view = read_cluster_view(make_client(server=server.url), "node-x", namespace=NS, timeout=5)
    assert view.absent == ["Node", "NodeFeature", "Devices"]
    _result, facts = detection()
    assert next(d.text for d in compare(facts, view)) == "node node-x is not in the cluster (no Node object)"


def test_failures_are_named_per_part_never_raised(server: PublishStandIn) -> None:
    server.fail(403, reason="Forbidden", when=lambda r: r.path.startswith("/api/v1/nodes"))
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert set(view.errors) == {"Node"}
    assert "GET /api/v1/nodes/node-a at http://127.0.0.1:" in view.errors["Node"]
    assert "HTTP 403" in view.errors["Node"]
    assert view.allocatable is None and "Node" not in view.absent


def test_an_api_server_that_does_not_answer() -> None:
    view = read_cluster_view(make_client(server="http://127.0.0.1:9"), "node-a", namespace=NS, timeout=2)
    assert set(view.errors) == {"Node", "NodeFeature", "Devices", "Pods"}
    assert all("127.0.0.1:9" in e for e in view.errors.values())


def test_a_pod_not_ready_and_one_named_but_unowned(server: PublishStandIn) -> None:
    server.add_pod(dm_pod("gpustack-operator-device-manager-nvidia-abcde", "node-a", phase="Pending", ready=False))
    unowned = pod_manifest("gpustack-operator-device-manager-amd-q", namespace=NS, node_name="node-a")
    server.add_pod(unowned)
    server.add_pod(dm_pod("other-x", "node-a", owner="node-exporter"))
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert [(p.name, p.daemonset, p.phase, p.ready) for p in view.pods or []] == [
        ("gpustack-operator-device-manager-amd-q", "", "Pending", False),
        ("gpustack-operator-device-manager-nvidia-abcde", DS, "Pending", False),
    ]


def test_many_nodes_are_read_at_once_each_view_as_if_read_alone(server: PublishStandIn) -> None:
    """verify reads every node of the play: several at a time (a slow API server costs its latency once
    per batch, not once per read), each node's view exactly what reading it alone gives, in order."""
    publish(server)
    server.add_pod(dm_pod("gpustack-operator-device-manager-nvidia-abcde", "node-a"))
    nodes = ["node-a", *(f"node-{i}" for i in range(7)), "node-x"]  # node-x: not in the cluster
    for node in nodes[1:-1]:
        server.add_node(node, capacity={"cpu": "8"})
    server.fail(403, reason="Forbidden", count=-1, when=lambda r: r.path == "/api/v1/nodes/node-3")
    client = make_client(server=server.url)
    alone = [read_cluster_view(client, node, namespace=NS, timeout=5) for node in nodes]
    server.stall(0.5, when=lambda r: r.path.startswith("/api/v1/nodes/"))
    started = time.perf_counter()
    views = read_cluster_views(client, nodes, namespace=NS, timeout=5)
    took = time.perf_counter() - started
    assert views == alone
    assert [v.node for v in views] == nodes
    assert set(views[4].errors) == {"Node"} and "HTTP 403" in views[4].errors["Node"]
    assert all(not v.errors for i, v in enumerate(views) if i != 4)
    assert views[-1].absent == ["Node", "NodeFeature", "Devices"]
    # nine Node reads stalled 0.5 s each: 4.5 s one after another, two batches of at most eight at once
    assert took < 3.0, took


def test_one_node_at_a_time_when_the_client_pools_one_connection(server: PublishStandIn) -> None:
    """Never more nodes at once than the client keeps connections (none opened only to be discarded)."""
    client = make_client(server=server.url)
    client.configuration.connection_pool_maxsize = 1
    server.add_node("node-b", capacity={"cpu": "8"})
    server.stall(0.4, when=lambda r: r.path.startswith("/api/v1/nodes/"))
    started = time.perf_counter()
    views = read_cluster_views(client, ["node-a", "node-b"], namespace=NS, timeout=5)
    assert time.perf_counter() - started >= 0.8  # the two stalled Node reads one after the other
    assert [(v.node, v.absent, v.errors) for v in views] == [
        ("node-a", ["NodeFeature", "Devices"], {}),
        ("node-b", ["NodeFeature", "Devices"], {}),
    ]
    assert read_cluster_views(client, [], namespace=NS, timeout=5) == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"server": "127.0.0.1:6443"}, "api_server '127.0.0.1:6443' is not a URL"),
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig /nonexistent/kubeconfig is not a regular file"),
    ],
)
def test_a_bad_connection_is_one_clear_error(kwargs: dict[str, str], words: str) -> None:
    with pytest.raises(ClusterConfigError) as info:
        make_client(**kwargs)
    assert words in str(info.value)


def test_a_kubeconfig_that_is_not_one(tmp_path: Any) -> None:
    bad = tmp_path / "config"
    bad.write_text("- just a list\n")
    with pytest.raises(ClusterConfigError) as info:
        make_client(str(bad))
    assert str(info.value).startswith(f"the API-server configuration could not be loaded from kubeconfig {bad}: ")


def test_a_kubeconfig_context_is_honoured(tmp_path: Any) -> None:
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters:\n- name: a\n  cluster: {server: 'http://127.0.0.1:1'}\n"
        "- name: b\n  cluster: {server: 'http://127.0.0.1:2'}\n"
        "users:\n- name: u\n  user: {token: t}\n"
        "contexts:\n- name: a\n  context: {cluster: a, user: u}\n- name: b\n  context: {cluster: b, user: u}\n"
    )
    assert make_client(str(config)).configuration.host == "http://127.0.0.1:1"
    assert make_client(str(config), "b").configuration.host == "http://127.0.0.1:2"
    with pytest.raises(ClusterConfigError) as info:
        make_client(str(config), "c")
    assert "c" in str(info.value)


def test_a_pod_the_chart_labelled_is_recognised_whatever_its_daemonset_is_called(server: PublishStandIn) -> None:
    """fullnameOverride renames the DaemonSet (acme-device-manager-nvidia); the chart's labels still say
    whose Device Manager the Pod is."""
    pod = dm_pod("acme-device-manager-nvidia-x1", "node-a", owner="acme-device-manager-nvidia")
    pod["metadata"]["labels"] = {
        "app.kubernetes.io/name": "gpustack-operator",
        "app.kubernetes.io/component": "device-manager-nvidia",
        "gpustack.ai/manufacturer": "nvidia",
    }
    server.add_pod(pod)
    publish(server)
    view = read_cluster_view(make_client(server=server.url), "node-a", namespace=NS, timeout=5)
    assert [(p.name, p.manufacturer, p.ready) for p in view.pods or []] == [
        ("acme-device-manager-nvidia-x1", "nvidia", True)
    ]
    _result, facts = detection()
    assert compare(facts, view) == []
