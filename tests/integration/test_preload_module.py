"""gpustack.accelerators.preload_libraries run for real with ``ansible`` ad hoc against copies of
fixture hosts: check mode (reports, writes nothing), a real run, and a second run that changes nothing.

What a host needs is learned from its own detection (``gpustack-operator dm detect -o json``), so
these tests keep holding as the fixture hosts report richer vendor data (runtime versions,
families). The write-path details run on the MI300X node: AMD is one flat ``amd`` directory whatever
ROCm it runs. Each ``ansible`` run covers several hosts at once (ansible is slow to start).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.preload import LIB_DIR, wanted_subtrees

from tests.conftest import BIN, REPO, copy_host, run_cli
from tests.conftest import HOSTS as HOSTS_DIR

pytestmark = pytest.mark.ansible

MODULE = "gpustack.accelerators.preload_libraries"
FIXTURES = [
    "mi300x-8x",
    "h100-sxm-8x",
    "ascend-910b-8x",
    "thead-ppu",
    "mlu370-x8",
    "cpu-only-vm",
]


def expected_subtrees(root: Path) -> list[str]:
    """What the module should stage on ``root``, from the same detection the module runs."""
    proc = run_cli("dm", "detect", "-o", "json", "--host-root", str(root))
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    groups = [DevicesGroup.model_validate(g) for g in doc["groups"]]
    arch = (doc["node"].get("cpu") or {}).get("arch", "unknown")
    return wanted_subtrees(groups, arch).subtrees


def make_source(dest: Path, subtrees: list[str]) -> Path:
    for subtree in subtrees:
        d = dest / subtree
        d.mkdir(parents=True, exist_ok=True)
        (d / "libshim.so").write_text(f"{subtree} v1\n")
        monitor = d / "monitor"
        monitor.write_text("#!/bin/sh\n")
        monitor.chmod(0o755)
    return dest


def inventory(tmp_path: Path, hosts: dict[str, dict[str, str]]) -> Path:
    """Hosts on connection local; each entry's vars (gpustack_host_root, preload_src, ...)."""
    inv = tmp_path / "inventory.yml"
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: {**common, **v} for name, v in hosts.items()}}}))
    return inv


@dataclass
class Outcome:
    status: str
    result: dict[str, Any]
    diff: str  # what the default callback printed before the result: the diff


RESULT = re.compile(r"^(\S+) \| ([A-Z!]+) => ", re.MULTILINE)


def run(env: dict[str, str], inv: Path, args: str, *flags: str) -> tuple[int, dict[str, Outcome]]:
    """One ad hoc run over every host of ``inv``; per host, its status, result and diff text."""
    proc = subprocess.run(
        [str(BIN / "ansible"), "all", "-i", str(inv), "-m", MODULE, "-a", args, *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout
    outcomes: dict[str, Outcome] = {}
    end = 0
    decoder = json.JSONDecoder()
    while (match := RESULT.search(out, end)) is not None:
        before = out[end : match.start()]
        result, end = decoder.raw_decode(out, match.end())
        outcomes[match.group(1)] = Outcome(match.group(2), result, before)
    if not outcomes:
        pytest.fail(f"no result from ansible (rc {proc.returncode}):\n{out}\n{proc.stderr}")
    return proc.returncode, outcomes


def tree(top: Path) -> dict[str, tuple[int, bytes]]:
    """Everything under ``top`` (links not followed): mode and content or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                data = os.readlink(path).encode()
            elif stat.S_ISREG(st.st_mode):
                data = path.read_bytes()
            else:
                data = b""
            out[str(path.relative_to(top))] = (st.st_mode, data)
    return out


def test_fixture_hosts_check_then_apply_then_nothing(ansible_env: dict[str, str], tmp_path: Path) -> None:
    names = [f for f in FIXTURES if (HOSTS_DIR / f).is_dir()]
    roots = {name: copy_host(name, tmp_path / "hosts") for name in names}
    wanted = {name: expected_subtrees(root) for name, root in roots.items()}
    assert wanted["mi300x-8x"] == ["amd"], "the MI300X fixture no longer detects its AMD accelerators"
    src = make_source(tmp_path / "src", sorted({s for w in wanted.values() for s in w}))
    inv = inventory(tmp_path, {name: {"gpustack_host_root": str(root)} for name, root in roots.items()})
    before = {name: tree(root) for name, root in roots.items()}

    rc, outcomes = run(ansible_env, inv, f"src={src}", "--check", "--diff")
    assert rc == 0, outcomes
    for name, root in roots.items():
        res, diff, lib = outcomes[name].result, outcomes[name].diff, root / LIB_DIR
        assert res["staged"] == wanted[name] and res["updated"] == wanted[name], name
        assert res["changed"] is bool(wanted[name]), name
        assert res["destination"] == str(lib)
        assert res["replaced"] == [] and res["removed"] == []
        for subtree in wanted[name]:
            assert f"{subtree}/libshim.so" in res["added"] and f"{subtree}/monitor" in res["added"]
            assert f"--- before: {lib / subtree} (absent)" in diff and f"+++ after: {lib / subtree}" in diff
        assert diff.count("+libshim.so  0644  sha256:") == len(wanted[name]), (name, diff)
        assert tree(root) == before[name], f"check mode wrote to {name}"
    assert outcomes["mlu370-x8"].result["not_staged"][0]["manufacturer"] == "cambricon"

    rc, outcomes = run(ansible_env, inv, f"src={src}")
    assert rc == 0, outcomes
    for name, root in roots.items():
        res = outcomes[name].result
        assert res["changed"] is bool(wanted[name]) and res["updated"] == wanted[name], name
        for subtree in wanted[name]:
            assert (root / LIB_DIR / subtree / "libshim.so").read_text() == f"{subtree} v1\n"
            assert stat.S_IMODE((root / LIB_DIR / subtree / "monitor").stat().st_mode) == 0o755

    rc, outcomes = run(ansible_env, inv, f"src={src}", "--diff")
    assert rc == 0, outcomes
    for name in roots:
        res = outcomes[name].result
        assert res["changed"] is False and res["staged"] == wanted[name], name
        assert res["updated"] == [] and res["added"] == [] and res["replaced"] == [] and res["removed"] == []
        assert "+++ after" not in outcomes[name].diff


def test_a_newer_tree_from_the_controller(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """remote_src=false: a directory, then a tarball, shipped from the controller."""
    root = copy_host("mi300x-8x", tmp_path)
    src = make_source(tmp_path / "controller-src", ["amd", "nvidia/cuda-12"])
    inv = inventory(tmp_path, {"mi300x": {"gpustack_host_root": str(root)}})
    rc, outcomes = run(ansible_env, inv, f"src={src} remote_src=false")
    assert rc == 0, outcomes
    assert outcomes["mi300x"].result["updated"] == ["amd"]
    assert not (root / LIB_DIR / "nvidia").exists()  # not this node's

    (src / "amd/libshim.so").write_text("amd v2\n")
    (src / "amd/monitor").unlink()
    (src / "amd/rocm-cumask-check").write_text("check\n")
    archive = tmp_path / "lib.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname=".")
    rc, outcomes = run(ansible_env, inv, f"src={archive} remote_src=false", "--diff")
    assert rc == 0, outcomes
    res, diff = outcomes["mi300x"].result, outcomes["mi300x"].diff
    assert res["changed"] is True
    assert (res["added"], res["replaced"], res["removed"]) == (
        ["amd/rocm-cumask-check"],
        ["amd/libshim.so"],
        ["amd/monitor"],
    )
    assert "\n-monitor  0755  sha256:" in diff and "\n+rocm-cumask-check  0644  sha256:" in diff
    assert "\n-libshim.so  0644" in diff and "\n+libshim.so  0644" in diff
    assert (root / LIB_DIR / "amd/libshim.so").read_text() == "amd v2\n"
    assert not (root / LIB_DIR / "amd/monitor").exists()
    assert [p.name for p in (root / LIB_DIR).iterdir()] == ["amd"]  # no work directories left


def test_refusals_are_clear_failures(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """One run, four hosts: a source missing the node's subtree, a hostile tarball, a symlink
    planted on the destination path, and a host whose detection could not measure (not a failure)."""
    roots = {name: copy_host("mi300x-8x", tmp_path / name) for name in ("missing", "hostile", "planted")}
    roots["unmeasured"] = copy_host("unreadable-sysfs", tmp_path / "unmeasured")
    thead_only = make_source(tmp_path / "thead-only", ["thead"])
    good = make_source(tmp_path / "good", ["amd"])
    hostile = tmp_path / "hostile.tar"
    with tarfile.open(hostile, "w") as tar:
        tar.addfile(tarfile.TarInfo("../escape.so"))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "lib").mkdir(parents=True)
    (roots["planted"] / "var/lib/gpustack").mkdir(parents=True)
    os.symlink(elsewhere, roots["planted"] / "var/lib/gpustack/operator")
    sources = {"missing": thead_only, "hostile": hostile, "planted": good, "unmeasured": good}
    inv = inventory(
        tmp_path,
        {name: {"gpustack_host_root": str(root), "preload_src": str(sources[name])} for name, root in roots.items()},
    )

    rc, outcomes = run(ansible_env, inv, "src={{ preload_src }} manufacturers=amd,nvidia")
    assert rc != 0
    assert "Traceback" not in json.dumps({k: v.result for k, v in outcomes.items()})

    missing = outcomes["missing"]
    assert missing.status == "FAILED!" and "the source has no amd" in missing.result["msg"]
    hostile_res = outcomes["hostile"]
    assert hostile_res.status == "FAILED!"
    assert "'..'" in hostile_res.result["msg"] and "rebuild the archive" in hostile_res.result["msg"]
    assert not (tmp_path / "escape.so").exists()
    planted = outcomes["planted"]
    assert planted.status == "FAILED!"
    assert f"{roots['planted']}/var/lib/gpustack/operator: is a symlink" in planted.result["msg"]
    assert list((elsewhere / "lib").iterdir()) == []
    for name in ("missing", "hostile"):
        assert not (roots[name] / "var/lib/gpustack").exists()

    unmeasured = outcomes["unmeasured"].result
    assert outcomes["unmeasured"].status == "SUCCESS"
    assert unmeasured["changed"] is False and unmeasured["staged"] == []
    assert [s["manufacturer"] for s in unmeasured["not_staged"]] == ["amd", "nvidia"]
    assert all("could not be measured" in s["reason"] for s in unmeasured["not_staged"])


def test_one_manufacturers_syntax_and_no_blank_paths(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """One check-mode run, six MI300X hosts: ``gpustack_manufacturers`` in the gather_subset syntax
    (an exclusion, ``all`` less one, an unknown name), and blank ``src`` / ``host_root`` refused --
    on the target and, for a controller-side source, before it is looked for."""
    good = make_source(tmp_path / "good", ["amd"])
    hosts: dict[str, dict[str, Any]] = {
        "without-amd": {"gpustack_manufacturers": ["!amd"]},
        "all-but-thead": {"gpustack_manufacturers": ["all", "!thead"]},
        "unknown": {"gpustack_manufacturers": ["!intel"]},
        "blank-src": {"preload_src": "  "},
        "blank-controller-src": {"preload_src": " ", "preload_remote": False},
        "blank-root": {"gpustack_host_root": " "},
    }
    inv = inventory(
        tmp_path,
        {
            name: {
                "gpustack_host_root": str(copy_host("mi300x-8x", tmp_path / name)),
                "preload_src": str(good),
                "preload_remote": True,
                **v,
            }
            for name, v in hosts.items()
        },
    )
    rc, outcomes = run(ansible_env, inv, "src='{{ preload_src }}' remote_src={{ preload_remote }}", "--check")
    assert rc != 0
    assert outcomes["without-amd"].status == "SUCCESS" and outcomes["without-amd"].result["staged"] == []
    assert outcomes["all-but-thead"].status == "CHANGED" and outcomes["all-but-thead"].result["staged"] == ["amd"]
    unknown = outcomes["unknown"]
    assert unknown.status == "FAILED!"
    assert unknown.result["msg"].startswith("manufacturers: unknown manufacturer '!intel'; choose from all, amd, ")
    for name in ("blank-src", "blank-controller-src"):
        assert outcomes[name].status == "FAILED!"
        assert outcomes[name].result["msg"].startswith("src is empty: name the preload-library tree"), name
    assert outcomes["blank-root"].status == "FAILED!"
    assert outcomes["blank-root"].result["msg"].startswith("host_root is empty: ")
    assert not any((tmp_path / name / "mi300x-8x" / "var/lib/gpustack").exists() for name in hosts)
