"""AMD ``HSA_CU_MASK`` arithmetic that needs no allocation: is a card's topology maskable, what is
its allocation atom, what is the smallest percentage it can honour (reference rules §4).

Compute on a sliced AMD accelerator is a hardware CU mask ROCr applies while initialising. A mask
ROCr rejects fails *open* — no error, no log line, the container gets the whole card — so a
topology that cannot be masked safely is refused here rather than guessed at. The architecture is
chosen from the gfx name, never from the XCC count: gfx90a (MI210, an MI250X die) is CDNA with one
XCC.

* RDNA (``gfx10*``/``gfx11*``/``gfx12*``): CUs pair into WGPs and the kernel deals mask bits to
  shader engines round-robin, so a slice is a multiple of ``SE`` WGPs; the quantum is ``2·SE`` CUs.
* CDNA/GCN (``gfx9*``): mask bit *i* lands on XCC *i mod XCC*, so a slice is a multiple of ``XCC``
  CUs; the quantum is ``XCC``.

``SE`` is HSA's ``NUM_SHADER_ENGINES`` — KFD ``array_count / simd_arrays_per_engine``, device wide
(an MI300X reports 32: four per XCC).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.base import DetectContext


class CuMaskTopologyError(ValueError):
    """No CU mask can be derived for this card (the reason names the card's gfx target)."""


class Architecture(StrEnum):
    RDNA = "RDNA"
    CDNA = "CDNA"


@dataclass(frozen=True)
class CuMaskTopology:
    """One card as the mask derivation sees it."""

    gfx: str  # "gfx1101", "gfx942", "gfx90a"
    cu: int  # the whole card's compute units; mask bits are CU indices
    se: int  # NUM_SHADER_ENGINES, device wide
    sa_per_se: int  # NUM_SHADER_ARRAYS_PER_SE (recorded; no rule reads it)
    xcc: int  # NUM_XCC; 0 means not reported, which CDNA refuses

    @property
    def architecture(self) -> Architecture | None:
        if self.gfx.startswith(("gfx10", "gfx11", "gfx12")):
            return Architecture.RDNA
        if self.gfx.startswith("gfx9"):
            return Architecture.CDNA
        return None

    def validate(self) -> None:
        """Raise :class:`CuMaskTopologyError` when no safe mask exists (reference §4 "Validate
        refuses when"): no CUs; an unknown architecture; RDNA with SE = 0, an odd CU count or more
        engines than WGPs; CDNA with XCC = 0 (an unreported count cannot be assumed to be one: a
        mask sized for one XCC leaves the others unmasked); a quantum that does not divide the CUs."""
        name = self.gfx
        if self.cu <= 0:
            raise CuMaskTopologyError(f"cannot derive a CU mask for {name!r}: it reports {self.cu} compute units")
        arch = self.architecture
        if arch is None:
            raise CuMaskTopologyError(
                f"cannot derive a CU mask for {name!r}: unrecognised GPU architecture family, only "
                "gfx9* (CDNA/GCN) and gfx10*/gfx11*/gfx12* (RDNA) are supported"
            )
        if arch is Architecture.CDNA:
            if self.xcc <= 0:
                raise CuMaskTopologyError(
                    f"cannot derive a CU mask for {name!r}: it reports no XCC count, and a mask sized "
                    "for one XCC would leave every other XCC unmasked"
                )
        else:
            if self.se <= 0:
                raise CuMaskTopologyError(f"cannot derive a CU mask for {name!r}: it reports {self.se} shader engines")
            if self.cu % 2:
                raise CuMaskTopologyError(
                    f"cannot derive a CU mask for {name!r}: {self.cu} compute units is odd, and RDNA "
                    "allocates in WGP pairs"
                )
            if self.se > self.cu // 2:
                raise CuMaskTopologyError(
                    f"cannot derive a CU mask for {name!r}: {self.se} shader engines exceed its {self.cu // 2} WGPs"
                )
        quantum = self.quantum
        if self.cu % quantum:
            raise CuMaskTopologyError(
                f"cannot derive a CU mask for {name!r}: its {quantum}-CU quantum does not divide "
                f"{self.cu} compute units"
            )

    @property
    def quantum(self) -> int:
        """The smallest number of CUs a window starts at or spans (meaningful once validated)."""
        if self.architecture is Architecture.CDNA:
            return max(self.xcc, 1)
        return 2 * self.se

    @property
    def atom_and_units(self) -> tuple[int, int]:
        """(atom, units): RDNA counts WGPs in rounds of SE; CDNA counts CUs in rounds of XCC."""
        if self.architecture is Architecture.CDNA:
            return max(self.xcc, 1), self.cu
        return self.se, self.cu // 2

    @property
    def min_percent(self) -> int:
        """The smallest requestable ``cores%``: ``ceil((100·atom − 50) / units)`` — the least
        percentage whose half-up rounded unit count reaches one atom (60 CU / 3 SE → 9; 304 CU /
        8 XCC → 3). Meaningful once validated."""
        atom, units = self.atom_and_units
        return -(-(100 * atom - 50) // units)

    def window_cus(self, percent: int) -> int:
        """The CUs a ``percent`` request gets: round half up, align *down* to the atom, never above
        the card. Below one atom is refused, never clamped: the message ends with the smallest
        slice."""
        self.validate()
        if not 1 <= percent <= 100:
            raise CuMaskTopologyError(f"cannot derive a CU mask for {self.gfx!r}: {percent}% is not a percentage")
        atom, units = self.atom_and_units
        n = (units * percent + 50) // 100 // atom * atom  # round half up, then align down
        if n == 0:
            what = "CUs" if self.architecture is Architecture.CDNA else "WGPs"
            raise CuMaskTopologyError(
                f"cannot derive a CU mask for {self.gfx!r}: {percent}% of {units} {what} is below one "
                f"{atom}-{what[:-1]} atom on this card; its smallest slice is {self.min_percent}%"
            )
        n = min(n, units)
        return n if self.architecture is Architecture.CDNA else 2 * n

    def describe(self) -> str:
        """The ``cu-mask-topology`` row's detail: CUs, the allocation atom, the smallest slice."""
        if self.architecture is Architecture.CDNA:
            atom = f"{self.quantum}-CU atom (one CU on each of {self.xcc} XCC)"
        else:
            atom = f"{self.quantum}-CU atom ({self.se} WGPs, one per shader engine)"
        return f"{self.gfx}: {self.cu} CUs, {atom}, smallest slice {self.min_percent}%"


# -- placement (the allocator's half: where on the card a window goes) --------------------------


@dataclass(frozen=True)
class Window:
    """A CU window ``[lo, hi]`` (inclusive CU indices) on one card."""

    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def mask(self, position: int) -> str:
        """``HSA_CU_MASK``'s entry for this card at ``position`` in ``ROCR_VISIBLE_DEVICES``."""
        return f"{position}:{self.lo}-{self.hi}"


def merge(windows: Iterable[Window]) -> list[Window]:
    """Occupancy merged: overlapping or touching windows become one (a CU counts once however many
    slices hold it)."""
    merged: list[Window] = []
    for window in sorted(windows, key=lambda w: (w.lo, w.hi)):
        if merged and window.lo <= merged[-1].hi + 1:
            last = merged[-1]
            merged[-1] = Window(last.lo, max(last.hi, window.hi))
        else:
            merged.append(window)
    return merged


def overlap(window: Window, occupied: list[Window]) -> int:
    """How many of ``window``'s CUs the (merged) occupancy already holds."""
    return sum(max(0, min(window.hi, o.hi) - max(window.lo, o.lo) + 1) for o in occupied)


def place(topology: CuMaskTopology, cus: int, occupied: Iterable[Window]) -> Window:
    """Where a ``cus``-CU window goes (reference rules §4 "Placement"): the lowest start on the
    quantum grid that overlaps nothing; on a full card the start that overlaps least, the occupancy
    merged first (a CU two slices share counts once), ties to the lowest start. ``cus`` is a
    :meth:`CuMaskTopology.window_cus` answer, so it is a multiple of the quantum and at most the card."""
    topology.validate()
    quantum = topology.quantum
    if cus <= 0 or cus > topology.cu or cus % quantum:
        raise CuMaskTopologyError(
            f"cannot place a {cus}-CU window on {topology.gfx!r}: it is not a multiple of its "
            f"{quantum}-CU quantum within {topology.cu} CUs"
        )
    held = merge(occupied)
    best: tuple[int, int] | None = None  # (overlap, start)
    for start in range(0, topology.cu - cus + 1, quantum):
        cost = overlap(Window(start, start + cus - 1), held)
        if cost == 0:
            return Window(start, start + cus - 1)
        if best is None or cost < best[0]:
            best = (cost, start)
    assert best is not None  # cus <= cu, so start 0 is always on the grid
    return Window(best[1], best[1] + cus - 1)


def delivered_percent(topology: CuMaskTopology, cus: int) -> str:
    """The share of the card ``cus`` CUs are, as the log line states it (``"45"``, ``"33.3"``)."""
    tenths = (cus * 1000 + topology.cu // 2) // topology.cu
    return str(tenths // 10) if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}"


def topology_of(gpu: kfd.KfdGpu) -> CuMaskTopology:
    return CuMaskTopology(
        gfx=gpu.gfx, cu=gpu.cu_count, se=gpu.shader_engines, sa_per_se=gpu.shader_arrays_per_engine, xcc=gpu.xcc
    )


def read_topologies(ctx: DetectContext) -> dict[str, CuMaskTopology]:
    """Every accelerator's mask topology by accelerator id, from the same KFD reading detection
    uses. Raises :class:`kfd.KfdError` when the topology cannot be read."""
    if not kfd.kfd_present(ctx.view):
        raise kfd.KfdError(kfd.KFD_CLASS, "absent: the amdgpu driver has not brought KFD up")
    return {a.gpu.uuid: topology_of(a.gpu) for a in kfd.enumerate_accelerators(ctx) if a.gpu.unique_id}


@dataclass(frozen=True)
class CuMaskCheck:
    """The ``cu-mask-topology`` answer for one accelerator: ``ok`` with a detail, or the reason."""

    ok: bool
    detail: str


def check(topologies: dict[str, CuMaskTopology], accelerator: str) -> CuMaskCheck:
    """``ok`` when the card's topology reads and validates; ``unavailable`` when no agent names
    the card or it cannot be masked (supplement §2.7)."""
    topology = topologies.get(accelerator)
    if topology is None:
        return CuMaskCheck(False, f"no KFD node names {accelerator}, so its CU topology is unknown")
    try:
        topology.validate()
    except CuMaskTopologyError as exc:
        return CuMaskCheck(False, str(exc))
    return CuMaskCheck(True, topology.describe())
