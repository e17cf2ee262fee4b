"""NVIDIA usage sample over NVML (supplement §3.7 ``device-manager monitor``).

Same gate and failure semantics as detection (:mod:`.detect`): no card on the bus, no library or a
library that will not initialise → an empty sample; a failed device count → ``Unmeasured``; a device
whose handle or UUID cannot be read is left out. Each figure is read on its own: a call that fails
leaves that one figure ``None`` (never zero) and the rest of the device's sample stands.

Figures: memory total and used (MiB, ``nvmlDeviceGetMemoryInfo_v2``, v1 on older drivers);
memory utilisation = used / total (the reference's figure, not NVML's memory-controller busy time);
cores utilisation = ``nvmlDeviceGetUtilizationRates().gpu`` (NVML answers "Not Supported" on a card
in MIG mode); GPU temperature (°C); power (``nvmlDeviceGetPowerUsage`` mW → W, truncated);
``unhealthy`` when the volatile uncorrected DRAM ECC counter is non-zero.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpustack_operator.manufacturers.base import (
    AcceleratorMetrics,
    DetectContext,
    Detected,
    Measured,
    MonitorOutcome,
    Unmeasured,
)
from gpustack_operator.manufacturers.nvidia import values
from gpustack_operator.manufacturers.nvidia.detect import pci_gate
from gpustack_operator.manufacturers.nvidia.nvml import Handle, Nvml, NvmlError, NvmlUnavailableError, open_nvml

log = logging.getLogger(__name__)


def monitor(ctx: DetectContext) -> MonitorOutcome:
    gate = pci_gate(ctx)
    if isinstance(gate, Unmeasured):
        return gate
    if isinstance(gate, Detected):
        return Measured([])
    try:
        with open_nvml(ctx.view) as nvml:
            return Measured(sample_devices(nvml))
    except NvmlUnavailableError as exc:
        log.info("nvidia: %s; nothing to sample", exc.reason)
        return Measured([])
    except NvmlError as exc:
        return Unmeasured(f"NVML initialised but could not enumerate the devices: {exc}")


def sample_devices(nvml: Nvml) -> list[AcceleratorMetrics]:
    samples = []
    for i in range(nvml.device_count()):
        try:
            h = nvml.handle(i)
            uuid = nvml.uuid(h)
        except NvmlError as exc:
            log.warning("nvidia: left the device at NVML index %d out of the sample: %s", i, exc)
            continue
        samples.append(sample_device(nvml, h, uuid))
    return samples


def sample_device(nvml: Nvml, h: Handle, uuid: str) -> AcceleratorMetrics:
    metrics = AcceleratorMetrics(id=uuid)
    memory = _reading(uuid, lambda: nvml.memory(h))
    if memory is not None:
        metrics.memory = values.mib(memory.total)
        metrics.memory_usage = values.mib(memory.used)
        metrics.memory_utilization = values.percent(memory.used, memory.total)
    utilization = _reading(uuid, lambda: nvml.utilization(h))
    if utilization is not None:
        metrics.cores_utilization = utilization[0]
    metrics.temperature = _reading(uuid, lambda: nvml.temperature(h))
    power = _reading(uuid, lambda: nvml.power_usage_mw(h))
    metrics.power_usage = None if power is None else values.watts(power)
    metrics.unhealthy = bool(_reading(uuid, lambda: nvml.uncorrected_volatile_dram_errors(h)))
    return metrics


def _reading[T](uuid: str, read: Callable[[], T]) -> T | None:
    try:
        return read()
    except NvmlError as exc:
        (log.debug if exc.unsupported else log.warning)("nvidia: %s: %s", uuid, exc)
        return None
