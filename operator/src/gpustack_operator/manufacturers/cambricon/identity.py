"""Cambricon: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits

# The seam the sliced responder's sMLU profile/instance creation goes through: preflight has the instance
# described (named, given the node the driver would give it) instead of made (RespondContext.seams).
SMLU_SEAM = "cambricon-smlu-create"

IDENTITY = Identity(
    name="cambricon",
    display_name="Cambricon",
    pci_vendor_id="cabc",
    resource_name="cambricon.com/mlu",
    runtime_name="cambricon",
    accelerator_classes=("12", "03", "0b"),
    kernel_drivers=("cambricon_drv",),  # the module name (cambricon_drv.ko); not checked on hardware
    partition_kind=None,
    preload="Cambricon slices with cnDev sMLU profiles in the driver; it takes no preload library",
    products={
        "0370": "MLU370",
    },
    preflight=PreflightTraits(
        driver_row="smlu-mode",
        driver_row_mode="sliced",
        mode_driver="smlu",
        established=True,
        recorded_writes=SMLU_SEAM,
    ),
)
