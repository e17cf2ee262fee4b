"""INTERFACE SKELETON (being implemented): the one object ``deviceplugin/`` talks to.

Every method is synchronous and thread-safe; the gRPC edge calls them from its worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_operator.allocator.pods import PodSource
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Resolved
from gpustack_operator.manufacturers.respond import Family, Injection, RespondContext, Responder


@dataclass(frozen=True)
class FamilyOptions:
    """``--no-shared --no-sliced --no-partitioned`` (exclusive and visibility are never gated)."""

    shared: bool = True
    sliced: bool = True
    partitioned: bool = True


@dataclass(frozen=True)
class Pool:
    """One resource the plugin registers: its name, family, and whether it offers a hint."""

    resource: str  # "nvidia.com/gpu.sliced", "device.gpustack.ai/nvidia.visibility"
    family: Family
    preferred_allocation: bool  # GetPreferredAllocation offered (sliced, exclusive, shared)


@dataclass(frozen=True)
class DeviceState:
    """One advertised token, as ListAndWatch sends it."""

    id: str
    healthy: bool
    numa: tuple[int, ...] = ()  # empty: no topology (partitioned, or unknown)


class Allocator:
    def __init__(
        self,
        manufacturer: Resolved,
        groups: list[DevicesGroup],
        *,
        responder: Responder,
        ctx: RespondContext,
        pods: PodSource,
        options: FamilyOptions = FamilyOptions(),
    ) -> None:
        raise NotImplementedError

    def pools(self) -> list[Pool]:
        """The resources to register (a family with no tokens is not registered)."""
        raise NotImplementedError

    def devices(self, resource: str) -> list[DeviceState]:
        raise NotImplementedError

    def preferred(self, resource: str, available: list[str], must_include: list[str], size: int) -> list[str]:
        raise NotImplementedError

    def allocate(self, resource: str, requests: list[list[str]]) -> list[Injection]:
        """One ``AllocateRequest``: a device-id list per container, in the kubelet's order. Raises
        :class:`~gpustack_operator.manufacturers.respond.RefusedError`."""
        raise NotImplementedError

    @property
    def version(self) -> int:
        """Bumped on every health or ledger change."""
        raise NotImplementedError

    def wait_change(self, version: int, timeout: float) -> int:
        """Block until :attr:`version` differs from ``version`` (or ``timeout``); the new version."""
        raise NotImplementedError
