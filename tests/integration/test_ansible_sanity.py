"""``ansible-test sanity`` (and ``units``) over the collection, laid out as ansible-test requires."""

from __future__ import annotations

import re
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


# pytest's closing line per test context, e.g. "===== 2 failed, 51 passed, 1 skipped in 36.83s ====="
SUMMARY = re.compile(r"^=+ (?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s")


def test_units_are_clean(ansible_env: dict[str, str]) -> None:
    """The collection's own unit tests (tests/ansible_units/ -> tests/unit/), run by ansible-test in its
    venv: modules and module_utils isolated from the controller code, action and plugin_utils as
    controller tests. The stand-in vendor libraries they load are built by the session fixture."""
    proc = ansible_test("units", "--venv", "--python", "3.12", "--color", "no", env=ansible_env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    contexts = set(re.findall(r"^Unit test (\w+) with Python 3\.12$", output, re.MULTILINE))
    assert contexts == {"modules", "module_utils", "controller"}, output[-4000:]
    totals: dict[str, int] = {}
    for line in output.splitlines():
        match = SUMMARY.match(line)
        if match:
            for count, outcome in (item.split() for item in match["counts"].split(", ")):
                totals[outcome] = totals.get(outcome, 0) + int(count)
    assert totals.get("passed", 0) > 0, output[-4000:]
    # a skip means a test could not reach the package or a fixture node: that is not "clean" either
    assert set(totals) <= {"passed", "warning", "warnings"}, (totals, output[-4000:])
