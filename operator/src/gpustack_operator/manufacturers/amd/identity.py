"""AMD: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, PreloadLibrary, ProbeTraits

IDENTITY = Identity(
    name="amd",
    display_name="AMD",
    pci_vendor_id="1002",
    resource_name="amd.com/gpu",
    runtime_name="amd",
    accelerator_classes=("03", "12"),  # Instinct MI300 is a processing accelerator (1200)
    kernel_drivers=("amdgpu",),
    partition_kind=None,
    # one artifact for every ROCm version
    preload=PreloadLibrary(
        directory="amd", no_arm64="ROCm publishes no aarch64 user space: the arm64 image carries no AMD shim"
    ),
    # Device ids that name one product whatever the revision (libdrm amdgpu.ids). Radeon ids are
    # shared across products (747e is the RX 7800 XT at revision c8 and the RX 7700 XT at ff), so
    # they are named by (device, revision) in products.py and are not listed here.
    products={
        "74a1": "AMD Instinct MI300X",
        "74a0": "AMD Instinct MI300A",
        "740f": "AMD Instinct MI210",
        "740c": "AMD Instinct MI250X / MI250",
        "738c": "AMD Instinct MI100",
    },
    preflight=PreflightTraits(
        driver_row="cu-mask-topology",
        driver_row_mode="sliced",
        container_probe=True,
        probe=ProbeTraits(image="ubuntu:24.04", reader="rocm-monitor", cap="VROCM_DEVICE_MEMORY_LIMIT_<i>"),
    ),
)
