# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side: fill a module's node options from the host's inventory variables.

A fleet inventory says once per host where its root is (``gpustack_host_root``) and which
manufacturers to ask about (``gpustack_manufacturers``); the modules pick those up unless the task
sets the option itself, so ``ansible all -m gpustack.accelerators.accelerator_facts`` works as is.
"""

from ansible.plugins.action import ActionBase

INVENTORY_DEFAULTS = {
    "host_root": "gpustack_host_root",
    "manufacturers": "gpustack_manufacturers",
    # preflight only: a node view apart from the host root (a captured container view)
    "detect_root": "gpustack_detect_root",
}


class InventoryDefaultsAction(ActionBase):
    """Run the module of the same name with options defaulted from inventory variables."""

    _requires_connection = True
    # Which of INVENTORY_DEFAULTS this module takes (driver_mode has a single manufacturer option).
    DEFAULTED = ("host_root", "manufacturers")

    def defaulted_args(self, task_vars):
        """The task's arguments with the DEFAULTED options filled from inventory variables."""
        args = dict(self._task.args)
        for option in self.DEFAULTED:
            variable = INVENTORY_DEFAULTS[option]
            if args.get(option) is None and task_vars.get(variable) is not None:
                args[option] = self._templar.template(task_vars[variable])
        return args

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_args=self.defaulted_args(task_vars), task_vars=task_vars))
        return result
