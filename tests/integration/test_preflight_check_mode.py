"""Ansible's own convention for the preflight (issue 17): ``ansible-playbook --check`` runs every host's
preflight as ``--dry-run`` -- nothing staged, no lock, no driver mode asked on, no probe -- and says
so in its rows; and what a run without it writes is said where a user looks first (the README's
preflight entry, the role's README and argument spec), in the words of docs/preflight.md's "Side
effects". The default (reproduce production) stays: the same play without --check writes, which is
also what proves the snapshot below would see a write."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO, copy_host
from tests.tools import kubelet_nodes as kn

pytestmark = pytest.mark.ansible

# (host, fixture): an H100 kubeadm worker whose probes a real run would start, and an Atlas node whose
# container-share a real run would ask on and put back
NODES = (("gpu-01", "h100-sxm-8x"), ("npu-01", "ascend-910b-8x"))
WRITES = (
    "/var/lib/gpustack/operator/lib/<manufacturer>",
    "/var/lib/gpustack/operator/preflight/lock",
    "/var/lib/gpustack/operator/preflight/render-*",
)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root``: its type and mode, and a file's size, content hash and mtime (a file
    rewritten with the same bytes -- a mode toggled and put back -- still shows), a link's target."""
    seen: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(dirpath) / name
            info = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                seen[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                seen[rel] = ("file", stat.S_IMODE(info.st_mode), info.st_size, digest, info.st_mtime_ns)
            else:
                seen[rel] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode))
    return seen


def fleet(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    roots = {host: kn.kubeadm_node(copy_host(fixture, tmp_path / host)) for host, fixture in NODES}
    inv = tmp_path / "inv.yml"
    hosts = {
        host: {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(BIN / "python"),
            "gpustack_host_root": str(root),
        }
        for host, root in roots.items()
    }
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inv, roots


def run_preflight(env: dict[str, str], inv: Path, reports: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inv),
            str(REPO / "playbooks" / "preflight.yml"),
            "-e",
            f"preflight_report_dir={reports} preflight_fail_on=never",
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def documents(out: str) -> dict[str, Any]:
    """Every host's whole preflight document, from the fleet report the run printed the path of."""
    match = re.search(r"report: +(\S+\.yaml)", out)
    assert match is not None, out[-3000:]
    report = Path(match[1])
    doc = yaml.safe_load(report.read_text(encoding="utf-8"))
    side = yaml.safe_load((report.parent / doc["documents"]).read_text(encoding="utf-8"))["hosts"]
    found: dict[str, Any] = {}
    for host, entry in doc["hosts"].items():
        kept = entry.get("document")
        found[host] = kept if isinstance(kept, dict) else side[host]
    return found


def test_check_mode_leaves_every_node_byte_identical_and_says_dry_run(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    inv, roots = fleet(tmp_path)
    before = {host: snapshot(root) for host, root in roots.items()}
    proc = run_preflight(ansible_env, inv, tmp_path / "reports", "--check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for host, root in roots.items():
        assert snapshot(root) == before[host], f"{host}: check mode changed the node"
        assert not (root / "var/lib/gpustack").exists(), host
    docs = documents(out)
    for host, _ in NODES:
        rows = [row for group in docs[host]["accelerators"] for row in group.get("checks", [])]
        emitted = [row for row in rows if row.get("command")]
        assert emitted, f"{host}: no container step in check mode"
        for row in emitted:
            assert "dry-run: nothing was started or written" in row["detail"], row
    (ascend,) = [g for g in docs["npu-01"]["accelerators"] if g["manufacturer"] == "ascend"]
    share = [r for r in ascend["checks"] if r["capability"] == "container-share"]
    assert share and all("--dry-run withholds the ask" in r["detail"] for r in share), share


def test_without_check_mode_the_same_play_writes_what_the_docs_list(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    """The spec's default reproduces production: the library tree and the lock are there afterwards, the
    rendered files are gone, and the snapshot sees it."""
    inv, roots = fleet(tmp_path)
    before = {host: snapshot(root) for host, root in roots.items()}
    proc = run_preflight(ansible_env, inv, tmp_path / "reports")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for host, root in roots.items():
        assert snapshot(root) != before[host], host
        operator = root / "var/lib/gpustack/operator"
        assert (operator / "preflight" / "lock").is_file(), host
        assert [p.name for p in (operator / "lib").iterdir()], host
        assert not list((operator / "preflight").glob("render-*")), host


# -- said where a user looks first ---------------------------------------------------------------------


def side_effects_table() -> list[str]:
    """The "Where" column of docs/preflight.md's side-effects table: what the docs below must name."""
    text = (REPO / "docs" / "preflight.md").read_text(encoding="utf-8")
    section = text.split("### Side effects: what a run writes, and what `--dry-run` withholds", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:5]  # after the header
    return [row.split("|")[2].strip() for row in rows]


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_side_effects_table_is_the_four_writes() -> None:
    table = side_effects_table()
    assert [w.strip("`") for w in table[:3]] == list(WRITES), table
    assert table[3] == "the driver's state", table


def readme_preflight_entry() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("**`preflight`** — ")
    return text[start : text.index("\n\n", start)]


@pytest.mark.parametrize(
    "where",
    ["README preflight entry", "role README opening", "role argument spec", "role defaults"],
)
def test_what_preflight_writes_is_said_first(where: str) -> None:
    if where == "README preflight entry":
        said = readme_preflight_entry()
    elif where == "role README opening":
        text = (REPO / "roles" / "preflight" / "README.md").read_text(encoding="utf-8")
        said = text.split("\n| Variable |", 1)[0]
    elif where == "role argument spec":
        spec = yaml.safe_load((REPO / "roles" / "preflight" / "meta" / "argument_specs.yml").read_text())
        main = spec["argument_specs"]["main"]
        said = " ".join(main["description"]) + " " + " ".join(main["options"]["preflight_dry_run"]["description"])
    else:
        said = (REPO / "roles" / "preflight" / "defaults" / "main.yml").read_text(encoding="utf-8")
    flat = words(said)
    if where != "role defaults":
        for write in WRITES:
            assert write in flat, (where, write)
        assert "--check" in flat and "preflight_dry_run" in flat, where
    else:
        assert "/var/lib/gpustack/operator" in flat and "--check" in flat, flat
    assert "driver mode asked on" in flat, where
    assert "lock" in flat and "probe" in flat, where
