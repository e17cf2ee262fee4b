"""Drive a module's ``main()`` as Ansible would: arguments through ``_ANSIBLE_ARGS``, and
``exit_json`` / ``fail_json`` turned into exceptions that carry the result."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from unittest import mock

import pytest
from ansible.module_utils import basic


class AnsibleExitJson(Exception):  # noqa: N818 - the name community collections use
    """The module called ``exit_json``: ``result`` is what the task returns."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result


class AnsibleFailJson(Exception):  # noqa: N818 - the name community collections use
    """The module called ``fail_json``: ``result`` carries ``msg`` and ``failed``."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.result = result


@contextlib.contextmanager
def set_module_args(args: dict[str, Any]) -> Iterator[None]:
    """Hand ``args`` to the next ``AnsibleModule`` (both the ansible-core >= 2.19 way and the older one)."""
    try:
        from ansible.module_utils.testing import patch_module_args
    except ImportError:  # ansible-core < 2.19 reads the serialized arguments directly
        serialized = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", serialized):
            yield
    else:
        with patch_module_args(args):
            yield


def _exit_json(self: basic.AnsibleModule, **kwargs: Any) -> NoReturn:
    kwargs.setdefault("changed", False)
    raise AnsibleExitJson(kwargs)


def _fail_json(self: basic.AnsibleModule, msg: str, **kwargs: Any) -> NoReturn:
    kwargs.update(failed=True, msg=msg)
    raise AnsibleFailJson(kwargs)


def task_args(args: dict[str, Any], check_mode: bool, diff: bool) -> dict[str, Any]:
    full = dict(args)
    if check_mode:
        full["_ansible_check_mode"] = True
    if diff:
        full["_ansible_diff"] = True
    return full


def _outcome(
    main: Callable[[], None],
    args: dict[str, Any],
    expected: type[AnsibleExitJson | AnsibleFailJson],
    check_mode: bool,
    diff: bool,
) -> dict[str, Any]:
    """Run ``main()`` with exit_json / fail_json patched; it must end in ``expected`` (the other one
    propagates, carrying the module's result or message)."""
    with (
        set_module_args(task_args(args, check_mode, diff)),
        mock.patch.multiple(basic.AnsibleModule, exit_json=_exit_json, fail_json=_fail_json),
        pytest.raises(expected) as info,
    ):
        main()
    return info.value.result


def exit_result(
    main: Callable[[], None], args: dict[str, Any], *, check_mode: bool = False, diff: bool = False
) -> dict[str, Any]:
    """Run ``main()``; it must succeed. An ``AnsibleFailJson`` propagates with the module's message."""
    return _outcome(main, args, AnsibleExitJson, check_mode, diff)


def fail_result(
    main: Callable[[], None], args: dict[str, Any], *, check_mode: bool = False, diff: bool = False
) -> dict[str, Any]:
    """Run ``main()``; it must fail the task. An ``AnsibleExitJson`` propagates with the result."""
    return _outcome(main, args, AnsibleFailJson, check_mode, diff)


def printed_result(
    main: Callable[[], None], args: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    """Run ``main()`` unpatched: the exit status and the JSON document it printed (what Ansible reads).

    As in a module's own fresh process, the warnings collected so far are dropped first (ansible-core
    keeps them process-wide) and ``module.warn`` records them for the result even where controller code
    was imported into this process before (ansible-core >= 2.19 then sends them to its display)."""
    from ansible.module_utils.common import warnings

    try:
        from ansible.module_utils import _internal
    except ImportError:  # ansible-core < 2.19: no controller switch
        not_controller = contextlib.nullcontext()
    else:
        not_controller = mock.patch.object(_internal, "is_controller", False)
    warnings._global_warnings.clear()
    with set_module_args(args), not_controller, pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr().out
    return int(info.value.code or 0), json.loads(out[out.index("{") :])


def warning_messages(result: dict[str, Any]) -> list[str]:
    """The ``module.warn`` messages of a printed result: plain strings before ansible-core 2.19, then
    ``WarningSummary`` documents carrying the message in ``event.msg``."""
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]
