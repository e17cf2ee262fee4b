"""The cluster's view of one node, read for ``verify`` (issue 19): what the API server holds about it.

For a node name, four bounded reads (each one JSON round trip through :func:`kube.rest.request`):

* the Node -- its labels and ``status.allocatable`` per resource;
* the NodeFeature ``${NODE}-gpustack-device-manager`` (``kube/publish.py``) -- its ``spec.labels``,
  the Device Manager's labels for its last detection;
* the cluster-scoped ``Devices`` ``${NODE}`` -- its ``spec.groups`` (the detection) and ``status.groups``
  (the ledger), kept as plain JSON: verify compares ids and versions, it never re-validates the models;
* the Pods bound to the node (``/api/v1/pods?fieldSelector=spec.nodeName=<node>``, every namespace)
  -- only the Device Manager's, each with its DaemonSet, phase and readiness.

:func:`read_cluster_views` reads many nodes, :data:`READ_WORKERS` at a time (verify reads every node of
the play: one after another, 4 x N round trips would add up to the API server's latency times the fleet);
each node's reads stay the same four, in the same order, and the views come back in the nodes' order.

A read that fails never raises: it is named in :attr:`ClusterView.errors` (the part, then the method,
path, endpoint and status or transport error, as :class:`~kube.rest.KubeRequestError` words it), and the
part is left ``None`` -- "could not be read" is never mistaken for "absent". A 404 is absence: the
Node, NodeFeature or Devices is ``None`` with no error, and :attr:`ClusterView.absent` says which.

The connection (:func:`make_client`): a kubeconfig (with an optional context), else an API-server URL,
else the in-cluster service account, else ``KUBECONFIG`` / ``~/.kube/config``, as ``kubectl`` picks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import kubernetes.client

from gpustack_operator.kube import crds
from gpustack_operator.kube.publish import DEFAULT_NAMESPACE, NFD_API_VERSION, node_feature_name
from gpustack_operator.kube.rest import NOT_FOUND, REQUEST_TIMEOUT, KubeRequestError, request

# The Device Manager's DaemonSets: one per manufacturer (issue 19 "The chart"; spec "Stage 2").
DAEMONSET_PREFIX = "gpustack-operator-device-manager-"
# The chart's labels on a Device Manager Pod (operator/chart: gpustack-operator.labels)
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT_PREFIX = "device-manager-"
MANUFACTURER_LABEL = "gpustack.ai/manufacturer"
MAX_PODS = 500  # a node runs at most a few hundred Pods; a list past this is cut (the read stays bounded)
READ_WORKERS = 8  # nodes read at once by read_cluster_views (never more than the client's connection pool)


class ClusterConfigError(ValueError):
    """No connection to the API server could be built; the message names the source and the remedy."""


@dataclass(frozen=True)
class DevicePod:
    """A Device Manager Pod bound to the node."""

    name: str
    namespace: str
    daemonset: str  # the owning DaemonSet's name ("" when none: matched by its name)
    phase: str
    ready: bool
    manufacturer: str = ""  # whose Device Manager it is (its labels, else its DaemonSet's name)


@dataclass
class ClusterView:
    """What the API server holds about one node (see the module docstring). ``None`` = absent or not
    read; :attr:`errors` tells the two apart."""

    node: str
    node_labels: dict[str, str] | None = None
    allocatable: dict[str, str] | None = None
    node_feature_labels: dict[str, str] | None = None
    devices_groups: list[dict[str, Any]] | None = None
    devices_status: list[dict[str, Any]] | None = None
    pods: list[DevicePod] | None = None
    absent: list[str] = field(default_factory=list)  # "Node", "NodeFeature", "Devices" answered 404
    errors: dict[str, str] = field(default_factory=dict)  # part -> one line


def make_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    server: str | None = None,
) -> kubernetes.client.ApiClient:
    """An API client: ``kubeconfig`` (its ``context``, else its current one; ``server`` overrides its
    URL), else ``server`` alone, else the in-cluster service account, else ``KUBECONFIG`` or
    ``~/.kube/config``. Raises :class:`ClusterConfigError` naming what was tried."""
    config = kubernetes.client.Configuration()
    path = kubeconfig or None
    if path is None and not server and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
        if not os.path.exists(path):
            raise ClusterConfigError(
                "no API server to read the cluster's view from: no kubeconfig, no api_server, not in a cluster "
                f"(KUBERNETES_SERVICE_HOST unset) and {path} does not exist; name a kubeconfig"
            )
    try:
        if path is not None:
            _load_kubeconfig(path, context, config)
        elif not server:
            from kubernetes.config.incluster_config import load_incluster_config  # noqa: PLC0415

            load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the client's loader raises anything from deep inside a bad file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = f"kubeconfig {path}" if path else "the in-cluster service account"
        raise ClusterConfigError(
            f"the API-server configuration could not be loaded from {where}: {first[:300]}"
        ) from None
    if server:
        if not server.startswith(("http://", "https://")):
            raise ClusterConfigError(f"api_server {server!r} is not a URL; use https://host:port")
        config.host = server.rstrip("/")
    config.retries = 0  # one attempt per read: the timeout is the whole budget
    return kubernetes.client.ApiClient(configuration=config)


def _load_kubeconfig(path: str, context: str | None, config: kubernetes.client.Configuration) -> None:
    if not os.path.isfile(path):
        raise ClusterConfigError(f"kubeconfig {path} is not a regular file")
    from kubernetes.config.kube_config import load_kube_config  # noqa: PLC0415

    load_kube_config(config_file=path, context=context or None, client_configuration=config)  # type: ignore[no-untyped-call]


def _strings(value: Any) -> dict[str, str]:
    """A JSON map of strings (anything else in it dropped): labels, allocatable."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _device_pod(pod: Mapping[str, Any]) -> DevicePod | None:
    """The Pod as a :class:`DevicePod` when it is the Device Manager's, else ``None``: labelled as the
    chart labels it (``app.kubernetes.io/name: gpustack-operator``, component ``device-manager-<m>``,
    ``gpustack.ai/manufacturer: <m>`` -- whatever ``fullnameOverride`` made of the DaemonSet's name), or
    owned by a DaemonSet ``gpustack-operator-device-manager-<m>``, or, naming no owner, named after one."""
    meta = _map(pod.get("metadata"))
    name = str(meta.get("name") or "")
    labels = _strings(meta.get("labels"))
    owner = ""
    for ref in _dicts(meta.get("ownerReferences")):
        if ref.get("kind") == "DaemonSet":
            owner = str(ref.get("name") or "")
    component = labels.get(COMPONENT_LABEL, "")
    if labels.get(NAME_LABEL) == "gpustack-operator" and component.startswith(COMPONENT_PREFIX):
        manufacturer = labels.get(MANUFACTURER_LABEL) or component[len(COMPONENT_PREFIX) :]
    elif owner.startswith(DAEMONSET_PREFIX):
        manufacturer = owner[len(DAEMONSET_PREFIX) :]
    elif not owner and name.startswith(DAEMONSET_PREFIX):
        manufacturer = name[len(DAEMONSET_PREFIX) :].rsplit("-", 1)[0]
    else:
        return None
    status = _map(pod.get("status"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _dicts(status.get("conditions")))
    phase = str(status.get("phase") or "Unknown")
    return DevicePod(name, str(meta.get("namespace") or ""), owner, phase, ready, manufacturer)


def _get(client: kubernetes.client.ApiClient, path: str, timeout: float) -> dict[str, Any] | None:
    """The object, or ``None`` on 404. Raises :class:`KubeRequestError` otherwise."""
    try:
        return request(client, "GET", path, timeout=timeout)
    except KubeRequestError as exc:
        if exc.status == NOT_FOUND:
            return None
        raise


def read_cluster_view(
    client: kubernetes.client.ApiClient,
    node: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    timeout: float = REQUEST_TIMEOUT,
) -> ClusterView:
    """The cluster's view of ``node`` (see the module docstring); never raises for the API's answers."""
    view = ClusterView(node)
    name = quote(node, safe="")
    ns = quote(namespace, safe="")
    reads = (
        ("Node", f"/api/v1/nodes/{name}"),
        (
            "NodeFeature",
            f"/apis/{NFD_API_VERSION}/namespaces/{ns}/nodefeatures/{quote(node_feature_name(node), safe='')}",
        ),
        ("Devices", f"/apis/{crds.API_VERSION}/{crds.PLURAL}/{name}"),
    )
    for part, path in reads:
        try:
            doc = _get(client, path, timeout)
        except KubeRequestError as exc:
            view.errors[part] = str(exc)
            continue
        if doc is None:
            view.absent.append(part)
            continue
        _fill(view, part, doc)
    try:
        listed = request(
            client,
            "GET",
            "/api/v1/pods",
            query=[("fieldSelector", f"spec.nodeName={node}"), ("limit", str(MAX_PODS))],
            timeout=timeout,
        )
    except KubeRequestError as exc:
        view.errors["Pods"] = str(exc)
    else:
        pods = (_device_pod(p) for p in _dicts(listed.get("items")))
        view.pods = [p for p in pods if p is not None]
    return view


def read_cluster_views(
    client: kubernetes.client.ApiClient,
    nodes: Sequence[str],
    *,
    namespace: str = DEFAULT_NAMESPACE,
    timeout: float = REQUEST_TIMEOUT,
    workers: int = READ_WORKERS,
) -> list[ClusterView]:
    """:func:`read_cluster_view` of each of ``nodes``, in their order, up to ``workers`` nodes at a time
    (bounded by the client's connection pool, so no connection is opened only to be discarded)."""
    pool = client.configuration.connection_pool_maxsize or 1
    width = max(1, min(workers, pool, len(nodes)))

    def read(node: str) -> ClusterView:
        return read_cluster_view(client, node, namespace=namespace, timeout=timeout)

    if width == 1:
        return [read(node) for node in nodes]
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix="clusterview") as executor:
        return list(executor.map(read, nodes))


def _fill(view: ClusterView, part: str, doc: Mapping[str, Any]) -> None:
    meta = _map(doc.get("metadata"))
    spec = _map(doc.get("spec"))
    status = _map(doc.get("status"))
    if part == "Node":
        view.node_labels = _strings(meta.get("labels"))
        view.allocatable = _strings(status.get("allocatable"))
    elif part == "NodeFeature":
        view.node_feature_labels = _strings(spec.get("labels"))
    else:
        view.devices_groups = _groups(spec.get("groups"))
        view.devices_status = _groups(status.get("groups"))


def _groups(value: Any) -> list[dict[str, Any]]:
    """``Devices`` groups as plain JSON, each group's ``accelerators`` kept to its objects (whatever a
    hand-edited or foreign object carries, the comparison only ever meets dicts and lists)."""
    return [{**g, "accelerators": _dicts(g.get("accelerators"))} for g in _dicts(value)]


__all__ = [
    "DAEMONSET_PREFIX",
    "ClusterConfigError",
    "ClusterView",
    "DevicePod",
    "make_client",
    "read_cluster_view",
    "read_cluster_views",
]
