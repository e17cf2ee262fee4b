"""InventoryDefaultsAction.defaulted_args: which inventory variable fills which option."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpustack.accelerators.plugins.plugin_utils.inventory_defaults import (
    INVENTORY_DEFAULTS,
    InventoryDefaultsAction,
)
from ansible_collections.gpustack.accelerators.tests.unit.plugins.action.actions import make_action


class HostRootOnly(InventoryDefaultsAction):
    DEFAULTED = ("host_root",)


def test_the_variables_follow_the_option_names() -> None:
    assert INVENTORY_DEFAULTS == {
        "host_root": "gpustack_host_root",
        "manufacturers": "gpustack_manufacturers",
        "detect_root": "gpustack_detect_root",
    }
    assert InventoryDefaultsAction.DEFAULTED == ("host_root", "manufacturers")


def test_defaulted_args_fills_only_what_is_unset() -> None:
    task_vars: dict[str, Any] = {"gpustack_host_root": "/host", "gpustack_manufacturers": ["metax"]}
    action = make_action(InventoryDefaultsAction, {"manufacturers": ["amd"], "other": 1}, task_vars)
    assert action.defaulted_args(task_vars) == {"manufacturers": ["amd"], "other": 1, "host_root": "/host"}


def test_a_subclass_narrows_the_defaulted_options() -> None:
    task_vars: dict[str, Any] = {"gpustack_host_root": "/host", "gpustack_manufacturers": ["metax"]}
    action = make_action(HostRootOnly, {}, task_vars)
    assert action.defaulted_args(task_vars) == {"host_root": "/host"}


def test_an_undefined_or_null_variable_fills_nothing() -> None:
    task_vars: dict[str, Any] = {"gpustack_host_root": None}
    action = make_action(InventoryDefaultsAction, {"mode": "x"}, task_vars)
    assert action.defaulted_args(task_vars) == {"mode": "x"}


def test_the_action_needs_a_connection() -> None:
    assert InventoryDefaultsAction._requires_connection is True
