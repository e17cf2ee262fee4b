"""CPU identity and the general (CPU) node key (spec: Stage 1, Job 2; reference rules §1).

Two halves, kept apart on purpose:

* :func:`read_cpu_identity` reads the host (``/proc/cpuinfo``, ``/sys/devices/system/cpu``) and
  predicts what NFD would label: ``cpu-model.vendor_id`` / ``.family`` / ``.id`` exactly as NFD's
  klauspost/cpuid computes them, and the ``feature.gpustack.ai/cpu-name`` annotation.
* :func:`general_node_key` takes those *label values* and applies the worker's rules, so the worker
  can feed it NFD's labels and annotations unchanged and get the same key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.node.naming import GENERAL_KEY_BUDGET, normalize_name

GENERIC = "generic"

# x86 CPUID leaf-0 vendor strings → klauspost/cpuid Vendor enum names (what NFD labels).
# Anything else (Zhaoxin "  Shanghai  ", ...) is VendorUnknown.
X86_VENDORS: Mapping[str, str] = {
    "AMDisbetter!": "AMD",
    "AuthenticAMD": "AMD",
    "CentaurHauls": "VIA",
    "VIA VIA VIA": "VIA",
    "GenuineIntel": "Intel",
    "TransmetaCPU": "Transmeta",
    "GenuineTMx86": "Transmeta",
    "Geode by NSC": "NSC",
    "HygonGenuine": "Hygon",
    "Vortex86 SoC": "SiS",
    "SiS SiS SiS": "SiS",
    "RiseRiseRise": "SiS",
    "Genuine  RDC": "RDC",
}

# arm64 MIDR implementer byte → Vendor enum name (cpuid detect_arm64.go). 0x48 HiSilicon (Kunpeng),
# 0x53 Samsung, 0x61 Apple ... are not in cpuid's table: NFD labels them VendorUnknown.
ARM_IMPLEMENTERS: Mapping[int, str] = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x44: "DEC",
    0x46: "Fujitsu",
    0x49: "Infineon",
    0x4D: "Motorola",
    0x4E: "NVIDIA",
    0x50: "AMCC",
    0x51: "Qualcomm",
    0x56: "Marvell",
    0x69: "Intel",
    0xC0: "Ampere",
}

VENDOR_UNKNOWN = "VendorUnknown"


class CpuInfoError(ValueError):
    """``/proc/cpuinfo`` is unreadable or not in the kernel's format."""


class CpuIdentity(BaseModel):
    """What NFD would report about this node's CPU, plus the counts the annotations carry."""

    vendor_id: str
    family: str | None = None
    id: str | None = None
    name: str | None = None
    cores: int | None = None
    threads: int | None = None
    stepping: str | None = None
    hypervisor: bool = False
    arch: str = "unknown"


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """Split ``/proc/cpuinfo`` into one ``{field: value}`` dict per block (per logical CPU).

    Lines are ``key<tabs>: value``; blocks are separated by blank lines. A line without a colon is
    tolerated only if blank; anything else means the file is not cpuinfo.
    """
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            raise CpuInfoError(f"line {lineno} is not 'field : value': {raw[:60]!r}")
        current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


# What the kernel writes for the numeric fields read here: ``%u`` / ``%d`` decimals and ``0x%x`` hex
# (``CPU implementer : 0x41``), never signed, never wider than 32 bits. ``int()`` alone would also take
# ``-6``, ``1_0``, Unicode digits and 5000-digit numbers.
_DECIMAL_FIELD = re.compile(r"[0-9]{1,10}")
_HEX_FIELD = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,8}")


def _int_field(block: Mapping[str, str], key: str, base: int = 10) -> int | None:
    value = block.get(key)
    if value is None:
        return None
    if not (_HEX_FIELD if base == 16 else _DECIMAL_FIELD).fullmatch(value):
        raise CpuInfoError(f"field {key!r} is not a number as the kernel writes it: {value[:40]!r}")
    return int(value, base)


def identity_from_cpuinfo(blocks: list[dict[str, str]], midr: int | None = None) -> CpuIdentity:
    """Compute the NFD-equivalent identity from parsed cpuinfo blocks.

    x86: ``vendor_id`` maps through :data:`X86_VENDORS`; family / id are cpuinfo's decimal
    ``cpu family`` / ``model`` (the kernel and cpuid combine the extended fields the same way).

    arm64: the implementer maps through :data:`ARM_IMPLEMENTERS`; cpuid's Family is MIDR[23:16]
    (variant << 4 | architecture) and its Model is MIDR[15:0] (part << 4 | revision). cpuinfo's
    ``CPU architecture: 8`` is hard-coded by the kernel while the MIDR field reads 0xF on every
    ARMv8/v9 core, so ``midr`` (sysfs ``midr_el1``) is preferred when available.
    """
    cpus = [b for b in blocks if "processor" in b]
    if not cpus:
        raise CpuInfoError("no 'processor' entries")
    first = cpus[0]
    if "vendor_id" in first:
        return _x86_identity(cpus)
    if "CPU implementer" in first:
        return _arm_identity(cpus, midr)
    # s390x / riscv / something we do not model: no identity, which the key turns into "generic".
    return CpuIdentity(vendor_id=VENDOR_UNKNOWN, threads=len(cpus), name=first.get("model name"))


def _x86_identity(cpus: list[dict[str, str]]) -> CpuIdentity:
    first = cpus[0]
    vendor = X86_VENDORS.get(first["vendor_id"].strip(), VENDOR_UNKNOWN)
    family = _int_field(first, "cpu family")
    model = _int_field(first, "model")
    cores: set[tuple[str, str]] = set()
    for block in cpus:
        if "physical id" in block and "core id" in block:
            cores.add((block["physical id"], block["core id"]))
    flags = first.get("flags", "").split()
    return CpuIdentity(
        vendor_id=vendor,
        family=None if family is None else str(family),
        id=None if model is None else str(model),
        name=first.get("model name") or None,
        cores=len(cores) or len(cpus),
        threads=len(cpus),
        stepping=first.get("stepping"),
        hypervisor="hypervisor" in flags,
        arch="amd64",
    )


def _arm_identity(cpus: list[dict[str, str]], midr: int | None) -> CpuIdentity:
    first = cpus[0]
    if midr is not None:
        implementer = (midr >> 24) & 0xFF
        family = (midr >> 16) & 0xFF
        model = midr & 0xFFFF
    else:
        implementer = _int_field(first, "CPU implementer", 16) or 0
        variant = _int_field(first, "CPU variant", 16) or 0
        part = _int_field(first, "CPU part", 16) or 0
        revision = _int_field(first, "CPU revision") or 0
        family = (variant << 4) | 0xF
        model = (part << 4) | revision
    return CpuIdentity(
        vendor_id=ARM_IMPLEMENTERS.get(implementer, VENDOR_UNKNOWN),
        family=str(family),
        id=str(model),
        name=first.get("model name") or None,
        cores=len(cpus),
        threads=len(cpus),
        stepping=None,
        arch="arm64",
    )


MIDR_DIR = "/sys/devices/system/cpu/cpu0/regs/identification"
MIDR_PATH = f"{MIDR_DIR}/midr_el1"
# What the kernel writes there (arch/arm64/kernel/cpuinfo.c: "0x%016llx\n"); a shorter hex number is
# taken too. int(x, 16) alone would take "-0x41", "0x1_0" and a 5,000-digit number.
_MIDR = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,16}")


def read_midr(host: HostRoot) -> int | None:
    """The arm64 ``midr_el1`` register as sysfs states it, ``None`` where the kernel offers none (no
    ``regs/identification`` directory: an x86 node, an older kernel). A file that is there but cannot
    be read (a directory, a FIFO, a link loop, ...) or holds no register value is a
    :class:`CpuInfoError` naming it: the identity NFD computes from the register cannot be known then,
    and guessing from ``/proc/cpuinfo`` would be a silent difference."""
    if not host.exists(MIDR_DIR):
        return None
    try:
        raw = host.read_optional(MIDR_PATH, limit=256)
    except HostPathError as exc:
        raise CpuInfoError(f"cannot read the arm64 CPU identity register {exc}") from None
    if raw is None:
        return None
    value = raw.strip()
    if not _MIDR.fullmatch(value):
        raise CpuInfoError(f"{MIDR_PATH} is not a register value as the kernel writes it: {value[:40]!r}")
    return int(value, 16)


def read_cpu_identity(host: HostRoot) -> CpuIdentity:
    """Read the host's CPU identity. Raises :class:`CpuInfoError` naming what could not be read --
    ``/proc/cpuinfo`` or the arm64 ``midr_el1`` -- and nothing else: what the node's files hold costs
    at most the CPU identity (the caller reports it and goes on), never the pass."""
    try:
        text = host.read_text("/proc/cpuinfo", limit=16 * 1024 * 1024)
    except HostPathError as exc:
        raise CpuInfoError(f"cannot read {exc}") from None
    blocks = parse_cpuinfo(text)
    return identity_from_cpuinfo(blocks, read_midr(host))


def general_node_key(
    vendor_id: str | None,
    family: str | None,
    model_id: str | None,
    cpu_name: str | None,
) -> str:
    """The general (CPU) node key ``${cpuManufacturer}-${id}`` from NFD label/annotation values.

    * manufacturer: ``vendor_id`` lowercased; empty or ``VendorUnknown`` (any case) → ``generic``;
    * id: the ``feature.gpustack.ai/cpu-name`` annotation, normalized in strip mode with a budget of
      ``53 - len(manufacturer)``; a value starting with ``@`` is an unresolved NFD template and
      counts as absent; a present name is used even when it normalizes to nothing;
    * without a name: ``<family>-<id>`` from the cpu-model labels, only when both exist;
    * no id → the key is the manufacturer alone.

    Whatever the values, the key is a label name with room for ``.capacity`` (at most 54
    characters): the manufacturer and ``<family>-<id>`` go through the same sanitizer as the name
    (a no-op on the values NFD writes), the manufacturer is cut to the budget, and an id that has no
    room left is dropped rather than left unbounded.
    """
    raw_manufacturer = (vendor_id or "").strip()
    manufacturer = ""
    if raw_manufacturer.lower() != VENDOR_UNKNOWN.lower():
        manufacturer = normalize_name(raw_manufacturer, "", GENERAL_KEY_BUDGET, False)
    manufacturer = manufacturer or GENERIC
    budget = GENERAL_KEY_BUDGET - len(manufacturer)
    ident = ""
    if budget <= 0:
        pass  # normalize_name reads a budget <= 0 as "unbounded"
    elif cpu_name is not None and not cpu_name.startswith("@"):
        ident = normalize_name(cpu_name, manufacturer, budget, True)
    elif family and model_id:
        ident = normalize_name(f"{family}-{model_id}", "", budget, False)
    return f"{manufacturer}-{ident}" if ident else manufacturer


def general_node_key_of(identity: CpuIdentity | None) -> str:
    """The general node key this node would get; ``generic`` when nothing is known of its CPU."""
    if identity is None:
        return GENERIC
    return general_node_key(identity.vendor_id, identity.family, identity.id, identity.name)
