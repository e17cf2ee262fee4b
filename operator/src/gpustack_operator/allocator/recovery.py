"""Restart recovery: the claims a restarted Device Manager rebuilds before its plugins register (pure).

Four sources, in this order of authority (a claim one names is not taken from the next; issue 18):

1. The Pod's durable ``device.gpustack.ai/accelerator.allocated`` annotation (written after every
   grant, before ``Allocate`` answers: ``kube/annotations.py``).
2. The node-local ownership record ``<pods_dir>/<uid>/allocation.json`` of a sliced or partitioned
   Pod, written by the allocator right after the responder answered -- before the annotation patch.
   It carries the same entries (``allocated``), so a partition materialised by a call whose
   annotation never landed (the process was killed in between) is still owned, charged, and
   destroyed when its Pod is gone, never leaked.
3. The node's ``Devices`` status as it was last published (read by ``kube/devicesread.py`` and handed
   in by the caller: this module never calls the API server): each holder the status names whose Pod
   is still on the node (by uid) and whose claim 1 and 2 did not rebuild is rebuilt on that
   accelerator with the mode, units and profile the status gives (:func:`claims_from_status`), and
   logged. A partition cannot be rebuilt from it (the instance is unknown): logged as unrecoverable.
   Note: the status is written only on change and may lag; a holder whose Pod is gone is ignored.
4. The kubelet's pod-resources ``List``: a container the kubelet holds devices of this manufacturer's
   resources for, with no claim from 1-3 (a Pod admitted by a Device Manager that wrote no
   annotation), is rebuilt from its token ids and the Pod's spec (its slice budget), and logged. A
   partition cannot be rebuilt this way (the instance is unknown): it is logged as unrecoverable.

Visibility grants are never recovered as claims: a sidecar re-finds its owner's claim on each call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpustack_operator.allocator import budget as budgets
from gpustack_operator.allocator.ledger import (
    SHARE_UNITS,
    AllocatedEntry,
    AllocationMode,
    Card,
    Claim,
    ClaimKey,
    D,
    DevicesAllocationGroup,
    Holder,
)
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


_STATUS_FAMILIES: dict[AllocationMode, Family] = {
    AllocationMode.EXCLUSIVE: Family.EXCLUSIVE,
    AllocationMode.SHARED: Family.SHARED,
    AllocationMode.SLICED: Family.SLICED,
    AllocationMode.PARTITIONED: Family.PARTITIONED,
}


def claims_from_status(
    status: Iterable[DevicesAllocationGroup],
    pods: list[PodSpec],
    manufacturer: str,
    cards: Mapping[str, Card],
    held: Mapping[ClaimKey, Claim],
) -> tuple[list[Claim], list[str]]:
    """Claims for the holders the node's last published ``Devices`` status names (source 3, see the
    module docstring) that ``held`` does not hold yet, and a line per holder that could not be rebuilt.

    Only ``manufacturer``'s groups are read. A holder is rebuilt when its Pod is among ``pods`` (by
    uid: a holder whose Pod is gone holds nothing, silently skipped) and names one of the Pod's
    containers; the claim is keyed like every other (:data:`ClaimKey` = pod uid, container, mode) and
    spans every detected accelerator the status lists that key on, in index order. Its units follow
    :func:`claims_from_kubelet`: exclusive 0 (the cost is the mode's), shared one share, sliced the
    holder's own units (in (0, D]). A partitioned holder no annotation or node record rebuilt, a
    holder on an accelerator no longer detected, and a mode or units no grant has are reported and
    skipped. The claims carry no device ids (the status has none): a retried ``Allocate`` of that
    container replaces its claim under the same key, so it is never charged twice."""
    by_uid = {p.uid: p for p in pods}
    found: dict[ClaimKey, list[tuple[str, Holder]]] = {}
    problems: list[str] = []

    def problem(line: str) -> None:
        if line not in problems:
            problems.append(line)

    for group in status:
        if group.manufacturer != manufacturer:
            continue
        for allocation in group.accelerators:
            for holder in allocation.holders:
                pod = by_uid.get(holder.pod_uid)
                if pod is None:
                    continue  # gone since the status was written: it holds nothing now
                label = f"{pod.key} container {holder.container}"
                where = f"the Devices status names it holding {allocation.id} {holder.mode}"
                family = _STATUS_FAMILIES.get(holder.mode)
                if family is None:
                    problem(f"{label}: {where}, which is no grant; not recovered from the status")
                    continue
                key: ClaimKey = (pod.uid, holder.container, family.value)
                if key in held:
                    continue
                if not any(c.name == holder.container for c in pod.containers):
                    problem(f"{label}: {where}, but the Pod's spec has no such container; not recovered")
                elif family is Family.PARTITIONED:
                    problem(
                        f"{label}: {where}, but no annotation or node record names its partition; it cannot be "
                        "rebuilt from the status (the instance is unknown)"
                    )
                elif allocation.id not in cards:
                    problem(f"{label}: {where}, but {allocation.id} is no accelerator detected on this node; skipped")
                elif family is Family.SLICED and not 0 < holder.units <= D:
                    problem(f"{label}: {where} for {holder.units} units, which no slice costs; not recovered")
                else:
                    found.setdefault(key, []).append((allocation.id, holder))
    claims = [_status_claim(by_uid[key[0]], key[1], key, held_on, cards) for key, held_on in found.items()]
    return claims, problems


def _status_claim(
    pod: PodSpec, container: str, key: ClaimKey, held_on: list[tuple[str, Holder]], cards: Mapping[str, Card]
) -> Claim:
    family = Family(key[2])
    accelerators = sorted({a for a, _ in held_on}, key=lambda a: (cards[a].accelerator.index, a))
    units = 0
    if family is Family.SHARED:
        units = SHARE_UNITS
    elif family is Family.SLICED:
        units = max(h.units for _, h in held_on)  # one budget per claim; a disagreeing status is charged high
    return Claim(
        pod_uid=pod.uid,
        namespace=pod.namespace,
        pod=pod.name,
        container=container,
        family=family,
        accelerators=tuple(accelerators),
        units=units,
        terminal=pod.terminal,
        recovered=True,
    )


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


__all__ = ["claims_from_entries", "claims_from_kubelet", "claims_from_status"]
