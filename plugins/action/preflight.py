# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Defaults host_root / manufacturers from gpustack_host_root / gpustack_manufacturers."""

from ansible_collections.gpustack.accelerators.plugins.plugin_utils.inventory_defaults import (
    InventoryDefaultsAction,
)


class ActionModule(InventoryDefaultsAction):
    DEFAULTED = ("host_root", "manufacturers", "detect_root")
