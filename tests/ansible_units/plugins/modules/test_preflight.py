"""preflight: the report of every manufacturer asked, and the task verdict from it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import MANUFACTURERS
from ansible_collections.gpustack.accelerators.plugins.modules import preflight
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import (
    exit_result,
    fail_result,
    printed_result,
)


def answers(result: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Manufacturer -> (detection state, accelerators), read from the returned preflight document."""
    return {
        g["manufacturer"]: (g["detection"]["state"], g["detection"].get("accelerators", 0))
        for g in result["report"]["accelerators"]
    }


def test_a_cpu_only_node_answers_not_declared_for_all_nine(fixture_host: Callable[[str], Path]) -> None:
    result = exit_result(preflight.main, {"host_root": str(fixture_host("cpu-only-vm"))})
    assert result["changed"] is False
    assert result["failures"] == []
    assert answers(result) == {name: ("not-declared", 0) for name in MANUFACTURERS}
    assert [g["manufacturer"] for g in result["report"]["accelerators"]] == MANUFACTURERS


def test_an_mi300x_node_answers_ok_with_eight(fixture_host: Callable[[str], Path]) -> None:
    result = exit_result(preflight.main, {"host_root": str(fixture_host("mi300x-8x")), "manufacturers": ["amd"]})
    assert answers(result) == {"amd": ("ok", 8)}
    assert result["failures"] == []


def test_an_unavailable_answer_fails_the_task_and_still_returns_the_report(
    fixture_host: Callable[[str], Path],
) -> None:
    args = {"host_root": str(fixture_host("unreadable-sysfs")), "manufacturers": ["amd", "nvidia"]}
    result = fail_result(preflight.main, args)
    assert result["msg"].startswith("preflight: amd: detection: ")
    assert "; nvidia: detection: " in result["msg"]
    assert "the PCI bus could not be listed" in result["msg"]
    assert len(result["failures"]) == 2
    assert answers(result) == {"amd": ("unavailable", 0), "nvidia": ("unavailable", 0)}


def test_fail_on_never_leaves_the_verdict_to_the_result(fixture_host: Callable[[str], Path]) -> None:
    args = {"host_root": str(fixture_host("unreadable-sysfs")), "manufacturers": ["amd"], "fail_on": "never"}
    result = exit_result(preflight.main, args)
    assert "failed" not in result
    assert answers(result) == {"amd": ("unavailable", 0)}
    assert result["failures"] and result["failures"][0].startswith("amd: detection: ")


def test_an_unusable_host_root_is_every_answer_unavailable(tmp_path: Path, source_repo: Path) -> None:
    result = fail_result(preflight.main, {"host_root": str(tmp_path / "gone"), "manufacturers": ["thead"]})
    assert answers(result) == {"thead": ("unavailable", 0)}
    assert "cannot be used" in result["msg"]


def test_check_mode_forces_a_dry_run(fixture_host: Callable[[str], Path]) -> None:
    api = preflight.gpustack_api
    args = {"host_root": str(fixture_host("cpu-only-vm")), "manufacturers": ["nvidia"]}
    with mock.patch.object(api, "run_preflight", wraps=api.run_preflight) as spy:
        checked = exit_result(preflight.main, args, check_mode=True)
        plain = exit_result(preflight.main, args)
        asked = exit_result(preflight.main, dict(args, dry_run=True))
    assert [c.kwargs["dry_run"] for c in spy.call_args_list] == [True, False, True]
    assert answers(checked) == answers(plain) == answers(asked) == {"nvidia": ("not-declared", 0)}


def test_the_printed_result_is_the_json_ansible_reads(
    fixture_host: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"host_root": str(fixture_host("unreadable-sysfs")), "manufacturers": ["hygon"]}
    rc, result = printed_result(preflight.main, args, capsys)
    assert rc == 1
    assert result["failed"] is True
    assert result["report"]["accelerators"][0]["detection"]["state"] == "unavailable"


def test_manufacturers_are_gather_subset_style(fixture_host: Callable[[str], Path]) -> None:
    root = str(fixture_host("cpu-only-vm"))
    result = exit_result(preflight.main, {"host_root": root, "manufacturers": ["!thead", "!cambricon"]})
    assert sorted(answers(result)) == [m for m in MANUFACTURERS if m not in ("thead", "cambricon")]
    result = exit_result(preflight.main, {"host_root": root, "manufacturers": ["all", "!nvidia"]})
    assert sorted(answers(result)) == [m for m in MANUFACTURERS if m != "nvidia"]


@pytest.mark.parametrize(("option", "blank"), [("host_root", ""), ("host_root", "  "), ("detect_root", " ")])
def test_a_blank_root_is_refused_naming_the_option(option: str, blank: str, source_repo: Path) -> None:
    result = fail_result(preflight.main, {"host_root": "/", option: blank})
    assert result["msg"].startswith(f"{option} is empty: ")
    assert "report" not in result


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"fail_on": "sometimes"}, "fail_on"),
        ({"manufacturers": ["!intel"]}, "manufacturers"),
        ({"manufacturers": ["intel"]}, "manufacturers"),
        ({"dry_run": "perhaps"}, "dry_run"),
    ],
)
def test_bad_option_values_are_refused_naming_the_option(
    args: dict[str, object], option: str, source_repo: Path
) -> None:
    result = fail_result(preflight.main, dict(args, host_root="/"))
    assert option in result["msg"]
    assert "report" not in result


def test_without_the_package_the_task_fails_with_the_install_hint(without_gpustack: ModuleType) -> None:
    result = fail_result(preflight.main, {})
    assert "Failed to import the required Python library (gpustack-operator)" in result["msg"]
