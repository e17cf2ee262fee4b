"""The worker's API client: ``--kube-conn-qps`` / ``--kube-conn-burst`` / ``--kube-conn-timeout`` (supplement §3.3),
in ``kube/`` with the rest of the API-server plumbing.

:func:`make_worker_client` builds the client exactly as ``device-manager serve`` does
(``kube/pods.py`` :func:`~gpustack_operator.kube.pods.make_api_client`): every request first takes a token
of a ``qps``/``burst`` bucket (``kube/ratelimit.py``). ``--kube-conn-timeout`` bounds each request the same
way serve bounds its loop's requests (``ManagerOptions.request_timeout``): at most the flag, and at most
:data:`REQUEST_TIMEOUT_CAP` seconds -- a round trip hanging longer would hold the controllers' loop and the
Lease renewal (``--kube-leader-renew-timeout``, 10 s by default) behind it. A watch's long poll keeps its
own read timeout (the server ends the watch); only its connect is bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_operator.kube.pods import make_api_client

if TYPE_CHECKING:
    import kubernetes.client

REQUEST_TIMEOUT_CAP = 10.0  # seconds, as ManagerOptions.request_timeout


def request_timeout(conn_timeout: float) -> float:
    """The per-request bound for ``--kube-conn-timeout`` ``conn_timeout`` seconds."""
    return min(conn_timeout, REQUEST_TIMEOUT_CAP)


def bounded(timeout: Any, seconds: float) -> Any:
    """A call's ``_request_timeout`` bounded by ``seconds``: a number at most ``seconds``; a
    ``(connect, read)`` pair with its connect bounded (the read of a watch is its long poll); none given
    (``None``) becomes ``seconds``."""
    if isinstance(timeout, tuple) and len(timeout) == 2:
        connect, read = timeout
        return (seconds if not _positive(connect) else min(float(connect), seconds), read)
    if _positive(timeout):
        return min(float(timeout), seconds)
    return seconds


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def bound_request_timeouts(client: kubernetes.client.ApiClient, seconds: float) -> kubernetes.client.ApiClient:
    """Make every ``call_api`` of ``client`` bounded by ``seconds`` (see :func:`bounded`); ``client``."""
    call = client.call_api

    def call_api(
        method: Any,
        url: Any,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        return call(
            method,
            url,
            header_params=header_params,
            body=body,
            post_params=post_params,
            _request_timeout=bounded(_request_timeout, seconds),
        )

    client.call_api = call_api  # type: ignore[method-assign]
    return client


def make_worker_client(
    kubeconfig: str | None, server: str | None, *, qps: float, burst: int, conn_timeout: float
) -> kubernetes.client.ApiClient:
    """The rate-limited client with bounded requests (raises ``KubeConfigError`` as ``make_api_client``)."""
    client = make_api_client(kubeconfig, server, qps=qps, burst=burst)
    return bound_request_timeouts(client, request_timeout(conn_timeout))


__all__ = ["REQUEST_TIMEOUT_CAP", "bound_request_timeouts", "bounded", "make_worker_client", "request_timeout"]
