"""The API-server stand-in (tests/kube) driven through the official kubernetes client: discovery,
list with selectors, get, create, patch (three content types), update conflicts, delete, watch and
injected failures."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kube.apiserver import (
    APIServerStandIn,
    json_patch,
    label_matcher,
    merge_patch,
    pod_manifest,
    strategic_merge_patch,
)

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture
def api() -> Iterator[APIServerStandIn]:
    with APIServerStandIn() as server:
        yield server


@pytest.fixture
def core(api: APIServerStandIn) -> client.CoreV1Api:
    return api.client()


def seed(api: APIServerStandIn) -> None:
    api.add_pod(pod_manifest("a", node_name="node-a", labels={"app": "x", "tier": "1"}))
    api.add_pod(pod_manifest("b", node_name="node-b", labels={"app": "y"}))
    api.add_pod(pod_manifest("c", namespace="other", node_name="node-a", labels={"app": "x"}))


def test_discovery_through_the_client(api: APIServerStandIn) -> None:
    apis = client.ApiClient(api.configuration())
    assert client.VersionApi(apis).get_code().git_version == "v1.33.0"
    assert client.CoreApi(apis).get_api_versions().versions == ["v1"]
    resources = client.CoreV1Api(apis).get_api_resources().resources
    assert "pods" in [r.name for r in resources]


def test_list_with_field_and_label_selectors(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    seed(api)
    on_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    assert sorted((p.metadata.namespace, p.metadata.name) for p in on_a.items) == [("default", "a"), ("other", "c")]
    assert on_a.metadata.resource_version == str(api._rv)
    assert core.list_namespaced_pod("default", label_selector="app=x").items[0].metadata.name == "a"
    assert [
        p.metadata.name for p in core.list_namespaced_pod("default", label_selector="app in (x,y),!tier").items
    ] == ["b"]
    both = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a,metadata.namespace!=other")
    assert [p.metadata.name for p in both.items] == ["a"]
    assert core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items == []
    req = api.requests[-1]
    assert req.method == "GET" and req.path == "/api/v1/pods" and req.query["fieldSelector"] == "status.phase=Running"


def test_list_items_are_real_pod_json(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    seed(api)
    raw = core.api_client.call_api(
        "GET", f"{api.url}/api/v1/namespaces/default/pods", header_params={"Accept": "application/json"}
    )
    raw.read()
    doc = json.loads(raw.data)
    assert doc["kind"] == "PodList" and doc["apiVersion"] == "v1"
    assert "kind" not in doc["items"][0]  # the server leaves kind/apiVersion off list items
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["items"][0]["metadata"]["creationTimestamp"])


def test_unsupported_field_selector_is_400(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.hostname=x")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == 'field label not supported: "spec.hostname"'


def test_get_and_404(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    stored = api.add_pod(pod_manifest("a", containers=[("main", {"nvidia.com/gpu": "1"})]))
    pod = core.read_namespaced_pod("a", "default")
    assert pod.metadata.uid == stored["metadata"]["uid"] and pod.status.phase == "Pending"
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("missing", "default")
    assert err.value.status == 404 and err.value.reason == "Not Found"
    status = json.loads(err.value.body)
    assert (status["reason"], status["message"], status["code"]) == ("NotFound", 'pods "missing" not found', 404)


def test_create_assigns_identity(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    made = core.create_namespaced_pod("ns1", pod_manifest("p", namespace="ns1"))
    assert made.metadata.uid and made.metadata.resource_version and made.metadata.creation_timestamp.microsecond == 0
    assert api.requests[-1].status == 201
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ns1", pod_manifest("p", namespace="ns1"))
    assert err.value.status == 409 and "AlreadyExists" in err.value.body


def test_patch_annotations_merge_and_strategic(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    api.add_pod(pod_manifest("a", annotations={"keep": "1"}))
    patched = core.patch_namespaced_pod(
        "a", "default", {"metadata": {"annotations": {"x": "y"}}}, _content_type=STRATEGIC
    )
    assert patched.metadata.annotations == {"keep": "1", "x": "y"}
    patched = core.patch_namespaced_pod(
        "a", "default", {"metadata": {"annotations": {"keep": None}}}, _content_type=MERGE
    )
    assert patched.metadata.annotations == {"x": "y"}
    assert api.get("default", "a")["metadata"]["annotations"] == {"x": "y"}  # type: ignore[index]
    assert [r.content_type for r in api.requests if r.method == "PATCH"] == [STRATEGIC, MERGE]


def test_patch_json_patch_and_the_clients_default(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    api.add_pod(pod_manifest("a"))
    ops = [
        {"op": "add", "path": "/metadata/annotations", "value": {"device.gpustack.ai/x": "0"}},
        {"op": "replace", "path": "/metadata/annotations/device.gpustack.ai~1x", "value": "1"},  # RFC 6901 escape
    ]
    assert core.patch_namespaced_pod("a", "default", ops).metadata.annotations == {"device.gpustack.ai/x": "1"}
    assert api.requests[-1].content_type == "application/json-patch+json"
    # a dict body: the client switches to strategic merge by itself
    core.patch_namespaced_pod("a", "default", {"metadata": {"annotations": {"x": "y"}}})
    assert api.requests[-1].content_type == STRATEGIC
    assert api.get("default", "a")["metadata"]["annotations"] == {"device.gpustack.ai/x": "1", "x": "y"}  # type: ignore[index]
    # an object sent as json-patch (another client) is refused as by the real server
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    conn.request(
        "PATCH",
        "/api/v1/namespaces/default/pods/a",
        body=json.dumps({"metadata": {}}),
        headers={"Content-Type": "application/json-patch+json"},
    )
    resp = conn.getresponse()
    assert resp.status == 400 and "jsonpatch.Patch" in json.loads(resp.read())["message"]
    conn.request("PATCH", "/api/v1/namespaces/default/pods/a", body="{}", headers={"Content-Type": "text/plain"})
    resp = conn.getresponse()
    assert resp.status == 415 and json.loads(resp.read())["reason"] == "UnsupportedMediaType"
    conn.close()


def test_patch_with_stale_resource_version_conflicts(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    stored = api.add_pod(pod_manifest("a"))
    rv = stored["metadata"]["resourceVersion"]
    body = {"metadata": {"resourceVersion": rv, "annotations": {"a": "1"}}}
    core.patch_namespaced_pod("a", "default", body, _content_type=MERGE)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("a", "default", body, _content_type=MERGE)
    assert err.value.status == 409 and "the object has been modified" in err.value.body


def test_put_conflicts_on_stale_resource_version(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    api.add_pod(pod_manifest("a"))
    pod = core.read_namespaced_pod("a", "default")
    pod.metadata.labels = {"v": "1"}
    updated = core.replace_namespaced_pod("a", "default", pod)
    assert updated.metadata.labels == {"v": "1"}
    assert int(updated.metadata.resource_version) > int(pod.metadata.resource_version)
    pod.metadata.labels = {"v": "2"}  # still the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("a", "default", pod)
    assert err.value.status == 409 and err.value.reason == "Conflict"
    assert api.get("default", "a")["metadata"]["labels"] == {"v": "1"}  # type: ignore[index]


def test_status_subresource_and_phase_helper(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    api.add_pod(pod_manifest("a"))
    core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}}, _content_type=MERGE)
    assert core.read_namespaced_pod("a", "default").status.phase == "Running"
    # the main resource ignores status
    core.patch_namespaced_pod("a", "default", {"status": {"phase": "Failed"}}, _content_type=MERGE)
    assert core.read_namespaced_pod("a", "default").status.phase == "Running"
    api.set_phase("default", "a", "Succeeded")
    assert core.list_pod_for_all_namespaces(field_selector="status.phase=Succeeded").items[0].metadata.name == "a"


def test_delete(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    api.add_pod(pod_manifest("a"))
    api.add_pod(pod_manifest("b"))
    core.delete_namespaced_pod("a", "default")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["b"]
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("a", "default")
    assert err.value.status == 404
    graceful = api.delete("default", "b", graceful=True)
    assert graceful is not None and graceful["metadata"]["deletionTimestamp"]
    assert core.read_namespaced_pod("b", "default").metadata.deletion_timestamp is not None
    assert api.delete("default", "zzz") is None


def test_request_log_counts_round_trips(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    seed(api)
    before = api.count()
    for _ in range(3):
        core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    core.read_namespaced_pod("a", "default")
    assert api.count() - before == 4
    assert api.count("GET", "/api/v1/pods") == 3
    assert api.count("GET", "/api/v1/namespaces/default/pods/a") == 1


def test_injected_failures(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    seed(api)
    api.fail(503, count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.list_pod_for_all_namespaces()
        assert err.value.status == 503
    assert len(core.list_pod_for_all_namespaces().items) == 3
    api.fail(500, count=-1, when=lambda r: r.method == "PATCH", reason="InternalError")
    with pytest.raises(ApiException):
        core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"z": "1"}}}, _content_type=MERGE)
    assert core.read_namespaced_pod("a", "default").metadata.labels == {"app": "x", "tier": "1"}
    api.heal()
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"z": "1"}}}, _content_type=MERGE)


def test_a_closed_server_refuses_connections(api: APIServerStandIn) -> None:
    core = api.client()
    api.close()
    with pytest.raises(Exception, match=r"(?i)refused|connection"):
        core.list_pod_for_all_namespaces(_request_timeout=2)


def test_watch_streams_events_after_a_resource_version(api: APIServerStandIn, core: client.CoreV1Api) -> None:
    seed(api)
    listed = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    got: list[tuple[str, str]] = []

    def consume() -> None:
        w = watch.Watch()
        for event in w.stream(
            core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=node-a",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ):
            got.append((event["type"], event["object"].metadata.name))
            if len(got) == 3:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    api.add_pod(pod_manifest("d", node_name="node-a"))
    api.add_pod(pod_manifest("elsewhere", node_name="node-b"))
    api.set_phase("default", "a", "Running")
    api.delete("default", "d")
    t.join(10)
    assert got == [("ADDED", "d"), ("MODIFIED", "a"), ("DELETED", "d")]


def test_watch_without_resource_version_starts_with_the_current_pods(
    api: APIServerStandIn, core: client.CoreV1Api
) -> None:
    seed(api)
    events = list(watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


# --- the patch functions themselves ------------------------------------------------------------------


def test_merge_patch_rfc7386() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }


def test_strategic_merge_merges_named_lists_and_directives() -> None:
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    out = strategic_merge_patch(
        pod, {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}, {"name": "c"}]}}
    )
    assert out == {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "c"}]}}
    assert strategic_merge_patch({"m": {"x": 1, "y": 2}}, {"m": {"$patch": "replace", "z": 3}}) == {"m": {"z": 3}}


def test_json_patch_operations_and_errors() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "replace", "path": "/b/c", "value": 2},
            {"op": "test", "path": "/b/c", "value": 2},
            {"op": "copy", "from": "/b", "path": "/d"},
            {"op": "move", "from": "/d/c", "path": "/e"},
            {"op": "remove", "path": "/a/0"},
        ],
    )
    assert out == {"a": [2, 3], "b": {"c": 2}, "d": {}, "e": 2}
    assert doc == {"a": [1, 2], "b": {"c": 1}}  # the input is not changed
    from tests.kube.apiserver import ApiError

    for ops, code in [
        ([{"op": "remove", "path": "/zz"}], 400),
        ([{"op": "test", "path": "/b/c", "value": 9}], 422),
        ([{"op": "frob", "path": "/b"}], 400),
        ([{"path": "/b"}], 400),
        ({"op": "add"}, 400),
    ]:
        with pytest.raises(ApiError) as err:
            json_patch(doc, ops)
        assert err.value.code == code


@pytest.mark.parametrize(
    ("selector", "labels", "ok"),
    [
        ("app=x", {"app": "x"}, True),
        ("app==x", {"app": "y"}, False),
        ("app!=x", {}, True),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("app in (x, y),tier notin (1)", {"app": "y", "tier": "2"}, True),
        ("app in (x, y),tier notin (1)", {"app": "y", "tier": "1"}, False),
        ("", {}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], ok: bool) -> None:
    assert label_matcher(selector)({"metadata": {"labels": labels}}) is ok
