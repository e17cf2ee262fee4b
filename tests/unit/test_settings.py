"""GPUSTACK_* parsing (supplement §4.3–4.4)."""

import pytest
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import resolve
from gpustack_operator.settings import (
    DEFAULT_PCI_CLASS_PREFIXES,
    PciVendorMatch,
    Settings,
    SettingsError,
    load_settings,
    parse_pci_class_prefixes,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, DEFAULT_PCI_CLASS_PREFIXES),
        ("", DEFAULT_PCI_CLASS_PREFIXES),
        (" , ,", DEFAULT_PCI_CLASS_PREFIXES),
        ("03", ("03",)),
        (" 03 , 0x12,0B40 ", ("03", "12", "0b40")),
    ],
)
def test_class_prefixes(raw: str | None, expected: tuple[str, ...]) -> None:
    assert parse_pci_class_prefixes(raw) == expected


def test_bad_class_prefix_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"GPUSTACK_PCI_CLASS_PREFIXES.*'zz'"):
        parse_pci_class_prefixes("03,zz")


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_PCI_CLASS_PREFIXES", "12")
    monkeypatch.setenv("GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY", "True")  # only the exact "true" counts
    s = load_settings()
    assert s.class_prefixes == ("12",)
    assert not s.group_id_with_memory
    monkeypatch.setenv("GPUSTACK_PCI_CLASS_PREFIXES", "0x0g")
    with pytest.raises(SettingsError):
        load_settings()
    monkeypatch.delenv("GPUSTACK_PCI_CLASS_PREFIXES")
    assert Settings(devices_group_id_with_memory="true").group_id_with_memory


@pytest.mark.parametrize(
    ("raw", "vendor", "klass"),
    [("10de", "10de", None), ("0302_10DE", "10de", "0302"), ("0x1002", "1002", None)],
)
def test_vendor_match(raw: str, vendor: str, klass: str | None) -> None:
    m = PciVendorMatch.parse(raw, "X")
    assert (m.vendor, m.class_prefix) == (vendor, klass)


@pytest.mark.parametrize("raw", ["nvidia", "10de0", "_10de", "zz_10de", ""])
def test_bad_vendor_id(raw: str) -> None:
    with pytest.raises(SettingsError, match="X:"):
        PciVendorMatch.parse(raw, "X")


def test_manufacturer_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "0302_10de")
    monkeypatch.setenv("GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME", "example.com/gpu")
    monkeypatch.setenv("GPUSTACK_THEAD_ACCELERATABLE_RUNTIME_NAME", "ppu")
    nv = resolve(REGISTRY["nvidia"].identity)
    assert (nv.pci.vendor, nv.pci.class_prefix, nv.resource_name, nv.runtime_name) == (
        "10de",
        "0302",
        "example.com/gpu",
        "nvidia",
    )
    assert resolve(REGISTRY["thead"].identity).runtime_name == "ppu"
    assert resolve(REGISTRY["thead"].identity).resource_name == "alibabacloud.com/ppu"


def test_defaults_table() -> None:
    table = {
        n: (m.identity.pci_vendor_id, m.identity.resource_name, m.identity.runtime_name) for n, m in REGISTRY.items()
    }
    assert table == {
        "amd": ("1002", "amd.com/gpu", "amd"),
        "ascend": ("19e5", "huawei.com/npu", "ascend"),
        "cambricon": ("cabc", "cambricon.com/mlu", "cambricon"),
        "hygon": ("1d94", "hygon.com/dcu", "hygon"),
        "iluvatar": ("1e3e", "iluvatar.com/gpu", "iluvatar"),
        "metax": ("9999", "metax-tech.com/gpu", "metax"),
        "mthreads": ("1ed5", "mthreads.com/gpu", "mthreads"),
        "nvidia": ("10de", "nvidia.com/gpu", "nvidia"),
        "thead": ("1ded", "alibabacloud.com/ppu", None),
    }


@given(st.text())
def test_class_prefix_parser_accepts_or_explains(raw: str) -> None:
    try:
        out = parse_pci_class_prefixes(raw)
    except SettingsError as exc:
        assert "GPUSTACK_PCI_CLASS_PREFIXES" in str(exc)
    else:
        assert out and all(p and len(p) <= 6 for p in out)


def test_environment_names_are_exact_upper_case() -> None:
    """Only ``GPUSTACK_<FIELD>`` as the spec writes it is read; unrelated and lower-case names are not."""
    env = {
        "GPUSTACK_PCI_CLASS_PREFIXES": "12",
        "gpustack_data_dir": "/lower",
        "GPUSTACK_DATA_DIR_EXTRA": "/x",
        "OTHER_DATA_DIR": "/y",
    }
    s = load_settings(env)
    assert s.class_prefixes == ("12",)
    assert s.data_dir == "/var/lib/gpustack"


def test_load_settings_reports_every_bad_value() -> None:
    with pytest.raises(SettingsError, match=r"GPUSTACK_PCI_CLASS_PREFIXES.*'0x0g'"):
        load_settings({"GPUSTACK_PCI_CLASS_PREFIXES": "0x0g"})
