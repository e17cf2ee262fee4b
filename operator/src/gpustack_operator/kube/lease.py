"""Leader election through a ``coordination.k8s.io/v1`` Lease (as client-go's ``leaderelection`` does).

One round (:meth:`LeaseLock.try_acquire_or_renew`) reads the Lease and

* creates it holding it when absent;
* renews it (``renewTime`` now) when we hold it;
* takes it over (``holderIdentity`` us, ``acquireTime`` now, ``leaseTransitions`` + 1) when its holder
  let it expire: ``renewTime + leaseDurationSeconds`` is in the past, or no holder is named;
* else leaves it alone and answers ``False``.

Every write carries the ``resourceVersion`` read, so two candidates racing for one expired Lease
cannot both win: the loser's write is ``409 Conflict`` and it answers ``False``. :meth:`release`
empties ``holderIdentity`` (only while we hold it), so a successor need not wait out the lease.
Times are RFC 3339 with microseconds (``MicroTime``), as the API requires.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import kubernetes.client

from gpustack_operator.kube.rest import CONFLICT, NOT_FOUND, KubeRequestError, request

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def micro_time(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaseLock:
    """One Lease ``namespace/name`` contended for as ``identity`` (see the module docstring)."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: float = 15.0,
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = max(1, round(lease_seconds))
        self.clock = clock
        ns = quote(namespace, safe="")
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        self.path = f"{self.collection}/{quote(name, safe='')}"

    def _read(self) -> dict[str, Any] | None:
        try:
            return request(self.client, "GET", self.path)
        except KubeRequestError as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def try_acquire_or_renew(self) -> bool:
        """One round; ``True`` when we hold the Lease afterwards. Raises ``KubeRequestError`` when the
        API server could not be asked (the caller treats that as not holding it once the lease ran out)."""
        now = self.clock()
        current = self._read()
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": self.lease_seconds,
                    "acquireTime": micro_time(now),
                    "renewTime": micro_time(now),
                    "leaseTransitions": 0,
                },
            }
            return self._write("POST", self.collection, body)
        spec = dict(current.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        if holder != self.identity:
            renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
            duration = spec.get("leaseDurationSeconds")
            seconds = duration if isinstance(duration, int) and duration > 0 else self.lease_seconds
            if holder and renewed is not None and renewed + dt.timedelta(seconds=seconds) > now:
                return False  # held by a live leader
            transitions = spec.get("leaseTransitions")
            spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + 1
            spec["acquireTime"] = micro_time(now)
            spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = self.lease_seconds
        spec["renewTime"] = micro_time(now)
        body = dict(current)
        body["spec"] = spec
        return self._write("PUT", self.path, body)

    def _write(self, method: str, path: str, body: dict[str, Any]) -> bool:
        try:
            request(self.client, method, path, body=body)
        except KubeRequestError as exc:
            if exc.status == CONFLICT:  # another candidate wrote first (or created it): not ours
                return False
            raise
        return True

    def release(self) -> None:
        """Give the Lease up (holder emptied) if we hold it; errors are logged, never raised."""
        try:
            current = self._read()
            spec = dict((current or {}).get("spec") or {})
            if current is None or spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = micro_time(self.clock())
            body = dict(current)
            body["spec"] = spec
            request(self.client, "PUT", self.path, body=body)
            log.info("released the lease %s/%s", self.namespace, self.name)
        except KubeRequestError as exc:
            log.warning("the lease %s/%s could not be released: %s", self.namespace, self.name, exc)


__all__ = ["LeaseLock", "micro_time"]
