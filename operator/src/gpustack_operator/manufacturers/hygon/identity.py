"""Hygon: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity

IDENTITY = Identity(
    name="hygon",
    display_name="Hygon",
    pci_vendor_id="1d94",
    resource_name="hygon.com/dcu",
    runtime_name="hygon",
    accelerator_classes=("03", "0b", "12"),
    partition_kind="mig",
    products={},
)
