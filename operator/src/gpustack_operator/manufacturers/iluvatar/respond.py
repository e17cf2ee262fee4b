"""Iluvatar's responder: ``IX_VISIBLE_DEVICES`` for whole cards, HAMi-core for a slice (issue 10).

Visibility (exclusive, shared, sliced, and the ``sshd`` sidecar) is ``IX_VISIBLE_DEVICES`` (supplement
§6.1), which ``ix-container-runtime`` turns into ``/dev/iluvatar<N>`` nodes and the corex libraries.
It carries the accelerators' **UUIDs** (what IXML reports as the accelerator id, ``iluvatar/detect.py``),
comma-separated in the grant's ascending-index order. The spec names the variable only; the UUID is
what Iluvatar's own device plugin writes into it (it hands the runtime the kubelet device ids, which
are the cards' UUIDs) and what the reference operator writes, and unlike the index it cannot name
the wrong card when an earlier card failed its probe (spec "Positional injection order").

A slice is HAMi-core on corex (spec "Logical slicing per manufacturer"): the same quota env as NVIDIA
(``CUDA_DEVICE_MEMORY_LIMIT_<i>``, ``CUDA_DEVICE_SM_LIMIT``, the shared cache, never-overwrite
``LIBCUDA_LOG_LEVEL=0``) with the CUDA 12 build staged in the flat ``iluvatar`` directory (spec
"Where the preload libraries come from"; ``iluvatar/identity.py``). ``CUDA_DEVICE_ORDER`` is NVIDIA's
alone (supplement §1.4) and not injected here. A sliced Pod must carry
``runtimeClassName: <the resolved runtime name>`` (``iluvatar`` unless
``GPUSTACK_ILUVATAR_ACCELERATABLE_RUNTIME_NAME`` says otherwise): ``ix-container-runtime`` is what
injects corex, and without it the preloaded ``libvgpu.so`` finds no corex ``libcuda.so.1`` to hook --
the container would run with a whole card nobody limited. Refused otherwise.
"""

from __future__ import annotations

from pydantic import ValidationError

from gpustack_operator.manufacturers.base import PreloadLibrary
from gpustack_operator.manufacturers.iluvatar.identity import IDENTITY
from gpustack_operator.manufacturers.nvidia.respond import inject_hami_core  # Iluvatar reuses HAMi-core
from gpustack_operator.manufacturers.respond import Family, Grant, Injection, RefusedError, RespondContext, granted_ids
from gpustack_operator.settings import manufacturer_overrides

VISIBLE_DEVICES = "IX_VISIBLE_DEVICES"


def runtime_name(ctx: RespondContext) -> str:
    """The runtime class a sliced Pod must name: the detection context's resolved one when the
    allocator passed it, else the identity's default with the ``GPUSTACK_ILUVATAR_*`` override."""
    if ctx.detect is not None and ctx.detect.manufacturer.name == IDENTITY.name:
        resolved = ctx.detect.manufacturer.runtime_name
    else:
        try:
            resolved = manufacturer_overrides(IDENTITY.name).acceleratable_runtime_name or IDENTITY.runtime_name
        except ValidationError:
            resolved = IDENTITY.runtime_name
    return resolved or "iluvatar"


class IluvatarResponder:
    """Iluvatar's :class:`~gpustack_operator.manufacturers.respond.Responder`."""

    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"{grant.container.label}: Iluvatar serves no {grant.family} allocation")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            raise RefusedError(f"{grant.container.label}: Iluvatar has no hardware partitions to make visible")
        ids = granted_ids(grant, str(grant.family))
        injection = Injection()
        if grant.family is Family.SLICED:
            wanted = runtime_name(ctx)
            if grant.container.runtime_class != wanted:
                have = grant.container.runtime_class
                raise RefusedError(
                    f"{grant.container.label}: a sliced Iluvatar Pod must carry runtimeClassName: {wanted} "
                    f"(it has {'none' if have is None else repr(have)}): ix-container-runtime injects corex, "
                    "and without it the preloaded libvgpu.so finds no corex libcuda.so.1 to hook, so the "
                    "slice would not be enforced; set spec.runtimeClassName on the Pod"
                )
            preload = IDENTITY.preload
            inject_hami_core(
                injection, grant, ctx, preload.directory if isinstance(preload, PreloadLibrary) else "iluvatar"
            )
        injection.envs[VISIBLE_DEVICES] = ",".join(ids)
        return injection


RESPONDER = IluvatarResponder()
