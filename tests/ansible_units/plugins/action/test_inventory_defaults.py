"""The node-option action plugins: host_root / manufacturers default from the host's
gpustack_host_root / gpustack_manufacturers; the task's own value wins."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.gpustack.accelerators.plugins.action import (
    accelerator_facts,
    driver_mode,
    preflight,
    preload_libraries,
)
from ansible_collections.gpustack.accelerators.tests.unit.plugins.action.actions import (
    MODULE_RESULT,
    make_action,
    run_action,
    trusted,
)

HOST_VARS = {
    "inventory_hostname": "gpu-01",
    "gpustack_host_root": "/srv/nodes/gpu-01",
    "gpustack_manufacturers": ["nvidia", "amd"],
}
BOTH = [accelerator_facts.ActionModule, preflight.ActionModule, preload_libraries.ActionModule]


@pytest.mark.parametrize("cls", BOTH)
def test_host_vars_fill_host_root_and_manufacturers(cls: type) -> None:
    args = {"src": "/opt/lib"} if cls is preload_libraries.ActionModule else {}
    result, executed = run_action(make_action(cls, dict(args), HOST_VARS), HOST_VARS)
    assert executed == [dict(args, host_root="/srv/nodes/gpu-01", manufacturers=["nvidia", "amd"])]
    assert result["from_module"] is True


@pytest.mark.parametrize("cls", BOTH)
def test_the_task_value_wins_over_the_host_var(cls: type) -> None:
    args = {"host_root": "/host", "manufacturers": ["ascend"]}
    executed = run_action(make_action(cls, dict(args), HOST_VARS), HOST_VARS)[1]
    assert executed == [args]


@pytest.mark.parametrize("cls", BOTH)
def test_without_host_vars_the_options_stay_unset(cls: type) -> None:
    task_vars = {"inventory_hostname": "gpu-01"}
    executed = run_action(make_action(cls, {"manufacturers": ["amd"]}, task_vars), task_vars)[1]
    assert executed == [{"manufacturers": ["amd"]}]  # the module picks /host or / itself


def test_a_null_task_value_takes_the_host_var() -> None:
    action = make_action(preflight.ActionModule, {"host_root": None, "fail_on": "never"}, HOST_VARS)
    executed = run_action(action, HOST_VARS)[1]
    assert executed == [{"host_root": "/srv/nodes/gpu-01", "manufacturers": ["nvidia", "amd"], "fail_on": "never"}]


def test_an_explicit_empty_list_is_the_task_value_all_nine() -> None:
    executed = run_action(make_action(preflight.ActionModule, {"manufacturers": []}, HOST_VARS), HOST_VARS)[1]
    assert executed[0]["manufacturers"] == []


def test_host_vars_are_templated() -> None:
    task_vars = {
        "fleet_base": "/srv/fleet",
        "inventory_hostname": "gpu-07",
        "gpustack_host_root": trusted("{{ fleet_base }}/{{ inventory_hostname }}"),
        "gpustack_manufacturers": trusted("{{ ['thead'] }}"),
    }
    executed = run_action(make_action(accelerator_facts.ActionModule, {}, task_vars), task_vars)[1]
    assert executed == [{"host_root": "/srv/fleet/gpu-07", "manufacturers": ["thead"]}]


def test_driver_mode_takes_host_root_but_never_the_manufacturer_list() -> None:
    args = {"manufacturer": "ascend", "mode": "container-share"}
    executed = run_action(make_action(driver_mode.ActionModule, dict(args), HOST_VARS), HOST_VARS)[1]
    assert executed == [dict(args, host_root="/srv/nodes/gpu-01")]


def test_the_task_args_themselves_are_not_changed() -> None:
    args: dict[str, Any] = {}
    action = make_action(preflight.ActionModule, args, HOST_VARS)
    run_action(action, HOST_VARS)
    assert args == {}


def test_the_module_result_is_the_task_result() -> None:
    result = run_action(make_action(preflight.ActionModule, {}, HOST_VARS), HOST_VARS)[0]
    assert {k: result[k] for k in MODULE_RESULT} == MODULE_RESULT
