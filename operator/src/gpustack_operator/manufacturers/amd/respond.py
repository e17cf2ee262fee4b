"""AMD's responder: what one container is injected with (spec "Exclusive and shared", "Logical slicing
per manufacturer" AMD part; supplement §1.4, §1.6, §6.1; reference rules §4).

Every family (AMD has no partitioning) starts from the same node injection, which the allocator
makes itself -- there is no container runtime in the path:

* ``/dev/kfd`` once, plus each granted accelerator's ``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>``,
  every one required (a container started without its accelerator is refused, never started). ``N``
  and ``M`` are read from the node view at allocation: the accelerator's KFD node (found by its
  ``unique_id``, the accelerator id) names its render minor, and the render node's device
  ``drm/`` directory its card (:func:`..kfd.physical_indexes`, the numbering detection records);
* ``AMD_VISIBLE_DEVICES=none`` -- an explicit "add nothing" to any amd-container-runtime on the node:
  the variable and the injected nodes union rather than reconcile, so a live value would be a second
  grant channel. It is set unconditionally (not under never-overwrite) for that reason.

``VISIBILITY`` (the sshd sidecar) is exactly that plain injection of the owner's accelerators.

``SLICED`` adds the two enforcers, in one index space -- the positions in ``ROCR_VISIBLE_DEVICES``
(grant order, which is ascending accelerator index):

* ``ROCR_VISIBLE_DEVICES`` = the granted ``GPU-<hex>`` ids, exactly the accelerators whose nodes were
  injected (an entry ROCr cannot resolve yields zero agents, silently);
* ``HSA_CU_MASK`` = ``<pos>:<lo>-<hi>`` per card joined ``;`` -- compute, enforced by ROCr in
  hardware. The window size is :meth:`.cumask.CuMaskTopology.window_cus` (below the card's smallest
  slice is refused with the minimum named; off-atom is aligned down and the delivered percentage
  logged into :attr:`Injection.log`), the window is placed by :func:`.cumask.place` against the
  windows the other live slices on the card hold;
* ``VROCM_DEVICE_MEMORY_LIMIT_<pos>`` = the budget in bare MiB, ``VROCM_LEDGER_PATH`` in the
  per-container directory (mounted read-write at :data:`LEDGER_DIR`), ``LIBVROCM_LOG_LEVEL=1``
  unless the container sets it -- memory, enforced by ``libvrocm.so`` through ``/etc/ld.so.preload``
  (:func:`..respond.mount_preload`, staged directory read-only at :data:`LIBRARY_DIR`);
* the two readers staged beside the library, ``rocm-cumask-check`` and ``rocm-monitor``, each mounted
  read-only at ``/usr/local/bin/<name>`` so they are on the container's ``PATH`` (they are also under
  :data:`LIBRARY_DIR`). A mask fails open, so these are the one-command diagnosis; a tool the staging
  did not produce is not mounted (a bind mount of a missing file fails the container start) and the
  omission is logged.

Where the CU windows live between allocations: one JSON record per sliced container,
``<pods_dir>/<pod uid>/amd-cumask.<container>.json`` (``{"accelerators": {"<id>": [lo, hi]}}``),
beside -- not inside -- the container's mounted working directory, so the container cannot rewrite
the occupancy its neighbours are placed against. A retried container finds its own record and, when
it names the same accelerators with windows of the sizes asked for, gets the same windows again
(idempotent); a neighbour's record that cannot be read fails the allocation closed (placing against
unknown occupancy could stack two tenants on one window while others sit idle). Only live records
are neighbours: a finished Pod's record stays until the Pod is gone, but its slice is no longer
charged (supplement §1.8 rule 7), so its CUs are free -- the room the ledger and the hint read
(:meth:`..respond.RespondContext.record_live`). Records are reclaimed with the pod directory once the
Pod is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, Field

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.amd.cumask import (
    CuMaskTopology,
    CuMaskTopologyError,
    Window,
    delivered_percent,
    place,
    topology_of,
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
    mount_pod_dir,
    mount_preload,
    read_record,
    require_devices,
    set_default,
)

KFD_DEVICE = "/dev/kfd"
LIBRARY = "libvrocm.so"
SUBTREE = "amd"
LIBRARY_DIR = "/usr/local/gpustack/amd"  # the staged amd directory, read-only
LEDGER_DIR = "/var/run/gpustack/amd"  # the per-container working directory, read-write
LEDGER_FILE = "vrocm.ledger"
TOOLS = ("rocm-cumask-check", "rocm-monitor")
TOOLS_DIR = "/usr/local/bin"
RECORD_PREFIX = "amd-cumask."
RECORD_SUFFIX = ".json"


CuIndex = Annotated[int, Field(ge=0, lt=1 << 16)]  # a CU index (an MI300X has 304)


class CuMaskRecord(BaseModel):
    """One sliced container's CU windows, by accelerator id: ``[lo, hi]``. Read strictly
    (:func:`..respond.read_record`): a bound of another type or past any card is a corrupt record."""

    model_config = RECORD_CONFIG

    accelerators: dict[Annotated[str, Field(min_length=1, max_length=256)], tuple[CuIndex, CuIndex]] = Field(
        max_length=64
    )


# -- the node's view of one accelerator -----------------------------------------------------------


def kfd_gpus(view: HostRoot) -> dict[str, kfd.KfdGpu]:
    """Every GPU node of the KFD topology by accelerator id (:func:`..kfd.gpus_by_id`)."""
    try:
        return kfd.gpus_by_id(view)
    except kfd.KfdError as exc:
        raise RefusedError(f"the KFD topology cannot be read ({exc}); is the amdgpu driver loaded?") from None


def gpu_for(gpus: dict[str, kfd.KfdGpu], granted: Granted) -> kfd.KfdGpu:
    gpu = gpus.get(granted.id)
    if gpu is None:
        raise RefusedError(
            f"amd accelerator {granted.id} (index {granted.index}): no KFD node of this node names it, so its "
            "device nodes are unknown; was the card reset or the driver reloaded? (the detector will re-read it)"
        )
    return gpu


def drm_nodes(view: HostRoot, granted: Granted, gpu: kfd.KfdGpu) -> list[str]:
    """``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>`` of one accelerator, from sysfs."""
    try:
        indexes = kfd.physical_indexes(view, gpu.render_minor)
    except kfd.KfdError as exc:
        raise RefusedError(f"amd accelerator {granted.id}: its DRM nodes cannot be read ({exc})") from None
    if len(indexes) != 2:
        raise RefusedError(
            f"amd accelerator {granted.id}: sysfs lists no card and render node under "
            f"/sys/class/drm/renderD{gpu.render_minor}/device/drm; is the amdgpu driver loaded?"
        )
    card, render = indexes
    return [f"/dev/dri/card{card}", f"/dev/dri/renderD{render}"]


def inject_nodes(injection: Injection, ctx: RespondContext, grant: Grant, gpus: dict[str, kfd.KfdGpu]) -> None:
    """The plain node injection every family shares (see the module docstring)."""
    paths = [KFD_DEVICE]
    for granted in grant.accelerators:
        paths.extend(drm_nodes(ctx.view, granted, gpu_for(gpus, granted)))
    require_devices(ctx.view, paths, f"amd {grant.container.label}")
    for path in paths:
        injection.add_device(path)
    injection.envs["AMD_VISIBLE_DEVICES"] = "none"


# -- the CU-window records -------------------------------------------------------------------------


def record_path(ctx: RespondContext, pod_uid: str, container: str) -> str:
    return ctx.pod_dir(pod_uid, f"{RECORD_PREFIX}{container}{RECORD_SUFFIX}")


def read_cumask_record(host: HostRoot, path: str) -> CuMaskRecord:
    """A record, or :class:`ValueError` naming what is wrong with it."""
    record = read_record(host, path, CuMaskRecord, "a CU-window record")
    for accelerator, (lo, hi) in record.accelerators.items():
        if lo < 0 or hi < lo:
            raise ValueError(f"window {lo}-{hi} of {accelerator[:64]!r} is not a CU range")
    return record


def neighbour_windows(ctx: RespondContext, own: str) -> dict[str, list[Window]]:
    """Every other live sliced container's windows on this node, by accelerator: a Pod whose slice
    the ledger no longer charges (finished, or gone) computes nowhere, so its record holds no CU
    (:meth:`..respond.RespondContext.record_live`). A live record that cannot be read fails closed
    (:class:`RefusedError` naming it and the remedy)."""
    held: dict[str, list[Window]] = {}
    pods = ctx.pods_dir.rstrip("/")
    if not ctx.host.is_dir(pods):
        return held
    try:
        uids = ctx.host.listdir(pods)
    except HostPathError as exc:
        raise RefusedError(f"the per-pod directory {pods} cannot be listed ({exc.strerror})") from None
    for uid in uids:
        directory = f"{pods}/{uid}"
        if not ctx.record_live(uid) or not ctx.host.is_dir(directory):
            continue
        try:
            entries = ctx.host.listdir(directory)
        except HostPathError as exc:
            raise RefusedError(
                f"{directory} cannot be listed ({exc.strerror}), so the CU windows other slices hold are unknown"
            ) from None
        for entry in entries:
            if not (entry.startswith(RECORD_PREFIX) and entry.endswith(RECORD_SUFFIX)):
                continue
            path = f"{directory}/{entry}"
            if path == own:
                continue
            try:
                record = read_cumask_record(ctx.host, path)
            except ValueError as exc:
                raise RefusedError(
                    f"another slice's CU-window record {path} is {exc}; the windows it holds are unknown, so no "
                    "window is placed (remove the file if its pod is gone, the allocator then re-reads the node)"
                ) from None
            for accelerator, (lo, hi) in record.accelerators.items():
                held.setdefault(accelerator, []).append(Window(lo, hi))
    return held


def previous(ctx: RespondContext, path: str) -> CuMaskRecord | None:
    """The container's own record from an earlier attempt, or ``None`` (absent or unreadable: it is
    this container's, so it is simply placed again)."""
    if not ctx.host.exists(path):
        return None
    try:
        return read_cumask_record(ctx.host, path)
    except ValueError:
        return None


# -- the sliced half -------------------------------------------------------------------------------


def window_size(topology: CuMaskTopology, granted: Granted, percent: int, log: list[str]) -> int:
    try:
        cus = topology.window_cus(percent)
    except CuMaskTopologyError as exc:
        raise RefusedError(f"amd accelerator {granted.id}: {exc}") from None
    exact = topology.cu * percent
    if cus * 100 != exact:
        log.append(
            f"amd accelerator {granted.id}: {percent}% of {topology.cu} CUs is off the card's "
            f"{topology.quantum}-CU atom; the mask takes {cus} CUs, {delivered_percent(topology, cus)}% delivered"
        )
    return cus


def windows_for(
    ctx: RespondContext, grant: Grant, topologies: dict[str, CuMaskTopology], percent: int, log: list[str]
) -> dict[str, Window]:
    """One window per granted card: the container's earlier windows when they still fit the request,
    else placed against the neighbours'. The record is written before the response leaves."""
    path = record_path(ctx, grant.container.pod_uid, grant.container.container)
    sizes = {g.id: window_size(topologies[g.id], g, percent, log) for g in grant.accelerators}
    earlier = previous(ctx, path)
    if earlier is not None and set(earlier.accelerators) == set(sizes):
        kept = {a: Window(*earlier.accelerators[a]) for a in sizes}
        if all(fits(kept[a], sizes[a], topologies[a]) for a in sizes):
            return kept
    held = neighbour_windows(ctx, path)
    placed: dict[str, Window] = {}
    for granted in grant.accelerators:
        try:
            placed[granted.id] = place(topologies[granted.id], sizes[granted.id], held.get(granted.id, []))
        except CuMaskTopologyError as exc:
            raise RefusedError(f"amd accelerator {granted.id}: {exc}") from None
    record = CuMaskRecord(accelerators={a: (w.lo, w.hi) for a, w in placed.items()})
    try:
        ctx.host.makedirs(ctx.pod_dir(grant.container.pod_uid))
        ctx.host.write_text(path, record.model_dump_json())
    except HostPathError as exc:
        raise RefusedError(f"the CU-window record {path} cannot be written ({exc.strerror})") from None
    return placed


def fits(window: Window, cus: int, topology: CuMaskTopology) -> bool:
    """An earlier window still answers the request: same size, on the grid, on the card."""
    return window.size == cus and window.lo % topology.quantum == 0 and window.hi < topology.cu


def topologies_of(grant: Grant, gpus: dict[str, kfd.KfdGpu]) -> dict[str, CuMaskTopology]:
    return {g.id: topology_of(gpu_for(gpus, g)) for g in grant.accelerators}


def inject_sliced(injection: Injection, ctx: RespondContext, grant: Grant, gpus: dict[str, kfd.KfdGpu]) -> None:
    budget = grant.budget
    if budget is None:
        raise RefusedError(f"amd {grant.container.label}: a sliced grant without a budget (an allocator bug)")
    percent = budget.cores_percent if budget.cores_percent > 0 else 100
    windows = windows_for(ctx, grant, topologies_of(grant, gpus), percent, injection.log)
    mount_preload(injection, ctx, subtree=SUBTREE, container_dir=LIBRARY_DIR, library=LIBRARY, grant=grant)
    mount_tools(injection, ctx)
    env = grant.container.env
    injection.envs["ROCR_VISIBLE_DEVICES"] = ",".join(g.id for g in grant.accelerators)
    injection.envs["HSA_CU_MASK"] = ";".join(windows[g.id].mask(pos) for pos, g in enumerate(grant.accelerators))
    for pos, granted in enumerate(grant.accelerators):  # bare MiB, capped at the card (reference rules §5)
        vram = granted.group.memory
        memory = min(budget.memory_mib, vram) if vram > 0 else budget.memory_mib
        injection.envs[f"VROCM_DEVICE_MEMORY_LIMIT_{pos}"] = str(memory)
    mount_pod_dir(injection, ctx, grant, LEDGER_DIR)
    injection.envs["VROCM_LEDGER_PATH"] = f"{LEDGER_DIR}/{LEDGER_FILE}"
    set_default(injection, env, "LIBVROCM_LOG_LEVEL", "1")


def mount_tools(injection: Injection, ctx: RespondContext, tools: Iterable[str] = TOOLS) -> None:
    staged = f"{ctx.lib_dir.rstrip('/')}/{SUBTREE}"
    for tool in tools:
        host_path = f"{staged}/{tool}"
        if ctx.host.exists(host_path):
            injection.add_mount(f"{TOOLS_DIR}/{tool}", host_path)
        else:
            injection.log.append(f"amd: {host_path} is not staged, so {tool} is not mounted")


class AmdResponder:
    """AMD: node injection for every family, the two enforcers for ``SLICED``."""

    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"amd serves no {grant.family} allocation (it has no hardware partitioning)")
        if not grant.accelerators:
            raise RefusedError(f"amd {grant.container.label}: a grant of no accelerator")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            # supplement §1.7: a partition-backed owner's sidecar needs partition capability, which
            # AMD has not; fail closed rather than hand out the parent card
            raise RefusedError(
                f"amd {grant.container.label}: the grant names a hardware partition, and AMD has no "
                "partitioning; refusing rather than exposing a whole card"
            )
        granted_ids(grant, str(grant.family))  # one accelerator twice is refused (spec "Exclusive and shared")
        injection = Injection()
        gpus = kfd_gpus(ctx.view)
        inject_nodes(injection, ctx, grant, gpus)
        if grant.family is Family.SLICED:
            inject_sliced(injection, ctx, grant, gpus)
        return injection


RESPONDER = AmdResponder()
