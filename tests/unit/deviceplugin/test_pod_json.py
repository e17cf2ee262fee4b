"""kube/pods.py ``pod_from_json``: the watch's reader of Pod objects from the API server. Property
tests (the "ci" hypothesis profile decides how many examples): any JSON is a PodSpec or a
PodParseError naming the field, never another exception; a well-formed Pod keeps what the allocator
reads; and it reads a Pod exactly as the client-model path (``pod_spec``) does."""

from __future__ import annotations

import json
from typing import Any

import kubernetes.client
from gpustack_operator.kube.pods import PodParseError, pod_from_json, pod_spec
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.deviceplugin.test_kube_pods import POD_LIST

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(
    ["metadata", "spec", "status", "uid", "name", "namespace", "containers", "initContainers", "env",
     "resources", "limits", "requests", "phase", "nodeName", "annotations", "creationTimestamp", "value",
     "valueFrom", "deletionTimestamp", "runtimeClassName"]
)  # fmt: skip
pod_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30,
)


@given(st.one_of(json_values, pod_like))
def test_any_json_is_a_pod_or_a_named_refusal(obj: Any) -> None:
    try:
        pod = pod_from_json(obj)
    except PodParseError as exc:
        assert str(exc)
    else:
        assert pod.uid


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
quantities = st.integers(min_value=0, max_value=10_000).map(str)


@given(
    uid=names,
    name=names,
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    containers=st.dictionaries(
        names, st.dictionaries(names.map(lambda n: f"x.io/{n}"), quantities, max_size=3), max_size=4
    ),
    annotation=st.text(max_size=40),
)
def test_a_well_formed_pod_keeps_what_the_allocator_reads(
    uid: str, name: str, phase: str, containers: dict[str, dict[str, str]], annotation: str
) -> None:
    obj = {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": "ns",
            "creationTimestamp": "2025-03-01T10:20:30Z",
            "annotations": {"device.gpustack.ai/accelerator.allocated": annotation},
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": c, "resources": {"limits": limits}} for c, limits in containers.items()],
        },
        "status": {"phase": phase},
    }
    pod = pod_from_json(json.loads(json.dumps(obj)))
    assert (pod.uid, pod.name, pod.namespace, pod.phase, pod.node) == (uid, name, "ns", phase, "node-a")
    assert pod.annotations == {"device.gpustack.ai/accelerator.allocated": annotation}
    assert {c.name: dict(c.resources) for c in pod.containers} == containers
    assert pod.terminal is (phase in ("Succeeded", "Failed"))


def test_it_reads_a_pod_as_the_client_models_do() -> None:
    client = kubernetes.client.ApiClient()
    for item in POD_LIST["items"]:  # type: ignore[index]
        model = client.deserialize(json.dumps(item), "V1Pod", "application/json")
        assert pod_from_json(item) == pod_spec(model)


def test_a_bad_field_is_named() -> None:
    base: dict[str, Any] = {"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "c", "env": "x"}]}}
    try:
        pod_from_json(base)
    except PodParseError as exc:
        assert "spec.containers[0].env" in str(exc)
    else:
        raise AssertionError("a string env was read")


events = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "X"])},
        optional={"object": st.one_of(json_values, pod_like)},
    ),
)


@given(st.lists(events, max_size=8))
def test_any_watch_event_is_applied_or_skipped_never_raised(batch: list[Any]) -> None:
    from gpustack_operator.allocator.pods import PodSpec
    from gpustack_operator.kube.podwatch import PodWatch

    watch = PodWatch(kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:9")), "n")
    watch._synced.set()
    for event in batch:
        watch._apply(event)
    assert all(isinstance(p, PodSpec) and p.uid for p in watch.node_pods())
