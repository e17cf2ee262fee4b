"""Ascend: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, PreloadLibrary, ProbeTraits

IDENTITY = Identity(
    name="ascend",
    display_name="Ascend",
    pci_vendor_id="19e5",
    resource_name="huawei.com/npu",
    runtime_name="ascend",
    accelerator_classes=("12",),
    kernel_drivers=("devdrv_device_driver",),  # what the Atlas 800T A2 NPUs bind to
    partition_kind=None,
    # vcann-rt per CANN major and SoC family; major 8 when unknown (reference rules §9)
    preload=PreloadLibrary(directory="ascend", runtime="cann", default_major=8, per_family=True),
    products={
        "d100": "Ascend310",
        "d500": "Ascend310P",
        "d801": "Ascend910",
        "d802": "Ascend910B",
    },
    preflight=PreflightTraits(
        driver_row="container-share",
        driver_row_mode="sliced",
        mode_driver="container-share",
        established=True,
        container_probe=True,
        probe=ProbeTraits(
            image="quay.io/ascend/cann:{runtime_major}-{family}",
            reader="enpu-monitor",
            cap="npu_info.config, key memory-quota",
            vendor_runtime="ascend",
        ),
    ),
)
