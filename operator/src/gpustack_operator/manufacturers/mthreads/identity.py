"""MThreads: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits

IDENTITY = Identity(
    name="mthreads",
    display_name="MThreads",
    pci_vendor_id="1ed5",
    resource_name="mthreads.com/gpu",
    runtime_name="mthreads",
    accelerator_classes=("03", "0b", "12"),
    kernel_drivers=("mtgpu",),
    partition_kind=None,
    preload="MThreads slices with the host sGPU kernel module; it takes no preload library",
    products={},
    preflight=PreflightTraits(
        no_driver_read_note=(
            "Moore Threads' allocator reads no driver before it hands a slice out, so there is no "
            "driver-read row: the slice is the injection, enforced by the MT container runtime -- if a slice "
            "does not work, look there and at the resource request"
        ),
    ),
)
