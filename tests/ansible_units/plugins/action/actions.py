"""Build an action plugin the way the task executor does, with the remote side mocked: the module
execution is recorded, not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

MODULE_RESULT = {"changed": False, "from_module": True}
REMOTE_TMP = "/remote/.ansible/tmp/ansible-tmp-1"


def trusted(value: str) -> str:
    """A template string as the inventory hands it over: ansible-core >= 2.19 templates only trusted ones."""
    try:
        from ansible.template import trust_as_template
    except ImportError:  # older ansible-core templates every string
        return value
    return trust_as_template(value)


def make_action(cls: type, args: dict[str, Any], task_vars: dict[str, Any], search_dir: Path | None = None) -> Any:
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    task.action = "gpustack.accelerators." + cls.__module__.rsplit(".", 1)[-1]
    task.get_search_path.return_value = [str(search_dir)] if search_dir else []
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    loader = DataLoader()
    templar = Templar(loader=loader, variables=task_vars)
    action = cls(task, connection, mock.MagicMock(), loader, templar, None)

    def make_tmp_path(remote_user: str | None = None) -> str:
        connection._shell.tmpdir = REMOTE_TMP
        return REMOTE_TMP

    action._make_tmp_path = mock.MagicMock(side_effect=make_tmp_path)
    return action


def run_action(action: Any, task_vars: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The action's result and the module arguments of every module it executed."""
    with mock.patch.object(type(action), "_execute_module", return_value=dict(MODULE_RESULT)) as execute:
        result = action.run(task_vars=task_vars)
    return result, [call.kwargs["module_args"] for call in execute.call_args_list]
