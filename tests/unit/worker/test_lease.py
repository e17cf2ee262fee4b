"""kube/lease.py and worker/leader.py: the Lease lock and the elector over it, against the stand-in."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import kubernetes.client
import pytest
from gpustack_operator.kube.lease import LeaseLock
from gpustack_operator.worker.leader import Elector

from tests.unit.worker.standin import WorkerStandIn

NS = "gpustack-system"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


def lock(api: WorkerStandIn, who: str, clock: Clock) -> LeaseLock:
    client = kubernetes.client.ApiClient(api.configuration())
    return LeaseLock(client, NS, "worker.gpustack.ai", who, lease_seconds=15, clock=clock)


def spec(api: WorkerStandIn) -> dict[str, object]:
    lease = api.obj("leases", "worker.gpustack.ai", NS)
    assert lease is not None
    return dict(lease["spec"])


def test_acquire_renew_block_expire_release(api: WorkerStandIn) -> None:
    clock = Clock()
    a, b = lock(api, "a", clock), lock(api, "b", clock)
    assert a.try_acquire_or_renew()
    assert spec(api)["holderIdentity"] == "a" and spec(api)["leaseTransitions"] == 0
    assert spec(api)["renewTime"] == "2026-01-01T00:00:00.000000Z"
    assert not b.try_acquire_or_renew()  # held by a live leader
    clock.now = T0 + dt.timedelta(seconds=10)
    assert a.try_acquire_or_renew()  # renewed
    assert spec(api)["renewTime"] == "2026-01-01T00:00:10.000000Z"
    clock.now = T0 + dt.timedelta(seconds=24)
    assert not b.try_acquire_or_renew()  # 10 + 15 > 24: still held
    clock.now = T0 + dt.timedelta(seconds=26)
    assert b.try_acquire_or_renew()  # expired: taken over
    assert spec(api)["holderIdentity"] == "b" and spec(api)["leaseTransitions"] == 1
    a.release()  # not ours any more: nothing changes
    assert spec(api)["holderIdentity"] == "b"
    b.release()
    assert spec(api)["holderIdentity"] == ""
    assert a.try_acquire_or_renew()  # a released lease is free at once


def test_two_candidates_racing_cannot_both_win(api: WorkerStandIn) -> None:
    clock = Clock()
    a, b = lock(api, "a", clock), lock(api, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now = T0 + dt.timedelta(minutes=1)
    stale = api.obj("leases", "worker.gpustack.ai", NS)
    assert b.try_acquire_or_renew()
    # a write carrying the version read before b's takeover is a 409: the loser answers False
    api.fail(409, count=1, when=lambda r: r.method == "PUT", reason="Conflict")
    assert not a.try_acquire_or_renew()
    assert stale is not None and spec(api)["holderIdentity"] == "b"


def test_elector_keeps_leading_through_a_blip_and_drops_after_the_deadline(api: WorkerStandIn) -> None:
    now = [100.0]
    elector = Elector(lock(api, "a", Clock()), renew_deadline=10.0, retry_period=2.0, clock=lambda: now[0])
    assert elector.tick()
    api.fail(503, count=-1)
    now[0] = 105.0
    assert elector.tick()  # failing for 5 s < 10 s: still leading
    now[0] = 111.0
    assert not elector.tick()  # not renewed within the deadline
    api.heal()
    now[0] = 114.0
    assert elector.tick()


def test_elector_without_a_lock_always_leads() -> None:
    assert Elector(None).tick()
