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


def test_the_option_spec_offers_the_nine_manufacturers() -> None:
    assert sorted(gpustack.MANUFACTURERS) == gpustack.MANUFACTURERS
    assert len(set(gpustack.MANUFACTURERS)) == 9
    assert gpustack.COMMON_ARGS["manufacturers"] == dict(type="list", elements="str", choices=gpustack.MANUFACTURERS)
    assert gpustack.COMMON_ARGS["host_root"] == dict(type="path")


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
    assert "pip install gpustack-operator" in msg and "ansible_python_interpreter" in msg
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
