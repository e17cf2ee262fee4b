"""The labels a node gets (spec: Stage 1 Jobs 1 and 3; Stage 2 accelerator labels; reference §3).

:func:`nfd_labels` predicts what Node Feature Discovery plus the ``gpustack-cpu-info`` rule would put
on this node; :func:`acceleratable_labels` is what the Device Manager publishes from a detection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.node.cpu import CpuIdentity
from gpustack_operator.node.naming import format_binary_si, sanitize_label_value
from gpustack_operator.node.pci import PciScan
from gpustack_operator.settings import DEFAULT_PCI_CLASS_PREFIXES, PciVendorMatch

NFD_PREFIX = "feature.node.kubernetes.io/"
FEATURE_PREFIX = "feature.gpustack.ai/"
ACCELERATABLE_PREFIX = "acceleratable." + FEATURE_PREFIX
NODE_ACCELERATABLE = FEATURE_PREFIX + "acceleratable"


def nfd_labels(
    pci: PciScan,
    cpu: CpuIdentity | None,
    known_vendors: Iterable[PciVendorMatch],
    whitelist: tuple[str, ...] = DEFAULT_PCI_CLASS_PREFIXES,
) -> dict[str, str]:
    """NFD's labels for this node.

    * ``pci-<vendor>.present`` for every PCI function in a whitelisted class (the chart's
      ``deviceClassWhitelist``, ``02,03,0b,12`` — NFD does not read ``GPUSTACK_PCI_CLASS_PREFIXES``);
    * ``cpu-model.vendor_id`` / ``.family`` / ``.id`` as NFD's cpu source computes them;
    * ``feature.gpustack.ai/acceleratable: "false"`` when the ``gpustack-cpu-info`` rule finds no
      whitelisted-class device of a managed manufacturer's vendor id. The rule matches vendor and
      class only, so this is NFD's view; the Device Manager's ``acceleratable: "true"`` corrects it.
    """
    labels: dict[str, str] = {}
    vendors = list(known_vendors)
    acceleratable = False
    for device in pci.devices:
        if not device.class_matches(whitelist):
            continue
        labels[f"{NFD_PREFIX}pci-{device.vendor}.present"] = "true"
        for v in vendors:
            if device.vendor == v.vendor and (v.class_prefix is None or device.class_code.startswith(v.class_prefix)):
                acceleratable = True
    if cpu is not None:
        labels[f"{NFD_PREFIX}cpu-model.vendor_id"] = cpu.vendor_id
        if cpu.family is not None:
            labels[f"{NFD_PREFIX}cpu-model.family"] = cpu.family
        if cpu.id is not None:
            labels[f"{NFD_PREFIX}cpu-model.id"] = cpu.id
    if not acceleratable and pci.failure is None:
        labels[NODE_ACCELERATABLE] = "false"
    return dict(sorted(labels.items()))


def cpu_annotations(cpu: CpuIdentity) -> dict[str, str]:
    """The ``feature.gpustack.ai/cpu-*`` annotations this node's rule would carry (those we read)."""
    out: dict[str, str] = {}
    if cpu.name:
        out[FEATURE_PREFIX + "cpu-name"] = cpu.name
    if cpu.family:
        out[FEATURE_PREFIX + "cpu-family"] = cpu.family
    if cpu.cores:
        out[FEATURE_PREFIX + "cpu-physical-cores"] = str(cpu.cores)
    if cpu.threads:
        out[FEATURE_PREFIX + "cpu-logical-cores"] = str(cpu.threads)
        if cpu.cores:
            out[FEATURE_PREFIX + "cpu-threads-per-core"] = str(max(1, cpu.threads // cpu.cores))
    if cpu.stepping:
        out[FEATURE_PREFIX + "cpu-stepping"] = cpu.stepping
    return out


def acceleratable_labels(groups: Iterable[DevicesGroup]) -> dict[str, str]:
    """``ConstructAcceleratableNodeLabels``: the Device Manager's labels for detected groups.

    Nothing for a group with no accelerators. Otherwise ``acceleratable=true``, the manufacturer
    (plus ``.driver-version`` / ``.runtime-version`` when known) and, per aKey
    (``<manufacturer>-<group id>``), ``=true``, ``.product``, ``.memory`` (BinarySI), ``.cores``
    (always, 0 by default), ``.count``, and ``.family`` / ``.comcap`` when known. Every value goes
    through the label-value sanitizer.

    A group with an empty id (a product name that normalizes to nothing, such as the bare
    ``NVIDIA``, or no name at all) has no aKey: ``<manufacturer>-`` is not a label name, and one
    invalid key would get the whole NodeFeature refused. It still counts for ``acceleratable`` and
    its manufacturer's labels.
    """
    labels: dict[str, str] = {}
    for group in groups:
        if not group.accelerators:
            continue
        labels[NODE_ACCELERATABLE] = "true"
        manu_key = ACCELERATABLE_PREFIX + group.manufacturer
        labels[manu_key] = "true"
        if group.driver_version:
            labels[manu_key + ".driver-version"] = group.driver_version
        if group.runtime_version:
            labels[manu_key + ".runtime-version"] = group.runtime_version
        if not group.id:
            continue
        key = f"{manu_key}-{group.id}"
        labels[key] = "true"
        labels[key + ".product"] = group.name
        labels[key + ".memory"] = format_binary_si(group.memory)
        labels[key + ".cores"] = str(group.cores or 0)
        labels[key + ".count"] = str(len(group.accelerators))
        if group.family:
            labels[key + ".family"] = group.family
        if group.compute_capability:
            labels[key + ".comcap"] = group.compute_capability
    return {k: sanitize_label_value(v) for k, v in sorted(labels.items())}


def node_labels(nfd: Mapping[str, str], device_manager: Mapping[str, str]) -> dict[str, str]:
    """What the node ends up carrying: NFD's labels, then the Device Manager's on top (its
    ``acceleratable: "true"`` overrides NFD's ``"false"``)."""
    merged = dict(nfd)
    merged.update(device_manager)
    return dict(sorted(merged.items()))
