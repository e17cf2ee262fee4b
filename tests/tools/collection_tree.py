"""Lay the collection out as ``ansible_collections/gpustack/accelerators/`` for ansible-test.

ansible-test must run inside that path. The repository root *is* the collection, but also holds the
package, fixtures and the project's own tests, so only collection content is copied (what galaxy.yml's
build_ignore leaves in), plus the sanity ignore file named for the running ansible-core version.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import ansible.release

REPO = Path(__file__).resolve().parents[2]
CONTENT = ("galaxy.yml", "meta", "plugins", "roles", "playbooks", "README.md")
GET_PIP_STANDIN = Path(__file__).with_name("get_pip_standin.py")


def core_version() -> str:
    return ".".join(ansible.release.__version__.split(".")[:2])


def build(base: Path) -> Path:
    """Copy the collection under ``base/ansible_collections/gpustack/accelerators`` (fresh each time,
    keeping ``tests/output`` so ansible-test's venvs are reused between runs)."""
    tree = base / "ansible_collections" / "gpustack" / "accelerators"
    tree.mkdir(parents=True, exist_ok=True)
    for entry in tree.iterdir():
        if entry.name != "tests":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for name in CONTENT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, tree / name)
    sanity = tree / "tests" / "sanity"
    sanity.mkdir(parents=True, exist_ok=True)
    for old in sanity.glob("ignore-*.txt"):
        old.unlink()
    # ansible-test accepts no comment lines: keep only the entries
    entries = [
        line
        for line in (REPO / "tests" / "sanity" / "ignore.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    (sanity / f"ignore-{core_version()}.txt").write_text("\n".join(entries) + "\n")
    units = REPO / "tests" / "ansible_units"
    if units.is_dir():
        shutil.rmtree(tree / "tests" / "unit", ignore_errors=True)
        shutil.copytree(units, tree / "tests" / "unit", ignore=shutil.ignore_patterns("__pycache__"))
        # ansible-test passes no environment of ours to pytest: the unit tests find the package source
        # and the fixture nodes through this file (see tests/ansible_units/conftest.py)
        (tree / "tests" / "unit" / "source_repo.txt").write_text(f"{REPO}\n", encoding="utf-8")
    return tree


def install_get_pip_standin() -> None:
    """ansible-test downloads a get-pip script that is unreachable here; give it the stand-in under
    every name it may ask for (the pip version is ansible-test's own pin)."""
    import re

    import ansible_test

    source = Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    versions = set(re.findall(r"pip='([0-9.]+)'", source.read_text()))
    cache = Path.home() / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for version in versions:
        shutil.copy2(GET_PIP_STANDIN, cache / f"get_pip_{version.replace('.', '_')}.py")
