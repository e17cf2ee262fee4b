"""The allocator's :class:`~gpustack_operator.allocator.pods.PodSource` as the node provides it.

``kubelet_pods`` asks the kubelet's pod-resources v1 ``List`` (interfaces.md §5) which containers hold
which devices -- the answer that outranks the allocator's own matching (spec "Container
identification", supplement §1.8 rule 1). ``node_pods`` is the node's pods as the API server knows them:
in ``serve`` the watch-backed view (``kube/podwatch.py``, answered from its cache), whose ``refresh`` --
one list merged in -- is the allocator's miss path when a container the kubelet is admitting is not in
the view yet. ``kube/`` is the only package that talks to the API server.

The kubelet's list is never memoised: every ``Allocate`` needs it as it is at that moment, and the
kubelet adds a Pod to its list just before admitting it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc  # type: ignore[import-untyped]

from gpustack_operator.allocator.pods import KubeletContainer, KubeletPod, PodSpec
from gpustack_operator.deviceplugin.api import podresources_pb2 as pr
from gpustack_operator.deviceplugin.api import podresources_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_TIMEOUT = 2.0


def kubelet_pods_from(response: pr.ListPodResourcesResponse) -> list[KubeletPod]:
    """The pod-resources answer as the allocator reads it: per container, device ids per resource
    (the kubelet may list one resource in several entries, one per NUMA node; they are joined)."""
    pods: list[KubeletPod] = []
    for pod in response.pod_resources:
        containers: list[KubeletContainer] = []
        for container in pod.containers:
            devices: dict[str, tuple[str, ...]] = {}
            for entry in container.devices:
                devices[entry.resource_name] = devices.get(entry.resource_name, ()) + tuple(entry.device_ids)
            containers.append(KubeletContainer(name=container.name, devices=devices))
        pods.append(KubeletPod(namespace=pod.namespace, name=pod.name, containers=tuple(containers)))
    return pods


class KubeletPodSource:
    """:class:`~gpustack_operator.allocator.pods.PodSource` over the kubelet's pod-resources socket and
    the API server. ``node_pods`` is the API-server lister (:class:`gpustack_operator.kube.pods.NodePods`
    in production), passed in so this module never imports the Kubernetes client."""

    def __init__(
        self,
        node_pods: Callable[[], list[PodSpec]],
        socket: str = POD_RESOURCES_SOCKET,
        timeout: float = LIST_TIMEOUT,
        refresh: Callable[[], bool] | None = None,
    ) -> None:
        self._node_pods = node_pods
        self._refresh = refresh
        self.socket = socket
        self.timeout = timeout

    def kubelet_pods(self) -> list[KubeletPod] | None:
        """The kubelet's list, or ``None`` when it cannot be asked within ``timeout`` (the allocator then
        matches pending pods itself)."""
        try:
            with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                stub = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
                response = stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            log.info(
                "the kubelet's pod-resources List at %s could not be asked (%s: %s); matching pending pods instead",
                self.socket,
                getattr(code, "name", code),
                details,
            )
            return None
        except Exception as exc:  # a malformed answer is no answer, never a crashed Allocate
            log.warning("the kubelet's pod-resources List at %s failed: %s: %s", self.socket, type(exc).__name__, exc)
            return None
        pods = kubelet_pods_from(response)
        log.debug("the kubelet's pod-resources List at %s named %d pods", self.socket, len(pods))
        return pods

    def node_pods(self) -> list[PodSpec]:
        """The node's pods from the API server; raises ``PodsUnavailableError``."""
        return self._node_pods()

    def refresh(self) -> bool:
        """Bring the pod view up to date with the API server (one list); False when it could not (or
        the view is read fresh on every call anyway)."""
        return self._refresh() if self._refresh is not None else False


__all__ = ["LIST_TIMEOUT", "POD_RESOURCES_SOCKET", "KubeletPodSource", "kubelet_pods_from"]
