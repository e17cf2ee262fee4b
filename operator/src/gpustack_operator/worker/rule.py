"""The ``gpustack-cpu-info`` NodeFeatureRule (device-discovery "Stage 1", jobs 2 and 3; supplement §1.2).

The worker applies it at startup in every installation mode, labelled
``app.kubernetes.io/part-of: gpustack-operator``. Its three rules, in NFD's order (a later rule reads
an earlier one's ``vars`` through the ``rule.matched`` feature):

1. ``cpu details`` -- the ``feature.gpustack.ai/cpu-*`` annotations (job 2), each a ``@cpu.model.*``
   back-reference. An attribute the node's NFD does not report stays the ``@...`` text verbatim,
   which the node key reads as unreported (``node/cpu.py::general_node_key``). DERIVED: the spec
   names the annotations and the ``@cpu.model.*`` form, not each attribute's name; they follow the
   annotation names (``cpu-physical-cores`` -> ``@cpu.model.physical_cores``).
2. ``acceleratable`` -- sets the var ``acceleratable`` when a PCI function of a managed manufacturer's
   vendor id is in an acceleratable class: one ``matchAny`` term per manufacturer (vendor ``In``
   [its id], class ``InRegexp`` the class prefixes -- the chart's whitelist ``02,03,0b,12``, the same
   classes ``discovery/labels.py::nfd_labels`` predicts with, or the manufacturer's own class prefix
   when ``GPUSTACK_<M>_PCI_VENDOR_ID`` names one as ``<class>_<vendor>``).
3. ``not acceleratable`` -- labels ``feature.gpustack.ai/acceleratable: "false"`` (job 3) when rule 2
   set nothing; the Device Manager's ``"true"`` corrects a false negative later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpustack_operator.discovery.labels import FEATURE_PREFIX, NODE_ACCELERATABLE
from gpustack_operator.kube.apply import NFD_API_VERSION
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import resolve
from gpustack_operator.settings import DEFAULT_PCI_CLASS_PREFIXES, PciVendorMatch

RULE_NAME = "gpustack-cpu-info"
PART_OF = {"app.kubernetes.io/part-of": "gpustack-operator"}
ACCELERATABLE_VAR = "acceleratable"

# annotation suffix -> the cpu.model attribute it back-references (see the module docstring)
CPU_ANNOTATIONS: dict[str, str] = {
    "cpu-name": "name",
    "cpu-family": "family",
    "cpu-physical-cores": "physical_cores",
    "cpu-threads-per-core": "threads_per_core",
    "cpu-logical-cores": "logical_cores",
    "cpu-stepping": "stepping",
    "cpu-cache-line": "cache_line",
    "cpu-hz": "hz",
    "cpu-boost-freq": "boost_freq",
    "cpu-cache-l1i": "cache_l1i",
    "cpu-cache-l1d": "cache_l1d",
    "cpu-cache-l2": "cache_l2",
    "cpu-cache-l3": "cache_l3",
}


def managed_vendors(manufacturers: Sequence[str]) -> list[PciVendorMatch]:
    """Each managed manufacturer's PCI identity, overrides applied (a malformed
    ``GPUSTACK_<M>_PCI_VENDOR_ID`` raises ``SettingsError``); unknown names raise ``KeyError``."""
    return [resolve(REGISTRY[name].identity).pci for name in manufacturers]


def _class_regexps(vendor: PciVendorMatch, whitelist: Sequence[str]) -> list[str]:
    if vendor.class_prefix:
        return [f"^{vendor.class_prefix}"]
    return [f"^{prefix}" for prefix in whitelist]


def cpu_info_rule(
    vendors: Sequence[PciVendorMatch], whitelist: Sequence[str] = DEFAULT_PCI_CLASS_PREFIXES
) -> dict[str, Any]:
    """The ``NodeFeatureRule`` object as applied (see the module docstring)."""
    seen: set[tuple[str, str | None]] = set()
    terms: list[dict[str, Any]] = []
    for vendor in vendors:
        if (vendor.vendor, vendor.class_prefix) in seen:
            continue
        seen.add((vendor.vendor, vendor.class_prefix))
        expressions = {
            "vendor": {"op": "In", "value": [vendor.vendor]},
            "class": {"op": "InRegexp", "value": _class_regexps(vendor, whitelist)},
        }
        terms.append({"matchFeatures": [{"feature": "pci.device", "matchExpressions": expressions}]})
    rules: list[dict[str, Any]] = [
        {
            "name": f"{RULE_NAME}: cpu details",
            "annotations": {f"{FEATURE_PREFIX}{k}": f"@cpu.model.{v}" for k, v in CPU_ANNOTATIONS.items()},
            "matchFeatures": [{"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}],
        }
    ]
    if terms:
        rules.append({"name": f"{RULE_NAME}: acceleratable", "vars": {ACCELERATABLE_VAR: "true"}, "matchAny": terms})
    rules.append(
        {
            "name": f"{RULE_NAME}: not acceleratable",
            "labels": {NODE_ACCELERATABLE: "false"},
            "matchFeatures": [
                {"feature": "rule.matched", "matchExpressions": {ACCELERATABLE_VAR: {"op": "DoesNotExist"}}}
            ],
        }
    )
    return {
        "apiVersion": NFD_API_VERSION,
        "kind": "NodeFeatureRule",
        "metadata": {"name": RULE_NAME, "labels": dict(PART_OF)},
        "spec": {"rules": rules},
    }


__all__ = ["CPU_ANNOTATIONS", "PART_OF", "RULE_NAME", "cpu_info_rule", "managed_vendors"]
