"""manifest_diff: a Helm release's manifest against a new render, object by object -- the deploy role's
``--diff`` without the helm-diff plugin. Pure: no cluster, no helm; the inputs are written here."""

from __future__ import annotations

import copy
import difflib
from typing import Any

import pytest
import yaml
from ansible_collections.gpustack.accelerators.plugins.modules import manifest_diff
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import (
    exit_result,
    fail_result,
    printed_result,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RELEASE = {"release_name": "gpustack-operator", "release_namespace": "gpustack-system"}
NS = "gpustack-system"


def deployment(image: str = "gpustack/gpustack-operator-py:0.1.0") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpustack-operator-worker", "namespace": NS, "labels": {"app": "worker"}},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "worker", "image": image, "args": ["worker"]}]}},
        },
    }


def account() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "gpustack-operator-worker", "namespace": NS},
    }


def cluster_role(verbs: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "gpustack-operator-worker"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": verbs}],
    }


def rendered(*objects: dict[str, Any]) -> str:
    """What ``helm template`` prints: a ``---`` and a ``# Source:`` comment before each document."""
    return "".join(
        f"---\n# Source: gpustack-operator/templates/{n}.yaml\n{yaml.safe_dump(o, sort_keys=False)}"
        for n, o in enumerate(objects)
    )


def unified(result: dict[str, Any]) -> list[str]:
    """The changed lines of the diff as Ansible's callback would show them."""
    diff = result["diff"]
    lines = difflib.unified_diff(diff["before"].splitlines(), diff["after"].splitlines(), lineterm="", n=0)
    return [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_a_changed_image_is_one_changed_object_and_one_changed_line() -> None:
    # before as kubernetes.core.helm_info returns it (a parsed list, a null for an empty document)
    before = [deployment(), None, account(), cluster_role(["get", "list"])]
    after = rendered(cluster_role(["get", "list"]), account(), deployment("gpustack/gpustack-operator-py:0.2.0"))
    result = exit_result(manifest_diff.main, {**RELEASE, "before": before, "after": after}, diff=True)

    assert result["changed"] is True
    assert result["objects"] == [
        {
            "change": "changed",
            "api_version": "apps/v1",
            "kind": "Deployment",
            "namespace": NS,
            "name": "gpustack-operator-worker",
        }
    ]
    assert result["counts"] == {"added": 0, "removed": 0, "changed": 1, "unchanged": 2}
    assert result["summary"] == (
        "release gpustack-operator in gpustack-system: 1 changed (Deployment gpustack-system/gpustack-operator-worker)"
    )
    assert unified(result) == [
        "-        image: gpustack/gpustack-operator-py:0.1.0",
        "+        image: gpustack/gpustack-operator-py:0.2.0",
    ]
    assert result["diff"]["before_header"] == "release gpustack-operator in gpustack-system: current manifest"
    assert result["diff"]["after_header"] == "release gpustack-operator in gpustack-system: rendered from the chart"
    # each object after a --- and a comment naming it, in key order (apiVersion, kind, namespace, name)
    heads = [line for line in result["diff"]["after"].splitlines() if line.startswith("# ")]
    assert heads == [
        "# apps/v1 Deployment gpustack-system/gpustack-operator-worker",
        "# rbac.authorization.k8s.io/v1 ClusterRole gpustack-operator-worker",
        "# v1 ServiceAccount gpustack-system/gpustack-operator-worker",
    ]
    assert result["diff"]["after"].count("---\n") == 3 and "# Source:" not in result["diff"]["after"]


def test_order_comments_and_key_order_are_no_change() -> None:
    objects = [deployment(), account(), cluster_role(["get"])]
    reordered = [{k: o[k] for k in reversed(o)} for o in reversed(objects)]
    text = "# a comment\n---\n---\n" + rendered(*reordered) + "---\n# trailing\n"
    result = exit_result(manifest_diff.main, {**RELEASE, "before": objects, "after": text})
    assert result["changed"] is False
    assert result["objects"] == []
    assert result["counts"] == {"added": 0, "removed": 0, "changed": 0, "unchanged": 3}
    assert result["diff"]["before"] == result["diff"]["after"]
    assert result["summary"] == "release gpustack-operator in gpustack-system: no object would change (3 unchanged)"


@pytest.mark.parametrize("absent", [None, "", [], "---\n# nothing\n"])
def test_a_release_that_does_not_exist_adds_everything(absent: Any) -> None:
    result = exit_result(
        manifest_diff.main, {**RELEASE, "before": absent, "after": rendered(account(), deployment())}, check_mode=True
    )
    assert result["changed"] is True
    assert [(o["change"], o["kind"]) for o in result["objects"]] == [
        ("added", "Deployment"),
        ("added", "ServiceAccount"),
    ]
    assert result["diff"]["before"] == ""
    assert unified(result)[0] == "+---"


def test_added_removed_and_changed_together() -> None:
    before = rendered(deployment(), cluster_role(["get"]))
    after = rendered(account(), cluster_role(["get", "watch"]))
    result = manifest_diff.compare(before, after, "r")
    assert [(o["change"], o["kind"]) for o in result["objects"]] == [
        ("removed", "Deployment"),
        ("changed", "ClusterRole"),
        ("added", "ServiceAccount"),
    ]
    assert result["summary"] == (
        "release r: 1 added (ServiceAccount gpustack-system/gpustack-operator-worker); "
        "1 removed (Deployment gpustack-system/gpustack-operator-worker); 1 changed (ClusterRole gpustack-operator-worker)"
    )
    assert "+  - watch" in unified(result)


def test_the_same_name_in_another_namespace_or_kind_is_another_object() -> None:
    moved = copy.deepcopy(account())
    moved["metadata"]["namespace"] = "elsewhere"
    result = manifest_diff.compare([account()], [moved], "r")
    assert [(o["change"], o["namespace"]) for o in result["objects"]] == [("added", "elsewhere"), ("removed", NS)]


def test_the_result_is_what_ansible_reads(capsys: pytest.CaptureFixture[str]) -> None:
    args = {**RELEASE, "before": rendered(deployment()), "after": rendered(deployment("x:2")), "_ansible_diff": True}
    status, printed = printed_result(manifest_diff.main, args, capsys)
    assert status == 0
    assert printed["changed"] is True and printed["counts"]["changed"] == 1
    assert "+        image: x:2" in unified(printed)


def test_labels_name_both_sides_in_the_headers() -> None:
    result = manifest_diff.compare([], [], "r", "ns", before_label="revision 3 (deployed)", after_label="new")
    assert result["diff"]["before_header"] == "release r in ns: revision 3 (deployed)"
    assert result["diff"]["after_header"] == "release r in ns: new"
    assert result["changed"] is False and result["summary"] == "release r in ns: no object would change (0 unchanged)"


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    "{0}: &{0} [{1}]\n".format(chr(98 + i), ", ".join(["*" + chr(97 + i)] * 9)) for i in range(8)
)


@pytest.mark.parametrize(
    ("after", "words"),
    [
        (rendered(account()) + "---\nkind: [\n", "after, document 2 is not YAML: "),
        ("- just\n- a list\n", "after, document 1: it is a list, not a Kubernetes object"),
        ("just text", "after, document 1: it is a str, not a Kubernetes object"),
        ("apiVersion: v1\nmetadata: {name: a}\n", "after, document 1: it has no kind"),
        (
            rendered(account()) + "---\nkind: ConfigMap\nmetadata: {}\n",
            "after, document 2: its ConfigMap has no metadata.name",
        ),
        ("kind: ConfigMap\nmetadata: {name: [a]}\n", "after, document 1: its ConfigMap has no metadata.name"),
        (rendered(account(), account()), "after, documents 1 and 2 are both v1 ServiceAccount gpustack-system/"),
        ("kind: A\nmetadata: {name: a}\nwhen: 2001-13-01\n", "after, document 1 is not YAML: month must be in 1..12"),
        ("&a {kind: A, metadata: {name: a}, self: *a}\n", "after, document 1: it contains itself"),
        (LAUGHS + "kind: A\nmetadata: {name: a}\n", "after, document 1: it holds more than 200000 values"),
        (7, "after is of type int: give YAML text, a list of objects or one object"),
        ([account(), "text"], "after, document 2: it is a str, not a Kubernetes object"),
    ],
)
def test_bad_input_fails_naming_the_document(after: Any, words: str) -> None:
    result = fail_result(manifest_diff.main, {**RELEASE, "before": [account()], "after": after}, check_mode=True)
    assert result["msg"].startswith("manifest_diff for release gpustack-operator: " + words), result["msg"]
    assert "Traceback" not in result["msg"]


def test_a_bad_before_is_named_as_before() -> None:
    with pytest.raises(manifest_diff.ManifestError, match=r"^before, document 1: it has no kind$"):
        manifest_diff.compare("metadata: {name: a}", [], "r")


# -- fuzzing: any text, any JSON-like value; a result or a ManifestError, never anything else -----------------

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
objects = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["v1", "apps/v1", ""]),
        "kind": st.sampled_from(["ConfigMap", "Deployment", "Role"]),
        "metadata": st.fixed_dictionaries(
            {"name": st.text(min_size=1, max_size=6)},
            optional={"namespace": st.sampled_from(["", NS, "other"]), "labels": values},
        ),
    },
    optional={"spec": values, "data": values},
)
# YAML's own punctuation and a few whole lines of a manifest, joined at random
yaml_tokens = st.sampled_from([*"abk:-[]{},&*!|>'\"#%@`?\n \t0129.~", "kind: A\n", "---\n", "metadata:\n  name: a\n"])
yamlish = st.lists(yaml_tokens, max_size=60).map("".join)


def outcome(before: Any, after: Any) -> dict[str, Any] | None:
    try:
        return manifest_diff.compare(before, after, "r", "ns")
    except manifest_diff.ManifestError as exc:
        assert str(exc).startswith(("before", "after")), exc
        return None


@FUZZ
@given(st.text(max_size=200) | yamlish, st.text(max_size=200) | yamlish)
def test_any_text_is_a_result_or_a_clear_error(before: str, after: str) -> None:
    result = outcome(before, after)
    if result is not None:
        assert result["changed"] == bool(result["objects"])


@FUZZ
@given(st.lists(values | objects, max_size=4), values)
def test_any_value_is_a_result_or_a_clear_error(before: list[Any], after: Any) -> None:
    outcome(before, after)


@FUZZ
@given(st.lists(objects, max_size=5))
def test_a_manifest_against_itself_or_its_text_is_unchanged(docs: list[dict[str, Any]]) -> None:
    result = outcome(docs, yaml.safe_dump_all(docs))
    if result is not None:  # two documents with the same key: refused
        assert result["changed"] is False, result["objects"]
        assert result["diff"]["before"] == result["diff"]["after"]


@FUZZ
@given(st.lists(objects, max_size=4), st.lists(objects, max_size=4))
def test_swapping_the_sides_swaps_added_and_removed(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    forward, backward = outcome(old, new), outcome(new, old)
    if forward is None or backward is None:
        return
    swap = {"added": "removed", "removed": "added", "changed": "changed"}
    assert sorted((swap[o["change"]], o["kind"], o["namespace"], o["name"]) for o in forward["objects"]) == sorted(
        (o["change"], o["kind"], o["namespace"], o["name"]) for o in backward["objects"]
    )
