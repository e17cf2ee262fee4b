"""Questions 2 and 3 against a real container engine (supplement §2.5-§2.8): ``dm preflight`` as a
process, its detect view a copy of a fixture node (the container's own /sys, /dev and vendor library),
its host root a real dockerd's root (tests/tools/container_host.py: Debian's docker.io pivoted into an
overlay of this machine's / with the fixture's files on top), entered with ``chroot ROOT docker``.

Real: the engine, ``--rm``, the label, the names, the injection's ``-v`` / ``--device`` / ``-e`` resolved
by the daemon inside the host root, the preload library (a gcc-built stand-in shared object) mapped in
the probe's own address space, the staging through the host root, the sweep removing a real leftover,
the lock between two real concurrent runs. FAKED, and said so on every row it feeds: the vendor quota
-- the probe image's ``nvidia-smi`` / ``rocm-monitor`` are shell scripts printing the cap the injection's
variable names (tests/tools/probe_image/); the ``nvidia`` runtime is plain runc; device nodes carry
/dev/null's numbers."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, fresh_node
from tests.tools import container_host as ch
from tests.tools.container_host import PROBE_IMAGE, ContainerHost, preload_library

container_host_session = ch.container_host_session
container_host = ch.container_host

FIXTURES = REPO / "tests/fixtures/hosts"
CLI = REPO / ".venv/bin/gpustack-operator"
LABEL = "gpustack.ai/preflight=true"
H100 = FIXTURES / "h100-sxm-8x"
MI300X = FIXTURES / "mi300x-8x"


def view_of(fixture: Path, tmp_path: Path) -> Path:
    view = tmp_path / "view"
    shutil.copytree(fixture, view, symlinks=True, ignore=fresh_node)
    return view


READERS = REPO / "tests/tools/probe_image/bin"


def source(tmp_path: Path, files: dict[str, bool]) -> Path:
    """The image's preload tree: a real shared object where ``files`` says so; a tool the tree carries
    (AMD's rocm-monitor, mounted over the image's own) is the probe image's stand-in reader of that
    name, anything else an inert script."""
    src = tmp_path / "lib-source"
    for rel, shared in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if shared:
            shutil.copy2(preload_library(), src / rel)
        elif (READERS / Path(rel).name).is_file():
            shutil.copy2(READERS / Path(rel).name, src / rel)
        else:
            (src / rel).write_text("#!/bin/sh\n")
            (src / rel).chmod(0o755)
    return src


def argv(view: Path, host: ContainerHost, src: Path, manufacturer: str, *extra: str) -> list[str]:
    return [
        str(CLI), "dm", "preflight", f"--manufacturer={manufacturer}", "--detect-root", str(view),
        "--host-root", str(host.root), "--runtime", "docker", "--probe-image", PROBE_IMAGE,
        "--preload-source", str(src), *extra,
    ]  # fmt: skip


def run(cmd: list[str]) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout), proc.stderr


def checks(doc: dict[str, object], capability: str) -> list[dict[str, str]]:
    (group,) = doc["accelerators"]  # type: ignore[index]
    return [c for c in group.get("checks") or [] if c["capability"] == capability]


@pytest.mark.parametrize("container_host", [H100], indirect=True)
def test_nvidia_slices_are_measured_in_real_containers(container_host: ContainerHost, tmp_path: Path) -> None:
    host = container_host
    view = view_of(H100, tmp_path)
    src = source(tmp_path, {"nvidia/cuda-12/libvgpu.so": True})
    # a container an earlier, killed run left behind: the sweep must collect it before anything starts
    left = host.docker("run", "-d", "--network", "none", "--label", LABEL, PROBE_IMAGE, "sleep", "300", check=True)
    assert host.containers(f"label={LABEL}") == [left.stdout.strip()]

    rc, doc, err = run(argv(view, host, src, "nvidia"))

    assert rc == 0, err
    loaded = checks(doc, "sliced-runtime-loaded")
    assert len(loaded) == 8
    assert {(r["state"], r["depth"]) for r in loaded} == {("ok", "measured")}
    assert "/usr/local/vgpu/libvgpu.so" in loaded[0]["evidence"]  # the probe's own /proc/self/maps
    quota = checks(doc, "sliced-quota-in-force")
    assert {(r["state"], r["depth"]) for r in quota} == {("ok", "measured")}
    assert "reported 40779 MiB" in quota[0]["detail"]
    co = checks(doc, "co-tenancy")
    assert {(r["state"], r["depth"]) for r in co} == {("ok", "measured")}
    assert "(a: 40779 MiB, b: 40779 MiB)" in co[0]["detail"]
    assert {r["depth"] for r in checks(doc, "sidecar-visibility")} == {"simulated"}
    # nothing left: the leftover swept, every probe removed (--rm); the lock and the staged tree stay
    assert host.containers() == []
    assert (host.root / "var/lib/gpustack/operator/preflight/lock").is_file()
    assert sorted(p.name for p in (host.root / "var/lib/gpustack/operator/preflight").iterdir()) == ["lock"]
    staged = host.root / "var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so"
    assert staged.read_bytes() == preload_library().read_bytes()
    assert not (host.root / "var/lib/gpustack/operator/pods").exists()
    # progress of each probe on stderr, the document alone on stdout
    assert "probe gpustack-preflight-nvidia-GPU-" in err and "done (" in err


@pytest.mark.parametrize("container_host", [H100], indirect=True)
def test_a_second_concurrent_run_refuses_before_it_sweeps(container_host: ContainerHost, tmp_path: Path) -> None:
    host = container_host
    view = view_of(H100, tmp_path)
    src = source(tmp_path, {"nvidia/cuda-12/libvgpu.so": True})
    first = subprocess.Popen(argv(view, host, src, "nvidia"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until the first run holds the lock and has a probe running
        deadline = time.monotonic() + 120
        while not host.containers(f"label={LABEL}"):
            assert first.poll() is None and time.monotonic() < deadline, "the first run started no probe"
            time.sleep(0.05)
        rc, doc, _ = run(argv(view, host, src, "nvidia"))
        assert rc == 1
        (group,) = doc["accelerators"]  # type: ignore[index]
        assert group["detection"]["state"] == "unavailable"
        assert "another preflight run holds this node's lock" in group["detection"]["reason"]
        assert f"pid {first.pid}" in group["detection"]["reason"]
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    # the first run's probes were not swept from under it
    assert first.returncode == 0, err
    assert {r["state"] for r in checks(yaml.safe_load(out), "sliced-quota-in-force")} == {"ok"}


def add_amd_nodes(view: Path, host: ContainerHost) -> None:
    """/dev/kfd and the DRM nodes the fixture's sysfs lists: files in the view (what the responder checks
    exists), real character devices in the host root (what docker --device requires)."""
    names = ["kfd"] + [
        f"dri/{e.name}"
        for e in (view / "sys/class/drm").iterdir()
        if e.name.startswith(("card", "renderD")) and "-" not in e.name
    ]
    for name in names:
        (view / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (view / "dev" / name).write_text("")
        host.mknod(f"/dev/{name}")


@pytest.mark.parametrize("container_host", [MI300X], indirect=True)
def test_amd_slices_get_exactly_their_device_nodes(container_host: ContainerHost, tmp_path: Path) -> None:
    host = container_host
    view = view_of(MI300X, tmp_path)
    add_amd_nodes(view, host)
    src = source(tmp_path, {"amd/libvrocm.so": True, "amd/rocm-cumask-check": False, "amd/rocm-monitor": False})

    rc, doc, err = run(argv(view, host, src, "amd"))

    quota = checks(doc, "sliced-quota-in-force")
    assert len(quota) == 8, err
    assert {(r["state"], r["depth"]) for r in quota} == {("ok", "measured")}, quota[0]
    loaded = checks(doc, "sliced-runtime-loaded")[0]
    assert loaded["state"] == "ok" and "/usr/local/gpustack/amd/libvrocm.so" in loaded["evidence"]
    # never privileged; exactly /dev/kfd and the card's own DRM nodes
    command = loaded["command"]
    assert "--privileged" not in command and "--device /dev/kfd:/dev/kfd:rwm" in command
    assert command.count("--device") == 3
    assert {(r["state"], r["depth"]) for r in checks(doc, "co-tenancy")} == {("ok", "measured")}
    assert rc == 0, err
    assert host.containers() == []


ASCEND = FIXTURES / "ascend-910b-8x"


@pytest.mark.parametrize("container_host", [ASCEND], indirect=True)
def test_ascend_slices_read_their_npu_info_config_in_real_containers(
    container_host: ContainerHost, tmp_path: Path
) -> None:
    """The Ascend probe: handed to the vendor runtime (--runtime ascend; the stand-in is runc), the cap in
    the rendered npu_info.config the injection mounts, read back by the probe image's enpu-monitor."""
    host = container_host
    view = view_of(ASCEND, tmp_path)
    src = source(tmp_path, {"ascend/cann-8-910b/libvruntime.so": True})

    rc, doc, err = run(argv(view, host, src, "ascend"))

    quota = checks(doc, "sliced-quota-in-force")
    assert len(quota) == 8, err
    assert {(r["state"], r["depth"]) for r in quota} == {("ok", "measured")}, quota[0]
    assert "the cap the injection set (npu_info.config, key memory-quota)" in quota[0]["detail"]
    loaded = checks(doc, "sliced-runtime-loaded")[0]
    assert loaded["state"] == "ok" and "libvruntime.so" in loaded["evidence"]
    assert "--runtime ascend" in loaded["command"] and "--privileged" not in loaded["command"]
    assert {(r["state"], r["depth"]) for r in checks(doc, "co-tenancy")} == {("ok", "measured")}
    # container-share was asked on where off and put straight back, on every NPU
    assert {r["state"] for r in checks(doc, "container-share")} == {"ok"}
    assert rc == 0, err
    assert host.containers() == []
