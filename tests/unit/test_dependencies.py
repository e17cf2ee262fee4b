"""The device plugin is part of the package, so its dependencies are the package's (issue 16, "Small
things a user trips on"): ``make preflight`` installs ``.[ansible]``, and ``dm serve`` must start after
it. Every list of the package's dependencies says the same."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO, run_cli

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SERVE_NEEDS = {"grpcio", "protobuf", "kubernetes", "cryptography"}  # cryptography: the health endpoint's pair


def name_of(requirement: str) -> str:
    """The distribution name of a PEP 508 requirement, normalised (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def test_serve_dependencies_are_base_dependencies() -> None:
    base = {name_of(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base >= SERVE_NEEDS


def test_the_kube_extra_still_installs_and_ansible_needs_nothing_more() -> None:
    """``.[kube]`` (the earlier spelling) stays a valid extra adding nothing the base set lacks, and
    ``.[ansible]`` -- what ``make preflight`` installs -- gets serve's dependencies from the base set."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    base = {name_of(r) for r in PYPROJECT["project"]["dependencies"]}
    assert "kube" in extras
    assert {name_of(r) for r in extras["kube"]} <= base
    assert "gpustack-operator" not in {name_of(r) for r in extras["ansible"]}  # no extra needed on top


def test_requirements_txt_is_the_base_set() -> None:
    """requirements.txt (the execution environment's and the wheelhouse recipe's list) is exactly
    pyproject's dependencies, in order (test_collection_install checks the same of the tarball)."""
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    requirements = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    assert requirements == PYPROJECT["project"]["dependencies"]


def test_serve_help_works() -> None:
    proc = run_cli("dm", "serve", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "--kube-socket" in proc.stdout
