"""Shared by every unit test of the collection.

The repository keeps these tests in ``tests/ansible_units/``; tests/tools/collection_tree.py copies them
to ``tests/unit/`` of the ``ansible_collections/gpustack/accelerators`` tree ansible-test runs in
(tests/integration/test_ansible_sanity.py::test_units_are_clean). Only ansible-test collects them.

Most tests run the real ``gpustack_operator`` package on the repository's fixture nodes. ansible-test
passes no environment variable of ours through to pytest, so collection_tree.py writes the source
repository's path to ``source_repo.txt`` beside this file; its ``operator/src`` goes on ``sys.path``
(the package's own dependencies come from ``requirements.txt``).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

HERE = Path(__file__).resolve().parent
POINTER = HERE / "source_repo.txt"

if HERE.name == "ansible_units":
    # The repository's own pytest run: collection content, not a test package of the repository.
    collect_ignore_glob = ["*"]


def _source_repo() -> Path | None:
    if not POINTER.is_file():
        return None
    repo = Path(POINTER.read_text(encoding="utf-8").strip())
    return repo if (repo / "operator" / "src" / "gpustack_operator").is_dir() else None


SOURCE_REPO = _source_repo()
if SOURCE_REPO is not None and str(SOURCE_REPO / "operator" / "src") not in sys.path:
    sys.path.insert(0, str(SOURCE_REPO / "operator" / "src"))


@pytest.fixture
def source_repo() -> Path:
    """The repository the tree was built from (its package is importable); skips without one."""
    if SOURCE_REPO is None:
        pytest.skip(
            "no source_repo.txt naming the gpustack-operator checkout: build the tree with "
            "tests/tools/collection_tree.py (python -m tests.tools.collection_tree) before ansible-test units"
        )
    return SOURCE_REPO


@pytest.fixture
def fixture_host(source_repo: Path) -> Callable[[str], Path]:
    """A fixture node of the repository (read only), by name."""

    def find(name: str) -> Path:
        path = source_repo / "tests" / "fixtures" / "hosts" / name
        assert path.is_dir(), f"no fixture host {name} under {path.parent}"
        return path

    return find


@pytest.fixture
def node_copy(fixture_host: Callable[[str], Path], tmp_path: Path) -> Callable[[str], Path]:
    """A private, writable copy of a fixture node (symlinks kept), for tests that change it."""

    def copy(name: str) -> Path:
        target = tmp_path / "nodes" / name
        # leave out what a preflight run on the shared fixture staged onto it: a copy is the node as imaged
        shutil.copytree(
            fixture_host(name),
            target,
            symlinks=True,
            ignore=lambda d, names: {
                n
                for n in names
                if (n == "gpustack" and d.endswith("/var/lib")) or stat.S_ISCHR(os.lstat(os.path.join(d, n)).st_mode)
            },
        )
        return target

    return copy


@pytest.fixture
def stand_in(source_repo: Path) -> Callable[[Path, str], Path]:
    """Assert a node carries its compiled vendor-library stand-in (``make stubs`` builds them)."""

    def check(node: Path, library: str) -> Path:
        path = node / library
        if not path.is_file():
            pytest.fail(
                f"{path} is missing: the vendor-library stand-ins are not built; run `make stubs` "
                f"(python -m tests.stubs.build) in {source_repo}"
            )
        return path

    return check


@pytest.fixture
def without_gpustack() -> Iterator[ModuleType]:
    """The module_utils as imported on a target without the package (the import really fails);
    reloaded with the package again afterwards."""
    import importlib

    from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack

    blocked = {name: None for name in sys.modules if name.split(".")[0] == "gpustack_operator"}
    blocked["gpustack_operator"] = None
    with mock.patch.dict(sys.modules, blocked):
        importlib.reload(gpustack)
        yield gpustack
    importlib.reload(gpustack)
