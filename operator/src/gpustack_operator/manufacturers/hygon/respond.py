"""Hygon's responder: what one container is injected with (spec "Exclusive and shared",
"Partitioned", "Positional injection order"; supplement §1.4, §1.6, §6.1; reference rules §9).

Hygon has no container runtime in the path, so the allocator injects the device nodes itself, for
every family (supplement §6.1: ``/dev/kfd``, ``/dev/mkfd``, ``/dev/dri/card*``, ``/dev/dri/renderD*``):

* ``/dev/kfd`` once, and each granted DCU's ``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>`` -- all
  required. ``N``/``M`` are read at allocation from the node view, as detection reads them: the
  DCU's KFD node (by its ``unique_id``, the accelerator id) names its render minor, whose device
  ``drm/`` directory lists the card (hydcu is amdgpu's fork, :mod:`..kfd`);
* ``/dev/mkfd`` once when the node has it (DTK's hyhal management node, held by the vendor's
  ``hymgr``; the MIG material lists it among a partition's three nodes). A node without it is served
  without it and the response logs that: the fixture DTK trees do not carry it and the driver alone
  does not create it.

``EXCLUSIVE``, ``SHARED`` and ``VISIBILITY`` of a whole-card owner are exactly that.

``SLICED`` (one DCU only -- the admission rule, refused otherwise) adds a ``vdev0.conf``
(:mod:`.vdev`) in the container's own directory ``<pods_dir>/<uid>/<container>/hygon-vdev/``,
mounted read-only at ``/etc/vdev/docker/`` (supplement §1.6). Its CU bits are the lowest the other
slices on the card do not hold, its ``vdev_id`` the lowest free node-wide, its ``pipe_id`` the lowest
free on the card -- read from every other *live* container's file under the pods directory (a Pod
whose slice the ledger no longer charges -- finished, or gone -- holds nothing:
:meth:`..respond.RespondContext.record_live`, the rule the ledger charges by). A corrupt neighbour
fails the allocation closed, naming the files and the remedy (reference rules §9): a file that
cannot be read, two files naming one ``vdev_id``, or one ``pipe_id`` or one CU on one card, and a
CU mask with bits past its card's CU count. A retried container whose ``vdev0.conf`` already names
the same DCU keeps its slot (same file, same ids -- the spec: "a slot is reused only when the file at
that path already names the same accelerator"); one naming another DCU is placed afresh.

``PARTITIONED`` (and ``VISIBILITY`` of a partition-backed owner) injects the instance the allocator
materialised through :class:`.partition.DmiPartitioner`: its registry file
``/etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf`` bind-mounted read-only at its own host path (the
runtime scans that directory by absolute path), ``DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>`` (the vendor's
selector, set unconditionally: it is the grant), the parent DCU's nodes as above, and the host's
``/opt/hyhal`` read-only at the same path when the node has it (measured: a DTK image's bundled copy
lacks ``libhydmi.so`` and sees no device without the host's). The registry file must exist in the
node view -- a recorded instance whose file is gone is not live, so it fails closed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.hygon import partition, vdev
from gpustack_operator.manufacturers.respond import (
    Family,
    Grant,
    Granted,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    require_devices,
)

KFD_DEVICE = "/dev/kfd"
MKFD_DEVICE = "/dev/mkfd"
VDEV_SUBDIR = "hygon-vdev"
VDEV_FILE = "vdev0.conf"
VDEV_MOUNT = "/etc/vdev/docker"
HYHAL_DIR = "/opt/hyhal"
MIG_VISIBLE = "DMI_MIG_VISIBLE_DEVICE"


def kfd_gpus(view: HostRoot) -> dict[str, kfd.KfdGpu]:
    """Every GPU node of the KFD topology by accelerator id (:func:`..kfd.gpus_by_id`)."""
    try:
        return kfd.gpus_by_id(view)
    except kfd.KfdError as exc:
        raise RefusedError(f"hygon: the KFD topology cannot be read ({exc}); is the hydcu driver loaded?") from None


def gpu_for(gpus: dict[str, kfd.KfdGpu], granted: Granted) -> kfd.KfdGpu:
    gpu = gpus.get(granted.id)
    if gpu is None:
        raise RefusedError(
            f"hygon DCU {granted.id} (index {granted.index}): no KFD node of this node names it, so its device "
            "nodes are unknown; was the driver reloaded? (the detector will re-read it)"
        )
    return gpu


def drm_nodes(view: HostRoot, granted: Granted, gpu: kfd.KfdGpu) -> list[str]:
    try:
        indexes = kfd.physical_indexes(view, gpu.render_minor)
    except kfd.KfdError as exc:
        raise RefusedError(f"hygon DCU {granted.id}: its DRM nodes cannot be read ({exc})") from None
    if len(indexes) != 2:
        raise RefusedError(
            f"hygon DCU {granted.id}: sysfs lists no card and render node under "
            f"/sys/class/drm/renderD{gpu.render_minor}/device/drm; is the hydcu driver loaded?"
        )
    return [f"/dev/dri/card{indexes[0]}", f"/dev/dri/renderD{indexes[1]}"]


def inject_nodes(injection: Injection, ctx: RespondContext, grant: Grant, gpus: dict[str, kfd.KfdGpu]) -> None:
    paths = [KFD_DEVICE]
    for granted in grant.accelerators:
        paths.extend(drm_nodes(ctx.view, granted, gpu_for(gpus, granted)))
    require_devices(ctx.view, paths, f"hygon {grant.container.label}")
    if ctx.view.exists(MKFD_DEVICE):
        paths.insert(1, MKFD_DEVICE)
    else:
        injection.log.append(f"hygon: {MKFD_DEVICE} does not exist on this node; injected without it")
    for path in paths:
        injection.add_device(path)


# -- sliced: vdev0.conf ----------------------------------------------------------------------------


def vdev_dir(ctx: RespondContext, pod_uid: str, container: str) -> str:
    return ctx.pod_dir(pod_uid, container, VDEV_SUBDIR)


@dataclass(frozen=True)
class Neighbour:
    """Another live slice's ``vdev*.conf``: where it is and what it holds."""

    path: str
    config: vdev.Vdev


def neighbours(ctx: RespondContext, own_dir: str) -> list[Neighbour]:
    """Every other live container's ``vdev*.conf`` on this node (a Pod whose slice is no longer
    charged -- finished, or gone -- holds nothing: :meth:`RespondContext.record_live`); one that
    cannot be read fails closed."""
    pods = ctx.pods_dir.rstrip("/")
    found: list[Neighbour] = []
    if not ctx.host.is_dir(pods):
        return found
    for uid in listing(ctx.host, pods):
        if not ctx.record_live(uid) or not ctx.host.is_dir(f"{pods}/{uid}"):
            continue
        for container in listing(ctx.host, f"{pods}/{uid}"):
            directory = f"{pods}/{uid}/{container}/{VDEV_SUBDIR}"
            if directory == own_dir or not ctx.host.is_dir(directory):
                continue
            for name in listing(ctx.host, directory):
                if not (name.startswith("vdev") and name.endswith(".conf")):
                    continue
                path = f"{directory}/{name}"
                try:
                    found.append(Neighbour(path, vdev.parse(ctx.host.read_text(path))))
                except (HostPathError, ValueError) as exc:
                    raise RefusedError(
                        f"hygon: another slice's config {path} cannot be read ({exc}); the CUs and ids it holds are "
                        f"unknown, so no slice is placed ({REMEDY})"
                    ) from None
    return found


REMEDY = "remove the file if its pod is gone, or delete the pod that holds it"


def check_neighbours(found: list[Neighbour], cus_by_bus: Mapping[str, int]) -> None:
    """Reference rules §9: a corrupt neighbouring config fails the allocation closed. Beyond a file
    that does not parse, live configs that contradict each other or the card are corrupt: two naming
    one ``vdev_id`` (unique node-wide), two on one card naming one ``pipe_id`` or sharing a CU (Hygon
    slices do not overlap), and a CU mask with bits past its card's CU count (``cus_by_bus``, by
    lowercase PCI address; a card this node no longer shows is not checked). Placing against such a
    set would hand an id or a CU out twice; :class:`RefusedError` names the files and the remedy."""
    for one, other in itertools.combinations(found, 2):
        a, b = one.config, other.config
        clash = None
        if a.vdev_id == b.vdev_id:
            clash = f"both name vdev_id {a.vdev_id}, which is unique on the node"
        elif a.pci_bus_id == b.pci_bus_id and a.pipe_id == b.pipe_id:
            clash = f"both name pipe_id {a.pipe_id} on DCU {a.pci_bus_id}, which is unique on a card"
        elif a.pci_bus_id == b.pci_bus_id and a.cu_mask & b.cu_mask:
            shared = (a.cu_mask & b.cu_mask).bit_length() - 1
            clash = f"both hold CU {shared} of DCU {a.pci_bus_id}, and Hygon slices do not overlap"
        if clash is not None:
            raise RefusedError(
                f"hygon: the slice configs {one.path} and {other.path} are corrupt: {clash}; no slice is placed "
                f"against them ({REMEDY})"
            )
    for neighbour in found:
        cus = cus_by_bus.get(neighbour.config.pci_bus_id)
        if cus is not None and neighbour.config.cu_mask >> cus:
            raise RefusedError(
                f"hygon: the slice config {neighbour.path} is corrupt: its cu_mask names CU "
                f"{neighbour.config.cu_mask.bit_length() - 1}, past the {cus} CUs of DCU "
                f"{neighbour.config.pci_bus_id}; no slice is placed against it ({REMEDY})"
            )


def listing(host: HostRoot, path: str) -> list[str]:
    try:
        return host.listdir(path)
    except HostPathError as exc:
        raise RefusedError(f"hygon: {path} cannot be listed ({exc.strerror}), so the slices held are unknown") from None


def earlier(ctx: RespondContext, path: str, bus_id: str) -> vdev.Vdev | None:
    """The container's own file from an earlier attempt, when it names the same DCU."""
    try:
        text = ctx.host.read_optional(path)
    except HostPathError:
        return None
    if text is None:
        return None
    try:
        mine = vdev.parse(text)
    except ValueError:
        return None
    return mine if mine.pci_bus_id == bus_id else None


def place_vdev(
    ctx: RespondContext, grant: Grant, granted: Granted, cus: int, cus_by_bus: Mapping[str, int] | None = None
) -> tuple[str, vdev.Vdev]:
    budget = grant.budget
    if budget is None:
        raise RefusedError(f"hygon {grant.container.label}: a sliced grant without a budget (an allocator bug)")
    bus_id = granted.accelerator.topology.pci_bus_id.lower()
    if not bus_id:
        raise RefusedError(f"hygon DCU {granted.id}: it reports no PCI bus id, which vdev.conf names it by")
    directory = vdev_dir(ctx, grant.container.pod_uid, grant.container.container)
    path = f"{directory}/{VDEV_FILE}"
    if not 0 < cus <= vdev.MASK_BITS:
        raise RefusedError(
            f"hygon DCU {granted.id}: it reports {cus} CUs, and vdev.conf's two 64-bit cu_mask words address "
            f"1 to {vdev.MASK_BITS}; it cannot be sliced"
        )
    percent = budget.cores_percent if 0 < budget.cores_percent <= 100 else 100
    count = vdev.cu_count(percent, cus)
    found = neighbours(ctx, directory)
    check_neighbours(found, {**(cus_by_bus or {}), bus_id: cus})
    others = [n.config for n in found]
    mine = earlier(ctx, path, bus_id)
    if mine is not None and mine.cu_count == count and mine.memory_mib == budget.memory_mib:
        return directory, mine  # the slot is this container's already
    on_card = [o for o in others if o.pci_bus_id == bus_id]
    held = 0
    for other in on_card:
        held |= other.cu_mask
    mask = vdev.lowest_free_bits(count, cus, held)
    if mask is None:
        free = cus - (held & ((1 << cus) - 1)).bit_count()
        raise RefusedError(
            f"hygon DCU {granted.id}: {percent}% is {count} of its {cus} CUs, but other slices hold all but {free}; "
            "Hygon slices do not overlap"
        )
    vdev_id = keep(mine.vdev_id if mine else None, [o.vdev_id for o in others], vdev.MAX_VDEV_ID)
    if vdev_id is None:
        raise RefusedError(f"hygon: every vdev_id (0-{vdev.MAX_VDEV_ID - 1}) on this node is held by another slice")
    pipe_id = keep(mine.pipe_id if mine else None, [o.pipe_id for o in on_card], vdev.MAX_PIPE_ID)
    if pipe_id is None:
        raise RefusedError(
            f"hygon DCU {granted.id}: every pipe_id (0-{vdev.MAX_PIPE_ID - 1}) on it is held by another slice"
        )
    config = vdev.Vdev(
        pci_bus_id=bus_id,
        cu_mask=mask,
        cu_count=count,
        memory_mib=budget.memory_mib,
        device_id=granted.index,
        vdev_id=vdev_id,
        pipe_id=pipe_id,
    )
    try:
        ctx.host.makedirs(directory)
        ctx.host.write_text(path, config.render())
    except HostPathError as exc:
        raise RefusedError(f"hygon: {path} cannot be written ({exc.strerror})") from None
    return directory, config


def keep(previous: int | None, used: list[int], limit: int) -> int | None:
    """The container's earlier id when still free, else the lowest free one."""
    if previous is not None and previous not in used and previous < limit:
        return previous
    return vdev.lowest_free(used, limit)


def inject_sliced(injection: Injection, ctx: RespondContext, grant: Grant, gpus: dict[str, kfd.KfdGpu]) -> None:
    if len(grant.accelerators) != 1:
        raise RefusedError(
            f"hygon {grant.container.label}: a sliced request is admitted for exactly one DCU "
            f"(vdev0.conf models one), this grant names {len(grant.accelerators)}; request one slice per container"
        )
    (granted,) = grant.accelerators
    gpu = gpu_for(gpus, granted)
    cus_by_bus = {g.bus_id.lower(): g.cu_count for g in gpus.values()}
    directory, config = place_vdev(ctx, grant, granted, gpu.cu_count, cus_by_bus)
    injection.add_mount(VDEV_MOUNT, directory)
    injection.log.append(
        f"hygon DCU {granted.id}: vdev_id {config.vdev_id}, pipe_id {config.pipe_id}, {config.cu_count} CUs, "
        f"{config.memory_mib} MiB"
    )


# -- partitioned ----------------------------------------------------------------------------------


def inject_partition(injection: Injection, ctx: RespondContext, grant: Grant) -> None:
    instance = grant.partition
    if instance is None:
        raise RefusedError(f"hygon {grant.container.label}: a partition grant without its instance (an allocator bug)")
    if len(grant.accelerators) != 1 or grant.accelerators[0].id != instance.accelerator:
        raise RefusedError(
            f"hygon {grant.container.label}: a container sees exactly one Hygon partition, on its own DCU "
            f"(the grant names {len(grant.accelerators)} accelerator(s) for {instance.uuid})"
        )
    registry = instance.registry_file
    if not registry or not registry.startswith(f"{partition.MIG_CONFIG_DIR}/"):
        raise RefusedError(
            f"hygon: partition {instance.uuid} records no registry file under {partition.MIG_CONFIG_DIR}"
        )
    if not ctx.view.exists(registry):
        raise RefusedError(
            f"hygon: partition {instance.uuid}: its registry file {registry} does not exist on this node, so the "
            "instance is gone; the allocator materialises a new one when the Pod is recreated"
        )
    injection.add_mount(registry, registry)
    injection.envs[MIG_VISIBLE] = instance.uuid
    if ctx.view.is_dir(HYHAL_DIR):
        injection.add_mount(HYHAL_DIR, HYHAL_DIR)
    else:
        injection.log.append(f"hygon: {HYHAL_DIR} is not on this node; the image must bring a MIG-capable hyhal")


class HygonResponder:
    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.PARTITIONED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if not grant.accelerators:
            raise RefusedError(f"hygon {grant.container.label}: a grant of no accelerator")
        if grant.family is Family.VISIBILITY and grant.owner_family is Family.PARTITIONED and grant.partition is None:
            # supplement §1.7: a partition-backed owner's sidecar is given the partition, never the parent
            raise RefusedError(
                f"hygon {grant.container.label}: the owner holds a Hygon partition but none is recorded for its "
                "sidecar; refusing rather than exposing the parent DCU"
            )
        granted_ids(grant, str(grant.family))  # one DCU twice is refused (spec "Exclusive and shared")
        injection = Injection()
        gpus = kfd_gpus(ctx.view)
        inject_nodes(injection, ctx, grant, gpus)  # first: no slice is written for a DCU that cannot be given
        if grant.family is Family.PARTITIONED or (grant.family is Family.VISIBILITY and grant.partition is not None):
            inject_partition(injection, ctx, grant)
        elif grant.family is Family.SLICED:
            inject_sliced(injection, ctx, grant, gpus)
        return injection


RESPONDER = HygonResponder()
