"""Hygon's logical-slice file, ``vdev<i>.conf``, read by the host DTK/hyhal runtime (reference rules
§9, supplement §1.6).

One ``key: value`` per line, in this order (the second ``cu_mask`` is the high 64 bits)::

    PciBusId: 0000:01:00.0
    cu_mask: 0x000000000000ffff
    cu_mask: 0x0000000000000000
    cu_count: 16
    mem: 16380 MiB
    device_id: 0
    vdev_id: 0
    pipe_id: 0
    enable: 1

Masks are ``0x`` + 16 hex digits. ``cu_count`` = ceil(pct·cus/100) capped at the card; the CU bits
are the lowest not held by another slice on the same card; ``vdev_id`` is unique node-wide (< 200),
``pipe_id`` per card (< 20). ``device_id`` is the accelerator's logical index (the detector's
enumeration, what the reference writes; its meaning on hardware is not established -- supplement
§1.4 "Positional injection order").

Parsing is strict (:func:`parse` raises :class:`ValueError` naming the line): the allocator places a
slice against every other slice's file, so a file that cannot be read exactly fails the allocation
closed rather than being half-trusted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_VDEV_ID = 200  # node-wide ids 0..199
MAX_PIPE_ID = 20  # per-card ids 0..19
MASK_BITS = 128  # two 64-bit words

_MASK = re.compile(r"0x[0-9a-fA-F]{16}")
_UINT = re.compile(r"[0-9]{1,9}")
_BUS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_MEM = re.compile(r"([0-9]{1,9}) MiB")
KEYS = ("PciBusId", "cu_mask", "cu_mask", "cu_count", "mem", "device_id", "vdev_id", "pipe_id", "enable")


@dataclass(frozen=True)
class Vdev:
    pci_bus_id: str
    cu_mask: int  # up to 128 bits, bit i = CU i
    cu_count: int
    memory_mib: int
    device_id: int
    vdev_id: int
    pipe_id: int

    def render(self) -> str:
        low, high = self.cu_mask & (2**64 - 1), self.cu_mask >> 64
        return (
            f"PciBusId: {self.pci_bus_id}\n"
            f"cu_mask: 0x{low:016x}\n"
            f"cu_mask: 0x{high:016x}\n"
            f"cu_count: {self.cu_count}\n"
            f"mem: {self.memory_mib} MiB\n"
            f"device_id: {self.device_id}\n"
            f"vdev_id: {self.vdev_id}\n"
            f"pipe_id: {self.pipe_id}\n"
            "enable: 1\n"
        )


def parse(text: str) -> Vdev:
    """A ``vdev<i>.conf`` exactly as :meth:`Vdev.render` writes it; :class:`ValueError` otherwise."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != len(KEYS):
        raise ValueError(f"holds {len(lines)} lines, not the {len(KEYS)} of a vdev config")
    values: list[str] = []
    for lineno, (line, key) in enumerate(zip(lines, KEYS, strict=True), start=1):
        name, sep, value = line.partition(":")
        if not sep or name.strip() != key:
            raise ValueError(f"line {lineno} is not '{key}: <value>': {line.strip()[:60]!r}")
        values.append(value.strip())
    bus, low, high, count, mem, device, vdev_id, pipe, enable = values
    if not _BUS.fullmatch(bus):
        raise ValueError(f"PciBusId {bus[:40]!r} is not a PCI address")
    for word in (low, high):
        if not _MASK.fullmatch(word):
            raise ValueError(f"cu_mask {word[:40]!r} is not 0x + 16 hex digits")
    memory = _MEM.fullmatch(mem)
    if memory is None:
        raise ValueError(f"mem {mem[:40]!r} is not '<MiB> MiB'")
    for name, value in (("cu_count", count), ("device_id", device), ("vdev_id", vdev_id), ("pipe_id", pipe)):
        if not _UINT.fullmatch(value):
            raise ValueError(f"{name} {value[:40]!r} is not an unsigned integer")
    if enable != "1":
        raise ValueError(f"enable is {enable[:40]!r}, not 1")
    vdev = Vdev(
        pci_bus_id=bus.lower(),
        cu_mask=int(low, 16) | (int(high, 16) << 64),
        cu_count=int(count),
        memory_mib=int(memory.group(1)),
        device_id=int(device),
        vdev_id=int(vdev_id),
        pipe_id=int(pipe),
    )
    if vdev.cu_mask.bit_count() != vdev.cu_count:
        raise ValueError(f"cu_count {vdev.cu_count} disagrees with its mask's {vdev.cu_mask.bit_count()} bits")
    if vdev.vdev_id >= MAX_VDEV_ID or vdev.pipe_id >= MAX_PIPE_ID:
        raise ValueError(f"vdev_id {vdev.vdev_id} / pipe_id {vdev.pipe_id} is out of range (< 200 / < 20)")
    return vdev


def cu_count(percent: int, cus: int) -> int:
    """ceil(pct·cus/100), capped at the card (at least one CU for a positive request)."""
    return min(cus, -(-percent * cus // 100))


def lowest_free_bits(count: int, cus: int, held: int) -> int | None:
    """The mask of the ``count`` lowest CU bits below ``cus`` not in ``held``; ``None`` when fewer
    are free."""
    mask = 0
    taken = 0
    for bit in range(cus):
        if taken == count:
            break
        if not held >> bit & 1:
            mask |= 1 << bit
            taken += 1
    return mask if taken == count else None


def lowest_free(used: Iterable[int], limit: int) -> int | None:
    """The lowest id in ``0..limit-1`` not in ``used``; ``None`` when all are."""
    taken = set(used)
    return next((i for i in range(limit) if i not in taken), None)
