"""``ansible-test sanity`` and ``units`` from the INSTALLED collection: the Galaxy tarball built from
this checkout (tests/tools/collection_tree.py, what ``make collection`` runs), installed with
``ansible-galaxy collection install -p``, and ansible-test run in
``<dir>/ansible_collections/gpustack/accelerators`` -- the standard layout the tarball itself carries
(``tests/sanity/ignore-<X.Y>.txt``, ``tests/unit/plugins/...``), exactly what a user or a CI of theirs
would run. Each runs twice: with this venv's ansible-core (the newest) and with the lowest one
``meta/runtime.yml`` claims (a venv of its own in the machine's test cache), the bounds of the support matrix."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.tools.collection_tree import (
    built_once,
    claimed_minimum,
    core_venv,
    core_version,
    install,
    install_get_pip_standin,
    point_units_at_source,
)
from tests.tools.machine_cache import machine_cache

pytestmark = pytest.mark.ansible

# Outside the repository on purpose: inside it, ansible-test would list files through the enclosing
# git checkout (where this copy is ignored) and skip every target. Kept between runs so ansible-test's
# delegation venv (tests/output/.tmp) is reused.
WORK = Path(tempfile.gettempdir()) / "gpustack-accelerators-ansible-test"
LOWEST = "{}.{}".format(*claimed_minimum())


@pytest.fixture(params=["newest", "lowest"])
def core(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(X.Y, the bin directory of its ansible-test)."""
    if request.param == "newest" or core_version() == LOWEST:
        return core_version(), BIN
    return LOWEST, core_venv(LOWEST)


def installed(version: str) -> Path:
    """The tarball installed under WORK/<version> (replacing the last one), keeping tests/output."""
    work = WORK / version
    tree = work / "ansible_collections" / "gpustack" / "accelerators"
    kept = work / "output-kept"
    if (tree / "tests" / "output").is_dir():
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(tree / "tests" / "output", kept)
    tree = install(built_once(), work)
    if kept.is_dir():
        shutil.move(kept, tree / "tests" / "output")
    return tree


def ansible_test(
    core: tuple[str, Path], *args: str, env: dict[str, str]
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    version, bin_dir = core
    # ansible-test keeps its get-pip cache and its requirement venvs under ~/.ansible/test: a home of
    # its own in the machine's test cache (never the real one; kept between runs and clones, so the
    # requirement venvs are built once per machine)
    home = machine_cache("ansible-test-home")
    install_get_pip_standin(bin_dir, home)
    tree = installed(version)
    if args[0] == "units":
        point_units_at_source(tree)
    # nothing of this checkout's Ansible configuration: the installed tree is all ansible-test sees
    env = {k: v for k, v in env.items() if k != "ANSIBLE_CONFIG"}
    env["HOME"] = str(home)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    proc = subprocess.run(
        [str(bin_dir / "ansible-test"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=1800
    )
    banner = subprocess.run([str(bin_dir / "ansible"), "--version"], capture_output=True, text=True, check=True)
    assert f"[core {version}." in banner.stdout, banner.stdout
    return tree, proc


def test_sanity_is_clean(ansible_env: dict[str, str], core: tuple[str, Path]) -> None:
    tree, proc = ansible_test(core, "sanity", "--venv", "--python", "3.12", "--color", "no", env=ansible_env)
    output = proc.stdout + proc.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 0, "\n".join(errors) or output[-4000:]
    ran = {line.split('"')[1] for line in output.splitlines() if line.startswith("Running sanity test")}
    assert {
        "validate-modules",
        "pylint",
        "import",
        "ansible-doc",
        "yamllint",
        "runtime-metadata",
        "changelog",
        "ignores",
    } <= ran, output[-4000:]
    assert "All targets skipped" not in output
    # the ignore file it read is the one the tarball ships for this ansible-core version
    assert (tree / "tests" / "sanity" / f"ignore-{core[0]}.txt").is_file()
    assert (tree / "MANIFEST.json").is_file(), "not an installed collection"


# pytest's closing line per test context, e.g. "===== 2 failed, 51 passed, 1 skipped in 36.83s ====="
SUMMARY = re.compile(r"^=+ (?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s")


def test_units_are_clean(ansible_env: dict[str, str], core: tuple[str, Path]) -> None:
    """The collection's own unit tests (tests/unit/ of the tarball, from tests/ansible_units/), run by
    ansible-test in its venv: modules and module_utils isolated from the controller code, action and
    plugin_utils as controller tests. They run the package and read the fixture nodes of this checkout
    (neither ships), found through tests/unit/source_repo.txt written into the installed tree."""
    _, proc = ansible_test(core, "units", "--venv", "--python", "3.12", "--color", "no", env=ansible_env)
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
