"""Shared by the worker's tests against the API-server stand-in: no proxy, no in-cluster or kubeconfig
setting of the machine running them may redirect the official client elsewhere."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_proxy_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_POD_NAMESPACE", raising=False)
