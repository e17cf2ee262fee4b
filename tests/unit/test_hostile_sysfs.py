"""Hostile input for the parsers of sysfs values (issue 8): PCI ids and NUMA nodes, the network
attributes and RDMA port states, KFD topology properties and RAS counts, MetaX sGPU entries, NVML's
strings, and bus coordinates. Each returns a value of its declared shape or raises its declared
error; the readers built on them do the same over a real fixture tree with one file made hostile."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpustack_operator.discovery.network import (
    DeviceInterfaceLink,
    InventoryFailed,
    InventoryOk,
    PortEnum,
    judge_ports,
    parse_flags,
    parse_mtu,
    parse_numa_affinity,
    parse_port_enum,
    rdma_labels,
    read_interfaces,
)
from gpustack_operator.discovery.topology_distance import BusCoordinates, TopologyDistance, bus_distance
from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.manufacturers import kfd
from gpustack_operator.manufacturers.amd.cumask import CuMaskTopologyError, check, topology_of
from gpustack_operator.manufacturers.metax.modes import parse_sched_class, parse_subdevices
from gpustack_operator.manufacturers.nvidia import values
from gpustack_operator.node import pci
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import HOSTS
from tests.unit.hostile import (
    assert_valid_labels,
    hostile_numbers,
    hostile_text,
    hostile_value,
    label_value_problem,
    real_or_mutated,
)

pytestmark = pytest.mark.hostile

KFD_PROPERTIES = sorted(HOSTS.glob("*/sys/devices/virtual/kfd/kfd/topology/nodes/*/properties"))
KFD_BANKS = sorted(HOSTS.glob("*/sys/devices/virtual/kfd/kfd/topology/nodes/*/mem_banks/*/properties"))
UMC = sorted(HOSTS.glob("*/sys/devices/**/ras/umc_err_count"))
PORT_FILES = sorted(HOSTS.glob("*/sys/devices/**/ports/*/*state"))
SCHED = sorted(HOSTS.glob("*/sys/devices/**/sgpu/sched_class"))
U64 = 2**64 - 1
BIG_INTS = st.integers(-(2**70), 2**70)
SYSFS_VALUE = st.one_of(hostile_numbers(), hostile_text())


# -- PCI -----------------------------------------------------------------------------------------


@given(SYSFS_VALUE, st.sampled_from([4, 6]))
def test_parse_hex_id(text: str, width: int) -> None:
    try:
        out = pci.parse_hex_id(text, "vendor", width)
    except ValueError:
        return
    assert len(out) == width
    assert all(c in "0123456789abcdef" for c in out)


@given(st.none() | SYSFS_VALUE)
def test_parse_numa_node(text: str | None) -> None:
    try:
        node = pci.parse_numa_node(text)
    except ValueError:
        return
    assert node is None or 0 <= node < 10**10


# -- network -------------------------------------------------------------------------------------


_PORT_LINE = st.builds(lambda n, name: f"{n}: {name}", hostile_numbers(), st.sampled_from(["ACTIVE", "LinkUp", "x y"]))


@given(SYSFS_VALUE | _PORT_LINE | real_or_mutated(PORT_FILES))
@example("9" * 5000 + ": ACTIVE")
def test_parse_port_enum(text: str) -> None:
    port = parse_port_enum(text)
    assert port is None or (isinstance(port, PortEnum) and 0 <= port.ordinal < 10**10 and port.name)


@given(SYSFS_VALUE)
@example("9" * 5000)
def test_parse_mtu(text: str) -> None:
    assert 0 <= parse_mtu(text) <= 0x7FFFFFFF


@given(SYSFS_VALUE)
def test_parse_flags(text: str) -> None:
    flags = parse_flags(text)
    assert flags is None or 0 <= flags < 2**64


@given(st.none() | SYSFS_VALUE)
def test_parse_numa_affinity(text: str | None) -> None:
    value = parse_numa_affinity(text)
    assert value == "" or value.isdecimal()
    assert label_value_problem(value) is None


_READING = st.one_of(
    hostile_text(),
    st.tuples(
        st.builds(PortEnum, st.integers(0, 2**31), hostile_text()),
        st.builds(PortEnum, st.integers(0, 2**31), hostile_text()),
    ),
)


@given(hostile_text(), st.lists(st.tuples(hostile_text() | hostile_numbers(), _READING), max_size=5))
def test_judge_ports(ports_dir: str, readings: list[tuple[str, object]]) -> None:
    link = judge_ports(ports_dir, readings)  # type: ignore[arg-type]
    assert isinstance(link, DeviceInterfaceLink)


# -- KFD -----------------------------------------------------------------------------------------


def _props_or_none(text: str) -> dict[str, int] | None:
    try:
        props = kfd.parse_properties(text, "properties")
    except kfd.KfdError:
        return None
    assert props and all(0 <= v <= U64 for v in props.values())
    return props


_PROPERTY_LINES = st.lists(
    st.builds(lambda k, v: f"{k} {v}", st.sampled_from(kfd.GPU_REQUIRED) | hostile_text(), hostile_numbers()),
    min_size=1,
    max_size=6,
).map("\n".join)


@given(SYSFS_VALUE | _PROPERTY_LINES)
@example("simd_count " + "9" * 5000)
@example("simd_count 18446744073709551616")
def test_parse_properties_any_text(text: str) -> None:
    _props_or_none(text)


@given(real_or_mutated(KFD_PROPERTIES + KFD_BANKS))
def test_parse_properties_mutated(text: str) -> None:
    props = _props_or_none(text)
    if props is None or props.get("simd_count", 0) == 0:
        return
    # what detection derives from a node that parsed, however absurd its values
    try:
        gpu = kfd.gpu_of(kfd.KfdNode(index=0, path="properties", props=props))
    except kfd.KfdError:
        return
    assert gpu.uuid.startswith("GPU-")
    assert gpu.bus_id.count(":") == 2
    assert check({gpu.uuid: topology_of(gpu)}, gpu.uuid).detail


@pytest.mark.parametrize("path", KFD_PROPERTIES[:3] + KFD_BANKS[:1], ids=lambda p: "/".join(p.parts[-5:]))
def test_parse_properties_cut_at_every_offset(path: Path) -> None:
    text = path.read_text()
    for cut in range(len(text) + 1):
        _props_or_none(text[:cut])


@given(st.dictionaries(st.sampled_from((*kfd.GPU_REQUIRED, "num_xcc", "domain", "family_id")), st.integers(0, U64)))
def test_gpu_of_absurd_properties(props: dict[str, int]) -> None:
    props.setdefault("simd_count", 1)
    try:
        gpu = kfd.gpu_of(kfd.KfdNode(index=0, path="p", props=props))
    except kfd.KfdError:
        return
    topology = topology_of(gpu)
    assert check({gpu.uuid: topology}, gpu.uuid).detail
    for percent in (1, 50, 100):
        with contextlib.suppress(CuMaskTopologyError):
            assert 0 < topology.window_cus(percent) <= topology.cu


@given(SYSFS_VALUE | real_or_mutated(UMC) | st.builds("ue: {}\nce: {}".format, hostile_numbers(), hostile_numbers()))
@example("ue: " + "9" * 5000 + "\nce: 0")
def test_parse_umc_err_count(text: str) -> None:
    counts = kfd.parse_umc_err_count(text)
    assert counts is None or all(0 <= c <= U64 for c in counts)


@given(BIG_INTS)
def test_decode_gfx_target(version: int) -> None:
    gfx = kfd.decode_gfx_target(version)
    assert gfx is None or (gfx.startswith("gfx") and gfx.isalnum())


@given(SYSFS_VALUE)
def test_normalize_version(text: str) -> None:
    assert isinstance(kfd.normalize_version(text), str)


@given(st.integers(0, U64), st.integers(0, U64))
def test_bus_id_of(domain: int, location: int) -> None:
    assert kfd.bus_id_of(domain, location).count(":") == 2


# -- MetaX ---------------------------------------------------------------------------------------


@given(st.lists(SYSFS_VALUE | SYSFS_VALUE.map(lambda t: "sgpu" + t), max_size=8))
def test_parse_subdevices(entries: list[str]) -> None:
    indexes = parse_subdevices(entries)
    assert indexes == sorted(indexes) and all(0 <= i < 10**9 for i in indexes)


@given(st.none() | SYSFS_VALUE | real_or_mutated(SCHED))
@example("9" * 5000)
def test_parse_sched_class(text: str | None) -> None:
    assert parse_sched_class(text) in (None, "best-effort", "fixed-share", "burst-share")


# -- NVML values ---------------------------------------------------------------------------------


@given(st.none() | SYSFS_VALUE)
@example("9" * 5000 + ".1")
def test_cuda_major(text: str | None) -> None:
    major = values.cuda_major(text)
    assert major is None or 0 <= major < 10**9


@given(SYSFS_VALUE, SYSFS_VALUE, st.integers(-(2**32), 2**32), st.integers(-(2**32), 2**32), BIG_INTS)
def test_nvml_bus_id(bus_id: str, legacy: str, domain: int, bus: int, device: int) -> None:
    out = values.bus_id_of(bus_id, legacy, domain, bus, device)
    assert out == "" or pci.BDF.match(out), out


@given(BIG_INTS, BIG_INTS, BIG_INTS)
def test_nvml_numbers(a: int, b: int, c: int) -> None:
    assert values.cuda_version_text(a) is None or "." in (values.cuda_version_text(a) or "")
    values.compute_capability_text(a, b)
    values.family_of_compute_capability(a, b)
    values.memory_slices(a, b)
    values.profile_name_from_geometry(a, b, c)
    values.restore_ecc_carveout(a, b, c > 0)
    percent = values.percent(a, b)
    assert percent is None or 0 <= percent <= 100


# -- bus coordinates -----------------------------------------------------------------------------

_COORDS = st.builds(
    BusCoordinates,
    pci_bus_id=hostile_text(),
    pci_root_id=hostile_text(),
    pci_switches=st.lists(hostile_text(), max_size=3).map(tuple),
    numa_affinity=hostile_text(),
)


@given(_COORDS, _COORDS)
def test_bus_distance(a: BusCoordinates, b: BusCoordinates) -> None:
    assert isinstance(bus_distance(a, b), TopologyDistance)


# -- the readers over a real tree with one file made hostile --------------------------------------


@pytest.fixture(scope="module")
def sysfs_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of a fixture node's /sys: RDMA NICs, PCI bridges, NUMA nodes."""
    root = tmp_path_factory.mktemp("hostile-sysfs")
    shutil.copytree(HOSTS / "rdma-unreadable" / "sys", root / "sys", symlinks=True)
    return root


@pytest.fixture(scope="module")
def kfd_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of an MI300X node's KFD topology (the link and the tree it points at)."""
    root = tmp_path_factory.mktemp("hostile-kfd")
    for part in ("sys/class/kfd", "sys/devices/virtual/kfd"):
        shutil.copytree(HOSTS / "mi300x-8x" / part, root / part, symlinks=True)
    return root


def _regular_files(root: Path, names: tuple[str, ...]) -> list[Path]:
    return sorted(
        p for p in (root / "sys/devices").rglob("*") if p.name in names and p.is_file() and not p.is_symlink()
    )


@contextlib.contextmanager
def _replaced(path: Path, data: bytes) -> Iterator[None]:
    original = path.read_bytes()
    mode = path.stat().st_mode
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(original)
        path.chmod(mode)


_ATTRIBUTES = ("mtu", "flags", "operstate", "numa_node", "local_cpulist", "state", "phys_state", "vendor", "device")
_BYTES = st.one_of(
    st.binary(max_size=256),
    hostile_value().map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@given(data=st.data(), content=_BYTES)
def test_read_interfaces_with_a_hostile_attribute(sysfs_copy: Path, data: st.DataObject, content: bytes) -> None:
    target = data.draw(st.sampled_from(_regular_files(sysfs_copy, _ATTRIBUTES)))
    with _replaced(target, content):
        inventory = read_interfaces(HostRoot(sysfs_copy))
    assert isinstance(inventory, InventoryOk | InventoryFailed)
    if isinstance(inventory, InventoryOk):
        assert_valid_labels(rdma_labels(inventory))
        for iface in inventory.interfaces:
            assert 0 <= iface.mtu <= 0x7FFFFFFF
            assert iface.numa_affinity == "" or iface.numa_affinity.isdecimal()


@given(data=st.data(), content=_BYTES)
def test_read_device_with_a_hostile_attribute(sysfs_copy: Path, data: st.DataObject, content: bytes) -> None:
    host = HostRoot(sysfs_copy)
    bus_id = data.draw(st.sampled_from(host.listdir(pci.PCI_DEVICES)))
    attribute = data.draw(st.sampled_from(["vendor", "device", "class", "subsystem_vendor", "numa_node"]))
    target = Path(host.path(f"{pci.PCI_DEVICES}/{bus_id}/{attribute}"))
    if not target.is_file():
        return
    with _replaced(target, content):
        try:
            device = pci.read_device(HostRoot(sysfs_copy), bus_id)
        except (ValueError, HostPathError):
            return
    assert len(device.vendor) == 4 and len(device.device) == 4 and len(device.class_code) == 6


@given(
    data=st.data(),
    content=_BYTES | real_or_mutated(KFD_PROPERTIES[:2]).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
def test_read_kfd_nodes_with_a_hostile_file(kfd_copy: Path, data: st.DataObject, content: bytes) -> None:
    root = kfd_copy
    files = sorted((root / "sys/devices/virtual/kfd/kfd/topology/nodes").rglob("properties"))
    target = data.draw(st.sampled_from(files))
    with _replaced(target, content):
        try:
            nodes = kfd.read_nodes(HostRoot(root))
        except kfd.KfdError:
            return
    for node in nodes:
        if node.is_gpu:
            with contextlib.suppress(kfd.KfdError):
                kfd.gpu_of(node)
