"""Hygon DCU detection and monitor, from the hydcu driver's sysfs.

Hygon's DCU driver (``hydcu``, ``hycu`` on newer releases) is a fork of ``amdgpu`` and publishes the
same KFD topology and DRM device files, so the shared reader (:mod:`..kfd`) serves it unchanged.
What is Hygon's own: the product names (by PCI device id), where the driver and DTK versions are
recorded, and the logical-slicing offer.
"""

from __future__ import annotations

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, MonitorOutcome

# hy-virtual slicing (vdev.conf + DTK/hyhal): at most 4 slices per DCU (the product default,
# reference rules §9 / supplement §1.3), and each slice gets a disjoint CU bitmask, so compute is
# partitioned rather than overcommitted.
LOGICAL_SLICED = AcceleratorLogicalSliced(count=4, cores_percentage_overcommit=False)

# The driver module is hydcu, renamed hycu in newer DCU driver releases.
DRIVER_VERSION_FILES = ["/sys/module/hycu/version", "/sys/module/hydcu/version"]

# DTK is installed at /opt/dtk (a link to /opt/dtk-<release>); its env.sh exports ROCM_PATH.
DTK_VARIABLES = ("ROCM_HOME", "ROCM_PATH")
DTK_DEFAULT = ("/opt/dtk", "/opt/rocm")


def name_of(ctx: DetectContext, acc: kfd.KfdAccelerator) -> str:
    """The manufacturer's product table by PCI device id, then the board's ``product_name``."""
    device = f"{acc.gpu.device_id:04x}"
    return ctx.manufacturer.identity.products.get(device) or acc.drm.product_name or ""


def driver_version(host: HostRoot) -> str | None:
    return kfd.first_line(host, DRIVER_VERSION_FILES)


def runtime_version(host: HostRoot) -> str | None:
    """The DTK release from ``<ROCM_HOME|ROCM_PATH|/opt/dtk|/opt/rocm>/.info/version``, ``major.minor``."""
    return kfd.info_version(host, kfd.toolkit_homes(DTK_VARIABLES, DTK_DEFAULT))


VENDOR = kfd.KfdVendor(
    name_of=name_of,
    family_of=kfd.family_name,
    driver_version=driver_version,
    runtime_version=runtime_version,
    logical_sliced=LOGICAL_SLICED,
    # the reference samples RSMI's current temperature of the first sensor (edge)
    temperature_labels=("edge", "junction"),
)


def detect(ctx: DetectContext) -> DetectOutcome:
    return kfd.detect(ctx, VENDOR)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    return kfd.monitor(ctx, VENDOR)
