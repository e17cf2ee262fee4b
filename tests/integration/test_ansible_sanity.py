"""``ansible-test sanity`` (and ``units``) over the collection, laid out as ansible-test requires."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.tools.collection_tree import build, install_get_pip_standin

pytestmark = pytest.mark.ansible

# Outside the repository on purpose: inside it, ansible-test would list files through the enclosing
# git checkout (where this copy is ignored) and skip every target.
WORK = Path(tempfile.gettempdir()) / "gpustack-accelerators-ansible-test"


def ansible_test(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    install_get_pip_standin()
    tree = build(WORK)
    return subprocess.run(
        [str(BIN / "ansible-test"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=1800
    )


def test_sanity_is_clean(ansible_env: dict[str, str]) -> None:
    proc = ansible_test("sanity", "--venv", "--python", "3.12", env=ansible_env)
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 0, "\n".join(errors) or output[-4000:]
    ran = {line.split('"')[1] for line in output.splitlines() if line.startswith("Running sanity test")}
    assert {"validate-modules", "pylint", "import", "ansible-doc", "yamllint"} <= ran, output[-4000:]
    assert "All targets skipped" not in output
