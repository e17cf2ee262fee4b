"""verify.compare (issue 19): the host's facts against the cluster's view, one line per difference.

Properties over generated facts: a view that agrees (``agreeing_view``) gives no difference; each drift
the role exists for -- a card fallen off, labels old after a driver upgrade, allocatable off, no Device
Manager pod -- gives exactly its own line, naming the card, the versions, the counts or the DaemonSet.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from gpustack_operator import api
from gpustack_operator.kube.clusterview import ClusterView, DevicePod
from gpustack_operator.verify import (
    FactsError,
    agreeing_view,
    compare,
    device_manager_label,
    host_view,
    label_manufacturer,
)
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import host

PREFIX = "acceleratable.feature.gpustack.ai/"
MAKERS = ["nvidia", "amd", "hygon"]
RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "hygon": "hygon.com/dcu"}


def card(i: int, unhealthy: bool = False, partitioning: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"unhealthy": unhealthy}
    if partitioning:
        status["physicalSliced"] = {"profiles": [], "count": 7}
    return {"id": f"ID-{i:04d}", "index": i, "status": status}


@st.composite
def facts_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A detection document: 0-3 manufacturers, each one group of 1-8 cards with a driver version."""
    makers = draw(st.lists(st.sampled_from(MAKERS), unique=True, max_size=3))
    groups, labels, states = [], {}, {}
    n = 0
    for maker in makers:
        count = draw(st.integers(1, 8))
        driver = draw(st.from_regex(r"[1-9][0-9]{2}\.[0-9]{1,3}", fullmatch=True))
        cards = []
        for _ in range(count):
            cards.append(
                card(n, draw(st.booleans()) and draw(st.booleans()), draw(st.booleans()) and maker == "nvidia")
            )
            n += 1
        groups.append({"id": f"{maker}-g", "manufacturer": maker, "driverVersion": driver, "accelerators": cards})
        labels[f"{PREFIX}{maker}"] = "true"
        labels[f"{PREFIX}{maker}.driver-version"] = driver
        labels[f"{PREFIX}{maker}-{maker}-g.count"] = str(count)
        states[maker] = {"state": "detected"}
    for maker in draw(st.lists(st.sampled_from(MAKERS), unique=True, max_size=2)):
        states.setdefault(maker, {"state": "none"})
    labels["feature.gpustack.ai/acceleratable"] = "true" if groups else "false"
    labels["feature.node.kubernetes.io/pci-10de.present"] = "true"  # NFD's: never compared
    return {"node": {"labels": labels}, "groups": groups, "manufacturers": states}


def texts(facts: dict[str, Any], view: ClusterView) -> list[str]:
    return [d.text for d in compare(facts, view)]


@given(facts_docs())
def test_a_view_that_agrees_has_no_difference(facts: dict[str, Any]) -> None:
    assert compare(facts, agreeing_view(facts, "n1")) == []


@given(facts_docs(), st.data())
def test_a_card_fallen_off_the_host_that_devices_still_advertises(facts: dict[str, Any], data: st.DataObject) -> None:
    view = agreeing_view(facts, "n1")
    gone_from = [g for g in facts["groups"] if g["accelerators"]]
    if not gone_from:
        return
    group = data.draw(st.sampled_from(gone_from))
    lost = group["accelerators"].pop(data.draw(st.integers(0, len(group["accelerators"]) - 1)))
    lines = texts(facts, view)
    maker = group["manufacturer"]
    assert f"Devices advertises {lost['id']} ({maker} {maker}-g) the host no longer has" in lines
    usable = not lost["status"].get("unhealthy") and "physicalSliced" not in lost["status"]
    expected_alloc = [line for line in lines if line.startswith(f"allocatable {RESOURCES[maker]}")]
    assert len(expected_alloc) == (1 if usable else 0)
    assert all(d.kind in ("accelerator", "allocatable", "label", "device-manager") for d in compare(facts, view))


@given(facts_docs(), st.data())
def test_a_card_on_the_host_missing_from_devices(facts: dict[str, Any], data: st.DataObject) -> None:
    view = agreeing_view(facts, "n1")
    groups = [g for g in view.devices_groups or [] if g["accelerators"]]
    if not groups:
        return
    group = data.draw(st.sampled_from(groups))
    missing = group["accelerators"].pop(0)["id"]
    assert texts(facts, view) == [
        f"{missing} ({group['manufacturer']} {group['id']}) is on the host but not in Devices"
    ]


@given(facts_docs(), st.from_regex(r"[1-9][0-9]{2}\.[0-9]{1,3}\.[0-9]{2}", fullmatch=True))
def test_labels_old_after_a_driver_upgrade(facts: dict[str, Any], old: str) -> None:
    if not facts["groups"]:
        return
    view = agreeing_view(facts, "n1")
    maker = facts["groups"][0]["manufacturer"]
    new = facts["groups"][0]["driverVersion"]
    assert view.node_feature_labels is not None
    view.node_feature_labels[f"{PREFIX}{maker}.driver-version"] = old
    assert texts(facts, view) == [f"{maker} driver {new} on the host, {old} in the NodeFeature labels"]


@given(facts_docs(), st.integers(0, 20))
def test_allocatable_off_by_any_amount_is_named_with_both_counts(facts: dict[str, Any], value: int) -> None:
    view = agreeing_view(facts, "n1")
    assert view.allocatable is not None
    if not view.allocatable:
        return
    name = sorted(view.allocatable)[0]
    has = int(view.allocatable[name])
    view.allocatable[name] = str(value)
    assert texts(facts, view) == ([] if value == has else [f"allocatable {name} {value}, the host has {has}"])


@given(facts_docs())
def test_no_device_manager_pod_on_a_node_with_accelerators(facts: dict[str, Any]) -> None:
    view = agreeing_view(facts, "n1")
    view.pods = []
    makers = sorted({g["manufacturer"] for g in facts["groups"] if g["accelerators"]})
    want = [
        f"no device-manager pod (DaemonSet gpustack-operator-device-manager-{m}) on a node with "
        f"{sum(len(g['accelerators']) for g in facts['groups'] if g['manufacturer'] == m)} {m} accelerators"
        for m in makers
    ]
    assert texts(facts, view) == want


def test_a_pod_that_is_not_ready_is_named() -> None:
    facts = {"node": {"labels": {}}, "groups": [{"id": "g", "manufacturer": "amd", "accelerators": [card(0)]}],
             "manufacturers": {"amd": {"state": "detected"}}}  # fmt: skip
    view = agreeing_view(facts, "n1")
    view.pods = [DevicePod("gpustack-operator-device-manager-amd-x", "ns", "gpustack-operator-device-manager-amd",
                           "Pending", False)]  # fmt: skip
    assert texts(facts, view) == [
        "the device-manager pod is not serving: ns/gpustack-operator-device-manager-amd-x is Pending, not ready"
    ]


def test_held_shared_cards_are_not_counted_in_the_exclusive_allocatable() -> None:
    facts = {"node": {"labels": {}}, "manufacturers": {"nvidia": {"state": "detected"}},
             "groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": [card(0), card(1), card(2)]}]}  # fmt: skip
    view = agreeing_view(facts, "n1")
    view.devices_status = [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"id": "ID-0001", "mode": "shared"}]}]
    assert texts(facts, view) == ["allocatable nvidia.com/gpu 3, the host has 2 (1 of its 3 held shared or sliced)"]
    view.allocatable = {"nvidia.com/gpu": "2"}
    assert texts(facts, view) == []


def test_unread_and_absent_parts_are_named_and_not_compared() -> None:
    facts = {"node": {"labels": {}}, "manufacturers": {"nvidia": {"state": "detected"}},
             "groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": [card(0)]}]}  # fmt: skip
    view = ClusterView("n1", errors={"Node": "GET /api/v1/nodes/n1 at https://x: HTTP 403: forbidden"})
    view.absent = ["NodeFeature", "Devices"]
    view.pods = []
    assert texts(facts, view) == [
        "the Node of node n1 could not be read: GET /api/v1/nodes/n1 at https://x: HTTP 403: forbidden",
        "no NodeFeature n1-gpustack-device-manager for a node with 1 accelerators",
        "no Devices n1 for a node with 1 accelerators",
        "no device-manager pod (DaemonSet gpustack-operator-device-manager-nvidia) on a node with 1 nvidia accelerators",
    ]
    view = ClusterView("n1", absent=["Node", "NodeFeature", "Devices"])
    assert texts(facts, view)[0] == "node n1 is not in the cluster (no Node object)"


def test_a_cpu_only_node_with_nothing_published_agrees() -> None:
    facts = {"node": {"labels": {"feature.gpustack.ai/acceleratable": "false"}}, "groups": [],
             "manufacturers": {"nvidia": {"state": "none"}}}  # fmt: skip
    assert compare(facts, ClusterView("n1", allocatable={}, pods=[], absent=["NodeFeature", "Devices"])) == []


def test_an_unmeasured_manufacturer_is_a_difference_and_its_labels_are_not_compared() -> None:
    facts = {"node": {"labels": {}, "unmeasured": {"nvidia": "libnvidia-ml.so.1 killed it (SIGBUS)"}},
             "groups": [], "manufacturers": {"nvidia": {"state": "unmeasured"}}}  # fmt: skip
    view = ClusterView("n1", allocatable={"nvidia.com/gpu": "8"}, node_feature_labels={f"{PREFIX}nvidia": "true"})
    view.devices_groups = [{"id": "g", "manufacturer": "nvidia", "accelerators": [{"id": "GPU-1"}]}]
    assert texts(facts, view) == [
        "nvidia could not be measured on the host (libnvidia-ml.so.1 killed it (SIGBUS)): not compared"
    ]


def test_labels_missing_extra_and_changed() -> None:
    facts = {"node": {"labels": {f"{PREFIX}amd": "true", f"{PREFIX}amd-g.count": "2"}}, "groups": [],
             "manufacturers": {"amd": {"state": "detected"}}}  # fmt: skip
    view = ClusterView(
        "n1", node_feature_labels={f"{PREFIX}amd-g.count": "3", "feature.gpustack.ai/rdma.capable": "true"}
    )
    assert texts(facts, view) == [
        f"label {PREFIX}amd=true on the host is missing from the NodeFeature labels",
        f"label {PREFIX}amd-g.count is 2 on the host, 3 in the NodeFeature labels",
        "the NodeFeature labels carry feature.gpustack.ai/rdma.capable=true, which the host no longer gives",
    ]


def test_label_ownership() -> None:
    assert device_manager_label("feature.gpustack.ai/acceleratable", "true")
    assert not device_manager_label("feature.gpustack.ai/acceleratable", "false")  # NFD's prediction
    assert not device_manager_label("feature.node.kubernetes.io/pci-10de.present", "true")
    assert label_manufacturer(f"{PREFIX}nvidia-h100.count") == "nvidia"
    assert label_manufacturer(f"{PREFIX}mthreads.driver-version") == "mthreads"
    assert label_manufacturer("feature.gpustack.ai/rdma.numa") is None


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        ([], "the host facts is not a mapping (it is list)"),
        ({"node": {}, "groups": {}, "manufacturers": {}}, "the host facts' groups is not a list (it is dict)"),
        ({"node": {}, "groups": [{"accelerators": [{}]}], "manufacturers": {}}, "groups[0].accelerators[0] has no id"),
        ({"groups": [], "manufacturers": {}}, "the host facts' node is not a mapping (it is NoneType)"),
    ],
)
def test_facts_that_are_no_detection_document_are_refused_in_one_line(facts: Any, words: str) -> None:
    with pytest.raises(FactsError) as info:
        host_view(facts)
    assert str(info.value) == words


@functools.cache
def real_facts(fixture: str) -> dict[str, Any]:
    return api.facts(api.make_request(str(host(fixture)), ["nvidia", "amd"]))


@pytest.mark.parametrize("fixture", ["h100-sxm-8x", "a100-mig", "mi300x-8x", "cpu-only-vm"])
def test_real_detection_documents(fixture: str) -> None:
    facts = copy.deepcopy(real_facts(fixture))
    assert compare(facts, agreeing_view(facts, "n1")) == []
    view = agreeing_view(facts, "n1")
    # the a100-mig node's partitioned cards never count towards the exclusive resource
    if fixture == "a100-mig":
        assert view.allocatable == {"nvidia.com/gpu": "4", "amd.com/gpu": "0"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)
KEYS = ["labels", "allocatable", "groups", "accelerators", "id", "manufacturer", "mode", "driverVersion",
        "ownerReferences", "conditions", "kind", "name", "phase", "type", "status"]  # fmt: skip
# JSON shaped like the objects read, with any value where a field should be
SHAPED = st.recursive(
    JSON,
    lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, max_size=4) | st.lists(inner, max_size=3),
    max_leaves=16,
)
OBJECT = st.fixed_dictionaries({}, optional={"metadata": SHAPED, "spec": SHAPED, "status": SHAPED})
# the Devices object: groups of any shape, each field any JSON, accelerators lists of objects of any shape
FIELDS = st.dictionaries(st.sampled_from(KEYS), JSON, max_size=4)
GROUPS = st.lists(FIELDS | st.fixed_dictionaries({"accelerators": JSON | st.lists(FIELDS, max_size=3)}), max_size=3)
PART = st.fixed_dictionaries({}, optional={"groups": GROUPS | JSON}) | SHAPED
DEVICES = st.fixed_dictionaries({}, optional={"metadata": SHAPED, "spec": PART, "status": PART})


@example({}, {}, {"spec": {"groups": [{"accelerators": 5}]}, "status": {"groups": [{"accelerators": True}]}}, {})
@example({"status": {"allocatable": 5}}, {"spec": {"labels": [1]}}, {"spec": [1]}, {"metadata": {"ownerReferences": 1}})
@given(OBJECT, OBJECT, DEVICES, OBJECT)
def test_any_answer_from_the_api_server_compares_without_a_traceback(
    node: dict[str, Any], feature: dict[str, Any], devices: dict[str, Any], pod: dict[str, Any]
) -> None:
    from gpustack_operator.kube import clusterview

    view = ClusterView("n1", pods=[])
    for part, doc in (("Node", node), ("NodeFeature", feature), ("Devices", devices)):
        clusterview._fill(view, part, doc)
    if isinstance(pod.get("metadata"), dict):
        pod["metadata"]["name"] = "gpustack-operator-device-manager-nvidia-x"
    seen = clusterview._device_pod(pod)
    view.pods = [seen] if seen else []
    facts = {"node": {"labels": {}}, "manufacturers": {"nvidia": {"state": "detected"}},
             "groups": [{"id": "g", "manufacturer": "nvidia", "driverVersion": "1", "accelerators": [card(0)]}]}  # fmt: skip
    for difference in compare(facts, view):
        assert difference.text and "\n" not in difference.text


@given(JSON)
def test_any_facts_are_a_host_view_or_one_clear_error(facts: Any) -> None:
    try:
        host_view(facts)
    except FactsError as exc:
        assert str(exc) and "\n" not in str(exc)


def test_cluster_text_never_splits_a_line() -> None:
    facts = {"node": {"labels": {}}, "groups": [], "manufacturers": {"nvidia": {"state": "detected"}}}
    view = ClusterView("n1", allocatable={"nvidia.com/gpu": "1\n2"})
    view.devices_groups = [{"id": "g\x1b[31m", "manufacturer": "nvidia", "accelerators": [{"id": "GPU-1\nGPU-2"}]}]
    assert texts(facts, view) == [
        "Devices advertises GPU-1\\nGPU-2 (nvidia g\\x1b[31m) the host no longer has",
        "allocatable nvidia.com/gpu '1\\n2' is not a quantity",
    ]
