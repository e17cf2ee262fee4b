"""Hygon DCU partitioning ("DCU MIG"): the node's partition mode and each DCU's partition profiles.

What is established (public sources: the Hygon MIG Operations page and the detector of
gpustack/gpustack-operator, gpustack/runtime's ``pydmi``; see :mod:`.dmi` for the library calls):

* The mode belongs to the **node**: ``hy-smi -mig 1`` takes no device and the library's query
  (``nvmlGetSystemMigMode``) no handle, so it is read once per pass and every DCU of the node answers
  alike. A partitioned node serves only partitions: with the mode on, a container given the device
  nodes but no instance finds no device at all, so its DCUs advertise neither whole-card capacity
  nor logical slices -- ``logicalSliced.count 0`` and the partition profiles (``physicalSliced``),
  as NVIDIA's MIG cards (``hygon.com/dcu.partitioned.mig-2g.15gb``).
* The profiles are the driver's, never computed: per DCU (reached by its PCI address) the
  GPU-instance profile of each width 1..4 slices, with the legal placements of each on an empty
  card. A width the card does not offer is an ordinary gap (measured cards offer 1, 2 and 4 slices).
  A profile is published only with at least one placement of positive length (its memory-slice
  span is that length -- the driver's answer, never derived); a profile whose name cannot be a
  resource-name segment, or two that normalise to one name but disagree, are withheld. Measured on
  a 4-slice, 80 CU, 65520 MiB card: ``2g.15gb`` (1 slice, 20 CU, 16380 MiB, 4 per card, placements
  0:1 1:1 2:1 3:1), ``4g.31gb`` (2 slices, 40 CU, 32760 MiB, 2, 0:2 2:2), ``8g.63gb`` (4, 80, 65520,
  1, 0:4).
* While the mode is on the HSA runtime shows a process at most one partition, so the card's
  compute-unit count is taken from its profiles: an instance's CUs times the instances that fill the
  card (every profile of a measured card agreed), the largest product.
* A node whose driver has no Multi-Instance library (the ordinary Hygon node: it ships only with a
  driver installed with virtualization support) is not partitioned -- an answer, not a failure.

What is decided here, where the sources leave it open:

* **A mode that cannot be read fails closed**: every DCU of the node offers neither logical slices
  nor partitions, logged (the reference detector does the same: both wrong guesses cost a workload,
  and "neither" leaves a pending Pod rather than a failing one). ``NOT_SUPPORTED`` -- the header's
  "no device in the system supports MIG mode" -- is an answer: not partitioned, logical slicing as
  before (the reference treats it as unreadable; the header says what it means).
* A DCU the library cannot reach by its PCI address, or that offers no publishable profile, on a
  partitioned node: ``logicalSliced.count 0`` and no partition capability (it can serve nothing).
* ``/etc/dmi_mig_config`` (the driver's registry: ``dev<N>`` one PCI address per card, ``gi/``,
  ``ci/`` one file per live instance) is the allocator's -- it is where a partition's identity
  lives and what a container is given -- and is not read by detection: the mode and the profiles
  come from the library, as in the reference detector. The DaemonSet mounts it writable because the
  library writes it when it creates an instance (supplement §2.3).
* The library's profile names are taken to carry NVML's ``"MIG "`` prefix when they do (stripped
  either way), as the reference's normalisation does.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.libs import LibraryLoadError, find_library, load_library
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
    DevicesGroup,
)
from gpustack_operator.manufacturers import migprofiles
from gpustack_operator.manufacturers.hygon.dmi import (
    ABSENT,
    API_UNAVAILABLE,
    DEVICE_MIG_ENABLE,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    GPU_INSTANCE_PROFILE_COUNT,
    LIBRARY,
    Dmi,
    DmiError,
    GpuInstanceProfile,
    MissingSymbolError,
)
from gpustack_operator.manufacturers.respond import PartitionInstance, RefusedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeMode:
    """The node's partition mode: ``enabled`` when ``known``; ``reason`` says how it was read, or why
    it could not be."""

    known: bool
    enabled: bool
    reason: str
    dmi: Dmi | None = None  # the loaded library, when the mode is on


@dataclass(frozen=True)
class CardPartitions:
    """What one DCU offers on a partitioned node: its partition capability (``None``: none) and the
    compute units its profiles imply (``None``: they imply none)."""

    sliced: AcceleratorPhysicalSliced | None
    cores: int | None


def read_mode(view: HostRoot) -> NodeMode:
    """The node's mode, read through ``libhydmi_mig`` found in the node view (never raises)."""
    path = find_library(view, LIBRARY)
    if path is None:
        return NodeMode(True, False, "no libhydmi_mig.so (the driver has no Multi-Instance support)")
    try:
        dmi = Dmi(load_library(path))
    except LibraryLoadError as exc:
        return NodeMode(True, False, f"the Multi-Instance library would not load ({exc})")
    try:
        current, _pending = dmi.system_mig_mode()
    except MissingSymbolError:
        return NodeMode(True, False, f"{path} exports no nvmlGetSystemMigMode")
    except DmiError as exc:
        if exc.code in API_UNAVAILABLE:
            return NodeMode(True, False, f"the Multi-Instance API is unavailable: {exc}")
        if exc.code == ERROR_NOT_SUPPORTED:
            return NodeMode(True, False, f"no DCU of this node supports MIG mode ({exc})")
        return NodeMode(False, False, f"the node's MIG mode could not be read: {exc}")
    if current == DEVICE_MIG_ENABLE:
        return NodeMode(True, True, f"MIG mode is on ({path})", dmi)
    return NodeMode(True, False, f"MIG mode is off (current mode {current})")


def card_partitions(dmi: Dmi, bus_id: str) -> CardPartitions:
    """One DCU's partition profiles, reached by its PCI address (never raises; what it withholds is
    logged)."""
    try:
        handle = dmi.handle_by_pci_bus_id(bus_id)
    except DmiError as exc:
        log.error(
            "hygon: the DCU at %s cannot be reached through the Multi-Instance library (%s): it offers no "
            "partition even though the node is in MIG mode",
            bus_id,
            exc,
        )
        return CardPartitions(None, None)
    probed = probe_profiles(dmi, handle, bus_id)
    profiles = []
    for info in probed:
        profile = publishable(dmi, handle, info, bus_id)
        if profile is not None:
            profiles.append(profile)
    kept, divergent = migprofiles.unique_by_name(profiles)
    for name in divergent:
        log.warning("hygon: %s: two profiles named %s disagree; both withheld", bus_id, name)
    cores = max((p.compute_units * p.instances for p in probed), default=0)
    return CardPartitions(migprofiles.physical_sliced(kept), cores or None)


def probe_profiles(dmi: Dmi, handle: ctypes.c_void_p, bus_id: str) -> list[GpuInstanceProfile]:
    """The profile of each width the card offers; a width it disclaims is skipped, one it could not
    answer for is logged (the card's inventory is then short)."""
    probed = []
    for index in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            probed.append(dmi.gpu_instance_profile(handle, index))
        except DmiError as exc:
            if exc.code not in ABSENT:
                log.error(
                    "hygon: %s: the %d-slice profile could not be read (%s); it is not offered", bus_id, index + 1, exc
                )
    return probed


def publishable(
    dmi: Dmi, handle: ctypes.c_void_p, info: GpuInstanceProfile, bus_id: str
) -> AcceleratorPhysicalSlicedProfile | None:
    """The published form of one profile, or ``None`` (logged) when it cannot be requested: its name
    is no resource-name segment, its placements cannot be read, or it has none of positive length."""
    name = migprofiles.profile_name(info.name)
    if name is None:
        log.info("hygon: %s: profile %d named %r yields no resource name; not offered", bus_id, info.id, info.name)
        return None
    try:
        placements = dmi.gpu_instance_placements(handle, info.id)
    except DmiError as exc:
        log.error("hygon: %s: profile %s withheld, its placements are unreadable: %s", bus_id, name, exc)
        return None
    if not placements or placements[0][1] <= 0:
        log.info("hygon: %s: profile %s has no legal placement, so its memory-slice span is unknown", bus_id, name)
        return None
    return AcceleratorPhysicalSlicedProfile(
        name=name,
        memory_mib=info.memory_mib,
        compute_slices=info.slices,
        memory_slices=placements[0][1],
        count=info.instances,
        placements=[AcceleratorPlacement(start=s, length=n) for s, n in placements],
    )


# -- partition instances (the allocator's half: create, prove live, destroy) ----------------------
#
# Established (the Hygon MIG material named at the top, measured on hardware there): the library
# exports NVML's names for the instance lifecycle -- a GPU instance created at a placement, then a
# compute instance inside it; destroy in the order CI -> GI; GI and CI ids are driver-assigned and
# bear no relation to the placement. The driver writes one registry file per compute instance,
# ``/etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf`` (``N`` the card's own index, the ``dev<N>`` file
# naming its PCI address), ending with a ``mig_uuid:`` line -- the identity a container selects with
# (``DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>``) -- and a container is given that file at its own path.
#
# ASSUMED where the public sources do not show Hygon's header: the argument shapes are NVML's --
# ``nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, const placement *, gi *)``,
# ``nvmlGpuInstanceGetInfo`` filling ``{device, id, profileId, {start, size}}``,
# ``nvmlGpuInstanceCreateComputeInstance(gi, ciProfile, ci *)`` with the compute-instance profile
# taken as the GPU instance's own slice-count index (one CI spanning the GI),
# ``nvmlComputeInstanceGetInfo`` filling ``{device, gi, id, profileId, {start, size}}``,
# ``nvmlDeviceGetGpuInstanceById`` / ``nvmlGpuInstanceGetComputeInstanceById``,
# ``nvmlComputeInstanceDestroy`` / ``nvmlGpuInstanceDestroy``. The test stand-in
# (tests/stubs/hygon/fake_hydmi_mig.c) implements exactly these shapes.

MIG_CONFIG_DIR = "/etc/dmi_mig_config"
MIG_UUID_PREFIX = "MIG-"
ERROR_IN_USE = 19


class _GpuInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("start", ctypes.c_uint),
        ("size", ctypes.c_uint),
    ]


class _ComputeInstanceInfo(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_void_p),
        ("gpu_instance", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("start", ctypes.c_uint),
        ("size", ctypes.c_uint),
    ]


class _PlacementArg(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class DmiInstances(Dmi):
    """The instance-lifecycle calls of ``libhydmi_mig`` (shapes assumed, see above)."""

    def create_gpu_instance(self, handle: ctypes.c_void_p, profile_id: int, start: int, size: int) -> ctypes.c_void_p:
        gi = ctypes.c_void_p()
        placement = _PlacementArg(start, size)
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(_PlacementArg), ctypes.POINTER(ctypes.c_void_p))
        self._call(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            argtypes,
            handle,
            profile_id,
            ctypes.byref(placement),
            ctypes.byref(gi),
        )
        return gi

    def gpu_instance_id(self, gi: ctypes.c_void_p) -> int:
        info = _GpuInstanceInfo()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_GpuInstanceInfo))
        self._call("nvmlGpuInstanceGetInfo", argtypes, gi, ctypes.byref(info))
        return int(info.id)

    def create_compute_instance(self, gi: ctypes.c_void_p, profile: int) -> ctypes.c_void_p:
        ci = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("nvmlGpuInstanceCreateComputeInstance", argtypes, gi, profile, ctypes.byref(ci))
        return ci

    def compute_instance_id(self, ci: ctypes.c_void_p) -> int:
        info = _ComputeInstanceInfo()
        argtypes = (ctypes.c_void_p, ctypes.POINTER(_ComputeInstanceInfo))
        self._call("nvmlComputeInstanceGetInfo", argtypes, ci, ctypes.byref(info))
        return int(info.id)

    def gpu_instance_by_id(self, handle: ctypes.c_void_p, gi_id: int) -> ctypes.c_void_p:
        gi = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("nvmlDeviceGetGpuInstanceById", argtypes, handle, gi_id, ctypes.byref(gi))
        return gi

    def compute_instance_by_id(self, gi: ctypes.c_void_p, ci_id: int) -> ctypes.c_void_p:
        ci = ctypes.c_void_p()
        argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p))
        self._call("nvmlGpuInstanceGetComputeInstanceById", argtypes, gi, ci_id, ctypes.byref(ci))
        return ci

    def destroy_compute_instance(self, ci: ctypes.c_void_p) -> None:
        self._call("nvmlComputeInstanceDestroy", (ctypes.c_void_p,), ci)

    def destroy_gpu_instance(self, gi: ctypes.c_void_p) -> None:
        self._call("nvmlGpuInstanceDestroy", (ctypes.c_void_p,), gi)


def registry_file(device_index: int, gi_id: int, ci_id: int) -> str:
    return f"{MIG_CONFIG_DIR}/ci/dev{device_index}gi{gi_id}ci{ci_id}.conf"


def parse_mig_uuid(text: str) -> str | None:
    """The registry file's ``mig_uuid:`` value (the last line the driver writes), or ``None``."""
    for line in reversed(text.splitlines()):
        key, sep, value = line.partition(":")
        if sep and key.strip() == "mig_uuid":
            uuid = value.strip()
            return uuid if uuid and all(c in "0123456789abcdefABCDEF-" for c in uuid) else None
    return None


def device_index_of(view: HostRoot, bus_id: str) -> int | None:
    """The driver's own index of the card at ``bus_id``: the ``dev<N>`` registry file naming it."""
    try:
        entries = view.listdir(MIG_CONFIG_DIR)
    except HostPathError:
        return None
    for entry in entries:
        if not (entry.startswith("dev") and entry[3:].isascii() and entry[3:].isdigit()):
            continue
        try:
            text = view.read_text(f"{MIG_CONFIG_DIR}/{entry}")
        except HostPathError:
            continue
        if text.strip().lower() == bus_id.lower():
            return int(entry[3:])
    return None


class DmiPartitioner:
    """Hygon's :class:`~gpustack_operator.manufacturers.respond.Partitioner`, over the
    ``libhydmi_mig`` found in the node view (loaded on first use)."""

    def __init__(self, view: HostRoot) -> None:
        self.view = view
        self._dmi: DmiInstances | None = None

    def dmi(self) -> DmiInstances:
        if self._dmi is None:
            path = find_library(self.view, LIBRARY)
            if path is None:
                raise RefusedError(
                    "hygon: no libhydmi_mig.so in /opt/hyhal/lib or /opt/dtk/lib, so no partition can be made; "
                    "install the DCU driver with Multi-Instance support"
                )
            try:
                self._dmi = DmiInstances(load_library(path))
            except LibraryLoadError as exc:
                raise RefusedError(f"hygon: the Multi-Instance library would not load ({exc})") from None
        return self._dmi

    def _handle(self, dmi: DmiInstances, bus_id: str, what: str) -> ctypes.c_void_p:
        try:
            return dmi.handle_by_pci_bus_id(bus_id)
        except DmiError as exc:
            raise RefusedError(f"hygon: {what}: the DCU at {bus_id} cannot be reached ({exc})") from None

    def create(self, group: DevicesGroup, accelerator: Accelerator, profile: str, start: int) -> PartitionInstance:
        bus_id = accelerator.topology.pci_bus_id
        what = f"accelerator {accelerator.id} profile {profile} at {start}"
        dmi = self.dmi()
        handle = self._handle(dmi, bus_id, what)
        info = next(
            (p for p in probe_profiles(dmi, handle, bus_id) if migprofiles.profile_name(p.name) == profile), None
        )
        if info is None:
            raise RefusedError(f"hygon: {what}: the DCU offers no such profile")
        try:
            sizes = dict(dmi.gpu_instance_placements(handle, info.id))
        except DmiError as exc:
            raise RefusedError(f"hygon: {what}: its placements cannot be read ({exc})") from None
        if start not in sizes:
            legal = ", ".join(str(s) for s in sorted(sizes)) or "none"
            raise RefusedError(f"hygon: {what}: {start} is not a legal placement (legal starts: {legal})")
        size = sizes[start]
        try:
            gi = dmi.create_gpu_instance(handle, info.id, start, size)
            gi_id = dmi.gpu_instance_id(gi)
        except DmiError as exc:
            raise RefusedError(f"hygon: {what}: the GPU instance could not be created ({exc})") from None
        try:
            ci = dmi.create_compute_instance(gi, max(info.slices - 1, 0))
            ci_id = dmi.compute_instance_id(ci)
        except DmiError as exc:
            self._undo(dmi, gi, None)
            raise RefusedError(f"hygon: {what}: the compute instance could not be created ({exc})") from None
        index = device_index_of(self.view, bus_id)
        path = registry_file(index, gi_id, ci_id) if index is not None else None
        uuid = self._registry_uuid(path) if path is not None else None
        if index is None or path is None or uuid is None:
            self._undo(dmi, gi, ci)
            where = path or f"{MIG_CONFIG_DIR}/dev<N> naming {bus_id}"
            raise RefusedError(
                f"hygon: {what}: the driver's registry file {where} is missing or has no mig_uuid line, so the "
                "instance cannot be handed to a container (it was destroyed again); is /etc/dmi_mig_config mounted?"
            )
        return PartitionInstance(
            accelerator=accelerator.id,
            profile=profile,
            uuid=MIG_UUID_PREFIX + uuid,
            start=start,
            size=size,
            registry_file=path,
            handle={"bus_id": bus_id, "device": index, "gpu_instance": gi_id, "compute_instance": ci_id},
        )

    def _registry_uuid(self, path: str) -> str | None:
        try:
            text = self.view.read_optional(path)
        except HostPathError:
            return None
        return parse_mig_uuid(text) if text is not None else None

    def _undo(self, dmi: DmiInstances, gi: ctypes.c_void_p, ci: ctypes.c_void_p | None) -> None:
        try:
            if ci is not None:
                dmi.destroy_compute_instance(ci)
            dmi.destroy_gpu_instance(gi)
        except DmiError as exc:
            log.error("hygon: a half-made partition could not be destroyed again (%s); it is left to reclaim", exc)

    def live(self, instance: PartitionInstance) -> bool:
        """The registry file still names the instance's uuid, and the library still knows its GPU
        and compute instances."""
        recorded = self._registry_uuid(instance.registry_file) if instance.registry_file else None
        if recorded is None or MIG_UUID_PREFIX + recorded != instance.uuid:
            return False
        try:
            dmi = self.dmi()
            handle = dmi.handle_by_pci_bus_id(str(instance.handle["bus_id"]))
            gi = dmi.gpu_instance_by_id(handle, int(instance.handle["gpu_instance"]))
            dmi.compute_instance_by_id(gi, int(instance.handle["compute_instance"]))
        except (DmiError, RefusedError, KeyError, ValueError):
            return False
        return True

    def destroy(self, instance: PartitionInstance) -> None:
        """CI, then GI; one already gone is fine. One still in use is refused (never forced)."""
        dmi = self.dmi()
        try:
            bus_id = str(instance.handle["bus_id"])
            gi_id, ci_id = int(instance.handle["gpu_instance"]), int(instance.handle["compute_instance"])
        except (KeyError, ValueError):
            raise RefusedError(f"hygon: partition {instance.uuid} carries no GPU/compute instance ids") from None
        handle = self._handle(dmi, bus_id, f"partition {instance.uuid}")
        try:
            gi = dmi.gpu_instance_by_id(handle, gi_id)
        except DmiError as exc:
            if exc.code == ERROR_NOT_FOUND:
                return
            raise RefusedError(f"hygon: partition {instance.uuid}: {exc}") from None
        try:
            dmi.destroy_compute_instance(dmi.compute_instance_by_id(gi, ci_id))
        except DmiError as exc:
            if exc.code != ERROR_NOT_FOUND:
                raise RefusedError(f"hygon: partition {instance.uuid}: the compute instance: {exc}") from None
        try:
            dmi.destroy_gpu_instance(gi)
        except DmiError as exc:
            if exc.code != ERROR_NOT_FOUND:
                raise RefusedError(f"hygon: partition {instance.uuid}: the GPU instance: {exc}") from None


def partitioner(view: HostRoot) -> DmiPartitioner:
    return DmiPartitioner(view)
