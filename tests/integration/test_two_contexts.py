"""Preflight's two contexts, driven the way they happen in the field (issue 8).

Each test pairs a *container view* (the node as the preflight container sees it: its /sys, its
vendor library where the docker run block mounts it -- or not) with a *host* (the node's own root,
mounted at --host-root and entered with chroot for the host's vendor CLI). The view is a copy of a
fixture node with what a mistaken ``docker run`` leaves out taken away; the host is the fixture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_host, host, run_cli
from tests.stubs.nvidia.data import data_file, library, set_values


def preflight(view: Path, host_root: Path | str, *args: str) -> tuple[int, dict[str, object], str]:
    proc = run_cli("dm", "preflight", "--detect-root", str(view), "--host-root", str(host_root), *args)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout), proc.stderr


def group(doc: dict[str, object], manufacturer: str) -> dict[str, object]:
    groups = doc["accelerators"]
    assert isinstance(groups, list)
    (found,) = [g for g in groups if g["manufacturer"] == manufacturer]
    return found  # type: ignore[no-any-return]


def container_view(name: str, tmp_path: Path, *, without: tuple[str, ...] = ()) -> Path:
    """A copy of fixture node ``name`` as a container would see it, minus the paths in ``without``."""
    view = copy_host(name, tmp_path / "view")
    for rel in without:
        target = view / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    return view


# -- 1. two contexts ------------------------------------------------------------------------------


def test_runc_container_sees_the_bus_but_no_nvml_while_the_host_sees_eight(tmp_path: Path) -> None:
    """The spec's measured case: --runtime runc gives the container /sys (the bus) but not the
    NVIDIA user space; the host's nvidia-smi reports 8. Unavailable, exit 1, naming the runtime."""
    hostroot = host("h100-sxm-8x")
    lib = library(hostroot).relative_to(hostroot)
    view = container_view("h100-sxm-8x", tmp_path, without=(str(lib), "usr/bin/nvidia-smi"))
    rc, doc, err = preflight(view, hostroot, "--manufacturer", "nvidia")
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert isinstance(det, dict)
    assert det["state"] == "unavailable" and det["accelerators"] == 0
    assert "nvidia-smi reports 8 accelerator(s) where this container detected 0" in det["reason"]
    assert "libnvidia-ml.so.1 was not found" in det["reason"]  # what this container's library search said
    assert any("--runtime nvidia" in m for m in det["host"]["missingMounts"])
    assert det["host"]["accelerators"] == 8
    # the stderr summary names the manufacturer, its state and the unavailable answer
    assert "  nvidia: unavailable; 0 accelerators; 1 unavailable answer:\n    detection: " in err


def test_the_same_pair_with_the_library_given_is_ok(tmp_path: Path) -> None:
    """--runtime nvidia: the container has the library; detection is the container's, and agrees."""
    view = container_view("h100-sxm-8x", tmp_path, without=("usr/bin/nvidia-smi",))
    rc, doc, _ = preflight(view, host("h100-sxm-8x"), "--manufacturer", "nvidia")
    assert rc == 0
    det = group(doc, "nvidia")["detection"]
    assert (det["state"], det["accelerators"], det["host"]["accelerators"]) == ("ok", 8, 8)  # type: ignore[index]


def test_detection_never_goes_through_the_host_root(tmp_path: Path) -> None:
    """A view with no NVIDIA card at all, paired with the H100 host: the host's library and sysfs are
    not detected through -- the container reports what it sees (0), the host what it sees (8)."""
    rc, doc, _ = preflight(host("cpu-only-vm"), host("h100-sxm-8x"), "--manufacturer", "nvidia")
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert det["accelerators"] == 0 and det["host"]["accelerators"] == 8  # type: ignore[index]


def test_no_host_root_mounted_is_not_read_as_the_container_itself(tmp_path: Path) -> None:
    """No -v /:/host: the cross-check is not asked (named, with the marker looked for), the topology
    section says the host was never looked in; detection of the view still answers."""
    nothing = tmp_path / "host"
    nothing.mkdir()  # a directory that merely resembles a host root: no /etc
    rc, doc, _ = preflight(host("h100-sxm-8x"), nothing, "--manufacturer", "nvidia")
    assert rc == 0
    det = group(doc, "nvidia")["detection"]
    assert det["state"] == "ok" and det["accelerators"] == 8  # type: ignore[index]
    assert "not asked" in det["host"]["reason"] and "carries no /etc" in det["host"]["reason"]  # type: ignore[index]
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["policy"] == "unknown"
    assert "never looked in" in topology["note"]


def test_default_host_root_is_slash_host_never_slash(tmp_path: Path) -> None:
    """Without --host-root the host root is /host (absent on this machine): never this machine's /."""
    proc = run_cli("dm", "preflight", "--detect-root", str(host("cpu-only-vm")), "--manufacturer", "nvidia")
    assert proc.returncode == 0, proc.stderr
    det = group(yaml.safe_load(proc.stdout), "nvidia")["detection"]
    assert "/host" in det["host"]["reason"] and "not asked" in det["host"]["reason"]  # type: ignore[index]


@pytest.mark.parametrize(
    "args",
    [
        ["dm", "preflight", "--host-root", ""],
        ["dm", "preflight", "--host-root", "   "],
        ["dm", "preflight", "--detect-root", ""],
        ["dm", "detect", "--detect-root", " "],
        ["dm", "detect", "--host-root", ""],
        ["dm", "monitor", "--host-root", ""],
        ["dm", "detect", "--detect-root", "/a", "--host-root", "/b"],
    ],
)
def test_empty_roots_are_usage_errors(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_detect_on_the_node_itself_reads_one_root() -> None:
    """detect / monitor / mode on a node: --host-root is the same root as --detect-root."""
    a = run_cli("dm", "detect", "--host-root", str(host("h100-sxm-8x")), "--manufacturer", "nvidia", "-o", "json")
    b = run_cli("dm", "detect", "--detect-root", str(host("h100-sxm-8x")), "--manufacturer", "nvidia", "-o", "json")
    assert a.returncode == b.returncode == 0
    assert yaml.safe_load(a.stdout)["groups"] == yaml.safe_load(b.stdout)["groups"]
    assert len(yaml.safe_load(a.stdout)["groups"][0]["accelerators"]) == 8


# -- 2. a half-installed node ---------------------------------------------------------------------


def test_driver_not_loaded_anywhere_is_unavailable_naming_the_bus(tmp_path: Path) -> None:
    root = host("nvidia-driver-broken")
    rc, doc, _ = preflight(root, root, "--manufacturer", "nvidia")
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert "0000:01:00.0, 0000:41:00.0" in det["reason"] and "Driver Not Loaded" in det["reason"]  # type: ignore[index]
    # detect keeps the ledger's rule: empty, no error
    proc = run_cli("dm", "detect", "--detect-root", str(root), "--manufacturer", "nvidia")
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["groups"] == []


def test_no_pci_check_turns_the_bus_side_off() -> None:
    root = host("nvidia-driver-broken")
    rc, doc, _ = preflight(root, root, "--manufacturer", "nvidia", "--no-pci-check")
    det = group(doc, "nvidia")["detection"]
    assert det["state"] == "not-declared" and rc == 0  # type: ignore[index]


def test_a_gpu_fallen_off_the_driver_is_unavailable(tmp_path: Path) -> None:
    """The bus shows 8, NVML enumerates 7: the missing address is named."""
    root = copy_host("h100-sxm-8x", tmp_path)
    data = data_file(root)
    text = data.read_text()
    data.write_text(text[: text.rindex("[device]")])  # NVML no longer enumerates the last GPU
    cli = root / "usr/bin/nvidia-smi"  # ... and the host's nvidia-smi, over the same driver, lists 7
    cli.write_text("\n".join(line for line in cli.read_text().splitlines() if not line.startswith("GPU 7:")) + "\n")
    rc, doc, _ = preflight(root, root, "--manufacturer", "nvidia")
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert det["accelerators"] == 7  # type: ignore[index]
    assert "shows 8 accelerator(s) of this manufacturer where its driver named 7" in det["reason"]  # type: ignore[index]
    assert "0000:df:00.0" in det["reason"]  # type: ignore[index]


def test_facts_carry_bus_against_driver(tmp_path: Path) -> None:
    from gpustack_operator import api
    from gpustack_operator.discovery.detect import facts_document

    doc = facts_document(api.run_detect(api.make_request(str(host("nvidia-driver-broken")), ["nvidia"])))
    entry = doc["manufacturers"]["nvidia"]  # type: ignore[index]
    assert entry["state"] == "incomplete" and entry["pci"] == 2 and entry["accelerators"] == 0
    assert entry["unanswered"] == ["0000:01:00.0", "0000:41:00.0"] and "Driver Not Loaded" in entry["driver"]
    ok = facts_document(api.run_detect(api.make_request(str(host("h100-sxm-8x")), ["nvidia"])))
    assert ok["manufacturers"]["nvidia"]["state"] == "detected" and ok["manufacturers"]["nvidia"]["pci"] == 8  # type: ignore[index]


# -- 3. cannot see vs could not be named ------------------------------------------------------------


def test_unreadable_uuid_is_could_not_be_named_and_blames_no_mount(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    set_values(root, device=3, uuid_error=999)
    rc, doc, _ = preflight(root, root, "--manufacturer", "nvidia")
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert isinstance(det, dict)
    assert det["accelerators"] == 7 and det["host"]["accelerators"] == 8
    assert (
        "could not identify 1 of them" in det["reason"] and "NVML index 3: its UUID could not be read" in det["reason"]
    )
    assert "missingMounts" not in det["host"] and "access" not in det["reason"]


def test_amd_unique_id_zero_is_named_as_such(tmp_path: Path) -> None:
    root = copy_host("mi300x-8x", tmp_path)
    props = root / "sys/devices/virtual/kfd/kfd/topology/nodes/5/properties"
    text = props.read_text()
    props.write_text(
        "\n".join("unique_id 0" if line.startswith("unique_id ") else line for line in text.splitlines()) + "\n"
    )
    rc, doc, _ = preflight(root, root, "--manufacturer", "amd")
    assert rc == 1
    det = group(doc, "amd")["detection"]
    assert "KFD node 5" in det["reason"] and "unique_id reads 0" in det["reason"]  # type: ignore[index]
    assert "missingMounts" not in (det.get("host") or {})  # type: ignore[union-attr]


# -- 5. a library that kills its process; a crash anywhere; a corrupted root --------------------------

CRASHING_NVML = r"""
#include <signal.h>
int nvmlInit_v2(void) { volatile int *p = 0; return *p; }
int nvmlInit(void) { return nvmlInit_v2(); }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }
"""


def test_a_segfaulting_vendor_library_takes_down_only_its_manufacturer(tmp_path: Path) -> None:
    root = copy_host("mixed-nvidia-mellanox", tmp_path)
    src = tmp_path / "crash.c"
    src.write_text(CRASHING_NVML)
    lib = library(root)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    rc, doc, err = preflight(root, root)
    assert rc == 1
    det = group(doc, "nvidia")["detection"]
    assert det["state"] == "unavailable"  # type: ignore[index]
    assert "killed by SIGSEGV" in det["reason"] and str(lib) in det["reason"]  # type: ignore[index]
    others = [g for g in doc["accelerators"] if g["manufacturer"] != "nvidia"]  # type: ignore[union-attr]
    assert len(others) == 8 and all(g["detection"]["state"] == "not-declared" for g in others)
    assert "Traceback" not in err


def test_undecodable_and_garbled_host_cli_output_is_contained(tmp_path: Path) -> None:
    root = copy_host("h100-sxm-8x", tmp_path)
    cli = root / "usr/bin/nvidia-smi"
    cli.write_bytes(
        b"#!/bin/sh\nprintf 'GPU 0: \\377\\376 (UUID: GPU-\\000x)\\nGPU 99999999999999999999999999: x\\n'\n"
    )
    cli.chmod(0o755)
    rc, doc, err = preflight(root, root, "--manufacturer", "nvidia")
    det = group(doc, "nvidia")["detection"]
    assert det["accelerators"] == 8 and rc in (0, 1)  # type: ignore[index]
    assert "Traceback" not in err


def corrupt(root: Path, seed: int) -> None:
    """Garble a fixture node the way a broken host does: binary in text files, truncations,
    huge integers, NUL bytes, a file where a directory was."""
    import random

    rng = random.Random(seed)
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and not p.name.endswith(".so")]
    for path in rng.sample(files, min(len(files), 400)):
        choice = rng.randrange(5)
        data = path.read_bytes()
        if choice == 0:
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(64))))
        elif choice == 1:
            path.write_bytes(data[: rng.randrange(len(data) + 1)])
        elif choice == 2:
            path.write_bytes(b"9" * 5000 + b"\n")
        elif choice == 3:
            path.write_bytes(data.replace(b"\n", b"\x00", 3))
        else:
            path.write_bytes(b"")


@pytest.mark.parametrize("seed", range(6))
def test_a_corrupted_root_never_destroys_the_document(tmp_path: Path, seed: int) -> None:
    name = ["h100-sxm-8x", "mi300x-8x", "ascend-910b-8x", "mixed-cambricon-metax", "hygon-k100", "thead-ppu"][seed]
    root = copy_host(name, tmp_path)
    corrupt(root, seed)
    for args in (("dm", "preflight", "--detect-root", str(root), "--host-root", str(root)),):
        proc = run_cli(*args)
        assert proc.returncode in (0, 1), proc.stderr
        assert "Traceback" not in proc.stderr
        doc = yaml.safe_load(proc.stdout)
        assert {g["manufacturer"] for g in doc["accelerators"]} == {
            "amd",
            "ascend",
            "cambricon",
            "hygon",
            "iluvatar",
            "metax",
            "mthreads",
            "nvidia",
            "thead",
        }
    for command in ("detect", "monitor"):
        proc = run_cli("dm", command, "--detect-root", str(root))
        assert proc.returncode in (0, 1), proc.stderr
        assert "Traceback" not in proc.stderr
        assert isinstance(yaml.safe_load(proc.stdout), dict)


# -- flags ------------------------------------------------------------------------------------------


def test_klog_verbosity_flags() -> None:
    root = str(host("cpu-only-vm"))
    base = ("dm", "preflight", "--detect-root", root, "--host-root", root, "--manufacturer", "nvidia")
    quiet = run_cli(*base)
    loud = run_cli(*base, "-v=3")
    legacy = run_cli(*base, "-vv")
    module = run_cli(*base, "--vmodule", "run=3")
    assert "DEBUG" not in quiet.stderr
    assert "DEBUG gpustack_operator.preflight.run" in loud.stderr
    assert "DEBUG gpustack_operator.preflight.run" in legacy.stderr
    # --vmodule raises exactly the modules its pattern names: run's decision lines, nobody else's
    debug = [line for line in module.stderr.splitlines() if line.startswith("DEBUG ")]
    assert debug and all(line.startswith("DEBUG gpustack_operator.preflight.run:") for line in debug)
    for bad in (("-v=x",), ("--vmodule", "runtime"), ("-v=99",)):
        proc = run_cli(*base, *bad)
        assert proc.returncode == 2 and "error:" in proc.stderr


def test_no_fast_failed(tmp_path: Path) -> None:
    root = str(host("cpu-only-vm"))
    held = run_cli("dm", "detect", "--detect-root", root, "--manufacturer", "nvidia")
    published = run_cli("dm", "detect", "--detect-root", root, "--manufacturer", "nvidia", "--no-fast-failed")
    assert held.returncode == published.returncode == 0
    assert "hold this first result back" in held.stderr and "hold" not in published.stderr
    assert held.stdout == published.stdout


def test_library_is_never_loaded_from_outside_the_view(tmp_path: Path) -> None:
    """A view whose library path is an absolute symlink to a file outside it: the link is re-rooted
    inside the view (where nothing is), so nothing is loaded -- the real file is never dlopen'ed."""
    from gpustack_operator.host import HostRoot
    from gpustack_operator.host.libs import find_library
    from gpustack_operator.manufacturers.nvidia.nvml import NVML_LIBRARY

    outside = tmp_path / "outside"
    outside.mkdir()
    real = library(host("h100-sxm-8x"))
    shutil.copy2(real, outside / "libnvidia-ml.so.1")
    view = container_view("h100-sxm-8x", tmp_path, without=(str(real.relative_to(host("h100-sxm-8x"))),))
    libdir = view / "usr/lib/x86_64-linux-gnu"
    (libdir / "libnvidia-ml.so.1").symlink_to(outside / "libnvidia-ml.so.1")  # absolute, outside
    (view / "usr/lib64").symlink_to(os.path.relpath(outside, view / "usr"))  # relative, climbing out
    assert find_library(HostRoot(view), NVML_LIBRARY, {}) is None
    # the same link pointing inside the view is followed, and the answer is inside it
    (libdir / "libnvidia-ml.so.1").unlink()
    shutil.copy2(real, view / "opt-lib.so")
    (libdir / "libnvidia-ml.so.1").symlink_to("/opt-lib.so")
    found = find_library(HostRoot(view), NVML_LIBRARY, {})
    assert found == str(view.resolve() / "opt-lib.so")


def test_mode_on_a_node_without_that_manufacturer_is_no_silent_no_op() -> None:
    proc = run_cli("dm", "mode", "nvidia", "mig", "--detect-root", str(host("cpu-only-vm")))
    assert proc.returncode == 1
    assert "no nvidia accelerator was detected" in proc.stderr and "Traceback" not in proc.stderr
