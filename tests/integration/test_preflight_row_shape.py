"""Every fixture node's every preflight row has the spec's shape (supplement §2.8, §3.8): ``ok`` and
``not-declared`` rows carry ``detail`` and no ``reason``, ``unavailable`` rows ``reason`` and no
``detail``; ``sidecar-visibility`` answers for the ``visibility`` mode (partition-backed included), the
sliced rows for ``sliced``. Run as the CLI, on a copy of each node with what it carries beside its sysfs
(tests/stubs/node_extras.py), with and without --dry-run. The shape is checked by the test's own
reading (tests/unit/test_preflight_rows.py), not the model's: a row the model refused would show up as
a contained ``preflight-panicked`` row, which is checked for too."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import HOSTS, REPO, fresh_node
from tests.stubs import node_extras
from tests.unit.test_preflight_rows import shape_problem

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the host root is entered with chroot")

CLI = REPO / ".venv/bin/gpustack-operator"
NODES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir() and (p / "sys").is_dir())


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("fixture", NODES)
def test_every_row_of_every_fixture_has_the_spec_shape(fixture: str, dry_run: bool, tmp_path: Path) -> None:
    root = tmp_path / fixture
    shutil.copytree(HOSTS / fixture, root, symlinks=True, ignore=fresh_node)
    node_extras.install(tmp_path)
    proc = subprocess.run(
        [str(CLI), "dm", "preflight", "--detect-root", str(root), "--host-root", str(root)]
        + (["--dry-run"] if dry_run else []),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    rows = [(g["manufacturer"], r) for g in doc["accelerators"] for r in g.get("checks") or []]
    wrong = [(m, r["capability"], problem, r) for m, r in rows if (problem := shape_problem(r)) is not None]
    assert wrong == []
    assert not [r for _, r in rows if r["capability"] == "preflight-panicked"], proc.stderr
    assert not [g for g in doc["accelerators"] if "crashed" in (g["detection"].get("reason") or "")]
