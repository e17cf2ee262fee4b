"""The CANN toolkit and driver version files (key=value ``version.info``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.ascend import versions
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import host

CANN_8_0_0 = "Version=7.6.0.1.220\nversion_dir=8.0.0\ntimestamp=20241224_000000\n"
CANN_9 = "Version=9.2.0-beta.2\nversion_dir=cann\n"
INSTALL_INFO = (
    "package_name=Ascend-cann-toolkit\nversion=8.2.RC1\ninnerversion=V100R001C22SPC001B231\n"
    "arch=aarch64\nos=linux\npath=/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CANN_8_0_0, "8.0.0"),  # the product version wins over the component version
        (CANN_9, "9.2.0-beta.2"),  # a version_dir that is not a version is ignored
        (INSTALL_INFO, "8.2.RC1"),  # lowercase key, as ascend_toolkit_install.info writes it
        ("runtime_running_version=x\nVersion=7.3.0.1.231:8.0.RC2\n", "8.0.RC2"),  # version.cfg shape
        ("Version=8.0.RC2\n", "8.0.RC2"),
        ("# nothing\n\nfoo=bar\n", None),
        ("", None),
    ],
)
def test_cann_version(text: str, expected: str | None) -> None:
    assert versions.cann_version(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Version=24.1.rc2\nascendhal_version=7.35.19\npackage_version=24.1.rc2\n", "24.1.rc2"),
        ("package_version=25.2.0\n", "25.2.0"),
        ("ascendhal_version=7.35.19\n", None),
    ],
)
def test_driver_version(text: str, expected: str | None) -> None:
    assert versions.driver_version(text) == expected


@pytest.mark.parametrize(
    ("version", "normalized"),
    [("8.0.RC2", "8.0"), ("9.0.0", "9.0"), ("8", "8"), ("10.1.0.2", "10.1"), (None, None), ("", None)],
)
def test_normalize_version(version: str | None, normalized: str | None) -> None:
    assert versions.normalize_version(version) == normalized


_KEY = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
_VALUE = st.from_regex(r"[A-Za-z0-9.:,\[\]_-]{0,20}", fullmatch=True)


@given(st.dictionaries(_KEY, _VALUE, max_size=8), st.sampled_from(["\n", "\r\n"]))
def test_key_values_round_trip(pairs: dict[str, str], newline: str) -> None:
    lowered: dict[str, str] = {}
    for key, value in pairs.items():
        lowered.setdefault(key.lower(), value)
    text = newline.join(f"{k} = {v}" for k, v in pairs.items())
    assert versions.parse_key_values("# header\n\n" + text) == lowered


@given(
    component=st.from_regex(r"[0-9]\.[0-9]\.[0-9]\.[0-9]\.[0-9]{3}", fullmatch=True),
    major=st.integers(min_value=1, max_value=20),
    minor=st.integers(min_value=0, max_value=9),
    tail=st.sampled_from(["", ".RC1", ".RC2", ".0", ".1"]),
)
def test_product_version_wins_and_normalizes_to_major_minor(component: str, major: int, minor: int, tail: str) -> None:
    product = f"{major}.{minor}{tail}"
    for text in (f"Version={component}\nversion_dir={product}\n", f"Version={component}:{product}\n"):
        assert versions.cann_version(text) == product
        assert versions.normalize_version(versions.cann_version(text)) == f"{major}.{minor}"


def test_toolkit_home_prefers_the_cann_directory(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "usr/local/Ascend/cann").mkdir(parents=True)
    assert versions.toolkit_home(HostRoot(root), {}) == "/usr/local/Ascend/cann"
    assert versions.toolkit_home(HostRoot(tmp_path), {}) == "/usr/local/Ascend/ascend-toolkit/latest/runtime"
    assert versions.toolkit_home(HostRoot(root), {"ASCEND_TOOLKIT_HOME": "/opt/cann/"}) == "/opt/cann"


def test_fixture_hosts_carry_their_versions() -> None:
    a2 = HostRoot(host("ascend-910b-8x"))
    assert versions.read_cann_version(a2, {}) == "8.0.RC2"  # through ascend-toolkit/latest -> 8.0.RC2
    assert versions.read_driver_version(a2, {}) == "24.1.rc2"
    a5 = HostRoot(host("ascend-950pr-v2"))
    assert versions.read_cann_version(a5, {}) == "9.0.0"  # cann -> cann-9.0.0, share/info/runtime
    assert versions.read_cann_version(a5, {"ASCEND_TOOLKIT_HOME": "/nowhere"}) is None
    assert versions.read_driver_version(a5, {"CANN_HOME": "/opt/elsewhere"}) is None
