"""Every label key and value the product computes is valid for Kubernetes, whatever the input
(issue 8): product names, memory sizes, versions, families, counts, CPU identities, PCI ids and NUMA
nodes as hostile as the strategies make them. Checked against the API's own rules, written out in
:mod:`tests.unit.hostile`, never against the product's sanitizer."""

from __future__ import annotations

import pytest
from gpustack_operator.discovery.labels import acceleratable_labels, nfd_labels, node_labels
from gpustack_operator.discovery.network import DeviceInterface, parse_numa_affinity, rdma_labels
from gpustack_operator.discovery.topology_distance import BusCoordinates
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import resolve
from gpustack_operator.manufacturers.groups import Found, build_groups
from gpustack_operator.node.cpu import (
    CpuIdentity,
    CpuInfoError,
    general_node_key,
    identity_from_cpuinfo,
    parse_cpuinfo,
)
from gpustack_operator.node.naming import (
    group_id,
    normalize_name,
    sanitize_label_value,
)
from gpustack_operator.node.pci import PciDevice, PciScan, parse_hex_id
from gpustack_operator.settings import Settings
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.hostile import (
    assert_valid_labels,
    hostile_numbers,
    hostile_text,
    label_key_problem,
    label_value_problem,
)

pytestmark = pytest.mark.hostile

MANUFACTURERS = sorted(REGISTRY)
GENERAL_PREFIX = "general.feature.gpustack.ai/"

# Names as hostile as the strategies make them, plus the shapes that sanitize to nothing, to a
# trailing separator or to exactly the budget.
NAMES = st.one_of(
    hostile_text(),
    st.sampled_from(["", "NVIDIA", "nvidia", "AMD", "(TM)", "-", "NVIDIA -", "Ascend", "a" * 200, "a-" * 60]),
    st.builds(lambda m, rest: m.upper() + rest, st.sampled_from(MANUFACTURERS), hostile_text()),
    st.builds(lambda n, sep: "x" * n + sep + "y" * 10, st.integers(30, 70), st.sampled_from("-_. ")),
)
VERSIONS = st.none() | hostile_text() | hostile_numbers()
MEMORY = st.integers(-(2**64), 2**64)


@st.composite
def _found(draw: st.DrawFn) -> Found:
    return Found(
        uuid=draw(st.text(max_size=8)),
        name=draw(NAMES),
        memory_mib=draw(MEMORY),
        cores=draw(st.none() | st.integers(-(2**64), 2**64)),
        driver_version=draw(VERSIONS),
        runtime_version=draw(VERSIONS),
        compute_capability=draw(VERSIONS),
        family=draw(VERSIONS),
    )


@given(
    st.sampled_from(MANUFACTURERS),
    st.lists(_found(), min_size=1, max_size=5),
    st.sampled_from([None, "true", "false"]),
)
def test_acceleratable_labels(manufacturer: str, found: list[Found], with_memory: str | None) -> None:
    groups = build_groups(manufacturer, found, PciScan(), Settings(devices_group_id_with_memory=with_memory))
    labels = acceleratable_labels(groups)
    assert_valid_labels(labels)
    assert labels["feature.gpustack.ai/acceleratable"] == "true"


@given(
    st.sampled_from(MANUFACTURERS),
    NAMES,
    MEMORY,
    st.booleans(),
    VERSIONS,
    st.integers(0, 10_000),
)
def test_acceleratable_labels_of_any_group(
    manufacturer: str, name: str, memory: int, with_memory: bool, version: str | None, count: int
) -> None:
    """Groups as a backend may build them itself (an unnamed PCI-only group has id ``""``)."""
    ids = [group_id(manufacturer, name, memory, with_memory), ""]
    groups = [
        DevicesGroup(
            id=ident,
            manufacturer=manufacturer,
            name=name,
            memory=memory,
            driver_version=version,
            runtime_version=version,
            family=version,
            compute_capability=version,
            accelerators=[Accelerator(id=str(i), index=i) for i in range(min(count, 3))],
        )
        for ident in ids
    ]
    assert_valid_labels(acceleratable_labels(groups))


@given(st.sampled_from(MANUFACTURERS), NAMES, MEMORY, st.booleans())
def test_group_id_makes_an_akey(manufacturer: str, name: str, memory: int, with_memory: bool) -> None:
    ident = group_id(manufacturer, name, memory, with_memory)
    if not ident:
        return
    akey = f"{manufacturer}-{ident}"
    for suffix in ("", ".product", ".memory", ".cores", ".count", ".family", ".comcap"):
        problem = label_key_problem(f"acceleratable.feature.gpustack.ai/{akey}{suffix}")
        assert problem is None, problem


@given(hostile_text(), st.sampled_from(["", *MANUFACTURERS, "intel", "generic"]), st.integers(-1, 80), st.booleans())
def test_normalize_name(name: str, prefix: str, budget: int, strip: bool) -> None:
    out = normalize_name(name, prefix, budget, strip)
    if out:
        problem = label_key_problem(out)
        # a budget <= 0 means unbounded, so only the length may be wrong then (or above 63)
        assert problem is None or (not 0 < budget <= 63 and "characters long" in problem), problem
    if budget > 0:
        assert len(out) <= budget


@given(hostile_text())
def test_sanitize_label_value(value: str) -> None:
    assert label_value_problem(sanitize_label_value(value)) is None


# -- the general (CPU) node key ------------------------------------------------------------------

_LABEL_LIKE = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_VENDOR = (
    st.none() | hostile_text() | _LABEL_LIKE | st.sampled_from(["VendorUnknown", "vendorunknown", "AMD", "x" * 63])
)


@given(_VENDOR, st.none() | hostile_numbers() | _LABEL_LIKE, st.none() | hostile_numbers() | _LABEL_LIKE, VERSIONS)
def test_general_node_key(vendor: str | None, family: str | None, model: str | None, name: str | None) -> None:
    key = general_node_key(vendor, family, model, name)
    assert len(key + ".capacity") <= 63  # the reference test's own bound
    for suffix in ("", ".count", ".capacity"):
        problem = label_key_problem(f"{GENERAL_PREFIX}{key}{suffix}")
        assert problem is None, problem


# -- NFD's labels, from a hostile host ------------------------------------------------------------

_VENDORS = [resolve(m.identity).pci for m in REGISTRY.values()]


@st.composite
def _pci_device(draw: st.DrawFn) -> PciDevice | None:
    try:
        vendor = parse_hex_id(draw(hostile_numbers() | st.from_regex(r"\A0x[0-9a-f]{1,8}\Z")), "vendor", 4)
        klass = parse_hex_id(draw(st.sampled_from(["0x030200", "0x120000"]) | hostile_numbers()), "class", 6)
    except ValueError:
        return None
    return PciDevice(bus_id="0000:01:00.0", vendor=vendor, device="0000", class_code=klass)


@st.composite
def _cpu(draw: st.DrawFn) -> CpuIdentity | None:
    lines = ["processor : 0"]
    for field in ("vendor_id", "cpu family", "model", "model name", "CPU implementer", "CPU variant", "CPU part"):
        if draw(st.booleans()):
            lines.append(f"{field} : {draw(hostile_numbers() | hostile_text())}")
    try:
        return identity_from_cpuinfo(parse_cpuinfo("\n".join(lines)), draw(st.none() | st.integers(-(2**70), 2**70)))
    except CpuInfoError:
        return None


@given(st.lists(_pci_device(), max_size=4), _cpu(), st.booleans())
def test_nfd_labels(devices: list[PciDevice | None], cpu: CpuIdentity | None, failed: bool) -> None:
    scan = PciScan(devices=[d for d in devices if d is not None], failure="listing failed" if failed else None)
    labels = nfd_labels(scan, cpu, _VENDORS)
    assert_valid_labels(labels)
    assert_valid_labels(node_labels(labels, {}))
    if cpu is not None:
        key = general_node_key(cpu.vendor_id, cpu.family, cpu.id, cpu.name)
        assert label_key_problem(GENERAL_PREFIX + key + ".capacity") is None


# -- the RDMA labels -----------------------------------------------------------------------------


@given(
    st.lists(st.tuples(st.none() | hostile_numbers() | hostile_text(), st.booleans()), min_size=1, max_size=6),
    st.lists(st.builds(BusCoordinates, pci_bus_id=hostile_text(), numa_affinity=hostile_text()), max_size=3),
)
def test_rdma_labels(numa: list[tuple[str | None, bool]], accelerators: list[BusCoordinates]) -> None:
    interfaces = [
        DeviceInterface(name=f"ib{i}", rdma=rdma, numa_affinity=parse_numa_affinity(text))
        for i, (text, rdma) in enumerate(numa)
    ]
    assert_valid_labels(rdma_labels(interfaces, accelerators))
