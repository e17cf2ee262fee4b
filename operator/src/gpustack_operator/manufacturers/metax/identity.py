"""MetaX: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits

# The seam through which the sliced responder's sGPU control writes go (``create``, ``sched_class``):
# preflight records them instead of making them (RespondContext.seams).
SYSFS_SEAM = "metax-sgpu-write"

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
        recorded_writes=SYSFS_SEAM,
    ),
)
