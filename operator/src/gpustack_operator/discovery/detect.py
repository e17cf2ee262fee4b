"""One detection pass over a node: CPU identity, PCI scan, every asked manufacturer's detector.

This is the pass ``device-manager detect`` prints, the preflight's question 1 reuses, and the
Ansible facts module returns — one function, so the three cannot drift.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpustack_operator.discovery.coverage import Coverage, coverage
from gpustack_operator.discovery.network import InterfaceInventory, InventoryOk, rdma_labels, read_interfaces
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import (
    DetectContext,
    Detected,
    DetectOutcome,
    Measured,
    MonitorOutcome,
    Resolved,
    Unmeasured,
    resolve,
)
from gpustack_operator.node.cpu import CpuIdentity, CpuInfoError, general_node_key_of, read_cpu_identity
from gpustack_operator.node.pci import PciScan, scan_pci
from gpustack_operator.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class NodeDetection:
    """The result of one pass. ``outcomes`` has an entry for every manufacturer asked about;
    ``coverage`` one for every manufacturer that was ``Detected`` (its bus against its driver)."""

    root: str  # the node view the pass read ("/" in production)
    cpu: CpuIdentity | None
    cpu_error: str | None
    pci: PciScan
    resolved: dict[str, Resolved]
    interfaces: InterfaceInventory | None = None
    outcomes: dict[str, DetectOutcome] = field(default_factory=dict)
    coverage: dict[str, Coverage] = field(default_factory=dict)

    @property
    def groups(self) -> list[DevicesGroup]:
        return [g for o in self.outcomes.values() if isinstance(o, Detected) for g in o.groups]

    @property
    def unmeasured(self) -> dict[str, str]:
        return {m: o.reason for m, o in self.outcomes.items() if isinstance(o, Unmeasured)}

    @property
    def general_node_key(self) -> str:
        return general_node_key_of(self.cpu)

    def labels(self) -> dict[str, str]:
        """The labels this node would carry: NFD's prediction with the Device Manager's on top."""
        # imported here: preflight (a task on every host of a fleet) never computes labels
        from gpustack_operator.discovery.labels import (  # noqa: PLC0415
            acceleratable_labels,
            nfd_labels,
            node_labels,
        )

        vendors = [resolve(m.identity).pci for m in REGISTRY.values()]
        device_manager = acceleratable_labels(self.groups)
        if isinstance(self.interfaces, InventoryOk):
            topologies = [a.topology for g in self.groups for a in g.accelerators]
            device_manager.update(rdma_labels(self.interfaces, topologies))
        return node_labels(nfd_labels(self.pci, self.cpu, vendors), device_manager)


def resolve_manufacturers(names: list[str]) -> dict[str, Resolved]:
    """Apply each manufacturer's environment overrides (raises ``SettingsError`` on a bad one)."""
    return {name: resolve(REGISTRY[name].identity) for name in names}


NO_MONITOR = "this manufacturer has no usage monitor in this version"


def run_detector(name: str, ctx: DetectContext) -> DetectOutcome:
    """One manufacturer's detector, in this process (``discovery/isolate.py`` runs it in a child)."""
    return REGISTRY[name].detect(ctx)


def run_monitor(name: str, ctx: DetectContext) -> MonitorOutcome:
    """One manufacturer's usage sample, in this process (``discovery/isolate.py`` runs it in a child)."""
    monitor = REGISTRY[name].monitor
    if monitor is None:
        return Unmeasured(NO_MONITOR)
    return monitor(ctx)


def crashed(name: str, runner: str, exc: Exception) -> Unmeasured:
    """The panic guard's answer: one manufacturer's crash as its ``Unmeasured`` reason, one line (the
    trace is logged at debug level only -- a traceback on stderr is a defect even when the document is
    written)."""
    reason = f"the {name} {runner} crashed: {type(exc).__name__}: {exc}"
    log.info("%s", reason)  # every caller names it (the document, the command's own stderr line)
    log.debug("the %s %s crashed", name, runner, exc_info=exc)
    return Unmeasured(reason)


def detect_node(
    host: HostRoot,
    resolved: dict[str, Resolved],
    settings: Settings,
    no_pci_check: bool = False,
    *,
    interfaces: bool = True,
    detector: Callable[[str, DetectContext], DetectOutcome] = run_detector,
) -> NodeDetection:
    """Run one pass over the manufacturers in ``resolved`` (see :func:`resolve_manufacturers`).

    Never raises for what the host holds: a detector that fails or crashes is reported as
    unmeasured for that manufacturer alone. ``interfaces=False`` skips the network inventory
    (``interfaces`` is then ``None``: not taken, no claim) for callers that only need accelerators
    -- reading driver modes, staging preload libraries. ``detector`` runs one manufacturer's
    detector (``api`` passes ``discovery.isolate.isolated_detector``: the vendor's code in a child
    process; the default runs it in this one)."""
    cpu: CpuIdentity | None = None
    cpu_error: str | None = None
    try:
        cpu = read_cpu_identity(host)
    except CpuInfoError as exc:
        cpu_error = f"CPU identity could not be read: {exc}"
        log.warning("%s", cpu_error)
    pci = scan_pci(host)
    result = NodeDetection(
        root=str(host.root),
        cpu=cpu,
        cpu_error=cpu_error,
        pci=pci,
        resolved=resolved,
        interfaces=read_interfaces(host) if interfaces else None,
    )
    for name in sorted(resolved):
        ctx = DetectContext(
            view=host, pci=pci, settings=settings, manufacturer=resolved[name], no_pci_check=no_pci_check
        )
        try:
            outcome = detector(name, ctx)
        except Exception as exc:  # the panic guard: one vendor's crash never takes the others down
            outcome = crashed(name, "detector", exc)
        result.outcomes[name] = outcome
        if isinstance(outcome, Detected):
            result.coverage[name] = coverage(host, pci, resolved[name], settings, outcome, no_pci_check=no_pci_check)
    return result


@dataclass
class NodeSample:
    """One monitor pass: per manufacturer, its samples or why it could not be measured."""

    timestamp: str
    outcomes: dict[str, MonitorOutcome] = field(default_factory=dict)


def monitor_node(
    host: HostRoot,
    resolved: dict[str, Resolved],
    settings: Settings,
    *,
    sampler: Callable[[str, DetectContext], MonitorOutcome] = run_monitor,
) -> NodeSample:
    """One usage sample per manufacturer. A manufacturer that could not be measured is named as
    unmeasured, never dropped (spec: detection-failure rule 5). ``sampler`` takes one manufacturer's
    sample (``api.monitor`` passes one that isolates the vendor's code in a child process)."""
    pci = scan_pci(host)
    sample = NodeSample(timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    for name in sorted(resolved):
        ctx = DetectContext(view=host, pci=pci, settings=settings, manufacturer=resolved[name])
        try:
            sample.outcomes[name] = sampler(name, ctx)
        except Exception as exc:  # the panic guard, as detect_node's
            sample.outcomes[name] = crashed(name, "monitor", exc)
    return sample


def monitor_document(sample: NodeSample) -> dict[str, object]:
    """The ``device-manager monitor`` document: measured groups and the unmeasured, named."""
    groups = []
    unmeasured = {}
    for name, outcome in sample.outcomes.items():
        if isinstance(outcome, Measured):
            groups.append(
                {
                    "manufacturer": name,
                    "timestamp": sample.timestamp,
                    "accelerators": [m.wire() for m in outcome.samples],
                }
            )
        else:
            unmeasured[name] = outcome.reason
    doc: dict[str, object] = {"groups": groups}
    if unmeasured:
        doc["unmeasured"] = unmeasured
    return doc


def detect_document(result: NodeDetection) -> dict[str, object]:
    """The ``device-manager detect`` document: ``node`` and ``groups`` (Devices ``spec.groups``)."""
    node: dict[str, object] = {"root": result.root}
    if result.cpu is not None:
        cpu = result.cpu
        node["cpu"] = {
            "vendor_id": cpu.vendor_id,
            "family": cpu.family,
            "id": cpu.id,
            "name": cpu.name,
            "cores": cpu.cores,
            "threads": cpu.threads,
            "arch": cpu.arch,
        }
    else:
        node["cpu"] = None
        node["cpuError"] = result.cpu_error
    node["generalNodeKey"] = result.general_node_key
    node["labels"] = result.labels()
    if result.unmeasured:
        node["unmeasured"] = dict(sorted(result.unmeasured.items()))
    doc: dict[str, object] = {"node": node, "groups": [g.wire() for g in result.groups]}
    # Devices.spec.interfaces: absent (not empty) when the enumeration failed -- absence is no claim.
    if isinstance(result.interfaces, InventoryOk):
        doc["interfaces"] = [i.wire() for i in result.interfaces.interfaces]
    elif result.interfaces is not None:
        node["interfacesError"] = result.interfaces.reason
    return doc


def incomplete_reason(cover: Coverage) -> str:
    """Why a manufacturer's answer is short of its bus, in words (facts and preflight alike)."""
    parts = []
    if cover.short:
        parts.append(cover.sentence())
    if cover.dropped:
        parts.append(
            f"{len(cover.dropped)} accelerator(s) enumerated but dropped because their identity could not be "
            "read: " + "; ".join(str(d) for d in cover.dropped)
        )
    if cover.driver and cover.short:
        parts.append(f"the driver said: {cover.driver}")
    return "; ".join(parts)


def facts_document(result: NodeDetection) -> dict[str, object]:
    """The ``accelerator_facts`` facts: the detect document plus two views made for playbooks.

    ``manufacturers`` has one entry per manufacturer asked about -- ``state`` ``detected`` (with its
    accelerator count and group ids), ``none`` (measured, nothing here), ``incomplete`` (the PCI bus
    shows accelerators the driver did not name, or it dropped some it could not identify: ``pci``,
    ``missing``, ``unanswered``, ``driver``, ``dropped`` and a ``reason``) or ``unmeasured`` (with the
    reason) -- so ``when: gpustack_accelerators.manufacturers.nvidia.accelerators > 0`` never confuses
    "none" with "could not tell", and ``pci`` against ``accelerators`` is "bus shows N, driver
    answers M" for a playbook to assert on. ``accelerators`` is one flat entry per accelerator across groups
    (id, manufacturer, group, name, index, memory MiB, PCI bus id, NUMA node, logical slices).
    """
    doc = detect_document(result)
    manufacturers: dict[str, dict[str, object]] = {}
    accelerators: list[dict[str, object]] = []
    for name, outcome in sorted(result.outcomes.items()):
        if isinstance(outcome, Unmeasured):
            manufacturers[name] = {"state": "unmeasured", "accelerators": 0, "groups": [], "reason": outcome.reason}
            continue
        count = sum(len(g.accelerators) for g in outcome.groups)
        cover = result.coverage.get(name)
        state = "detected" if count else "none"
        entry: dict[str, object] = {"state": state, "accelerators": count}
        if cover is not None:
            entry.update(cover.wire())
            if cover.short or cover.dropped:
                entry["state"] = "incomplete"
                entry["reason"] = incomplete_reason(cover)
        entry["groups"] = [g.id for g in outcome.groups if g.accelerators]
        manufacturers[name] = entry
        for group in outcome.groups:
            for acc in group.accelerators:
                sliced = acc.status.logical_sliced
                accelerators.append(
                    {
                        "id": acc.id,
                        "manufacturer": name,
                        "group": group.id,
                        "name": group.name,
                        "index": acc.index,
                        "memory": group.memory,
                        "pciBusId": acc.topology.pci_bus_id,
                        "numa": acc.topology.numa_affinity,
                        "logicalSlices": sliced.count if sliced is not None else 0,
                    }
                )
    doc["manufacturers"] = manufacturers
    doc["accelerators"] = accelerators
    return doc
