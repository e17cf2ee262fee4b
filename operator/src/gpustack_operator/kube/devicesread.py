"""Reading the node's ``Devices`` status back: a restart-recovery source (issue 18).

A restarted Device Manager rebuilds its ledger before its plugins register (``allocator/recovery.py``):
from the Pods' annotations, the node-local records, the ``Devices`` status it published before the
restart, and the kubelet's pod-resources ``List``. This module reads the third: one GET of the
cluster-scoped ``Devices`` named after the node (``worker.gpustack.ai/v1alpha1``, written by
``kube/publish.py``), its ``status.groups`` parsed through the same models the writer serialises
(:class:`~gpustack_operator.kube.crds.DevicesStatus`, strict: unknown keys, wrong types and modes
outside the enum are refused, never coerced).

It never fails recovery: the object absent (404) or carrying no status is ``[]`` (nothing to recover
from it); any other failure -- the API server unreachable or refusing, an answer that is no
``Devices`` object, a status the models refuse -- is ``None`` with the reason logged, and recovery goes
on from the other sources.

Read it **once, before the first publish after the start**: the publisher rewrites the status from the
(then still empty) ledger, and what was held before the restart is gone from it. Usage (serve)::

    from gpustack_operator.kube.devicesread import read_devices_status

    status = read_devices_status(client, node_name)      # before the detection loop publishes
    ...
    allocator.recover(status=status)                      # each allocator, as it is built

What the status can rebuild is what it carries: each accelerator's ``holders`` (which Pod's container
holds it, the mode, the units; ``kube/crds.py`` puts them in the CRD beyond supplement §9.2). A
partition cannot be rebuilt from it (the instance is not in the status).
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import kubernetes.client
from pydantic import ValidationError

from gpustack_operator.allocator.ledger import DevicesAllocationGroup
from gpustack_operator.kube import crds
from gpustack_operator.kube.rest import NOT_FOUND, REQUEST_TIMEOUT, KubeRequestError, request

log = logging.getLogger(__name__)


def devices_path(node: str) -> str:
    """The API path of the ``Devices`` object of ``node``."""
    return f"/apis/{crds.API_VERSION}/{crds.PLURAL}/{quote(node, safe='')}"


def parse_devices_status(doc: Any, node: str) -> list[DevicesAllocationGroup] | None:
    """The ``status.groups`` of a ``Devices`` object as the API server answered it; ``[]`` when it has
    no status, ``None`` (logged) when the answer is no ``Devices`` object or its status is malformed.
    Never raises, whatever ``doc`` is."""
    if not isinstance(doc, dict):
        log.warning("the Devices %s answer is not an object; restart recovery goes on without it", node)
        return None
    status = doc.get("status")
    if status is None or status == {}:
        return []
    try:
        text = json.dumps(status, allow_nan=False)
        parsed = crds.DevicesStatus.model_validate_json(text, strict=True)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "status"
        log.warning(
            "the Devices %s status is malformed (%d problems; %s: %s); restart recovery goes on without it",
            node,
            exc.error_count(),
            where or "status",
            errors[0]["msg"] if errors else "invalid",
        )
        return None
    except (TypeError, ValueError, RecursionError) as exc:
        log.warning("the Devices %s status cannot be read (%s); restart recovery goes on without it", node, exc)
        return None
    return parsed.groups


def read_devices_status(
    client: kubernetes.client.ApiClient, node: str, *, timeout: float = REQUEST_TIMEOUT
) -> list[DevicesAllocationGroup] | None:
    """The status groups of the node's ``Devices`` object (see the module docstring): ``[]`` when it is
    absent or has no status, ``None`` (logged, with the reason) when it cannot be read or parsed."""
    if not node:
        log.warning("no node name: the Devices status is not read; restart recovery goes on without it")
        return None
    try:
        doc = request(client, "GET", devices_path(node), timeout=timeout)
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            log.info("no Devices %s was published yet: nothing to recover from its status", node)
            return []
        log.warning("the Devices %s status could not be read (%s); restart recovery goes on without it", node, exc)
        return None
    except Exception as exc:  # the client's own surprises: recovery never fails for this source
        log.warning(
            "the Devices %s status could not be read (%s: %s); restart recovery goes on without it",
            node,
            type(exc).__name__,
            exc,
        )
        return None
    return parse_devices_status(doc, node)


__all__ = ["devices_path", "parse_devices_status", "read_devices_status"]
