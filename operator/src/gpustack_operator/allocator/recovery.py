"""Restart recovery: the claims a restarted Device Manager rebuilds before its plugins register (pure).

Three sources, in this order of authority (a claim the first names is not taken from the next):

1. The Pod's durable ``device.gpustack.ai/accelerator.allocated`` annotation (written after every
   grant, before ``Allocate`` answers: ``kube/annotations.py``).
2. The node-local ownership record ``<pods_dir>/<uid>/allocation.json`` of a sliced or partitioned
   Pod, written by the allocator right after the responder answered -- before the annotation patch.
   It carries the same entries (``allocated``), so a partition materialised by a call whose
   annotation never landed (the process was killed in between) is still owned, charged, and
   destroyed when its Pod is gone, never leaked.
3. The kubelet's pod-resources ``List``: a container the kubelet holds devices of this manufacturer's
   resources for, with no claim from 1 or 2 (a Pod admitted by a Device Manager that wrote no
   annotation), is rebuilt from its token ids and the Pod's spec (its slice budget), and logged. A
   partition cannot be rebuilt this way (the instance is unknown): it is logged as unrecoverable.

Visibility grants are never recovered as claims: a sidecar re-finds its owner's claim on each call.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator.ledger import SHARE_UNITS, AllocatedEntry, Card, Claim, ClaimKey
from gpustack_operator.allocator.pods import KubeletPod, PodSpec
from gpustack_operator.allocator.resources import ResourceNames, parse_token
from gpustack_operator.manufacturers.respond import Family, RefusedError


def claims_from_entries(
    pod: PodSpec, entries: Mapping[str, AllocatedEntry], manufacturer: str, held: Mapping[ClaimKey, Claim]
) -> list[Claim]:
    """The claims ``entries`` (an annotation's or a node record's) name for ``manufacturer`` that
    ``held`` does not hold yet."""
    out: list[Claim] = []
    for container, entry in entries.items():
        if entry.manufacturer != manufacturer or entry.mode is Family.VISIBILITY:
            continue
        key: ClaimKey = (pod.uid, container, entry.mode.value)
        if key in held:
            continue
        out.append(
            Claim(
                pod_uid=pod.uid,
                namespace=pod.namespace,
                pod=pod.name,
                container=container,
                family=entry.mode,
                accelerators=tuple(entry.accelerators),
                devices=tuple(entry.devices),
                units=entry.units,
                partition=entry.partition.instance() if entry.partition else None,
                profile=entry.profile,
                terminal=pod.terminal,
                recovered=True,
            )
        )
    return out


def claims_from_kubelet(
    kubelet: list[KubeletPod],
    pods: list[PodSpec],
    names: ResourceNames,
    cards: Mapping[str, Card],
    held: Mapping[ClaimKey, Claim],
) -> tuple[list[Claim], list[str]]:
    """Claims for what the kubelet holds that ``held`` does not, and a line per thing that could not
    be rebuilt (a Pod the view does not know, a partition, a token of no detected accelerator)."""
    by_name = {(p.namespace, p.name): p for p in pods}
    claims: list[Claim] = []
    problems: list[str] = []
    for kpod in kubelet:
        for kcontainer in kpod.containers:
            for resource, ids in sorted(kcontainer.devices.items()):
                family = names.family_of(resource)
                if family is None or family is Family.VISIBILITY or not ids:
                    continue
                label = f"{kpod.namespace}/{kpod.name} container {kcontainer.name}"
                pod = by_name.get((kpod.namespace, kpod.name))
                if pod is None:
                    problems.append(f"{label} holds {resource} {','.join(ids)} but its Pod is not on this node's view")
                    continue
                if (pod.uid, kcontainer.name, family.value) in held:
                    continue
                if family is Family.PARTITIONED:
                    problems.append(
                        f"{label} holds {resource} but no annotation or node record names its partition; "
                        "it cannot be rebuilt (the partition is not charged until the Pod is gone)"
                    )
                    continue
                claim, problem = _kubelet_claim(pod, kcontainer.name, family, resource, ids, names=names, cards=cards)
                if claim is None:
                    problems.append(f"{label}: {problem}")
                else:
                    claims.append(claim)
    return claims, problems


def _kubelet_claim(
    pod: PodSpec,
    container: str,
    family: Family,
    resource: str,
    ids: tuple[str, ...],
    *,
    names: ResourceNames,
    cards: Mapping[str, Card],
) -> tuple[Claim | None, str]:
    accelerators: list[str] = []
    for token in ids:
        parsed = parse_token(token)
        if parsed is None or parsed[1] not in cards:
            return None, f"{resource} device {token} is no accelerator detected on this node"
        if parsed[1] not in accelerators:
            accelerators.append(parsed[1])
    units = 0
    if family is Family.SHARED:
        units = SHARE_UNITS
    elif family is Family.SLICED:
        spec = next((c for c in pod.containers if c.name == container), None)
        if spec is None:
            return None, f"the Pod's spec has no container {container}"
        try:
            units = budgets.slice_budget(names, spec.resources, cards[accelerators[0]].group.memory).units
        except RefusedError as exc:
            return None, f"its slice budget cannot be read: {exc.message}"
    ordered = sorted(accelerators, key=lambda a: cards[a].accelerator.index)
    return (
        Claim(
            pod_uid=pod.uid,
            namespace=pod.namespace,
            pod=pod.name,
            container=container,
            family=family,
            accelerators=tuple(ordered),
            devices=tuple(ids),
            units=units,
            terminal=pod.terminal,
            recovered=True,
        ),
        "",
    )


__all__ = ["claims_from_entries", "claims_from_kubelet"]
