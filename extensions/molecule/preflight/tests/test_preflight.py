"""Verify scenario `preflight`: the three nodes laid out in the container, the package that ran there,
and the fleet report the role wrote on the controller."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from controller import (
    BUILD,
    HOSTS,
    LISTING,
    REPO,
    VENV,
    accelerator_ids,
    cli,
    container,
    controller_listing,
    detect,
    fixture_cli,
    latest_report,
    listing,
    make_enterable,
    sha256,
)

# The fleet lives in one container (its other inventory hosts reach the same one). Addressed with
# testinfra's own podman backend: through molecule's inventory testinfra would fall back to one ad-hoc
# `ansible` run per command for the podman connection (seconds each).
testinfra_hosts = ["podman://" + container("gpustack-preflight")]  # this run's container

NVML = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
# host -> (root in the container, fixture, its vendor CLI, files left out of the copy)
NODES = {
    "gpustack-preflight": ("/host", "h100-sxm-8x", "nvidia-smi", set()),
    "atlas-910b-01": ("/hosts/atlas-910b-01", "ascend-910b-8x", "npu-smi", set()),
    "l40s-no-runtime-01": ("/hosts/l40s-no-runtime-01", "mixed-nvidia-mellanox", "nvidia-smi", {NVML}),
}
# what prepare.yml adds to a fixture: a shell for chroot (and a vendor CLI when it carries none)
SHELL = {
    ("bin", "d", ""),
    ("bin/sh", "f", ""),
    ("lib", "d", ""),
    ("lib/x86_64-linux-gnu", "d", ""),
    ("lib/x86_64-linux-gnu/libc.so.6", "f", ""),
    ("lib64", "d", ""),
    ("lib64/ld-linux-x86-64.so.2", "f", ""),
}
NINE = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]


def test_fixture_trees_are_copied_exactly_symlinks_included(host):
    for root, fixture, tool, left_out in NODES.values():
        inside = listing(host.check_output(LISTING.format(root=root)))
        expected = {
            e
            for e in controller_listing(HOSTS / fixture)
            if e[0] not in left_out and not e[0].startswith("var/lib/gpustack")  # staged on the shared tree
        }
        added = set(SHELL)
        if fixture_cli(fixture, tool) is None:
            added |= {("usr", "d", ""), ("usr/bin", "d", ""), (f"usr/bin/{tool}", "f", "")}
        added = {e for e in added if not any(e[0] == x[0] for x in expected)}
        assert inside == expected | added, (root, sorted(inside ^ (expected | added))[:20])
        # relative links stay relative (a resolved copy would point at the controller's tree)
        assert ("etc/os-release", "l", "../usr/lib/os-release") in inside
        assert any(kind == "l" and path.startswith("sys/bus/pci/devices/") for path, kind, _ in inside)


def test_vendor_library_standins_are_the_controllers_builds(host):
    assert host.file(f"/host/{NVML}").sha256sum == sha256(HOSTS / "h100-sxm-8x" / NVML)
    dcmi = "usr/local/Ascend/driver/lib64/driver/libdcmi.so"
    assert host.file(f"/hosts/atlas-910b-01/{dcmi}").sha256sum == sha256(HOSTS / "ascend-910b-8x" / dcmi)
    assert not host.file(f"/hosts/l40s-no-runtime-01/{NVML}").exists


def test_vendor_clis_answer_in_the_tools_format(host):
    for root, fixture, tool, _ in NODES.values():
        f = host.file(f"{root}/{fixture_cli(fixture, tool) or f'usr/bin/{tool}'}")
        assert f.is_file and f.mode == 0o755
    lines = host.check_output("chroot /host nvidia-smi -L").splitlines()
    h100 = accelerator_ids(detect("h100-sxm-8x", "nvidia"), "nvidia")
    assert [line.rsplit("(UUID: ", 1)[1].rstrip(")") for line in lines] == h100
    assert all(line.startswith(f"GPU {i}: ") for i, line in enumerate(lines))
    npus = host.check_output("chroot /hosts/atlas-910b-01 npu-smi info -l")
    assert npus.count("NPU ID") == len(accelerator_ids(detect("ascend-910b-8x", "ascend"), "ascend"))


def test_the_package_runs_from_its_venv_under_python_3_12(host):
    assert host.check_output(f"{VENV}/bin/python -c 'import sys; print(sys.version_info[:2] >= (3, 12))'") == "True"
    assert host.check_output(f"{VENV}/bin/gpustack-operator --version").startswith("gpustack-operator ")


def test_detection_in_the_container_is_the_controllers(host):
    """Detecting the node mounted at /host (the CLI's view defaults to /, the container itself, so it
    is named) finds what the controller detects on the same fixture."""
    inside = json.loads(host.check_output(f"{VENV}/bin/gpustack-operator dm detect -o json --detect-root /host"))
    outside = detect("h100-sxm-8x")
    assert inside["node"]["root"] == "/host"
    assert inside["groups"] == outside["groups"]
    assert inside["node"]["labels"] == outside["node"]["labels"]


# the host writes a run keeps (supplement §2.5): the staged library tree and the lock file
KEPT = re.compile(r"^/hosts?(/[^/ ]+)?/var/lib/gpustack(/operator(/lib(/.*)?|/preflight(/lock)?)?)? ")


def test_preflight_wrote_only_the_specs_host_writes(host):
    """Every node as it was, but for what the spec lets a run keep: the library tree it staged and the
    lock. Its rendered files are gone, a mode it asked on was put back (same bytes), nothing else."""
    now = host.check_output("find /host /hosts -printf '%p %y %s %m %l\\n' | LC_ALL=C sort")
    before = host.file("/root/host-roots.manifest").content_string
    after = [line for line in now.strip().splitlines() if not KEPT.match(line)]
    assert after == [line for line in before.strip().splitlines() if not KEPT.match(line)]
    assert not [line for line in now.splitlines() if "/var/lib/gpustack/operator/pods" in line]
    assert not [line for line in now.splitlines() if "/operator/preflight/render-" in line]


# -- on the controller ----------------------------------------------------------------------------

SCENARIO = Path(__file__).resolve().parents[1]


def report():
    return latest_report(BUILD / "preflight" / "reports")


def groups(doc, name):
    return {g["manufacturer"]: g for g in doc["hosts"][name]["report"]["accelerators"]}


def normalized(value, root):
    """Timestamps dropped, the node's root path and the run's render directory made neutral."""
    if isinstance(value, dict):
        return {k: normalized(v, root) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [normalized(v, root) for v in value]
    if not isinstance(value, str):
        return value
    # the root as a path of its own: "/host/proc/1", "chroot /host nvidia-smi" -- not the "/:/host"
    # of a docker -v example in a note, which names the mount point rather than this node's root
    value = re.sub(r"(?<![:\w])" + re.escape(root) + r"(?![\w.-])", "<root>", value)
    # the responder's per-run render directory a probe command names (render-<pid>-<random>/...)
    return re.sub(r"/var/lib/gpustack/operator/preflight/render-[^\s:]+", "<render>", value)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    """The same three trees rebuilt on the controller from prepare.yml's own arguments, and the
    package's own ``dm preflight`` over each, with the inventory's manufacturers:
    host -> (exit status, preflight document, tree)."""
    args = yaml.safe_load((SCENARIO / "prepare.yml").read_text())[0]["vars"]["molecule_artifact_args"]
    inventory = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]
    fleet = inventory["hosts"]["fleet"]["hosts"]
    out = tmp_path_factory.mktemp("replica")
    built = subprocess.run(
        [sys.executable, "-m", "tests.tools.molecule_artifacts", "--no-wheel", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    tree = out / "tree"
    with tarfile.open(json.loads(built.stdout)["roots_tar"]) as tar:
        tar.extractall(tree, filter="tar")
    result = {}
    for name, (root, *_) in NODES.items():
        local = tree / root.lstrip("/")
        make_enterable(local)
        wanted = fleet.get(name, {}).get("gpustack_manufacturers")
        only = ["--manufacturer", ",".join(wanted)] if wanted else []
        proc = cli("dm", "preflight", "--detect-root", str(local), "--host-root", str(local), "--dry-run", *only)
        assert proc.returncode in (0, 1), proc.stderr
        result[name] = (proc.returncode, yaml.safe_load(proc.stdout), str(local))
    return result


def test_fleet_report_is_the_packages_own_preflight_of_each_node(replica):
    doc, _, _ = report()
    assert sorted(doc["hosts"]) == sorted(NODES)
    for name, (rc, expected, local) in replica.items():
        entry = doc["hosts"][name]
        assert entry["status"] == ("ok" if rc == 0 else "unavailable"), name
        assert normalized(entry["report"], NODES[name][0]) == normalized(expected, local), name
    statuses = [rc for rc, _, _ in replica.values()]
    # degraded: a host with an RDMA link whose verdict is neither ok nor unverified, from the package's
    # own documents (the h100 fixture's ib3 is down on purpose)
    degraded = [
        name
        for name, (_, expected, _) in replica.items()
        if any(c["state"] not in ("ok", "unverified") for c in (expected.get("network") or {}).get("checks", []))
    ]
    assert degraded, "the fixtures' deliberately failed RDMA link is gone: this assertion checks nothing"
    assert doc["summary"] == {
        "hosts": 3,
        "ok": statuses.count(0),
        "unavailable": statuses.count(1),
        "unreachable": 0,
        "failed": 0,
        "mismatch": 0,
        "degraded": len(degraded),
    }
    assert sorted(name for name, entry in doc["hosts"].items() if entry.get("degraded")) == sorted(degraded)


def test_report_shows_what_each_node_was_set_up_for():
    doc, _, _ = report()

    # default host root and all nine manufacturers; NVIDIA as detected, and the host's nvidia-smi agrees
    hgx = groups(doc, "gpustack-preflight")
    assert sorted(hgx) == NINE
    nvidia = hgx["nvidia"]["detection"]
    count = len(accelerator_ids(detect("h100-sxm-8x", "nvidia"), "nvidia"))
    assert (nvidia["state"], nvidia["accelerators"]) == ("ok", count)
    assert nvidia["host"]["command"] == "/usr/sbin/chroot /host nvidia-smi -L"
    assert nvidia["host"]["accelerators"] == count
    assert nvidia["host"]["detail"].count("(UUID: GPU-") == count
    for other in set(NINE) - {"nvidia"}:
        assert hgx[other]["detection"]["state"] == "not-declared"

    # gpustack_manufacturers from the inventory; npu-smi asked through that node's own root
    atlas = groups(doc, "atlas-910b-01")
    assert sorted(atlas) == ["ascend", "nvidia"]
    ascend = atlas["ascend"]["detection"]
    count = len(accelerator_ids(detect("ascend-910b-8x", "ascend"), "ascend"))
    assert (ascend["state"], ascend["accelerators"]) == ("ok", count)
    assert ascend["host"]["command"] == "/usr/sbin/chroot /hosts/atlas-910b-01 npu-smi info -l"
    assert ascend["host"]["accelerators"] == count
    assert atlas["nvidia"]["detection"]["state"] == "not-declared"

    # no NVIDIA runtime in the container: the host's own nvidia-smi sees what the container cannot
    assert doc["hosts"]["l40s-no-runtime-01"]["status"] == "unavailable"
    l40s = groups(doc, "l40s-no-runtime-01")
    assert sorted(l40s) == ["nvidia"]
    d = l40s["nvidia"]["detection"]
    seen_by_host = len(accelerator_ids(detect("mixed-nvidia-mellanox", "nvidia"), "nvidia"))
    assert d["state"] == "unavailable"
    assert d["accelerators"] == 0 < seen_by_host == d["host"]["accelerators"]
    assert f"reports {seen_by_host} accelerator(s) where this container detected 0" in d["reason"]
    assert "/dev/nvidiactl" in d["host"]["missingMounts"]
    assert doc["hosts"]["l40s-no-runtime-01"]["message"].startswith("preflight: nvidia: detection:")


def test_report_html_and_junit():
    doc, html, junit = report()
    # one row per host, its status and, when not ok, its one-line reason
    for name, entry in doc["hosts"].items():
        row = html.split(f'data-host="{name}"', 1)[0].rsplit("<tr ", 1)[1]
        assert f'class="s-{entry["status"]}' in row, (name, row)
    row = html.split('data-host="l40s-no-runtime-01"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="st unavailable">unavailable</td>' in row
    assert "<summary>NVIDIA: this container sees fewer than the host — " in row
    # one JUnit testcase per host
    suite = ET.fromstring(junit)
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert sorted(cases) == sorted(doc["hosts"])
    assert cases["l40s-no-runtime-01"].find("failure") is not None
    for name, case in cases.items():
        if doc["hosts"][name]["status"] == "ok":
            assert case.find("failure") is None, name
    assert int(suite.get("errors")) == 0


def test_controller_cli_agrees_the_lib_less_tree_detects_nothing(tmp_path):
    """The same fixture minus libnvidia-ml, on the controller: no NVIDIA accelerator is measured,
    which is why the host's own count decides."""
    root = tmp_path / "l40s"
    shutil.copytree(HOSTS / "mixed-nvidia-mellanox", root, symlinks=True)
    (root / NVML).unlink()
    proc = cli("dm", "detect", "--host-root", str(root), "--manufacturer", "nvidia", "-o", "json")
    assert proc.returncode in (0, 1), proc.stderr
    assert accelerator_ids(json.loads(proc.stdout), "nvidia") == []


def test_the_container_has_no_network(host):
    # podman's network none: only the loopback interface, nothing leaves the machine
    assert host.check_output("ls /sys/class/net") == "lo"
