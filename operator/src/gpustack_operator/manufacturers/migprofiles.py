"""MIG-named partition profiles, the part T-Head and Hygon share (supplement §5.1: ``<kind>`` is ``mig``
for the three partitioning manufacturers, ``<resource>.partitioned.mig-<profile>``).

Both vendors' libraries mirror NVML's GPU-instance profile API; what is common is how a driver's
profile name becomes the requestable ``<profile>`` segment, and that two profiles which normalise to
one name but disagree are withheld rather than merged (the published key is the name, and the
allocator resolves it back to a profile by that name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpustack_operator.ledger.models import AcceleratorPhysicalSliced, AcceleratorPhysicalSlicedProfile

_SEGMENT = re.compile(r"^[a-z0-9]([a-z0-9.\-]*[a-z0-9])?$")


def profile_name(raw: str) -> str | None:
    """The requestable name of a GPU-instance profile (``"MIG 1g.12gb"`` → ``"1g.12gb"``), or ``None``
    for a media/graphics variant (``+``) or a name that cannot be a resource-name segment."""
    name = raw.strip().removeprefix("MIG ").strip().lower()
    if not name or "+" in name or len(name) > 63 or not _SEGMENT.match(name):
        return None
    return name


def unique_by_name(
    profiles: Iterable[AcceleratorPhysicalSlicedProfile],
) -> tuple[list[AcceleratorPhysicalSlicedProfile], list[str]]:
    """The profiles, one per name in first-seen order, and the names withheld because two profiles
    of that name disagree in some published field (neither reading can be trusted)."""
    by_name: dict[str, AcceleratorPhysicalSlicedProfile] = {}
    divergent: list[str] = []
    for profile in profiles:
        seen = by_name.get(profile.name)
        if seen is None:
            by_name[profile.name] = profile
        elif seen != profile and profile.name not in divergent:
            divergent.append(profile.name)
    return [p for name, p in by_name.items() if name not in divergent], divergent


def physical_sliced(profiles: list[AcceleratorPhysicalSlicedProfile]) -> AcceleratorPhysicalSliced | None:
    """The partition capability of a card offering ``profiles`` (its ceiling the largest per-profile
    count), or ``None`` when it offers none: a family with nothing behind it is not advertised."""
    if not profiles:
        return None
    return AcceleratorPhysicalSliced(profiles=profiles, count=max(p.count for p in profiles))
