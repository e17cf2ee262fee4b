"""The ``sgpu`` driver mode: MetaX's sGPU subdevice registry in sysfs, read only (supplement §1.6,
§2.7 ``sgpu-mode`` row: "registry reads; detail says whether a subdevice already exists").

Layout read (the reference operator's sysfs seam; itself documented there as unvalidated on real
hardware, so **assumed**): ``/sys/bus/pci/devices/<BDF>/sgpu/`` holding ``sched_class`` (0
best-effort, 1 fixed-share, 2 burst-share), the write-only ``create``/``destroy`` controls, and one
``sgpu<N>/`` directory per existing subdevice.

- registry readable → ``enabled`` = a subdevice exists, detail names them and the scheduling class;
- no ``sgpu`` directory under a present device → not in sgpu mode yet (the allocator puts it there
  when the first slice lands): ``enabled=False``;
- anything else (device directory absent, ``sgpu`` unreadable or not a directory, no PCI address)
  → :class:`ModeError`.

Nothing is written: creating a subdevice leaves a resource behind, not a two-position flag, so the
mode is not "established" the way smlu/container-share are; :meth:`SgpuMode.set` refuses.
"""

from __future__ import annotations

import errno
import re

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.base import DetectContext, ModeChange, ModeError, ModeState

MODE = "sgpu"
SCHED_CLASSES = {0: "best-effort", 1: "fixed-share", 2: "burst-share"}

_SUBDEVICE = re.compile(r"sgpu([0-9]{1,9})")  # fullmatch: \d takes "٣", $ a trailing newline


def parse_subdevices(entries: list[str]) -> list[int]:
    """Subdevice indexes among the entries of ``<BDF>/sgpu`` (``sgpu0``, ``sgpu12``), sorted."""
    return sorted(int(m.group(1)) for e in entries if (m := _SUBDEVICE.fullmatch(e)))


def parse_sched_class(text: str | None) -> str | None:
    """``"1\\n"`` → ``"fixed-share"``; anything unrecognised → ``None``."""
    if text is None:
        return None
    value = text.strip()
    if not (value.isascii() and value.isdigit()):  # str.isdigit() also takes "²", which int() refuses
        return None
    if len(value) > 9:  # nor does it take 4300+ digits; no class has a number this long
        return None
    return SCHED_CLASSES.get(int(value))


def registry_path(bdf: str) -> str:
    return f"/sys/bus/pci/devices/{bdf}/sgpu"


def read_registry(host: HostRoot, accelerator: Accelerator) -> ModeState:
    bdf = accelerator.topology.pci_bus_id
    index = accelerator.physical_indexes[0] if accelerator.physical_indexes else accelerator.index
    if not bdf:
        raise ModeError(accelerator.id, MODE, "the accelerator reports no PCI bus id, so sysfs cannot address it")
    device = f"/sys/bus/pci/devices/{bdf}"
    registry = registry_path(bdf)
    if not host.is_dir(device):
        raise ModeError(accelerator.id, MODE, "the sgpu registry could not be read", read_error=f"{device} is absent")
    try:
        entries = host.listdir(registry)
    except HostPathError as exc:
        if exc.errno == errno.ENOENT:
            return ModeState(
                accelerator=accelerator.id,
                index=index,
                mode=MODE,
                enabled=False,
                detail=f"no sgpu registry at {registry}: the accelerator is not in sgpu mode yet; "
                "the allocator puts it there when the first slice lands",
            )
        raise ModeError(accelerator.id, MODE, "the sgpu registry could not be read", read_error=str(exc)) from None
    subdevices = parse_subdevices(entries)
    try:
        sched = parse_sched_class(host.read_optional(f"{registry}/sched_class"))
    except HostPathError:
        sched = None
    klass = f", scheduling class {sched}" if sched else ""
    if subdevices:
        names = ", ".join(f"sgpu{n}" for n in subdevices)
        detail = (
            f"the accelerator already hosts {len(subdevices)} sgpu subdevice(s) ({names}) and is in sgpu mode{klass}"
        )
    else:
        detail = (
            f"the sgpu registry reads and holds no subdevice{klass}; the allocator puts the accelerator in "
            "sgpu mode when the first slice lands"
        )
    return ModeState(accelerator=accelerator.id, index=index, mode=MODE, enabled=bool(subdevices), detail=detail)


class SgpuMode:
    """MetaX sGPU registry (``ModeDriver``, read only)."""

    mode = MODE
    writable = False

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]:
        return [read_registry(ctx.view, a) for g in groups for a in g.accelerators]

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange:
        raise ModeError(
            state.accelerator,
            MODE,
            "the sgpu mode is read only here: reaching it creates a subdevice and picks a scheduling class, "
            "resources that outlive the call; the allocator does that when a slice lands",
        )


SGPU = SgpuMode()
