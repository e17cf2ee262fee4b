"""preload_libraries on a private copy of the Radeon RX 7800 XT node (AMD needs the flat ``amd``
subtree): check mode plans without writing, a run stages, a second run changes nothing."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.gpustack.accelerators.plugins.modules import preload_libraries
from ansible_collections.gpustack.accelerators.tests.unit.plugins.modules.utils import exit_result, fail_result

LIB = "var/lib/gpustack/operator/lib"


@pytest.fixture
def amd_node(node_copy: Callable[[str], Path]) -> Path:
    return node_copy("radeon-7800xt")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """An operator-image style lib tree: more than this node needs."""
    src = tmp_path / "lib"
    (src / "amd").mkdir(parents=True)
    (src / "amd" / "libvrocm.so").write_bytes(b"\x7fELF amd shim v1\n")
    monitor = src / "amd" / "rocm-monitor"
    monitor.write_text("#!/bin/sh\n", encoding="utf-8")
    monitor.chmod(0o755)
    (src / "nvidia" / "cuda-12").mkdir(parents=True)
    (src / "nvidia" / "cuda-12" / "libvgpu.so").write_bytes(b"\x7fELF hami-core\n")
    return src


def test_check_mode_plans_the_amd_subtree_and_writes_nothing(amd_node: Path, source: Path) -> None:
    args = {"src": str(source), "host_root": str(amd_node)}
    result = exit_result(preload_libraries.main, args, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["destination"] == str(amd_node / LIB)
    assert result["staged"] == result["updated"] == ["amd"]
    assert sorted(result["added"]) == ["amd/libvrocm.so", "amd/rocm-monitor"]
    assert result["replaced"] == result["removed"] == result["not_staged"] == []
    (diff,) = result["diff"]
    assert diff["before"] == "" and "libvrocm.so  0644  sha256:" in diff["after"]
    assert not (amd_node / LIB).exists()


def test_a_run_stages_what_the_node_needs_and_a_second_run_changes_nothing(amd_node: Path, source: Path) -> None:
    args = {"src": str(source), "host_root": str(amd_node)}
    first = exit_result(preload_libraries.main, args)
    assert first["changed"] is True
    assert "diff" not in first
    staged = amd_node / LIB
    assert sorted(p.name for p in staged.iterdir()) == ["amd"]  # no nvidia: the node has no NVIDIA GPU
    assert (staged / "amd" / "libvrocm.so").read_bytes() == b"\x7fELF amd shim v1\n"
    assert (staged / "amd" / "rocm-monitor").stat().st_mode & 0o777 == 0o755

    second = exit_result(preload_libraries.main, args)
    assert second["changed"] is False
    assert second["staged"] == ["amd"] and second["updated"] == [] and second["added"] == []

    (source / "amd" / "libvrocm.so").write_bytes(b"\x7fELF amd shim v2\n")
    (source / "amd" / "rocm-monitor").unlink()
    third = exit_result(preload_libraries.main, args)
    assert third["replaced"] == ["amd/libvrocm.so"] and third["removed"] == ["amd/rocm-monitor"]
    assert sorted(p.name for p in (staged / "amd").iterdir()) == ["libvrocm.so"]


def test_a_tarball_source_stages_the_same(amd_node: Path, source: Path, tmp_path: Path) -> None:
    archive = tmp_path / "lib.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=".")
    result = exit_result(preload_libraries.main, {"src": str(archive), "host_root": str(amd_node)})
    assert result["staged"] == ["amd"]
    assert (amd_node / LIB / "amd" / "libvrocm.so").is_file()


def test_only_the_asked_manufacturers_are_staged(amd_node: Path, source: Path) -> None:
    args = {"src": str(source), "host_root": str(amd_node), "manufacturers": ["nvidia"]}
    result = exit_result(preload_libraries.main, args)
    assert result["changed"] is False
    assert result["staged"] == []
    assert not (amd_node / LIB).exists()


def test_manufacturers_are_gather_subset_style(amd_node: Path, source: Path) -> None:
    args = {"src": str(source), "host_root": str(amd_node), "manufacturers": ["!amd"]}
    without_amd = exit_result(preload_libraries.main, args, check_mode=True)
    assert without_amd["staged"] == [] and without_amd["changed"] is False
    but_thead = exit_result(preload_libraries.main, dict(args, manufacturers=["!thead"]), check_mode=True)
    assert but_thead["staged"] == ["amd"] and but_thead["changed"] is True
    assert not (amd_node / LIB).exists()


@pytest.mark.parametrize(("option", "blank"), [("src", ""), ("src", "  "), ("host_root", ""), ("host_root", " ")])
def test_a_blank_path_is_refused_naming_the_option(option: str, blank: str, amd_node: Path, source: Path) -> None:
    args = {"src": str(source), "host_root": str(amd_node), option: blank}
    result = fail_result(preload_libraries.main, args)
    assert result["msg"].startswith(f"{option} is empty: ")
    assert not (amd_node / LIB).exists()


def test_a_source_without_a_needed_subtree_fails_naming_it(amd_node: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-lib"
    empty.mkdir()
    result = fail_result(preload_libraries.main, {"src": str(empty), "host_root": str(amd_node)})
    assert result["msg"].startswith(f"{empty / 'amd'}: the source has no amd, which this node needs")
    assert "limit manufacturers" in result["msg"]


def test_a_missing_source_fails_naming_it(amd_node: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = fail_result(preload_libraries.main, {"src": str(missing), "host_root": str(amd_node)})
    assert result["msg"] == f"{missing}: does not exist; point src at the preload-library tree or a tarball of it"


def test_an_archive_member_escaping_the_tree_is_refused(amd_node: Path, tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar"
    payload = tmp_path / "payload"
    payload.write_text("x", encoding="utf-8")
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="../amd/libvrocm.so")
    result = fail_result(preload_libraries.main, {"src": str(archive), "host_root": str(amd_node)})
    assert "../amd/libvrocm.so" in result["msg"]
    assert not (amd_node / LIB).exists()
    assert not (amd_node / "var/lib/gpustack/operator/amd").exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"state": "absent"}, "state"),
        ({"manufacturers": ["intel"]}, "manufacturers"),
        ({"manufacturers": ["!intel"]}, "manufacturers"),
        ({"remote_src": "maybe"}, "remote_src"),
        ({"src": None}, "src"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option(
    args: dict[str, object], option: str, source_repo: Path, tmp_path: Path
) -> None:
    full = {"src": str(tmp_path), "host_root": str(tmp_path)}
    full.update(args)
    result = fail_result(preload_libraries.main, {k: v for k, v in full.items() if v is not None})
    assert option in result["msg"]


def test_without_the_package_the_task_fails_with_the_install_hint(without_gpustack: ModuleType, tmp_path: Path) -> None:
    result = fail_result(preload_libraries.main, {"src": str(tmp_path)})
    assert "Failed to import the required Python library (gpustack-operator)" in result["msg"]
