"""tests/tools/verify_fleet.py (issue 19 "Numbers", bench/deploy_bench.py): the simulated fleet it seeds
is healthy -- every node compares ``ok`` through the real cluster read and comparison -- and a node the
helper did not publish for is not (the seeding is what makes it agree)."""

from __future__ import annotations

from gpustack_operator import api
from gpustack_operator.discovery.detect import facts_document
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import make_client, read_cluster_view
from gpustack_operator.verify import compare

from tests.kube.routes_publish import PublishStandIn
from tests.tools.verify_fleet import FIXTURE_HOSTS, HEALTHY_FIXTURES, NS, fleet_hosts, fleet_seeds, seed_standin


def test_every_seeded_node_compares_ok_and_an_unseeded_one_does_not() -> None:
    hosts = fleet_hosts(len(HEALTHY_FIXTURES) + 1)
    assert [fixture for fixture, _node in hosts.values()][-1] == HEALTHY_FIXTURES[0]  # round-robin
    seeds = fleet_seeds(hosts)
    facts = {
        f: facts_document(api.run_detect(api.make_request(str(FIXTURE_HOSTS / f), None))) for f in HEALTHY_FIXTURES
    }
    assert sum(len(s.manufacturers) for s in seeds) >= len(HEALTHY_FIXTURES) - 3  # Device Manager Pods seeded
    with PublishStandIn(schema=crds.openapi_schema()) as server:
        client = make_client(server=server.url)
        seed_standin(server, seeds, client)
        for seed in seeds:
            view = read_cluster_view(client, seed.node, namespace=NS, timeout=10)
            assert view.errors == {}, seed
            # a node without accelerators runs no Device Manager: nothing is published for it
            assert view.absent == ([] if seed.groups else ["NodeFeature", "Devices"]), seed
            assert compare(facts[seed.fixture], view) == [], (seed.host, seed.fixture)
        unseeded = read_cluster_view(client, "k8s-node-999", namespace=NS, timeout=10)
        assert [d.kind for d in compare(facts["h100-sxm-8x"], unseeded)] == ["absent", "absent", "absent"]
