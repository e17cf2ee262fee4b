"""Iluvatar: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreloadLibrary

IDENTITY = Identity(
    name="iluvatar",
    display_name="Iluvatar",
    pci_vendor_id="1e3e",
    resource_name="iluvatar.com/gpu",
    runtime_name="iluvatar",
    accelerator_classes=("03", "0b", "12"),
    kernel_drivers=("iluvatar",),  # not checked on hardware
    partition_kind=None,
    # the CUDA 12 HAMi-core build, one flat directory (no runtime-version subdivision)
    preload=PreloadLibrary(directory="iluvatar"),
    products={},
)
