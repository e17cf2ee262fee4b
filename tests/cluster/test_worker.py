"""The worker against the real API server and controller-manager (tests/tools/kube_cluster.py):

* startup applies the Devices CRD (Established) and, once NFD's NodeFeatureRule CRD appears (created
  here: NFD is not installed in the suite's cluster), the ``gpustack-cpu-info`` rule;
* a Node's NFD labels -> its NodeFeature ``<node>-gpustack-worker``, updated within 1 s of a change;
* the ``gpustack.ai/managed`` mark copied onto the Node's Devices;
* a deleted Node's Devices deleted by the worker (created without an ownerReference, so the garbage
  collector cannot be the one that deletes it);
* the Lease held while running and released on stop.

The Nodes here are API objects with no kubelet (a name unlike the cluster's own node).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator.kube.crds import CRD_NAME, devices_crd
from gpustack_operator.kube.rest import MERGE_PATCH, KubeRequestError, request
from gpustack_operator.settings import PciVendorMatch
from gpustack_operator.worker.nodekey import GENERAL_PREFIX
from gpustack_operator.worker.run import Worker, WorkerOptions
from gpustack_operator.worker.startup import apply_crds

from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD, NS, apply_crd, client_of
from tests.tools.kube_cluster import KubeCluster

NODE = "worker-test-node"
RULE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodefeaturerules.nfd.k8s-sigs.io"},
    "spec": {
        "group": "nfd.k8s-sigs.io",
        "names": {
            "kind": "NodeFeatureRule",
            "listKind": "NodeFeatureRuleList",
            "plural": "nodefeaturerules",
            "singular": "nodefeaturerule",
        },
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        ],
    },
}
RULE_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodefeaturerules.nfd.k8s-sigs.io"
NF_PATH = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures/{NODE}-gpustack-worker"
DEVICES_PATH = f"/apis/worker.gpustack.ai/v1alpha1/devices/{NODE}"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/worker.gpustack.ai"


def get(client: kubernetes.client.ApiClient, path: str) -> dict[str, Any] | None:
    try:
        return request(client, "GET", path)
    except KubeRequestError as exc:
        if exc.status == 404:
            return None
        raise


def delete(client: kubernetes.client.ApiClient, path: str) -> None:
    try:
        request(client, "DELETE", path)
    except KubeRequestError as exc:
        assert exc.status == 404, exc


def until(what: str, check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout}s")


@pytest.fixture
def client(kube_cluster: KubeCluster) -> Iterator[kubernetes.client.ApiClient]:
    c = client_of(kube_cluster)
    apply_crd(c, NODE_FEATURE_CRD)
    try:
        request(c, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    except KubeRequestError as exc:
        assert exc.status == 409, exc
    delete(c, RULE_CRD_PATH)
    until("no NodeFeatureRule CRD", lambda: get(c, RULE_CRD_PATH) is None, 30)
    yield c
    for path in (f"/api/v1/nodes/{NODE}", DEVICES_PATH, NF_PATH, LEASE_PATH, RULE_CRD_PATH):
        delete(c, path)


def test_the_worker_on_a_real_api_server(client: kubernetes.client.ApiClient) -> None:
    options = WorkerOptions(
        namespace=NS,
        vendors=[PciVendorMatch(vendor="10de")],
        identity="worker-test",
        retry_period=0.2,
        retry_delay=0.2,
        backoff_max=0.5,
    )
    worker = Worker(client, options)
    worker.start()  # the CRD applied and Established before start returns
    crd = request(client, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    assert apply_crds(client, [devices_crd()]) == {CRD_NAME: "unchanged"}  # a restart writes nothing
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        until("the rule retried while NFD's CRD is absent", lambda: worker.rule.attempts >= 2)
        assert not worker.rule.applied.is_set()
        apply_crd(client, RULE_CRD)
        until("the rule applied once the CRD is there", worker.rule.applied.is_set, 20)
        rule = request(client, "GET", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules/gpustack-cpu-info")
        assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpustack-operator"
        assert len(rule["spec"]["rules"]) == 3

        labels = {
            "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
            "feature.node.kubernetes.io/cpu-model.family": "6",
            "feature.node.kubernetes.io/cpu-model.id": "143",
        }
        node = request(client, "POST", "/api/v1/nodes", body={"metadata": {"name": NODE, "labels": labels}})
        nf = until("the worker's NodeFeature", lambda: get(client, NF_PATH))
        assert nf["spec"]["labels"][f"{GENERAL_PREFIX}intel-6-143"] == "true"
        assert nf["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

        started = time.monotonic()
        name = {"feature.gpustack.ai/cpu-name": "Intel(R) Xeon(R) Platinum 8480+"}
        request(
            client, "PATCH", f"/api/v1/nodes/{NODE}", body={"metadata": {"annotations": name}}, content_type=MERGE_PATCH
        )
        key = f"{GENERAL_PREFIX}intel-xeon-platinum-8480"
        until(
            "the NodeFeature updated",
            lambda: key in (get(client, NF_PATH) or {"spec": {"labels": {}}})["spec"]["labels"],
        )
        took = time.monotonic() - started
        assert took <= 1.0, f"node label change -> NodeFeature updated in {took:.2f}s (issue 19: <= 1 s)"

        devices = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Devices", "metadata": {"name": NODE}}
        request(client, "POST", "/apis/worker.gpustack.ai/v1alpha1/devices", body={**devices, "spec": {"groups": []}})
        mark = {"metadata": {"labels": {"gpustack.ai/managed": "true"}}}
        request(client, "PATCH", f"/api/v1/nodes/{NODE}", body=mark, content_type=MERGE_PATCH)
        until(
            "the managed mark on the Devices",
            lambda: (
                ((get(client, DEVICES_PATH) or {})["metadata"].get("labels") or {}).get("gpustack.ai/managed") == "true"
            ),
        )

        lease = request(client, "GET", LEASE_PATH)
        assert lease["spec"]["holderIdentity"] == "worker-test"

        request(client, "DELETE", f"/api/v1/nodes/{NODE}")
        until("the departed node's Devices deleted", lambda: get(client, DEVICES_PATH) is None)
    finally:
        worker.stop()
        thread.join(15)
    assert not thread.is_alive()
    assert request(client, "GET", LEASE_PATH)["spec"]["holderIdentity"] == ""
