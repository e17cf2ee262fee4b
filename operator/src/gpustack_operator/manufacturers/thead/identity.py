"""T-Head: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, PreloadLibrary, ProbeTraits

IDENTITY = Identity(
    name="thead",
    display_name="T-Head",
    pci_vendor_id="1ded",
    resource_name="alibabacloud.com/ppu",
    runtime_name=None,
    accelerator_classes=("03", "0b", "12"),
    kernel_drivers=("alixpu",),  # the driver behind /dev/alixpu_ppu<N>; not checked on hardware
    partition_kind="mig",
    # built from the operator's own sources
    preload=PreloadLibrary(
        directory="thead", no_arm64="the PPU SDK is x86_64-only: the arm64 image carries no T-Head shim"
    ),
    products={},
    preflight=PreflightTraits(
        driver_row="mig-partitioning",
        driver_row_mode="partitioned",
        container_probe=True,
        probe=ProbeTraits(
            image=None,
            reader="ppu-monitor",
            cap="HGGC_DEVICE_MEMORY_LIMIT_<i>",
            no_image=(
                "no default is claimed for a PPU family: the workload container brings its own SDK and there is "
                "no generation to match an image against"
            ),
        ),
    ),
)
