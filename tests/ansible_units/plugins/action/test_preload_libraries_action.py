"""preload_libraries with remote_src=false: the controller-side source is found like a files/
needle, a directory is packed into one tar (symlinks kept), shipped to the task's remote temporary
directory, and the module stages from there."""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible_collections.gpustack.accelerators.plugins.action.preload_libraries import ActionModule
from ansible_collections.gpustack.accelerators.tests.unit.plugins.action.actions import (
    REMOTE_TMP,
    make_action,
    run_action,
)

HOST_VARS = {"gpustack_host_root": "/srv/nodes/gpu-01", "gpustack_manufacturers": ["amd"]}


@pytest.fixture
def playbook_dir(tmp_path: Path) -> Path:
    """A play's directory with ``files/lib``: an amd subtree holding a file and a relative symlink."""
    lib = tmp_path / "play" / "files" / "lib" / "amd"
    lib.mkdir(parents=True)
    (lib / "libvrocm.so.1").write_text("shim\n", encoding="utf-8")
    (lib / "libvrocm.so").symlink_to("libvrocm.so.1")
    return tmp_path / "play"


def shipped_action(args: dict[str, Any], search_dir: Path, received: Path) -> tuple[Any, mock.MagicMock]:
    """The action with a connection whose transfers land in ``received`` (named by remote path)."""
    action = make_action(ActionModule, args, HOST_VARS, search_dir)
    action._connection._shell.join_path.side_effect = posixpath.join

    def transfer(local: str, remote: str) -> str:
        shutil.copy2(local, received / remote.replace("/", "_"))
        return remote

    transfer_mock = mock.MagicMock(side_effect=transfer)
    action._transfer_file = transfer_mock
    action._fixup_perms2 = mock.MagicMock()
    action._remove_tmp_path = mock.MagicMock()
    return action, transfer_mock


def test_a_controller_directory_is_packed_shipped_and_staged_from_the_remote_copy(
    playbook_dir: Path, tmp_path: Path
) -> None:
    received = tmp_path / "received"
    received.mkdir()
    action, transfer = shipped_action({"src": "lib", "remote_src": False}, playbook_dir, received)
    result, executed = run_action(action, HOST_VARS)

    remote = REMOTE_TMP + "/preload-source"
    assert executed == [{"src": remote, "remote_src": True, "host_root": "/srv/nodes/gpu-01", "manufacturers": ["amd"]}]
    assert result["from_module"] is True
    (call,) = transfer.call_args_list
    assert call.args[1] == remote
    assert not os.path.exists(call.args[0])  # the controller-side archive is cleaned up
    action._fixup_perms2.assert_called_once_with((REMOTE_TMP, remote))
    action._remove_tmp_path.assert_called_once_with(REMOTE_TMP)

    with tarfile.open(received / remote.replace("/", "_")) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["./amd/libvrocm.so"].issym()
        assert members["./amd/libvrocm.so"].linkname == "libvrocm.so.1"
        extracted = tar.extractfile("./amd/libvrocm.so.1")
        assert extracted is not None and extracted.read() == b"shim\n"


def test_a_controller_tarball_is_shipped_as_it_is(playbook_dir: Path, tmp_path: Path) -> None:
    archive = playbook_dir / "files" / "lib.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(playbook_dir / "files" / "lib", arcname=".")
    received = tmp_path / "received"
    received.mkdir()
    action, transfer = shipped_action({"src": "lib.tar.gz", "remote_src": False}, playbook_dir, received)
    executed = run_action(action, HOST_VARS)[1]
    (call,) = transfer.call_args_list
    assert call.args[0] == str(archive)
    assert executed[0]["src"] == REMOTE_TMP + "/preload-source"
    assert (received / (REMOTE_TMP + "/preload-source").replace("/", "_")).read_bytes() == archive.read_bytes()


def test_remote_src_runs_the_module_on_the_target_path_without_a_transfer(tmp_path: Path) -> None:
    action, transfer = shipped_action({"src": "/opt/gpustack/lib"}, tmp_path, tmp_path)
    executed = run_action(action, HOST_VARS)[1]
    assert executed == [{"src": "/opt/gpustack/lib", "host_root": "/srv/nodes/gpu-01", "manufacturers": ["amd"]}]
    transfer.assert_not_called()


def test_a_missing_controller_source_fails_naming_it(playbook_dir: Path, tmp_path: Path) -> None:
    action, transfer = shipped_action({"src": "no-such-lib", "remote_src": False}, playbook_dir, tmp_path)
    result, executed = run_action(action, HOST_VARS)
    assert result["failed"] is True
    assert result["msg"].startswith("src no-such-lib not found on the controller: ")
    assert executed == []
    transfer.assert_not_called()


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_controller_source_is_refused_before_any_lookup(blank: str, playbook_dir: Path, tmp_path: Path) -> None:
    """An empty needle would find the files/ directory itself and ship the whole of it."""
    action, transfer = shipped_action({"src": blank, "remote_src": False}, playbook_dir, tmp_path)
    with mock.patch.object(type(action), "_find_needle") as find:
        result, executed = run_action(action, HOST_VARS)
    assert result["failed"] is True
    assert result["msg"].startswith("src is empty: name the preload-library tree")
    find.assert_not_called()
    assert executed == []
    transfer.assert_not_called()


def test_a_source_that_is_neither_file_nor_directory_fails(playbook_dir: Path, tmp_path: Path) -> None:
    fifo = playbook_dir / "files" / "pipe"
    os.mkfifo(fifo)
    action, transfer = shipped_action({"src": str(fifo), "remote_src": False}, playbook_dir, tmp_path)
    result, executed = run_action(action, HOST_VARS)
    assert result["failed"] is True
    assert result["msg"] == f"src {fifo} is neither a directory nor a file"
    assert executed == []
    transfer.assert_not_called()


def test_a_non_boolean_remote_src_fails_naming_the_option(tmp_path: Path) -> None:
    action = shipped_action({"src": "lib", "remote_src": "sometimes"}, tmp_path, tmp_path)[0]
    result, executed = run_action(action, HOST_VARS)
    assert result["failed"] is True
    assert result["msg"].startswith("remote_src: ")
    assert "sometimes" in result["msg"]
    assert executed == []
