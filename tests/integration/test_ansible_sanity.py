"""``ansible-test sanity`` (and ``units``) over the collection, laid out as ansible-test requires."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import BIN, REPO
from tests.tools.collection_tree import build, install_get_pip_standin

pytestmark = pytest.mark.ansible

WORK = REPO / "tests" / ".build" / "collection"


def ansible_test(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    install_get_pip_standin()
    tree = build(WORK)
    return subprocess.run(
        [str(BIN / "ansible-test"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=1800
    )


def test_sanity_is_clean(ansible_env: dict[str, str]) -> None:
    proc = ansible_test("sanity", "--venv", "--python", "3.12", env=ansible_env)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 0, "\n".join(errors) or proc.stdout[-4000:] + proc.stderr[-4000:]
