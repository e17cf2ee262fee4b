"""Resource names and token ids per manufacturer and family (reference rules §6, supplement §5.2).

A manufacturer's base resource (``Resolved.resource_name``, e.g. ``nvidia.com/gpu``) is the
exclusive family; ``.shared``, ``.sliced`` and ``.partitioned`` are the other device-plugin families,
``device.gpustack.ai/<manufacturer>.visibility`` the SSH sidecar's internal one. The node-capacity
keys (``.sliced.units``, ``.partitioned.<kind>-<profile>``, ...) are what a container's *request*
carries beside its family token; the allocator reads them, the kubelet never advertises them.

Token ids are ``<group>:<accelerator>:<index>`` with the index zero-padded to four digits and never
truncated (``:12345`` stays five digits). What an accelerator offers follows its reported capability
(spec "The device-plugin allocator"): one in a hardware partitioning mode (``status.physicalSliced``
set, as the NVIDIA/T-Head/Hygon detectors report MIG mode on) offers only ``.partitioned``; any other
offers exclusive, shared and -- when ``status.logicalSliced.count > 0`` -- sliced. Every accelerator
offers visibility.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_operator.ledger.models import Accelerator
from gpustack_operator.manufacturers.respond import Family

SHARED_TOKENS = 10  # shares per accelerator (supplement §5.2)
VISIBILITY_TOKENS = 512  # SlicedResourceMaxSize (supplement §1.7)
VISIBILITY_DOMAIN = "device.gpustack.ai"
DEFAULT_PARTITION_KIND = "mig"  # supplement §5.1: "<kind> is mig for all three partitioning manufacturers"
# The longest index a token id carries: a card offers at most VISIBILITY_TOKENS (512) of one family, so
# nine digits are far past any index this plugin advertises, and far short of int()'s 4,300-digit limit.
MAX_INDEX_DIGITS = 9


@dataclass(frozen=True)
class ResourceNames:
    """Every resource key of one manufacturer."""

    base: str  # "nvidia.com/gpu"
    manufacturer: str  # "nvidia"
    partition_kind: str = DEFAULT_PARTITION_KIND

    @property
    def exclusive(self) -> str:
        return self.base

    @property
    def shared(self) -> str:
        return f"{self.base}.shared"

    @property
    def sliced(self) -> str:
        return f"{self.base}.sliced"

    @property
    def partitioned(self) -> str:
        return f"{self.base}.partitioned"

    @property
    def visibility(self) -> str:
        return f"{VISIBILITY_DOMAIN}/{self.manufacturer}.visibility"

    # node-capacity keys (requests carry them; never device-plugin resources)
    @property
    def sliced_units(self) -> str:
        return f"{self.base}.sliced.units"

    @property
    def sliced_cores_percentage(self) -> str:
        return f"{self.base}.sliced.cores-percentage"

    @property
    def sliced_memory_percentage(self) -> str:
        return f"{self.base}.sliced.memory-percentage"

    @property
    def sliced_memory_mib(self) -> str:
        return f"{self.base}.sliced.memory-mib"

    @property
    def partitioned_units(self) -> str:
        return f"{self.base}.partitioned.units"

    def partitioned_profile(self, profile: str) -> str:
        """``nvidia.com/gpu.partitioned.mig-3g.40gb``."""
        return f"{self.base}.partitioned.{self.partition_kind}-{profile}"

    def profile_of(self, key: str) -> str | None:
        """The profile a ``.partitioned.<kind>-<profile>`` key names, else ``None``."""
        prefix = f"{self.base}.partitioned.{self.partition_kind}-"
        if key.startswith(prefix) and len(key) > len(prefix):
            return key[len(prefix) :]
        return None

    def resource(self, family: Family) -> str:
        return {
            Family.EXCLUSIVE: self.exclusive,
            Family.SHARED: self.shared,
            Family.SLICED: self.sliced,
            Family.PARTITIONED: self.partitioned,
            Family.VISIBILITY: self.visibility,
        }[family]

    def family_of(self, resource: str) -> Family | None:
        """Which device-plugin family ``resource`` is (``None``: not one of this manufacturer's)."""
        for family in Family:
            if self.resource(family) == resource:
                return family
        return None


def token_id(group: str, accelerator: str, index: int) -> str:
    """``<group>:<accelerator>:<index>``, index zero-padded to 4 digits (longer is not truncated)."""
    return f"{group}:{accelerator}:{index:04d}"


def parse_token(token: str) -> tuple[str, str, int] | None:
    """``(group, accelerator, index)`` of a token id, or ``None`` when it is not one -- for any string,
    never an exception. The group id is a label-sanitised name (no ``:``); the accelerator id may itself
    hold ``:`` (a PCI address); the index is 1 to :data:`MAX_INDEX_DIGITS` ASCII digits (a longer run
    is no index this plugin advertises, and ``int()`` would raise on one past 4,300 digits)."""
    group, sep, rest = token.partition(":")
    accelerator, sep2, index = rest.rpartition(":")
    if not sep or not sep2 or not group or not accelerator:
        return None
    if not 0 < len(index) <= MAX_INDEX_DIGITS or not index.isascii() or not index.isdigit():
        return None
    return group, accelerator, int(index)


def partitioning(accelerator: Accelerator) -> bool:
    """Is the accelerator in a hardware partitioning mode (its detector reported partition profiles)?"""
    return accelerator.status.physical_sliced is not None


def tokens_per_card(accelerator: Accelerator, family: Family) -> int:
    """How many tokens of ``family`` one accelerator advertises (reference rules §6); 0 when it
    does not serve the family (a zero pool advertises none)."""
    status = accelerator.status
    if family is Family.VISIBILITY:
        return VISIBILITY_TOKENS
    if partitioning(accelerator):
        if family is Family.PARTITIONED and status.physical_sliced is not None:
            return max(status.physical_sliced.count, 0)
        return 0
    if family is Family.EXCLUSIVE:
        return 1
    if family is Family.SHARED:
        return SHARED_TOKENS
    if family is Family.SLICED:
        return max(status.logical_sliced.count, 0) if status.logical_sliced is not None else 0
    return 0


def tokens(group: str, accelerator: Accelerator, family: Family) -> list[str]:
    """The token ids of one accelerator for one family, in index order."""
    return [token_id(group, accelerator.id, i) for i in range(tokens_per_card(accelerator, family))]
