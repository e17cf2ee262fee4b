"""T-Head partitions (spec "Partitioned", "T-Head MIG"): a GPU instance plus one compute instance
spanning it, created through HGML on the accelerator the allocator picked, and the device nodes a
container needs to use exactly that partition (T-Head has no container-runtime hook, so the nodes are
the whole of the container's access).

How the PPU is addressed (measured by the reference implementation on a 16-card host): a card's node is
``/dev/alixpu_ppu<ordinal>`` and its capability tree ``/proc/driver/alixpu/capabilities/ppu<ordinal>``,
the ordinal being the accelerator's index; the node's kernel minor number is the card's identity (what
the detector records in ``physicalIndexes[0]``) and proves the ordinal reaches that card. A partition's
two capability nodes are ``/dev/alixpu-caps/alixpu-cap<minor>``, the minors read at allocation time
from ``.../mig/gi<id>/access`` and ``.../mig/gi<id>/ci<id>/access`` (``DeviceFileMinor:``), never
computed or cached (the driver reassigns them). Every node must exist as a character device carrying the
expected minor, else the allocation fails closed and the instance this call created is destroyed.

The instance's uuid is ``MIG-<parent id>/<gi>/<ci>`` (NVML's legacy MIG naming): HGML's MIG device
handle calls are not bound, and nothing on T-Head consumes the uuid but the ledger.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import stat
from collections.abc import Iterator

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.libs import LibraryLoadError, find_library, load_library
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.migprofiles import profile_name
from gpustack_operator.manufacturers.respond import Code, PartitionInstance, RefusedError
from gpustack_operator.manufacturers.thead.detect import LIBRARY
from gpustack_operator.manufacturers.thead.hgml import (
    COMPUTE_INSTANCE_PROFILE_COUNT,
    GPU_INSTANCE_PROFILE_COUNT,
    HgmlError,
    HgmlPartitions,
)

log = logging.getLogger(__name__)

DEV = "/dev"
CONTROL_NODES = ("/dev/alixpu", "/dev/alixpu_ctl")
CAP_DIR = "/dev/alixpu-caps"
PROC_CAPS = "/proc/driver/alixpu/capabilities"
MINOR_FIELD = "DeviceFileMinor:"


def card_node(ordinal: int) -> str:
    return f"{DEV}/alixpu_ppu{ordinal}"


def cap_node(minor: int) -> str:
    return f"{CAP_DIR}/alixpu-cap{minor}"


def gi_access(ordinal: int, gi: int) -> str:
    return f"{PROC_CAPS}/ppu{ordinal}/mig/gi{gi}/access"


def ci_access(ordinal: int, gi: int, ci: int) -> str:
    return f"{PROC_CAPS}/ppu{ordinal}/mig/gi{gi}/ci{ci}/access"


def node_minor(view: HostRoot, path: str) -> int:
    """The minor number of the character device at ``path``; :class:`RefusedError` otherwise."""
    try:
        st = os.stat(view.path(path))
    except (OSError, HostPathError) as exc:
        raise RefusedError(
            f"T-Head device node {path} does not exist on this node ({exc}); is the driver loaded?"
        ) from None
    if not stat.S_ISCHR(st.st_mode):
        raise RefusedError(f"T-Head device node {path} is not a character device")
    return os.minor(st.st_rdev)


def require_numbered(view: HostRoot, path: str, want: int, what: str) -> str:
    minor = node_minor(view, path)
    if minor != want:
        raise RefusedError(
            f"{what}: device node {path} carries minor {minor}, want {want}: the /dev tree disagrees "
            "with the driver; re-detect (a card skipped in detection shifts every later index)"
        )
    return path


def require_card(view: HostRoot, accelerator: Accelerator) -> str:
    """The card's own node, named by its ordinal and proven by the minor the detector recorded."""
    if not accelerator.physical_indexes:
        raise RefusedError(
            f"T-Head PPU {accelerator.id}: no recorded minor number to prove its device node addresses it; "
            "re-run detection"
        )
    return require_numbered(
        view, card_node(accelerator.index), accelerator.physical_indexes[0], f"T-Head PPU {accelerator.id}"
    )


def read_cap_minor(view: HostRoot, path: str) -> int:
    try:
        text = view.read_text(path)
    except HostPathError as exc:
        raise RefusedError(f"T-Head capability file {path} cannot be read: {exc}") from None
    for line in text.splitlines():
        rest = line.strip()
        if rest.startswith(MINOR_FIELD):
            value = rest.removeprefix(MINOR_FIELD).strip()
            if not re.fullmatch(r"[0-9]{1,9}", value):
                raise RefusedError(f"T-Head capability file {path}: {MINOR_FIELD} {value!r} is not a number")
            return int(value)
    raise RefusedError(f"T-Head capability file {path} carries no {MINOR_FIELD} field")


def partition_nodes(view: HostRoot, accelerator: Accelerator, gi: int, ci: int) -> tuple[str, ...]:
    card = require_card(view, accelerator)
    nodes = [card]
    for access in (gi_access(accelerator.index, gi), ci_access(accelerator.index, gi, ci)):
        minor = read_cap_minor(view, access)
        nodes.append(require_numbered(view, cap_node(minor), minor, f"T-Head partition on {accelerator.id}"))
    return tuple(nodes)


class HgmlPartitioner:
    """The :class:`~gpustack_operator.manufacturers.respond.Partitioner` over the node's libhgml."""

    def __init__(self, view: HostRoot) -> None:
        self.view = view

    @contextlib.contextmanager
    def _session(self) -> Iterator[HgmlPartitions]:
        path = find_library(self.view, LIBRARY)
        if path is None:
            raise RefusedError(
                "T-Head partitions need libhgml.so, which is not on this node (PPU_HOME, /usr/local/PPU_SDK/lib)"
            )
        try:
            hg = HgmlPartitions(load_library(path))
            hg.init()
        except (LibraryLoadError, HgmlError) as exc:
            raise RefusedError(f"HGML at {path} did not initialise: {exc}", code=Code.UNAVAILABLE) from None
        try:
            yield hg
        finally:
            with contextlib.suppress(HgmlError):
                hg.shutdown()

    @staticmethod
    def _device(hg: HgmlPartitions, accelerator: Accelerator) -> ctypes.c_void_p:
        try:
            for index in range(hg.device_count()):
                handle = hg.handle(index)
                if hg.uuid(handle) == accelerator.id:
                    return handle
        except HgmlError as exc:
            raise RefusedError(f"HGML could not enumerate the PPUs: {exc}") from None
        raise RefusedError(f"T-Head PPU {accelerator.id} is not on this node any more; re-run detection")

    @staticmethod
    def _profile(
        hg: HgmlPartitions, handle: ctypes.c_void_p, accelerator: Accelerator, profile: str
    ) -> tuple[int, int]:
        for pid in range(GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = hg.gpu_instance_profile(handle, pid)
            except HgmlError:
                continue
            if profile_name(info.name) == profile:
                return info.id, info.slice_count
        raise RefusedError(f"T-Head PPU {accelerator.id} offers no partition profile {profile}")

    def create(self, group: DevicesGroup, accelerator: Accelerator, profile: str, start: int) -> PartitionInstance:
        require_card(self.view, accelerator)  # before anything is created: an unprovable card costs nothing
        with self._session() as hg:
            handle = self._device(hg, accelerator)
            pid, slices = self._profile(hg, handle, accelerator, profile)
            try:
                gi = hg.create_gpu_instance(handle, pid, start, slices)
            except HgmlError as exc:
                raise RefusedError(
                    f"T-Head PPU {accelerator.id}: creating a {profile} partition at placement {start} failed: {exc}"
                ) from None
            ci_id: int | None = None
            try:
                info = hg.gpu_instance_info(gi)
                ci = hg.create_compute_instance(gi, self._full_compute_profile(hg, gi, slices))
                ci_id = hg.compute_instance_id(ci)
                nodes = partition_nodes(self.view, accelerator, info.id, ci_id)
            except (HgmlError, RefusedError) as exc:
                self._rollback(hg, gi, handle, ci_id)
                if isinstance(exc, RefusedError):
                    raise
                raise RefusedError(
                    f"T-Head PPU {accelerator.id}: the {profile} partition's compute instance could not be made: {exc}"
                ) from None
        log.info("thead: created %s on %s (gi %d ci %d)", profile, accelerator.id, info.id, ci_id)
        return PartitionInstance(
            accelerator=accelerator.id,
            profile=profile,
            uuid=f"MIG-{accelerator.id}/{info.id}/{ci_id}",
            start=info.start,
            size=info.size,
            device_nodes=nodes,
            handle={
                "gpu_instance": info.id,
                "compute_instance": ci_id,
                "profile_id": pid,
                "ordinal": accelerator.index,
            },
        )

    @staticmethod
    def _full_compute_profile(hg: HgmlPartitions, gi: ctypes.c_void_p, slices: int) -> int:
        """The compute-instance profile that spans the whole GPU instance."""
        best: tuple[int, int] | None = None
        for profile in range(COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                cid, count = hg.compute_instance_profile(gi, profile)
            except HgmlError:
                continue
            if count <= slices and (best is None or count > best[1]):
                best = (cid, count)
        if best is None:
            raise HgmlError("hgmlGpuInstanceGetComputeInstanceProfileInfo", 3)
        return best[0]

    @staticmethod
    def _rollback(hg: HgmlPartitions, gi: ctypes.c_void_p, handle: ctypes.c_void_p, ci_id: int | None) -> None:
        try:
            if ci_id is not None:
                hg.destroy_compute_instance(hg.compute_instance_by_id(gi, ci_id))
            hg.destroy_gpu_instance(gi)
        except HgmlError as exc:
            log.error("thead: rolling back a half-made partition failed (%s); destroy it by hand", exc)

    def _instance(
        self, hg: HgmlPartitions, instance: PartitionInstance
    ) -> tuple[ctypes.c_void_p, ctypes.c_void_p] | None:
        accelerator = Accelerator(id=instance.accelerator, index=int(instance.handle.get("ordinal", 0)))
        handle = self._device(hg, accelerator)
        try:
            gi = hg.gpu_instance_by_id(handle, int(instance.handle["gpu_instance"]))
            ci = hg.compute_instance_by_id(gi, int(instance.handle["compute_instance"]))
        except (HgmlError, KeyError, ValueError):
            return None
        return gi, ci

    def live(self, instance: PartitionInstance) -> bool:
        with self._session() as hg:
            return self._instance(hg, instance) is not None

    def destroy(self, instance: PartitionInstance) -> None:
        with self._session() as hg:
            found = self._instance(hg, instance)
            if found is None:
                return
            gi, ci = found
            try:
                hg.destroy_compute_instance(ci)
                hg.destroy_gpu_instance(gi)
            except HgmlError as exc:
                raise RefusedError(f"T-Head partition {instance.uuid} could not be destroyed: {exc}") from None


def partitioner(view: HostRoot) -> HgmlPartitioner:
    return HgmlPartitioner(view)


__all__ = ["CONTROL_NODES", "HgmlPartitioner", "card_node", "node_minor", "partitioner", "require_card"]
