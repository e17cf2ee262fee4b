"""The contract every manufacturer implements, and the types detection speaks.

One folder per manufacturer (``manufacturers/<name>/``) holds everything that vendor knows; this
module holds only what is common. Adding a manufacturer means one folder plus one line in
:mod:`gpustack_operator.manufacturers` (the registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpustack_operator.discovery.pci import PciDevice, PciScan
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.settings import (
    PciVendorMatch,
    Settings,
    SettingsError,
    manufacturer_overrides,
)


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
    partition_kind: str | None = None
    # PCI device id -> product name as the vendor's own library names it. A device missing here is
    # one the PCI pass cannot name (the vendor backend names it).
    products: Mapping[str, str] = field(default_factory=dict)


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
        return device.class_matches(class_prefixes) and device.class_matches(
            self.identity.accelerator_classes
        )


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
class Detected:
    """The pass ran. An empty list is a measurement: this manufacturer has nothing here."""

    groups: list[DevicesGroup]


@dataclass(frozen=True)
class Unmeasured:
    """The pass could not measure. It carries no claim about the hardware (spec: failure semantics)."""

    reason: str


DetectOutcome = Detected | Unmeasured


@dataclass(frozen=True)
class DetectContext:
    """What a detector may read: the host, the node-wide PCI scan, the settings."""

    host: HostRoot
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


@dataclass(frozen=True)
class Manufacturer:
    identity: Identity
    detect: Detector

    @property
    def name(self) -> str:
        return self.identity.name


__all__ = [
    "DetectContext",
    "DetectOutcome",
    "Detected",
    "Detector",
    "Identity",
    "Manufacturer",
    "Resolved",
    "SettingsError",
    "Unmeasured",
    "resolve",
]
