"""Ascend's host CLI for the preflight cross-check (``npu-smi info -l``).

``npu-smi info -l`` lists NPUs (boards) as ``key : value`` blocks under a ``Total Count`` header::

        Total Count                    : 2

        NPU ID                         : 0
        Product Name                   : IT21PDAB01
        Serial Number                  : 033LBH10P3000100
        Chip Count                     : 1

        NPU ID                         : 1
        Chip Count                     : 2

The detector counts DCMI devices -- chips -- and an NPU carries ``Chip Count`` of them (one on a
910B; two on an Atlas 300I Duo / 310P card and on an A3 / 910C board). So the count is the sum of
the chips of every distinct NPU ID; an NPU whose block states no ``Chip Count`` (older layouts print
only ``NPU ID``, ``Product Name``, ``Serial Number``), or states ``N/A``, is one chip. Keys are
indented with spaces or tabs and padded to a column, and the spacing around ``:`` varies; NPU IDs
need not be contiguous (``0 2 4``; cards report ids such as ``2944`` or ``32768``).

What cannot be read is named in the result's ``problem`` rather than guessed: a Chip Count before
any NPU ID, a value no npu-smi prints (an id too long for a card, a chip count past a board's), and
a ``Total Count`` naming more NPUs than were listed (output cut short).
"""

from __future__ import annotations

import re

from gpustack_operator.manufacturers.base import HostCli, HostCount, quote_lines

_NUMBER = re.compile(r"[0-9]{1,9}", re.ASCII)
_SPACES = re.compile(r"\s+")
_NOT_APPLICABLE = frozenset({"n/a", "na", "-", ""})
_NPU_ID = "npu id"
_CHIP_COUNT = "chip count"
_TOTALS = frozenset({"total count", "card count"})
# A board carries one, two (310P Duo, A3) or a few chips; a count past this is garbled output.
MAX_CHIPS_PER_NPU = 16


def _field(line: str) -> tuple[str, str] | None:
    """``key : value`` -> (normalised key, stripped value), or ``None`` for a line of another shape."""
    key, colon, value = line.partition(":")
    if not colon:
        return None
    return _SPACES.sub(" ", key.strip()).lower(), value.strip()


def _number(value: str) -> int | None:
    return int(value) if _NUMBER.fullmatch(value) else None


def count_npu_smi_info_l(output: str) -> HostCount:
    """The chips ``npu-smi info -l`` lists (see the module docstring). Never raises."""
    chips: dict[str, int] = {}  # NPU label -> chips, in listing order
    current: str | None = None
    stated_total: int | None = None
    unread: list[str] = []
    anything = False
    for line in output.splitlines():
        if not line.strip():
            continue
        anything = True
        kv = _field(line)
        if kv is None:
            continue
        key, value = kv
        if key == _NPU_ID:
            npu = _number(value)
            if npu is not None:
                current = f"NPU {npu}"
            elif value.lower() in _NOT_APPLICABLE:
                current = f"NPU N/A (#{len(chips) + 1})"
            else:
                unread.append(line)
                current = f"NPU {value[:16]!r} (#{len(chips) + 1})"
            chips[current] = max(chips.get(current, 0), 1)
        elif key == _CHIP_COUNT:
            count = _number(value)
            if current is None:
                unread.append(line)
            elif count is not None and 1 <= count <= MAX_CHIPS_PER_NPU:
                chips[current] = max(chips[current], count)
            elif value.lower() not in _NOT_APPLICABLE:
                unread.append(line)
        elif key in _TOTALS:
            stated_total = _number(value)
            if stated_total is None and value.lower() not in _NOT_APPLICABLE:
                unread.append(line)
    seen = tuple(f"{npu} chip {c}" for npu, n in chips.items() for c in range(n))
    problems = []
    if unread:
        quoted = quote_lines(unread)
        problems.append(
            f"{len(unread)} line(s) could not be read (an NPU whose chip count is unreadable counts one chip): {quoted}"
        )
    if stated_total is not None and stated_total > len(chips):
        problems.append(f"it states Total Count {stated_total} but lists {len(chips)} NPU(s), so it was cut short")
    if not chips and anything and stated_total is None and not unread:
        problems.append("it printed no 'NPU ID : <n>' line and no 'Total Count', so it listed none")
    problem = f"npu-smi info -l: {'; '.join(problems)}" if problems else None
    return HostCount(seen=seen, problem=problem)


HOST_CLI = HostCli(
    name="npu-smi",
    args=("info", "-l"),
    count=count_npu_smi_info_l,
    mounts=(
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/davinci<N> for each accelerator",
        "/usr/local/Ascend/driver",
    ),
)
