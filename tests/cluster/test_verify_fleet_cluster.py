"""tests/tools/verify_fleet.py's REST seeding against the real API server (issue 19 "Numbers",
bench/deploy_bench.py --api kube-local): every seeded node -- one per healthy fixture -- compares ``ok``
through the real cluster read, the Devices the real schema validates; afterwards the test deletes what
it made (Nodes, Pods, NodeFeatures, Devices; the CRDs stay, as other tests' do)."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes.client
import pytest
from gpustack_operator import api
from gpustack_operator.discovery.detect import facts_document
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import read_cluster_view
from gpustack_operator.kube.publish import node_feature_name
from gpustack_operator.kube.rest import KubeRequestError, request
from gpustack_operator.verify import compare
from gpustack_operator.worker.startup import apply_crds

from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD, apply_crd, client_of
from tests.tools.kube_cluster import KubeCluster
from tests.tools.verify_fleet import (
    FIXTURE_HOSTS,
    HEALTHY_FIXTURES,
    NS,
    NodeSeed,
    dm_pod,
    fleet_hosts,
    fleet_seeds,
    seed_api,
)


def _delete(client: kubernetes.client.ApiClient, path: str) -> None:
    try:
        request(client, "DELETE", path)
    except KubeRequestError as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def seeded(kube_cluster: KubeCluster) -> Iterator[tuple[kubernetes.client.ApiClient, list[NodeSeed]]]:
    client = client_of(kube_cluster)
    apply_crd(client, NODE_FEATURE_CRD)
    apply_crds(client, [crds.devices_crd()])
    try:
        request(client, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
    except KubeRequestError as exc:
        assert exc.status == 409, exc
    seeds = fleet_seeds({f"vf-{h}": (f, f"vf-{n}") for h, (f, n) in fleet_hosts(len(HEALTHY_FIXTURES)).items()})
    try:
        seed_api(client, seeds)
        yield client, seeds
    finally:
        for seed in seeds:
            for maker in seed.manufacturers:
                name = dm_pod(seed, maker)["metadata"]["name"]
                _delete(client, f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
            _delete(
                client, f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures/{node_feature_name(seed.node)}"
            )
            _delete(client, f"/apis/{crds.API_VERSION}/{crds.PLURAL}/{seed.node}")
            _delete(client, f"/api/v1/nodes/{seed.node}")


def test_every_node_seeded_over_rest_compares_ok(
    seeded: tuple[kubernetes.client.ApiClient, list[NodeSeed]],
) -> None:
    client, seeds = seeded
    facts = {
        f: facts_document(api.run_detect(api.make_request(str(FIXTURE_HOSTS / f), None))) for f in HEALTHY_FIXTURES
    }
    for seed in seeds:
        view = read_cluster_view(client, seed.node, namespace=NS, timeout=10)
        assert view.errors == {}, seed.node
        assert view.absent == ([] if seed.groups else ["NodeFeature", "Devices"]), seed.node
        assert compare(facts[seed.fixture], view) == [], (seed.node, seed.fixture)
    assert sum(1 for s in seeds if s.groups) == len(HEALTHY_FIXTURES) - 3  # the three CPU-only shapes publish nothing
