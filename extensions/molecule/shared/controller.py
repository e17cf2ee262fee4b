"""Controller-side helpers for the scenarios' testinfra verifiers (extensions/molecule/*/tests/).

The verifier runs on the controller: what the containers hold is read through testinfra's ``host``,
and what the package says about the same fixture is read here, with the controller's own
``gpustack-operator`` (the venv that runs molecule), so the assertions follow the package's detection
as it is today rather than numbers copied into the tests.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]  # extensions/molecule/shared/controller.py
sys.path.insert(0, str(REPO))

# re-exported for the verifiers
from tests.conftest import make_enterable  # noqa: E402, F401
from tests.tools.molecule_artifacts import fixture_cli  # noqa: E402, F401

HOSTS = REPO / "tests" / "fixtures" / "hosts"
BUILD = REPO / "tests" / ".build" / "molecule"  # / <scenario>: what its prepare.yml built
CLI = Path(sys.executable).parent / "gpustack-operator"
VENV = "/opt/gpustack-operator/venv"
# One line per entry under a root: relative path, type (f d l ...), link target.
LISTING = "find {root} -mindepth 1 -printf '%P\\t%y\\t%l\\n'"


def run_id() -> str:
    """This run's id, as ../config.yml's ``molecule_run_id`` computes it: the first 10 hex of the
    sha256 of "<project directory>:<ephemeral directory>" (molecule gives the verifier both)."""
    key = f"{os.environ['MOLECULE_PROJECT_DIRECTORY']}:{os.environ['MOLECULE_EPHEMERAL_DIRECTORY']}"
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def container(platform: str) -> str:
    """The name of this run's container for ``platform`` (shared/create.yml starts it)."""
    return f"{platform}-{run_id()}"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, check=False, timeout=300)


@functools.cache
def _detect(root: str, manufacturers: tuple[str, ...]) -> str:
    args = ["dm", "detect", "--host-root", root, "-o", "json"]
    if manufacturers:
        args += ["--manufacturer", ",".join(manufacturers)]
    proc = cli(*args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def detect(fixture: str | Path, *manufacturers: str) -> dict[str, Any]:
    """``gpustack-operator dm detect --host-root <fixture> -o json`` on the controller (once per
    fixture and manufacturers in a session)."""
    root = fixture if isinstance(fixture, Path) else HOSTS / fixture
    doc: dict[str, Any] = json.loads(_detect(str(root), manufacturers))
    return doc


def accelerator_ids(doc: dict[str, Any], manufacturer: str) -> list[str]:
    return [a["id"] for g in doc["groups"] if g["manufacturer"] == manufacturer for a in g["accelerators"]]


def listing(text: str) -> set[tuple[str, str, str]]:
    out = set()
    for line in text.splitlines():
        fields = line.split("\t")  # the last line may have lost its trailing tab
        out.add((fields[0], fields[1], fields[2] if len(fields) > 2 else ""))
    return out


def controller_listing(root: Path) -> set[tuple[str, str, str]]:
    proc = subprocess.run(LISTING.format(root=root), shell=True, capture_output=True, text=True, check=True)
    return listing(proc.stdout)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def latest_report(directory: Path) -> tuple[dict[str, Any], str, str]:
    """The newest fleet report under ``directory``: (YAML document, HTML text, JUnit text). The YAML
    keeps the whole document only for a host that is not ok; every other host's is in the side file the
    YAML names (``documents``), and is put back here under the host's ``report`` after checking that the
    host's entry points at it."""
    reports = sorted(directory.glob("preflight-*Z.yaml"))
    assert reports, f"no fleet report under {directory}"
    latest = reports[-1]
    base = latest.with_suffix("")
    doc: dict[str, Any] = yaml.safe_load(latest.read_text(encoding="utf-8"))
    side: dict[str, Any] = yaml.safe_load((directory / doc["documents"]).read_text(encoding="utf-8"))
    assert side["report"] == latest.name, side["report"]
    for name, entry in doc["hosts"].items():
        if name in side["hosts"]:
            assert "report" not in entry and entry["document"] == "in " + doc["documents"], entry
            entry["report"] = side["hosts"][name]
    html = base.with_suffix(".html").read_text(encoding="utf-8")
    junit = base.with_suffix(".junit.xml").read_text(encoding="utf-8")
    return doc, html, junit
