"""The worker's startup steps, idempotent on every replica before leader election (issue 19).

1. :func:`apply_crds` -- the CRDs the package owns (the ``Devices`` CRD from ``kube/crds.py``),
   created or updated (Helm never upgrades CRDs, so an upgraded chart never meets a stale schema),
   then waited for until ``Established``.
2. :class:`RuleApplier` -- the ``gpustack-cpu-info`` NodeFeatureRule (``worker/rule.py``). NFD's
   ``NodeFeatureRule`` CRD may not be installed yet (the NFD subchart starting beside us, or NFD
   installed later): a 404 on the create is retried with a backoff (``backoff_initial`` doubling to
   ``backoff_max``) and logged in one clear line, once, until the rule is applied. It runs on its own
   thread, so the controllers are not held back by an absent NFD.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpustack_operator.kube.apply import CRD_COLLECTION, RULE_COLLECTION, apply, collection_missing, crd_established
from gpustack_operator.kube.rest import KubeRequestError

if TYPE_CHECKING:  # the client is imported by gpustack_operator.kube alone
    import kubernetes.client

log = logging.getLogger(__name__)

ESTABLISH_TIMEOUT = 30.0


class StartupError(Exception):
    """A startup step that could not complete (one line naming the object and the cause)."""


def apply_crds(
    client: kubernetes.client.ApiClient,
    crds: Sequence[dict[str, Any]],
    *,
    timeout: float = ESTABLISH_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Create or update each CRD and wait until each is ``Established``; ``{name: outcome}``."""
    outcomes: dict[str, str] = {}
    for crd in crds:
        name = str(crd["metadata"]["name"])
        try:
            outcomes[name] = apply(client, CRD_COLLECTION, crd, defaulted=True)
        except KubeRequestError as exc:
            raise StartupError(f"the CustomResourceDefinition {name} could not be applied: {exc}") from None
        log.info("CustomResourceDefinition %s %s", name, outcomes[name])
    deadline = time.monotonic() + timeout
    for name in outcomes:
        while True:
            try:
                if crd_established(client, name):
                    break
            except KubeRequestError as exc:
                log.info("CustomResourceDefinition %s: %s", name, exc)
            if time.monotonic() >= deadline:
                raise StartupError(f"the CustomResourceDefinition {name} was not Established within {timeout:.0f}s")
            sleep(0.1)
    return outcomes


class RuleApplier:
    """Applies one NodeFeatureRule, retrying while NFD's CRD is absent (see the module docstring)."""

    def __init__(
        self,
        client: kubernetes.client.ApiClient,
        rule: dict[str, Any],
        *,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
    ) -> None:
        self.client = client
        self.rule = rule
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.applied = threading.Event()
        self.attempts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RuleApplier:
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="nodefeaturerule", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> bool:
        """Until applied or stopped; whether it was applied."""
        name = self.rule["metadata"]["name"]
        delay = self.backoff_initial
        told_absent = False
        while not self._stop.is_set():
            self.attempts += 1
            try:
                outcome = apply(self.client, RULE_COLLECTION, self.rule)
            except KubeRequestError as exc:
                if collection_missing(exc):
                    if not told_absent:
                        log.warning(
                            "NFD's NodeFeatureRule CRD (nodefeaturerules.nfd.k8s-sigs.io) is not installed: the %s "
                            "rule will be applied once it is (retrying every %.0f-%.0fs)",
                            name,
                            self.backoff_initial,
                            self.backoff_max,
                        )
                        told_absent = True
                else:
                    log.warning("the NodeFeatureRule %s could not be applied (retrying in %.1fs): %s", name, delay, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)
                continue
            log.info("NodeFeatureRule %s %s", name, outcome)
            self.applied.set()
            return True
        return False


__all__ = ["RuleApplier", "StartupError", "apply_crds"]
