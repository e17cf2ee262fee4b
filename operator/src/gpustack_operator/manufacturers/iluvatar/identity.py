"""Iluvatar: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, PreloadLibrary

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
    preflight=PreflightTraits(
        no_driver_read_note=(
            "Iluvatar's allocator reads no driver before it hands a slice out, so there is no driver-read "
            "row: the slice is the injection (IX_VISIBLE_DEVICES and the quota it carries), enforced by "
            "ix-container-runtime -- if a slice does not work, look there and at the resource request"
        ),
    ),
)
