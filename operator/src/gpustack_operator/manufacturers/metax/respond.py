"""MetaX's responder: what one container is injected with (spec "Exclusive and shared"; supplement
§1.4, §1.6 row MetaX, §6.1).

MetaX has no container runtime in the path, so the allocator injects the device nodes itself, for
every family: ``/dev/mxcd`` once and the GPU's ``/dev/dri/card<N>`` / ``/dev/dri/renderD<M>`` (all
required; ``N``/``M`` read at allocation from the metax driver's sysfs node, as detection reads them,
:func:`.detect.drm_indexes`), plus ``/dev/mxnd`` and ``/dev/mxgd`` once each when the node has them
(supplement §6.1 lists them; not every driver release creates them). There is no
``METAX_VISIBLE_DEVICES``: exclusive, shared and visibility are the nodes alone.

``SLICED`` (one GPU per container) goes through the sGPU subdevice registry,
``/sys/bus/pci/devices/<BDF>/sgpu/`` (:mod:`.modes`: ``sched_class``, ``create``, ``destroy``,
``sgpu<N>/``), written through the node view (it is sysfs; a temporary tree in tests):

1. the registry is read as the ``sgpu`` mode driver reads it (:func:`.modes.read_registry`); a GPU
   without one cannot be sliced and is refused (the driver was not loaded with sGPU support);
2. the scheduling class is made ``fixed-share`` (``sched_class`` ← ``1``) so ``cores%`` is a hard
   quota -- written only while the GPU hosts no subdevice: with one in use a different class is
   refused (the driver rejects switching it under a live subdevice, and it would change a neighbour's
   scheduling);
3. a subdevice is created by writing to ``create``, its index the lowest free (< 16, the driver's
   ``DefaultDevCnt``) over the registry's ``sgpu<N>`` entries and every other container's record;
4. ``METAX_SGPUS=sgpu=<BDF>#<index>;compute=<cores%>;vram=<MiB>;alias=<alias>`` is injected with the
   GPU's nodes.

A whole-GPU slice (``cores% >= 100`` and the budget at least the GPU's VRAM) takes the native path:
no subdevice, the nodes alone, logged.

**Assumed** (not in the spec nor any source this project has): the line written to ``create`` --
``index=<N> compute=<cores%> vram=<MiB> alias=<alias>`` -- and that the driver then lists
``sgpu<N>``; the alias ``gpustack-<pod uid>-<container>`` (it carries the pod's identity for a
reclaimer). The ``METAX_SGPUS`` shape is the reference operator's design record. All of it is to be
validated on hardware.

Between allocations: ``<pods_dir>/<uid>/metax-sgpu.<container>.json`` records the subdevice (outside
any mounted directory). A retried container whose record names the same GPU and budget reuses it
(no second create when its ``sgpu<N>`` is listed); a record naming another GPU or budget fails closed
(pod requests are immutable, so it is corruption or a bug, and a live subdevice is never mutated); a
neighbour's record that cannot be read fails closed too.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from gpustack_operator.host import HostPathError
from gpustack_operator.manufacturers.base import ModeError
from gpustack_operator.manufacturers.metax.detect import drm_indexes
from gpustack_operator.manufacturers.metax.identity import SYSFS_SEAM
from gpustack_operator.manufacturers.metax.modes import (
    parse_sched_class,
    parse_subdevices,
    read_registry,
    registry_path,
)
from gpustack_operator.manufacturers.respond import (
    RECORD_CONFIG,
    Family,
    Grant,
    Granted,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    read_record,
    require_devices,
)

CONTROL_DEVICE = "/dev/mxcd"
OPTIONAL_DEVICES = ("/dev/mxnd", "/dev/mxgd")
MAX_SUBDEVICES = 16
FIXED_SHARE = "fixed-share"
FIXED_SHARE_CLASS = "1"
RECORD_PREFIX = "metax-sgpu."
RECORD_SUFFIX = ".json"


PCI_ADDRESS = r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"


class SgpuRecord(BaseModel):
    """``<pods_dir>/<uid>/metax-sgpu.<container>.json``: the subdevice a container was given. Read
    strictly (:func:`..respond.read_record`): the bus id names a registry path, so anything but a PCI
    address is a corrupt record (never a path a reclaim writes ``destroy`` under), as is an index past
    the driver's 16 or a value of another type."""

    model_config = RECORD_CONFIG

    bus_id: str = Field(pattern=PCI_ADDRESS)
    index: int = Field(ge=0, lt=MAX_SUBDEVICES)
    compute: int = Field(ge=1, le=100)
    vram_mib: int = Field(ge=0, lt=1 << 40)
    alias: str = Field(min_length=1, max_length=512)


def drm_nodes(ctx: RespondContext, granted: Granted) -> list[str]:
    bus = granted.accelerator.topology.pci_bus_id
    indexes = drm_indexes(ctx.view, bus) if bus else []
    if len(indexes) != 2:
        raise RefusedError(
            f"metax GPU {granted.id} ({bus or 'no PCI address'}): the metax driver lists no card and render "
            "node for it under /sys/module/metax/drivers; is the driver loaded?"
        )
    return [f"/dev/dri/card{indexes[0]}", f"/dev/dri/renderD{indexes[1]}"]


def inject_nodes(injection: Injection, ctx: RespondContext, grant: Grant) -> None:
    paths = [CONTROL_DEVICE]
    for granted in grant.accelerators:
        paths.extend(drm_nodes(ctx, granted))
    require_devices(ctx.view, paths, f"metax {grant.container.label}")
    paths[1:1] = [p for p in OPTIONAL_DEVICES if ctx.view.exists(p)]
    for path in paths:
        injection.add_device(path)


# -- sliced ----------------------------------------------------------------------------------------


def record_path(ctx: RespondContext, grant: Grant) -> str:
    return ctx.pod_dir(grant.container.pod_uid, f"{RECORD_PREFIX}{grant.container.container}{RECORD_SUFFIX}")


def read_sgpu_record(ctx: RespondContext, path: str) -> SgpuRecord:
    """A subdevice record, or :class:`ValueError` naming what is wrong with it."""
    return read_record(ctx.host, path, SgpuRecord, "an sgpu record")


def neighbour_indexes(ctx: RespondContext, own: str, bus_id: str) -> set[int]:
    pods = ctx.pods_dir.rstrip("/")
    held: set[int] = set()
    if not ctx.host.is_dir(pods):
        return held
    try:
        for uid in ctx.host.listdir(pods):
            directory = f"{pods}/{uid}"
            if not ctx.record_live(uid) or not ctx.host.is_dir(directory):
                continue
            for entry in ctx.host.listdir(directory):
                path = f"{directory}/{entry}"
                if path == own or not (entry.startswith(RECORD_PREFIX) and entry.endswith(RECORD_SUFFIX)):
                    continue
                try:
                    record = read_sgpu_record(ctx, path)
                except ValueError as exc:
                    raise RefusedError(
                        f"metax: another slice's record {path} is {exc}; the subdevices it holds are unknown, so "
                        "none is created (remove the file if its pod is gone)"
                    ) from None
                if record.bus_id == bus_id:
                    held.add(record.index)
    except HostPathError as exc:
        raise RefusedError(f"metax: {exc}: the subdevices other slices hold are unknown") from None
    return held


def write_sysfs(ctx: RespondContext, path: str, text: str) -> None:
    """A sysfs control write: in place (a sysfs attribute cannot be replaced by a rename)."""
    recorder = ctx.seams.get(SYSFS_SEAM)
    if recorder is not None:
        recorder(path, text)
        return
    try:
        with open(ctx.view.path(path), "w", encoding="ascii") as fh:
            fh.write(text)
    except (OSError, HostPathError) as exc:
        raise RefusedError(f"metax: writing {text.strip()!r} to {path} failed ({exc})") from None


def subdevices(ctx: RespondContext, registry: str) -> list[int]:
    try:
        return parse_subdevices(ctx.view.listdir(registry))
    except HostPathError as exc:
        raise RefusedError(f"metax: the sgpu registry {registry} cannot be read ({exc.strerror})") from None


def ensure_fixed_share(ctx: RespondContext, granted: Granted, registry: str, live: list[int]) -> None:
    try:
        current = parse_sched_class(ctx.view.read_optional(f"{registry}/sched_class"))
    except HostPathError as exc:
        raise RefusedError(f"metax GPU {granted.id}: {registry}/sched_class cannot be read ({exc.strerror})") from None
    if current == FIXED_SHARE:
        return
    if live:
        raise RefusedError(
            f"metax GPU {granted.id}: its sgpu subdevices run under scheduling class {current or 'unknown'}, and the "
            f"class cannot change while one is in use; a slice needs {FIXED_SHARE} (free the GPU's slices first)"
        )
    write_sysfs(ctx, f"{registry}/sched_class", FIXED_SHARE_CLASS + "\n")


def create_subdevice(ctx: RespondContext, grant: Grant, granted: Granted, compute: int, vram: int) -> SgpuRecord:
    bus_id = granted.accelerator.topology.pci_bus_id
    if not re.fullmatch(PCI_ADDRESS, bus_id):
        raise RefusedError(f"metax GPU {granted.id}: its PCI address {bus_id[:40]!r} is not one; re-run detection")
    registry = registry_path(bus_id)
    try:
        read_registry(ctx.view, granted.accelerator)
    except ModeError as exc:
        raise RefusedError(f"metax GPU {granted.id}: {exc}") from None
    if not ctx.view.is_dir(registry) or not ctx.view.exists(f"{registry}/create"):
        raise RefusedError(
            f"metax GPU {granted.id}: no sgpu registry at {registry}, so it cannot be sliced; the metax driver "
            "must be loaded with sGPU support"
        )
    path = record_path(ctx, grant)
    alias = f"gpustack-{grant.container.pod_uid}-{grant.container.container}"
    live = subdevices(ctx, registry)
    if ctx.host.exists(path):
        try:
            mine: SgpuRecord | None = read_sgpu_record(ctx, path)
        except ValueError:
            mine = None
        if mine is not None:
            if (mine.bus_id, mine.compute, mine.vram_mib) != (bus_id, compute, vram):
                raise RefusedError(
                    f"metax {grant.container.label}: its record {path} names sgpu{mine.index} on {mine.bus_id} with "
                    f"compute {mine.compute}% / {mine.vram_mib} MiB, not this grant's; a live subdevice is never "
                    "changed (delete the Pod to free it)"
                )
            if mine.index in live:
                return mine  # a retry: the subdevice exists already
    held = set(live) | neighbour_indexes(ctx, path, bus_id)
    index = next((i for i in range(MAX_SUBDEVICES) if i not in held), None)
    if index is None:
        raise RefusedError(f"metax GPU {granted.id}: all {MAX_SUBDEVICES} sgpu subdevices are in use")
    ensure_fixed_share(ctx, granted, registry, live)
    record = SgpuRecord(bus_id=bus_id, index=index, compute=compute, vram_mib=vram, alias=alias)
    try:  # the record first: a subdevice that outlives a crash is still found and reclaimed
        ctx.host.makedirs(ctx.pod_dir(grant.container.pod_uid))
        ctx.host.write_text(path, record.model_dump_json())
    except HostPathError as exc:
        raise RefusedError(f"metax: the sgpu record {path} cannot be written ({exc.strerror})") from None
    write_sysfs(ctx, f"{registry}/create", f"index={index} compute={compute} vram={vram} alias={alias}\n")
    return record


def inject_sliced(injection: Injection, ctx: RespondContext, grant: Grant) -> None:
    budget = grant.budget
    if budget is None:
        raise RefusedError(f"metax {grant.container.label}: a sliced grant without a budget (an allocator bug)")
    if len(grant.accelerators) != 1:
        raise RefusedError(
            f"metax {grant.container.label}: a sliced request is for exactly one GPU (one sgpu subdevice), this "
            f"grant names {len(grant.accelerators)}"
        )
    (granted,) = grant.accelerators
    compute = budget.cores_percent if budget.cores_percent > 0 else 100
    if compute >= 100 and budget.memory_mib >= granted.group.memory:
        injection.log.append(f"metax GPU {granted.id}: a whole-GPU slice takes the native path (no sgpu subdevice)")
        return
    record = create_subdevice(ctx, grant, granted, compute, budget.memory_mib)
    injection.envs["METAX_SGPUS"] = (
        f"sgpu={record.bus_id}#{record.index};compute={record.compute};vram={record.vram_mib};alias={record.alias}"
    )


def reclaim(pod_uid: str, ctx: RespondContext) -> list[str]:
    """Destroy the sGPU subdevices a gone Pod's records name (and the driver still lists), by writing
    the index to the registry's ``destroy`` (**assumed**, like ``create``'s line: to be validated on
    hardware). A record that cannot be read, or a write that fails, is refused: the directory stays."""
    directory = ctx.pod_dir(pod_uid)
    if not ctx.host.is_dir(directory):
        return []
    done: list[str] = []
    try:
        entries = ctx.host.listdir(directory)
    except HostPathError as exc:
        raise RefusedError(f"metax: {directory} cannot be listed ({exc.strerror})") from None
    for entry in entries:
        if not (entry.startswith(RECORD_PREFIX) and entry.endswith(RECORD_SUFFIX)):
            continue
        path = f"{directory}/{entry}"
        try:
            record = read_sgpu_record(ctx, path)
        except ValueError as exc:
            raise RefusedError(
                f"metax: the sgpu record {path} is {exc}; what it made is unknown, so nothing is destroyed and the "
                "reclaim is retried (repair the file, or destroy its subdevice by hand and remove it)"
            ) from None
        registry = registry_path(record.bus_id)
        if ctx.view.is_dir(registry) and record.index in subdevices(ctx, registry):
            write_sysfs(ctx, f"{registry}/destroy", f"{record.index}\n")
            done.append(f"sgpu{record.index} on {record.bus_id} destroyed ({record.alias}: its Pod is gone)")
    return done


class MetaxResponder:
    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def reclaim(self, pod_uid: str, ctx: RespondContext) -> list[str]:
        return reclaim(pod_uid, ctx)

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"metax serves no {grant.family} allocation (it has no hardware partitioning)")
        if not grant.accelerators:
            raise RefusedError(f"metax {grant.container.label}: a grant of no accelerator")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            # supplement §1.7: a partition-backed owner's sidecar needs partition capability; fail closed
            raise RefusedError(
                f"metax {grant.container.label}: the grant names a hardware partition, and MetaX has no "
                "partitioning; refusing rather than exposing a whole GPU"
            )
        granted_ids(grant, str(grant.family))  # one GPU twice is refused (spec "Exclusive and shared")
        injection = Injection()
        inject_nodes(injection, ctx, grant)  # first: no subdevice is made for a GPU that cannot be given
        if grant.family is Family.SLICED:
            inject_sliced(injection, ctx, grant)
        return injection


RESPONDER = MetaxResponder()
