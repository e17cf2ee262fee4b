"""Reading and converging vendor driver modes, for every manufacturer that has one.

Vendor knowledge (how to read and write a mode, the command that undoes it) lives in each
manufacturer's ``modes.py``; this module only selects accelerators, keeps a set idempotent (no write
when the mode is already as asked), predicts in dry-run, and restores.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.ledger.podrecords import PODS_DIR, PodRecord, holders
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import DetectContext, ModeChange, ModeDriver, ModeError, ModeState


class ModeUsageError(ValueError):
    """The request names a mode or accelerator that does not exist here."""


class SlicesHeldError(ModeError):
    """Turning a mode off would pull slicing from under pods the allocator recorded as holding slices
    there (``/var/lib/gpustack/operator/pods``); ``force`` overrides."""

    def __init__(self, mode: str, accelerators: list[str], held: list[PodRecord]) -> None:
        super().__init__(
            ", ".join(accelerators),
            mode,
            f"refusing to turn it off: pods hold slices there: {'; '.join(r.label() for r in held)}",
            remedy=f"delete or drain those pods first (their records are under {PODS_DIR}), "
            "or force it (--force / force: true), which strands their slices",
        )
        self.held = held


def driver_for(manufacturer: str, mode: str) -> ModeDriver:
    modes = REGISTRY[manufacturer].modes
    if mode not in modes:
        known = ", ".join(sorted(modes)) or "none"
        raise ModeUsageError(f"{manufacturer} has no driver mode {mode!r} (its modes: {known})")
    return modes[mode]


def select(states: list[ModeState], accelerator: str | list[str]) -> list[ModeState]:
    """``all``, a driver index, or an accelerator id (uuid) — or a list of them — in driver order."""
    wanted = [accelerator] if isinstance(accelerator, str) else accelerator
    if "all" in wanted:
        return states
    chosen: list[ModeState] = []
    for selector in wanted:
        match = [s for s in states if s.accelerator == selector or str(s.index) == selector]
        if not match:
            known = ", ".join(f"{s.index} ({s.accelerator})" for s in states) or "none detected"
            raise ModeUsageError(f"no accelerator {selector!r}; choose all, an index or an id: {known}")
        chosen.extend(m for m in match if m not in chosen)
    return sorted(chosen, key=lambda s: s.index)


@dataclass(frozen=True)
class ModePlan:
    state: ModeState
    enabled: bool

    @property
    def needed(self) -> bool:
        return self.state.declared and self.state.enabled is not self.enabled


def converge(
    ctx: DetectContext,
    driver: ModeDriver,
    groups: list[DevicesGroup],
    accelerator: str | list[str],
    enabled: bool,
    *,
    dry_run: bool = False,
    force: bool = False,
) -> list[ModeChange]:
    """Bring the selected accelerators to ``enabled``; report before/after for each.

    An accelerator already there is reported ``changed=False`` and not written. An accelerator whose
    generation declares no such mode is refused (nothing to set). Turning a mode off where the
    allocator's per-pod records show slices held is refused naming the pods (:class:`SlicesHeldError`,
    also in dry run: the prediction is the refusal) unless ``force``; an unreadable record counts as
    held. In dry run nothing is written and the predicted change is returned.
    """
    states = select(driver.read(ctx, groups), accelerator)
    undeclared = [s for s in states if not s.declared]
    if undeclared:
        first = undeclared[0]
        raise ModeError(first.accelerator, driver.mode, first.detail or "this accelerator declares no such mode")
    if not driver.writable:
        raise ModeError(states[0].accelerator if states else "all", driver.mode, "this mode is read-only")
    if not enabled and not force:
        turning_off = [s.accelerator for s in states if ModePlan(s, enabled).needed]
        held = holders(ctx.view, ctx.manufacturer.name, set(turning_off)) if turning_off else []
        if held:
            raise SlicesHeldError(driver.mode, turning_off, held)
    changes: list[ModeChange] = []
    for state in states:
        plan = ModePlan(state, enabled)
        if not plan.needed or dry_run:
            changes.append(
                ModeChange(
                    accelerator=state.accelerator,
                    index=state.index,
                    mode=driver.mode,
                    before=state.enabled,
                    after=enabled if plan.needed else state.enabled,
                    changed=plan.needed,
                )
            )
            continue
        changes.append(driver.set(ctx, state, enabled))
    return changes


def restore(ctx: DetectContext, driver: ModeDriver, groups: list[DevicesGroup], change: ModeChange) -> ModeChange:
    """Put one accelerator back to what ``change.before`` recorded."""
    if change.before is None or not change.changed:
        return change.model_copy(update={"changed": False, "after": change.before})
    (state,) = select(driver.read(ctx, groups), change.accelerator)
    if state.enabled is change.before:
        return ModeChange(
            accelerator=state.accelerator,
            index=state.index,
            mode=driver.mode,
            before=state.enabled,
            after=state.enabled,
            changed=False,
        )
    return driver.set(ctx, state, change.before)
