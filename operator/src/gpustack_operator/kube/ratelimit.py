"""The client-side rate limit on every request to the API server: ``--kube-conn-qps`` / ``--kube-conn-burst``.

Supplement §3.5 gives ``serve`` client-go's connection limits (``200``, ``400``); the Python
``kubernetes`` client has no limiter, so this module is client-go's ``flowcontrol`` token bucket
(``NewTokenBucketRateLimiter(qps, burst)`` over ``golang.org/x/time/rate``):

* the bucket holds at most ``burst`` tokens and starts full; it refills at ``qps`` tokens per second;
* every request takes one token before it is sent, and waits for one when none is left -- waiters
  are served in the order they asked (a reservation, as ``rate.Limiter.Wait``), never starved;
* a watch is one request, counted when it is opened (its events are one response);
* a request with a timeout never waits past it: if its token would come later than the timeout it
  fails at once, without taking the token (``rate: Wait(n=1) would exceed context deadline``), as
  :class:`RateLimitTimeoutError` -- a ``urllib3`` timeout, so every caller already treats it as one --
  whose message names the rate limit. The time spent waiting comes out of the request's own timeout:
  the caller's timeout stays the whole budget.

Every request of the Device Manager goes through ``ApiClient.call_api`` (the pod list and watch,
``kube/pods.py`` and ``kube/podwatch.py``; the annotation patch, ``kube/annotations.py``; the node
status and the published objects, ``kube/rest.py``; the generated API classes too), so
:class:`RateLimitedApiClient` -- what :func:`~gpustack_operator.kube.pods.make_api_client` returns --
takes the token there. The clock is monotonic and injectable; the bucket is thread-safe.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes.client
import urllib3

DEFAULT_QPS = 200.0  # --kube-conn-qps (supplement §3.5)
DEFAULT_BURST = 400  # --kube-conn-burst
MIN_REMAINING = 0.001  # what is left of a timeout after the wait: never 0, which the client reads as "none"


class RateLimitTimeoutError(urllib3.exceptions.TimeoutError):
    """No token within the request's timeout (a timeout, named as the rate limit)."""


def _check(qps: object, burst: object) -> tuple[float, int]:
    """``qps`` a finite number > 0, ``burst`` a whole number >= 1; raises :class:`ValueError` naming it."""
    if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not math.isfinite(qps) or qps <= 0:
        raise ValueError(f"the API-server request rate (qps) {qps!r} must be a number above 0")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ValueError(f"the API-server request burst {burst!r} must be a whole number of at least 1")
    return float(qps), burst


class TokenBucket:
    """client-go's token bucket (see the module docstring). ``clock`` is monotonic seconds, ``sleep``
    waits that many seconds (both injectable for tests)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps, self.burst = _check(qps, burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)  # may go below 0: tokens reserved by waiters
        self._last = clock()
        self.waited = 0.0  # total seconds requests waited for a token (diagnostics)

    def _advance(self, now: float) -> None:
        """Refill for the time since the last look, at most up to ``burst`` (``rate.Limiter.advance``)."""
        elapsed = max(0.0, now - self._last)  # a monotonic clock never goes back; guard anyway
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = max(self._last, now)

    def reserve(self, timeout: float | None = None) -> float:
        """Take one token; the seconds the caller must wait before using it (0 when one was left).
        With ``timeout`` (seconds, > 0) a token that would come later is not taken:
        :class:`RateLimitTimeoutError`."""
        with self._lock:
            self._advance(self._clock())
            delay = max(0.0, -(self._tokens - 1.0) / self.qps)
            if timeout is not None and delay > 0 and delay >= timeout:
                raise RateLimitTimeoutError(
                    f"the client rate limit (--kube-conn-qps {self.qps:g}, --kube-conn-burst {self.burst}) gives "
                    f"this request no slot within its {timeout:g}s timeout (the next in {delay:.2f}s)"
                )
            self._tokens -= 1.0
            return delay

    def wait(self, timeout: float | None = None) -> float:
        """:meth:`reserve`, then wait out the delay; the seconds waited."""
        delay = self.reserve(timeout)
        if delay > 0:
            self._sleep(delay)
            with self._lock:
                self.waited += delay
        return delay

    def tokens(self) -> float:
        """The tokens in the bucket now (negative: owed to waiters)."""
        with self._lock:
            self._advance(self._clock())
            return self._tokens


def token_budget(request_timeout: Any) -> float | None:
    """The seconds a request may wait for its token, from the client's ``_request_timeout``: a number is
    the whole request's timeout, a ``(connect, read)`` pair bounds the wait by ``connect`` (the token is
    taken before connecting); none (or 0, which the client reads as none) is unbounded."""
    if isinstance(request_timeout, tuple) and len(request_timeout) == 2:  # (connect, read)
        request_timeout = request_timeout[0]
    if isinstance(request_timeout, bool) or not isinstance(request_timeout, (int, float)) or request_timeout <= 0:
        return None
    return float(request_timeout)


def remaining_timeout(request_timeout: Any, waited: float) -> Any:
    """``request_timeout`` less the ``waited`` seconds, in the same shape (never below
    :data:`MIN_REMAINING`); unchanged when it was none or nothing was waited."""
    if waited <= 0 or token_budget(request_timeout) is None:
        return request_timeout
    if isinstance(request_timeout, tuple):
        connect, read = request_timeout
        return (max(MIN_REMAINING, connect - waited), read)
    return max(MIN_REMAINING, request_timeout - waited)


class RateLimitedApiClient(kubernetes.client.ApiClient):
    """A ``kubernetes.client.ApiClient`` whose every request (``call_api``) first takes a token of
    ``limiter``, within the request's timeout (:func:`token_budget`)."""

    def __init__(self, configuration: kubernetes.client.Configuration, limiter: TokenBucket) -> None:
        super().__init__(configuration=configuration)
        self.limiter = limiter

    def call_api(
        self,
        method: Any,
        url: Any,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        waited = self.limiter.wait(token_budget(_request_timeout))
        return super().call_api(
            method,
            url,
            header_params=header_params,
            body=body,
            post_params=post_params,
            _request_timeout=remaining_timeout(_request_timeout, waited),
        )


__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "RateLimitTimeoutError",
    "RateLimitedApiClient",
    "TokenBucket",
    "remaining_timeout",
    "token_budget",
]
