"""The interface inventory over small sysfs-shaped trees: enumeration, failure modes, verdicts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest
from gpustack_operator.discovery.network import (
    DeviceInterface,
    DeviceInterfaceLink,
    DeviceInterfaceVirtualFunction,
    InventoryFailed,
    InventoryOk,
    LinkState,
    carry_link_first_seen,
    read_interfaces,
)
from gpustack_operator.host import HostRoot

ACTIVE: dict[str, str | bytes] = {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n"}
DOWN: dict[str, str | bytes] = {"state": "1: DOWN\n", "phys_state": "3: Disabled\n"}
NOW = datetime(2026, 9, 2, 10, 0, 0, tzinfo=UTC)
EARLIER = "2026-09-01T10:00:00Z"


class Tree:
    """Writes host paths (``/sys/...``) under a temporary root, links relative as the kernel's."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys/class/net").mkdir(parents=True)

    def disk(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def file(self, host_path: str, content: str | bytes) -> None:
        path = self.disk(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)

    def link(self, host_path: str, target: str, relative: bool = True) -> None:
        path = self.disk(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if relative and target.startswith("/"):
            target = os.path.relpath(target, os.path.dirname(host_path))
        os.symlink(target, path)

    def pci(self, *chain: str, numa: str = "0", vendor: str = "0x15b3", device: str = "0x1021") -> str:
        path = "/sys/devices/pci" + chain[0][:7] + "/" + "/".join(chain)
        for name, value in {
            "vendor": vendor,
            "device": device,
            "class": "0x020000",
            "numa_node": numa,
            "local_cpulist": "0-31",
        }.items():
            self.file(f"{path}/{name}", value + "\n")
        self.link(f"{path}/subsystem", "/sys/bus/pci")
        self.disk("/sys/bus/pci").mkdir(parents=True, exist_ok=True)
        return path

    def netdev(self, name: str, parent: str | None, **attrs: str) -> str:
        """A netdev under ``parent`` (a device directory) or under devices/virtual/net."""
        ndir = f"{parent}/net/{name}" if parent else f"/sys/devices/virtual/net/{name}"
        values = {"mtu": "1500", "operstate": "up", "flags": "0x1003", "type": "1"} | attrs
        for key, value in values.items():
            self.file(f"{ndir}/{key}", value + "\n")
        if parent:
            self.link(f"{ndir}/device", parent)
        self.link(f"/sys/class/net/{name}", ndir)
        return ndir

    def rdma(
        self,
        device: str,
        ibdev: str,
        ports: Mapping[str, Mapping[str, str | bytes] | None] | None,
        class_only: bool = False,
    ) -> str:
        """An RDMA device bound to ``device``: under it (``<dev>/infiniband/<ibdev>``) with a class
        link, or (``class_only``) only as a class entry whose ``device`` points back."""
        idir = f"/sys/class/infiniband/{ibdev}" if class_only else f"{device}/infiniband/{ibdev}"
        self.disk(idir).mkdir(parents=True)
        self.link(f"{idir}/device", device)
        if not class_only:
            self.link(f"/sys/class/infiniband/{ibdev}", idir)
        if ports is not None:
            self.disk(f"{idir}/ports").mkdir()
            for port, attrs in ports.items():
                self.disk(f"{idir}/ports/{port}").mkdir()
                for key, value in (attrs or {}).items():
                    self.file(f"{idir}/ports/{port}/{key}", value)
        return idir

    def vf(self, pf: str, n: int, bdf: str) -> str:
        vdir = f"{os.path.dirname(pf)}/{bdf}"
        self.file(f"{vdir}/vendor", "0x15b3\n")
        self.file(f"{vdir}/numa_node", "1\n")
        self.file(f"{vdir}/local_cpulist", "32-63\n")
        self.link(f"{vdir}/subsystem", "/sys/bus/pci")
        self.link(f"{vdir}/physfn", pf)
        self.link(f"{pf}/virtfn{n}", vdir)
        return vdir

    def read(self, **kwargs: object) -> InventoryOk:
        inventory = read_interfaces(HostRoot(self.root), now=NOW, **kwargs)  # type: ignore[arg-type]
        assert isinstance(inventory, InventoryOk), inventory
        return inventory

    def one(self, name: str) -> DeviceInterface:
        (iface,) = [i for i in self.read().interfaces if i.name == name]
        return iface

    def failure(self) -> str:
        inventory = read_interfaces(HostRoot(self.root), now=NOW)
        assert isinstance(inventory, InventoryFailed), inventory
        return inventory.reason


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def nic_with_ports(
    tree: Tree, ports: Mapping[str, Mapping[str, str | bytes] | None] | None
) -> DeviceInterfaceLink | None:
    dev = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("eth0", dev)
    tree.rdma(dev, "mlx5_0", ports)
    return tree.one("eth0").link


# -- the link verdict (reference §10) ------------------------------------------------------------


def test_an_active_port_with_link_up_is_ok_without_reason(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": ACTIVE})
    assert link == DeviceInterfaceLink(state=LinkState.OK)


def test_an_active_port_whose_physical_link_is_off_fails(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": {"state": "4: ACTIVE\n", "phys_state": "3: Disabled\n"}})
    assert link is not None and link.state is LinkState.FAILED
    assert link.reason == 'the RDMA link is not usable: port 1: state="4: ACTIVE" phys_state="3: Disabled"'


def test_a_down_port_fails_with_both_values_verbatim_and_a_first_seen_time(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": DOWN})
    assert link is not None and link.state is LinkState.FAILED
    assert link.reason == 'the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'
    assert link.first_seen_time == "2026-09-02T10:00:00Z"


def test_active_defer_is_not_active(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": {"state": "5: ACTIVE_DEFER\n", "phys_state": "5: LinkUp\n"}})
    assert link is not None and link.state is LinkState.FAILED  # both read, neither carries the link
    assert '"5: ACTIVE_DEFER"' in (link.reason or "")


def test_a_later_port_carrying_the_link_verifies_the_device(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": DOWN, "2": ACTIVE})
    assert link is not None and link.state is LinkState.OK


def test_no_ports_directory_is_unverified_and_names_the_path(tree: Tree) -> None:
    link = nic_with_ports(tree, None)
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert "/infiniband/mlx5_0/ports" in (link.reason or "")


def test_a_port_with_nothing_readable_is_unverified(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": None})
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert "port 1 (state: No such file or directory)" in (link.reason or "")


def test_a_down_port_beside_an_unreadable_one_is_unverified_never_failed(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": DOWN, "2": {"state": "1: DOWN\n"}})
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert link.reason == (
        'the RDMA link could not be verified: port 1: state="1: DOWN" phys_state="3: Disabled"; '
        "unreadable: port 2 (phys_state: No such file or directory)"
    )
    assert link.first_seen_time is None


def test_the_failure_reason_lists_ports_in_sorted_order(tree: Tree) -> None:
    link = nic_with_ports(tree, {"2": DOWN, "10": DOWN, "1": DOWN, "3": DOWN})
    assert link is not None and link.state is LinkState.FAILED
    ports = [part.split(":")[0] for part in (link.reason or "").split("not usable: ")[1].split("; ")]
    assert ports == ["port 1", "port 2", "port 3", "port 10"]


def test_a_garbage_state_file_is_unverified(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": {"state": b"\x00\xff\xfe\n", "phys_state": "5: LinkUp\n"}})
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert "not a port state" in (link.reason or "")


def test_a_state_file_over_the_read_cap_is_unverified(tree: Tree) -> None:
    link = nic_with_ports(tree, {"1": {"state": "4: ACTIVE\n" + "x" * 70_000, "phys_state": "5: LinkUp\n"}})
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert "read cap" in (link.reason or "")


def test_a_port_file_resolving_outside_sys_is_refused(tree: Tree) -> None:
    tree.file("/etc/state", "4: ACTIVE\n")
    dev = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("eth0", dev)
    idir = tree.rdma(dev, "mlx5_0", {"1": {"phys_state": "5: LinkUp\n"}})
    tree.link(f"{idir}/ports/1/state", "/etc/state", relative=False)  # absolute: re-rooted, then refused
    link = tree.one("eth0").link
    assert link is not None and link.state is LinkState.UNVERIFIED
    assert "outside /sys" in (link.reason or "")


def test_an_interface_with_no_rdma_device_has_no_verdict(tree: Tree) -> None:
    tree.netdev("eth0", tree.pci("0000:00:01.0", "0000:01:00.0"))
    iface = tree.one("eth0")
    assert (iface.rdma, iface.rdma_device, iface.link) == (False, "", None)


def test_the_reverse_class_layout_finds_the_device(tree: Tree) -> None:
    dev = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("eth0", dev)
    tree.rdma(dev, "rxe0", {"1": ACTIVE}, class_only=True)
    iface = tree.one("eth0")
    assert (iface.rdma, iface.rdma_device, iface.link) == (True, "rxe0", DeviceInterfaceLink(state=LinkState.OK))


def test_an_unreadable_rdma_tree_is_a_verdict_without_a_device(tree: Tree) -> None:
    dev = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("eth0", dev)
    tree.link(f"{dev}/infiniband", "infiniband", relative=False)  # itself: ELOOP
    iface = tree.one("eth0")
    assert not iface.rdma and iface.link is not None and iface.link.state is LinkState.UNVERIFIED
    assert iface.link.reason == (
        f"the RDMA tree is present but could not be read; tried {dev}/infiniband, /sys/class/infiniband"
    )


def test_an_unlistable_rdma_class_is_unverified_and_an_absent_one_is_no_rdma(tree: Tree) -> None:
    tree.netdev("eth0", tree.pci("0000:00:01.0", "0000:01:00.0"))
    assert tree.one("eth0").link is None  # no class directory at all: an answer
    tree.link("/sys/class/infiniband", "infiniband", relative=False)
    link = tree.one("eth0").link
    assert link is not None and link.state is LinkState.UNVERIFIED


def test_an_unresolvable_class_entry_leaves_a_miss_unverified_but_not_a_match(tree: Tree) -> None:
    found = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("eth0", found)
    tree.rdma(found, "mlx5_0", {"1": ACTIVE})
    tree.netdev("eth1", tree.pci("0000:00:02.0", "0000:02:00.0"))
    tree.link("/sys/class/infiniband/mlx5_9", "/sys/devices/gone", relative=True)  # dangling
    inventory = tree.read()
    eth0, eth1 = inventory.interfaces
    assert eth0.link == DeviceInterfaceLink(state=LinkState.OK)
    assert eth1.link is not None and eth1.link.state is LinkState.UNVERIFIED and not eth1.rdma


# -- the enumeration -------------------------------------------------------------------------------


def test_an_unlistable_net_class_is_a_failure_not_an_empty_list(tree: Tree) -> None:
    os.rmdir(tree.disk("/sys/class/net"))
    tree.link("/sys/class/net", "net", relative=False)
    assert "could not be listed" in tree.failure()


def test_an_absent_net_class_is_a_failure(tmp_path: Path) -> None:
    inventory = read_interfaces(HostRoot(tmp_path))
    assert isinstance(inventory, InventoryFailed)
    assert "/sys/class/net" in inventory.reason


def test_an_empty_net_class_is_an_empty_measurement(tree: Tree) -> None:
    assert tree.read() == InventoryOk([])


def test_bonding_masters_is_not_an_interface(tree: Tree) -> None:
    tree.file("/sys/class/net/bonding_masters", "bond0\n")
    tree.netdev("bond0", None)
    assert [i.name for i in tree.read().interfaces] == ["bond0"]


def test_an_entry_that_cannot_be_classified_ends_the_pass(tree: Tree) -> None:
    tree.netdev("eth0", tree.pci("0000:00:01.0", "0000:01:00.0"))
    tree.link("/sys/class/net/eth1", "eth1", relative=False)
    assert "entry eth1 could not be classified" in tree.failure()


def test_an_entry_resolving_outside_sys_ends_the_pass(tree: Tree) -> None:
    tree.disk("/etc").mkdir()
    tree.link("/sys/class/net/eth1", "/etc", relative=False)
    assert "outside /sys" in tree.failure()


def test_a_dangling_device_link_ends_the_pass(tree: Tree) -> None:
    ndir = tree.netdev("eth0", tree.pci("0000:00:01.0", "0000:01:00.0"))
    os.unlink(tree.disk(f"{ndir}/device"))
    tree.link(f"{ndir}/device", "/sys/devices/pci0000:00/gone")
    assert "the device of eth0 could not be resolved" in tree.failure()


def test_a_virtual_interface_is_virtual_with_no_pci_fields(tree: Tree) -> None:
    tree.netdev("lo", None, mtu="65536", operstate="unknown", flags="0x9", type="772")
    lo = tree.one("lo")
    assert (lo.bus, lo.virtual, lo.mtu, lo.up, lo.pci_bus_id, lo.numa_affinity) == (
        "virtual",
        True,
        65536,
        True,
        "",
        "",
    )


def test_a_non_pci_interface_reports_its_bus_with_empty_pci_fields(tree: Tree) -> None:
    # a USB NIC sits under a PCI path; its own subsystem link says what it is
    usb = tree.pci("0000:00:14.0", vendor="0x8086", device="0xa0ed") + "/usb2/2-1/2-1:1.0"
    tree.disk(usb).mkdir(parents=True)
    tree.link(f"{usb}/subsystem", "/sys/bus/usb")
    tree.disk("/sys/bus/usb").mkdir(parents=True)
    tree.netdev("enx00e04c680001", usb)
    nic = tree.one("enx00e04c680001")
    assert (nic.bus, nic.virtual, nic.pci_bus_id, nic.pci_root_id, nic.pci_switches, nic.pci_vendor) == (
        "usb",
        False,
        "",
        "",
        [],
        "",
    )


def test_pci_coordinates_numa_and_cpu_affinity(tree: Tree) -> None:
    dev = tree.pci("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0", numa="-1")
    tree.netdev("ib0", dev, type="32", mtu="4092")
    ib0 = tree.one("ib0")
    assert ib0.bus == "pci" and ib0.pci_bus_id == "0000:18:00.0"
    assert ib0.pci_root_id == "0000:15:01.0"
    assert ib0.pci_switches == ["0000:17:00.0", "0000:16:00.0", "0000:15:01.0"]
    assert (ib0.pci_vendor, ib0.pci_device) == ("0x15b3", "0x1021")  # raw, as sysfs holds them
    assert (ib0.numa_affinity, ib0.cpu_affinity, ib0.mtu) == ("", "0-31", 4092)


def test_degraded_attributes_are_unknown_not_dropped(tree: Tree) -> None:
    dev = tree.pci("0000:00:01.0", "0000:01:00.0", numa="garbage")
    ndir = tree.netdev("eth0", dev, mtu="lots", operstate="down")
    os.unlink(tree.disk(f"{ndir}/flags"))
    eth0 = tree.one("eth0")
    assert (eth0.mtu, eth0.up, eth0.numa_affinity) == (0, False, "")


def test_up_follows_operstate_then_iff_up(tree: Tree) -> None:
    dev = tree.pci("0000:00:01.0", "0000:01:00.0")
    tree.netdev("a", dev, operstate="down", flags="0x1003")  # admin up, no carrier
    tree.netdev("b", None, operstate="unknown", flags="0x1002")  # not tracked, admin down
    tree.netdev("c", None, operstate="dormant", flags="0x1003")
    assert [(i.name, i.up) for i in tree.read().interfaces] == [("a", False), ("b", False), ("c", False)]


def test_the_list_is_sorted_by_name(tree: Tree) -> None:
    for name in ("lo", "eth1", "docker0", "eth0"):
        tree.netdev(name, None)
    assert [i.name for i in tree.read().interfaces] == ["docker0", "eth0", "eth1", "lo"]


def sriov_pf(tree: Tree, vfs: int) -> str:
    pf = tree.pci("0000:40:01.0", "0000:41:00.0", numa="1")
    tree.file(f"{pf}/sriov_numvfs", f"{vfs}\n")
    tree.file(f"{pf}/sriov_totalvfs", "16\n")
    tree.netdev("enp65s0np0", pf)
    tree.rdma(pf, "mlx5_0", {"1": ACTIVE})
    return pf


def test_virtual_functions_are_nested_under_their_pf_sorted_by_bus_id(tree: Tree) -> None:
    pf = sriov_pf(tree, 11)
    bdfs = {n: f"0000:41:{(n + 1) // 8:02x}.{(n + 1) % 8}" for n in range(11)}
    for n, bdf in bdfs.items():
        vdir = tree.vf(pf, n, bdf)
        if n == 0:
            tree.netdev("enp65s0v0", vdir, mtu="9000")
            tree.rdma(vdir, "mlx5_2", {"1": DOWN})
        if n == 1:
            tree.rdma(vdir, "mlx5_3", {"1": ACTIVE})  # RDMA with no netdev
    inventory = tree.read()
    assert [i.name for i in inventory.interfaces] == ["enp65s0np0"]  # the VF netdev is not top-level
    (pf_iface,) = inventory.interfaces
    assert pf_iface.sriov and pf_iface.rdma_device == "mlx5_0"
    vfs = pf_iface.virtual_functions
    assert [vf.pci_bus_id for vf in vfs] == sorted(bdfs.values())  # virtfn10 after virtfn9
    first, second = vfs[0], vfs[1]
    assert (first.name, first.mtu, first.up, first.numa_affinity, first.cpu_affinity) == (
        "enp65s0v0",
        9000,
        True,
        "1",
        "32-63",
    )
    assert first.rdma_device == "mlx5_2" and first.link is not None
    assert first.link.state is LinkState.FAILED and first.link.first_seen_time == "2026-09-02T10:00:00Z"
    assert (second.name, second.rdma_device, second.link) == ("", "mlx5_3", DeviceInterfaceLink(state=LinkState.OK))
    assert all(vf.link is None and not vf.rdma for vf in vfs[2:])


def test_a_pf_with_no_functions_configured_is_still_a_pf(tree: Tree) -> None:
    sriov_pf(tree, 0)
    tree.netdev("eth9", tree.pci("0000:00:02.0", "0000:02:00.0"))  # no SR-IOV capability
    pf, plain = tree.read().interfaces
    assert (pf.sriov, pf.virtual_functions) == (True, [])
    assert plain.sriov is False


def test_an_unresolvable_virtfn_ends_the_pass(tree: Tree) -> None:
    pf = sriov_pf(tree, 1)
    tree.link(f"{pf}/virtfn0", "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.1")  # dangling
    assert "virtfn0 of enp65s0np0 could not be resolved" in tree.failure()


# -- first-seen times ------------------------------------------------------------------------------


def failed(reason: str = "down", first_seen: str | None = None) -> DeviceInterfaceLink:
    return DeviceInterfaceLink(state=LinkState.FAILED, reason=reason, first_seen_time=first_seen)


@pytest.mark.parametrize(
    ("stored", "detected", "expected"),
    [
        ([DeviceInterface(name="eth0")], failed(), "2026-09-02T10:00:00Z"),  # first seen now
        (None, failed(), "2026-09-02T10:00:00Z"),  # nothing published yet
        ([DeviceInterface(name="eth0", link=failed(first_seen=EARLIER))], failed(), EARLIER),  # persists
        # the same outage with different wording keeps its clock
        ([DeviceInterface(name="eth0", link=failed("port 1", EARLIER))], failed("port 1; port 2"), EARLIER),
        # a different state before is a different fault
        (
            [
                DeviceInterface(
                    name="eth0",
                    link=DeviceInterfaceLink(state=LinkState.UNVERIFIED, first_seen_time=EARLIER),
                )
            ],
            failed(),
            "2026-09-02T10:00:00Z",
        ),
        ([DeviceInterface(name="eth0", link=failed())], failed(), "2026-09-02T10:00:00Z"),  # stamped
        ([DeviceInterface(name="eth1", link=failed(first_seen=EARLIER))], failed(), "2026-09-02T10:00:00Z"),
        # only a failure carries a time, even if one arrives on another state
        (
            [DeviceInterface(name="eth0", link=failed(first_seen=EARLIER))],
            DeviceInterfaceLink(state=LinkState.UNVERIFIED, reason="x", first_seen_time=EARLIER),
            None,
        ),
        (
            [DeviceInterface(name="eth0", link=failed(first_seen=EARLIER))],
            DeviceInterfaceLink(state=LinkState.OK, first_seen_time=EARLIER),
            None,
        ),
    ],
)
def test_first_seen_is_carried_only_while_the_state_stays_failed(
    stored: list[DeviceInterface] | None, detected: DeviceInterfaceLink, expected: str | None
) -> None:
    original = DeviceInterface(name="eth0", link=detected)
    (got,) = carry_link_first_seen(stored, [original], NOW)
    assert got.link is not None and got.link.first_seen_time == expected
    assert original.link == detected  # the input is not rewritten


def test_virtual_function_clocks_are_keyed_by_bus_id() -> None:
    def pf(*vfs: DeviceInterfaceVirtualFunction) -> DeviceInterface:
        return DeviceInterface(name="eth0", virtual_functions=list(vfs))

    stored = [
        pf(
            DeviceInterfaceVirtualFunction(pci_bus_id="0000:41:00.2", link=failed(first_seen=EARLIER)),
            DeviceInterfaceVirtualFunction(pci_bus_id="0000:41:00.3", link=failed(first_seen="2026-08-01T00:00:00Z")),
        )
    ]
    detected = [
        pf(
            DeviceInterfaceVirtualFunction(pci_bus_id="0000:41:00.3", link=failed()),
            DeviceInterfaceVirtualFunction(pci_bus_id="0000:41:00.4", link=failed()),
        )
    ]
    (got,) = carry_link_first_seen(stored, detected, NOW)
    assert [vf.link.first_seen_time for vf in got.virtual_functions if vf.link] == [
        "2026-08-01T00:00:00Z",
        "2026-09-02T10:00:00Z",
    ]


def test_read_interfaces_carries_the_previous_clock(tree: Tree) -> None:
    nic_with_ports(tree, {"1": DOWN})
    first = tree.read()
    later = read_interfaces(HostRoot(tree.root), previous=first.interfaces, now=datetime(2026, 9, 9, tzinfo=UTC))
    assert isinstance(later, InventoryOk)
    (iface,) = later.interfaces
    assert iface.link is not None and iface.link.first_seen_time == "2026-09-02T10:00:00Z"
