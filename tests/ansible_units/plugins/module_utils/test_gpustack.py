"""module_utils/gpustack.py: the package import, the install hint, the shared options and the
request validation every module goes through."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack


class TaskFailedError(Exception):
    pass


class FakeModule:
    """Just what the helpers use of AnsibleModule: ``params`` and a ``fail_json`` that stops."""

    def __init__(self, **params: Any) -> None:
        self.params = params
        self.failure: dict[str, Any] | None = None

    def fail_json(self, msg: str, **kwargs: Any) -> NoReturn:
        self.failure = dict(kwargs, msg=msg)
        raise TaskFailedError(msg)


def test_the_option_spec_leaves_the_manufacturers_syntax_to_the_package() -> None:
    """No choices: Ansible would refuse "!thead" and "all" before select_subset ever saw them."""
    assert sorted(gpustack.MANUFACTURERS) == gpustack.MANUFACTURERS
    assert len(set(gpustack.MANUFACTURERS)) == 9
    assert gpustack.COMMON_ARGS["manufacturers"] == dict(type="list", elements="str")
    assert gpustack.COMMON_ARGS["host_root"] == dict(type="path")


@pytest.mark.parametrize(
    ("given", "selected"),
    [
        (None, gpustack.MANUFACTURERS),
        ([], gpustack.MANUFACTURERS),
        (["all"], gpustack.MANUFACTURERS),
        (["!thead"], [m for m in gpustack.MANUFACTURERS if m != "thead"]),
        (["!thead", "!cambricon"], [m for m in gpustack.MANUFACTURERS if m not in ("thead", "cambricon")]),
        (["all", "!thead"], [m for m in gpustack.MANUFACTURERS if m != "thead"]),
        (["NVIDIA", "amd"], ["amd", "nvidia"]),
        (["nvidia,ascend"], ["ascend", "nvidia"]),
        (["nvidia", "!nvidia", "amd"], ["amd"]),
    ],
)
def test_selected_manufacturers_is_gather_subset_style(
    given: list[str] | None, selected: list[str], source_repo: Path
) -> None:
    assert gpustack.selected_manufacturers(FakeModule(manufacturers=given)) == selected


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (
            ["intel"],
            "manufacturers: unknown manufacturer 'intel'; choose from all, amd, ascend, cambricon, hygon, "
            "iluvatar, metax, mthreads, nvidia, thead (prefix ! to exclude)",
        ),
        (["!intel"], "manufacturers: unknown manufacturer '!intel'; choose from all, "),
        (["!all"], "manufacturers: !all leaves no manufacturer to detect"),
    ],
)
def test_selected_manufacturers_refuses_naming_the_option_and_the_choices(
    given: list[str], words: str, source_repo: Path
) -> None:
    module = FakeModule(manufacturers=given)
    with pytest.raises(TaskFailedError):
        gpustack.selected_manufacturers(module)
    assert module.failure is not None
    assert module.failure["msg"].startswith(words)


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_require_path_refuses_a_blank_path_naming_the_option(value: str, source_repo: Path) -> None:
    module = FakeModule(src=value)
    with pytest.raises(TaskFailedError):
        gpustack.require_path(module, "src", "name the tree")
    assert module.failure == {"msg": "src is empty: name the tree"}


def test_require_path_refuses_a_nul_byte_and_leaves_unset_alone(source_repo: Path) -> None:
    module = FakeModule(host_root="/srv\0x")
    with pytest.raises(TaskFailedError):
        gpustack.require_path(module, "host_root")
    assert module.failure is not None
    assert module.failure["msg"] == "host_root '/srv\\x00x' holds a NUL byte, so it names no path"
    unset = FakeModule(host_root=None)
    gpustack.require_path(unset, "host_root")
    assert unset.failure is None


@pytest.mark.parametrize(("option", "value"), [("host_root", " "), ("detect_root", ""), ("detect_root", "  ")])
def test_make_request_refuses_a_blank_root_naming_the_option(option: str, value: str, source_repo: Path) -> None:
    module = FakeModule(**{"host_root": "/", option: value})
    with pytest.raises(TaskFailedError):
        gpustack.make_request(module, root_option="detect_root")
    assert module.failure is not None
    assert module.failure["msg"].startswith(f"{option} is empty: ")


def test_make_request_selects_the_modules_manufacturers_option(fixture_host: Callable[[str], Path]) -> None:
    module = FakeModule(host_root=str(fixture_host("cpu-only-vm")), manufacturers=["!thead", "!amd"])
    req = gpustack.make_request(module)
    assert req.manufacturers == [m for m in gpustack.MANUFACTURERS if m not in ("thead", "amd")]


def test_the_spec_names_what_the_package_recognises(source_repo: Path) -> None:
    from gpustack_operator.manufacturers import parse_manufacturers

    assert parse_manufacturers(None) == gpustack.MANUFACTURERS


def test_the_package_imports_from_the_source_checkout(source_repo: Path) -> None:
    assert gpustack.HAS_GPUSTACK is True
    assert gpustack.GPUSTACK_IMPORT_ERROR is None
    assert Path(gpustack.gpustack_api.__file__).is_relative_to(source_repo / "operator" / "src")


def test_require_gpustack_passes_when_the_package_is_there(source_repo: Path) -> None:
    module = FakeModule()
    gpustack.require_gpustack(module)
    assert module.failure is None


def test_a_missing_package_fails_with_the_install_hint_and_the_import_traceback(without_gpustack: ModuleType) -> None:
    assert without_gpustack.HAS_GPUSTACK is False
    module = FakeModule()
    with pytest.raises(TaskFailedError):
        without_gpustack.require_gpustack(module)
    assert module.failure is not None
    msg = module.failure["msg"]
    assert "Failed to import the required Python library (gpustack-operator)" in msg
    assert "gpustack.accelerators.install role" in msg and "ansible_python_interpreter" in msg
    assert "pip install gpustack-operator" not in msg  # never a bare name on an index
    assert "gpustack_operator" in module.failure["exception"]
    assert "ModuleNotFoundError" in module.failure["exception"] or "ImportError" in module.failure["exception"]


def test_make_request_takes_host_root_and_manufacturers_from_the_params(
    fixture_host: Callable[[str], Path],
) -> None:
    root = str(fixture_host("cpu-only-vm"))
    req = gpustack.make_request(FakeModule(host_root=root, manufacturers=["nvidia", "amd"]))
    assert req.host_root == root
    assert req.manufacturers == ["amd", "nvidia"]
    assert sorted(req.resolved) == ["amd", "nvidia"]


def test_make_request_prefers_an_explicit_manufacturer_list(fixture_host: Callable[[str], Path]) -> None:
    module = FakeModule(host_root=str(fixture_host("cpu-only-vm")), manufacturers=["amd"])
    assert gpustack.make_request(module, ["ascend"]).manufacturers == ["ascend"]


def test_no_manufacturers_means_all_nine(fixture_host: Callable[[str], Path]) -> None:
    module = FakeModule(host_root=str(fixture_host("cpu-only-vm")), manufacturers=None)
    assert gpustack.make_request(module).manufacturers == gpustack.MANUFACTURERS


def test_an_unknown_manufacturer_fails_the_task_naming_it(fixture_host: Callable[[str], Path]) -> None:
    module = FakeModule(host_root=str(fixture_host("cpu-only-vm")))
    with pytest.raises(TaskFailedError):
        gpustack.make_request(module, ["intel"])
    assert module.failure is not None
    assert "intel" in module.failure["msg"]
    assert "nvidia" in module.failure["msg"]  # the known names are listed as the remedy


def test_a_bad_deploy_variable_fails_the_task_naming_it(
    fixture_host: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTACK_PCI_CLASS_PREFIXES", "zz")
    module = FakeModule(host_root=str(fixture_host("cpu-only-vm")))
    with pytest.raises(TaskFailedError):
        gpustack.make_request(module)
    assert module.failure is not None
    assert module.failure["msg"].startswith("GPUSTACK_PCI_CLASS_PREFIXES: 'zz' is not a PCI class prefix")


def test_a_missing_package_names_the_interpreter_and_every_venv_looked_at(
    without_gpustack: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No record of the install role and no default venv: the task says which Python it ran under,
    where it looked and the remedy (a later run re-runs under a recorded venv instead)."""
    import sys

    monkeypatch.setattr(without_gpustack, "RECORD_DIR", str(tmp_path / "records"))
    monkeypatch.setattr(without_gpustack, "DEFAULT_VENV", str(tmp_path / "venv"))
    module = FakeModule(host_root=None)
    with pytest.raises(TaskFailedError):
        without_gpustack.require_gpustack(module)
    assert module.failure is not None
    msg = module.failure["msg"]
    assert f"'s Python {sys.executable} (" in msg
    assert f"no record in {tmp_path}/records (the install role writes one for each venv it makes)" in msg
    assert f"{tmp_path}/venv/bin/python (the install role's default venv): absent" in msg
    assert "run the gpustack.accelerators.install role for this host" in msg
