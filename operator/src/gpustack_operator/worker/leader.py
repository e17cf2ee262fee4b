"""Controller (d): leader election -- the controllers act only while this replica holds the Lease.

:class:`Elector` drives a :class:`~gpustack_operator.kube.lease.LeaseLock` the way client-go's
``leaderelection`` does: every ``retry_period`` it tries to acquire (or, leading, renew) the Lease of
``lease_duration``; leading, it keeps leading while renewals fail for less than ``renew_deadline``
(an API server that blinks does not flap leadership) and stops at once when another holder is found.
Without a lock (``--kube-leader-election=false``) it always leads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpustack_operator.kube.lease import LeaseLock
from gpustack_operator.kube.rest import KubeRequestError

log = logging.getLogger(__name__)


class Elector:
    def __init__(
        self,
        lock: LeaseLock | None,
        *,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = lock
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.leading = lock is None
        self._last_renew = 0.0
        self._next_try = 0.0

    def due_in(self) -> float:
        """Seconds until the next round is due (0: now)."""
        return 0.0 if self.lock is None else max(0.0, self._next_try - self.clock())

    def tick(self) -> bool:
        """One round when due; whether this replica leads afterwards."""
        if self.lock is None:
            return True
        now = self.clock()
        if now < self._next_try:
            return self.leading
        self._next_try = now + self.retry_period
        try:
            held = self.lock.try_acquire_or_renew()
        except KubeRequestError as exc:
            if self.leading and now - self._last_renew > self.renew_deadline:
                self.leading = False
                log.warning(
                    "lost the lease %s/%s: not renewed within %.0fs (%s)", *self._where(), self.renew_deadline, exc
                )
            elif not self.leading:
                log.info("the lease %s/%s could not be read or written: %s", *self._where(), exc)
            return self.leading
        if held:
            if not self.leading:
                log.info("acquired the lease %s/%s as %s: leading", *self._where(), self.lock.identity)
            self.leading = True
            self._last_renew = now
        elif self.leading:
            self.leading = False
            log.warning("lost the lease %s/%s: another replica holds it", *self._where())
        return self.leading

    def _where(self) -> tuple[str, str]:
        assert self.lock is not None
        return self.lock.namespace, self.lock.name

    def release(self) -> None:
        if self.lock is not None and self.leading:
            self.lock.release()
        self.leading = self.lock is None


__all__ = ["Elector"]
