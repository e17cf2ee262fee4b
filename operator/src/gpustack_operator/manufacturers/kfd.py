"""The amdgpu kernel interface — KFD topology plus the DRM device — shared by AMD and Hygon.

AMD's ``amdgpu`` and Hygon's ``hydcu``/``hycu`` (a fork of it) publish everything detection needs
in sysfs, in the kernel's own formats, so this reader needs no vendor library:

* ``/sys/class/kfd/kfd/topology/nodes/<N>/properties`` — one ``<key> <value>`` line per property,
  the value an unsigned decimal integer (``drivers/gpu/drm/amd/amdkfd/kfd_topology.c``,
  ``node_show``). A CPU node has ``simd_count 0``; an APU node has both CPU cores and SIMDs. Node
  order is the order ROCr enumerates its agents in, so it is the enumeration order here too.
* ``nodes/<N>/mem_banks/<M>/properties`` — ``size_in_bytes`` of the node's device memory.
* ``/sys/class/drm/renderD<drm_render_minor>/device`` — the render node's device (the PCI
  function, or an ``amdgpu_xcp`` platform device for a compute partition), holding ``drm/card<N>``
  and ``drm/renderD<N>`` (the device nodes an allocation injects).
* ``/sys/bus/pci/devices/<bdf>/`` — ``mem_info_vram_total`` / ``mem_info_vram_used`` (bytes),
  ``gpu_busy_percent``, ``product_name`` (board FRU, often absent), ``revision``,
  ``ras/umc_err_count``, ``hwmon/hwmon*/temp*_input`` (millidegrees) and ``power1_average`` /
  ``power1_input`` (microwatts).

What is vendor knowledge — how a card is named, its family label, where the driver and runtime
versions live, how many logical slices it offers — stays in the vendor folders, which hand it in as
a :class:`KfdVendor`. Which KFD node belongs to which manufacturer is decided by the PCI function's
vendor id (the KFD ``vendor_id`` only when the node's function is not on the scanned bus).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpustack_operator.host import HostRoot
from gpustack_operator.host.root import HostPathError
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers.base import (
    AcceleratorMetrics,
    DetectContext,
    Detected,
    DetectOutcome,
    Dropped,
    Measured,
    MonitorOutcome,
    Unmeasured,
    bus_shows_none,
)
from gpustack_operator.manufacturers.groups import Found, build_groups

log = logging.getLogger(__name__)

KFD_CLASS = "/sys/class/kfd"
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"

_KEY = re.compile(r"[a-z][a-z0-9_]*")
_UINT = re.compile(r"[0-9]{1,20}")  # "%llu": int() refuses 4300+ digits, and 21 are already past u64
_U64_MAX = 2**64 - 1
_CARD = re.compile(r"card([0-9]+)")
_RENDER = re.compile(r"renderD([0-9]+)")

# The properties a GPU node must carry for an accelerator to be described at all.
GPU_REQUIRED = (
    "simd_count",
    "simd_per_cu",
    "array_count",
    "simd_arrays_per_engine",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "drm_render_minor",
    "unique_id",
)


class KfdError(Exception):
    """A KFD or DRM file could not be read, or holds what the kernel never writes there."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# -- parsing -----------------------------------------------------------------------------------


def _uint(value: str) -> int | None:
    """An unsigned decimal as the kernel prints one (``%llu``); ``None`` for anything else."""
    if not _UINT.fullmatch(value):
        return None
    number = int(value)
    return number if number <= _U64_MAX else None


def parse_properties(text: str, path: str = "properties") -> dict[str, int]:
    """``<key> <value>`` lines (``%s %llu``) → a dict. Anything else raises :class:`KfdError`.

    The kernel prints every value as an unsigned decimal integer (``sysfs_show_32bit_prop`` /
    ``sysfs_show_64bit_prop``), so a line that is not exactly a lowercase key and a decimal value,
    a repeated key, or an empty file is garbled: what it means cannot be known, so it is refused
    rather than half-read.
    """
    props: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise KfdError(path, f"line {lineno} is not '<key> <value>': {line.strip()[:60]!r}")
        key, value = parts
        if not _KEY.fullmatch(key):
            raise KfdError(path, f"line {lineno} has no property name: {key[:40]!r}")
        number = _uint(value)
        if number is None:
            raise KfdError(path, f"{key} is {value[:40]!r}, not an unsigned decimal integer")
        if key in props:
            raise KfdError(path, f"{key} appears twice")
        props[key] = number
    if not props:
        raise KfdError(path, "holds no properties")
    return props


def decode_gfx_target(version: int) -> str | None:
    """``gfx_target_version`` → the gfx name ROCr gives the agent (``90402`` → ``gfx942``).

    The kernel encodes ``major * 10000 + minor * 100 + stepping`` in decimal (``90010`` is
    ``gfx90a``, ``110001`` is ``gfx1101``); ROCr prints the major and minor in decimal and the
    stepping in hex. ``0`` (a CPU node) and values no gfx name can spell (minor above 9, stepping
    above 15) are ``None``.
    """
    if version <= 0:
        return None
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    if major == 0 or minor > 9 or step > 15:
        return None
    return f"gfx{major}{minor}{step:x}"


def parse_umc_err_count(text: str) -> tuple[int, int] | None:
    """``ras/umc_err_count`` (``ue: <n>`` / ``ce: <n>`` lines) → (uncorrectable, correctable).

    ``None`` when the file does not have that shape; a health signal that cannot be read marks
    nothing unhealthy."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        number = _uint(value.strip())
        if key.strip() in ("ue", "ce") and number is not None:
            found[key.strip()] = number
    if set(found) != {"ue", "ce"}:
        return None
    return found["ue"], found["ce"]


def normalize_version(version: str) -> str:
    """The reference's ``NormalizeVersion``: keep ``major.minor`` (``6.2.0-66`` → ``6.2``)."""
    version = version.strip()
    parts = version.split(".")
    if len(parts) < 2:
        return version
    return f"{parts[0]}.{parts[1]}"


def bus_id_of(domain: int, location_id: int) -> str:
    """KFD ``domain`` + ``location_id`` (``pci_dev_id``: bus << 8 | devfn) → ``0000:05:00.0``."""
    return f"{domain:04x}:{(location_id >> 8) & 0xFF:02x}:{(location_id >> 3) & 0x1F:02x}.{location_id & 7}"


# -- family ------------------------------------------------------------------------------------

# AMDGPU_FAMILY_* ids (include/uapi/drm/amdgpu_drm.h) and the names the reference publishes for
# them as the ``family`` label (its HSA binding's table): users switching expect the same value.
FAMILY_NAMES: Mapping[int, str] = {
    110: "Southern Islands",
    120: "Sea Islands",
    125: "Kaveri",
    130: "Volcanic Islands",
    135: "Carrizo",
    141: "Arctic Islands",
    142: "Raven",
    143: "Navi",
    144: "Van Gogh",
    145: "GC 11.0.0",
    146: "Yellow Carp",
    148: "GC 11.0.1",
    149: "GC 10.3.6",
    150: "GC 11.5.0",
    151: "GC 10.3.7",
    152: "GC 12.0.0",
}

# gfx target → AMDGPU family id, as the kernel assigns it from the GC IP version
# (amdgpu_discovery.c) and KFD derives the gfx target from the same IP version (kfd_device.c).
_FAMILY_BY_GFX: Mapping[str, int] = {
    "gfx902": 142,  # Raven
    "gfx909": 142,  # Raven2
    "gfx90c": 142,  # Renoir
    "gfx1033": 144,  # Van Gogh
    "gfx1035": 146,  # Yellow Carp (Rembrandt)
    "gfx1036": 149,
    "gfx1037": 151,
    "gfx1103": 148,  # Phoenix
}


def family_id_of(gfx: str) -> int | None:
    """The AMDGPU family of a gfx target when the node does not print ``family_id`` itself."""
    if gfx in _FAMILY_BY_GFX:
        return _FAMILY_BY_GFX[gfx]
    if re.fullmatch(r"gfx9[0-9a-f]{2}", gfx):
        return 141  # AMDGPU_FAMILY_AI: every gfx9 dGPU, Vega10 through MI300
    if re.fullmatch(r"gfx10[0-9][0-9a-f]", gfx):
        return 143  # AMDGPU_FAMILY_NV
    if gfx in ("gfx1100", "gfx1101", "gfx1102"):
        return 145  # AMDGPU_FAMILY_GC_11_0_0
    if re.fullmatch(r"gfx115[0-9a-f]", gfx):
        return 150
    if re.fullmatch(r"gfx120[0-9a-f]", gfx):
        return 152
    return None


# -- the topology ------------------------------------------------------------------------------


@dataclass(frozen=True)
class KfdNode:
    """One KFD topology node as read: its number, properties and device-memory banks."""

    index: int
    path: str
    props: Mapping[str, int]
    mem_bank_bytes: int | None = None  # sum of mem_banks/*/size_in_bytes; None when none listed

    @property
    def is_gpu(self) -> bool:
        return self.props.get("simd_count", 0) > 0


@dataclass(frozen=True)
class KfdGpu:
    """A GPU node, its shape derived the way the HSA runtime derives it (libhsakmt ``topology.c``)."""

    node: KfdNode
    gfx: str  # "gfx942"
    cu_count: int  # simd_count / simd_per_cu (simd_count is already multiplied by num_xcc)
    shader_engines: int  # array_count / simd_arrays_per_engine: HSA's NUM_SHADER_ENGINES
    shader_arrays_per_engine: int
    xcc: int  # num_xcc; 1 when the kernel predates the property (libhsakmt's rule)
    vendor_id: int
    device_id: int
    bus_id: str
    render_minor: int
    unique_id: int  # 0: the card has no unique id, so no identity
    family_id: int | None

    @property
    def uuid(self) -> str:
        """What ROCr's agent UUID and ``ROCR_VISIBLE_DEVICES`` say: ``GPU-`` + 16 hex digits."""
        return f"GPU-{self.unique_id:016x}"


def gpu_of(node: KfdNode) -> KfdGpu:
    """Derive the GPU view of a node; missing or contradictory properties raise :class:`KfdError`."""
    props = node.props
    missing = [k for k in GPU_REQUIRED if k not in props]
    if missing:
        raise KfdError(node.path, f"a GPU node without {', '.join(missing)}")
    simd_count, simd_per_cu = props["simd_count"], props["simd_per_cu"]
    if simd_per_cu == 0 or simd_count % simd_per_cu:
        raise KfdError(node.path, f"simd_count {simd_count} is not a whole number of {simd_per_cu}-SIMD CUs")
    gfx = decode_gfx_target(props["gfx_target_version"])
    if gfx is None:
        raise KfdError(node.path, f"gfx_target_version {props['gfx_target_version']} names no gfx target")
    arrays_per_engine = props["simd_arrays_per_engine"]
    engines = props["array_count"] // arrays_per_engine if arrays_per_engine else 0
    return KfdGpu(
        node=node,
        gfx=gfx,
        cu_count=simd_count // simd_per_cu,
        shader_engines=engines,
        shader_arrays_per_engine=arrays_per_engine,
        xcc=props.get("num_xcc", 1),
        vendor_id=props["vendor_id"],
        device_id=props["device_id"],
        bus_id=bus_id_of(props.get("domain", 0), props["location_id"]),
        render_minor=props["drm_render_minor"],
        unique_id=props["unique_id"],
        family_id=props.get("family_id") or family_id_of(gfx),
    )


def kfd_present(host: HostRoot) -> bool:
    """``/sys/class/kfd`` exists only while amdgpu (or hydcu) has brought KFD up."""
    return host.exists(KFD_CLASS)


def read_text(host: HostRoot, path: str) -> str:
    try:
        return host.read_text(path)
    except HostPathError as exc:
        raise KfdError(path, exc.strerror or "unreadable") from None


def read_optional(host: HostRoot, path: str) -> str | None:
    try:
        return host.read_optional(path)
    except HostPathError as exc:
        raise KfdError(path, exc.strerror or "unreadable") from None


def listdir_optional(host: HostRoot, path: str) -> list[str]:
    if not host.is_dir(path):
        return []
    try:
        return host.listdir(path)
    except HostPathError as exc:
        raise KfdError(path, exc.strerror or "unreadable") from None


def read_uint(host: HostRoot, path: str) -> int | None:
    """A sysfs file holding one unsigned integer; ``None`` when absent, :class:`KfdError` if garbled."""
    text = read_optional(host, path)
    if text is None:
        return None
    value = text.strip()
    number = _uint(value)
    if number is None:
        raise KfdError(path, f"holds {value[:40]!r}, not an unsigned integer")
    return number


def read_nodes(host: HostRoot) -> list[KfdNode]:
    """Every topology node in numeric order. Raises :class:`KfdError` naming the file at fault."""
    try:
        names = host.listdir(KFD_NODES)
    except HostPathError as exc:
        raise KfdError(KFD_NODES, exc.strerror or "unreadable") from None
    nodes = []
    for name in sorted((n for n in names if n.isascii() and n.isdigit()), key=int):  # int() refuses "²"
        path = f"{KFD_NODES}/{name}"
        props = parse_properties(read_text(host, f"{path}/properties"), f"{path}/properties")
        banks = None
        if props.get("simd_count", 0) > 0:
            banks = read_mem_banks(host, path)
        nodes.append(KfdNode(index=int(name), path=f"{path}/properties", props=props, mem_bank_bytes=banks))
    return nodes


def gpus_by_id(host: HostRoot) -> dict[str, KfdGpu]:
    """Every GPU node of the KFD topology by accelerator id (the ``GPU-<hex>`` of its unique id) --
    what an allocation looks its accelerator up by. A node that cannot be read as a GPU is skipped
    (the accelerator it would have named is then not found); :class:`KfdError` when the topology
    itself cannot be read."""
    gpus: dict[str, KfdGpu] = {}
    for node in read_nodes(host):
        if not node.is_gpu:
            continue
        try:
            gpu = gpu_of(node)
        except KfdError:
            continue
        if gpu.unique_id:
            gpus[gpu.uuid] = gpu
    return gpus


def read_mem_banks(host: HostRoot, node_path: str) -> int | None:
    total = None
    for bank in listdir_optional(host, f"{node_path}/mem_banks"):
        path = f"{node_path}/mem_banks/{bank}/properties"
        size = parse_properties(read_text(host, path), path).get("size_in_bytes")
        if size is not None:
            total = (total or 0) + size
    return total


# -- the DRM side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrmReading:
    """What the PCI function and the render node's device say about one accelerator."""

    pci_path: str  # /sys/bus/pci/devices/<bdf>
    vram_total: int | None  # bytes (mem_info_vram_total)
    product_name: str | None
    revision: str | None  # "c8"
    physical_indexes: list[int] = field(default_factory=list)  # [card, render]
    uncorrectable_errors: int | None = None


def read_drm(host: HostRoot, gpu: KfdGpu) -> DrmReading:
    pci = f"/sys/bus/pci/devices/{gpu.bus_id}"
    product = read_optional(host, f"{pci}/product_name")
    revision = read_optional(host, f"{pci}/revision")
    try:  # a health signal, not a measurement: unreadable marks nothing unhealthy
        ras = read_optional(host, f"{pci}/ras/umc_err_count")
    except KfdError as exc:
        log.debug("%s", exc)
        ras = None
    counts = parse_umc_err_count(ras) if ras is not None else None
    return DrmReading(
        pci_path=pci,
        vram_total=read_uint(host, f"{pci}/mem_info_vram_total"),
        product_name=(product.strip() or None) if product is not None else None,
        revision=revision.strip().lower().removeprefix("0x") if revision else None,
        physical_indexes=physical_indexes(host, gpu.render_minor),
        uncorrectable_errors=counts[0] if counts else None,
    )


def physical_indexes(host: HostRoot, render_minor: int) -> list[int]:
    """``[card N, render minor]`` from the render node's device ``drm/`` directory — the driver's
    own numbering, and the ``/dev/dri`` nodes an allocation injects. Empty when no card is listed."""
    card = render = None
    for entry in listdir_optional(host, f"/sys/class/drm/renderD{render_minor}/device/drm"):
        if m := _CARD.fullmatch(entry):
            card = int(m.group(1))
        elif m := _RENDER.fullmatch(entry):
            render = int(m.group(1))
    if card is None:
        return []
    return [card] if render is None else [card, render]


def vram_bytes(sysfs_total: int | None, kfd_total: int | None, partitioned: bool) -> int | None:
    """The accelerator's memory, by AMD SMI's rule (``vram_total_prefer_kfd``): the DRM
    ``mem_info_vram_total`` on a whole discrete card, the KFD memory banks when that file is absent
    or zero, when the card is split into compute partitions (the file is the whole card's), or when
    the banks exceed it (an APU, whose file is only the BIOS carve-out)."""
    if not sysfs_total:
        return kfd_total or None
    if kfd_total and (partitioned or kfd_total > sysfs_total):
        return kfd_total
    return sysfs_total


# -- one pass ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KfdAccelerator:
    gpu: KfdGpu
    drm: DrmReading
    memory_bytes: int | None


def belongs(ctx: DetectContext, gpu: KfdGpu) -> bool:
    """Is this node the manufacturer's? Its PCI function's vendor decides; the KFD ``vendor_id``
    only when the function is not on the scanned bus."""
    vendor = ctx.manufacturer.pci.vendor
    for device in ctx.pci.devices:
        if device.bus_id == gpu.bus_id:
            return device.vendor == vendor
    return f"{gpu.vendor_id:04x}" == vendor


def enumerate_accelerators(ctx: DetectContext) -> list[KfdAccelerator]:
    """This manufacturer's GPU nodes, in KFD order. Raises :class:`KfdError`."""
    gpus = [gpu_of(n) for n in read_nodes(ctx.view) if n.is_gpu]
    mine = [g for g in gpus if belongs(ctx, g)]
    per_function = Counter(g.bus_id for g in mine)
    out = []
    for gpu in mine:
        drm = read_drm(ctx.view, gpu)
        partitioned = per_function[gpu.bus_id] > 1
        memory = vram_bytes(drm.vram_total, gpu.node.mem_bank_bytes, partitioned)
        out.append(KfdAccelerator(gpu=gpu, drm=drm, memory_bytes=memory))
    return out


def precheck(ctx: DetectContext) -> DetectOutcome | None:
    """The outcome when there is nothing to read: the PCI scan cannot vouch for this vendor
    (``Unmeasured``), the bus has no card, or KFD is not up (``Detected([])``)."""
    problems = ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor)
    if problems:
        return Unmeasured("; ".join(problems))
    if bus_shows_none(ctx):  # the one rule the registry also applies before importing a backend
        log.debug("%s: no accelerator on the PCI bus", ctx.manufacturer.name)
        return Detected([])
    if not kfd_present(ctx.view):
        log.info(
            "%s: %s is absent (the driver is not loaded), so nothing is detected", ctx.manufacturer.name, KFD_CLASS
        )
        return Detected([], driver=f"{KFD_CLASS} is absent: the kernel driver has not brought KFD up (not loaded)")
    return None


# -- what a vendor adds ------------------------------------------------------------------------


@dataclass(frozen=True)
class KfdVendor:
    """A manufacturer built on the amdgpu KFD interface: what it knows beyond the shared reader."""

    name_of: Callable[[DetectContext, KfdAccelerator], str]
    family_of: Callable[[KfdGpu], str | None]
    driver_version: Callable[[HostRoot], str | None]
    runtime_version: Callable[[HostRoot], str | None]
    logical_sliced: AcceleratorLogicalSliced | None
    # hwmon temperature labels in order of preference; the first temp*_input otherwise
    temperature_labels: tuple[str, ...] = ("junction", "edge")


def detect(ctx: DetectContext, vendor: KfdVendor) -> DetectOutcome:
    """One detection pass (spec: detection-failure rules).

    No card on the bus, no KFD → ``Detected([])``; a file that cannot be read or holds what the
    kernel never writes → ``Unmeasured`` naming it; a card without a unique id is dropped with a
    warning (it could only be identified by its PCI address, which the spec forbids)."""
    early = precheck(ctx)
    if early is not None:
        return early
    try:
        accelerators = enumerate_accelerators(ctx)
        driver = vendor.driver_version(ctx.view)
        runtime = vendor.runtime_version(ctx.view)
        drops: list[Dropped] = []
        found = [f for a in accelerators if (f := found_of(ctx, vendor, a, driver, runtime, drops=drops)) is not None]
    except KfdError as exc:
        return Unmeasured(str(exc))
    return Detected(build_groups(ctx.manufacturer.name, found, ctx.pci, ctx.settings), dropped=tuple(drops))


def found_of(
    ctx: DetectContext,
    vendor: KfdVendor,
    acc: KfdAccelerator,
    driver: str | None,
    runtime: str | None,
    *,
    drops: list[Dropped] | None = None,
) -> Found | None:
    gpu = acc.gpu
    if gpu.unique_id == 0:
        log.warning(
            "%s: KFD node %d (%s) reports no unique_id, so it has no identity; dropped",
            ctx.manufacturer.name,
            gpu.node.index,
            gpu.bus_id,
        )
        if drops is not None:
            drops.append(
                Dropped(
                    f"KFD node {gpu.node.index} ({gpu.bus_id})",
                    "its unique_id reads 0 (rocm-smi prints N/A), so it has no identity: the card's "
                    "firmware did not report one",
                )
            )
        return None
    return Found(
        uuid=gpu.uuid,
        name=vendor.name_of(ctx, acc),
        memory_mib=(acc.memory_bytes or 0) >> 20,
        pci_bus_id=gpu.bus_id,
        physical_indexes=acc.drm.physical_indexes,
        cores=gpu.cu_count,
        driver_version=driver,
        runtime_version=runtime,
        compute_capability=gpu.gfx,
        family=vendor.family_of(gpu),
        unhealthy=bool(acc.drm.uncorrectable_errors),
        logical_sliced=vendor.logical_sliced,
        extra={
            "gfx": gpu.gfx,
            "cu_count": gpu.cu_count,
            "shader_engines": gpu.shader_engines,
            "shader_arrays_per_engine": gpu.shader_arrays_per_engine,
            "xcc": gpu.xcc,
            "kfd_node": gpu.node.index,
            "render_minor": gpu.render_minor,
        },
    )


def family_name(gpu: KfdGpu) -> str | None:
    return FAMILY_NAMES.get(gpu.family_id) if gpu.family_id is not None else None


# -- monitor -----------------------------------------------------------------------------------


def monitor(ctx: DetectContext, vendor: KfdVendor) -> MonitorOutcome:
    """One usage sample per accelerator, from sysfs; a figure the driver does not publish is
    ``None`` (never zero)."""
    early = precheck(ctx)
    if isinstance(early, Unmeasured):
        return early
    if early is not None:
        return Measured([])
    try:
        samples = [sample(ctx.view, a, vendor) for a in enumerate_accelerators(ctx) if a.gpu.unique_id]
    except KfdError as exc:
        return Unmeasured(str(exc))
    return Measured(samples)


def sample(host: HostRoot, acc: KfdAccelerator, vendor: KfdVendor) -> AcceleratorMetrics:
    """One accelerator's figures. A figure whose file is absent or cannot be read right now (amdgpu
    refuses sensor reads while the card is runtime-suspended) is ``None``; the sample stands."""
    pci = acc.drm.pci_path
    total = (acc.memory_bytes or 0) >> 20
    used_bytes = figure(host, f"{pci}/mem_info_vram_used")
    used = used_bytes >> 20 if used_bytes is not None else None
    hwmon = hwmon_dir(host, pci)
    power = None
    temperature = None
    if hwmon is not None:
        microwatts = figure(host, f"{hwmon}/power1_average")
        if microwatts is None:
            microwatts = figure(host, f"{hwmon}/power1_input")
        power = microwatts // 1_000_000 if microwatts is not None else None
        try:
            millidegrees = read_temperature(host, hwmon, vendor.temperature_labels)
        except KfdError as exc:
            log.debug("%s", exc)
            millidegrees = None
        temperature = millidegrees // 1000 if millidegrees is not None else None
    return AcceleratorMetrics(
        id=acc.gpu.uuid,
        memory=total,
        memory_usage=used,
        memory_utilization=used * 100 // total if used is not None and total else None,
        cores_utilization=figure(host, f"{pci}/gpu_busy_percent"),
        temperature=temperature,
        power_usage=power,
        unhealthy=bool(acc.drm.uncorrectable_errors),
    )


def figure(host: HostRoot, path: str) -> int | None:
    """A monitor figure: :func:`read_uint`, with an unreadable or garbled file as ``None``."""
    try:
        return read_uint(host, path)
    except KfdError as exc:
        log.debug("%s", exc)
        return None


def hwmon_dir(host: HostRoot, pci: str) -> str | None:
    entries = [e for e in listdir_optional(host, f"{pci}/hwmon") if e.startswith("hwmon")]
    return f"{pci}/hwmon/{entries[0]}" if entries else None


def read_temperature(host: HostRoot, hwmon: str, labels: tuple[str, ...]) -> int | None:
    """The sensor whose ``temp<i>_label`` comes first in ``labels``; else the first ``temp<i>_input``."""
    inputs = sorted(
        (e for e in listdir_optional(host, hwmon) if re.fullmatch(r"temp[0-9]+_input", e)),
        key=lambda e: int(e[4:-6]),
    )
    by_label: dict[str, str] = {}
    for entry in inputs:
        label = read_optional(host, f"{hwmon}/{entry[:-6]}_label")
        if label is not None:
            by_label.setdefault(label.strip(), entry)
    for wanted in labels:
        if wanted in by_label:
            return read_uint(host, f"{hwmon}/{by_label[wanted]}")
    return read_uint(host, f"{hwmon}/{inputs[0]}") if inputs else None


# -- versions ----------------------------------------------------------------------------------


def first_line(host: HostRoot, paths: list[str]) -> str | None:
    """The first line of the first of ``paths`` that exists and is not empty."""
    for path in paths:
        try:
            text = host.read_optional(path)
        except HostPathError:
            continue
        if text and text.strip():
            return text.strip().splitlines()[0].strip()
    return None


def toolkit_homes(variables: tuple[str, ...], defaults: tuple[str, ...]) -> list[str]:
    """The first set variable among ``variables`` (the reference reads only that one), else the
    defaults."""
    for var in variables:
        value = os.environ.get(var)
        if value:
            return [value.rstrip("/") or "/"]
    return list(defaults)


def info_version(host: HostRoot, homes: list[str]) -> str | None:
    """``<home>/.info/version`` (then ``version-rocm``, ``-dev``, ``-libs``), in each home and then
    its parent — where ROCm and DTK record their release (``6.2.0-66``) — as ``major.minor``."""
    paths: list[str] = []
    for home in homes:
        for base in (home, os.path.dirname(home)):
            paths.extend(f"{base}/.info/{name}" for name in ("version", "version-rocm", "version-dev", "version-libs"))
    raw = first_line(host, list(dict.fromkeys(paths)))
    return normalize_version(raw) if raw else None
