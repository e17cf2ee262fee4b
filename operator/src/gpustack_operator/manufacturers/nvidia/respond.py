"""NVIDIA's responder: what one container is injected with, per family (issue 10).

Visibility (exclusive, shared, sliced, and the ``sshd`` sidecar of a whole-card owner) travels on
exactly one channel, the one the allocator's CDI resolver settled on (supplement §1.4, reference
rules §11 "Apply"):

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<uuid1>,<uuid2>`` in the granted (ascending index) order, for
  the NVIDIA container runtime to turn into device nodes;
- ``cdi-annotations``: the annotation ``cdi.k8s.io/gpustack-nvidia`` =
  ``nvidia.com/gpu=<uuid1>,nvidia.com/gpu=<uuid2>``, resolved by the container engine -- and then
  *no* variable, since the variable and the request would be two injection paths for one container.

A partition (``.partitioned``) was materialised by the allocator through the :class:`Partitioner`
(``nvidia/partition.py``) before this is called; the response names only that instance,
``NVIDIA_VISIBLE_DEVICES=MIG-…``, and never through CDI (no pre-generated specification can name
an instance created at allocation time). The sidecar of a partition-backed owner is given the same
instance, never the parent card, which hosts other tenants' partitions too (spec "SSH-enabled
Instances").

A logical slice (``.sliced``) is HAMi-core's ``libvgpu.so`` preloaded through
``/etc/ld.so.preload`` (:func:`inject_hami_core`): ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m`` per
granted card, ``<i>`` the card's position in the grant (spec "Positional injection order": the
container's CUDA ordinals follow the PCI bus order only under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
which is injected beside it), ``CUDA_DEVICE_SM_LIMIT=<cores %>``, the shared-region cache in the
per-container working directory, and the library built for the node's CUDA major (supplement
§1.10: ``nvidia/cuda-<major>``, picked from the first granted card; a grant spanning two majors is
refused, since one container loads one build).
"""

from __future__ import annotations

from gpustack_operator.manufacturers.respond import (
    Channel,
    Family,
    Grant,
    Granted,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    mount_pod_dir,
    mount_preload,
    set_default,
)
from gpustack_operator.preload.layout import runtime_major

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CDI_KIND = "nvidia.com/gpu"  # supplement §1.4: NVIDIA's CDI kind
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/gpustack-"

# HAMi-core (reference rules §5; supplement §1.4 "Sliced", §1.6)
DEFAULT_CUDA_MAJOR = 12  # the major taken when the runtime version is unknown (identity.preload)
VGPU_CONTAINER_DIR = "/usr/local/vgpu"  # where the staged ld.so.preload names the library
VGPU_LIBRARY = "libvgpu.so"
VGPU_CACHE_DIR = "/tmp/vgpu"  # the per-container working directory, mounted read-write
SHARED_CACHE = f"{VGPU_CACHE_DIR}/cudevshr.cache"
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT_"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SHARED_CACHE_ENV = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
LOG_LEVEL = ("LIBCUDA_LOG_LEVEL", "0")  # quiets the per-call interception log (never-overwrite)
DEVICE_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NVIDIA only (never-overwrite)


def _visibility(injection: Injection, grant: Grant, ids: list[str]) -> None:
    """Whole accelerators on exactly one channel."""
    if grant.channel is Channel.CDI:
        kind = grant.cdi_kind or CDI_KIND
        injection.annotations[CDI_ANNOTATION_PREFIX + grant.manufacturer] = ",".join(f"{kind}={i}" for i in ids)
    else:
        injection.envs[VISIBLE_DEVICES] = ",".join(ids)


def _partition_uuid(grant: Grant) -> str:
    """The instance a partitioned grant (or a partition-backed owner's sidecar) names; refused when
    the allocator handed none, or one that is not a MIG device (never widen back to the parent)."""
    partition = grant.partition
    if partition is None:
        raise RefusedError(
            f"{grant.container.label}: no partition instance is recorded for this {grant.family} grant; "
            "refusing rather than exposing the parent accelerator"
        )
    parents = {g.id for g in grant.accelerators} | {partition.accelerator}
    if not partition.uuid.startswith("MIG-") or partition.uuid in parents:
        raise RefusedError(
            f"{grant.container.label}: partition {partition.profile} on {partition.accelerator} carries "
            f"{partition.uuid!r}, not a MIG device UUID; refusing rather than exposing the parent accelerator"
        )
    return partition.uuid


def _major(granted: Granted) -> int:
    major = runtime_major(granted.group.runtime_version)
    return DEFAULT_CUDA_MAJOR if major is None else major


def cuda_subtree(grant: Grant) -> str:
    """``nvidia/cuda-<major>`` from the first granted card's group (supplement §1.10); a grant
    spanning two CUDA majors is refused naming both (one container loads one HAMi-core build)."""
    first = grant.accelerators[0]
    major = _major(first)
    for other in grant.accelerators[1:]:
        if _major(other) != major:
            raise RefusedError(
                f"{grant.container.label}: a sliced grant spans CUDA {major} ({first.id}, runtime "
                f"{first.group.runtime_version or 'unknown'}) and CUDA {_major(other)} ({other.id}, runtime "
                f"{other.group.runtime_version or 'unknown'}); one container loads one HAMi-core build, so "
                "request accelerators of one driver stack"
            )
    return f"nvidia/cuda-{major}"


def inject_hami_core(injection: Injection, grant: Grant, ctx: RespondContext, subtree: str) -> None:
    """HAMi-core's quota env, library and working directory (NVIDIA and Iluvatar, supplement §1.6).

    ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` is numbered by position in the grant, which is ascending
    accelerator index (the contract), so it matches the container's own CUDA ordinals. The memory
    budget is already resolved per accelerator by the allocator (reference rules §5: a 24564 MiB
    card at 50 % is ``12282m``)."""
    budget = grant.budget
    if budget is None:
        raise RefusedError(f"{grant.container.label}: a sliced grant carries no slice budget")
    if budget.memory_mib <= 0:
        raise RefusedError(
            f"{grant.container.label}: the slice's memory budget is {budget.memory_mib} MiB; request "
            ".sliced.memory-percentage or .sliced.memory-mib of at least 1 MiB"
        )
    cores = budget.cores_percent if 0 < budget.cores_percent <= 100 else 100
    mount_preload(injection, ctx, subtree=subtree, container_dir=VGPU_CONTAINER_DIR, library=VGPU_LIBRARY, grant=grant)
    for position, granted in enumerate(grant.accelerators):  # capped at each card's VRAM (reference rules §5)
        vram = granted.group.memory
        memory = min(budget.memory_mib, vram) if vram > 0 else budget.memory_mib
        injection.envs[f"{MEMORY_LIMIT}{position}"] = f"{memory}m"
    injection.envs[SM_LIMIT] = str(cores)
    injection.envs[SHARED_CACHE_ENV] = SHARED_CACHE
    mount_pod_dir(injection, ctx, grant, VGPU_CACHE_DIR)
    set_default(injection, grant.container.env, *LOG_LEVEL)


class NvidiaResponder:
    """NVIDIA's :class:`~gpustack_operator.manufacturers.respond.Responder` (all five families)."""

    families = frozenset(Family)

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        injection = Injection()
        family = grant.family
        if family is Family.PARTITIONED or (
            family is Family.VISIBILITY and (grant.partition is not None or grant.owner_family is Family.PARTITIONED)
        ):
            # always the variable: no pre-generated CDI specification names an instance created now
            injection.envs[VISIBLE_DEVICES] = _partition_uuid(grant)
            if grant.channel is Channel.CDI:
                injection.log.append("a partition travels as NVIDIA_VISIBLE_DEVICES, never as a CDI request")
            return injection
        ids = granted_ids(grant, str(family))
        if family is Family.SLICED:
            inject_hami_core(injection, grant, ctx, cuda_subtree(grant))
            set_default(injection, grant.container.env, *DEVICE_ORDER)
        _visibility(injection, grant, ids)
        return injection


RESPONDER = NvidiaResponder()
