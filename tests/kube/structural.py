"""A small checker for Kubernetes structural OpenAPI v3 schemas, the subset the API server enforces on a
custom resource (no new dependency: ``jsonschema`` is not one of the project's test requirements).

* :func:`structural_problems` -- what the API server would refuse in the CRD itself: a node without
  ``type`` (unless ``x-kubernetes-preserve-unknown-fields`` / ``x-kubernetes-int-or-string``), a
  ``$ref``, ``anyOf``/``oneOf``/``allOf``/``not`` carrying types, ``properties`` beside
  ``additionalProperties``, ``nullable`` with ``type: null``, a list-map whose keys are not required
  scalar properties of its items, a ``default`` anywhere (this CRD sets none).
* :func:`validate` -- an object against the schema: types (``integer`` is a whole number, never a
  bool), ``enum``, ``required``, list-map keys present and unique, ``additionalProperties`` maps.
* :func:`prune` -- what the server would keep of an object: fields the schema does not name dropped
  (below an object with ``properties``), and the paths it dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

TYPES = {"object", "array", "string", "integer", "number", "boolean"}
FORBIDDEN = ("$ref", "anyOf", "oneOf", "allOf", "not", "definitions", "$defs")


def structural_problems(schema: Mapping[str, Any], where: str = "") -> list[str]:
    out: list[str] = []
    here = where or "<root>"
    for key in FORBIDDEN:
        if key in schema:
            out.append(f"{here}: {key} is not allowed in a structural schema")
    if "default" in schema:
        out.append(f"{here}: a default is set")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    kind = schema.get("type")
    if kind is None and not (preserve or int_or_string):
        out.append(f"{here}: no type")
    elif kind is not None and kind not in TYPES:
        out.append(f"{here}: type {kind!r} is not one of {sorted(TYPES)}")
    if "properties" in schema and "additionalProperties" in schema:
        out.append(f"{here}: properties and additionalProperties are mutually exclusive")
    if "properties" in schema and kind != "object":
        out.append(f"{here}: properties on a {kind}")
    if "items" in schema and kind != "array":
        out.append(f"{here}: items on a {kind}")
    if kind == "array" and not isinstance(schema.get("items"), Mapping):
        out.append(f"{here}: an array without items")
    for name, prop in (schema.get("properties") or {}).items():
        out.extend(structural_problems(prop, f"{where}.{name}"))
    if isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        out.extend(structural_problems(items, f"{where}[]"))
        if schema.get("x-kubernetes-list-type") == "map":
            props = items.get("properties") or {}
            for key in schema.get("x-kubernetes-list-map-keys") or []:
                if key not in props:
                    out.append(f"{here}: list-map key {key} is not a property of its items")
                elif key not in (items.get("required") or []):
                    out.append(f"{here}: list-map key {key} is not required")
                elif props[key].get("type") not in ("string", "integer", "boolean"):
                    out.append(f"{here}: list-map key {key} is not a scalar")
            if not schema.get("x-kubernetes-list-map-keys"):
                out.append(f"{here}: a list-map without keys")
    if isinstance(schema.get("additionalProperties"), Mapping):
        out.extend(structural_problems(schema["additionalProperties"], f"{where}{{}}"))
    return out


def _type_ok(kind: str | None, value: Any) -> bool:
    if kind is None:
        return True
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def validate(schema: Mapping[str, Any], value: Any, where: str = "") -> list[str]:
    here = where or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{here}: null is not allowed"]
    if not _type_ok(schema.get("type"), value):
        return [f"{here}: {type(value).__name__} where the schema wants {schema.get('type')}"]
    out: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{here}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                out.append(f"{here}.{name}: Required value")
        for name, item in value.items():
            if name in props:
                out.extend(validate(props[name], item, f"{where}.{name}"))
            elif isinstance(schema.get("additionalProperties"), Mapping):
                out.extend(validate(schema["additionalProperties"], item, f"{where}.{name}"))
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for n, item in enumerate(value):
            out.extend(validate(schema["items"], item, f"{where}[{n}]"))
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set[tuple[Any, ...]] = set()
            for n, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                ident = tuple(item.get(k) for k in keys)
                if ident in seen:
                    out.append(f"{here}[{n}]: Duplicate value: {dict(zip(keys, ident, strict=True))}")
                seen.add(ident)
    return out


def prune(schema: Mapping[str, Any], value: Any, where: str = "") -> tuple[Any, list[str]]:
    """``value`` as the server keeps it, and the paths of what it dropped."""
    removed: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        return copy.deepcopy(value), removed
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for name, item in value.items():
            if props is not None and name in props:
                out[name], sub = prune(props[name], item, f"{where}.{name}")
                removed.extend(sub)
            elif isinstance(extra, Mapping):
                out[name], sub = prune(extra, item, f"{where}.{name}")
                removed.extend(sub)
            elif props is None and extra is None and schema.get("type") == "object" and not where:
                out[name] = copy.deepcopy(item)
            elif props is None and extra is None and where in (".metadata",):
                out[name] = copy.deepcopy(item)  # metadata is the server's own, never pruned here
            else:
                removed.append(f"{where}.{name}")
        return out, removed
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = []
        for n, item in enumerate(value):
            kept, sub = prune(schema["items"], item, f"{where}[{n}]")
            items.append(kept)
            removed.extend(sub)
        return items, removed
    return copy.deepcopy(value), removed
