"""The ``Devices`` CustomResourceDefinition, generated from the pydantic models ``serve`` writes.

``gpustack-operator crds`` (or ``python -m gpustack_operator.kube.crds``) prints it; the checked-in copy
is ``operator/crds/devices.worker.gpustack.ai.yaml`` and a test keeps the two equal.

The resource (supplement §1.3 "The Devices ledger", §9): group ``worker.gpustack.ai``, version
``v1alpha1`` (the Go package the fields come from), kind ``Devices``, cluster-scoped, named after its
node, with the ``status`` subresource. ``spec`` is :class:`DevicesSpec` -- the detection's groups
(``ledger/models.py``) and the network inventory (``discovery/network.py``); ``status`` is
:class:`DevicesStatus` -- the ledger per accelerator (``allocator/ledger.py``).

The pydantic JSON schema is turned into a *structural* OpenAPI v3 schema, as the API server requires:
every ``$ref`` inlined, ``anyOf [X, null]`` (an optional field, never written as ``null``: the writers
leave ``None`` out) reduced to ``X``, ``title`` / ``default`` / ``additionalProperties: false`` dropped
(the server prunes unknown fields instead; no defaulting, so what is stored is exactly what was
written), and the list maps of supplement §9 marked (``x-kubernetes-list-type: map``: ``groups`` keyed
by ``id`` + ``manufacturer``, ``accelerators`` by ``id``, ``interfaces`` by ``name``). Nothing carries
``x-kubernetes-preserve-unknown-fields``: the spec names every field.

The status carries the ledger's ``holders`` (which Pod's container holds each accelerator, in which mode,
for how many units) beyond the fields supplement §9.2 lists: restart recovery reads them back as its
third source, below the Pods' annotations and the node records (``allocator/recovery.py``), and an
operator reads who holds a card from the object. :data:`OMITTED` keeps the mechanism for a model field
the wire must not carry; it names none today.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import Field

from gpustack_operator.allocator.ledger import DevicesAllocationGroup
from gpustack_operator.discovery.network import DeviceInterface
from gpustack_operator.ledger.models import CamelModel, DevicesGroup

GROUP = "worker.gpustack.ai"
VERSION = "v1alpha1"
KIND = "Devices"
PLURAL = "devices"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = f"{CRD_NAME}.yaml"

# Fields of a model the CRD does not carry and the writers leave out (see the module docstring).
OMITTED: dict[str, frozenset[str]] = {"AcceleratorAllocation": frozenset()}

# (model name, field) -> the list-map keys of supplement §9.
LIST_MAPS: dict[tuple[str, str], list[str]] = {
    ("DevicesSpec", "groups"): ["id", "manufacturer"],
    ("DevicesGroup", "accelerators"): ["id"],
    ("DevicesSpec", "interfaces"): ["name"],
    ("DevicesStatus", "groups"): ["id", "manufacturer"],
    ("DevicesAllocationGroup", "accelerators"): ["id"],
}

_DROPPED = ("title", "default", "examples")


class DevicesSpec(CamelModel):
    """What the Device Manager detected on the node: the accelerator groups and, when the network
    inventory could be read, every network interface (absent: not read, no claim)."""

    groups: list[DevicesGroup] = Field(default_factory=list)
    interfaces: list[DeviceInterface] | None = None


class DevicesStatus(CamelModel):
    """The per-accelerator allocation ledger (supplement §9.2)."""

    groups: list[DevicesAllocationGroup] = Field(default_factory=list)

    def wire(self) -> dict[str, object]:
        """The status as written (the fields :data:`OMITTED` names left out)."""
        omitted = OMITTED["AcceleratorAllocation"]
        exclude = {"groups": {"__all__": {"accelerators": {"__all__": set(omitted)}}}}
        return self.model_dump(by_alias=True, exclude_none=True, mode="json", exclude=exclude)


def without_empty_strings(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` as written to the API server: every optional string field whose value is ``""`` left
    out (recursively, following ``schema``, a structural ``openAPIV3Schema``).

    The models say "unknown" with ``""`` (an interface's ``pciBusId`` or ``rdmaDevice``, an
    accelerator's ``numaAffinity``) and read an absent field back as ``""``, so leaving it out says the
    same. A kube-apiserver whose OpenAPI validator takes a zero value for ``null`` (the suite's
    kube-local 1.20.2 built from Debian's source does: ``Invalid value: "null": ... must be of type
    string``) refuses the whole object otherwise. A required field is kept as it is; list items are
    kept (a list's length is its meaning)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        return {
            k: without_empty_strings(v, props.get(k) or {})
            for k, v in value.items()
            if not (v == "" and k not in required)
        }
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [without_empty_strings(v, items) for v in value]
    return value


class SchemaError(ValueError):
    """A model whose JSON schema has no structural OpenAPI form (a bug in a model, named)."""


def _structural(node: Any, defs: Mapping[str, Any], where: str, model: str | None = None) -> Any:
    """One JSON-schema node as a structural OpenAPI v3 node (see the module docstring)."""
    if isinstance(node, list):
        return [_structural(item, defs, where, model) for item in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        if name not in defs:
            raise SchemaError(f"{where}: $ref {node['$ref']} names no definition")
        target = dict(defs[name])
        if "description" in node:
            target["description"] = node["description"]
        return _structural(target, defs, f"{where}>{name}", name)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if not (isinstance(o, Mapping) and o.get("type") == "null")]
        if len(options) != 1:
            raise SchemaError(f"{where}: a union of {len(options)} types has no structural form")
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        merged.update(options[0])
        return _structural(merged, defs, where, model)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key == "$defs":
            continue
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split())
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "properties":
            omitted = OMITTED.get(model or "", frozenset())
            props: dict[str, Any] = {}
            for name, prop in value.items():
                if name in omitted:
                    continue
                converted = _structural(prop, defs, f"{where}.{name}")
                keys = LIST_MAPS.get((model or "", name))
                if keys is not None:
                    converted["x-kubernetes-list-type"] = "map"
                    converted["x-kubernetes-list-map-keys"] = list(keys)
                props[name] = converted
            out["properties"] = props
        elif key == "required":
            omitted = OMITTED.get(model or "", frozenset())
            out["required"] = [r for r in value if r not in omitted]
        else:
            out[key] = _structural(value, defs, f"{where}.{key}")
    if "type" not in out:
        raise SchemaError(f"{where}: a schema node without a type is not structural")
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        raise SchemaError(f"{where}: properties and additionalProperties together are not structural")
    return out


def model_schema(model: type[CamelModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one model (as it is written: camelCase names)."""
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.get("$defs", {})
    schema = _structural(raw, defs, model.__name__, model.__name__)
    assert isinstance(schema, dict)
    return schema


def openapi_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a ``Devices`` object."""
    return {
        "description": "Devices is the accelerator ledger of one node: what its Device Manager detected "
        "(spec) and how each accelerator is allocated (status). Cluster-scoped, named after the node, "
        "owned by the Node.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(DevicesSpec),
            "status": model_schema(DevicesStatus),
        },
    }


def devices_crd() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of ``Devices``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "gpustack-operator"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": PLURAL,
                "categories": ["gpustack"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


HEADER = (
    "# Generated by `gpustack-operator crds` from the pydantic models (operator/src/gpustack_operator/kube/crds.py).\n"
    "# Do not edit: change the models and regenerate; tests/unit/test_crds.py fails while this file differs.\n"
)


def render(crds: list[dict[str, Any]] | None = None) -> str:
    """Every CRD as one YAML stream (with the generated-file header)."""
    docs = crds if crds is not None else [devices_crd()]
    body = yaml.safe_dump_all(copy.deepcopy(docs), sort_keys=False, default_flow_style=False, width=120)
    return HEADER + "---\n" + body


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
