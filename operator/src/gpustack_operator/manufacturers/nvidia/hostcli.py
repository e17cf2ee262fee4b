"""NVIDIA's host CLI for the preflight cross-check (``nvidia-smi -L``).

``nvidia-smi -L`` prints one line per physical GPU, ``GPU <index>: <name> (UUID: <uuid>)``, and --
with MIG on -- one indented line per MIG device under the GPU that carries it:

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b2c3d4e-0000-1111-2222-333344445555)
      MIG 3g.40gb     Device  0: (UUID: MIG-7a8b9c0d-1111-2222-3333-444455556666)
      MIG 1g.5gb Device 0: (UUID: MIG-GPU-1b2c3d4e-0000-1111-2222-333344445555/1/0)   (R450/R460)

What the detector counts is a physical GPU (NVML's device index), so a GPU is counted by its
``GPU <n>:`` head -- never by a UUID prefix, which legacy drivers, ``(UUID: N/A)`` and boards that
print none at all do not carry -- once per distinct index (a listing with gaps, 0 2 3, is three).
A MIG line is never a GPU. A line that starts like a GPU's but cannot be read (an index no driver
prints, a line cut before its colon) and the driver's "Unable to determine the device handle" line
for a GPU it enumerated and could not open are not counted; the result's ``problem`` names them.
"""

from __future__ import annotations

import re

from gpustack_operator.manufacturers.base import HostCli, HostCount, quote_line, quote_lines

# The head of a GPU line; the index is bounded (NVML indexes are small; 9 digits is past any node),
# so a garbled "GPU 99999999999999999999999:" is an unread line, never a huge int.
_GPU = re.compile(r"[ \t]*GPU[ \t]+([0-9]{1,9})[ \t]*:", re.ASCII)
# What starts like a GPU line (to name it when it cannot be read).
_GPU_LIKE = re.compile(r"[ \t]*GPU(?:[ \t]|[0-9]|$)", re.ASCII)
_MIG = re.compile(r"[ \t]*MIG[ \t]", re.ASCII)
_NO_HANDLE = "Unable to determine the device handle"
_NONE_FOUND = ("No devices were found", "No devices found")


def count_nvidia_smi_l(output: str) -> HostCount:
    """The physical GPUs ``nvidia-smi -L`` lists (see the module docstring). Never raises."""
    indexes: dict[int, None] = {}
    unread: list[str] = []
    anything = False
    for line in output.splitlines():
        if not line.strip():
            continue
        anything = True
        if _MIG.match(line):
            continue
        if head := _GPU.match(line):
            indexes.setdefault(int(head.group(1)))
        elif _GPU_LIKE.match(line) or _NO_HANDLE in line:
            unread.append(line)
    seen = tuple(f"GPU {i}" for i in sorted(indexes))
    problem = None
    if unread:
        quoted = quote_lines(unread)
        problem = (
            f"nvidia-smi -L printed {len(unread)} line(s) for a GPU that could not be read as one "
            f"(not counted): {quoted}"
        )
    elif not seen and anything and not any(n in output for n in _NONE_FOUND):
        first = next(line for line in output.splitlines() if line.strip())
        problem = (
            "nvidia-smi -L printed no line of the form 'GPU <n>: <name>', so it listed none; "
            f"it began {quote_line(first)}"
        )
    return HostCount(seen=seen, problem=problem)


HOST_CLI = HostCli(
    name="nvidia-smi",
    args=("-L",),
    count=count_nvidia_smi_l,
    mounts=(
        "/dev/nvidiactl",
        "/dev/nvidia<N> for each accelerator",
        "the NVIDIA container runtime (--runtime nvidia, or --gpus all under nerdctl), or the "
        "toolkit libraries it would have injected",
    ),
)
