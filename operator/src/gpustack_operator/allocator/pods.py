"""What the allocator knows about Pods and the kubelet's view of them -- pure models.

The edges fill them: ``deviceplugin/podresources.py`` from the kubelet's pod-resources ``List``
(``KubeletPod``), ``kube/pods.py`` from the API server through the official ``kubernetes`` client
(``PodSpec``). The allocator reads them only through :class:`PodSource`, so it is tested without
either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

ALLOCATED_ANNOTATION = "device.gpustack.ai/accelerator.allocated"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class ContainerSpec:
    """One container of a Pod spec: its literal ``env:`` values (``valueFrom`` entries are present
    with an empty string, so never-overwrite still sees the name) and its resource requests/limits as
    Kubernetes quantities (``"1"``, ``"50"``, ``"10240"``), limits winning for extended resources."""

    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)
    init: bool = False  # an init container (restartable or not)


@dataclass(frozen=True)
class PodSpec:
    uid: str
    namespace: str
    name: str
    created: float  # creationTimestamp, epoch seconds (whole seconds: the API keeps no more)
    phase: str = "Pending"
    node: str | None = None
    runtime_class: str | None = None
    deleting: bool = False  # deletionTimestamp set
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[ContainerSpec, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass(frozen=True)
class KubeletContainer:
    """A container as the kubelet's pod-resources ``List`` names it: devices per resource name."""

    name: str
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class KubeletPod:
    namespace: str
    name: str
    containers: tuple[KubeletContainer, ...] = ()


class PodSource(Protocol):
    """How the allocator learns which container an anonymous ``Allocate`` serves.

    Both calls must return within their own timeout (the edges set one on every outbound call):
    ``kubelet_pods`` returns ``None`` when the kubelet cannot be asked (the allocator then matches
    pending pods itself); ``node_pods`` raises :class:`PodsUnavailableError` when the API server cannot be
    read (an allocation that cannot identify its container is refused, never guessed)."""

    def kubelet_pods(self) -> list[KubeletPod] | None: ...

    def node_pods(self) -> list[PodSpec]: ...


class PodsUnavailableError(Exception):
    """The node's pods could not be read (the reason names the endpoint and the error)."""


class AnnotationRecorder(Protocol):
    """Where the durable ``device.gpustack.ai/accelerator.allocated`` annotation is written (the edge:
    ``kube/annotations.py``, a JSON merge patch of the Pod's ``metadata.annotations``). ``value`` is the
    whole annotation (a JSON map keyed by container name), ``None`` to remove it. Must return within
    its own timeout; raises :class:`AnnotationWriteError`."""

    def record(self, pod: PodSpec, value: str | None) -> None: ...


class AnnotationWriteError(Exception):
    """The annotation could not be written (the reason names the API server and its answer)."""
