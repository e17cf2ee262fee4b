#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: manifest_diff
short_description: Compare two Kubernetes manifests object by object and show the difference
version_added: "0.1.0"
description:
  - Compares a Helm release's current manifest (O(before), e.g. C(status.manifest) of
    C(kubernetes.core.helm_info)) with a newly rendered one (O(after), e.g. the C(stdout) of
    C(kubernetes.core.helm_template)) and returns Ansible's standard C(diff), so C(--diff) shows what an
    install or upgrade would change without the helm-diff plugin.
  - Both sides are split into YAML documents; comments, C(---) separators and empty documents are dropped.
    Each object is keyed by apiVersion, kind, namespace and name, written with its keys sorted, and the
    objects are ordered by that key, so neither the chart's template order nor key order shows as a change.
  - Pure - it reads nothing but its arguments and never reaches a cluster; it changes nothing, so check mode
    runs it as it is. RV(ignore:changed) says whether the two manifests differ.
  - Fails, naming the side and the document, on text that is not YAML, a document that is not a mapping,
    one without C(kind) or C(metadata.name), and two documents with the same key.
options:
  before:
    description:
      - The current manifest - YAML text (documents separated by C(---)), a list of objects (what
        C(kubernetes.core.helm_info) returns as C(status.manifest); null entries are skipped), one object, or
        null / an empty string / an empty list for a release that does not exist.
    type: raw
  after:
    description: The new manifest, in any form O(before) takes.
    type: raw
  release_name:
    description: The release the manifests belong to; it names both sides in the diff's headers.
    type: str
    required: true
  release_namespace:
    description: The release's namespace, for the headers.
    type: str
    default: ""
  before_label:
    description: What the before side is, for its header (e.g. C(revision 3, deployed)).
    type: str
    default: current manifest
  after_label:
    description: What the after side is, for its header.
    type: str
    default: rendered from the chart
attributes:
  check_mode:
    support: full
    description: Reads nothing and changes nothing; the result is the same in check mode.
  diff_mode:
    support: full
    description: Returns the two manifests as before/after text, object by object.
  platform:
    support: full
    platforms: posix
    description: Runs wherever Python and PyYAML are; the deploy role runs it on the controller.
requirements:
  - PyYAML
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Read the release's current manifest
  kubernetes.core.helm_info:
    release_name: gpustack-operator
    release_namespace: gpustack-system
  register: current

- name: Render the chart with the values the install will use (local, changes nothing)
  kubernetes.core.helm_template:
    chart_ref: /path/to/gpustack-operator
    release_name: gpustack-operator
    release_namespace: gpustack-system
    release_values: {worker: {enabled: true}}
    disable_hook: true
  check_mode: false
  changed_when: false
  register: rendered

- name: Show what the install would change
  gpustack.accelerators.manifest_diff:
    before: "{{ current.status.manifest | default([]) }}"
    after: "{{ rendered.stdout }}"
    release_name: gpustack-operator
    release_namespace: gpustack-system
"""

RETURN = r"""
diff:
  description:
    - The two manifests as text, one object after another in key order, each after a C(---) line and a comment
      naming it; C(before_header) and C(after_header) name the release. Ansible shows it under C(--diff) when
      the task changed.
  returned: always
  type: dict
  sample:
    before_header: "release gpustack-operator in gpustack-system: current manifest"
    after_header: "release gpustack-operator in gpustack-system: rendered from the chart"
    before: "---\n# apps/v1 Deployment gpustack-system/gpustack-operator-worker\napiVersion: apps/v1\n..."
    after: "---\n# apps/v1 Deployment gpustack-system/gpustack-operator-worker\napiVersion: apps/v1\n..."
objects:
  description: Every object that differs, in key order, with what happens to it (C(added), C(removed), C(changed)).
  returned: always
  type: list
  elements: dict
  sample:
    - {change: changed, api_version: apps/v1, kind: Deployment, namespace: gpustack-system,
       name: gpustack-operator-worker}
counts:
  description: How many objects are added, removed, changed and unchanged.
  returned: always
  type: dict
  sample: {added: 0, removed: 0, changed: 1, unchanged: 6}
summary:
  description: One line for a person, naming the release and the objects that differ.
  returned: always
  type: str
  sample: "release gpustack-operator in gpustack-system: 1 changed (Deployment gpustack-system/gpustack-operator-worker)"
"""

import datetime
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import yaml
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

# A document is refused past this many values once its aliases are expanded (a "billion laughs" document is
# a few hundred bytes of YAML): far above any Kubernetes object, far below what would exhaust the controller.
MAX_VALUES = 200000


class ManifestError(ValueError):
    """A manifest that cannot be compared; the message names the side and the document."""


def describe(key):
    """``apps/v1 Deployment ns/name`` -- or ``v1 ClusterRole name`` for an object without a namespace."""
    api_version, _kind, _namespace, _name = key
    return ("%s %s" % (api_version, short(key))) if api_version else short(key)


def short(key):
    """``Deployment ns/name``: what the summary and the objects list name."""
    _api_version, kind, namespace, name = key
    return "%s %s" % (kind, "%s/%s" % (namespace, name) if namespace else name)


def _json_key(key):
    """A mapping key as JSON (and so Ansible) would write it: every key a string."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (datetime.date, datetime.datetime)):
        return key.isoformat()
    if isinstance(key, (str, int, float)):
        return str(key)
    raise ManifestError("a mapping key is a %s, which Kubernetes objects never have" % type(key).__name__)


def plain(value, budget, path=()):
    """``value`` as Ansible would hand it over after JSON (string keys, dates as ISO text, tuples as lists).

    ``budget`` is a one-element list counting the values left (aliases make a tiny text a huge tree); ``path``
    holds the ids of the containers above, so a document that contains itself is refused, not recursed into.
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ManifestError("it holds more than %d values once its aliases are expanded" % MAX_VALUES)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in path:
            raise ManifestError("it contains itself (a YAML alias to an enclosing node)")
        inner = (*path, id(value))
        if isinstance(value, dict):
            return dict((_json_key(k), plain(v, budget, inner)) for k, v in value.items())
        return [plain(v, budget, inner) for v in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ManifestError("it holds a %s, which a Kubernetes object cannot" % type(value).__name__)


def _yaml_problem(exc):
    """A PyYAML error in one line: what is wrong and where (line and column in the whole text)."""
    words = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = "; ".join(str(w) for w in words if w) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        text += " (line %d, column %d)" % (mark.line + 1, mark.column + 1)
    return " ".join(text.split())


def _parsed(side, text):
    """The documents of YAML text with their 1-based numbers; ManifestError naming the first one that fails."""
    docs = []
    loader = yaml.safe_load_all(text)
    number = 0
    while True:
        number += 1
        try:
            doc = next(loader)
        except StopIteration:
            return docs
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            # ValueError / OverflowError: a scalar YAML resolves to a date that does not exist (2001-13-01)
            raise ManifestError("%s, document %d is not YAML: %s" % (side, number, _yaml_problem(exc))) from None
        except RecursionError:
            raise ManifestError(
                "%s, document %d is not YAML this module can read: it nests too deeply" % (side, number)
            ) from None
        if doc is not None:
            docs.append((number, doc))


def _documents(side, manifest):
    """The documents of one side, as Python values, with their 1-based numbers."""
    if manifest is None:
        return []
    if isinstance(manifest, bytes):
        manifest = manifest.decode("utf-8", "replace")
    if isinstance(manifest, str):
        return _parsed(side, manifest)
    if isinstance(manifest, dict):
        return [(1, manifest)]
    if isinstance(manifest, (list, tuple)):
        return [(number, doc) for number, doc in enumerate(manifest, 1) if doc is not None]
    raise ManifestError(
        "%s is of type %s: give YAML text, a list of objects or one object" % (side, type(manifest).__name__)
    )


def _key_of(doc):
    """(apiVersion, kind, namespace, name) of one object, or ManifestError naming what is missing."""
    if not isinstance(doc, dict):
        raise ManifestError(
            "it is a %s, not a Kubernetes object (a mapping with kind and metadata.name)" % type(doc).__name__
        )
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ManifestError("it has no kind")
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ManifestError("its %s has no metadata.name" % kind)
    namespace = metadata.get("namespace") or ""
    api_version = doc.get("apiVersion") or ""
    return (str(api_version), kind, str(namespace), name)


def _text(doc):
    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=True, allow_unicode=True, width=1 << 16)


def objects_of(side, manifest):
    """The objects of one side by key, each as its canonical YAML text."""
    objects = {}
    where = {}
    for number, doc in _documents(side, manifest):
        try:
            doc = plain(doc, [MAX_VALUES])
            key = _key_of(doc)
        except (ManifestError, RecursionError) as exc:
            why = str(exc) if isinstance(exc, ManifestError) else "it nests too deeply"
            raise ManifestError("%s, document %d: %s" % (side, number, why)) from None
        if key in objects:
            raise ManifestError(
                "%s, documents %d and %d are both %s: an object can be in a manifest once"
                % (side, where[key], number, describe(key))
            )
        objects[key] = _text(doc)
        where[key] = number
    return objects


def _joined(objects, keys):
    return "".join("---\n# %s\n%s" % (describe(key), objects[key]) for key in keys)


def compare(
    before,
    after,
    release_name,
    release_namespace="",
    *,
    before_label="current manifest",
    after_label="rendered from the chart",
):
    """The module's result for two manifests (any form ``before`` / ``after`` take); ManifestError on bad input."""
    old = objects_of("before", before)
    new = objects_of("after", after)
    keys = sorted(set(old) | set(new))
    changes = []
    for key in keys:
        if key not in old:
            changes.append(("added", key))
        elif key not in new:
            changes.append(("removed", key))
        elif old[key] != new[key]:
            changes.append(("changed", key))
    counts = dict(added=0, removed=0, changed=0)
    for change, _key in changes:
        counts[change] += 1
    counts["unchanged"] = len(keys) - len(changes)
    release = "release %s%s" % (release_name, " in %s" % release_namespace if release_namespace else "")
    if changes:
        parts = []
        for change in ("added", "removed", "changed"):
            named = [short(key) for what, key in changes if what == change]
            if named:
                parts.append("%d %s (%s)" % (len(named), change, ", ".join(named)))
        summary = "%s: %s" % (release, "; ".join(parts))
    else:
        summary = "%s: no object would change (%d unchanged)" % (release, counts["unchanged"])
    return dict(
        changed=bool(changes),
        diff=dict(
            before_header="%s: %s" % (release, before_label),
            after_header="%s: %s" % (release, after_label),
            before=_joined(old, sorted(old)),
            after=_joined(new, sorted(new)),
        ),
        objects=[
            dict(change=change, api_version=key[0], kind=key[1], namespace=key[2], name=key[3])
            for change, key in changes
        ],
        counts=counts,
        summary=summary,
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            before=dict(type="raw"),
            after=dict(type="raw"),
            release_name=dict(type="str", required=True),
            release_namespace=dict(type="str", default=""),
            before_label=dict(type="str", default="current manifest"),
            after_label=dict(type="str", default="rendered from the chart"),
        ),
        supports_check_mode=True,
    )
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    p = module.params
    try:
        result = compare(
            p["before"],
            p["after"],
            p["release_name"],
            p["release_namespace"],
            before_label=p["before_label"],
            after_label=p["after_label"],
        )
    except ManifestError as exc:
        module.fail_json(msg="manifest_diff for release %s: %s" % (p["release_name"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
