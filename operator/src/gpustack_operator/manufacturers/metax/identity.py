"""MetaX: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits
from gpustack_operator.manufacturers.respond import Family

IDENTITY = Identity(
    name="metax",
    display_name="MetaX",
    pci_vendor_id="9999",
    resource_name="metax-tech.com/gpu",
    runtime_name="metax",
    accelerator_classes=("03", "0b", "12"),
    kernel_drivers=("metax",),
    partition_kind=None,
    preload="MetaX slices with sysfs sgpu subdevices; it takes no preload library",
    products={},
    preflight=PreflightTraits(
        driver_row="sgpu-mode",
        driver_row_mode="sliced",
        mode_driver="sgpu",
        no_seam={Family.SLICED: "the MetaX responder creates an sGPU subdevice in the real sysfs registry"},
    ),
)
