"""The Device Manager's watch-backed pod view and durable annotation end to end (issue 18): ``serve``
in-process against the kubelet stand-in and the HTTP API-server stand-in. Where a release is asserted
the periodic reconcile is switched off (an hour), so only the watch's event can explain it."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION as ALLOCATED
from gpustack_operator.deviceplugin import serve as dm_serve

from tests.conftest import host
from tests.integration import test_kubelet_e2e as e2e
from tests.integration.test_kubelet_e2e import (
    GPU,
    NV_VIS,
    NVIDIA_RESOURCES,
    SHARED,
    SLICED,
    Node,
    accelerators,
    healthy_on,
)
from tests.kubelet.standin import AdmissionError

# ``kube/annotations.py``: ``from ... import annotations`` would name the __future__ feature
kube_annotations = importlib.import_module("gpustack_operator.kube.annotations")
serve_node = e2e.serve_node  # the fixture: the Device Manager in-process on a fixture node


def test_a_deleted_pods_card_turns_healthy_on_the_watch_event(
    serve_node: Callable[[Path, str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dm_serve, "RECONCILE_PERIOD", 3600.0)
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    uid, grants = node.admit([("main", {GPU: "1"})], name="ex")
    (card,) = accelerators(grants["main"][GPU].device_ids)
    node.kubelet.wait_for(SHARED, lambda d: not any(healthy_on(node, SHARED, card)))
    # Allocate read the watch's cache: no list of the node's pods was made for it
    plain_lists = [r for r in node.api.requests if r.path == "/api/v1/pods" and "watch" not in r.query]
    # the watch's first sync, and at most the one refresh of the miss path when the kubelet (here
    # admitting right after the Pod was created) was ahead of the watch on a loaded machine
    assert len(plain_lists) <= 2, [r.query for r in plain_lists]
    node.gone(uid)
    node.kubelet.wait_capacity(SHARED, 80, timeout=10)
    node.kubelet.wait_for(SLICED, lambda d: all(healthy_on(node, SLICED, card)), timeout=10)


def test_a_finished_pod_stops_charging_on_the_watch_event(
    serve_node: Callable[[Path, str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dm_serve, "RECONCILE_PERIOD", 3600.0)
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    _, grants = node.admit([("main", {GPU: "1"})], name="job")
    (card,) = accelerators(grants["main"][GPU].device_ids)
    node.kubelet.wait_for(SHARED, lambda d: not any(healthy_on(node, SHARED, card)))
    node.api.set_phase("default", "job", "Succeeded")
    node.kubelet.wait_capacity(SHARED, 80, timeout=10)


# -- the durable annotation (a JSON merge patch on the Pod, before Allocate answers) ---------------------


def patches(node: Node) -> list[Any]:
    return [r for r in node.api.requests if r.method == "PATCH"]


def test_the_grant_is_recorded_on_the_pod_before_the_answer(serve_node: Callable[[Path, str], Node]) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    uid, grants = node.admit([("main", {GPU: "2"}), ("sshd", {NV_VIS: "2"})], name="ssh")
    tokens = grants["main"][GPU].device_ids
    stored = node.api.by_uid(uid)
    assert stored is not None
    recorded = json.loads(stored["metadata"]["annotations"][ALLOCATED])
    recorded["main"]["accelerators"].sort()  # in the cards' index order
    assert recorded == {
        "main": {
            "manufacturer": "nvidia",
            "mode": "exclusive",
            "accelerators": sorted(accelerators(tokens)),
            "devices": tokens,
            "units": 0,
        }
    }  # the sidecar's visibility grant is derived from main's, never recorded
    (patch,) = patches(node)
    assert patch.content_type == "application/merge-patch+json"
    assert patch.path == "/api/v1/namespaces/default/pods/ssh"
    assert patch.body == {
        "metadata": {"uid": uid, "annotations": {ALLOCATED: stored["metadata"]["annotations"][ALLOCATED]}}
    }


def test_a_failed_patch_refuses_naming_the_error_and_gives_the_card_back(
    serve_node: Callable[[Path, str], Node],
) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    node.api.fail(500, count=1, when=lambda r: r.method == "PATCH", reason="InternalError")
    token = sorted(node.kubelet.healthy(GPU))[0]
    with pytest.raises(AdmissionError) as err:
        node.admit([("main", {GPU: "1"})], name="first", force={"main": {GPU: [token]}})
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert "HTTP 500" in err.value.details and node.api.url in err.value.details
    assert "given back" in err.value.details
    # nothing is held: the card was given back before the refusal (the ledger), and the stream that
    # turned its other tokens Unhealthy for the reservation turns them Healthy again (delivered to the
    # kubelet asynchronously, so waited for); a second Allocate takes the card
    node.kubelet.wait_capacity(SHARED, 80, timeout=10)
    uid, grants = node.admit([("main", {GPU: "1"})], name="second", force={"main": {GPU: [token]}})
    assert grants["main"][GPU].device_ids == [token]
    stored = node.api.by_uid(uid)
    assert stored is not None and ALLOCATED in stored["metadata"]["annotations"]


def test_a_stalled_patch_is_refused_within_its_timeout(
    serve_node: Callable[[Path, str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_annotations, "PATCH_TIMEOUT", 0.5)
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    node.api.stall(30.0, when=lambda r: r.method == "PATCH")
    with pytest.raises(AdmissionError) as err:
        node.admit([("main", {GPU: "1"})], name="slow")
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    assert "timed out" in err.value.details.lower() or "timeout" in err.value.details.lower(), err.value.details
    node.api.heal()
    node.kubelet.wait_capacity(SHARED, 80, timeout=10)
