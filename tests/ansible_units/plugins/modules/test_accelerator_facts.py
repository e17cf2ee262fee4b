"""accelerator_facts: one detection pass on a fixture node, returned as facts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import MANUFACTURERS
from ansible_collections.gpustack.accelerators.plugins.modules import accelerator_facts
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import (
    exit_result,
    fail_result,
    printed_result,
)


def facts(result: dict[str, object]) -> dict[str, object]:
    ansible_facts = result["ansible_facts"]
    assert isinstance(ansible_facts, dict)
    doc = ansible_facts["gpustack_accelerators"]
    assert isinstance(doc, dict)
    return doc


def test_an_mi300x_node_reports_its_eight_gpus_and_cpu_key(fixture_host: Callable[[str], Path]) -> None:
    root = fixture_host("mi300x-8x")
    result = exit_result(accelerator_facts.main, {"host_root": str(root)})
    assert result["changed"] is False
    doc = facts(result)
    node = doc["node"]
    assert isinstance(node, dict)
    assert node["root"] == str(root)
    assert node["cpu"]["name"] == "AMD EPYC 9654 96-Core Processor"
    assert node["generalNodeKey"] == "amd-epyc-9654"
    assert "unmeasured" not in node
    groups = doc["groups"]
    assert isinstance(groups, list)
    assert [(g["id"], g["manufacturer"], g["name"]) for g in groups] == [
        ("instinct-mi300x", "amd", "AMD Instinct MI300X")
    ]
    accelerators = groups[0]["accelerators"]
    assert [a["index"] for a in accelerators] == list(range(8))
    assert len({a["topology"]["pciBusId"] for a in accelerators}) == 8


def test_only_the_asked_manufacturers_are_detected(fixture_host: Callable[[str], Path]) -> None:
    root = fixture_host("mi300x-8x")
    result = exit_result(accelerator_facts.main, {"host_root": str(root), "manufacturers": ["nvidia", "ascend"]})
    assert facts(result)["groups"] == []


def test_a_cpu_only_node_has_no_groups_but_a_node_key(fixture_host: Callable[[str], Path]) -> None:
    doc = facts(exit_result(accelerator_facts.main, {"host_root": str(fixture_host("cpu-only-vm"))}))
    assert doc["groups"] == []
    node = doc["node"]
    assert isinstance(node, dict)
    assert node["generalNodeKey"] == "intel-xeon-processor-icelake"


def test_an_unmeasurable_bus_is_named_unmeasured_not_empty(fixture_host: Callable[[str], Path]) -> None:
    doc = facts(exit_result(accelerator_facts.main, {"host_root": str(fixture_host("unreadable-sysfs"))}))
    node = doc["node"]
    assert isinstance(node, dict)
    assert sorted(node["unmeasured"]) == [
        "amd",
        "ascend",
        "cambricon",
        "hygon",
        "iluvatar",
        "metax",
        "mthreads",
        "nvidia",
        "thead",
    ]
    assert all("the PCI bus could not be listed" in reason for reason in node["unmeasured"].values())


def test_check_mode_runs_the_same_read(fixture_host: Callable[[str], Path]) -> None:
    args = {"host_root": str(fixture_host("mi300x-8x"))}
    checked = exit_result(accelerator_facts.main, args, check_mode=True)
    assert "skipped" not in checked
    assert facts(checked)["groups"] == facts(exit_result(accelerator_facts.main, args))["groups"]


def test_the_printed_result_is_the_json_ansible_reads(
    fixture_host: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = printed_result(accelerator_facts.main, {"host_root": str(fixture_host("mi300x-8x"))}, capsys)
    assert rc == 0
    assert result["changed"] is False and "failed" not in result
    assert [g["id"] for g in result["ansible_facts"]["gpustack_accelerators"]["groups"]] == ["instinct-mi300x"]


def test_an_unknown_manufacturer_is_refused_listing_the_choices(source_repo: Path) -> None:
    result = fail_result(accelerator_facts.main, {"host_root": "/", "manufacturers": ["nvidia", "intel"]})
    assert "intel" in result["msg"]
    assert all(name in result["msg"] for name in MANUFACTURERS)
    assert "ansible_facts" not in result


def test_manufacturers_are_gather_subset_style(fixture_host: Callable[[str], Path]) -> None:
    root = str(fixture_host("mi300x-8x"))
    excluded = facts(exit_result(accelerator_facts.main, {"host_root": root, "manufacturers": ["!amd", "!thead"]}))
    assert sorted(excluded["manufacturers"]) == [m for m in MANUFACTURERS if m not in ("amd", "thead")]
    assert excluded["groups"] == []
    everything = facts(exit_result(accelerator_facts.main, {"host_root": root, "manufacturers": ["all"]}))
    assert sorted(everything["manufacturers"]) == MANUFACTURERS
    assert everything["manufacturers"]["amd"]["state"] == "detected"


def test_a_selection_that_leaves_none_is_refused(source_repo: Path) -> None:
    result = fail_result(accelerator_facts.main, {"host_root": "/", "manufacturers": ["!all"]})
    assert result["msg"] == "manufacturers: !all leaves no manufacturer to detect"


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_host_root_is_refused_never_read_as_slash(blank: str, source_repo: Path) -> None:
    result = fail_result(accelerator_facts.main, {"host_root": blank})
    assert result["msg"].startswith("host_root is empty: ")
    assert "ansible_facts" not in result


def test_an_unknown_option_is_refused(source_repo: Path) -> None:
    result = fail_result(accelerator_facts.main, {"host_roots": "/"})
    assert "host_roots" in result["msg"]


def test_an_unusable_host_root_fails_naming_it(tmp_path: Path, source_repo: Path) -> None:
    missing = tmp_path / "no-such-root"
    result = fail_result(accelerator_facts.main, {"host_root": str(missing)})
    assert f"host root '{missing}' cannot be used" in result["msg"]


def test_without_the_package_the_task_fails_with_the_install_hint(without_gpustack: ModuleType) -> None:
    result = fail_result(accelerator_facts.main, {"host_root": "/"})
    assert "Failed to import the required Python library (gpustack-operator)" in result["msg"]
    assert "gpustack.accelerators.install role" in result["msg"]
