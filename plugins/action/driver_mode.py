# -*- coding: utf-8 -*-
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Defaults host_root from the gpustack_host_root inventory variable."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpustack.accelerators.plugins.plugin_utils.inventory_defaults import (
    InventoryDefaultsAction,
)


class ActionModule(InventoryDefaultsAction):
    DEFAULTED = ("host_root",)
