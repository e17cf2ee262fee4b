"""The ``smlu`` driver mode: Cambricon's sMLU switch, read and set through CNDev (supplement §1.6,
§2.7 ``smlu-mode`` row).

- Read: ``cndevGetSMLUMode`` on the card at the accelerator's cnDev index (its ``physicalIndexes[0]``),
  after checking that index still names the same card (uuid). An accelerator advertising no logical
  slicing is ``declared=False`` (nothing to check).
- Set: read first; an equal state is a no-op (``changed=False``, no command). Otherwise
  ``cndevSetSMLUMode``; the equivalent host command is ``cnmon set -c <index> -smlu on|off``.
- No sMLU API (the library lacks ``cndevGetSMLUMode``/``cndevSetSMLUMode``, or there is no libcndev at
  all) → :class:`ModeError` "no sMLU API" **without** a command: no command can add a missing entry
  point. Any other write failure names the PCI address and cnDev index, carries both the read and the
  write error, and suggests the ``cnmon`` command, to be confirmed with ``cnmon`` first (equality of
  the cnDev index with cnmon's ``-c`` ordinal is unverified, §1.6).

Policy (enable only for sliced allocations, never turn it off behind live slices) belongs to the
allocator; this driver only reads and sets, and ``restore`` is ``set(state, before)``.
"""

from __future__ import annotations

from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.base import DetectContext, ModeChange, ModeError, ModeState
from gpustack_operator.manufacturers.cambricon.cndev import CnDev, CndevError, MissingSymbolError
from gpustack_operator.manufacturers.cambricon.detect import cndev_session, mlu_id

MODE = "smlu"
NO_API = "no sMLU API"


def cnmon_command(index: int, enabled: bool) -> str:
    return f"cnmon set -c {index} -smlu {'on' if enabled else 'off'}"


def _no_api(accelerator: str, why: str) -> ModeError:
    return ModeError(accelerator, MODE, f"{NO_API}: {why}; the allocation is refused and no command can add it")


def _resolve(cn: CnDev, accelerator: str, index: int) -> tuple[int, str]:
    """The cnDev handle at ``index`` and the card's PCI address, checked to be ``accelerator``."""
    try:
        handle = cn.handle(index)
        found = mlu_id(cn.uuid(handle))
    except CndevError as exc:
        raise ModeError(accelerator, MODE, f"cnDev index {index} cannot be opened", read_error=str(exc)) from None
    if found != accelerator:
        raise ModeError(
            accelerator,
            MODE,
            f"cnDev index {index} now names {found}, not this accelerator; re-detect before changing modes",
        )
    try:
        bus = cn.pci_bus_id(handle)
    except CndevError:
        bus = "unknown"
    return handle, bus


class SmluMode:
    """Cambricon sMLU mode (``ModeDriver``)."""

    mode = MODE
    writable = True

    def read_accelerator(self, cn: CnDev, accelerator: Accelerator) -> ModeState:
        sliced = accelerator.status.logical_sliced
        index = accelerator.physical_indexes[0] if accelerator.physical_indexes else accelerator.index
        if sliced is None or sliced.count == 0:
            return ModeState(
                accelerator=accelerator.id,
                index=index,
                mode=MODE,
                declared=False,
                detail="the accelerator advertises no logical slicing, so no sMLU instance is carved on it",
            )
        handle, bus = _resolve(cn, accelerator.id, index)
        try:
            enabled = cn.smlu_mode(handle)
        except MissingSymbolError as exc:
            raise _no_api(accelerator.id, str(exc)) from None
        except CndevError as exc:
            raise ModeError(
                accelerator.id,
                MODE,
                f"the sMLU mode of the card at PCI {bus} (cnDev index {index}) could not be read",
                read_error=str(exc),
            ) from None
        return ModeState(
            accelerator=accelerator.id,
            index=index,
            mode=MODE,
            enabled=enabled,
            detail=f"sMLU mode is {'on' if enabled else 'off'} (PCI {bus}, cnDev index {index})",
        )

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]:
        accelerators = [a for g in groups for a in g.accelerators]
        if not accelerators:
            return []
        with cndev_session(ctx) as cn:
            if isinstance(cn, str):
                raise _no_api(accelerators[0].id, cn)
            return [self.read_accelerator(cn, a) for a in accelerators]

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange:
        with cndev_session(ctx) as cn:
            if isinstance(cn, str):
                raise _no_api(state.accelerator, cn)
            return self._set(cn, state, enabled)

    def _set(self, cn: CnDev, state: ModeState, enabled: bool) -> ModeChange:
        handle, bus = _resolve(cn, state.accelerator, state.index)
        where = f"the card at PCI {bus} (cnDev index {state.index})"
        read_error: str | None = None
        before: bool | None = None
        try:
            before = cn.smlu_mode(handle)
        except MissingSymbolError as exc:
            raise _no_api(state.accelerator, str(exc)) from None
        except CndevError as exc:
            read_error = str(exc)  # unknown state: still write, the write makes it known
        if before is enabled:
            return ModeChange(
                accelerator=state.accelerator, index=state.index, mode=MODE, before=before, after=before, changed=False
            )
        command = cnmon_command(state.index, enabled)
        try:
            cn.set_smlu_mode(handle, enabled)
        except MissingSymbolError as exc:
            raise _no_api(state.accelerator, str(exc)) from None
        except CndevError as exc:
            raise ModeError(
                state.accelerator,
                MODE,
                f"{where} refused turning sMLU mode {'on' if enabled else 'off'}",
                read_error=read_error,
                write_error=str(exc),
                remedy=f"run `{command}` on the host for {where}, confirming the ordinal with `cnmon` first",
            ) from None
        return ModeChange(
            accelerator=state.accelerator,
            index=state.index,
            mode=MODE,
            before=before,
            after=enabled,
            changed=True,
            command=command,
            undo_command=cnmon_command(state.index, before) if before is not None else None,
        )


SMLU = SmluMode()
