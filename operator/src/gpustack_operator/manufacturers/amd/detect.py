"""AMD detection and monitor, from the amdgpu driver's sysfs (KFD topology + DRM device).

Everything detection needs is published by ``amdgpu`` in sysfs (see :mod:`..kfd`), so no ROCm
library is loaded: the card's identity is the KFD ``unique_id`` in the form ROCr and
``ROCR_VISIBLE_DEVICES`` use (``GPU-`` + 16 hex digits), its shape (CUs, shader engines, XCCs, gfx
target) is what HSA derives from the same file. What is AMD's own here: how a card is named, the
family label, where the driver and ROCm versions are recorded, and the logical-slicing offer. On an
arm64 node there is no AMD accelerator (:mod:`..arch`): ``Detected([])`` with the reason.
"""

from __future__ import annotations

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import AcceleratorLogicalSliced
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.amd.products import host_tables, marketing_name
from gpustack_operator.manufacturers.arch import absent_on_arm64
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, Measured, MonitorOutcome

# AMD has no partitioning mode the operator drives, so logical slicing is unconditional. The count
# is the reference's deliberately loose token pool (128, as NVIDIA's and T-Head's; a slice is bound
# by its memory budget), and cores overcommit because CU masks may overlap and tenants sharing an
# overlap divide it (supplement §3.7: RX 7800 XT → count 128, coresPercentageOvercommit true).
LOGICAL_SLICED = AcceleratorLogicalSliced(count=128, cores_percentage_overcommit=True)

# supplement §4.5: ROCM_HOME, then ROCM_PATH, default /opt/rocm
ROCM_VARIABLES = ("ROCM_HOME", "ROCM_PATH")
ROCM_DEFAULT = ("/opt/rocm",)


def name_of(ctx: DetectContext, acc: kfd.KfdAccelerator) -> str:
    """libdrm's marketing name for (device, revision) — the host's ``amdgpu.ids``, then the built-in
    rows — then the manufacturer's device-id table, then the board's FRU ``product_name``. Empty when
    none names the card (the preflight then reports it unnamed rather than inventing a name)."""
    device = f"{acc.gpu.device_id:04x}"
    name = marketing_name(host_tables(ctx.view), device, acc.drm.revision)
    if name:
        return name
    return ctx.manufacturer.identity.products.get(device) or acc.drm.product_name or ""


def driver_version(host: HostRoot) -> str | None:
    """``/sys/module/amdgpu/version``: present for AMD's DKMS driver, absent for the kernel's own
    (whose version is the kernel's; the label is then omitted)."""
    return kfd.first_line(host, ["/sys/module/amdgpu/version"])


def runtime_version(host: HostRoot) -> str | None:
    """The ROCm release from ``<ROCM_HOME|ROCM_PATH|/opt/rocm>/.info/version`` as ``major.minor``."""
    return kfd.info_version(host, kfd.toolkit_homes(ROCM_VARIABLES, ROCM_DEFAULT))


VENDOR = kfd.KfdVendor(
    name_of=name_of,
    family_of=kfd.family_name,
    driver_version=driver_version,
    runtime_version=runtime_version,
    logical_sliced=LOGICAL_SLICED,
    # the reference samples the hotspot (junction) temperature; MI300 has no edge sensor at all
    temperature_labels=("junction", "edge"),
)


# supplement "Where the preload libraries come from": no AMD node on arm64 (see ..arch)
NOT_ON_ARM64 = "ROCm publishes no aarch64 user space (the detector's libraries do not load there)"


def detect(ctx: DetectContext) -> DetectOutcome:
    return absent_on_arm64(ctx, NOT_ON_ARM64) or kfd.detect(ctx, VENDOR)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    if absent_on_arm64(ctx, NOT_ON_ARM64) is not None:
        return Measured([])
    return kfd.monitor(ctx, VENDOR)
