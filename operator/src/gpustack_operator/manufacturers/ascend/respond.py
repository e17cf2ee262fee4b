"""Ascend's responder: what one container is injected with (issue 10).

Every family carries ``ASCEND_VISIBLE_DEVICES`` = the driver's own index of each granted NPU (spec
"Positional injection order"; reference rules §9): the physical id (``physicalIndexes[0]``), except
on the 950 family (DCMI V2), where the vendor runtime names ``/dev/davinci<N>`` from the dcmi device id
(``physicalIndexes[1]``) -- with ``{7, 3, 0}``: 910B → ``7``, 950 → ``3``. A 950 record with a single
index is refused (``carries no dcmi device index``). The vendor runtime (``runtimeClassName: ascend``)
turns the variable into device nodes; this responder injects none itself.

Container-share (supplement §1.6): the sliced, shared and visibility families can place a second
tenant on an NPU, so the flag is read first and written only when off; exclusive never touches it.
Read outcomes: libdcmi not loaded / a container-share entry point missing → refused without writing
and with no command; the V2 generation declares no flag → allowed, the accelerator logged; any other
read failure → the write is still attempted, and a failing write reports both errors and the
``npu-smi`` remedy.

Sliced (vcann-rt): exactly one NPU (``npu_info.config`` models a single physical NPU, §1.10); the
family/CANN pair must be one the image ships a vcann-rt build for (``soc.logical_sliced``), else the
allocation is refused defensively. The library directory ``ascend/cann-<major>-<family>`` (default
major 8) is mounted at :data:`LIB_CONTAINER_DIR` through ``/etc/ld.so.preload``; the per-container
``npu_info.config`` (written under the pod working directory) is mounted read-only at
:data:`CONFIG_CONTAINER_PATH`, where vcann-rt reads it. Its keys, one per line, in this order:

``physical-npu-id``   the physical id, always (also on 950);
``virtual-npu-id``    the lowest id no other live container's config on the same physical NPU holds
                      (the per-container configs under the pods directory are the state; a retried
                      container keeps its own id);
``aicore-quota``      the cores percentage; ``memory-quota`` the VRAM budget in MiB;
``shm-id``            the accelerator id with spaces turned into ``-``: the region vcann-rt's
                      co-tenants on one NPU coordinate through, so it is per NPU, not per container
                      (the reference implementation's value);
``scheduling-policy`` ``2`` (elastic).

``ENPU_LOG_LEVEL=1`` and ``ENPU_DSMI_HOOK=1`` are injected unless the container's own ``env:`` sets them.
"""

from __future__ import annotations

import logging
import re

from gpustack_operator.host import HostPathError
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.ascend import soc
from gpustack_operator.manufacturers.ascend.modes import CONTAINER_SHARE, NOT_LOADED, READ_FAILED
from gpustack_operator.manufacturers.ascend.modes import MODE as CONTAINER_SHARE_NAME
from gpustack_operator.manufacturers.base import ModeError, ModeState
from gpustack_operator.manufacturers.respond import (
    Code,
    Family,
    Grant,
    Granted,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    mount_preload,
    set_default,
)

log = logging.getLogger(__name__)

VISIBLE = "ASCEND_VISIBLE_DEVICES"
FAMILY_950 = "950"
LIB_CONTAINER_DIR = "/usr/local/enpu/vcann-rt/lib"
LIBRARY = "libvruntime.so"
CONFIG_NAME = "npu_info.config"
CONFIG_CONTAINER_PATH = "/etc/enpu/vcann-rt/npu_info.config"
SCHEDULING_POLICY = 2
MAX_VIRTUAL_NPUS = soc.MAX_SLICES  # one vNPU per user process the device serves
QUIET = {"ENPU_LOG_LEVEL": "1", "ENPU_DSMI_HOOK": "1"}
TENANTED = frozenset({Family.SLICED, Family.SHARED, Family.VISIBILITY})


def visible_index(granted: Granted) -> int:
    """The number ``ASCEND_VISIBLE_DEVICES`` carries for one NPU (reference rules §9)."""
    indexes = granted.accelerator.physical_indexes
    if (granted.group.family or "") == FAMILY_950:
        if len(indexes) < 2:
            raise RefusedError(
                f"Ascend NPU {granted.id} (950, DCMI V2) carries no dcmi device index in its physicalIndexes "
                f"{indexes}; re-run detection so the record names it"
            )
        return indexes[1]
    if not indexes:
        raise RefusedError(f"Ascend NPU {granted.id} carries no physical id; re-run detection so the record names it")
    return indexes[0]


def physical_id(granted: Granted) -> int:
    indexes = granted.accelerator.physical_indexes
    if not indexes:
        raise RefusedError(f"Ascend NPU {granted.id} carries no physical id; re-run detection so the record names it")
    return indexes[0]


# -- container-share -------------------------------------------------------------------------------


def _refuses_without_writing(state: ModeState) -> bool:
    """Read outcome 1 (and a record without the card/device pair): nothing can be written."""
    detail = state.detail or ""
    return state.enabled is None and not detail.startswith(READ_FAILED) and state.declared


def ensure_container_share(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    """Read first, write only when off (supplement §1.6 outcomes); :class:`RefusedError` otherwise."""
    if ctx.detect is None:
        raise RefusedError(
            "Ascend container-share cannot be read: this allocator was started without a detection context",
        )
    driver = ctx.seam(CONTAINER_SHARE_NAME, CONTAINER_SHARE)
    for granted in grant.accelerators:
        group = granted.group.model_copy(update={"accelerators": [granted.accelerator]})
        (state,) = driver.read(ctx.detect, [group])
        if not state.declared:
            injection.log.append(f"ascend: {granted.id}: {state.detail}; {grant.family} allowed without the flag")
            log.info("ascend: %s: %s; %s allowed without the flag", granted.id, state.detail, grant.family)
            continue
        if state.enabled is True:
            continue
        if _refuses_without_writing(state):
            raise RefusedError(
                f"Ascend NPU {granted.id}: container-share cannot be read ({state.detail}), so nothing was "
                f"written and the {grant.family} allocation is refused"
                + (
                    "; no npu-smi command can add a missing entry point"
                    if not (state.detail or "").startswith(NOT_LOADED)
                    else "; the driver library must load first"
                )
            )
        try:
            change = driver.set(ctx.detect, state, True)
        except ModeError as exc:
            raise RefusedError(f"Ascend NPU {granted.id}: {exc}") from None
        injection.log.append(f"ascend: container-share enabled on {granted.id} ({change.command})")


# -- sliced ---------------------------------------------------------------------------------------


def library_subtree(group: DevicesGroup) -> str:
    """``ascend/cann-<major>-<family lowercase>`` (default major 8), refused for a family/CANN pair the
    image ships no vcann-rt build for (spec "One driver stack per node": guarded defensively)."""
    family = group.family or ""
    if soc.logical_sliced(family, group.runtime_version) is None:
        raise RefusedError(
            f"Ascend {group.name or group.id}: family {family or 'unknown'} on CANN "
            f"{group.runtime_version or 'unknown'} has no vcann-rt build, so it cannot be sliced "
            "(910B/910C on CANN 8 or 9, 310P and 950 on CANN 9)"
        )
    major = soc.cann_major(group.runtime_version)
    return f"ascend/cann-{major}-{family.lower()}"


_LINE = re.compile(r"^([a-z-]+)=(.*)$")
_ID = re.compile(r"[0-9]{1,9}")  # what render_config writes: ASCII digits, no sign, no separators


def parse_config(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            values[match.group(1)] = match.group(2).strip()
    return values


def cores_quota(percent: int) -> int:
    """``aicore-quota``: the cores percentage, absent or <= 0 meaning 100 (reference rules §5)."""
    return percent if 0 < percent <= 100 else 100


def render_config(physical: int, virtual: int, cores: int, memory_mib: int, accelerator_id: str) -> str:
    return (
        f"physical-npu-id={physical}\n"
        f"virtual-npu-id={virtual}\n"
        f"aicore-quota={cores}\n"
        f"memory-quota={memory_mib}\n"
        f"shm-id={accelerator_id.replace(' ', '-')}\n"
        f"scheduling-policy={SCHEDULING_POLICY}\n"
    )


def config_ids(ctx: RespondContext, path: str) -> tuple[int, int] | None:
    """(physical, virtual) a config names; ``None`` when absent; refused when unreadable or naming
    ids no slice could hold -- anything but the ASCII digits :func:`render_config` writes (``int()``
    would also read ``+1``, ``1_0`` or Arabic-Indic digits), or a vNPU id past the device's
    :data:`MAX_VIRTUAL_NPUS` (a corrupt neighbour must not be handed its vNPU id a second time)."""
    try:
        text = ctx.host.read_optional(path)
    except HostPathError as exc:
        raise RefusedError(f"Ascend vNPU config {path} cannot be read ({exc}); repair or remove it") from None
    if text is None:
        return None
    values = parse_config(text)
    physical, virtual = values.get("physical-npu-id", ""), values.get("virtual-npu-id", "")
    if _ID.fullmatch(physical) and _ID.fullmatch(virtual) and int(virtual) < MAX_VIRTUAL_NPUS:
        return int(physical), int(virtual)
    raise RefusedError(
        f"Ascend vNPU config {path} names no physical-npu-id/virtual-npu-id a slice could hold "
        f"(physical-npu-id={physical[:20]!r}, virtual-npu-id={virtual[:20]!r}, ids 0-{MAX_VIRTUAL_NPUS - 1}); "
        "repair or remove it (its pod's id is unknown, so none is handed out over it)"
    )


def neighbour_ids(ctx: RespondContext, own: str) -> list[tuple[int, int]]:
    """(physical, virtual) of every other live container's config on this node: a Pod whose slice the
    ledger no longer charges (finished, or gone) holds no vNPU id (:meth:`..respond.RespondContext.record_live`).
    A config or directory that cannot be read is refused."""
    pods = ctx.pods_dir.rstrip("/")
    found: list[tuple[int, int]] = []
    try:
        if not ctx.host.is_dir(pods):
            return found
        for uid in sorted(ctx.host.listdir(pods)):
            pod = f"{pods}/{uid}"
            if not ctx.record_live(uid) or not ctx.host.is_dir(pod):
                continue
            for container in sorted(ctx.host.listdir(pod)):
                path = f"{pod}/{container}/{CONFIG_NAME}"
                if path == own or not ctx.host.is_dir(f"{pod}/{container}"):  # allocation.json, other records
                    continue
                ids = config_ids(ctx, path)
                if ids is not None:
                    found.append(ids)
    except HostPathError as exc:
        raise RefusedError(f"Ascend: {exc}, so the vNPU ids other slices hold are unknown") from None
    return found


def virtual_npu_id(grant: Grant, ctx: RespondContext, physical: int) -> int:
    """The lowest vNPU id on ``physical`` no other live container holds; this container's own id when
    its config already names this NPU (a retried allocation gets the same answer)."""
    own = ctx.pod_dir(grant.container.pod_uid, grant.container.container, CONFIG_NAME)
    mine = config_ids(ctx, own)
    if mine is not None and mine[0] == physical:
        return mine[1]
    taken = {ids[1] for ids in neighbour_ids(ctx, own) if ids[0] == physical}
    for candidate in range(MAX_VIRTUAL_NPUS):
        if candidate not in taken:
            return candidate
    raise RefusedError(
        f"Ascend physical NPU {physical} already serves {MAX_VIRTUAL_NPUS} vNPUs (the most one device serves)"
    )


def check_single(grant: Grant) -> None:
    if len(grant.accelerators) != 1:
        raise RefusedError(
            f"an Ascend sliced allocation takes exactly one NPU, got {len(grant.accelerators)}: "
            "vcann-rt's npu_info.config models a single physical NPU"
        )


def respond_sliced(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    check_single(grant)
    if grant.budget is None:
        raise RefusedError("an Ascend sliced allocation carries no slice budget", code=Code.INTERNAL)
    (granted,) = grant.accelerators
    subtree = library_subtree(granted.group)
    mount_preload(injection, ctx, subtree, LIB_CONTAINER_DIR, LIBRARY, grant=grant)
    physical = physical_id(granted)
    virtual = virtual_npu_id(grant, ctx, physical)
    directory = ctx.pod_dir(grant.container.pod_uid, grant.container.container)
    config = f"{directory}/{CONFIG_NAME}"
    try:
        ctx.host.makedirs(directory)
        ctx.host.write_text(
            config,
            render_config(
                physical, virtual, cores_quota(grant.budget.cores_percent), grant.budget.memory_mib, granted.id
            ),
        )
    except HostPathError as exc:
        raise RefusedError(f"Ascend vNPU config {config} cannot be written: {exc}") from None
    injection.add_mount(CONFIG_CONTAINER_PATH, config)
    for name, value in QUIET.items():
        set_default(injection, grant.container.env, name, value)


class AscendResponder:
    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"Ascend serves no {grant.family} allocation")
        if not grant.accelerators:
            raise RefusedError("an Ascend allocation names no NPU")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            # supplement §1.7: a partition-backed owner's sidecar needs partition capability; fail closed
            raise RefusedError(
                f"{grant.container.label}: the grant names a hardware partition, and Ascend has none here; "
                "refusing rather than exposing a whole NPU"
            )
        granted_ids(grant, str(grant.family))  # one NPU twice is refused (spec "Exclusive and shared")
        injection = Injection()
        visible = [visible_index(g) for g in grant.accelerators]  # refuses before anything is written
        if grant.family is Family.SLICED:  # every refusal that writes nothing comes before the flag
            check_single(grant)
            mount_preload(
                injection, ctx, library_subtree(grant.accelerators[0].group), LIB_CONTAINER_DIR, LIBRARY, grant=grant
            )
        if grant.family in TENANTED:
            ensure_container_share(grant, ctx, injection)
        injection.envs[VISIBLE] = ",".join(str(i) for i in visible)
        if grant.family is Family.SLICED:
            respond_sliced(grant, ctx, injection)
        return injection


RESPONDER = AscendResponder()

__all__ = ["CONFIG_CONTAINER_PATH", "LIB_CONTAINER_DIR", "RESPONDER", "AscendResponder", "visible_index"]
