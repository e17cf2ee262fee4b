"""Ascend's host CLI for the preflight cross-check (``npu-smi info -l``)."""

from gpustack_operator.manufacturers.base import HostCli

HOST_CLI = HostCli(
    name="npu-smi",
    args=("info", "-l"),
    match="NPU ID",
    mounts=(
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/davinci<N> for each accelerator",
        "/usr/local/Ascend/driver",
    ),
)
