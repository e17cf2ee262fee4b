"""The manufacturer registry: one line per manufacturer, one folder each."""

from __future__ import annotations

from gpustack_operator.manufacturers import (
    amd,
    ascend,
    cambricon,
    hygon,
    iluvatar,
    metax,
    mthreads,
    nvidia,
    thead,
)
from gpustack_operator.manufacturers.base import Manufacturer

REGISTRY: dict[str, Manufacturer] = {
    m.MANUFACTURER.name: m.MANUFACTURER
    for m in (amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, nvidia, thead)
}

NAMES: tuple[str, ...] = tuple(sorted(REGISTRY))


class UnknownManufacturerError(ValueError):
    pass


def parse_manufacturers(values: list[str] | None) -> list[str]:
    """``--manufacturer`` values (repeatable, comma-separated, any case) → sorted known names.

    No value means all nine. An unknown name is refused with the list of known ones.
    """
    if not values:
        return list(NAMES)
    chosen: set[str] = set()
    for value in values:
        for item in value.split(","):
            name = item.strip().lower().replace("_", "-")
            if not name:
                continue
            name = {"t-head": "thead", "moorethreads": "mthreads", "moore-threads": "mthreads"}.get(name, name)
            if name not in REGISTRY:
                raise UnknownManufacturerError(f"unknown manufacturer {item.strip()!r}; choose from {', '.join(NAMES)}")
            chosen.add(name)
    if not chosen:
        raise UnknownManufacturerError(f"no manufacturer named; choose from {', '.join(NAMES)}")
    return sorted(chosen)


def select_subset(values: list[str] | None) -> list[str]:
    """``gather_subset``-style selection: names add, ``!name`` removes, ``all`` adds all nine.

    Only exclusions (``['!thead']``) start from all nine; any addition starts from none. Nothing
    left after the exclusions is refused (an empty pass would read as "no accelerators"). Names are
    normalised as in :func:`parse_manufacturers`; unknown ones are refused naming the choices.
    """
    if not values:
        return list(NAMES)
    items = [item.strip() for value in values for item in value.split(",") if item.strip()]
    adds = [i for i in items if not i.startswith("!")]
    chosen: set[str] = set() if adds else set(NAMES)
    for item in items:
        exclude = item.startswith("!")
        name = item[1:].strip() if exclude else item
        if name.lower() == "all":
            names = set(NAMES)
        else:
            try:
                names = set(parse_manufacturers([name]))
            except UnknownManufacturerError:
                raise UnknownManufacturerError(
                    f"unknown manufacturer {item!r}; choose from all, {', '.join(NAMES)} (prefix ! to exclude)"
                ) from None
        chosen = chosen - names if exclude else chosen | names
    if not chosen:
        raise UnknownManufacturerError(f"{', '.join(items)} leaves no manufacturer to detect")
    return sorted(chosen)
