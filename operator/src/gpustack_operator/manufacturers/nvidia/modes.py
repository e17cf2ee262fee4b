"""NVIDIA's driver mode: MIG (``mig``), read and set through NVML.

* ``read``: the *current* MIG mode of every NVIDIA accelerator in the groups (the pending one is named
  in ``detail`` when it differs). A card without MIG (every consumer card, pre-Ampere data-center
  cards) answers "Not Supported": ``declared=False`` — an answer, not a failure. Any other refusal
  leaves ``enabled=None`` with the reason in ``detail``.
* ``set``: ``nvmlDeviceSetMigMode``, the call ``nvidia-smi -i <index> -mig 1|0`` makes. Asking for
  the mode already in force (and not pending a change) writes nothing (``changed=False``); a pending
  change the other way is cancelled by writing the current mode back. ``restore`` is ``set(before)``.
  A refused write, or a write NVML accepted only as *pending* (the GPU is in use, or needs a reset to
  apply it), raises :class:`ModeError` naming the accelerator, the mode, NVML's error string and the
  remedy.

The index in the commands is NVML's (``nvidia-smi -i`` takes it), read back from the device.
"""

from __future__ import annotations

from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import DetectContext, ModeChange, ModeError, ModeState
from gpustack_operator.manufacturers.nvidia import nvml as codes
from gpustack_operator.manufacturers.nvidia.nvml import Handle, Nvml, NvmlError, NvmlUnavailableError, open_nvml

MODE = "mig"
NO_MIG = "this accelerator has no MIG mode"


def mig_command(index: int, enabled: bool) -> str:
    return f"nvidia-smi -i {index} -mig {1 if enabled else 0}"


def reset_command(index: int) -> str:
    return f"nvidia-smi -i {index} -r"


def remedy_for(code: int, index: int, enabled: bool) -> str:
    """What a person does about a refused or pending MIG change on accelerator ``index``."""
    reset = f"reset the GPU ({reset_command(index)}) or reboot the node"
    if code == codes.ERROR_NO_PERMISSION:
        return f"run as root (MIG mode changes need CAP_SYS_ADMIN), or run {mig_command(index, enabled)} on the node"
    if code == codes.ERROR_IN_USE:
        return (
            "stop the processes using the GPU (nvidia-smi -i "
            f"{index} --query-compute-apps=pid --format=csv lists them; the Device Manager and "
            f"nvidia-persistenced count), then {reset}"
        )
    if code in codes.UNSUPPORTED:
        return "none: this accelerator has no MIG mode"
    return f"{reset}; if it persists, run {mig_command(index, enabled)} on the node to see the driver's message"


class MigMode:
    """The ``mig`` :class:`~gpustack_operator.manufacturers.base.ModeDriver`."""

    mode = MODE
    writable = True

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]:
        accelerators = [
            (acc.id, acc.physical_indexes[0] if acc.physical_indexes else acc.index)
            for g in groups
            if g.manufacturer == ctx.manufacturer.name
            for acc in g.accelerators
        ]
        if not accelerators:
            return []
        try:
            with open_nvml(ctx.view) as nvml:
                return [self._read_one(nvml, uuid, index) for uuid, index in accelerators]
        except NvmlUnavailableError as exc:
            return [
                ModeState(accelerator=uuid, index=index, mode=MODE, enabled=None, detail=f"could not read: {exc}")
                for uuid, index in accelerators
            ]

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange:
        try:
            with open_nvml(ctx.view) as nvml:
                return self._set(nvml, state, enabled)
        except NvmlUnavailableError as exc:
            raise ModeError(
                state.accelerator,
                MODE,
                "NVML is not usable on this node",
                read_error=exc.reason,
                remedy="install or load the NVIDIA driver (nvidia-smi must work on the node)",
            ) from None

    # -- one accelerator ---------------------------------------------------------------------

    @staticmethod
    def _read_one(nvml: Nvml, uuid: str, index: int) -> ModeState:
        try:
            h = nvml.handle_by_uuid(uuid)
            index = _index(nvml, h, index)
            current, pending = nvml.mig_mode(h)
        except NvmlError as exc:
            if exc.unsupported:
                return ModeState(accelerator=uuid, index=index, mode=MODE, declared=False, detail=NO_MIG)
            return ModeState(accelerator=uuid, index=index, mode=MODE, enabled=None, detail=f"could not read: {exc}")
        detail = None
        if pending != current:
            detail = (
                f"MIG {'enable' if pending else 'disable'} is pending: it applies at the next GPU reset "
                f"({reset_command(index)}) or reboot"
            )
        return ModeState(accelerator=uuid, index=index, mode=MODE, enabled=bool(current), detail=detail)

    @staticmethod
    def _set(nvml: Nvml, state: ModeState, enabled: bool) -> ModeChange:
        uuid, index = state.accelerator, state.index
        try:
            h = nvml.handle_by_uuid(uuid)
            index = _index(nvml, h, index)
            current, pending = nvml.mig_mode(h)
        except NvmlError as exc:
            if exc.unsupported:
                raise ModeError(
                    uuid, MODE, f"{NO_MIG} (NVML index {index})", remedy=remedy_for(exc.code, index, enabled)
                ) from None
            raise ModeError(
                uuid,
                MODE,
                f"could not read the MIG mode of NVML index {index}",
                read_error=str(exc),
                remedy=remedy_for(exc.code, index, enabled),
            ) from None
        before = bool(current)
        if before == enabled and bool(pending) == enabled:
            return ModeChange(accelerator=uuid, index=index, mode=MODE, before=before, after=before, changed=False)
        try:
            activation = nvml.set_mig_mode(h, enabled)
        except NvmlError as exc:
            raise ModeError(
                uuid,
                MODE,
                f"could not {'enable' if enabled else 'disable'} MIG on NVML index {index}",
                write_error=str(exc),
                remedy=remedy_for(exc.code, index, enabled),
            ) from None
        if activation != codes.SUCCESS:
            raise ModeError(
                uuid,
                MODE,
                f"MIG {'enable' if enabled else 'disable'} on NVML index {index} is only pending",
                write_error=_error_string(nvml, activation),
                remedy=remedy_for(
                    activation if activation == codes.ERROR_IN_USE else codes.ERROR_RESET_REQUIRED, index, enabled
                ),
            )
        after = _current(nvml, h, enabled)
        return ModeChange(
            accelerator=uuid,
            index=index,
            mode=MODE,
            before=before,
            after=after,
            changed=True,
            command=mig_command(index, enabled),
            undo_command=mig_command(index, before),
        )


def _index(nvml: Nvml, h: Handle, fallback: int) -> int:
    try:
        return nvml.index(h)
    except NvmlError:
        return fallback


def _current(nvml: Nvml, h: Handle, assumed: bool) -> bool:
    try:
        return bool(nvml.mig_mode(h)[0])
    except NvmlError:
        return assumed


def _error_string(nvml: Nvml, code: int) -> str:
    try:
        return f"{nvml.error_string(code)} (NVML error {code})"
    except NvmlError:
        return f"NVML error {code}"


MIG_MODE = MigMode()
