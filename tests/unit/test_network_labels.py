"""RDMA node labels and the preflight network rows, from inventories built by hand."""

from __future__ import annotations

from gpustack_operator.discovery.network import (
    NO_LINK_RECORD,
    RDMA_CAPABLE_LABEL,
    RDMA_DISTANCE_LABEL,
    RDMA_NUMA_LABEL,
    DeviceInterface,
    DeviceInterfaceLink,
    DeviceInterfaceVirtualFunction,
    InventoryFailed,
    InventoryOk,
    LinkState,
    NetworkCheck,
    apply_rdma_labels,
    preflight_rows,
    rdma_labels,
)
from gpustack_operator.discovery.topology_distance import BusCoordinates
from gpustack_operator.ledger.models import DeviceTopology
from hypothesis import given
from hypothesis import strategies as st

OK = DeviceInterfaceLink(state=LinkState.OK)
UNVERIFIED = DeviceInterfaceLink(state=LinkState.UNVERIFIED, reason="the RDMA tree is present but could not be read")
FAILED = DeviceInterfaceLink(
    state=LinkState.FAILED,
    reason='the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"',
    first_seen_time="2026-09-01T10:00:00Z",
)


def nic(
    name: str,
    link: DeviceInterfaceLink | None,
    rdma: bool = True,
    numa: str = "0",
    bus: str = "0000:18:00.0",
    switches: tuple[str, ...] = ("0000:17:00.0", "0000:16:00.0", "0000:15:01.0"),
    vfs: list[DeviceInterfaceVirtualFunction] | None = None,
) -> DeviceInterface:
    return DeviceInterface(
        name=name,
        bus="pci",
        pci_bus_id=bus,
        pci_root_id=switches[-1] if switches else "",
        pci_switches=list(switches),
        numa_affinity=numa,
        rdma=rdma,
        rdma_device=f"mlx5_{name[-1]}" if rdma else "",
        link=link,
        sriov=bool(vfs),
        virtual_functions=vfs or [],
    )


def vf(bus: str, link: DeviceInterfaceLink | None, rdma: bool = True, numa: str = "") -> DeviceInterfaceVirtualFunction:
    return DeviceInterfaceVirtualFunction(
        pci_bus_id=bus, rdma=rdma, rdma_device="mlx5_9" if rdma else "", link=link, numa_affinity=numa
    )


# -- rdma.capable --------------------------------------------------------------------------------


def test_a_broken_nic_beside_a_working_one_keeps_the_label() -> None:
    labels = rdma_labels([nic("ib0", FAILED), nic("ib1", OK, numa="1")])
    assert labels == {RDMA_CAPABLE_LABEL: "true", RDMA_NUMA_LABEL: "1"}  # only the usable one's node


def test_every_link_failed_withholds_every_label() -> None:
    assert rdma_labels([nic("ib0", FAILED), nic("ib1", FAILED)]) == {}


def test_an_explicit_verdict_beats_the_rdma_flag_both_ways() -> None:
    # a device bound but its link failed: not capable
    assert rdma_labels([nic("ib0", FAILED, rdma=True)]) == {}
    # no device claimed (the tree could not be read) but unverified: capable
    assert rdma_labels([nic("eth0", UNVERIFIED, rdma=False)])[RDMA_CAPABLE_LABEL] == "true"


def test_with_no_verdict_the_rdma_flag_decides() -> None:
    assert rdma_labels([nic("ib0", None, rdma=True)])[RDMA_CAPABLE_LABEL] == "true"
    assert rdma_labels([nic("eth0", None, rdma=False)]) == {}
    assert rdma_labels([]) == {}


def test_a_node_whose_only_rdma_is_a_virtual_function_is_capable_with_the_vf_numa() -> None:
    pf = nic("eth0", None, rdma=False, numa="0", vfs=[vf("0000:18:00.2", OK, numa="1"), vf("0000:18:00.3", FAILED)])
    assert rdma_labels(InventoryOk([pf])) == {RDMA_CAPABLE_LABEL: "true", RDMA_NUMA_LABEL: "1"}
    # a VF with no NUMA node of its own falls back to its parent's
    pf = nic("eth0", None, rdma=False, numa="0", vfs=[vf("0000:18:00.2", OK, numa="")])
    assert rdma_labels([pf])[RDMA_NUMA_LABEL] == "0"


# -- rdma.numa -----------------------------------------------------------------------------------


def test_numa_is_sorted_unique_and_joined_with_underscores() -> None:
    labels = rdma_labels([nic("a1", OK, numa="1"), nic("b0", OK, numa="0"), nic("c1", OK, numa="1")])
    assert labels[RDMA_NUMA_LABEL] == "0_1"


def test_unknown_numa_is_skipped_and_none_known_omits_the_label() -> None:
    assert rdma_labels([nic("a1", OK, numa=""), nic("b3", OK, numa="3")])[RDMA_NUMA_LABEL] == "3"
    labels = rdma_labels([nic("a1", OK, numa="")])
    assert labels == {RDMA_CAPABLE_LABEL: "true"}


def test_numa_sorts_as_the_reference_does_and_a_set_too_long_for_a_label_is_withheld() -> None:
    assert rdma_labels([nic("a2", OK, numa="2"), nic("b0", OK, numa="10")])[RDMA_NUMA_LABEL] == "10_2"
    many = [nic(f"n{i}", OK, numa=str(i)) for i in range(40)]
    labels = rdma_labels(many)
    assert RDMA_NUMA_LABEL not in labels and labels[RDMA_CAPABLE_LABEL] == "true"


@given(st.lists(st.sampled_from(["", "0", "1", "2", "3", "7"]), min_size=1, max_size=8))
def test_numa_label_is_exactly_the_known_nodes(nodes: list[str]) -> None:
    labels = rdma_labels([nic(f"ib{i}", OK, numa=n) for i, n in enumerate(nodes)])
    known = sorted({n for n in nodes if n})
    assert labels.get(RDMA_NUMA_LABEL, "") == "_".join(known)


# -- rdma.distance -------------------------------------------------------------------------------


def gpu(bus: str, switches: tuple[str, ...], numa: str) -> DeviceTopology:
    return DeviceTopology(pci_bus_id=bus, pci_root_id=switches[-1], pci_switches=list(switches), numa_affinity=numa)


def test_distance_is_omitted_without_an_accelerator() -> None:
    assert RDMA_DISTANCE_LABEL not in rdma_labels([nic("ib0", OK)])


def test_distance_words_for_each_placement() -> None:
    ib0 = nic("ib0", OK)  # behind 17:00.0 / 16:00.0 / 15:01.0, NUMA 0
    same_port = gpu("0000:19:00.0", ("0000:17:00.0", "0000:16:00.0", "0000:15:01.0"), "0")
    same_switch = gpu("0000:1b:00.0", ("0000:17:03.0", "0000:16:00.0", "0000:15:01.0"), "0")
    same_node = gpu("0000:43:00.0", ("0000:3f:03.0", "0000:3e:00.0", "0000:3d:01.0"), "0")
    other_node = gpu("0000:9d:00.0", ("0000:99:03.0", "0000:98:00.0", "0000:97:01.0"), "1")
    unknown = DeviceTopology(pci_bus_id="0000:9d:00.0", numa_affinity="")
    for accelerator, word in [
        (same_port, "PIX"),
        (same_switch, "PXB"),
        (same_node, "NODE"),
        (other_node, "SYS"),
        (unknown, "UNK"),
    ]:
        assert rdma_labels([ib0], [accelerator])[RDMA_DISTANCE_LABEL] == word


def test_distance_is_the_closest_pair_over_usable_endpoints_only() -> None:
    near_but_broken = nic("ib0", FAILED)
    far = nic("ib4", OK, numa="1", bus="0000:9a:00.0", switches=("0000:99:00.0", "0000:98:00.0", "0000:97:01.0"))
    gpus = [
        gpu("0000:1b:00.0", ("0000:17:03.0", "0000:16:00.0", "0000:15:01.0"), "0"),
        gpu("0000:c3:00.0", ("0000:bf:03.0", "0000:be:00.0", "0000:bd:01.0"), "1"),
    ]
    assert rdma_labels([near_but_broken, far], gpus)[RDMA_DISTANCE_LABEL] == "NODE"
    coords = [BusCoordinates("0000:9b:00.0", "0000:97:01.0", ("0000:99:03.0", "0000:98:00.0"), "1")]
    assert rdma_labels([far], coords)[RDMA_DISTANCE_LABEL] == "PXB"


def test_a_vf_endpoint_sits_behind_its_parent() -> None:
    pf = nic("eth0", None, rdma=False, vfs=[vf("0000:18:00.2", OK)])
    same_port = gpu("0000:19:00.0", ("0000:17:00.0", "0000:16:00.0", "0000:15:01.0"), "0")
    assert rdma_labels([pf], [same_port])[RDMA_DISTANCE_LABEL] == "PIX"


def test_applying_replaces_the_rdma_set_and_a_failed_pass_changes_nothing() -> None:
    current = {
        "feature.gpustack.ai/acceleratable": "true",
        RDMA_CAPABLE_LABEL: "true",
        RDMA_NUMA_LABEL: "0_1",
        RDMA_DISTANCE_LABEL: "PIX",
    }
    # this pass: the only RDMA NIC is down -> every rdma.* key goes, others stay
    assert apply_rdma_labels(current, InventoryOk([nic("ib0", FAILED)])) == {
        "feature.gpustack.ai/acceleratable": "true"
    }
    assert apply_rdma_labels(current, InventoryOk([nic("ib0", OK, numa="1")])) == {
        "feature.gpustack.ai/acceleratable": "true",
        RDMA_CAPABLE_LABEL: "true",
        RDMA_NUMA_LABEL: "1",
    }
    assert apply_rdma_labels(current, InventoryFailed("ELOOP")) == current


# -- the preflight network rows ------------------------------------------------------------------


def test_one_row_per_rdma_interface_carrying_the_verdict() -> None:
    rows = preflight_rows(InventoryOk([nic("ib0", OK), nic("ib1", FAILED)]))
    assert rows.note is None
    assert rows.checks == [
        NetworkCheck(interface="ib0", rdma_device="mlx5_0", state=LinkState.OK),
        NetworkCheck(interface="ib1", rdma_device="mlx5_1", state=LinkState.FAILED, reason=FAILED.reason),
    ]
    assert rows.wire()["checks"][0] == {  # type: ignore[index]
        "interface": "ib0",
        "rdmaDevice": "mlx5_0",
        "state": "ok",
        "depth": "declared",
    }


def test_no_rdma_device_and_no_verdict_gets_no_row_and_the_note_says_so() -> None:
    lo = DeviceInterface(name="lo", bus="virtual", virtual=True)
    rows = preflight_rows(InventoryOk([nic("eth0", None, rdma=False), lo]))
    assert rows.checks is None
    assert rows.note is not None and "none of the 2 interfaces" in rows.note
    assert "nor any of their 0 virtual functions" in rows.note


def test_a_failed_enumeration_says_so_instead_of_reporting_nothing() -> None:
    rows = preflight_rows(InventoryFailed("/sys/class/net could not be listed: ELOOP"))
    assert rows.checks is None
    assert rows.note is not None and "could not be enumerated" in rows.note and "ELOOP" in rows.note


def test_an_unreadable_tree_gets_a_row_without_a_device() -> None:
    rows = preflight_rows(InventoryOk([nic("eth0", UNVERIFIED, rdma=False)]))
    assert rows.checks == [
        NetworkCheck(interface="eth0", rdma_device="", state=LinkState.UNVERIFIED, reason=UNVERIFIED.reason)
    ]


def test_an_rdma_interface_with_no_link_record_is_unverified_not_omitted() -> None:
    rows = preflight_rows(InventoryOk([nic("eth0", None)]))
    assert rows.checks == [
        NetworkCheck(interface="eth0", rdma_device="mlx5_0", state=LinkState.UNVERIFIED, reason=NO_LINK_RECORD)
    ]
    assert NO_LINK_RECORD == "the inventory carries no link state for this interface"


def test_virtual_functions_are_rows_named_by_parent_and_bus_id_after_their_pf() -> None:
    pf = nic(
        "eth0",
        OK,
        vfs=[
            vf("0000:41:00.2", FAILED),
            vf("0000:41:00.3", None),  # RDMA, no record
            vf("0000:41:00.4", None, rdma=False),  # plain Ethernet function: no row
            vf("0000:41:00.5", UNVERIFIED, rdma=False),  # unreadable tree: a row
        ],
    )
    rows = preflight_rows(InventoryOk([pf]))
    assert [(c.interface, c.rdma_device, c.state) for c in rows.checks or []] == [
        ("eth0", "mlx5_0", LinkState.OK),
        ("eth0/0000:41:00.2", "mlx5_9", LinkState.FAILED),
        ("eth0/0000:41:00.3", "mlx5_9", LinkState.UNVERIFIED),
        ("eth0/0000:41:00.5", "", LinkState.UNVERIFIED),
    ]
    assert rows.checks is not None and rows.checks[2].reason == NO_LINK_RECORD


def test_vfs_without_rdma_give_no_rows_and_are_counted_in_the_note() -> None:
    pf = nic("eth0", None, rdma=False, vfs=[vf("0000:41:00.2", None, rdma=False), vf("0000:41:00.3", None, rdma=False)])
    rows = preflight_rows(InventoryOk([pf]))
    assert rows.checks is None and rows.note is not None
    assert "nor any of their 2 virtual functions" in rows.note
