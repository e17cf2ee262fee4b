"""Hygon: who the manufacturer is (defaults; every value overridable, supplement §4.4)."""

from gpustack_operator.manufacturers.base import Identity, PreflightTraits, ProbeTraits

IDENTITY = Identity(
    name="hygon",
    display_name="Hygon",
    pci_vendor_id="1d94",
    resource_name="hygon.com/dcu",
    runtime_name="hygon",
    accelerator_classes=("03", "0b", "12"),  # Z100L is 0380, the K100 family 0b40 (co-processor)
    kernel_drivers=("hydcu", "hycu"),  # hydcu, renamed hycu in newer DCU driver releases
    partition_kind="mig",
    preload="Hygon slices through the host DTK/hyhal runtime (vdev.conf); it takes no preload library",
    # DCU PCI device ids as Hygon's installation guides list them (lspci: ZIFANG / KONGMING), and
    # the names the DCU software stack and hy-smi users call the cards by.
    products={
        "55b7": "Z100L",
        "62b7": "K100",
        "6210": "K100_AI",
    },
    preflight=PreflightTraits(
        container_probe=True,
        # The kfd vgpu record's path and its ``mem`` line are an assumption (the spec names "the per-slice
        # record the driver publishes under the kfd vgpu sysfs" and no path): docs/preflight.md says so.
        probe=ProbeTraits(
            image=None,
            reader=(
                "mkdir -p /tmp/gpustack-preflight && { /opt/dtk/bin/BandwidthTest >/dev/null 2>&1 & "
                "echo $! >/tmp/gpustack-preflight/pid; sleep 2; "
                "cat /sys/devices/virtual/kfd/kfd/vgpu/*/mem 2>/dev/null | awk '{print $NF}'; "
                'kill "$(cat /tmp/gpustack-preflight/pid)" 2>/dev/null; }'
            ),
            cap="vdev0.conf, key mem",
            no_image=(
                "no default is claimed for a Hygon family; the image needs sh, cat, grep, awk, mkdir, sleep and "
                "kill and a C library that loads a glibc binary (the probe runs /opt/dtk's BandwidthTest)"
            ),
            record="/sys/devices/virtual/kfd/kfd/vgpu",
        ),
        no_driver_read_note=(
            "Hygon's allocator reads no driver before it hands a slice out, so there is no driver-read row: "
            "its slicing runtime is the vendor's own DTK/hyhal user space, answered by the container probe"
        ),
    ),
)
