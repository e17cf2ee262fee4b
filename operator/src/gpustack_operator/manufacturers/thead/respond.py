"""T-Head's responder (issue 10): device nodes only, never a visible-devices env (T-Head has no
container-runtime hook; spec "Logical slicing per manufacturer", supplement §1.6).

Every family injects the two shared control nodes (``/dev/alixpu``, ``/dev/alixpu_ctl``) once and each
granted PPU's own node ``/dev/alixpu_ppu<ordinal>``, the ordinal proven by the node's minor number
against the one the detector recorded (:func:`~.partition.require_card`). Every node is required.

Sliced adds the preload pair from the flat ``thead`` subtree, mounted at :data:`LIB_CONTAINER_DIR`:
``hggc_quota.so`` (enforcement) and ``hgml_dlsym_hook.so`` (the visibility half), both named in the
container's preload file by :func:`mount_preload` (a preload file naming only one leaves a container
either uncapped or reporting the whole PPU). Quota env: ``HGGC_DEVICE_SM_LIMIT`` (emitted even
at 100 %: the library refuses a PPU whose figure is missing), ``HGGC_DEVICE_MEMORY_LIMIT_<i>`` = bare
MiB per PPU in ascending index (positional: the SDK renumbers injected nodes by ascending ordinal),
``HGGC_LEDGER_PATH`` in the per-container directory (mounted read-write at :data:`LEDGER_DIR`, world
writable: the workload's user is not ours to predict), never-overwrite ``LIBHGGC_LOG_LEVEL=1``, and
``ppu-monitor`` (staged beside the libraries) also mounted on the container's ``PATH``.

Partitioned (and visibility of a partition-backed owner): the shared control nodes plus the
instance's own nodes (parent card node and its two capability nodes) the partitioner resolved, each
re-checked to exist as a character device.
"""

from __future__ import annotations

import os

from gpustack_operator.host import HostPathError
from gpustack_operator.manufacturers.respond import (
    Family,
    Grant,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    mount_pod_dir,
    mount_preload,
    set_default,
)
from gpustack_operator.manufacturers.thead.partition import CONTROL_NODES, node_minor, require_card

SUBTREE = "thead"
LIB_CONTAINER_DIR = "/usr/local/vppu"
QUOTA_LIBRARY = "hggc_quota.so"
HOOK_LIBRARY = "hgml_dlsym_hook.so"
MONITOR = "ppu-monitor"
MONITOR_CONTAINER_PATH = "/usr/local/bin/ppu-monitor"
LEDGER_DIR = "/var/run/vppu"
LEDGER_PATH = f"{LEDGER_DIR}/ledger"
SM_LIMIT = "HGGC_DEVICE_SM_LIMIT"
MEMORY_LIMIT = "HGGC_DEVICE_MEMORY_LIMIT_{}"
LOG_LEVEL = "LIBHGGC_LOG_LEVEL"


def _control_nodes(ctx: RespondContext, injection: Injection) -> None:
    for path in CONTROL_NODES:
        node_minor(ctx.view, path)  # must exist, as a character device
        injection.add_device(path, permissions="rw")


def _card_nodes(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    for granted in grant.accelerators:
        injection.add_device(require_card(ctx.view, granted.accelerator), permissions="rw")


def _partition_nodes(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    instance = grant.partition
    if instance is None:
        raise RefusedError("a T-Head partition allocation carries no partition instance")
    if not instance.device_nodes:
        raise RefusedError(f"T-Head partition {instance.uuid} names no device nodes; it cannot be injected")
    for path in instance.device_nodes:
        node_minor(ctx.view, path)
        injection.add_device(path, permissions="rw")


def _host_dir(ctx: RespondContext) -> str:
    return f"{ctx.lib_dir.rstrip('/')}/{SUBTREE}"


def _sliced(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    budget = grant.budget
    if budget is None:
        raise RefusedError("a T-Head sliced allocation carries no slice budget")
    host_dir = _host_dir(ctx)
    # both halves preloaded, enforcement first: a preload file naming only one leaves the container
    # either uncapped or reporting the whole PPU
    mount_preload(injection, ctx, SUBTREE, LIB_CONTAINER_DIR, QUOTA_LIBRARY, grant=grant, also=(HOOK_LIBRARY,))
    if ctx.host.exists(f"{host_dir}/{MONITOR}"):
        injection.add_mount(MONITOR_CONTAINER_PATH, f"{host_dir}/{MONITOR}")
    else:
        injection.log.append(f"thead: {host_dir}/{MONITOR} is not staged; the container has no ppu-monitor")
    # emitted even at 100 % (supplement §1.6); absent or <= 0 means 100 (reference rules §5)
    injection.envs[SM_LIMIT] = str(budget.cores_percent if 0 < budget.cores_percent <= 100 else 100)
    for position, granted in enumerate(grant.accelerators):  # ascending index: the container's numbering
        vram = granted.group.memory
        memory = min(budget.memory_mib, vram) if vram > 0 else budget.memory_mib
        injection.envs[MEMORY_LIMIT.format(position)] = str(memory)
    ledger_host = mount_pod_dir(injection, ctx, grant, LEDGER_DIR)
    try:
        os.chmod(ctx.host.path(ledger_host), 0o777)
    except (OSError, HostPathError) as exc:
        raise RefusedError(f"the T-Head ledger directory {ledger_host} cannot be made writable: {exc}") from None
    injection.envs["HGGC_LEDGER_PATH"] = LEDGER_PATH
    set_default(injection, grant.container.env, LOG_LEVEL, "1")


class TheadResponder:
    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.PARTITIONED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"T-Head serves no {grant.family} allocation")
        injection = Injection()
        partition_backed = grant.family is Family.PARTITIONED or (
            grant.family is Family.VISIBILITY and grant.partition is not None
        )
        if grant.family is Family.VISIBILITY and grant.owner_family is Family.PARTITIONED and not partition_backed:
            # supplement §1.7: a partition-backed owner's sidecar is given the partition, never the parent
            raise RefusedError(
                f"{grant.container.label}: the owner holds a T-Head partition but none is recorded for its "
                "sidecar; refusing rather than exposing the parent PPU"
            )
        if not partition_backed and not grant.accelerators:
            raise RefusedError("a T-Head allocation names no PPU")
        if not partition_backed:
            granted_ids(grant, str(grant.family))  # one PPU twice is refused (spec "Exclusive and shared")
        _control_nodes(ctx, injection)
        if partition_backed:
            _partition_nodes(grant, ctx, injection)
            return injection
        _card_nodes(grant, ctx, injection)
        if grant.family is Family.SLICED:
            _sliced(grant, ctx, injection)
        return injection


RESPONDER = TheadResponder()

__all__ = ["LEDGER_PATH", "LIB_CONTAINER_DIR", "RESPONDER", "TheadResponder"]
