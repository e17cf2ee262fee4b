"""The node's pods as the allocator reads them, listed through the official ``kubernetes`` client.

:func:`make_api_client` picks the connection the way client-go's ``BuildConfigFromFlags`` does, an
explicit flag first: ``--kubeconfig`` (with ``--kube-api-server`` overriding its server), else
``--kube-api-server`` alone, else the in-cluster service account when ``KUBERNETES_SERVICE_HOST`` is set
(the DaemonSet), else the file ``KUBECONFIG`` names; the client it returns rate-limits every request
(``--kube-conn-qps`` / ``--kube-conn-burst``, ``kube/ratelimit.py``). :class:`NodePods` lists the pods
bound to one node (``spec.nodeName=<node>``, ``CoreV1Api.list_pod_for_all_namespaces``) with a timeout
and converts each ``V1Pod`` into the allocator's :class:`~gpustack_operator.allocator.pods.PodSpec`;
any failure is :class:`~gpustack_operator.allocator.pods.PodsUnavailableError` naming the endpoint and
the error (an allocation that cannot identify its container is refused, never guessed).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import kubernetes.client
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import load_incluster_config

from gpustack_operator.allocator.pods import ContainerSpec, PodSpec, PodsUnavailableError
from gpustack_operator.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS, RateLimitedApiClient, TokenBucket

log = logging.getLogger(__name__)

LIST_TIMEOUT = 5.0  # seconds for one list of the node's pods (connect + read)


class KubeConfigError(ValueError):
    """No usable connection to the API server could be built (names the source and the remedy)."""


def make_api_client(
    kubeconfig: str | None,
    server: str | None,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
) -> kubernetes.client.ApiClient:
    """A ``kubernetes.client.ApiClient`` (see the module docstring for the order of sources) whose every
    request takes a token of a ``qps``/``burst`` bucket first (``--kube-conn-qps`` /
    ``--kube-conn-burst``, supplement §3.5; :mod:`gpustack_operator.kube.ratelimit`). Raises
    :class:`KubeConfigError`."""
    try:
        limiter = TokenBucket(qps, burst)
    except ValueError as exc:
        raise KubeConfigError(str(exc)) from None
    config = kubernetes.client.Configuration()
    try:
        if kubeconfig:
            _regular_kubeconfig(kubeconfig, "--kubeconfig")
            _load_kubeconfig(kubeconfig, config)
            source = f"kubeconfig {kubeconfig}"
        elif server:
            source = "--kube-api-server"
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
            source = "the in-cluster service account"
        elif os.environ.get("KUBECONFIG"):
            path = os.environ["KUBECONFIG"].split(os.pathsep)[0]
            _regular_kubeconfig(path, "KUBECONFIG")
            _load_kubeconfig(path, config)
            source = f"kubeconfig {path} (KUBECONFIG)"
        else:
            raise KubeConfigError(
                "no API server to list the node's pods from: not in a cluster (KUBERNETES_SERVICE_HOST is unset) "
                "and neither --kubeconfig, KUBECONFIG nor --kube-api-server names one"
            )
    except ConfigException as exc:
        raise KubeConfigError(f"the API-server configuration could not be loaded: {exc}") from None
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        # the client's loader takes any YAML: a file that is not a kubeconfig raises from deep inside it
        raise KubeConfigError(
            f"the API-server configuration could not be loaded: not a kubeconfig ({type(exc).__name__}: "
            f"{str(exc)[:200]}); point --kubeconfig or KUBECONFIG at a kubeconfig file"
        ) from None
    if server:
        if not server.startswith(("http://", "https://")):
            raise KubeConfigError(f"--kube-api-server {server!r} is not a URL; use https://host:port")
        config.host = server.rstrip("/")
    config.retries = 0  # one attempt per list: the caller's timeout is the whole budget
    log.info(
        "API server %s (from %s), at most %g requests/s in bursts of %d",
        config.host,
        source,
        limiter.qps,
        limiter.burst,
    )
    return RateLimitedApiClient(configuration=config, limiter=limiter)


def _regular_kubeconfig(path: str, flag: str) -> None:
    """A kubeconfig must be a regular file: a FIFO would block the loader, a directory or device is no
    kubeconfig. Raises :class:`KubeConfigError` naming ``flag``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise KubeConfigError(f"{flag} {path}: no such file") from None
    except OSError as exc:
        raise KubeConfigError(f"{flag} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise KubeConfigError(f"{flag} {path}: not a regular file; point it at a kubeconfig file")


def _load_kubeconfig(path: str, config: kubernetes.client.Configuration) -> None:
    """The kubeconfig loader (requests, oauthlib: imported only here, see ``gpustack_operator.kube``)."""
    from kubernetes.config.kube_config import load_kube_config  # noqa: PLC0415

    load_kube_config(config_file=path, client_configuration=config)  # type: ignore[no-untyped-call]


# -- V1Pod → PodSpec -------------------------------------------------------------------------------


def _epoch(value: datetime | str | None) -> float:
    if value is None:
        return 0.0
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _env(entries: Iterable[Any] | None) -> dict[str, str]:
    """Literal ``env:`` values; a ``valueFrom`` entry is present with ``""`` (never-overwrite still sees
    the name, spec "Sliced")."""
    env: dict[str, str] = {}
    for entry in entries or ():
        env[entry.name] = "" if entry.value_from is not None else (entry.value or "")
    return env


def _resources(resources: Any) -> dict[str, str]:
    """``requests`` ∪ ``limits`` as quantity strings, limits winning (an extended resource's request
    equals its limit)."""
    if resources is None:
        return {}
    merged: dict[str, str] = {k: str(v) for k, v in (resources.requests or {}).items()}
    merged.update({k: str(v) for k, v in (resources.limits or {}).items()})
    return merged


def _container(container: Any, *, init: bool) -> ContainerSpec:
    return ContainerSpec(
        name=container.name, env=_env(container.env), resources=_resources(container.resources), init=init
    )


def pod_spec(pod: Any) -> PodSpec:
    """One ``V1Pod`` as the allocator reads it (init containers first, marked ``init``)."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    containers = tuple(_container(c, init=True) for c in (spec.init_containers or ())) + tuple(
        _container(c, init=False) for c in (spec.containers or ())
    )
    annotations: Mapping[str, str] = dict(meta.annotations or {})
    return PodSpec(
        uid=meta.uid or "",
        namespace=meta.namespace or "",
        name=meta.name or "",
        created=_epoch(meta.creation_timestamp),
        phase=(status.phase if status is not None and status.phase else "Pending"),
        node=spec.node_name,
        runtime_class=spec.runtime_class_name,
        deleting=meta.deletion_timestamp is not None,
        annotations=annotations,
        containers=containers,
    )


# -- a Pod as JSON → PodSpec (the watch's events and lists, read without the client's models) --------


class PodParseError(ValueError):
    """A Pod object from the API server that cannot be read (names the field)."""


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise PodParseError(f"{where}.{key} is a {type(value).__name__}, not what a Pod carries there")
    return value


def _text(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = _field(obj, key, str, where)
    return value or ""


def _map(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = _field(obj, key, dict, where)
    return value or {}


def _json_env(entries: Any, where: str) -> dict[str, str]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise PodParseError(f"{where}.env is not a list")
    env: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise PodParseError(f"{where}.env holds a {type(entry).__name__}, not an entry")
        name = _text(entry, "name", f"{where}.env[]")
        value = entry.get("value")
        env[name] = "" if entry.get("valueFrom") is not None else (value if isinstance(value, str) else "")
    return env


def _quantity(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PodParseError(f"{where} is a {type(value).__name__}, not a quantity")
    return str(value)


def _json_resources(container: Mapping[str, Any], where: str) -> dict[str, str]:
    resources = _map(container, "resources", where)
    merged: dict[str, str] = {}
    for part in ("requests", "limits"):  # limits win
        for key, value in _map(resources, part, f"{where}.resources").items():
            merged[str(key)] = _quantity(value, f"{where}.resources.{part}.{key}")
    return merged


def _json_containers(spec: Mapping[str, Any], key: str, *, init: bool) -> tuple[ContainerSpec, ...]:
    items = spec.get(key)
    if items is None:
        return ()
    if not isinstance(items, list):
        raise PodParseError(f"spec.{key} is not a list")
    out = []
    for n, item in enumerate(items):
        where = f"spec.{key}[{n}]"
        if not isinstance(item, dict):
            raise PodParseError(f"{where} is not a container")
        out.append(
            ContainerSpec(
                name=_text(item, "name", where),
                env=_json_env(item.get("env"), where),
                resources=_json_resources(item, where),
                init=init,
            )
        )
    return tuple(out)


def _json_epoch(value: Any, where: str) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, str):
        raise PodParseError(f"{where} is not a timestamp")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        raise PodParseError(f"{where} {value[:40]!r} is not an RFC 3339 timestamp") from None


def pod_from_json(obj: Any) -> PodSpec:
    """One Pod object as the API server sends it (a list item or a watch event's object), read into the
    allocator's :class:`PodSpec` -- the same reading as :func:`pod_spec` gives a ``V1Pod``. Raises
    :class:`PodParseError` naming the field, never anything else."""
    if not isinstance(obj, dict):
        raise PodParseError(f"the object is a {type(obj).__name__}, not a Pod")
    meta = _map(obj, "metadata", "the Pod")
    spec = _map(obj, "spec", "the Pod")
    status = _map(obj, "status", "the Pod")
    uid = _text(meta, "uid", "metadata")
    if not uid:
        raise PodParseError("metadata.uid is missing")
    annotations = {str(k): v for k, v in _map(meta, "annotations", "metadata").items() if isinstance(v, str)}
    return PodSpec(
        uid=uid,
        namespace=_text(meta, "namespace", "metadata"),
        name=_text(meta, "name", "metadata"),
        created=_json_epoch(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        phase=_text(status, "phase", "status") or "Pending",
        node=_text(spec, "nodeName", "spec") or None,
        runtime_class=_text(spec, "runtimeClassName", "spec") or None,
        deleting=meta.get("deletionTimestamp") is not None,
        annotations=annotations,
        containers=_json_containers(spec, "initContainers", init=True)
        + _json_containers(spec, "containers", init=False),
    )


def resource_version(obj: Any) -> str:
    """``metadata.resourceVersion`` of an object (``""`` when it has none)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    value = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else ""


POD_LIST_PATH = "/api/v1/pods"  # CoreV1Api.list_pod_for_all_namespaces


class NodePods:
    """The pods bound to ``node``, freshly listed on every call (``PodSource.node_pods``).

    The request is ``CoreV1Api.list_pod_for_all_namespaces(field_selector=...)`` made through the
    client's own :class:`~kubernetes.client.ApiClient` steps -- ``param_serialize`` (the bearer token,
    the query), ``call_api`` with the timeout, ``response_deserialize`` into ``V1PodList`` -- exactly the
    steps that method takes, without importing ``core_v1_api``: that one module (400 validated methods)
    is ~21 MiB, a quarter of the Device Manager's memory budget, for the one call used."""

    def __init__(self, api_client: kubernetes.client.ApiClient, node: str, timeout: float = LIST_TIMEOUT) -> None:
        if not node:
            raise KubeConfigError("the node name is empty: pass --node-name or set KUBERNETES_NODE_NAME")
        self.client = api_client
        self.endpoint = str(api_client.configuration.host)
        self.node = node
        self.timeout = timeout

    def __call__(self) -> list[PodSpec]:
        return self.list()

    def _list_pod_for_all_namespaces(self) -> Any:
        request = self.client.param_serialize(
            method="GET",
            resource_path=POD_LIST_PATH,
            query_params=[("fieldSelector", f"spec.nodeName={self.node}")],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.client.call_api(*request, _request_timeout=self.timeout)
        response.read()  # type: ignore[no-untyped-call]
        return self.client.response_deserialize(response, {"200": "V1PodList", "401": None}).data

    def list(self) -> list[PodSpec]:
        """Raises :class:`PodsUnavailableError` naming the endpoint and the error."""
        try:
            answer = self._list_pod_for_all_namespaces()
        except ApiException as exc:
            reason = f"HTTP {exc.status} {exc.reason}".strip()
            raise PodsUnavailableError(self._failed(reason)) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise PodsUnavailableError(self._failed(f"{type(exc).__name__}: {_first_line(exc)}")) from None
        try:
            return [pod_spec(p) for p in answer.items or ()]
        except (AttributeError, TypeError, ValueError) as exc:
            raise PodsUnavailableError(self._failed(f"an unreadable pod list ({type(exc).__name__}: {exc})")) from None

    def _failed(self, reason: str) -> str:
        return f"the pods of node {self.node} could not be listed from the API server at {self.endpoint}: {reason}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


__all__ = [
    "LIST_TIMEOUT",
    "KubeConfigError",
    "NodePods",
    "PodParseError",
    "make_api_client",
    "pod_from_json",
    "pod_spec",
    "resource_version",
]
