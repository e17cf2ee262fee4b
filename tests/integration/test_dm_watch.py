"""The Device Manager's watch-backed pod view end to end (issue 18): ``serve`` in-process against the
kubelet stand-in and the HTTP API-server stand-in; the periodic reconcile is switched off (an hour),
so only the watch's event can explain a release."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gpustack_operator.deviceplugin import serve as dm_serve

from tests.conftest import host
from tests.integration import test_kubelet_e2e as e2e
from tests.integration.test_kubelet_e2e import GPU, NVIDIA_RESOURCES, SHARED, SLICED, Node, accelerators, healthy_on

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
    assert len(plain_lists) == 1, [r.query for r in plain_lists]  # the watch's first sync alone
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
