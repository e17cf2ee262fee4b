"""Turning NVML's raw answers into the values the ledger carries — pure functions, no NVML.

Each rule here matches the reference implementation's NVIDIA detector (``gpustack/gpustack-operator``
``pkg/devicemanager/detector/nvidia``) so labels and ``Devices`` values do not change for a user
switching from it.
"""

from __future__ import annotations

import re

from gpustack_operator.manufacturers.groups import normalize_bus_id

# Logical slicing through HAMi-core: the per-accelerator slice ceiling is the number of CUDA user
# processes a GPU serves concurrently (128 from Volta on) — the reference detector's constant.
LOGICAL_SLICE_COUNT = 128

# A memory bus this wide or wider is HBM (A30 3072 bits, A100/H100 5120); GDDR parts top out at
# 384 bits. ECC carves ~1/16 out of user-visible memory only on GDDR.
HBM_MEMORY_BUS_WIDTH_BITS = 1024

# nvmlDeviceArchitecture_t → the family names the compute-capability rule gives.
_ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada-Lovelace",
    9: "Hopper",
    10: "Blackwell",
}

_MAJOR = re.compile(r"([0-9]{1,9})(?:\.|\Z)")  # no CUDA major is 10 digits; int() refuses 4300+
_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")

# NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: the media-engine ("+me") variant of the 1-slice profile.
_PROBE_INDEX_1_SLICE_REV1 = 0x7
# NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: from here on every probe index is a +gfx / +me variant.
_PROBE_INDEX_FIRST_VARIANT = 0xA


def cuda_version_text(version: int) -> str | None:
    """``nvmlSystemGetCudaDriverVersion``'s integer → ``"major.minor"`` (12040 → ``"12.4"``).

    NVML encodes ``1000 * major + 10 * minor``; zero or negative means "not reported"."""
    if version <= 0:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def cuda_major(runtime_version: str | None) -> int | None:
    """The CUDA major of a ``runtimeVersion`` (``"12.4"`` → 12): it picks the ``cuda-<major>``
    HAMi-core build the allocator mounts (reference rule 5; mixed majors are refused)."""
    if not runtime_version:
        return None
    match = _MAJOR.match(runtime_version)
    return int(match.group(1)) if match else None


def compute_capability_text(major: int, minor: int) -> str | None:
    """``(9, 0)`` → ``"9.0"``; a zero major means the driver gave none."""
    if major <= 0:
        return None
    return f"{major}.{max(minor, 0)}"


def family_of_compute_capability(major: int, minor: int) -> str | None:
    """The product family from the CUDA compute capability (the reference detector's table)."""
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ampere" if minor < 9 else "Ada-Lovelace"
    return {
        1: "Tesla",
        2: "Fermi",
        3: "Kepler",
        5: "Maxwell",
        6: "Pascal",
        9: "Hopper",
        10: "Blackwell",
        12: "Blackwell",
    }.get(major)


def family_of_architecture(architecture: int) -> str | None:
    """The same family names from ``nvmlDeviceGetArchitecture`` (used when the compute capability
    could not be read)."""
    return _ARCHITECTURES.get(architecture)


def bus_id_of(bus_id: str, legacy: str = "", domain: int = 0, bus: int = 0, device: int = 0) -> str:
    """The accelerator's PCI address as the PCI scan spells it (``0000:1b:00.0``).

    NVML's ``busId`` has an 8-digit domain and uppercase hex (``00000000:1B:00.0``); the legacy
    field a 4-digit one. The first that parses wins; with neither, the address is composed from the
    numeric fields (function 0: NVML reports a GPU's function-0 address). ``""`` when nothing fits.
    """
    for text in (bus_id, legacy):
        match = _BUS_ID.match(text.strip())
        if match:
            dom, b, d, f = match.groups()
            return normalize_bus_id(f"{int(dom or '0', 16):04x}:{int(b, 16):02x}:{int(d, 16):02x}.{f}")
    if bus or device or domain:
        return f"{domain & 0xFFFF:04x}:{bus & 0xFF:02x}:{device & 0x1F:02x}.0"
    return ""


def is_exposed_profile(name: str, probe_index: int) -> bool:
    """Is this MIG profile one GPUStack offers? (supplement §5.6: ``+me``, ``+me.all`` and ``+gfx``
    are excluded).

    Every variant carries a ``+`` suffix in its NVML name. A profile read through the v1 call has no
    name; then the probe index decides: ``1_SLICE_REV1`` (``+me``) and everything from
    ``1_SLICE_GFX`` on are variants. (Only drivers older than the named call answer v1, and those
    predate the gfx/me-all ids.)"""
    if name:
        return "+" not in name
    return probe_index != _PROBE_INDEX_1_SLICE_REV1 and probe_index < _PROBE_INDEX_FIRST_VARIANT


def memory_slices(profile_mib: int, card_mib: int) -> int:
    """A profile's memory in eighths of the card, rounded half up (A100-80GB ``1g.10gb``:
    9728 / 10240 → 1; ``7g.80gb``: 80896 / 10240 → 8)."""
    per_slice = card_mib // 8
    if per_slice <= 0:
        return 0
    return (profile_mib + per_slice // 2) // per_slice


def profile_name_from_geometry(slice_count: int, mem_slices: int, card_mib: int) -> str:
    """``"<compute>g.<GB>gb"`` for a profile the v1 call could not name, from geometry (never from
    ``memorySizeMB / 1024``, which rounds off the marketing size)."""
    return f"{slice_count}g.{mem_slices * (card_mib // 1024) // 8}gb"


def restore_ecc_carveout(memory_mib: int, bus_width_bits: int | None, ecc_enabled: bool) -> int:
    """The card's physical memory where ECC hides part of it: on a GDDR bus (narrower than
    1024 bits) with ECC on, NVML reports 15/16 of it; HBM keeps ECC out of band. Unknown bus width →
    as reported."""
    if bus_width_bits is None or bus_width_bits <= 0 or bus_width_bits >= HBM_MEMORY_BUS_WIDTH_BITS:
        return memory_mib
    return memory_mib * 16 // 15 if ecc_enabled else memory_mib


def mib(value_bytes: int) -> int:
    return max(value_bytes, 0) >> 20


def watts(milliwatts: int) -> int:
    return max(milliwatts, 0) // 1000


def percent(part: int, whole: int) -> int | None:
    """``part`` as a whole percentage of ``whole`` (truncated), ``None`` when ``whole`` is zero."""
    if whole <= 0:
        return None
    return min(max(part, 0) * 100 // whole, 100)
