"""Cambricon: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits
from gpustack_operator.manufacturers.respond import Family

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
        no_seam={Family.SLICED: "the Cambricon responder creates an sMLU instance through the real CNDev"},
    ),
)
