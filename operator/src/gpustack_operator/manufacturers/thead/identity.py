"""T-Head: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity

IDENTITY = Identity(
    name="thead",
    display_name="T-Head",
    pci_vendor_id="1ded",
    resource_name="alibabacloud.com/ppu",
    runtime_name=None,
    accelerator_classes=("03", "0b", "12"),
    partition_kind="mig",
    products={},
)
