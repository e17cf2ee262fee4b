"""Hostile input for the parsers of configuration and records (issue 8): the ``GPUSTACK_*``
settings, ``--probe-image``, the Ascend ``version.info`` files, the allocator's ``allocation.json``
pod records (nested 10,000 levels deep, cut short, not JSON at all) and the kubelet's topology
policy as read. Each returns a value or raises its declared error, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.podrecords import PODS_DIR, PodRecord, holders, read_pod_records
from gpustack_operator.manufacturers.ascend import versions
from gpustack_operator.preflight.imageref import ImageRef, ImageRefError, parse_image_ref
from gpustack_operator.preflight.kubelet import Answer, KubeletReading, Outcome, Statement
from gpustack_operator.preflight.models import Topology, TopologyPolicy
from gpustack_operator.preflight.topology import topology_section
from gpustack_operator.settings import (
    PciVendorMatch,
    Settings,
    SettingsError,
    load_settings,
    parse_pci_class_prefixes,
)
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import HOSTS
from tests.unit.hostile import deep_nesting, hostile_numbers, hostile_text, mutated, real_or_mutated

pytestmark = pytest.mark.hostile

VALUES = st.one_of(hostile_text(), hostile_numbers())
VERSION_FILES = sorted(HOSTS.glob("*/usr/local/Ascend/**/version.info"))

# -- GPUSTACK_* settings -------------------------------------------------------------------------


@given(st.none() | VALUES | st.lists(VALUES, max_size=5).map(",".join))
@example("03\n,0b")
def test_pci_class_prefixes(raw: str | None) -> None:
    try:
        prefixes = parse_pci_class_prefixes(raw)
    except SettingsError:
        return
    assert prefixes and all(0 < len(p) <= 6 and all(c in "0123456789abcdef" for c in p) for p in prefixes)


@given(VALUES | st.builds("{}_{}".format, VALUES, VALUES))
@example("03\n_10de")
@example("0" * 40 + "_10de")
def test_pci_vendor_match(raw: str) -> None:
    try:
        match = PciVendorMatch.parse(raw, "GPUSTACK_NVIDIA_PCI_VENDOR_ID")
    except SettingsError:
        return
    hexdigits = set("0123456789abcdef")
    assert len(match.vendor) == 4 and set(match.vendor) <= hexdigits
    assert match.class_prefix is None or (0 < len(match.class_prefix) <= 6 and set(match.class_prefix) <= hexdigits)


@given(st.dictionaries(st.sampled_from(["GPUSTACK_PCI_CLASS_PREFIXES", "GPUSTACK_DATA_DIR", "X"]), VALUES))
def test_load_settings(env: dict[str, str]) -> None:
    try:
        settings = load_settings(env)
    except SettingsError:
        return
    assert isinstance(settings, Settings) and settings.class_prefixes


# -- --probe-image -------------------------------------------------------------------------------

_REF_PIECES = st.sampled_from(
    ["a", "ubuntu", "registry.example.com", "localhost", ":", "5000", "/", "@", "sha256:", "0" * 64, "[::1]", "-", "__"]
)


@given(VALUES | st.lists(_REF_PIECES | VALUES, max_size=12).map("".join))
@example("a" + "-a" * 30_000 + "!")
@example("[" + ":" * 10_000)
@example("a/" * 30_000)
def test_parse_image_ref(text: str) -> None:
    try:
        ref = parse_image_ref(text)
    except ImageRefError:
        return
    assert isinstance(ref, ImageRef) and str(ref) == text


# -- Ascend version.info -------------------------------------------------------------------------


@given(VALUES | real_or_mutated(VERSION_FILES) | st.builds("Version={}\nversion_dir={}\n".format, VALUES, VALUES))
def test_ascend_version_files(text: str) -> None:
    assert isinstance(versions.parse_key_values(text), dict)
    for version in (versions.cann_version(text), versions.driver_version(text)):
        assert version is None or isinstance(version, str)
        normalized = versions.normalize_version(version)
        assert normalized is None or isinstance(normalized, str)


@pytest.mark.parametrize("path", VERSION_FILES, ids=lambda p: "/".join(p.parts[-4:]))
def test_ascend_version_files_cut_at_every_offset(path: Path) -> None:
    text = path.read_text()
    for cut in range(len(text) + 1):
        versions.cann_version(text[:cut])
        versions.driver_version(text[:cut])


# -- allocation.json pod records -----------------------------------------------------------------

_RECORD = json.dumps(
    {"pod": "default/p", "manufacturer": "ascend", "mode": "sliced", "accelerators": ["a", "b"]}, indent=1
)
_RECORDS = st.one_of(
    st.just(_RECORD),
    mutated(_RECORD),
    deep_nesting(),
    VALUES,
    st.builds(lambda v: json.dumps({"manufacturer": v, "accelerators": [v]}), VALUES),
    st.binary(max_size=256).map(lambda b: b.decode("latin-1")),
)


@given(st.lists(_RECORDS, min_size=1, max_size=3))
@example(["[" * 100_000])
@example(['{"a":' * 20_000])
@example([_RECORD[: len(_RECORD) // 2]])
@example([""])
def test_pod_records(tmp_path_factory: pytest.TempPathFactory, records: list[str]) -> None:
    root = tmp_path_factory.getbasetemp() / "hostile-pods"
    pods = root / PODS_DIR.lstrip("/")
    pods.mkdir(parents=True, exist_ok=True)
    for old in pods.iterdir():
        (old / "allocation.json").unlink(missing_ok=True)
        old.rmdir()
    for i, text in enumerate(records):
        (pods / f"uid-{i}").mkdir()
        (pods / f"uid-{i}" / "allocation.json").write_bytes(text.encode("utf-8", "surrogatepass"))
    host = HostRoot(root)
    found = read_pod_records(host)
    assert len(found) == len(records) and all(isinstance(r, PodRecord) for r in found)
    # an unreadable record is a holder of every manufacturer's slices
    held = holders(host, "ascend", {"a"})
    assert all(r.manufacturer in (None, "ascend") for r in held)
    assert all(r.label() for r in found)


# -- the kubelet's topology policy ----------------------------------------------------------------

_ANSWERS = st.builds(
    Answer,
    outcome=st.sampled_from(list(Outcome)),
    value=st.none() | VALUES | st.sampled_from([p.value for p in TopologyPolicy]),
    source=st.none() | VALUES,
    detail=st.none() | VALUES,
    conflict=st.none() | st.lists(st.builds(Statement, value=VALUES, source=VALUES), max_size=3),
)


@given(_ANSWERS, VALUES)
def test_topology_section(policy: Answer, timestamp: str) -> None:
    reading = KubeletReading(process_table=True, endpoint=Answer(outcome=Outcome.NOTHING), policy=policy)
    section = topology_section(reading, timestamp)
    assert isinstance(section, Topology)
    assert (section.policy is TopologyPolicy.UNKNOWN) == (section.note is not None)


@pytest.mark.hostile
@given(st.text(max_size=6000) | st.builds(lambda n: "9" * n + ".1.2", st.integers(4000, 6000)))
def test_version_majors_never_raise(text: str) -> None:
    """The runtime-major readers (preload layout, Ascend CANN, Cambricon Neuware) answer a number or
    None for any text -- a 4300-digit run would make int() raise."""
    from gpustack_operator.manufacturers.ascend.soc import cann_major
    from gpustack_operator.manufacturers.cambricon.detect import parse_neuware_version
    from gpustack_operator.preload.layout import runtime_major

    for value in (runtime_major(text), cann_major(text)):
        assert value is None or (isinstance(value, int) and 0 <= value < 10**9)
    version = parse_neuware_version(text)
    assert version is None or all(part.isdigit() for part in version.split("."))
