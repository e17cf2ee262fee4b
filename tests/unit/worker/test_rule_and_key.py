"""worker/rule.py (the gpustack-cpu-info NodeFeatureRule) and worker/nodekey.py (the labels), pure."""

from __future__ import annotations

from typing import Any

import pytest
from gpustack_operator.manufacturers import NAMES
from gpustack_operator.node.cpu import CpuIdentity, general_node_key_of
from gpustack_operator.settings import PciVendorMatch, SettingsError
from gpustack_operator.worker.nodekey import GENERAL_PREFIX, node_key, worker_labels
from gpustack_operator.worker.rule import CPU_ANNOTATIONS, cpu_info_rule, managed_vendors


def _rules(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"].split(": ", 1)[1]: r for r in rule["spec"]["rules"]}


def test_the_rule_matches_each_managed_vendor_in_the_whitelisted_classes() -> None:
    vendors = managed_vendors(list(NAMES))
    rule = cpu_info_rule(vendors)
    assert rule["kind"] == "NodeFeatureRule" and rule["metadata"]["name"] == "gpustack-cpu-info"
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/part-of": "gpustack-operator"}
    terms = _rules(rule)["acceleratable"]["matchAny"]
    matched = {t["matchFeatures"][0]["matchExpressions"]["vendor"]["value"][0] for t in terms}
    assert matched == {v.vendor for v in vendors} and "10de" in matched and "1002" in matched
    for term in terms:
        feature = term["matchFeatures"][0]
        assert feature["feature"] == "pci.device"
        assert feature["matchExpressions"]["class"] == {"op": "InRegexp", "value": ["^02", "^03", "^0b", "^12"]}


def test_only_the_named_manufacturers_and_a_class_override() -> None:
    rule = cpu_info_rule([PciVendorMatch(vendor="10de"), PciVendorMatch(vendor="19e5", class_prefix="1200")])
    terms = _rules(rule)["acceleratable"]["matchAny"]
    assert len(terms) == 2
    ascend = terms[1]["matchFeatures"][0]["matchExpressions"]
    assert ascend["vendor"]["value"] == ["19e5"] and ascend["class"]["value"] == ["^1200"]


def test_a_malformed_vendor_override_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "nvidia")
    with pytest.raises(SettingsError, match="GPUSTACK_NVIDIA_PCI_VENDOR_ID"):
        managed_vendors(["nvidia"])


def test_not_acceleratable_is_labelled_only_when_no_vendor_matched() -> None:
    rules = _rules(cpu_info_rule([PciVendorMatch(vendor="10de")]))
    assert rules["acceleratable"]["vars"] == {"acceleratable": "true"}
    negative = rules["not acceleratable"]
    assert negative["labels"] == {"feature.gpustack.ai/acceleratable": "false"}
    assert negative["matchFeatures"] == [
        {"feature": "rule.matched", "matchExpressions": {"acceleratable": {"op": "DoesNotExist"}}}
    ]
    names = [r["name"] for r in cpu_info_rule([])["spec"]["rules"]]
    assert names[-1].endswith("not acceleratable") and not any(n.endswith(": acceleratable") for n in names)


def test_the_cpu_annotations_are_template_references() -> None:
    details = _rules(cpu_info_rule([]))["cpu details"]["annotations"]
    assert len(details) == len(CPU_ANNOTATIONS) == 13
    assert details["feature.gpustack.ai/cpu-name"] == "@cpu.model.name"
    assert all(v.startswith("@cpu.model.") for v in details.values())


def _node(labels: dict[str, str], annotations: dict[str, str] | None = None, cpu: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": "n", "labels": labels, "annotations": annotations or {}}}
    if cpu is not None:
        node["status"] = {"capacity": {"cpu": cpu}}
    return node


NFD = "feature.node.kubernetes.io/"


@pytest.mark.parametrize(
    ("vendor", "family", "model", "name"),
    [
        ("AMD", "25", "1", "AMD EPYC 7763 64-Core Processor"),
        ("Intel", "6", "143", "Intel(R) Xeon(R) Platinum 8480+"),
        ("AMD", "25", "1", None),
        ("VendorUnknown", None, None, None),
        ("ARM", "8", "3340", "@cpu.model.name"),
    ],
)
def test_the_worker_key_is_detections_key(vendor: str, family: str | None, model: str | None, name: str | None) -> None:
    """The same function as detection's generalNodeKey: the key from NFD's labels equals the key
    detection computes from the identity NFD's labels came from."""
    labels = {f"{NFD}cpu-model.vendor_id": vendor}
    if family:
        labels[f"{NFD}cpu-model.family"] = family
    if model:
        labels[f"{NFD}cpu-model.id"] = model
    annotations = {"feature.gpustack.ai/cpu-name": name} if name else {}
    identity = CpuIdentity(
        vendor_id=vendor, family=family, id=model, name=name if name and not name.startswith("@") else None
    )
    assert node_key(_node(labels, annotations)) == general_node_key_of(identity)


def test_worker_labels() -> None:
    labels = {f"{NFD}cpu-model.vendor_id": "AMD", f"{NFD}cpu-model.family": "25", f"{NFD}cpu-model.id": "1"}
    node = _node(labels, {"feature.gpustack.ai/cpu-name": "AMD EPYC 7763 64-Core Processor"}, cpu="128")
    assert worker_labels(node) == {
        "gpustack.ai/managed": "true",
        f"{GENERAL_PREFIX}amd": "true",
        f"{GENERAL_PREFIX}amd-epyc-7763": "true",
        f"{GENERAL_PREFIX}amd-epyc-7763.count": "128",
    }
    assert worker_labels(_node({}, cpu="7500m"), manual=True) == {
        f"{GENERAL_PREFIX}generic": "true",
        f"{GENERAL_PREFIX}generic.count": "7",
    }
    assert worker_labels(_node({}, cpu="lots"), manual=True) == {f"{GENERAL_PREFIX}generic": "true"}
    assert worker_labels({"metadata": {"labels": "not a map"}}) == {
        "gpustack.ai/managed": "true",
        f"{GENERAL_PREFIX}generic": "true",
    }
