"""Fakes at the allocator's boundary: the node's groups, Pods, kubelet view, responder, partitioner.

The allocator's core is pure logic over these; the real edges (gRPC, API server, vendor libraries)
are tested elsewhere. Built in Python so each test states the node it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_operator.allocator.core import Allocator, FamilyOptions
from gpustack_operator.allocator.pods import ContainerSpec, KubeletContainer, KubeletPod, PodSpec, PodsUnavailableError
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorPlacement,
    AcceleratorStatus,
    DevicesGroup,
    DeviceTopology,
)
from gpustack_operator.manufacturers.base import Identity, Resolved
from gpustack_operator.manufacturers.respond import (
    Family,
    Grant,
    Injection,
    PartitionInstance,
    RefusedError,
    RespondContext,
)
from gpustack_operator.settings import PciVendorMatch, Settings

BASE = "nvidia.com/gpu"
SLICED = f"{BASE}.sliced"
SHARED = f"{BASE}.shared"
PARTITIONED = f"{BASE}.partitioned"
VISIBILITY = "device.gpustack.ai/nvidia.visibility"
VRAM = 81920


def resolved(name: str = "nvidia", base: str = BASE) -> Resolved:
    identity = Identity(name=name, display_name=name, pci_vendor_id="10de", resource_name=base, runtime_name=None)
    return Resolved(
        identity=identity,
        pci=PciVendorMatch(vendor="10de"),
        resource_name=base,
        runtime_name=None,
        partition_kind="mig",
    )


def card(
    index: int, *, slices: int = 8, numa: str = "", unhealthy: bool = False, uid: str | None = None
) -> Accelerator:
    return Accelerator(
        id=uid or f"GPU-{index}",
        index=index,
        topology=DeviceTopology(numa_affinity=numa),
        status=AcceleratorStatus(unhealthy=unhealthy, logical_sliced=AcceleratorLogicalSliced(count=slices)),
    )


# A100-like MIG geometry: 8 memory slices; 1g.10gb anywhere (7 placements), 3g.40gb at 0 or 4, 7g.80gb at 0.
PROFILES = [
    AcceleratorPhysicalSlicedProfile(
        name="1g.10gb",
        memory_mib=9856,
        compute_slices=1,
        memory_slices=1,
        count=7,
        placements=[AcceleratorPlacement(start=i, length=1) for i in range(7)],
    ),
    AcceleratorPhysicalSlicedProfile(
        name="3g.40gb",
        memory_mib=40192,
        compute_slices=3,
        memory_slices=4,
        count=2,
        placements=[AcceleratorPlacement(start=0, length=4), AcceleratorPlacement(start=4, length=4)],
    ),
    AcceleratorPhysicalSlicedProfile(
        name="7g.80gb",
        memory_mib=80896,
        compute_slices=7,
        memory_slices=8,
        count=1,
        placements=[AcceleratorPlacement(start=0, length=8)],
    ),
]


def mig_card(index: int, *, unhealthy: bool = False) -> Accelerator:
    return Accelerator(
        id=f"MIGCARD-{index}",
        index=index,
        topology=DeviceTopology(numa_affinity="0"),
        status=AcceleratorStatus(
            unhealthy=unhealthy,
            logical_sliced=AcceleratorLogicalSliced(count=0),
            physical_sliced=AcceleratorPhysicalSliced(profiles=PROFILES, count=7),
        ),
    )


def group(accelerators: list[Accelerator], gid: str = "nvidia-a100", memory: int = VRAM) -> DevicesGroup:
    return DevicesGroup(id=gid, manufacturer="nvidia", name="A100", memory=memory, accelerators=accelerators)


def token(gid: str, acc: str, i: int = 0) -> str:
    return f"{gid}:{acc}:{i:04d}"


def pod(
    name: str,
    containers: list[ContainerSpec],
    *,
    created: float = 100.0,
    uid: str | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    namespace: str = "default",
    runtime_class: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> PodSpec:
    return PodSpec(
        uid=uid or f"uid-{name}",
        namespace=namespace,
        name=name,
        created=created,
        phase=phase,
        node="node-1",
        deleting=deleting,
        runtime_class=runtime_class,
        annotations=dict(annotations or {}),
        containers=tuple(containers),
    )


def ctr(
    name: str = "main", resources: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None
) -> ContainerSpec:
    return ContainerSpec(name=name, env=dict(env or {}), resources=dict(resources or {}))


def sliced_ctr(name: str = "main", pct: str | None = "50", extra: Mapping[str, str] | None = None) -> ContainerSpec:
    res = {SLICED: "1", **(extra or {})}
    if pct is not None:
        res[f"{SLICED}.memory-percentage"] = pct
    return ContainerSpec(name=name, resources=res)


@dataclass
class FakePods:
    """The PodSource: the API server's Pods and the kubelet's pod-resources view."""

    pods: list[PodSpec] = field(default_factory=list)
    kubelet: list[KubeletPod] | None = None
    fail: str | None = None

    def kubelet_pods(self) -> list[KubeletPod] | None:
        return self.kubelet

    def node_pods(self) -> list[PodSpec]:
        if self.fail is not None:
            raise PodsUnavailableError(self.fail)
        return list(self.pods)

    def kubelet_holds(self, *entries: tuple[str, str, Mapping[str, tuple[str, ...]]]) -> None:
        """Set the kubelet view: (pod name, container, devices by resource)."""
        pods: dict[str, list[KubeletContainer]] = {}
        for name, container, devices in entries:
            pods.setdefault(name, []).append(KubeletContainer(name=container, devices=dict(devices)))
        self.kubelet = [KubeletPod(namespace="default", name=n, containers=tuple(c)) for n, c in pods.items()]


@dataclass
class FakeResponder:
    """Records every grant; answers a visibility env naming the granted accelerators."""

    families: frozenset[Family] = frozenset(Family)
    grants: list[Grant] = field(default_factory=list)
    refuse: str | None = None
    crash: bool = False

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        self.grants.append(grant)
        if self.refuse is not None:
            raise RefusedError(self.refuse)
        if self.crash:
            raise KeyError("boom")
        inj = Injection()
        names = grant.partition.uuid if grant.partition else ",".join(g.id for g in grant.accelerators)
        inj.envs["NVIDIA_VISIBLE_DEVICES"] = names
        return inj


@dataclass
class FakePartitioner:
    created: list[PartitionInstance] = field(default_factory=list)
    destroyed: list[PartitionInstance] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)
    refuse: str | None = None

    def create(self, group: DevicesGroup, accelerator: Accelerator, profile: str, start: int) -> PartitionInstance:
        if self.refuse is not None:
            raise RefusedError(self.refuse)
        instance = PartitionInstance(
            accelerator=accelerator.id, profile=profile, uuid=f"MIG-{len(self.created)}", start=start
        )
        self.created.append(instance)
        return instance

    def live(self, instance: PartitionInstance) -> bool:
        return instance.uuid not in self.dead and instance.uuid not in self.destroyed_uuids

    def destroy(self, instance: PartitionInstance) -> None:
        self.destroyed.append(instance)

    @property
    def created_uuids(self) -> list[str]:
        return [i.uuid for i in self.created]

    @property
    def destroyed_uuids(self) -> list[str]:
        return [i.uuid for i in self.destroyed]


@dataclass
class FakeDecision:
    channel: object
    kind: str | None
    reason: str


def make_ctx(tmp: Path, *, partitioner: FakePartitioner | None = None, **settings: str) -> RespondContext:
    root = HostRoot(tmp)
    return RespondContext(
        view=root,
        host=root,
        settings=Settings(**settings),
        partitioner=partitioner,  # type: ignore[arg-type]
    )


def make_allocator(
    tmp: Path,
    groups: list[DevicesGroup],
    pods: FakePods | None = None,
    *,
    responder: FakeResponder | None = None,
    partitioner: FakePartitioner | None = None,
    options: FamilyOptions | None = None,
    cdi: object | None = None,
    **settings: str,
) -> tuple[Allocator, FakePods, FakeResponder]:
    pods = pods if pods is not None else FakePods()
    responder = responder if responder is not None else FakeResponder()
    allocator = Allocator(
        resolved(),
        groups,
        responder=responder,
        ctx=make_ctx(tmp, partitioner=partitioner, **settings),
        pods=pods,
        options=options or FamilyOptions(),
        cdi=cdi,  # type: ignore[arg-type]
    )
    return allocator, pods, responder
