"""Questions 2 and 3 end to end through the CLI (``dm preflight``): the library staged
through the host root, the lock and the sweep around the probes, the probe argv, the evidence read
back into rows, the emitted cases, and --dry-run writing nothing.

The node is a tmp copy of a fixture host (detect root and host root the same tree, as on the node
itself), entered with the real chroot. Its ``docker`` is a ``#!/bin/sh`` stand-in: it records every
argv, answers the sweep's listing from a state file, and for ``run`` behaves as a container runtime that
honours the injection would -- it prints the markers, a map line for every library the mounted
``/etc/ld.so.preload`` names (read from the host path the ``-v`` names) and the figure the injection's
``CUDA_DEVICE_MEMORY_LIMIT_0`` sets. What is faked is the daemon and the container (the real engine
is tests/integration/test_preflight_engine.py); the argv, the chroot, staging, lock, sweep, parsing
and the rows are the real code's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.lock import acquire

from tests.conftest import REPO, fresh_node, make_enterable

FIXTURES = REPO / "tests/fixtures/hosts"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")

CLI = REPO / ".venv/bin/gpustack-operator"

DOCKER = r"""#!/bin/sh
line=docker; for a in "$@"; do line="$line $a"; done
printf '%s\n' "$line" >> /var/log/fake-docker.calls  # one write: two probes started together never interleave
case "$1" in
  ps) [ -e /var/lib/fake-docker/ps ] && while read -r l; do echo "$l"; done < /var/lib/fake-docker/ps; exit 0 ;;
  rm) [ -e /var/lib/fake-docker/rm-fails ] && { echo "Error response from daemon: permission denied" >&2; exit 1; }
      echo "$3"; exit 0 ;;
  run) ;;
  *) echo "fake docker: unexpected $*" >&2; exit 2 ;;
esac
[ -e /var/lib/fake-docker/run-fails ] && { echo "docker: Error response from daemon: pull access denied" >&2; exit 125; }
preload= limit= prev=
for a in "$@"; do
  if [ "$prev" = "-v" ]; then case "$a" in *:/etc/ld.so.preload:ro) preload=${a%%:*} ;; esac; fi
  if [ "$prev" = "-e" ]; then case "$a" in CUDA_DEVICE_MEMORY_LIMIT_0=*) limit=${a#*=}; limit=${limit%m} ;; esac; fi
  prev=$a
done
[ -e /var/lib/fake-docker/no-cap ] && limit=
echo gpustack-preflight-maps-begin
echo "55d0c0a00000-55d0c0a02000 r--p 00000000 08:01 131 /usr/bin/cat"
if [ -n "$preload" ] && [ ! -e /var/lib/fake-docker/no-preload ]; then
  while read -r lib; do echo "7f1e2c000000-7f1e2c001000 r-xp 00001000 00:2f 17 $lib"; done < "$preload"
fi
echo gpustack-preflight-maps-end
echo gpustack-preflight-reader-begin
echo "${limit:-81559}"
echo "gpustack-preflight-reader-end rc=0"
"""


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "h100-sxm-8x", root, symlinks=True, ignore=fresh_node)
    make_enterable(root)
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/docker").write_text(DOCKER)
    (root / "usr/bin/docker").chmod(0o755)
    (root / "var/log").mkdir(parents=True)
    (root / "var/lib/fake-docker").mkdir(parents=True)
    return root


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "lib-source"
    (src / "nvidia/cuda-12").mkdir(parents=True)
    (src / "nvidia/cuda-12/libvgpu.so").write_bytes(b"\x7fELF stand-in\n")
    return src


def preflight(node: Path, *flags: str, runtime: str | None = "docker") -> tuple[int, dict[str, object], str]:
    """``dm preflight`` on the node (``runtime``: ``--runtime``; ``None`` resolves it from the host)."""
    proc = subprocess.run(
        [
            str(CLI),
            "dm",
            "preflight",
            "--manufacturer=nvidia",
            "--detect-root",
            str(node),
            "--host-root",
            str(node),
            *(["--runtime", runtime] if runtime else []),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout), proc.stderr


def rows(doc: dict[str, object], capability: str) -> list[dict[str, object]]:
    (group,) = doc["accelerators"]  # type: ignore[index]
    return [c for c in group.get("checks") or [] if c["capability"] == capability]


def calls(node: Path) -> list[str]:
    path = node / "var/log/fake-docker.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_probes_measure_the_slice_and_co_tenancy(node: Path, source: Path) -> None:
    rc, doc, err = preflight(node, "--preload-source", str(source))
    assert rc == 0, err
    loaded = rows(doc, "sliced-runtime-loaded")
    assert len(loaded) == 8 and {r["state"] for r in loaded} == {"ok"} and {r["depth"] for r in loaded} == {"measured"}
    assert "libvgpu.so" in loaded[0]["evidence"] and loaded[0]["evidence"].startswith("gpustack-preflight-maps-begin")
    quota = rows(doc, "sliced-quota-in-force")
    assert {r["depth"] for r in quota} == {"measured"} and {r["state"] for r in quota} == {"ok"}
    assert "40779 MiB" in quota[0]["detail"]  # half of the H100's 81559 MiB
    co = rows(doc, "co-tenancy")
    assert {r["state"] for r in co} == {"ok"} and {r["depth"] for r in co} == {"measured"}
    assert {r["depth"] for r in rows(doc, "sidecar-visibility")} == {"simulated"}
    # the library was staged where an allocation mounts it, and stays; the rendered files are gone
    assert (node / "var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so").read_bytes() == b"\x7fELF stand-in\n"
    assert [p.name for p in (node / "var/lib/gpustack/operator/preflight").iterdir()] == ["lock"]
    # the sweep ran before the first probe; 8 accelerators x (1 + 2) probes, never privileged
    log = calls(node)
    assert log[0].startswith("docker ps -aq --filter label=gpustack.ai/preflight=true")
    runs = [c for c in log if c.startswith("docker run ")]
    assert len(runs) == 24
    assert all("--rm --label gpustack.ai/preflight=true --name gpustack-preflight-nvidia-GPU-" in c for c in runs)
    assert not any("--privileged" in c for c in runs) and all("--runtime nvidia" in c for c in runs)
    assert "progress" not in err and "probe gpustack-preflight-nvidia-GPU-" in err  # progress on stderr


def test_a_cap_not_in_force_and_a_missing_limiter_are_unavailable(node: Path, source: Path) -> None:
    (node / "var/lib/fake-docker/no-cap").touch()
    (node / "var/lib/fake-docker/no-preload").touch()
    rc, doc, _ = preflight(node, "--preload-source", str(source))
    assert rc == 1
    quota = rows(doc, "sliced-quota-in-force")[0]
    assert quota["state"] == "unavailable" and "81559 MiB" in quota["reason"] and "not in force" in quota["reason"]
    loaded = rows(doc, "sliced-runtime-loaded")[0]
    assert loaded["state"] == "unavailable" and "/usr/local/vgpu/libvgpu.so" in loaded["reason"]
    assert rows(doc, "co-tenancy")[0]["state"] == "unavailable"


def test_a_probe_that_cannot_start_stops_at_simulated_with_the_reason(node: Path, source: Path) -> None:
    (node / "var/lib/fake-docker/run-fails").touch()
    rc, doc, _ = preflight(node, "--preload-source", str(source))
    assert rc == 1
    row = rows(doc, "sliced-quota-in-force")[0]
    assert row["state"] == "unavailable" and row["depth"] == "simulated" and "pull access denied" in row["reason"]


def test_a_failed_sweep_fails_every_accelerator_and_starts_nothing(node: Path, source: Path) -> None:
    (node / "var/lib/fake-docker/ps").write_text("3f4e2a1b9c8d\n")
    (node / "var/lib/fake-docker/rm-fails").touch()
    rc, doc, _ = preflight(node, "--preload-source", str(source))
    assert rc == 1
    stale = rows(doc, "stale-container-sweep")
    assert len(stale) == 8 and {r["state"] for r in stale} == {"unavailable"}
    assert "permission denied" in stale[0]["reason"] and "docker ps -aq --filter" in stale[0]["reason"]
    assert not [c for c in calls(node) if c.startswith("docker run")]
    assert "stale-container sweep could not be completed" in rows(doc, "sliced-quota-in-force")[0]["detail"]


def test_a_second_run_refuses_before_it_sweeps(node: Path, source: Path) -> None:
    holder = subprocess.Popen(
        [
            str(REPO / ".venv/bin/python"),
            "-c",
            "import sys, time; from gpustack_operator.host import HostRoot; "
            "from gpustack_operator.preflight.lock import acquire; acquire(HostRoot(sys.argv[1])); "
            "print('held', flush=True); time.sleep(60)",
            str(node),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rc, doc, _ = preflight(node, "--preload-source", str(source))
        assert rc == 1
        (group,) = doc["accelerators"]  # type: ignore[index]
        assert group["detection"]["state"] == "unavailable" and "holds this node's lock" in group["detection"]["reason"]
        assert f"pid {holder.pid}" in group["detection"]["reason"]
        assert calls(node) == []  # nothing swept, nothing started
        # --dry-run is exempt
        rc, doc, _ = preflight(node, "--preload-source", str(source), "--dry-run")
        assert doc["accelerators"][0]["detection"]["state"] == "ok"  # type: ignore[index]
    finally:
        holder.kill()
        holder.wait()


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size) for p in root.rglob("*")}


def test_dry_run_writes_nothing_and_emits_every_step(node: Path, source: Path) -> None:
    before = snapshot(node)
    rc, doc, err = preflight(node, "--preload-source", str(source), "--dry-run")
    assert rc == 0, err
    assert snapshot(node) == before  # no library tree, no render files, no lock (checked on the host root)
    row = rows(doc, "sliced-quota-in-force")[0]
    assert row["depth"] == "simulated" and "--dry-run" in row["detail"] and "nvidia/cuda-12" in row["detail"]
    assert row["command"].startswith(f"/usr/sbin/chroot {node} docker run --rm --label gpustack.ai/preflight=true")
    assert "\n" in rows(doc, "co-tenancy")[0]["command"]  # both co-tenancy containers printed


def test_a_tree_that_cannot_be_staged_emits_naming_it(node: Path, tmp_path: Path) -> None:
    rc, doc, _ = preflight(node, "--preload-source", str(tmp_path / "absent"))
    row = rows(doc, "sliced-quota-in-force")[0]
    # nothing staged, nothing on the host: the allocation itself would be refused
    assert rc == 1 and row["state"] == "unavailable" and "is not staged on this node" in row["reason"]
    assert not (node / "var/lib/gpustack/operator/lib").exists()


def test_no_runtime_on_the_host_emits_naming_what_was_probed(node: Path, source: Path) -> None:
    (node / "usr/bin/docker").unlink()
    rc, doc, _ = preflight(node, "--preload-source", str(source), runtime=None)
    row = rows(doc, "sliced-quota-in-force")[0]
    assert rc == 0 and row["depth"] == "simulated" and "emitted" in row["detail"]
    assert "no container runtime can be driven on this host" in row["detail"]
    # no probe, but the library tree was staged -- a host write, so the run took the lock (§2.5), which
    # stays on disk and is released
    assert (node / "var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so").is_file()
    assert (node / "var/lib/gpustack/operator/preflight/lock").is_file()
    acquire(HostRoot(node)).release()
