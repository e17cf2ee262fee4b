"""Which container an anonymous ``Allocate`` serves (supplement §1.8 rules 1, 2, 6, 11).

An ``Allocate`` names device ids but no Pod. The candidates for one container request of ``n`` ids
are the containers of Pods on this node, not finished and not being deleted, that request the
resource with quantity ``n`` (visibility: the sidecar's count).

1. The kubelet's answer first (rule 1): the kubelet adds a Pod before admitting it and admits one at
   a time, so the container served is the one candidate the kubelet holds *without a device of this
   resource yet*. Exactly one such candidate wins outright; it outranks matching because creation
   timestamps keep whole seconds.
2. Otherwise (kubelet unreachable, switched off, naming none or several) the allocator matches the
   node's pending Pods itself (rule 2), within those the kubelet named when it named several: a
   candidate already reserved with exactly these device ids is this call retried (never charged
   twice); else candidates already holding a reservation are skipped, the ones this call cannot
   serve are dropped, and the oldest survivor is taken (creation time, then namespace/name, then
   container order: deterministic). When every candidate is infeasible the oldest unfiltered one
   is taken -- feasibility disambiguates, it does not gate (the gate refuses it afterwards).
3. Several container requests in one call (or identical Pods admitted together) map one-to-one:
   a container chosen for one request is no candidate for the next (rule 11).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpustack_operator.allocator.budget import quantity_of
from gpustack_operator.allocator.pods import ContainerSpec, KubeletPod, PodSpec
from gpustack_operator.manufacturers.respond import Code, RefusedError

Key = tuple[str, str]  # (pod uid, container)


@dataclass(frozen=True)
class Candidate:
    pod: PodSpec
    container: ContainerSpec
    order: int  # the container's position in the Pod

    @property
    def key(self) -> Key:
        return (self.pod.uid, self.container.name)

    @property
    def age(self) -> tuple[float, str, str, int]:
        return (self.pod.created, self.pod.namespace, self.pod.name, self.order)

    @property
    def label(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name} container {self.container.name}"


@dataclass(frozen=True)
class Target:
    """The container one request serves; ``retry``: it already holds a reservation of this resource."""

    pod: PodSpec
    container: ContainerSpec
    retry: bool = False
    how: str = ""  # "kubelet" or "matched": which rule identified it (logged)

    @property
    def key(self) -> Key:
        return (self.pod.uid, self.container.name)


def candidates(pods: list[PodSpec], resource: str, count: int, node: str | None = None) -> list[Candidate]:
    """Containers of live Pods on this node requesting ``count`` of ``resource``, oldest first."""
    out = []
    for pod in pods:
        if pod.terminal or pod.deleting or (node is not None and pod.node is not None and pod.node != node):
            continue
        for order, container in enumerate(pod.containers):
            if quantity_of(container.resources, resource) == count:
                out.append(Candidate(pod, container, order))
    return sorted(out, key=lambda c: c.age)


def kubelet_view(
    kubelet: list[KubeletPod], resource: str
) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(containers the kubelet holds without a device of ``resource``, containers holding one), as
    (namespace, pod, container)."""
    without: set[tuple[str, str, str]] = set()
    holding: set[tuple[str, str, str]] = set()
    for pod in kubelet:
        for container in pod.containers:
            key = (pod.namespace, pod.name, container.name)
            (holding if container.devices.get(resource) else without).add(key)
    return without, holding


def identify(
    resource: str,
    requests: list[list[str]],
    *,
    pods: list[PodSpec],
    kubelet: list[KubeletPod] | None,
    reserved: Mapping[Key, tuple[str, ...]],
    feasible: Callable[[Candidate, list[str]], bool],
    node: str | None = None,
) -> list[Target]:
    """One :class:`Target` per request, distinct containers, in request order. ``reserved`` maps the
    containers already holding a reservation of ``resource`` to the device ids they hold;
    ``feasible(candidate, ids)`` says whether this call could serve that candidate. Refused
    (``NOT_FOUND``) when no container on the node can be the one a request serves."""
    chosen: set[Key] = set()
    targets: list[Target] = []
    view = kubelet_view(kubelet, resource) if kubelet is not None else None
    for ids in requests:
        target = _identify_one(
            resource, ids, pods=pods, view=view, reserved=reserved, feasible=feasible, node=node, chosen=chosen
        )
        chosen.add(target.key)
        targets.append(target)
    return targets


def _identify_one(
    resource: str,
    ids: list[str],
    *,
    pods: list[PodSpec],
    view: tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]] | None,
    reserved: Mapping[Key, tuple[str, ...]],
    feasible: Callable[[Candidate, list[str]], bool],
    node: str | None,
    chosen: set[Key],
) -> Target:
    live = [c for c in candidates(pods, resource, len(ids), node) if c.key not in chosen]
    named: list[Candidate] = []
    if view is not None:
        without, holding = view
        named = [c for c in live if (c.pod.namespace, c.pod.name, c.container.name) in without]
        if len(named) == 1:
            only = named[0]
            return Target(only.pod, only.container, retry=only.key in reserved, how="kubelet")
        # the kubelet names none: no container it already serves with this resource is this one
        live = [c for c in live if (c.pod.namespace, c.pod.name, c.container.name) not in holding]
    # within those the kubelet named, if any; else the node's pending Pods
    pool = named or [c for c in live if c.pod.phase == "Pending"]
    wanted = set(ids)
    retried = [c for c in pool if c.key in reserved and set(reserved[c.key]) == wanted]
    if retried:
        return Target(retried[0].pod, retried[0].container, retry=True, how="matched (retried call)")
    fresh = [c for c in pool if c.key not in reserved]
    if fresh:
        fits = [c for c in fresh if _safe(feasible, c, ids)]
        best = (fits or fresh)[0]
        return Target(best.pod, best.container, how="matched" if fits else "matched (none feasible: oldest)")
    held = [c for c in pool if c.key in reserved]
    if len(held) == 1:  # the one reserved candidate, asked again with other ids: the kubelet re-picked
        return Target(held[0].pod, held[0].container, retry=True, how="matched (re-allocated)")
    if held:
        raise RefusedError(
            f"cannot tell which container this {resource} allocation of {len(ids)} serves: every candidate "
            f"({', '.join(c.label for c in held)}) already holds a reservation; the kubelet will retry",
            Code.NOT_FOUND,
        )
    raise RefusedError(
        f"no container on this node waits for {len(ids)} {resource}: no live Pod bound here requests that "
        "quantity (is the Pod being deleted, or does the API server lag behind the kubelet?)",
        Code.NOT_FOUND,
    )


def _safe(feasible: Callable[[Candidate, list[str]], bool], candidate: Candidate, ids: list[str]) -> bool:
    try:
        return feasible(candidate, ids)
    except RefusedError:
        return False
