"""A container's requests read as numbers: Kubernetes quantities, a slice's budgets, a partition's
profile and units (reference rules §5, supplement §1.4 "Sliced", §5.2, §5.3).

Every function here raises only :class:`RefusedError` (``INVALID_ARGUMENT``) on bad input, naming the
resource key and what it accepts: a Pod spec is user input.

A slice's memory is ``.sliced.memory-percentage`` when set (floor(vram·pct/100)), else
``.sliced.memory-mib``; either is capped at the accelerator's VRAM; neither set is refused. Each is
read as Kubernetes' ``Quantity.Value()`` reads it (rounded up to a whole number) and a value <= 0
counts as not set, as the reference does. Its compute is ``.sliced.cores-percentage``, 100 when
absent or <= 0 (capped at 100). Its units are the webhook-derived ``.sliced.units`` when present,
else ``MemoryMibToUnits(memory, vram)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from gpustack_operator.allocator.ledger import D, memory_mib_to_units
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.manufacturers.respond import Code, RefusedError, SliceBudget

# Kubernetes resource.Quantity: <sign><digits>[.<digits>]<suffix>, suffix binary (Ki..Ei), decimal
# (n u m "" k M G T P E) or an exponent (e3, E-2).
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_EXPONENT = 30  # beyond this no resource quantity means anything; refusing keeps ints small


def parse_quantity(raw: str, key: str) -> Decimal:
    """A Kubernetes quantity (``"1"``, ``"50"``, ``"200k"``, ``"1Gi"``, ``"1e3"``) as a Decimal."""
    text = raw.strip() if isinstance(raw, str) else ""
    match = _QUANTITY.match(text) if len(text) <= 64 else None
    if match is None:
        raise RefusedError(
            f"{key}: {str(raw)[:64]!r} is not a Kubernetes quantity; use a number such as 1, 50 or 10240",
            Code.INVALID_ARGUMENT,
        )
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
        if suffix in _BINARY:
            return value * (Decimal(1024) ** _BINARY[suffix])
        if suffix in _DECIMAL:
            return value.scaleb(_DECIMAL[suffix])
        exponent = int(suffix[1:])
    except (InvalidOperation, ValueError) as exc:  # pragma: no cover - the pattern admits only numbers
        raise RefusedError(
            f"{key}: {str(raw)[:64]!r} is not a Kubernetes quantity ({exc})", Code.INVALID_ARGUMENT
        ) from None
    if abs(exponent) > _MAX_EXPONENT:
        raise RefusedError(f"{key}: {str(raw)[:64]!r} is out of range for a resource quantity", Code.INVALID_ARGUMENT)
    return value.scaleb(exponent)


def parse_count(raw: str, key: str) -> int:
    """A whole, non-negative quantity (an extended resource's value), else refused."""
    value = parse_quantity(raw, key)
    if value < 0 or value != value.to_integral_value() or value > Decimal(10) ** 15:
        raise RefusedError(f"{key}: {str(raw)[:64]!r} must be a whole number of at least 0", Code.INVALID_ARGUMENT)
    return int(value)


def quantity_of(resources: Mapping[str, str], key: str) -> int | None:
    """The whole count ``key`` is requested with, ``None`` when it is absent or not a whole count."""
    raw = resources.get(key)
    if raw is None:
        return None
    try:
        return parse_count(raw, key)
    except RefusedError:
        return None


def quantity_value(raw: str, key: str) -> int:
    """A quantity read the way Kubernetes' ``Quantity.Value()`` reads it: rounded *up* to a whole
    number (``"33.3"`` -> 34, ``"0.5"`` -> 1). The reference reads every slice budget so
    (reference rules §5); kept within 10**15 so a silly value stays a small int."""
    value = parse_quantity(raw, key).to_integral_value(rounding=ROUND_CEILING)
    return int(max(min(value, Decimal(10) ** 15), -(Decimal(10) ** 15)))


def slice_budget(
    names: ResourceNames, resources: Mapping[str, str], vram_mib: int, who: str = "the container"
) -> SliceBudget:
    """The budgets of one logical slice on an accelerator of ``vram_mib`` (reference rules §5):
    a positive ``.sliced.memory-percentage`` wins (floor(vram·pct/100)), else a positive
    ``.sliced.memory-mib``; either capped at the VRAM. A key that is absent or not positive counts as
    not set, and neither set is refused. Cores: ``.sliced.cores-percentage``, 100 when absent or <= 0
    (capped at 100: a percentage of one accelerator's compute)."""
    pct_key, mib_key = names.sliced_memory_percentage, names.sliced_memory_mib
    pct_raw, mib_raw = resources.get(pct_key), resources.get(mib_key)
    pct = quantity_value(pct_raw, pct_key) if pct_raw is not None else 0
    mib = quantity_value(mib_raw, mib_key) if mib_raw is not None else 0
    if pct <= 0 and mib <= 0:
        unusable = [f"{k} is {v}" for k, v in ((pct_key, pct_raw), (mib_key, mib_raw)) if v is not None]
        raise RefusedError(
            f"{who}: a {names.sliced} request must set {pct_key} or {mib_key}"
            + (f" to a positive value ({', '.join(unusable)})" if unusable else ""),
            Code.INVALID_ARGUMENT,
        )
    if vram_mib <= 0:
        raise RefusedError(
            f"{who}: the accelerator's VRAM is unknown (0 MiB), so no memory budget can be set; "
            "check the device-manager's detection of it",
            Code.FAILED_PRECONDITION,
        )
    memory = min(vram_mib * pct // 100, vram_mib) if pct > 0 else min(mib, vram_mib)
    if memory <= 0:
        raise RefusedError(
            f"{who}: a memory budget of {pct_raw if pct > 0 else mib_raw} is less than 1 MiB of this "
            f"accelerator's {vram_mib} MiB; ask for more",
            Code.INVALID_ARGUMENT,
        )
    cores = 100
    cores_raw = resources.get(names.sliced_cores_percentage)
    if cores_raw is not None:
        value = quantity_value(cores_raw, names.sliced_cores_percentage)
        if value > 0:
            cores = min(value, 100)
    units = units_of(resources, names.sliced_units, who)
    if units is None:
        units = memory_mib_to_units(memory, vram_mib)
    return SliceBudget(cores_percent=cores, memory_mib=memory, units=min(units, D))


def units_of(resources: Mapping[str, str], key: str, who: str = "the container") -> int | None:
    """A webhook-derived ``.units`` request (positive, whole), ``None`` when absent."""
    raw = resources.get(key)
    if raw is None:
        return None
    units = parse_count(raw, key)
    if units <= 0:
        raise RefusedError(f"{who}: {key} must be a positive whole number, not {raw}", Code.INVALID_ARGUMENT)
    return units


def partition_profile(names: ResourceNames, resources: Mapping[str, str], who: str = "the container") -> str:
    """The one profile a partition request names (``.partitioned.<kind>-<profile>``; supplement §5.3 rule 3)."""
    profiles = sorted({p for p in (names.profile_of(k) for k in resources) if p is not None})
    if not profiles:
        raise RefusedError(
            f"{who}: a {names.partitioned} request must name a profile, e.g. {names.partitioned_profile('<profile>')}",
            Code.INVALID_ARGUMENT,
        )
    if len(profiles) > 1:
        raise RefusedError(
            f"{who}: a Pod may request only one partition profile, found [{' '.join(profiles)}]", Code.INVALID_ARGUMENT
        )
    key = names.partitioned_profile(profiles[0])
    raw = resources.get(key)
    if raw is not None and quantity_of(resources, key) != 1:  # supplement §5.3 rule 5
        raise RefusedError(
            f"{who}: {key}: Invalid value: {raw!r}: a partition profile request must be exactly 1 instance",
            Code.INVALID_ARGUMENT,
        )
    return profiles[0]


def partition_units(
    names: ResourceNames, resources: Mapping[str, str], profile_mib: int, vram_mib: int, who: str = "the container"
) -> int:
    """A partition's units: its ``.partitioned.units`` request, else its profile's VRAM in units
    (a partition and a slice of equal VRAM cost equal credits, supplement §5.2)."""
    units = units_of(resources, names.partitioned_units, who)
    if units is None:
        units = memory_mib_to_units(profile_mib, vram_mib) if vram_mib > 0 and profile_mib > 0 else 0
    return min(units, D)
