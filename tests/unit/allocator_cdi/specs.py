"""Real-shaped CDI specifications and containerd configurations for the resolver's tests.

The NVIDIA spec is the shape ``nvidia-ctk cdi generate`` writes: one device per GPU under its index,
its UUID and ``all`` (only the UUID is what the allocator grants), top-level ``containerEdits`` with
the driver libraries and hooks."""

from __future__ import annotations

import json
from pathlib import Path

KIND = "nvidia.com/gpu"
GPU_A = "GPU-4a2e7c1d-8f3b-4c6e-9d2a-1b5f0e7c3a90"
GPU_B = "GPU-9c1b2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e"
GPU_C = "GPU-00000000-1111-2222-3333-444444444444"


def nvidia_yaml(*uuids: str, kind: str = KIND, version: str | None = "0.5.0") -> str:
    """A generated NVIDIA spec naming ``uuids`` (by index, by UUID) and ``all``."""
    head = [f"cdiVersion: {version}"] if version is not None else []
    head.append(f"kind: {kind}")
    lines = [*head, "devices:"]
    for index, uuid in enumerate(uuids):
        for name in (str(index), uuid):
            lines += [
                f"- name: {name!r}" if name.isdigit() else f"- name: {name}",
                "  containerEdits:",
                "    deviceNodes:",
                f"    - path: /dev/nvidia{index}",
            ]
    lines += [
        "- name: all",
        "  containerEdits:",
        "    deviceNodes:",
        *(f"    - path: /dev/nvidia{i}" for i in range(len(uuids))),
        "containerEdits:",
        "  env:",
        "  - NVIDIA_VISIBLE_DEVICES=void",
        "  deviceNodes:",
        "  - path: /dev/nvidiactl",
        "  - path: /dev/nvidia-uvm",
        "  hooks:",
        "  - hookName: createContainer",
        "    path: /usr/bin/nvidia-cdi-hook",
        "    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]",
        "  mounts:",
        "  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "    options: [ro, nosuid, nodev, bind]",
    ]
    return "\n".join(lines) + "\n"


def nvidia_json(*uuids: str, kind: str = KIND) -> str:
    devices = [
        {"name": name, "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}}
        for i, uuid in enumerate(uuids)
        for name in (str(i), uuid)
    ]
    doc = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": devices,
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
    }
    return json.dumps(doc, indent=2)


AMD_YAML = """cdiVersion: 0.6.0
kind: amd.com/gpu
devices:
- name: gpu0
  containerEdits:
    deviceNodes:
    - path: /dev/dri/renderD128
"""

# containerd 2.x: version 3, the CRI runtime plugin table, CDI on by default.
CONTAINERD_V3 = """version = 3

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""

# containerd 1.7: version 2, the grpc CRI plugin, CDI off unless enable_cdi.
CONTAINERD_V2 = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""

CONTAINERD_V2_CDI = CONTAINERD_V2.replace(
    '[plugins."io.containerd.grpc.v1.cri"]\n', '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
)

# What nvidia-ctk runtime configure --set-as-default leaves behind.
CONTAINERD_V2_NVIDIA = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def write(root: Path, files: dict[str, str | None]) -> Path:
    """Write ``files`` (host path → text) under ``root``; ``None`` makes a directory of that name (a
    path that cannot be read as a file)."""
    for host_path, text in files.items():
        path = root / host_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.mkdir(exist_ok=True)
        else:
            path.write_text(text)
    return root
