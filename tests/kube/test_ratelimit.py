"""kube/ratelimit.py: client-go's token bucket (``--kube-conn-qps`` / ``--kube-conn-burst``, supplement
§3.5) on a fake monotonic clock, and the rate-limited ``ApiClient`` every request goes through.

Every timing here is the fake clock's: the assertions are exact and never depend on the machine."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from gpustack_operator.allocator.pods import AnnotationWriteError, PodSpec, PodsUnavailableError
from gpustack_operator.kube.annotations import AnnotationPatcher
from gpustack_operator.kube.pods import KubeConfigError, NodePods, make_api_client
from gpustack_operator.kube.ratelimit import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    RateLimitedApiClient,
    RateLimitTimeoutError,
    TokenBucket,
    remaining_timeout,
    token_budget,
)
from gpustack_operator.kube.rest import KubeRequestError, request

UNREACHABLE = "http://127.0.0.1:1"  # nothing listens: a request that got past the limiter would fail otherwise


class FakeClock:
    """A monotonic clock that only moves when slept on (or advanced)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def bucket(qps: float, burst: int, clock: FakeClock) -> TokenBucket:
    return TokenBucket(qps, burst, clock=clock, sleep=clock.sleep)


def test_the_burst_goes_at_once_then_one_request_per_qps_interval() -> None:
    clock = FakeClock()
    limiter = bucket(5, 2, clock)
    start = clock.now
    sent = []
    for _ in range(12):
        limiter.wait()
        sent.append(round(clock.now - start, 6))
    assert sent == [0.0, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    assert clock.now - start == pytest.approx((12 - 2) / 5)


def test_waiters_reserve_in_order_and_are_never_starved() -> None:
    """Five requests asking at the same instant (no time passes): the first two go, the others are each
    given the next free slot (rate.Limiter's reservation), not all the same one."""
    clock = FakeClock()
    limiter = bucket(5, 2, clock)
    delays = [limiter.reserve() for _ in range(5)]
    assert delays == pytest.approx([0.0, 0.0, 0.2, 0.4, 0.6])
    assert limiter.tokens() == pytest.approx(-3.0)  # owed to the three waiters


def test_an_idle_bucket_refills_only_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = bucket(5, 2, clock)
    for _ in range(4):
        limiter.wait()
    clock.now += 3600.0  # an hour idle: 18000 tokens' worth, but the bucket holds two
    assert limiter.tokens() == pytest.approx(2.0)
    assert [limiter.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.2])


def test_a_partial_refill_shortens_the_wait() -> None:
    clock = FakeClock()
    limiter = bucket(4, 1, clock)
    limiter.wait()
    clock.now += 0.1  # 0.4 of a token back
    assert limiter.reserve() == pytest.approx(0.15)


def test_a_wait_longer_than_the_timeout_fails_at_once_naming_the_rate_limit_and_takes_no_token() -> None:
    clock = FakeClock()
    limiter = bucket(5, 2, clock)
    limiter.reserve()
    limiter.reserve()
    with pytest.raises(RateLimitTimeoutError) as info:
        limiter.wait(timeout=0.1)
    message = str(info.value)
    assert "rate limit" in message
    assert "--kube-conn-qps 5" in message
    assert "--kube-conn-burst 2" in message
    assert "0.1s timeout" in message
    assert clock.slept == []  # failed at once, never slept
    # the failed request took nothing: the next one is still given the first free slot
    assert limiter.reserve() == pytest.approx(0.2)


def test_a_wait_within_the_timeout_is_taken() -> None:
    clock = FakeClock()
    limiter = bucket(5, 1, clock)
    limiter.wait(timeout=0.01)  # a token is there: no timeout applies however short
    assert limiter.wait(timeout=0.5) == pytest.approx(0.2)
    assert clock.slept == pytest.approx([0.2])
    assert limiter.waited == pytest.approx(0.2)


def test_concurrent_callers_each_get_their_own_slot() -> None:
    """Eight threads reserving 50 tokens each at one frozen instant: the slots handed out are exactly
    the sequential ones -- no two callers share a token, none is lost (the lock)."""
    clock = FakeClock()
    limiter = bucket(10, 3, clock)
    delays: list[float] = []
    guard = threading.Lock()
    go = threading.Barrier(8)

    def take() -> None:
        go.wait()
        mine = [limiter.reserve() for _ in range(50)]
        with guard:
            delays.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    expected = [0.0] * 3 + [n / 10 for n in range(1, 400 - 3 + 1)]
    assert sorted(round(d, 6) for d in delays) == pytest.approx(expected)


@pytest.mark.parametrize("qps", [0, -1, math.nan, math.inf, True, "5", None])
def test_a_bad_rate_is_refused(qps: Any) -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps, 1)


@pytest.mark.parametrize("burst", [0, -3, 1.5, True, "2", None])
def test_a_bad_burst_is_refused(burst: Any) -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5, burst)


def test_make_api_client_refuses_bad_limits_as_a_config_error() -> None:
    with pytest.raises(KubeConfigError, match="qps"):
        make_api_client(None, UNREACHABLE, qps=0)
    with pytest.raises(KubeConfigError, match="burst"):
        make_api_client(None, UNREACHABLE, burst=0)


def test_make_api_client_is_rate_limited_with_the_flags_values_and_defaults() -> None:
    client = make_api_client(None, UNREACHABLE, qps=5, burst=2)
    assert isinstance(client, RateLimitedApiClient)
    assert (client.limiter.qps, client.limiter.burst) == (5.0, 2)
    default = make_api_client(None, UNREACHABLE)
    assert isinstance(default, RateLimitedApiClient)
    assert (default.limiter.qps, default.limiter.burst) == (DEFAULT_QPS, DEFAULT_BURST) == (200.0, 400)


@pytest.mark.parametrize(
    ("timeout", "budget"),
    [(None, None), (0, None), (5, 5.0), (2.5, 2.5), ((1.5, 330), 1.5), ((None, 330), None), ("x", None)],
)
def test_the_token_wait_is_bounded_by_the_whole_or_the_connect_timeout(timeout: Any, budget: float | None) -> None:
    assert token_budget(timeout) == budget


@pytest.mark.parametrize(
    ("timeout", "waited", "left"),
    [(5.0, 0.2, 4.8), ((5.0, 330), 0.2, (4.8, 330)), (None, 0.2, None), (5.0, 0.0, 5.0), (0.2, 0.2, 0.001)],
)
def test_the_wait_comes_out_of_the_requests_timeout(timeout: Any, waited: float, left: Any) -> None:
    assert remaining_timeout(timeout, waited) == pytest.approx(left)


# -- the client: every call_api takes a token --------------------------------------------------------


class Recorded:
    """Stands in for the client's REST layer: records the timeout each request was sent with."""

    def __init__(self) -> None:
        self.timeouts: list[Any] = []

    def request(self, method: str, url: str, **kw: Any) -> Any:
        self.timeouts.append(kw.get("_request_timeout"))
        return "answer"


def limited_client(clock: FakeClock, qps: float, burst: int) -> tuple[RateLimitedApiClient, Recorded]:
    client = make_api_client(None, UNREACHABLE, qps=qps, burst=burst)
    assert isinstance(client, RateLimitedApiClient)
    client.limiter = bucket(qps, burst, clock)
    rest = Recorded()
    client.rest_client = rest  # type: ignore[assignment]
    return client, rest


def test_call_api_waits_for_a_token_and_sends_with_what_is_left_of_the_timeout() -> None:
    clock = FakeClock()
    client, rest = limited_client(clock, 2, 1)
    assert client.call_api("GET", f"{UNREACHABLE}/a", _request_timeout=5.0) == "answer"
    assert client.call_api("GET", f"{UNREACHABLE}/b", _request_timeout=(5.0, 330)) == "answer"
    assert client.call_api("GET", f"{UNREACHABLE}/c") == "answer"
    assert clock.slept == pytest.approx([0.5, 0.5])
    assert rest.timeouts[0] == 5.0
    assert rest.timeouts[1] == pytest.approx((4.5, 330))
    assert rest.timeouts[2] is None


def test_call_api_that_cannot_get_a_token_in_time_is_never_sent() -> None:
    clock = FakeClock()
    client, rest = limited_client(clock, 2, 1)
    client.call_api("GET", f"{UNREACHABLE}/a", _request_timeout=5.0)
    with pytest.raises(RateLimitTimeoutError, match="rate limit"):
        client.call_api("GET", f"{UNREACHABLE}/b", _request_timeout=0.3)
    assert len(rest.timeouts) == 1
    assert clock.slept == []


# -- the callers: a request refused by the limiter fails like a timeout, named ------------------------


def drained(qps: float = 0.01) -> RateLimitedApiClient:
    """A client whose only token is spent and whose next comes in 100 s (real clock)."""
    client = make_api_client(None, UNREACHABLE, qps=qps, burst=1)
    assert isinstance(client, RateLimitedApiClient)
    client.limiter.reserve()
    return client


def test_the_pod_list_fails_naming_the_rate_limit() -> None:
    with pytest.raises(PodsUnavailableError, match="RateLimitTimeoutError: the client rate limit"):
        NodePods(drained(), "node-a", timeout=0.5).list()


def test_a_rest_round_trip_fails_as_a_transport_error_naming_the_rate_limit() -> None:
    with pytest.raises(KubeRequestError, match="rate limit") as info:
        request(drained(), "GET", "/api/v1/nodes/node-a", timeout=0.5)
    assert info.value.status == 0


def test_the_annotation_patch_fails_naming_the_rate_limit() -> None:
    pod = PodSpec(uid="u1", namespace="ml", name="train-0", created=0.0, phase="Running", node="node-a")
    with pytest.raises(AnnotationWriteError, match="rate limit"):
        AnnotationPatcher(drained(), timeout=0.5).record(pod, "{}")
