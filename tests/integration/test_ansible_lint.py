"""``ansible-lint`` with the production profile over the roles and playbooks."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import BIN, REPO

pytestmark = pytest.mark.ansible


def test_ansible_lint_production_profile(ansible_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--profile", "production", "--nocolor", "roles", "playbooks"],
        cwd=REPO,
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Profile 'production' was required, and it passed" in out
