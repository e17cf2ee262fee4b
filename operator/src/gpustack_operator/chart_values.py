"""The Helm chart's values as a model: the defaults, ``values.schema.json`` and the templates' defaults.

The chart is ``operator/chart/gpustack-operator`` (docs/chart.md). Three of its files come from this
module, and the chart tests fail while any of them differs from what it generates:

- ``values.schema.json`` -- :func:`render_schema`, the JSON schema of :class:`ChartValues`;
- ``templates/_defaults.tpl`` -- :func:`render_defaults_template`, the defaults as one JSON document the
  templates merge the release's values over (see below);
- ``values.yaml`` is written by hand (it carries the comments a user reads) and must load to exactly
  :func:`default_values`.

``gpustack-operator chart-schema --write <chart dir>`` (or ``python -m gpustack_operator.chart_values <chart
dir>``) rewrites the two generated files; ``gpustack-operator chart-schema`` prints the schema.

**Null at every path.** ``helm upgrade --reuse-values --set x=null`` is how a value is put back to the
chart's default (supplement §4.3: "revert with ``--set …=null``"). Helm then *removes* the key from the
values the templates see, so a template reading ``.Values.x`` directly would meet nothing. So every field
here is nullable (the schema accepts ``null`` anywhere), and the templates read the release's values
merged over :func:`default_values` (``mustMergeOverwrite``), never ``.Values`` alone: a removed or null
key is its default again. A manufacturer row therefore cannot be removed with ``null``; it is turned off
with ``enabled: false``.

The manufacturer rows (supplement §1.2 "Manufacturer map", §4.4 defaults) come from the package's own
identities (``manufacturers/<vendor>/identity.py``), so the chart and the Device Manager cannot disagree
on a PCI vendor id or a resource name; the two ``runtimeInjects*`` facts are supplement §1.2's:
``runtimeInjectsDriver`` for NVIDIA and Moore Threads (their device managers run under the RuntimeClass),
``runtimeInjectsDevices`` for Ascend and Iluvatar. The vendor library paths are supplement §4.5's
toolkit roots, mounted read-only into the manufacturer's Device Manager.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.settings import DEFAULT_PCI_CLASS_PREFIXES

SCHEMA_FILE = "values.schema.json"
DEFAULTS_TEMPLATE = "templates/_defaults.tpl"
DEFAULTS_TEMPLATE_NAME = "gpustack-operator.defaults"

# Image: operator/Containerfile builds it; Chart.yaml's appVersion is the package version.
IMAGE_REPOSITORY = "gpustack/gpustack-operator-py"

# supplement §1.2 "Job 1": the PCI classes NFD labels (network, display, processor, accelerator) -- the
# Device Manager's own default scan (settings.py), which supplement §4.3 says must change together with it.
PCI_CLASS_WHITELIST = list(DEFAULT_PCI_CLASS_PREFIXES)

# supplement §1.2: the user-space driver reaches a container only through the vendor runtime.
RUNTIME_INJECTS_DRIVER = frozenset({"nvidia", "mthreads"})
# supplement §1.2: the allocator adds no device node; only the runtime turns an allocation into /dev entries.
RUNTIME_INJECTS_DEVICES = frozenset({"ascend", "iluvatar"})
# supplement §4.5: the toolkit roots the management libraries are searched in (read-only hostPaths).
# NVIDIA and Moore Threads get theirs from the runtime (RUNTIME_INJECTS_DRIVER); AMD and Hygon detect
# from sysfs and read only the toolkit's version file.
LIBRARY_PATHS: dict[str, list[str]] = {
    "amd": ["/opt/rocm"],
    "ascend": ["/usr/local/Ascend"],
    "cambricon": ["/usr/local/neuware"],
    "hygon": ["/opt/dtk"],
    "iluvatar": ["/usr/local/corex"],
    "metax": ["/opt/maca"],
    "mthreads": [],
    "nvidia": [],
    "thead": ["/usr/local/PPU_SDK"],
}

ManufacturerName = Literal["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]
Scalar = str | int | float | bool | None
KubeObject = dict[str, Any]


class _Values(BaseModel):
    """A values section: unknown keys are refused (a typo is an error, not a silent no-op)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ManufacturerRow(_Values):
    """One row of ``global.manufacturers`` (supplement §1.2, §4.4)."""

    enabled: bool | None = Field(True, description="render this manufacturer's Device Manager DaemonSet")
    pci_vendor_id: str | None = Field(
        None,
        alias="pciVendorID",
        pattern=r"^([0-9a-fA-F]{2}_)?[0-9a-fA-F]{4}$",
        description="PCI vendor id NFD labels its nodes with (feature.node.kubernetes.io/pci-<id>.present)",
    )
    resource_name: str | None = Field(None, alias="resourceName", description="the extended resource advertised")
    runtime_name: str | None = Field(None, alias="runtimeName", description="the RuntimeClass its workloads run under")
    partition_kind: str | None = Field(None, alias="partitionKind", description="hardware-partitioning kind")
    runtime_injects_driver: bool | None = Field(
        False,
        alias="runtimeInjectsDriver",
        description="the user-space driver reaches a container only via the vendor runtime (the Device Manager "
        "runs under the RuntimeClass)",
    )
    runtime_injects_devices: bool | None = Field(
        False,
        alias="runtimeInjectsDevices",
        description="only the runtime turns an allocation into /dev entries (workloads need the RuntimeClass)",
    )
    library_paths: list[str] | None = Field(
        None, alias="libraryPaths", description="host paths of the vendor libraries, mounted read-only"
    )


def _default_rows() -> dict[ManufacturerName, ManufacturerRow | None]:
    rows: dict[ManufacturerName, ManufacturerRow | None] = {}
    for name in sorted(REGISTRY):
        ident = REGISTRY[name].identity
        rows[name] = ManufacturerRow(  # type: ignore[index]  # the registry's names are the Literal's
            enabled=True,
            pci_vendor_id=ident.pci_vendor_id,
            resource_name=ident.resource_name,
            runtime_name=ident.runtime_name or "",
            partition_kind=ident.partition_kind or "",
            runtime_injects_driver=name in RUNTIME_INJECTS_DRIVER,
            runtime_injects_devices=name in RUNTIME_INJECTS_DEVICES,
            library_paths=list(LIBRARY_PATHS[name]),
        )
    return rows


class GlobalValues(_Values):
    manufacturers: dict[ManufacturerName, ManufacturerRow | None] | None = Field(
        default_factory=_default_rows, description="one row per manufacturer (supplement §1.2)"
    )


class ImageValues(_Values):
    repository: str | None = Field(IMAGE_REPOSITORY, min_length=1)
    tag: str | None = Field("", description="empty: the chart's appVersion")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field("IfNotPresent", alias="pullPolicy")


class PodValues(_Values):
    """What both workloads take alike."""

    resources: KubeObject | None = Field(default_factory=dict)
    node_selector: dict[str, str] | None = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[KubeObject] | None = Field(default_factory=list)
    priority_class_name: str | None = Field("", alias="priorityClassName")
    verbosity: int | None = Field(2, ge=0, le=10, description="klog -v")
    host_network: bool | None = Field(
        False,
        alias="hostNetwork",
        description="run in the node's network namespace (dnsPolicy ClusterFirstWithHostNet); for clusters "
        "without a pod network -- the Device Manager's probe port is then the node's",
    )
    extra_args: list[str] | None = Field(
        default_factory=list, alias="extraArgs", description="more command-line flags, after the chart's own"
    )
    extra_env: list[KubeObject] | None = Field(
        default_factory=list,
        alias="extraEnv",
        description="more container variables (Kubernetes EnvVar objects), after the chart's own",
    )


EnvName = str


class WorkerValues(PodValues):
    enabled: bool | None = Field(True, description="render the worker Deployment and its RBAC")
    replicas: int | None = Field(1, ge=0)
    secure_port: int | None = Field(
        31443, alias="securePort", ge=1, le=65535, description="/readyz and /livez over HTTPS (the probes)"
    )
    disable_applications: list[str] | None = Field(
        default_factory=lambda: ["*"],
        alias="disableApplications",
        description="--disable-applications; chart mode: * (supplement §8)",
    )
    env: dict[EnvName, Scalar] | None = Field(
        default_factory=dict,
        description="GPUSTACK_* deploy-time variables of the worker (supplement §4.3), e.g. "
        "GPUSTACK_NODE_MANAGEMENT_MANUAL",
        json_schema_extra={"propertyNames": {"pattern": "^GPUSTACK_[A-Z0-9_]+$"}},
    )


class PreloadValues(_Values):
    enabled: bool | None = Field(True, description="the init container staging the preload libraries")
    source: str | None = Field("/opt/gpustack/lib", description="the tree in the image")
    host_dir: str | None = Field("/var/lib/gpustack/operator/lib", alias="hostDir")


class DeviceManagerValues(PodValues):
    enabled: bool | None = Field(True, description="render the Device Manager DaemonSets (supplement §1.3)")
    create_runtime_classes: bool | None = Field(True, alias="createRuntimeClasses")
    containerd_config_dir: str | None = Field("/etc/containerd", alias="containerdConfigDir")
    kubelet_dir: str | None = Field("/var/lib/kubelet", alias="kubeletDir")
    data_dir: str | None = Field("/var/lib/gpustack", alias="dataDir")
    secure_port: int | None = Field(32443, alias="securePort", ge=1, le=65535)
    monitor_period: str | None = Field("15s", alias="monitorPeriod", pattern=r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$")
    env: dict[EnvName, Scalar] | None = Field(
        default_factory=dict,
        description="GPUSTACK_* deploy-time variables for every Device Manager (supplement §4.3)",
        json_schema_extra={"propertyNames": {"pattern": "^GPUSTACK_[A-Z0-9_]+$"}},
    )
    preload: PreloadValues | None = Field(default_factory=PreloadValues)
    update_max_unavailable: int | str | None = Field(1, alias="updateMaxUnavailable")
    security_context: KubeObject | None = Field(
        default_factory=lambda: {"privileged": True, "runAsUser": 0},
        alias="securityContext",
        description="the device-manager container's securityContext (root and privileged: docs/chart.md)",
    )
    extra_volumes: list[KubeObject] | None = Field(
        default_factory=list, alias="extraVolumes", description="more Pod volumes (Kubernetes Volume objects)"
    )
    extra_volume_mounts: list[KubeObject] | None = Field(
        default_factory=list,
        alias="extraVolumeMounts",
        description="more device-manager container mounts (Kubernetes VolumeMount objects)",
    )


class ChartValues(_Values):
    """``values.yaml``; top-level keys beyond these are refused."""

    full_name_override: str | None = Field("gpustack-operator", alias="fullnameOverride", min_length=1)
    image: ImageValues | None = Field(default_factory=ImageValues)
    image_pull_secrets: list[KubeObject] | None = Field(default_factory=list, alias="imagePullSecrets")
    global_: GlobalValues | None = Field(default_factory=GlobalValues, alias="global")
    ledger_release_terminated_pods: bool | None = Field(
        True,
        alias="ledgerReleaseTerminatedPods",
        description="GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS on the worker and the Device Managers",
    )
    worker: WorkerValues | None = Field(default_factory=WorkerValues)
    device_manager: DeviceManagerValues | None = Field(
        default_factory=lambda: DeviceManagerValues(tolerations=[{"operator": "Exists"}]), alias="deviceManager"
    )
    node_feature_discovery: KubeObject | None = Field(
        default_factory=lambda: {
            "enabled": True,
            "worker": {
                "config": {
                    "sources": {
                        "pci": {"deviceClassWhitelist": list(PCI_CLASS_WHITELIST), "deviceLabelFields": ["vendor"]}
                    }
                }
            },
        },
        alias="node-feature-discovery",
        description="the node-feature-discovery subchart's values (the subchart itself is not vendored)",
    )


def default_values() -> dict[str, Any]:
    """The chart's defaults, as ``values.yaml`` must load."""
    return ChartValues().model_dump(mode="json", by_alias=True)


def values_schema() -> dict[str, Any]:
    """The JSON schema of the values (every field nullable; see the module docstring)."""
    schema = ChartValues.model_json_schema(by_alias=True, mode="validation")
    schema["title"] = "gpustack-operator chart values"
    return schema


def render_schema() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"


def render_defaults_template() -> str:
    """``templates/_defaults.tpl``: the defaults the templates merge the release's values over."""
    body = json.dumps(default_values(), sort_keys=True, separators=(",", ":"))
    return (
        "{{- /* Generated by `python -m gpustack_operator.chart_values` from chart_values.py; do not edit. */ -}}\n"
        f'{{{{- define "{DEFAULTS_TEMPLATE_NAME}" -}}}}\n{body}\n{{{{- end -}}}}\n'
    )


def generated_files() -> dict[str, str]:
    """Chart-relative path -> the text this module generates for it."""
    return {SCHEMA_FILE: render_schema(), DEFAULTS_TEMPLATE: render_defaults_template()}


def write_chart(chart_dir: str) -> int:
    """Rewrite the generated files of the chart in ``chart_dir``; 2 (named) when it is no chart."""
    chart = Path(chart_dir)
    if not (chart / "Chart.yaml").is_file():
        print(f"gpustack-operator: error: {chart} holds no Chart.yaml (give the chart's directory)", file=sys.stderr)
        return 2
    for rel, text in generated_files().items():
        try:
            (chart / rel).write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"gpustack-operator: error: cannot write {chart / rel}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(f"wrote {chart / rel}")
    return 0


def cli_main(write: str | None) -> int:
    """``gpustack-operator chart-schema [--write CHART_DIR]``: print the schema, or rewrite the chart's files."""
    if write is not None:
        return write_chart(write)
    sys.stdout.write(render_schema())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpustack_operator.chart_values CHART_DIR``: rewrite the generated files of the chart."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m gpustack_operator.chart_values CHART_DIR", file=sys.stderr)
        return 2
    return write_chart(args[0])


if __name__ == "__main__":
    sys.exit(main())
