"""Ascend's container-share mode: the driver flag that lets one NPU be mounted into more than one
container (supplement §1.6, device-discovery "Ascend: two DCMI API generations").

Read with ``dcmi_get_device_share_enable``, written with ``dcmi_set_device_share_enable``, both
addressed by (card id, device-in-card) — slots 1 and 2 of the accelerator's ``physicalIndexes``. The
equivalent host command is ``npu-smi set -t device-share -i <card> -c <device-in-card> -d 1|0``; the
flag persists until reboot or that command.

Read outcomes (supplement §1.6):

1. libdcmi not loaded, or a container-share entry point missing from it → the flag reads as unknown
   and a set is refused without writing, with no command offered;
2. the DCMI V2 generation declares no container-share query at all → ``declared=False`` ("this
   generation (DCMI V2) declares no container-share flag"): nothing to read, write or offer;
3. any other read failure → the write is still attempted; if it fails too, both errors are reported
   with the ``npu-smi`` remedy.
"""

from __future__ import annotations

import logging

from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers.ascend.dcmi import (
    V1_SHARE_ENTRY_POINTS,
    Dcmi,
    DcmiError,
    DcmiUnavailableError,
    DeviceRef,
    open_dcmi,
)
from gpustack_operator.manufacturers.ascend.detect import identify, iter_npus
from gpustack_operator.manufacturers.base import DetectContext, ModeChange, ModeError, ModeState

log = logging.getLogger(__name__)

MODE = "container-share"
V2_DETAIL = "this generation (DCMI V2) declares no container-share flag"
READ_FAILED = "read failed: "
NOT_LOADED = "libdcmi is not loaded"


def npu_smi_command(card: int, device: int, enabled: bool) -> str:
    """The host command equivalent to a write (``-i`` card id, ``-c`` device in the card)."""
    return f"npu-smi set -t device-share -i {card} -c {device} -d {1 if enabled else 0}"


def dcmi_ref(accelerator: Accelerator) -> DeviceRef | None:
    """(card, device-in-card) from ``physicalIndexes`` = [physical id, card id, device-in-card]."""
    indexes = accelerator.physical_indexes
    if len(indexes) < 3:
        return None
    return DeviceRef(indexes[1], indexes[2])


def _missing_entry_points(dcmi: Dcmi) -> list[str]:
    return [name for name in V1_SHARE_ENTRY_POINTS if not dcmi.lib.has(name)]


class ContainerShare:
    """The container-share :class:`~gpustack_operator.manufacturers.base.ModeDriver`."""

    mode = MODE
    writable = True

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]:
        accelerators = [a for g in groups for a in g.accelerators]
        try:
            dcmi = open_dcmi(ctx.view)
        except DcmiUnavailableError as exc:
            return [self._state(a, None, detail=f"{NOT_LOADED}: {exc}") for a in accelerators]
        if dcmi.api == "v2":
            return [self._state(a, None, declared=False, detail=V2_DETAIL) for a in accelerators]
        missing = _missing_entry_points(dcmi)
        states: list[ModeState] = []
        for accelerator in accelerators:
            ref = dcmi_ref(accelerator)
            if ref is None:
                states.append(self._state(accelerator, None, detail="carries no dcmi card/device index"))
            elif missing:
                states.append(self._state(accelerator, None, detail=f"libdcmi exports no {', '.join(missing)}"))
            else:
                states.append(self._read_one(dcmi, accelerator, ref))
        return states

    def _read_one(self, dcmi: Dcmi, accelerator: Accelerator, ref: DeviceRef) -> ModeState:
        try:
            enabled = dcmi.share_enabled(ref)
        except DcmiError as exc:
            return self._state(accelerator, None, card=ref.card, detail=f"{READ_FAILED}{exc}")
        return self._state(accelerator, enabled, card=ref.card)

    @staticmethod
    def _state(
        accelerator: Accelerator,
        enabled: bool | None,
        *,
        card: int | None = None,
        declared: bool = True,
        detail: str | None = None,
    ) -> ModeState:
        ref = dcmi_ref(accelerator)
        index = card if card is not None else (ref.card if ref is not None else accelerator.index)
        return ModeState(
            accelerator=accelerator.id, index=index, mode=MODE, declared=declared, enabled=enabled, detail=detail
        )

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange:
        try:
            dcmi = open_dcmi(ctx.view)
        except DcmiUnavailableError as exc:
            raise ModeError(state.accelerator, MODE, f"{NOT_LOADED}, so nothing was written ({exc})") from None
        if dcmi.api == "v2":
            raise ModeError(state.accelerator, MODE, V2_DETAIL)
        missing = _missing_entry_points(dcmi)
        if missing:
            raise ModeError(
                state.accelerator,
                MODE,
                f"libdcmi exports no {', '.join(missing)}, so the flag cannot be read and nothing was written",
            )
        ref = self._locate(dcmi, state)
        command = npu_smi_command(ref.card, ref.device, enabled)
        try:
            dcmi.set_share_enabled(ref, enabled)
        except DcmiError as exc:
            read_error = None
            if state.enabled is None and state.detail:
                read_error = state.detail.removeprefix(READ_FAILED)
            raise ModeError(
                state.accelerator,
                MODE,
                f"could not {'enable' if enabled else 'disable'} container-share "
                f"on card {ref.card} device {ref.device}",
                read_error=read_error,
                write_error=str(exc),
                remedy=f"run `{command}` on the host",
            ) from None
        after = self._read_back(dcmi, ref, enabled)
        log.info("ascend: container-share on card %d device %d is now %s", ref.card, ref.device, after)
        return ModeChange(
            accelerator=state.accelerator,
            index=ref.card,
            mode=MODE,
            before=state.enabled,
            after=after,
            changed=after is not state.enabled,
            command=command,
            undo_command=npu_smi_command(ref.card, ref.device, state.enabled) if state.enabled is not None else None,
        )

    @staticmethod
    def _read_back(dcmi: Dcmi, ref: DeviceRef, written: bool) -> bool:
        try:
            return dcmi.share_enabled(ref)
        except DcmiError as exc:
            log.debug("ascend: container-share read-back on card %d device %d: %s", ref.card, ref.device, exc)
            return written

    @staticmethod
    def _locate(dcmi: Dcmi, state: ModeState) -> DeviceRef:
        """The (card, device) whose identity die is ``state.accelerator``, enumerated afresh."""
        try:
            for ref in iter_npus(dcmi):
                if identify(dcmi, ref) == state.accelerator:
                    return ref
        except DcmiError as exc:
            raise ModeError(state.accelerator, MODE, f"DCMI could not enumerate the NPUs: {exc}") from None
        raise ModeError(state.accelerator, MODE, "no NPU with this id on the host")


CONTAINER_SHARE = ContainerShare()

__all__ = ["CONTAINER_SHARE", "MODE", "V2_DETAIL", "ContainerShare", "npu_smi_command"]
