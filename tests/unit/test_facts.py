"""accelerator_facts' document (per-manufacturer and per-accelerator views) and its gather_subset-style
manufacturer selection."""

from __future__ import annotations

import pytest
from gpustack_operator import api
from gpustack_operator.manufacturers import NAMES, UnknownManufacturerError, select_subset
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import host


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (None, list(NAMES)),
        ([], list(NAMES)),
        (["all"], list(NAMES)),
        (["!thead"], [n for n in NAMES if n != "thead"]),
        (["!thead", "!Cambricon"], [n for n in NAMES if n not in ("thead", "cambricon")]),
        (["nvidia"], ["nvidia"]),
        (["nvidia,amd"], ["amd", "nvidia"]),
        (["all", "!nvidia"], [n for n in NAMES if n != "nvidia"]),
        (["nvidia", "amd", "!nvidia"], ["amd"]),
        (["T-Head"], ["thead"]),
        (["!moore-threads"], [n for n in NAMES if n != "mthreads"]),
    ],
)
def test_subset(values: list[str] | None, expected: list[str]) -> None:
    assert select_subset(values) == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["intel"], "unknown manufacturer 'intel'; choose from all, amd"),
        (["!intel"], "unknown manufacturer '!intel'"),
        (["all", "!all"], "leaves no manufacturer to detect"),
        (["nvidia", "!nvidia"], "leaves no manufacturer to detect"),
    ],
)
def test_subset_refusals(values: list[str], message: str) -> None:
    with pytest.raises(UnknownManufacturerError, match=message):
        select_subset(values)


@given(st.lists(st.one_of(st.sampled_from([*NAMES, "all"]), st.text(max_size=8)).map(lambda s: s), max_size=6))
def test_subset_never_crashes(values: list[str]) -> None:
    try:
        chosen = select_subset(values)
    except UnknownManufacturerError:
        return
    assert chosen and chosen == sorted(set(chosen)) and set(chosen) <= set(NAMES)


@given(st.sets(st.sampled_from(NAMES), min_size=1, max_size=8))
def test_exclusions_are_the_complement(excluded: set[str]) -> None:
    assert select_subset([f"!{n}" for n in excluded]) == sorted(set(NAMES) - excluded)


def test_facts_views_on_a_mixed_node() -> None:
    doc = api.facts(api.make_request(str(host("mixed-cambricon-metax")), None))
    manufacturers = doc["manufacturers"]
    assert isinstance(manufacturers, dict)
    assert set(manufacturers) == set(NAMES)
    detected = {m: v for m, v in manufacturers.items() if v["state"] == "detected"}
    assert set(detected) == {"cambricon", "metax"}
    assert manufacturers["nvidia"] == {"state": "none", "accelerators": 0, "pci": 0, "groups": []}
    accelerators = doc["accelerators"]
    assert isinstance(accelerators, list)
    assert sum(v["accelerators"] for v in detected.values()) == len(accelerators)
    groups = doc["groups"]
    assert isinstance(groups, list)
    by_id = {a["id"]: a for g in groups for a in g["accelerators"]}
    for entry in accelerators:
        acc = by_id[entry["id"]]
        assert entry["pciBusId"] == acc["topology"]["pciBusId"]
        assert entry["index"] == acc["index"]
        assert entry["group"] in detected[entry["manufacturer"]]["groups"]


def test_facts_name_an_unmeasured_manufacturer() -> None:
    doc = api.facts(api.make_request(str(host("unreadable-sysfs")), ["nvidia", "amd"]))
    manufacturers = doc["manufacturers"]
    assert isinstance(manufacturers, dict)
    for name in ("nvidia", "amd"):
        assert manufacturers[name]["state"] == "unmeasured"
        assert manufacturers[name]["reason"]
    assert doc["accelerators"] == []
