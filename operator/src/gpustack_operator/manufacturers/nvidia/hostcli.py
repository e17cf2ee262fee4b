"""NVIDIA's host CLI for the preflight cross-check (``nvidia-smi -L``)."""

from gpustack_operator.manufacturers.base import HostCli

# Matched on the UUID's own prefix: nvidia-smi -L nests a line per MIG partition ("MIG-…") under the
# card that carries it, and only a physical device's UUID starts with "GPU-".
HOST_CLI = HostCli(
    name="nvidia-smi",
    args=("-L",),
    match="(UUID: GPU-",
    mounts=(
        "/dev/nvidiactl",
        "/dev/nvidia<N> for each accelerator",
        "the NVIDIA container runtime (--runtime nvidia, or --gpus all under nerdctl), or the "
        "toolkit libraries it would have injected",
    ),
)
