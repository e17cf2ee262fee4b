"""Create-or-update of whole objects the worker owns, and the few single calls its controllers make.

:func:`apply` makes one object what it should be: read it; absent (404), create it; else, when its
``spec`` or one of *our* labels/annotations differs, update it with the ``resourceVersion`` it read
(labels and ownerReferences others put there are kept), re-reading on ``409 Conflict``
(:data:`CONFLICT_RETRIES` tries). It answers ``"created"``, ``"updated"`` or ``"unchanged"`` and
raises :class:`~gpustack_operator.kube.rest.KubeRequestError` otherwise -- a 404 on the *create*
means the collection itself is not served (a CRD not installed), which callers tell apart with
:func:`collection_missing`. With ``defaulted=True`` (a CRD, whose spec the server fills with defaults
such as ``conversion``) a spec is unchanged when every field we set holds our value, so a restart
that changes nothing writes nothing.

The paths the worker writes (supplement §1.2, §1.3, §9; issue 19):

* ``CustomResourceDefinition`` (``apiextensions.k8s.io/v1``) -- :func:`crd_established` reads its
  ``Established`` condition;
* the ``gpustack-cpu-info`` ``NodeFeatureRule`` (``nfd.k8s-sigs.io/v1alpha1``, cluster-scoped);
* the worker's ``NodeFeature`` ``<node>-gpustack-worker`` (namespaced);
* the ``Devices`` mark (a merge patch of one label) and a departed node's ``Devices`` (delete).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

import kubernetes.client

from gpustack_operator.kube import crds
from gpustack_operator.kube.rest import CONFLICT, MERGE_PATCH, NOT_FOUND, KubeRequestError, request

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 3
CRD_COLLECTION = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NFD_API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
RULE_COLLECTION = f"/apis/{NFD_API_VERSION}/nodefeaturerules"
DEVICES_COLLECTION = f"/apis/{crds.API_VERSION}/{crds.PLURAL}"
NODES = "/api/v1/nodes"

Applied = Literal["created", "updated", "unchanged"]


def node_features_collection(namespace: str) -> str:
    return f"/apis/{NFD_API_VERSION}/namespaces/{quote(namespace, safe='')}/nodefeatures"


def collection_missing(exc: KubeRequestError) -> bool:
    """Is this the 404 of a create, i.e. a resource the API server does not serve (its CRD absent)?"""
    return exc.status == NOT_FOUND


def _merge_meta(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """``current``'s metadata with ``desired``'s labels, annotations and ownerReferences laid over it."""
    meta = dict(current.get("metadata") or {})
    want = desired.get("metadata") or {}
    for key in ("labels", "annotations"):
        if want.get(key):
            merged = dict(meta.get(key) or {})
            merged.update(want[key])
            meta[key] = merged
    refs = [dict(r) for r in meta.get("ownerReferences") or []]
    for ref in want.get("ownerReferences") or []:
        refs = [r for r in refs if not (r.get("kind") == ref["kind"] and r.get("name") == ref["name"])]
        refs.append(dict(ref))
    if refs:
        meta["ownerReferences"] = refs
    return meta


def _holds(current: Any, desired: Any) -> bool:
    """Does ``current`` carry every field of ``desired`` with its value (extra keys of a map allowed)?"""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(k in current and _holds(current[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(_holds(c, d) for c, d in zip(current, desired, strict=True))
        )
    return bool(current == desired)


def apply(
    client: kubernetes.client.ApiClient, collection: str, desired: Mapping[str, Any], *, defaulted: bool = False
) -> Applied:
    """Create or update ``desired`` in ``collection`` (see the module docstring)."""
    name = str(desired["metadata"]["name"])
    path = f"{collection}/{quote(name, safe='')}"
    for _ in range(CONFLICT_RETRIES):
        try:
            try:
                current = request(client, "GET", path)
            except KubeRequestError as exc:
                if exc.status != NOT_FOUND:
                    raise
                request(client, "POST", collection, body=dict(desired))
                return "created"
            merged = dict(current)
            merged["metadata"] = _merge_meta(current, desired)
            if "spec" in desired:
                merged["spec"] = desired["spec"]
            same_spec = merged.get("spec") == current.get("spec")
            if defaulted and "spec" in desired:
                same_spec = _holds(current.get("spec"), desired["spec"])
            if merged["metadata"] == current.get("metadata") and same_spec:
                return "unchanged"
            request(client, "PUT", path, body=merged)
            return "updated"
        except KubeRequestError as exc:
            if exc.status != CONFLICT:
                raise
            log.info("%s %s: conflict, reading it again", desired.get("kind"), name)
    raise KubeRequestError(CONFLICT, f"{desired.get('kind')} {name}: still conflicting after {CONFLICT_RETRIES} tries")


def crd_established(client: kubernetes.client.ApiClient, name: str) -> bool:
    """Does the CRD ``name`` carry ``Established: True`` (its resource served)?"""
    doc = request(client, "GET", f"{CRD_COLLECTION}/{quote(name, safe='')}")
    conditions = (doc.get("status") or {}).get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def get_node(client: kubernetes.client.ApiClient, name: str) -> dict[str, Any] | None:
    """The Node read from the API server itself (never a cache); ``None`` when it is gone (404)."""
    try:
        return request(client, "GET", f"{NODES}/{quote(name, safe='')}")
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            return None
        raise


def list_devices(client: kubernetes.client.ApiClient) -> list[dict[str, Any]]:
    """Every ``Devices`` object (``[]`` when the CRD is not served)."""
    try:
        doc = request(client, "GET", DEVICES_COLLECTION)
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            return []
        raise
    items = doc.get("items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def get_devices(client: kubernetes.client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return request(client, "GET", f"{DEVICES_COLLECTION}/{quote(name, safe='')}")
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            return None
        raise


def patch_devices_label(client: kubernetes.client.ApiClient, name: str, key: str, value: str | None) -> None:
    """Set (or, ``None``, remove) one label of the ``Devices`` ``name`` with a merge patch."""
    body = {"metadata": {"labels": {key: value}}}
    request(client, "PATCH", f"{DEVICES_COLLECTION}/{quote(name, safe='')}", body=body, content_type=MERGE_PATCH)


def delete_devices(client: kubernetes.client.ApiClient, name: str) -> bool:
    """Delete the ``Devices`` ``name``; ``False`` when it was already gone."""
    try:
        request(client, "DELETE", f"{DEVICES_COLLECTION}/{quote(name, safe='')}")
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            return False
        raise
    return True


__all__ = [
    "CRD_COLLECTION",
    "DEVICES_COLLECTION",
    "NFD_API_VERSION",
    "NODES",
    "RULE_COLLECTION",
    "apply",
    "collection_missing",
    "crd_established",
    "delete_devices",
    "get_devices",
    "get_node",
    "list_devices",
    "node_features_collection",
    "patch_devices_label",
]
