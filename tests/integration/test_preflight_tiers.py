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


def preflight(root: Path, *flags: str, host_root: Path | None = None) -> tuple[int, list[dict[str, object]], str]:
    """The node's own preflight (the node view is the host root, as on the node itself, unless
    ``host_root`` says otherwise); the library tree is staged from the image's tree in that view (the
    default --preload-source)."""
    host = str(host_root or root)
    proc = subprocess.run(
        [str(CLI), "dm", "preflight", "--detect-root", str(root), "--host-root", host, *flags],
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


def stand_in_state(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file of the vendor stand-ins and the node's sysfs, as (inode, mtime, bytes): a stand-in
    rewrites its data file (a new inode) on every driver write, so a mode asked on and put straight back
    shows here even where the bytes come back the same."""
    found = {}
    for top in ("usr", "opt", "sys"):
        for p in sorted((root / top).rglob("*")):
            if p.is_file() and not p.is_symlink():
                st = p.stat()
                found[str(p.relative_to(root))] = (st.st_ino, st.st_mtime_ns, p.read_bytes())
    return found


def unavailable(group: dict[str, object]) -> list[dict[str, str]]:
    return [r for r in group.get("checks") or [] if r["state"] == "unavailable"]  # type: ignore[attr-defined]


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
    # the two sliced rows on every sliceable accelerator, whatever the tier (an absent row would read as
    # "cannot be sliced"), each at the depth its tier earns
    for capability in SLICED_ROWS:
        assert len(rows[capability]) == count
        assert states(rows[capability]) == {("ok", "simulated", "sliced")}, rows[capability][0]
        row = rows[capability][0]
        if not container_tier:  # the tier stops at the injection, and the row says so
            assert "no container is started for it" in row["detail"] and "command" not in row
        elif manufacturer in ("hygon",):  # no default image claimed: --probe-image
            assert "--probe-image" in row["detail"]
        else:  # the host has no container CLI: the probe step is emitted, printed complete
            assert "emitted" in row["detail"] and "no container runtime can be driven" in row["detail"]
            assert row["command"].startswith(f"/usr/sbin/chroot {root} docker run --rm")
    if not container_tier:
        assert "no container is started for it" in group["note"]
    # a driver mode asked on is put straight back, no slice or instance is ever created, and nothing is
    # left under the preflight directory but its lock (§2.5: the file is never removed)
    assert snapshot(root, "usr", "opt", "sys") == stand_ins
    assert [p.name for p in (root / "var/lib/gpustack/operator/preflight").iterdir()] == ["lock"]
    assert not (root / "var/lib/gpustack/operator/pods").exists()


def test_a_partition_backed_accelerator_reports_the_management_rows_declared(tmp_path: Path) -> None:
    root = node("a100-mig", tmp_path)
    rc, (group,), err = preflight(root, "--manufacturer=nvidia")
    mig_on = {r["accelerator"] for r in by_capability(group)["mig-partitioning"] if r["state"] == "ok"}
    assert mig_on, "the A100 fixture has MIG-on GPUs"
    seen = set()
    for row in group["checks"]:
        if row["accelerator"] in mig_on and row["capability"] in MANAGEMENT_ROWS:
            # §2.8 row shape: an ok row's words are its detail; the sidecar row answers for visibility
            mode = "visibility" if row["capability"] == "sidecar-visibility" else "partitioned"
            assert (row["state"], row["depth"], row["mode"]) == ("ok", "declared", mode)
            assert "partition-backed" in row["detail"] and "reason" not in row
            seen.add((row["accelerator"], row["capability"]))
        if row["accelerator"] in mig_on:
            assert row["capability"] not in SLICED_ROWS  # a partitioned accelerator serves no other mode
    assert seen == {(a, c) for a in mig_on for c in MANAGEMENT_ROWS}
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


# the two established modes (§2.7 "What the driver-read row means"): the fixture has each off on some of
# its accelerators -- every one of the 910B's NPUs, six of the eight MLUs
ESTABLISHED = [
    ("ascend-910b-8x", "ascend", "container-share", "container-share", 8),
    ("mlu370-x8", "cambricon", "smlu-mode", "smlu", 6),
]
WITHHELD = pytest.mark.parametrize(("fixture", "manufacturer", "capability", "mode", "off"), ESTABLISHED)


def check_withheld(group: dict[str, object], capability: str, mode: str, off: int, why: str) -> None:
    """The mode that reads off is an emitted step (an answer, not a failure): its row reports the mode as
    read and that it was not established, and the rows simulated behind it say they assumed it on."""
    rows = by_capability(group)
    withheld = [r for r in rows[capability] if "not established" in r["detail"]]
    assert len(withheld) == off
    for r in withheld:
        assert (r["state"], r["depth"], r["mode"]) == ("ok", "declared", "sliced")
        assert f"{mode} reads off" in r["detail"] and why in r["detail"]
    assumed = {r["accelerator"] for r in withheld}
    for capability_name in MANAGEMENT_ROWS | SLICED_ROWS:
        for r in rows[capability_name]:
            assert r["state"] == "ok", r
            said = f"simulated as if {mode} were on" in r["detail"]
            assert said is (r["accelerator"] in assumed), r


@WITHHELD
def test_dry_run_does_not_fail_a_healthy_node(
    fixture: str, manufacturer: str, capability: str, mode: str, off: int, tmp_path: Path
) -> None:
    root = node(fixture, tmp_path)
    before = stand_in_state(root)
    rc, (group,), err = preflight(root, f"--manufacturer={manufacturer}", "--dry-run")
    assert rc == 0 and not unavailable(group), (err, unavailable(group)[:1])
    check_withheld(group, capability, mode, off, "--dry-run")
    assert stand_in_state(root) == before  # not one driver write, not even one put straight back
    assert not (root / "var/lib/gpustack").exists()  # no tree, no render directory, no lock


@WITHHELD
def test_no_host_root_carries_on_as_a_dry_run(
    fixture: str, manufacturer: str, capability: str, mode: str, off: int, tmp_path: Path
) -> None:
    """preflight-operations: "A run with no host root to enter carries on as a dry run"; §2.4: a dry
    run writes no driver mode -- not through the node view either. A host root without /etc is none."""
    root = node(fixture, tmp_path)
    empty = tmp_path / "not-a-root"
    empty.mkdir()
    before = stand_in_state(root)
    rc, (group,), err = preflight(root, f"--manufacturer={manufacturer}", host_root=empty)
    assert rc == 0 and not unavailable(group), (err, unavailable(group)[:1])
    check_withheld(group, capability, mode, off, "no host root to enter")
    assert stand_in_state(root) == before
    assert list(empty.iterdir()) == [] and not (root / "var/lib/gpustack").exists()


def test_an_accelerator_declaring_neither_family_reports_none_of_the_four(tmp_path: Path) -> None:
    """§2.7: a 910B on CANN 7 -- a runtime the image ships no slicing library for -- declares no logical
    slicing and no partitions, so it offers neither family: no management row, no sliced row."""
    root = node("ascend-910b-8x", tmp_path)
    info = root / "usr/local/Ascend/ascend-toolkit/8.0.RC2/runtime/version.info"
    info.write_text(info.read_text().replace("version_dir=8.0.RC2", "version_dir=7.0.RC1"))
    rc, (group,), err = preflight(root, "--manufacturer=ascend", "--dry-run")
    assert group["detection"]["runtimeVersion"].startswith("7.")
    rows = by_capability(group)
    assert not (MANAGEMENT_ROWS | SLICED_ROWS) & set(rows), sorted(rows)
    assert len(rows["container-share"]) == 8  # the driver-read row is the driver's, not a family's
    assert rc == 0, err


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
            mode = "visibility" if capability == "sidecar-visibility" else "partitioned"
            expected = ("declared", mode) if row["accelerator"] in partitioned else ("simulated",)
            assert (row["depth"], row["mode"])[: len(expected)] == expected and row["state"] == "ok"
            assert row["detail"] and "reason" not in row
    for capability in SLICED_ROWS:
        assert {r["accelerator"] for r in rows[capability]} == sliced
        assert all(r["state"] == "ok" and "--probe-image" in r["detail"] for r in rows[capability])
    assert rc == 0, err
