"""Ascend chip names → SoC name → family, and the logical slicing a family offers (reference rules §9).

DCMI reports a chip name, and the generations disagree on its shape: a V1 driver drops the vendor
prefix (``910B2``), the A5 generation keeps it (``Ascend950PR``). Three derived values hang off it:

* the **product name** — the chip name with the ``Ascend`` prefix exactly once (``Ascend910B2``,
  ``Ascend950PR``): what the group is named after, so the group id is ``910b2`` either way;
* the **SoC name** — the product name when it is a SoC the table below lists, otherwise the first
  member of its family (``910B9`` → ``Ascend910B1``), with every ``950*`` folded onto ``Ascend950``
  (its suffixes are an open set: ``Ascend950PR`` and ``Ascend950DT`` ship today);
* the **family** — a band of the SoC version number (``910B``, ``910C``, ``310P``, ``950``…).

The table and the fallbacks are the reference implementation's (``guessSocNameFromDeviceName`` /
``getFamilyFromSocName`` in gpustack-operator ``pkg/devicemanager/detector/ascend/device.go``, itself
borrowed from torch_npu ``NpuVariables.cpp`` and mind-cluster ``devmanager/common/utils.go``).
"""

from __future__ import annotations

import re

from gpustack_operator.ledger.models import AcceleratorLogicalSliced

PREFIX = "Ascend"

# SoC name -> SoC version (torch_npu's numbering; the family is a band of it).
SOC_VERSIONS: dict[str, int] = {
    "Ascend910PremiumA": 100,
    "Ascend910ProA": 101,
    "Ascend910A": 102,
    "Ascend910ProB": 103,
    "Ascend910B": 104,
    "Ascend310P1": 200,
    "Ascend310P2": 201,
    "Ascend310P3": 202,
    "Ascend310P4": 203,
    "Ascend310P5": 204,
    "Ascend310P7": 205,
    "Ascend910B1": 220,
    "Ascend910B2": 221,
    "Ascend910B2C": 222,
    "Ascend910B3": 223,
    "Ascend910B4": 224,
    "Ascend910B4-1": 225,
    "Ascend310B1": 240,
    "Ascend310B2": 241,
    "Ascend310B3": 242,
    "Ascend310B4": 243,
    "Ascend910_9391": 250,
    "Ascend910": 250,
    "Ascend910_9392": 251,
    "Ascend910_9381": 252,
    "Ascend910_9382": 253,
    "Ascend910_9372": 254,
    "Ascend910_9362": 255,
    "Ascend910_9363": 256,
    "Ascend910_9579": 260,
    "Ascend910_95": 260,
    "Ascend950": 260,
}

# (upper bound of the SoC version band, family)
_FAMILY_BANDS: tuple[tuple[int, str], ...] = (
    (200, "910"),
    (220, "310P"),
    (240, "910B"),  # 910B / A2
    (250, "310B"),
    (260, "910C"),  # 910C / A3
    (270, "950"),  # 950 / A5
)
FAMILIES: frozenset[str] = frozenset(f for _, f in _FAMILY_BANDS)

# Go's RE2 ``\d`` is ASCII only; ``[0-9]`` keeps Python's unicode digits out.
_910A = re.compile(r"^910")
_910B = re.compile(r"^(910B[0-9]|A2G[0-9])")
_310P = re.compile(r"^(310P[0-9]?|I2[0-9]?)")
_950_PREFIX = "950"
SOC_950 = "Ascend950"

# Family -> the CANN runtime majors the operator image ships a vcann-rt build for (one
# ``cann-<major>-<family>`` directory each). A pair not listed is not offered logical slicing at all,
# rather than offered and then failing to start on a directory that was never built.
SLICED_RUNTIME_MAJORS: dict[str, frozenset[int]] = {
    "910B": frozenset({8, 9}),
    "910C": frozenset({8, 9}),
    "950": frozenset({9}),
    "310P": frozenset({9}),
}
DEFAULT_RUNTIME_MAJOR = 8  # the library directory's default major when no CANN version was read
MAX_SLICES = 63  # the maximum user processes one device serves


def _bare(name: str) -> str:
    """The chip name without surrounding space and without the optional ``Ascend`` prefix."""
    return name.strip().removeprefix(PREFIX).strip()


def product_name(chip_name: str) -> str:
    """The chip name with the vendor prefix exactly once: ``910B2`` / ``Ascend910B2`` → ``Ascend910B2``.

    An empty chip name stays empty (a device the library could not name stays unnamed)."""
    bare = _bare(chip_name)
    return f"{PREFIX}{bare}" if bare else ""


def soc_name(chip_name: str) -> str:
    """The SoC a chip name belongs to, or ``""`` when it is unknown (reference rules §9).

    Exact table entries are themselves; any ``950*`` folds to ``Ascend950``; an unlisted 310P, 310B
    or 910B name falls back to its family's first member; any other ``910*`` is ``Ascend910A``.
    """
    bare = _bare(chip_name)
    if not bare:
        return ""
    candidate = PREFIX + bare
    if candidate in SOC_VERSIONS:
        return candidate
    if bare.startswith(_950_PREFIX):
        return SOC_950
    if _310P.match(bare):
        return "Ascend310P1"
    if "310B" in bare:
        return "Ascend310B1"
    if _910B.match(bare):
        return "Ascend910B1"
    if _910A.match(bare):
        return "Ascend910A"
    return ""


def family_of_soc(soc: str) -> str:
    """The family of a SoC name from :data:`SOC_VERSIONS`, ``""`` for anything else."""
    version = SOC_VERSIONS.get(soc)
    if version is None:
        return ""
    for bound, family in _FAMILY_BANDS:
        if version < bound:
            return family
    return ""


def family(chip_name: str) -> str:
    """``910B2`` → ``910B``; ``Ascend950DT`` → ``950``; unknown or empty → ``""``."""
    return family_of_soc(soc_name(chip_name))


def cann_major(runtime_version: str | None) -> int | None:
    """The CANN major of a normalized runtime version, compared as a number (``10.0`` → 10).

    No version read at all is the default major 8 (the library directory's default); a version
    whose first component is not a number has no major.
    """
    if not runtime_version:
        return DEFAULT_RUNTIME_MAJOR
    head = runtime_version.split(".", 1)[0].strip()
    if not head.isascii() or not head.isdigit() or len(head) > 9:  # no CANN major has ten digits
        return None
    return int(head)


def logical_sliced(family_name: str, runtime_version: str | None) -> AcceleratorLogicalSliced | None:
    """63 slices with compute overcommit for a family/CANN-major pair the image ships a runtime for
    (910B and 910C on CANN 8 or 9; 310P and 950 on CANN 9), otherwise none."""
    majors = SLICED_RUNTIME_MAJORS.get(family_name)
    major = cann_major(runtime_version)
    if majors is None or major is None or major not in majors:
        return None
    return AcceleratorLogicalSliced(count=MAX_SLICES, cores_percentage_overcommit=True)


# -- A5 product type (reference rules §9) --------------------------------------------------------

# The A5 carrier boards of the 300I inference cards (1P and 4P); any other mainboard is a server or a
# super pod, which reports its own product-type code. (gpustack-operator pkg/devicemanager/ascendproduct)
MAINBOARD_CARD_1P = 0x68
MAINBOARD_CARD_4P = 0x6C
PRODUCT_TYPES: dict[int, str] = {
    0: "server-8p",
    1: "pod-1d",
    2: "pod-2d",
    3: "server-16p",
    4: "server-32p",
    5: "card-1p",
    6: "card-4p",
}


def a5_product(mainboard_id: int, super_pod_type: int | None) -> tuple[str, int] | None:
    """(product type word, vendor code) of an A5 node: mainboard 0x68 → card-1p (5), 0x6c → card-4p
    (6); otherwise the super pod's own code, an unknown one giving an empty word with the code kept.
    ``None`` when the mainboard does not settle it and the super pod type could not be read."""
    if mainboard_id == MAINBOARD_CARD_1P:
        return PRODUCT_TYPES[5], 5
    if mainboard_id == MAINBOARD_CARD_4P:
        return PRODUCT_TYPES[6], 6
    if super_pod_type is None:
        return None
    return PRODUCT_TYPES.get(super_pod_type, ""), super_pod_type


__all__ = [
    "FAMILIES",
    "SOC_VERSIONS",
    "a5_product",
    "cann_major",
    "family",
    "family_of_soc",
    "logical_sliced",
    "product_name",
    "soc_name",
]
