"""Label-safe names, the exact rules of the reference implementation (reference-rules §1–§3).

Everything that turns a product or CPU name into a Kubernetes label key or value lives here, once, so
the worker (reading NFD labels) and the Device Manager (reading the host) cannot drift.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

# The label key budget: 63 characters for the name part of a key.
LABEL_NAME_MAX = 63
# The general node key is later suffixed with ".capacity" and joined with "-" (reference rules §1).
GENERAL_KEY_BUDGET = LABEL_NAME_MAX - 1 - len(".capacity")  # = 53

_SEPARATORS = frozenset("-_.")
_TRADEMARKS = ("(R)", "(r)", "(TM)", "(tm)")
_PREFIX_CRUFT = re.compile(r"^(Genuine |[0-9]+(st|nd|rd|th) Gen )+")
_CORE_COUNT_SUFFIX = re.compile(r"(?i) [0-9]+-cores?$")


def strip_cpu_cruft(name: str) -> str:
    """Drop what a CPU brand string carries beyond its identity.

    ``" @ <freq>"`` and everything after it, the trademark markers, leading ``Genuine `` / ``Nth Gen ``,
    then a trailing `` CPU``, `` Processor`` and `` <n>-Core(s)`` (in that order).
    """
    name = name.split(" @ ", 1)[0]
    for marker in _TRADEMARKS:
        name = name.replace(marker, "")
    name = _PREFIX_CRUFT.sub("", name)
    name = name.strip()
    name = name.removesuffix(" CPU")
    name = name.removesuffix(" Processor")
    return _CORE_COUNT_SUFFIX.sub("", name)


def normalize_name(name: str, prefix: str, max_length: int, strip_cruft: bool) -> str:
    """Sanitize a product or CPU name into a label-safe slug (``NormalizeName`` of the reference).

    Character by character: letters are lowercased; ``[a-z0-9-_.]`` is kept; a space becomes ``-``;
    separators at the start are dropped and runs of separators collapse to the first. Whenever the
    buffer is exactly as long as ``prefix`` and equals it case-insensitively it is cleared — the
    "deduplicate the leading manufacturer" rule, which runs on the sanitized stream (so a non-strip
    ``Intel(R) Core(TM) i9-14900K`` becomes ``r-coretm-i9-14900k``). The walk stops once the buffer
    reaches ``max_length`` (``<= 0`` means unbounded); then one trailing separator is dropped.
    """
    if strip_cruft:
        name = strip_cpu_cruft(name)
    if max_length <= 0:
        max_length = len(name)
    buf: list[str] = []
    prev = ""
    for ch in name:
        if "A" <= ch <= "Z":
            ch = ch.lower()
        elif "a" <= ch <= "z" or "0" <= ch <= "9":
            pass
        elif ch == " " or ch in _SEPARATORS:
            if ch == " ":
                ch = "-"
            if not buf or prev in _SEPARATORS:
                continue
        else:
            continue
        buf.append(ch)
        prev = ch
        if len(buf) == len(prefix) and "".join(buf).lower() == prefix.lower():
            buf.clear()
            prev = ""
        if len(buf) >= max_length:
            break
    if buf and buf[-1] in _SEPARATORS:
        buf.pop()
    return "".join(buf)


def format_binary_si(mib: int) -> str:
    """``resource.Quantity`` BinarySI formatting of ``<mib>Mi``: the largest unit that fits, half-up.

    15360 → ``15Gi``; 16368 → ``16Gi``; 196608 → ``192Gi``; 512 → ``512Mi``; 0 → ``0``.
    """
    value = mib * 1024 * 1024
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    units = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
    chosen = ""
    divisor = 1
    for power, unit in enumerate(units, start=1):
        if magnitude >= 1024**power:
            chosen, divisor = unit, 1024**power
    if not chosen:
        return f"{sign}{magnitude}"
    whole, rest = divmod(magnitude, divisor)
    if rest * 2 >= divisor:
        whole += 1
    return f"{sign}{whole}{chosen}"


def format_memory_suffix(mib: int) -> str:
    """The optional group-id memory suffix: 0 → ``0g``, under 1 GiB → ``1g``, else e.g. ``140g``."""
    if mib == 0:
        return "0g"
    if mib < 1024:
        return "1g"
    formatted = format_binary_si(mib).lower()
    return formatted.removesuffix("i")


# The longest suffix a node label key puts after an aKey (``<manufacturer>-<id>.product``).
AKEY_SUFFIX_MAX = len(".product")


def group_id(manufacturer: str, name: str, memory_mib: int, with_memory: bool) -> str:
    """The Devices group id (``ConstructGroupID``): ``NVIDIA H100 80GB HBM3`` → ``h100-80gb-hbm3``.

    The name is cut so that every label key built on the id fits in 63 characters, the longest
    being ``<manufacturer>-<id>.product`` (the reference's budget left that one 8 characters over,
    an invalid key, for a long product name); the memory suffix keeps its 7 characters (more only for
    a memory no card has).
    """
    budget = LABEL_NAME_MAX - len(manufacturer) - 1 - AKEY_SUFFIX_MAX
    if with_memory:
        budget -= max(7, len(format_memory_suffix(memory_mib)) + 1)
    slug = normalize_name(name, manufacturer, budget, strip_cruft=False) if budget > 0 else ""
    if not with_memory:
        return slug
    return f"{slug}-{format_memory_suffix(memory_mib)}"


def group_ids(manufacturer: str, models: Sequence[tuple[str, int]], with_memory: bool) -> list[str]:
    """The ids of one manufacturer's groups in one pass (``models``: each group's name and memory MiB,
    in enumeration order), so that no two of them share an id.

    Each id is :func:`group_id`'s, unchanged whenever it is unique -- the reference rule. Two groups
    sharing one is what the reference does not guard against: two memory sizes of one product (a
    driver naming the A100 40 GB and 80 GB both ``NVIDIA A100-SXM4``), or two names that normalize
    alike. The ledger keys a group by id and manufacturer, and the node labels by
    ``<manufacturer>-<id>``, so the two would merge into one group with one memory. The rule:

    1. when memory is not already in the id (``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`` off), every
       group whose id collides carries its memory, the very suffix that setting adds
       (``a100-sxm4-40g``, ``a100-sxm4-80g``); the groups that do not collide keep the bare id;
    2. ids still shared after that (the memory rounds to one suffix, or memory was already in the
       id) take ``-2``, ``-3``, ... after the first, in enumeration order, the name shortened to fit
       the label budget.

    An unnamed group (empty id: no name, reference rules §2) stays empty: it has no label and the
    preflight reports it as not named, rather than a made-up identity.
    """
    ids = [group_id(manufacturer, name, memory, with_memory) for name, memory in models]
    if not with_memory:
        counts = Counter(i for i in ids if i)
        ids = [
            group_id(manufacturer, name, memory, True) if ident and counts[ident] > 1 else ident
            for ident, (name, memory) in zip(ids, models, strict=True)
        ]
    budget = LABEL_NAME_MAX - len(manufacturer) - 1 - len(".product")  # the longest key on an aKey
    taken = set(ids)
    seen: set[str] = set()
    out = []
    for ident in ids:
        if ident and ident in seen:
            ordinal = 2
            while True:
                suffix = f"-{ordinal}"
                candidate = ident[: budget - len(suffix)].rstrip("-_.") + suffix
                if candidate not in taken:
                    break
                ordinal += 1
            taken.add(candidate)
            ident = candidate
        seen.add(ident)
        out.append(ident)
    return out


_LABEL_VALUE_MAX = 63


def sanitize_label_value(value: str) -> str:
    """``SanitizeLabelValue``: keep ``[A-Za-z0-9-_.]`` (space → ``-``), collapse separator runs,
    trim separators at both ends, cap at 63 characters. ``Tesla T4`` → ``Tesla-T4``."""
    out: list[str] = []
    for ch in value:
        if ch == " ":
            ch = "-"
        if ch.isascii() and (ch.isalnum() or ch in _SEPARATORS):
            if ch in _SEPARATORS and (not out or out[-1] in _SEPARATORS):
                continue
            out.append(ch)
    text = "".join(out)[:_LABEL_VALUE_MAX]
    return text.strip("-_.")
