"""AMD's host CLI for the preflight cross-check (``rocm-smi --showuniqueid``).

``rocm-smi --showuniqueid`` prints one ``Unique ID`` line per GPU between its banner rules::

    ============================ ROCm System Management Interface ============================
    ====================================== Unique ID =======================================
    GPU[0]		: Unique ID: 0x18f68e602b8a790f
    GPU[1]          : Unique ID: N/A
    ==========================================================================================
    ================================== End of ROCm SMI Log ===================================

The index is rocm-smi's own (one per KFD GPU node, what the detector counts); older releases pad
the ``GPU[i]`` column with tabs, newer ones with spaces, and ``WARNING:`` lines may come first (a
GPU in a low-power state, an unsupported query). A GPU whose Unique ID reads ``N/A`` (consumer cards,
some Instinct firmware) is still one the host sees, so it counts: a GPU is a distinct ``GPU[i]``
carrying a Unique ID line, whatever its value. A ``GPU[...]`` Unique ID line whose index cannot be
read is not counted and is named in the result's ``problem``.
"""

from __future__ import annotations

import re

from gpustack_operator.manufacturers.base import HostCli, HostCount, quote_line, quote_lines

# "GPU[<index>] <padding> : Unique ID: <value>"; the index is bounded (9 digits is past any node).
_UNIQUE_ID = re.compile(r"\s*GPU\[([0-9]{1,9})\]\s*:\s*Unique ID\s*:", re.ASCII | re.IGNORECASE)
_GPU_LIKE = re.compile(r"\s*GPU\[", re.ASCII)
_FIELD = "unique id"
_BANNERS = ("ROCm System Management Interface", "End of ROCm SMI Log", "Unique ID")


def count_rocm_smi_showuniqueid(output: str) -> HostCount:
    """The GPUs ``rocm-smi --showuniqueid`` lists (see the module docstring). Never raises."""
    indexes: dict[int, None] = {}
    unread: list[str] = []
    anything = False
    for line in output.splitlines():
        if not line.strip():
            continue
        anything = True
        if head := _UNIQUE_ID.match(line):
            indexes.setdefault(int(head.group(1)))
        elif _GPU_LIKE.match(line) and _FIELD in line.lower():
            unread.append(line)
    seen = tuple(f"GPU[{i}]" for i in sorted(indexes))
    problem = None
    if unread:
        quoted = quote_lines(unread)
        problem = (
            f"rocm-smi --showuniqueid printed {len(unread)} Unique ID line(s) whose GPU index could not be "
            f"read (not counted): {quoted}"
        )
    elif not seen and anything and not any(b in output for b in _BANNERS):
        first = next(line for line in output.splitlines() if line.strip())
        problem = (
            "rocm-smi --showuniqueid printed neither its banner nor a 'GPU[<n>] : Unique ID:' line, so it "
            f"listed none; it began {quote_line(first)}"
        )
    return HostCount(seen=seen, problem=problem)


# AMD has no container runtime that injects its user space, so the libraries are named beside the
# device nodes: with /dev mounted whole a container still detects nothing without /opt/rocm.
HOST_CLI = HostCli(
    name="rocm-smi",
    args=("--showuniqueid",),
    count=count_rocm_smi_showuniqueid,
    # What this detector reads, and only that: the amdgpu KFD topology and DRM entries in sysfs (it
    # loads no ROCm library to count the GPUs, so /opt/rocm is never the reason it sees fewer).
    mounts=(
        "/sys/class/kfd",
        "/sys/class/drm",
        "the host's /sys (-v /sys:/sys), where amdgpu publishes the KFD topology the detect pass reads",
    ),
    # /opt/rocm/lib dangling (the spec's second mount) costs this detector only the ROCm version
    # label, never an accelerator, so it is not named as why the container sees fewer.
    lib_dir=None,
)
