"""What a fixture node carries beside its sysfs and vendor libraries, installed with the stand-ins
(``python -m tests.stubs.build``; git-ignored, like them):

* its **device nodes** -- ``/dev/kfd`` and one ``card``/``renderD`` pair per DRM device (AMD, Hygon,
  MetaX, whose sysfs lists them), ``/dev/mxcd`` (MetaX), one ``/dev/cambricon_dev<N>`` per MLU. Regular
  files stand for them: the responders check a node exists, and nothing here opens one. (T-Head's
  responder checks each node's minor, so its nodes are real character devices made by the tests that
  need them; the e2e test's ``thead_node``.)
* the **operator image's preload-library tree** at ``/opt/gpustack/lib`` -- the node view a preflight
  container has (the image's own files plus its mounts), from which preflight stages the tree onto the
  host. Stand-in files under the real names the responders mount.
* the **Ascend Docker Runtime installer's record** on the Atlas A5 node (MindCluster 26.0.0), which
  its ``ascend-docker-runtime`` row reads on the host.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def _drm(cards: int) -> list[str]:
    return [f"/dev/dri/card{n}" for n in range(1, cards + 1)] + [
        f"/dev/dri/renderD{127 + n}" for n in range(1, cards + 1)
    ]


DEVICE_NODES: dict[str, list[str]] = {
    "mi300x-8x": ["/dev/kfd", *_drm(8)],
    "radeon-7800xt": ["/dev/kfd", *_drm(1)],
    "hygon-k100": ["/dev/kfd", *_drm(4)],
    "hygon-k100-mig": ["/dev/kfd", *_drm(4)],
    "metax-c500": ["/dev/mxcd", *_drm(8)],
    "mixed-cambricon-metax": ["/dev/mxcd", *_drm(2), "/dev/cambricon_dev0", "/dev/cambricon_dev1"],
    "mlu370-x8": [f"/dev/cambricon_dev{n}" for n in range(8)],
}

# the image's tree: <manufacturer>[/<runtime-subdir>]/<file>, every file a responder mounts
IMAGE_TREE = (
    "nvidia/cuda-12/libvgpu.so",
    "nvidia/cuda-13/libvgpu.so",
    "ascend/cann-8-910b/libvruntime.so",
    "ascend/cann-9-950/libvruntime.so",
    "amd/libvrocm.so",
    "amd/rocm-cumask-check",
    "amd/rocm-monitor",
    "iluvatar/libvgpu.so",
    "thead/hggc_quota.so",
    "thead/hgml_dlsym_hook.so",
    "thead/ppu-monitor",
)
IMAGE_LIB = "opt/gpustack/lib"

HOST_FILES: dict[str, dict[str, str]] = {
    "ascend-950pr-v2": {
        "usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info": "version=v26.0.0\n",
    },
}


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    path.chmod(mode)


HGML_DATA = "usr/local/PPU_SDK/lib/libhgml.so.fixture"


def _mkchar(path: Path, major: int, minor: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
            return
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # not root: the T-Head rows then name the missing node
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def _thead_nodes(node: Path) -> None:
    data = node / HGML_DATA
    if not data.is_file():
        return
    for control in ("dev/alixpu", "dev/alixpu_ctl"):
        _mkchar(node / control, 241, 0)
    for line in data.read_text().splitlines():
        key, _, value = line.partition("=")
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "device" and parts[2] == "minor" and value.isdigit():
            _mkchar(node / f"dev/alixpu_ppu{int(parts[1])}", 240, int(value))


def install(hosts_dir: Path) -> None:
    """Install the extras into every fixture node under ``hosts_dir`` (idempotent)."""
    for node in sorted(p for p in hosts_dir.iterdir() if p.is_dir()):
        for dev in DEVICE_NODES.get(node.name, []):
            _write(node / dev.lstrip("/"), "")
        _thead_nodes(node)
        if (node / "sys").is_dir():
            for rel in IMAGE_TREE:
                executable = not rel.endswith(".so")
                text = "#!/bin/sh\n" if executable else f"stand-in for the image's {rel}\n"
                _write(node / IMAGE_LIB / rel, text, 0o755 if executable else 0o644)
        for rel, text in HOST_FILES.get(node.name, {}).items():
            _write(node / rel, text)
