"""MThreads: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity

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
)
