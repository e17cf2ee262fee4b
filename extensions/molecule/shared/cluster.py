"""Controller-side helpers for the scenarios that run against a real API server (``verify``, ``deploy``).

Those scenarios start no container: their roles run on the controller and talk to the suite's one-node
cluster (tests/tools/kube_cluster.py), whose kubeconfig they get in ``GPUSTACK_TEST_KUBECONFIG``
(tests/integration/test_molecule.py sets it from the session's ``kube_cluster``; by hand: the kubeconfig
``tests/tools/kube_local/up.sh STATE`` prints, docs/testing-kube-local.md, or any scratch cluster you may
write to). Only one such cluster runs on a machine, so each scenario keeps to its own names (nodes,
namespace, release) and removes them in its destroy step.

Used by the scenarios' playbooks as a script (``python cluster.py check|crds|remove-namespace``) and
by their verifiers as a module.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]  # extensions/molecule/shared/cluster.py
sys.path.insert(0, str(REPO))

import kubernetes.client  # noqa: E402
from gpustack_operator.kube import crds  # noqa: E402
from gpustack_operator.kube.clusterview import make_client  # noqa: E402
from gpustack_operator.kube.rest import KubeRequestError, request  # noqa: E402

from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD  # noqa: E402
from tests.cluster.test_worker import RULE_CRD  # noqa: E402

KUBECONFIG_ENV = "GPUSTACK_TEST_KUBECONFIG"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
TIMEOUT = 60.0


class ClusterUnavailableError(RuntimeError):
    """No cluster to run against: the message says what to set."""


def kubeconfig() -> str:
    """The cluster's kubeconfig from ``GPUSTACK_TEST_KUBECONFIG``; :class:`ClusterUnavailableError`
    naming the variable when it is unset or names no file."""
    path = os.environ.get(KUBECONFIG_ENV, "")
    if not path or not os.path.isfile(path):
        raise ClusterUnavailableError(
            f"{KUBECONFIG_ENV} must name the kubeconfig of a scratch cluster these scenarios may write to "
            f"(got {path!r}): tests/integration/test_molecule.py sets it from the suite's kube_cluster"
        )
    return path


def client() -> kubernetes.client.ApiClient:
    return make_client(kubeconfig=kubeconfig())


def get(c: kubernetes.client.ApiClient, path: str) -> dict[str, Any] | None:
    """The object at ``path``, or None on 404."""
    try:
        return request(c, "GET", path)
    except KubeRequestError as exc:
        if exc.status == 404:
            return None
        raise


def create(c: kubernetes.client.ApiClient, path: str, body: dict[str, Any]) -> bool:
    """POST ``body`` to the collection ``path``; False when it already exists."""
    try:
        request(c, "POST", path, body=body)
    except KubeRequestError as exc:
        if exc.status == 409:
            return False
        raise
    return True


def delete(c: kubernetes.client.ApiClient, path: str) -> bool:
    """DELETE ``path``; False when it was not there."""
    try:
        request(c, "DELETE", path)
    except KubeRequestError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def wait_for(what: str, predicate: Any, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def apply_crd(c: kubernetes.client.ApiClient, crd: dict[str, Any]) -> bool:
    """Create ``crd`` unless a CRD of that name exists (another scenario, test or the chart made it) and
    wait until it is Established. True when this call created it."""
    made = create(c, CRD_PATH, crd)
    name = crd["metadata"]["name"]

    def established() -> bool:
        got = get(c, f"{CRD_PATH}/{name}") or {}
        return any(
            cond.get("type") == "Established" and cond.get("status") == "True"
            for cond in (got.get("status") or {}).get("conditions") or []
        )

    wait_for(f"the CRD {name} Established", established)
    return made


def ensure_namespace(c: kubernetes.client.ApiClient, name: str) -> bool:
    """Create the namespace unless it exists; wait while an earlier run's copy is still terminating."""
    path = f"/api/v1/namespaces/{name}"

    def usable() -> bool:
        got = get(c, path)
        if got is None:
            create(c, "/api/v1/namespaces", {"metadata": {"name": name}})
            return False
        return (got.get("status") or {}).get("phase") == "Active"

    existed = get(c, path) is not None
    wait_for(f"namespace {name} Active", usable)
    return not existed


def remove_namespace(c: kubernetes.client.ApiClient, name: str) -> bool:
    """Delete the namespace and wait until it is gone (its objects with it)."""
    path = f"/api/v1/namespaces/{name}"
    removed = delete(c, path)
    wait_for(f"namespace {name} gone", lambda: get(c, path) is None, timeout=120)
    return removed


NFD_CRDS = (NODE_FEATURE_CRD, RULE_CRD)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("check", "crds", "remove-namespace"))
    parser.add_argument("name", nargs="?", default="", help="remove-namespace: the namespace")
    parser.add_argument("--nfd", action="store_true", help="crds: NFD's NodeFeature and NodeFeatureRule")
    parser.add_argument("--devices", action="store_true", help="crds: the package's Devices CRD")
    args = parser.parse_args(argv)
    try:
        c = client()
        if args.action == "check":
            request(c, "GET", "/version")
            print(f"cluster at {c.configuration.host} answers")
            return 0
        if args.action == "remove-namespace":
            if not args.name:
                parser.error("remove-namespace needs the namespace's name")
            removed = remove_namespace(c, args.name)
            print(f"namespace {args.name}: {'removed' if removed else 'absent'}")
            return 0
        wanted = [*(NFD_CRDS if args.nfd else ()), *([crds.devices_crd()] if args.devices else [])]
        made = [crd["metadata"]["name"] for crd in wanted if apply_crd(c, crd)]
        print("created: " + (", ".join(made) or "none"))
        return 0
    except (ClusterUnavailableError, KubeRequestError, RuntimeError) as exc:
        print(f"cluster.py {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
