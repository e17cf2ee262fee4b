"""NVIDIA: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, PreloadLibrary, ProbeTraits

IDENTITY = Identity(
    name="nvidia",
    display_name="NVIDIA",
    pci_vendor_id="10de",
    resource_name="nvidia.com/gpu",
    runtime_name="nvidia",
    accelerator_classes=("03",),
    kernel_drivers=("nvidia",),  # NVSwitches bind nvidia-nvswitch, and are no accelerator
    partition_kind="mig",
    # HAMi-core per CUDA major; major 12 when the runtime version is unknown (reference rules §5)
    preload=PreloadLibrary(directory="nvidia", runtime="cuda", default_major=12),
    products={
        "2330": "NVIDIA H100 80GB HBM3",
        "2331": "NVIDIA H100 PCIe",
        "2335": "NVIDIA H200",
        "2321": "NVIDIA H100 NVL",
        "20b0": "NVIDIA A100-SXM4-40GB",
        "20b2": "NVIDIA A100-SXM4-80GB",
        "20b5": "NVIDIA A100 80GB PCIe",
        "20f1": "NVIDIA A100-PCIE-40GB",
        "2236": "NVIDIA A10",
        "2237": "NVIDIA A10G",
        "26b5": "NVIDIA L40",
        "26b9": "NVIDIA L40S",
        "27b8": "NVIDIA L4",
        "1eb8": "Tesla T4",
        "1db4": "Tesla V100-PCIE-16GB",
        "1db5": "Tesla V100-SXM2-16GB",
        "2204": "NVIDIA GeForce RTX 3090",
        "2684": "NVIDIA GeForce RTX 4090",
    },
    preflight=PreflightTraits(
        driver_row="mig-partitioning",
        driver_row_mode="partitioned",
        mode_driver="mig",
        container_probe=True,
        probe=ProbeTraits(
            image="nvidia/cuda:{runtime_major}",
            reader="nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits",
            cap="CUDA_DEVICE_MEMORY_LIMIT_<i>",
            vendor_runtime="nvidia",
            nerdctl_gpus=True,
        ),
    ),
)
