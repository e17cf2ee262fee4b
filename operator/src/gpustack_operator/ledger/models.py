"""The ``Devices`` custom resource (group ``worker.gpustack.ai``), spec side (supplement §9.1).

``device-manager detect`` prints exactly these groups, so its output is diffable with
``kubectl get devices <node> -o yaml``. Field names are the CRD's camelCase JSON names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    """Base for every wire model: camelCase on the wire, snake_case in Python, no stray keys."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def wire(self) -> dict[str, object]:
        """The JSON/YAML shape: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class DeviceTopology(CamelModel):
    pci_bus_id: str = ""
    pci_root_id: str | None = None
    pci_class: str | None = None
    numa_affinity: str = ""
    cpu_affinity: str = ""
    pci_switches: list[str] | None = None


class AcceleratorLogicalSliced(CamelModel):
    cores_percentage_overcommit: bool = False
    count: int = 0


class AcceleratorPlacement(CamelModel):
    start: int
    length: int


class AcceleratorPhysicalSlicedProfile(CamelModel):
    name: str
    memory_mib: int = 0
    compute_slices: int = 0
    memory_slices: int = 0
    count: int = 0
    placements: list[AcceleratorPlacement] = Field(default_factory=list)


class AcceleratorPhysicalSliced(CamelModel):
    profiles: list[AcceleratorPhysicalSlicedProfile] = Field(default_factory=list)
    count: int = 0


class AcceleratorStatus(CamelModel):
    unhealthy: bool = False
    logical_sliced: AcceleratorLogicalSliced | None = None
    physical_sliced: AcceleratorPhysicalSliced | None = None


class Accelerator(CamelModel):
    """One accelerator. ``id`` is universally unique; ``index`` is the logical index (from 0);
    ``physical_indexes`` carries the driver's own numbering where it differs."""

    id: str
    index: int
    physical_indexes: list[int] = Field(default_factory=list)
    topology: DeviceTopology = Field(default_factory=DeviceTopology)
    status: AcceleratorStatus = Field(default_factory=AcceleratorStatus)


class DevicesGroup(CamelModel):
    """Accelerators of one model on one node (``spec.groups[]``, keyed by ``id`` + ``manufacturer``)."""

    id: str
    manufacturer: str
    name: str
    memory: int = 0
    cores: int | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    compute_capability: str | None = None
    family: str | None = None
    accelerators: list[Accelerator] = Field(default_factory=list)
