"""AMD's host CLI for the preflight cross-check (``rocm-smi --showuniqueid``)."""

from gpustack_operator.manufacturers.base import HostCli

# AMD has no container runtime that injects its user space, so the libraries are named beside the
# device nodes: with /dev mounted whole a container still detects nothing without /opt/rocm.
HOST_CLI = HostCli(
    name="rocm-smi",
    args=("--showuniqueid",),
    match="Unique ID:",
    mounts=(
        "/dev/kfd",
        "/dev/dri",
        "the ROCm user-space libraries (/opt/rocm), which nothing injects for you",
    ),
    lib_dir="/opt/rocm/lib",
)
