"""Every fixture node's questions 2 and 3 against the spec's tables, row by row (supplement §2.7: the
tier table, "The full table", the driver-read row meanings, the A5 rows; §1.5 depths).

Each node is a tmp copy of its fixture with what the real node has beside its sysfs
(tests/stubs/node_extras.py): its device nodes (regular files standing for them, as the responders'
own existence checks read them), the operator image's preload-library tree in the node view (staged
from there by default), the A5 runtime installer's record. The host has no container CLI, so every
probe step is emitted (the probes themselves run in tests/integration/test_preflight_engine.py); the
driver modes the established rows ask on are the vendor stand-ins' (tests/stubs), put straight back.
What the seams must guarantee is checked on the stand-ins' own state: an Ascend container-share, a
Cambricon sMLU mode and a MetaX sGPU registry are exactly as they were after the run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, fresh_node
from tests.stubs import node_extras

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the host root is entered with chroot")

FIXTURES = REPO / "tests/fixtures/hosts"
CLI = REPO / ".venv/bin/gpustack-operator"


SLICED_ROWS = {"sliced-runtime-loaded", "sliced-quota-in-force"}
MANAGEMENT_ROWS = {"sidecar-visibility", "co-tenancy"}


def node(name: str, tmp_path: Path) -> Path:
    """A copy of the fixture node with its extras (tests/stubs/node_extras.py: device nodes, the image's
    preload tree in the node view, installer records)."""
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, symlinks=True, ignore=fresh_node)
    node_extras.install(tmp_path)
    return root


def preflight(root: Path, *flags: str) -> tuple[int, list[dict[str, object]], str]:
    """The node's own preflight (the node view is the host root, as on the node itself); the library
    tree is staged from the image's tree in that view (the default --preload-source)."""
    proc = subprocess.run(
        [str(CLI), "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), *flags],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = yaml.safe_load(proc.stdout)
    return proc.returncode, [g for g in doc["accelerators"] if g["detection"]["state"] == "ok"], proc.stderr


def by_capability(group: dict[str, object]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for row in group.get("checks") or []:  # type: ignore[attr-defined]
        out.setdefault(row["capability"], []).append(row)
    return out


def states(rows: list[dict[str, str]]) -> set[tuple[str, str, str]]:
    return {(r["state"], r["depth"], r["mode"]) for r in rows}


def snapshot(root: Path, *rels: str) -> dict[str, bytes]:
    found = {}
    for rel in rels:
        for p in sorted((root / rel).rglob("*")) if (root / rel).is_dir() else [root / rel]:
            if p.is_file():  # the stand-ins rewrite their data file on a state change: compare the data
                lines = p.read_bytes().splitlines()
                found[str(p.relative_to(root))] = b"\n".join(x for x in lines if not x.startswith(b"#"))
    return found


# (fixture, manufacturer, accelerators, driver-read row and its state, sliced rows?) -- §2.7
TABLE = [
    ("h100-sxm-8x", "nvidia", 8, ("mig-partitioning", "not-declared", "partitioned"), True),
    ("mi300x-8x", "amd", 8, ("cu-mask-topology", "ok", "sliced"), True),
    ("radeon-7800xt", "amd", 1, ("cu-mask-topology", "ok", "sliced"), True),
    ("ascend-910b-8x", "ascend", 8, ("container-share", "ok", "sliced"), True),
    ("hygon-k100", "hygon", 4, None, True),
    ("mlu370-x8", "cambricon", 8, ("smlu-mode", "ok", "sliced"), False),
    ("metax-c500", "metax", 8, ("sgpu-mode", "ok", "sliced"), False),
    ("iluvatar-bi150", "iluvatar", 8, None, False),
    ("mthreads-s4000", "mthreads", 8, None, False),
]


@pytest.mark.parametrize(("fixture", "manufacturer", "count", "driver_row", "container_tier"), TABLE)
def test_each_tier_row_by_row(
    fixture: str,
    manufacturer: str,
    count: int,
    driver_row: tuple[str, str, str] | None,
    container_tier: bool,
    tmp_path: Path,
) -> None:
    root = node(fixture, tmp_path)
    stand_ins = snapshot(root, "usr", "opt", "sys")  # vendor stand-in state (its fixture files) and sysfs
    rc, groups, err = preflight(root, f"--manufacturer={manufacturer}")
    (group,) = groups
    rows = by_capability(group)
    assert rc == 0, err
    # the driver-read row (or a note saying why there is none)
    if driver_row is None:
        assert "no driver-read row" in group["note"]
    else:
        capability, state, mode = driver_row
        assert len(rows[capability]) == count and states(rows[capability]) == {(state, "declared", mode)}
    # question 3: visibility simulated by construction; co-tenancy on every sliceable accelerator
    assert len(rows["sidecar-visibility"]) == count
    assert states(rows["sidecar-visibility"]) == {("ok", "simulated", "visibility")}
    assert states(rows["co-tenancy"]) == {("ok", "simulated", "sliced")} and len(rows["co-tenancy"]) == count
    # the two sliced rows are the container probe's: only the container tiers carry them; the host has no
    # container CLI, so the probe steps are emitted, printed complete, at simulated
    if container_tier:
        for capability in SLICED_ROWS:
            assert states(rows[capability]) == {("ok", "simulated", "sliced")}, rows[capability][0]
            row = rows[capability][0]
            if manufacturer in ("hygon",):  # no default image claimed: --probe-image
                assert "--probe-image" in row["detail"]
            else:
                assert "emitted" in row["detail"] and "no container runtime can be driven" in row["detail"]
                assert row["command"].startswith(f"/usr/sbin/chroot {root} docker run --rm")
    else:
        assert not SLICED_ROWS & set(rows)
        assert "no container is started for it" in group["note"]
    # a driver mode asked on is put straight back, no slice or instance is ever created, and nothing is
    # left under the preflight directory
    assert snapshot(root, "usr", "opt", "sys") == stand_ins
    assert not (root / "var/lib/gpustack/operator/preflight").exists()
    assert not (root / "var/lib/gpustack/operator/pods").exists()


def test_a_partition_backed_accelerator_reports_the_management_rows_declared(tmp_path: Path) -> None:
    root = node("a100-mig", tmp_path)
    rc, (group,), err = preflight(root, "--manufacturer=nvidia")
    mig_on = {r["accelerator"] for r in by_capability(group)["mig-partitioning"] if r["state"] == "ok"}
    assert mig_on, "the A100 fixture has MIG-on GPUs"
    for row in group["checks"]:
        if row["accelerator"] in mig_on and row["capability"] in MANAGEMENT_ROWS:
            assert (row["state"], row["depth"], row["mode"]) == ("ok", "declared", "partitioned")
        if row["accelerator"] in mig_on:
            assert row["capability"] not in SLICED_ROWS  # a partitioned accelerator serves no other mode
    assert rc == 0, err


def test_the_a5_rows_on_every_accelerator_and_mode(tmp_path: Path) -> None:
    root = node("ascend-950pr-v2", tmp_path)
    info = root / "usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info"
    assert info.read_text() == "version=v26.0.0\n"
    rc, (group,), err = preflight(root, "--manufacturer=ascend")
    rows = by_capability(group)
    accelerators = {r["accelerator"] for r in rows["sidecar-visibility"]}
    for capability in ("ascend-docker-runtime", "hccl-ranktable"):
        assert {r["accelerator"] for r in rows[capability]} == accelerators
        assert {r["mode"] for r in rows[capability]} >= {"exclusive", "shared", "visibility"}
        assert {(r["state"], r["depth"]) for r in rows[capability]} == {("ok", "declared")}
    assert rc == 0, err
    info.write_text("version=v7.3.0\n")
    rc, (group,), _ = preflight(root, "--manufacturer=ascend")
    assert rc == 1 and {r["state"] for r in by_capability(group)["ascend-docker-runtime"]} == {"unavailable"}


def test_dry_run_withholds_the_established_mode(tmp_path: Path) -> None:
    root = node("ascend-910b-8x", tmp_path)
    rc, (group,), _ = preflight(root, "--manufacturer=ascend", "--dry-run")
    share = by_capability(group)["container-share"]
    off = [r for r in share if r["state"] == "unavailable"]
    assert off and all("was not established: --dry-run withholds the ask" in r["reason"] for r in off)
    # the synthetic slice reads what the row established: with the ask withheld it is refused, naming it
    sliced = {r["accelerator"]: r for r in by_capability(group)["sliced-quota-in-force"]}
    assert all("not established by this pass" in sliced[r["accelerator"]]["reason"] for r in off)
    assert rc == 1


def test_thead_partitioned_and_sliced_ppus_each_get_their_own_rows(tmp_path: Path) -> None:
    """T-Head (full tier, no default probe image): a PPU with MIG profiles reports the two management rows
    at declared and no sliced rows; the others the sliced rows at simulated, naming --probe-image."""
    root = node("thead-ppu", tmp_path)
    rc, (group,), err = preflight(root, "--manufacturer=thead")
    rows = by_capability(group)
    partitioned = {r["accelerator"] for r in rows["mig-partitioning"] if r["state"] == "ok"}
    sliced = {r["accelerator"] for r in rows["mig-partitioning"] if r["state"] == "not-declared"}
    assert partitioned and sliced and not partitioned & sliced
    for capability in MANAGEMENT_ROWS:
        for row in rows[capability]:
            expected = ("declared", "partitioned") if row["accelerator"] in partitioned else ("simulated",)
            assert (row["depth"], row["mode"])[: len(expected)] == expected and row["state"] == "ok"
    for capability in SLICED_ROWS:
        assert {r["accelerator"] for r in rows[capability]} == sliced
        assert all(r["state"] == "ok" and "--probe-image" in r["detail"] for r in rows[capability])
    assert rc == 0, err
