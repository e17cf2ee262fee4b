"""The contract every manufacturer implements, and the types detection speaks.

One folder per manufacturer (``manufacturers/<name>/``) holds everything that vendor knows; this
module holds only what is common. Adding a manufacturer means one folder plus one line in
:mod:`gpustack_operator.manufacturers` (the registry).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import CamelModel, DevicesGroup
from gpustack_operator.manufacturers.respond import Family, Partitioner, Responder
from gpustack_operator.node.pci import PciDevice, PciScan
from gpustack_operator.settings import (
    PciVendorMatch,
    Settings,
    SettingsError,
    manufacturer_overrides,
)


@dataclass(frozen=True)
class PreloadLibrary:
    """Where a manufacturer's slicing preload library sits in the preload-library tree (spec: "Where
    the preload libraries come from", "One driver stack per node"); read by ``preload/layout.py``.

    ``directory`` alone is one flat directory for every runtime version. With ``runtime`` (``cuda``,
    ``cann``) the subtree is ``<directory>/<runtime>-<major>`` -- ``-<family>`` appended when
    ``per_family`` -- the major taken from the group's runtime version, ``default_major`` when it
    has none. ``no_arm64`` says why the arm64 image carries no such library (``None``: it does).
    """

    directory: str
    runtime: str | None = None
    default_major: int | None = None
    per_family: bool = False
    no_arm64: str | None = None

    def __post_init__(self) -> None:
        if (self.runtime is None) != (self.default_major is None):
            raise ValueError(f"preload library {self.directory}: a runtime subdir needs a default major, and only it")


@dataclass(frozen=True)
class ProbeTraits:
    """This manufacturer's slice probe (supplement §2.7 "Slice rows — probes"): vendor knowledge.

    ``image`` is the probe image as a template over the accelerator group (``{runtime_major}``: the
    major of its runtime version; ``{family}``: its SoC family as a directory-name part), or ``None``
    when no default is claimed (``--probe-image`` required; ``no_image`` says why). ``reader`` is the
    command run inside the probe that prints the memory figure the container sees, one MiB integer per
    visible accelerator; ``cap`` names where the injection puts the cap. ``vendor_runtime`` is the docker
    ``--runtime`` the probe needs (the vendor container runtime's handler); ``nerdctl_gpus`` says
    nerdctl's door to it is ``--gpus`` (no door, with a ``vendor_runtime``, means the step is emitted
    under nerdctl). ``record`` is set where no shared object of ours is mounted and the driver's own
    per-slice record answers ``sliced-runtime-loaded`` instead of the address space (Hygon)."""

    image: str | None
    reader: str
    cap: str
    vendor_runtime: str | None = None
    nerdctl_gpus: bool = False
    no_image: str | None = None
    record: str | None = None


@dataclass(frozen=True)
class PreflightTraits:
    """How preflight's questions 2 and 3 read this manufacturer (supplement §2.7: the tier table and
    "The full table"); vendor knowledge, so it lives with the vendor's identity.

    ``driver_row`` is the capability of its driver-read row and ``driver_row_mode`` the mode it answers
    for; ``mode_driver`` the :attr:`Backend.modes` key that row reads, when it reads one;
    ``established`` -- the row asks the mode on where off and puts it straight back;
    ``container_probe`` -- its tier reaches a real container; ``no_driver_read_note`` why it has no
    driver-read row; ``no_seam`` the families whose responder calls the driver directly, with no seam a
    synthetic grant could substitute (reported, never driven)."""

    driver_row: str | None = None
    driver_row_mode: str | None = None
    mode_driver: str | None = None
    established: bool = False
    container_probe: bool = False
    no_driver_read_note: str | None = None
    no_seam: Mapping[Family, str] = field(default_factory=dict)
    probe: ProbeTraits | None = None
    # the RespondContext seam through which its responder's driver control writes go: preflight records
    # them (the synthetic allocation renders its record and environment, the hardware is unchanged)
    recorded_writes: str | None = None


@dataclass(frozen=True)
class Identity:
    """What a manufacturer is, as defaults (each overridable, supplement §4.4)."""

    name: str
    display_name: str
    pci_vendor_id: str
    resource_name: str
    runtime_name: str | None
    # The PCI classes this manufacturer's accelerators present as, narrowing the node-wide class
    # prefixes: Huawei ships NICs (class 02) and a BMC VGA (class 03) under Ascend's vendor id 19e5,
    # and none of the nine ships an accelerator as a network controller.
    accelerator_classes: tuple[str, ...] = ("03", "0b", "12")
    # The kernel drivers its accelerators bind to (the PCI function's ``driver`` link): what scopes a
    # PCI entry whose vendor id cannot be read to this manufacturer alone (``PciScan.unreadable_for``).
    kernel_drivers: tuple[str, ...] = ()
    partition_kind: str | None = None
    # The preload library its slices load, or why it takes none (it slices in the driver or hardware).
    preload: PreloadLibrary | str | None = None
    # PCI device id -> product name as the vendor's own library names it. A device missing here is
    # one the PCI pass cannot name (the vendor backend names it).
    products: Mapping[str, str] = field(default_factory=dict)
    preflight: PreflightTraits = field(default_factory=PreflightTraits)


@dataclass(frozen=True)
class Resolved:
    """A manufacturer with the node's ``GPUSTACK_${MANUFACTURER}_*`` overrides applied."""

    identity: Identity
    pci: PciVendorMatch
    resource_name: str
    runtime_name: str | None
    partition_kind: str | None

    @property
    def name(self) -> str:
        return self.identity.name

    def matches(self, device: PciDevice, class_prefixes: tuple[str, ...]) -> bool:
        """Is this PCI function one of this manufacturer's accelerators?"""
        if device.vendor != self.pci.vendor:
            return False
        if self.pci.class_prefix and not device.class_code.startswith(self.pci.class_prefix):
            return False
        return device.class_matches(class_prefixes) and device.class_matches(self.identity.accelerator_classes)


def resolve(identity: Identity) -> Resolved:
    """Apply the environment's overrides; a malformed one is a :class:`SettingsError`."""
    overrides = manufacturer_overrides(identity.name)
    variable = f"GPUSTACK_{identity.name.upper()}_PCI_VENDOR_ID"
    pci = PciVendorMatch.parse(overrides.pci_vendor_id or identity.pci_vendor_id, variable)
    return Resolved(
        identity=identity,
        pci=pci,
        resource_name=overrides.acceleratable_resource_name or identity.resource_name,
        runtime_name=overrides.acceleratable_runtime_name or identity.runtime_name,
        partition_kind=overrides.partition_kind or identity.partition_kind,
    )


# -- detection outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Dropped:
    """An accelerator the driver enumerated but whose identity could not be read, so it was dropped
    (an accelerator is never identified by its PCI address): ``where`` the driver put it
    (``NVML index 3``, ``KFD node 2 (0000:c1:00.0)``), ``what`` could not be read and why."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(frozen=True)
class Detected:
    """The pass ran. An empty list is a measurement: this manufacturer has nothing here.

    Two pieces of evidence travel beside the groups without changing them (the ledger keeps the
    spec's "empty, no error" rule): ``driver`` -- why the driver answered nothing, when it did not
    (the library is absent, would not load or initialise, the kernel side is not up), in the
    library's own words; ``dropped`` -- accelerators it enumerated but could not name. Preflight
    weighs both against the PCI bus (see ``discovery/coverage.py``)."""

    groups: list[DevicesGroup]
    driver: str | None = None
    dropped: tuple[Dropped, ...] = ()


@dataclass(frozen=True)
class Unmeasured:
    """The pass could not measure. It carries no claim about the hardware (spec: failure semantics)."""

    reason: str


DetectOutcome = Detected | Unmeasured


@dataclass(frozen=True)
class DetectContext:
    """What a detector may read: the node view, the node-wide PCI scan, the settings.

    ``view`` is the node *as this process sees it* -- its own ``/sys``, ``/dev`` and the vendor
    library where it is mounted or injected (``/`` in production; a fixture tree in tests). It is
    never the preflight's host root: what the container cannot see, detection must not see either,
    or "eight accelerators your container cannot reach" reads as "ok"."""

    view: HostRoot
    pci: PciScan
    settings: Settings
    manufacturer: Resolved
    no_pci_check: bool = False


class Detector(Protocol):
    """A manufacturer's detection backend.

    It answers an absent driver, a library that will not initialise and a bus holding no card with
    ``Detected([])``; ``Unmeasured`` means only that this pass could not look. It must not raise —
    the detection loop contains anything that escapes as ``Unmeasured`` all the same.
    """

    def __call__(self, ctx: DetectContext) -> DetectOutcome: ...


# -- monitor -----------------------------------------------------------------------------------


class AcceleratorMetrics(CamelModel):
    """One usage sample of one accelerator (supplement §3.7). ``None`` = the vendor reports no such
    figure, never zero."""

    id: str
    memory: int = 0  # MiB
    memory_usage: int | None = None  # MiB
    memory_utilization: int | None = None  # percent
    cores_utilization: int | None = None  # percent
    temperature: int | None = None  # Celsius
    power_usage: int | None = None  # Watts
    unhealthy: bool = False


@dataclass(frozen=True)
class Measured:
    samples: list[AcceleratorMetrics]


MonitorOutcome = Measured | Unmeasured


class Monitor(Protocol):
    """One usage sample. Same failure semantics as :class:`Detector`; an unmeasured manufacturer is
    named as such by the caller, never dropped (a sample is worth what its timestamp claims)."""

    def __call__(self, ctx: DetectContext) -> MonitorOutcome: ...


# -- driver modes ------------------------------------------------------------------------------


class ModeState(BaseModel):
    """A driver mode as read on one accelerator."""

    accelerator: str  # the accelerator id (uuid)
    index: int  # the driver's own index (what the vendor CLI takes)
    mode: str  # "container-share", "smlu", "mig", "sgpu"
    declared: bool = True  # False: this generation/accelerator has no such mode at all
    enabled: bool | None = None  # None when not declared
    detail: str | None = None


class ModeChange(BaseModel):
    """What one set/restore did, with the command a person would run to undo it."""

    accelerator: str
    index: int
    mode: str
    before: bool | None
    after: bool | None
    changed: bool
    command: str | None = None  # the vendor command equivalent to what was done
    undo_command: str | None = None  # the vendor command that puts it back


class ModeError(Exception):
    """A mode could not be read or set. Names the accelerator, the mode, both errors where a read and
    a write failed, and the remedy."""

    def __init__(
        self,
        accelerator: str,
        mode: str,
        message: str,
        *,
        read_error: str | None = None,
        write_error: str | None = None,
        remedy: str | None = None,
    ) -> None:
        parts = [f"{mode} on {accelerator}: {message}"]
        if read_error:
            parts.append(f"read failed: {read_error}")
        if write_error:
            parts.append(f"write failed: {write_error}")
        if remedy:
            parts.append(f"remedy: {remedy}")
        super().__init__("; ".join(parts))
        self.accelerator = accelerator
        self.mode = mode
        self.read_error = read_error
        self.write_error = write_error
        self.remedy = remedy


class ModeDriver(Protocol):
    """A vendor driver mode: read on every accelerator, set on one (``restore`` = set to ``before``)."""

    mode: str
    writable: bool

    def read(self, ctx: DetectContext, groups: list[DevicesGroup]) -> list[ModeState]: ...

    def set(self, ctx: DetectContext, state: ModeState, enabled: bool) -> ModeChange: ...


# -- the host's own vendor CLI (preflight question 1's cross-check) ------------------------------


@dataclass(frozen=True)
class HostCount:
    """What a host CLI's output says, read by its vendor's parser.

    ``seen`` names each accelerator as the CLI does (``GPU 0``, ``NPU 4 chip 1``, ``GPU[3]``), once
    each, so ``accelerators`` is the count in the detector's own unit. ``problem`` is set when part of
    the output (or all of it) could not be read as the listing: those lines are not counted, and the
    sentence says which and why -- a zero with a problem is not "the host sees nothing".
    """

    seen: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def accelerators(self) -> int:
        return len(self.seen)


QUOTE_LIMIT = 120  # characters of one CLI line quoted in a problem
QUOTED = 3  # lines quoted at most


def quote_line(line: str) -> str:
    """One line of a CLI's output as a problem sentence quotes it (stripped, cut, ``repr``)."""
    line = line.strip()
    return repr(line if len(line) <= QUOTE_LIMIT else line[:QUOTE_LIMIT] + "...")


def quote_lines(lines: list[str]) -> str:
    """The first :data:`QUOTED` lines, quoted, with ``...`` when there were more."""
    return ", ".join(quote_line(u) for u in lines[:QUOTED]) + (", ..." if len(lines) > QUOTED else "")


@dataclass(frozen=True)
class HostCli:
    """How a manufacturer's own CLI is asked, on the host, what it sees.

    Only manufacturers whose output shape is established carry one (NVIDIA, Ascend, AMD): a wrong
    parse counts zero, and a zero reads as "the host sees nothing either" — the one answer that sends
    an operator to debug the wrong layer. ``count`` is the vendor's parser of that output (in its
    folder's ``hostcli.py``): it counts what the detector counts, and never raises on any text.
    """

    name: str  # "nvidia-smi"
    args: tuple[str, ...]  # ("-L",)
    count: Callable[[str], HostCount]  # the output's accelerators, in the detector's unit
    # What a container needs to see what the CLI sees (the remedy when the host sees more).
    mounts: tuple[str, ...] = ()
    # A library directory that may be mounted yet dangle (a symlink to a path not mounted).
    lib_dir: str | None = None


@dataclass(frozen=True)
class Backend:
    """What a manufacturer reads the node with (its detector, usage monitor and driver modes) and
    what it answers an allocation with: ``responder`` (``<vendor>/respond.py``, the contract in
    ``manufacturers/respond.py``) and, for a partitioning manufacturer, ``partitioner`` -- the vendor's
    partition calls bound to the library found in a node view."""

    detect: Detector
    monitor: Monitor | None = None
    modes: Mapping[str, ModeDriver] = field(default_factory=dict)
    responder: Responder | None = None
    partitioner: Callable[[HostRoot], Partitioner] | None = None


def bus_shows_none(ctx: DetectContext) -> bool:
    """The PCI check every detector starts with, settled without the backend: the check is on, the
    scan can vouch for this vendor, and the bus holds none of its accelerators.

    All nine detectors answer such a node ``Detected([])`` without loading a library; answering it
    here means their code (and bindings such as pynvml) is not even imported on a node that cannot
    use it -- most of what a detect pass costs on a node with one manufacturer or none.
    """
    if ctx.no_pci_check or ctx.pci.unreadable_for(ctx.manufacturer.pci.vendor):
        return False
    classes = ctx.settings.class_prefixes
    return not any(ctx.manufacturer.matches(d, classes) for d in ctx.pci.devices)


@dataclass(frozen=True)
class Manufacturer:
    """A registry entry: who the manufacturer is, and where its backend lives.

    ``backend`` names a module exporting ``BACKEND`` (:class:`Backend`); it is imported on first use,
    so importing the registry costs nine identities, not nine driver stacks.
    """

    identity: Identity
    backend: str
    host_cli: HostCli | None = None

    @property
    def name(self) -> str:
        return self.identity.name

    def loaded(self) -> Backend:
        """The backend (imported once; later calls are a dict lookup)."""
        backend = getattr(importlib.import_module(self.backend), "BACKEND", None)
        if not isinstance(backend, Backend):
            raise TypeError(f"{self.backend} does not export BACKEND as a Backend")
        return backend

    def detect(self, ctx: DetectContext) -> DetectOutcome:
        if bus_shows_none(ctx):
            return Detected([])
        return self.loaded().detect(ctx)

    @property
    def monitor(self) -> Monitor | None:
        return self.loaded().monitor

    @property
    def modes(self) -> Mapping[str, ModeDriver]:
        return self.loaded().modes

    @property
    def responder(self) -> Responder | None:
        return self.loaded().responder


__all__ = [
    "AcceleratorMetrics",
    "Backend",
    "DetectContext",
    "DetectOutcome",
    "Detected",
    "Detector",
    "Dropped",
    "HostCli",
    "HostCount",
    "Identity",
    "Manufacturer",
    "Measured",
    "ModeChange",
    "ModeDriver",
    "ModeError",
    "ModeState",
    "Monitor",
    "MonitorOutcome",
    "PreflightTraits",
    "PreloadLibrary",
    "Resolved",
    "SettingsError",
    "Unmeasured",
    "resolve",
]
