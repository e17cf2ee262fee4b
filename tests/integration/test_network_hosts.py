"""The interface inventory, RDMA labels and preflight rows over the host-root fixtures.

The accelerator side of ``rdma.distance`` comes the way the detect pass builds it: the PCI scan's
accelerators through :func:`build_groups` (the contract every vendor backend uses)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from gpustack_operator.discovery.network import (
    RDMA_CAPABLE_LABEL,
    RDMA_DISTANCE_LABEL,
    RDMA_NUMA_LABEL,
    DeviceInterface,
    InventoryFailed,
    InventoryOk,
    LinkState,
    preflight_rows,
    rdma_labels,
    read_interfaces,
)
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DeviceTopology
from gpustack_operator.manufacturers.groups import Found, build_groups
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import Settings

from tests.conftest import host

NOW = datetime(2026, 9, 2, 10, 0, 0, tzinfo=UTC)


def inventory(name: str) -> InventoryOk:
    result = read_interfaces(HostRoot(host(name)), now=NOW)
    assert isinstance(result, InventoryOk), result
    return result


def by_name(inv: InventoryOk) -> dict[str, DeviceInterface]:
    return {i.name: i for i in inv.interfaces}


def accelerators(name: str, vendor: str, classes: tuple[str, ...]) -> list[DeviceTopology]:
    scan = scan_pci(HostRoot(host(name)))
    found = [
        Found(uuid=f"acc-{i}", name="accelerator", memory_mib=1, pci_bus_id=d.bus_id)
        for i, d in enumerate(d for d in scan.devices if d.vendor == vendor and d.class_matches(classes))
    ]
    groups = build_groups(vendor, found, scan, Settings())
    return [a.topology for g in groups for a in g.accelerators]


def test_h100_ib_fabric_with_one_port_down() -> None:
    inv = inventory("h100-sxm-8x")
    ifaces = by_name(inv)
    assert sorted(ifaces) == sorted(["docker0", "ens1f0np0", "ens1f1np1", "lo", *(f"ib{i}" for i in range(8))])
    assert [i.name for i in inv.interfaces] == sorted(ifaces)
    ib0 = ifaces["ib0"]
    assert (ib0.bus, ib0.pci_bus_id, ib0.rdma_device, ib0.mtu, ib0.numa_affinity) == (
        "pci",
        "0000:18:00.0",
        "mlx5_0",
        4092,
        "0",
    )
    assert ib0.pci_root_id == "0000:15:01.0"
    assert ib0.pci_switches == ["0000:17:00.0", "0000:16:00.0", "0000:15:01.0"]
    assert ifaces["ib7"].numa_affinity == "1" and ifaces["ib7"].rdma_device == "mlx5_7"
    ib3 = ifaces["ib3"]
    assert ib3.link is not None and ib3.link.state is LinkState.FAILED and not ib3.up
    assert ib3.link.reason == 'the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'
    assert ib3.link.first_seen_time == "2026-09-02T10:00:00Z"
    ok = [n for n, i in ifaces.items() if i.link is not None and i.link.state is LinkState.OK]
    assert sorted(ok) == sorted(["ens1f0np0", "ens1f1np1", *(f"ib{i}" for i in (0, 1, 2, 4, 5, 6, 7))])
    roce = ifaces["ens1f1np1"]
    assert (roce.rdma_device, roce.sriov, roce.virtual_functions, roce.pci_switches) == (
        "mlx5_9",
        True,
        [],
        ["0000:26:01.0"],
    )
    for virtual in ("lo", "docker0"):
        assert ifaces[virtual].virtual and ifaces[virtual].bus == "virtual" and ifaces[virtual].link is None
    assert ifaces["lo"].up and not ifaces["docker0"].up

    gpus = accelerators("h100-sxm-8x", "10de", ("0302",))
    assert len(gpus) == 8
    # GPU and NIC hang off two downstream ports of one PEX switch: several bridges, one root
    assert rdma_labels(inv, gpus) == {
        RDMA_CAPABLE_LABEL: "true",
        RDMA_DISTANCE_LABEL: "PXB",
        RDMA_NUMA_LABEL: "0_1",
    }
    rows = preflight_rows(inv)
    assert rows.note is None and rows.checks is not None and len(rows.checks) == 10
    assert [c.interface for c in rows.checks if c.state is LinkState.FAILED] == ["ib3"]


def test_mixed_host_sriov_functions_nested_under_their_pf() -> None:
    inv = inventory("mixed-nvidia-mellanox")
    ifaces = by_name(inv)
    assert "enp33s0v0" not in ifaces  # a VF netdev is collected under its PF
    pf = ifaces["enp33s0np0"]
    assert pf.sriov and pf.rdma_device == "mlx5_0"
    assert [vf.pci_bus_id for vf in pf.virtual_functions] == [f"0000:21:00.{n}" for n in range(1, 5)]
    assert [(vf.name, vf.rdma_device) for vf in pf.virtual_functions] == [
        ("enp33s0v0", "mlx5_2"),
        ("enp33s0v1", "mlx5_3"),
        ("", ""),  # bound to vfio-pci: no netdev, no RDMA device
        ("enp33s0v3", "mlx5_4"),
    ]
    states = [vf.link.state if vf.link else None for vf in pf.virtual_functions]
    assert states == [LinkState.OK, LinkState.OK, None, LinkState.FAILED]
    assert all(vf.numa_affinity == "0" and vf.cpu_affinity == "0-127" for vf in pf.virtual_functions)
    for name in ("enp97s0f0", "enp97s0f3"):  # E810: a PF with none configured, no RDMA driver
        assert (ifaces[name].sriov, ifaces[name].virtual_functions, ifaces[name].rdma) == (True, [], False)
        assert ifaces[name].pci_vendor == "0x8086"

    gpus = accelerators("mixed-nvidia-mellanox", "10de", ("0302",))
    # L40S and CX-7 on separate root ports of one socket: no closer than NODE from bus coordinates
    assert rdma_labels(inv, gpus) == {
        RDMA_CAPABLE_LABEL: "true",
        RDMA_DISTANCE_LABEL: "NODE",
        RDMA_NUMA_LABEL: "0",
    }
    rows = preflight_rows(inv)
    assert [(c.interface, c.rdma_device, c.state.value) for c in rows.checks or []] == [
        ("enp161s0np0", "mlx5_1", "ok"),
        ("enp33s0np0", "mlx5_0", "ok"),
        ("enp33s0np0/0000:21:00.1", "mlx5_2", "ok"),
        ("enp33s0np0/0000:21:00.2", "mlx5_3", "ok"),
        ("enp33s0np0/0000:21:00.4", "mlx5_4", "failed"),
    ]


def test_mixed_host_pci_scan_sees_the_virtual_functions_as_functions() -> None:
    scan = scan_pci(HostRoot(host("mixed-nvidia-mellanox")))
    assert scan.failure is None and scan.errors == []
    vfs = sorted(d.bus_id for d in scan.devices if (d.vendor, d.device) == ("15b3", "101e"))
    assert vfs == [f"0000:21:00.{n}" for n in range(1, 5)]
    assert {d.driver for d in scan.devices if d.bus_id in vfs} == {"mlx5_core", "vfio-pci"}


def test_mi300x_roce_beside_a_frontend_without_rdma() -> None:
    inv = inventory("mi300x-8x")
    ifaces = by_name(inv)
    rdma = sorted(i.rdma_device for i in inv.interfaces if i.rdma)
    assert rdma == [f"mlx5_{i}" for i in range(8)]
    frontend = ifaces["enp185s0f0np0"]
    assert (frontend.rdma, frontend.link, frontend.pci_vendor, frontend.numa_affinity) == (False, None, "0x14e4", "1")
    gpus = accelerators("mi300x-8x", "1002", ("12",))
    assert len(gpus) == 8
    labels = rdma_labels(inv, gpus)
    assert labels == {RDMA_CAPABLE_LABEL: "true", RDMA_DISTANCE_LABEL: "PXB", RDMA_NUMA_LABEL: "0_1"}


def test_vm_virtio_nic_reports_its_bus_and_no_rdma() -> None:
    inv = inventory("cpu-only-vm")
    eth0 = by_name(inv)["eth0"]
    assert (eth0.bus, eth0.virtual, eth0.pci_bus_id, eth0.pci_root_id, eth0.numa_affinity, eth0.up) == (
        "virtio",
        False,
        "",
        "",
        "",
        True,
    )
    assert rdma_labels(inv) == {}
    rows = preflight_rows(inv)
    assert rows.checks is None and rows.note is not None and "none of the 2 interfaces" in rows.note


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("unreadable-sysfs", "/sys/class/net could not be listed"),
        ("escaping-symlink", "entry eth1 could not be classified"),
    ],
)
def test_failed_enumerations_claim_nothing(name: str, words: str) -> None:
    result = read_interfaces(HostRoot(host(name)))
    assert isinstance(result, InventoryFailed)
    assert words in result.reason
    rows = preflight_rows(result)
    assert rows.checks is None and rows.note is not None and "could not be enumerated" in rows.note


def test_unreadable_rdma_trees_are_unverified_never_failed() -> None:
    inv = inventory("rdma-unreadable")
    ifaces = by_name(inv)
    assert "bonding_masters" not in ifaces
    verdicts = {n: (i.rdma_device, i.link.state if i.link else None) for n, i in ifaces.items()}
    assert verdicts == {
        "ib0": ("mlx5_0", LinkState.UNVERIFIED),  # garbage in the state file
        "enp33s0": ("mlx4_0", LinkState.UNVERIFIED),  # one port down, the other unreadable
        "enp33s0d1": ("mlx4_0", LinkState.UNVERIFIED),
        "enp65s0f0np0": ("mlx5_1", LinkState.OK),
        "enp65s0f1np1": ("", LinkState.UNVERIFIED),  # the tree could not be read: no device claimed
        "enp97s0np0": ("mlx5_2", LinkState.UNVERIFIED),  # phys_state leaves /sys
        "lo": ("", None),
    }
    mixed = ifaces["enp33s0"].link
    assert mixed is not None and mixed.reason is not None
    assert 'port 1: state="1: DOWN" phys_state="3: Disabled"' in mixed.reason and "port 2" in mixed.reason
    assert all(i.link.first_seen_time is None for i in inv.interfaces if i.link)
    assert rdma_labels(inv) == {RDMA_CAPABLE_LABEL: "true", RDMA_NUMA_LABEL: "0"}
    rows = preflight_rows(inv)
    assert [(c.interface, c.rdma_device) for c in rows.checks or []] == [
        ("enp33s0", "mlx4_0"),
        ("enp33s0d1", "mlx4_0"),
        ("enp65s0f0np0", "mlx5_1"),
        ("enp65s0f1np1", ""),
        ("enp97s0np0", "mlx5_2"),
        ("ib0", "mlx5_0"),
    ]


def test_a_second_pass_keeps_the_outage_clock() -> None:
    first = inventory("h100-sxm-8x")
    later = read_interfaces(
        HostRoot(host("h100-sxm-8x")), previous=first.interfaces, now=datetime(2026, 9, 9, tzinfo=UTC)
    )
    assert isinstance(later, InventoryOk)
    assert later.interfaces == first.interfaces  # nothing changed, so nothing differs (no rewrite)
