"""Bus distance between an accelerator and an RDMA interface (supplement §7.3; reference §10)."""

import itertools

from gpustack_operator.discovery.topology_distance import (
    BusCoordinates,
    TopologyDistance,
    bus_distance,
    closest_distance,
)
from hypothesis import given
from hypothesis import strategies as st


def at(bus: str, root: str, switches: list[str], numa: str) -> BusCoordinates:
    return BusCoordinates(pci_bus_id=bus, pci_root_id=root, pci_switches=tuple(switches), numa_affinity=numa)


def test_the_vocabulary_is_the_runtime_table_in_order_with_room_between_levels() -> None:
    table = [(d.word, int(d)) for d in TopologyDistance]
    assert table == [
        ("SELF", 0),
        ("LINK", 5),
        ("PIX", 10),
        ("PXB", 20),
        ("PHB", 30),
        ("NODE", 40),
        ("SYS", 50),
        ("UNK", 100),
    ]
    assert all(b - a >= 2 for (_, a), (_, b) in itertools.pairwise(table))


def test_pix_behind_the_same_innermost_switch_port() -> None:
    gpu = at("0000:1b:00.0", "0000:15:01.0", ["0000:17:00.0", "0000:16:00.0", "0000:15:01.0"], "0")
    nic = at("0000:18:00.0", "0000:15:01.0", ["0000:17:00.0", "0000:16:00.0", "0000:15:01.0"], "0")
    assert bus_distance(gpu, nic) is TopologyDistance.PIX


def test_pxb_through_several_switch_ports_under_one_root() -> None:
    # the HGX tray: GPU and NIC on two downstream ports of one PEX switch
    gpu = at("0000:1b:00.0", "0000:15:01.0", ["0000:17:03.0", "0000:16:00.0", "0000:15:01.0"], "0")
    nic = at("0000:18:00.0", "0000:15:01.0", ["0000:17:00.0", "0000:16:00.0", "0000:15:01.0"], "0")
    assert bus_distance(gpu, nic) is TopologyDistance.PXB


def test_node_on_different_roots_of_one_numa_node_never_phb() -> None:
    gpu = at("0000:01:00.0", "0000:00:01.1", ["0000:00:01.1"], "0")
    nic = at("0000:21:00.0", "0000:20:01.1", ["0000:20:01.1"], "0")
    assert bus_distance(gpu, nic) is TopologyDistance.NODE


def test_sys_across_numa_nodes() -> None:
    gpu = at("0000:01:00.0", "0000:00:01.0", ["0000:00:01.0"], "0")
    nic = at("0000:81:00.0", "0000:80:01.0", ["0000:80:01.0"], "1")
    assert bus_distance(gpu, nic) is TopologyDistance.SYS


def test_missing_coordinates_are_unknown_never_far() -> None:
    gpu = at("0000:01:00.0", "0000:00:01.0", ["0000:00:01.0"], "0")
    assert bus_distance(gpu, at("", "", [], "0")) is TopologyDistance.UNK  # a NIC off the PCI bus
    assert bus_distance(at("", "", [], "0"), gpu) is TopologyDistance.UNK
    # past the bridge subtree only NUMA is left, and an unknown node is not node 0
    assert bus_distance(gpu, at("0000:81:00.0", "0000:80:01.0", ["0000:80:01.0"], "")) is TopologyDistance.UNK


def test_functions_on_the_root_complex_stand_for_their_own_root() -> None:
    # no bridge above either: the device's own address is its root, so NUMA decides (not UNK)
    gpu = at("0000:00:1f.6", "", [], "0")
    nic = at("0000:00:19.0", "", [], "0")
    assert bus_distance(gpu, nic) is TopologyDistance.NODE


def test_closest_is_the_minimum_over_pairs_and_none_without_a_pair() -> None:
    gpus = [
        at("0000:01:00.0", "0000:00:01.0", ["0000:00:01.0"], "0"),
        at("0000:81:00.0", "0000:80:01.0", ["0000:80:01.0"], "1"),
    ]
    nics = [at("0000:82:00.0", "0000:80:01.0", ["0000:80:01.0"], "1")]
    assert closest_distance(gpus, nics) is TopologyDistance.PIX
    assert closest_distance([], nics) is None
    assert closest_distance(gpus, []) is None


_bdf = st.from_regex(r"\A0000:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]\Z")
_coords = st.builds(
    BusCoordinates,
    pci_bus_id=st.one_of(st.just(""), _bdf),
    pci_root_id=st.one_of(st.just(""), _bdf),
    pci_switches=st.lists(_bdf, max_size=4).map(tuple),
    numa_affinity=st.sampled_from(["", "0", "1", "3"]),
)


@given(_coords, _coords)
def test_bus_coordinates_never_claim_link_self_or_phb_and_are_symmetric(a: BusCoordinates, b: BusCoordinates) -> None:
    got = bus_distance(a, b)
    assert got not in (TopologyDistance.LINK, TopologyDistance.SELF, TopologyDistance.PHB)
    assert got is bus_distance(b, a)
    if not a.pci_bus_id or not b.pci_bus_id:
        assert got is TopologyDistance.UNK
