"""Hostile input for the CPU identity readers: ``/proc/cpuinfo`` and the arm64 ``midr_el1`` register
file (issue 8). Each parser returns a value or raises :class:`CpuInfoError`; nothing else, and every
value the identity carries into an NFD label is a valid label value."""

from __future__ import annotations

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.node.cpu import (
    CpuIdentity,
    CpuInfoError,
    identity_from_cpuinfo,
    parse_cpuinfo,
    read_cpu_identity,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import HOSTS
from tests.unit.hostile import hostile_numbers, hostile_text, hostile_value, label_value_problem, real_or_mutated
from tests.unit.scratch import files_deadline, scratch

pytestmark = pytest.mark.hostile

CPUINFO = sorted(HOSTS.glob("*/proc/cpuinfo"))

X86_FIELDS = ("vendor_id", "cpu family", "model", "model name", "stepping", "physical id", "core id", "flags")
ARM_FIELDS = ("CPU implementer", "CPU variant", "CPU part", "CPU revision", "CPU architecture", "model name")


def _first_blocks(text: str, blocks: int = 2) -> str:
    return "\n\n".join(text.split("\n\n")[:blocks]) + "\n"


def _identity_or_error(text: str, midr: int | None = None) -> CpuIdentity | None:
    try:
        return identity_from_cpuinfo(parse_cpuinfo(text), midr)
    except CpuInfoError:
        return None


def _check(identity: CpuIdentity | None) -> None:
    if identity is None:
        return
    # vendor_id / family / id become NFD's cpu-model.* label values verbatim.
    for value in (identity.vendor_id, identity.family, identity.id):
        if value is not None:
            assert label_value_problem(value) is None, (value, label_value_problem(value))


@given(hostile_text())
def test_any_text(text: str) -> None:
    _check(_identity_or_error(text))


@given(real_or_mutated(CPUINFO), st.none() | st.integers(-(2**70), 2**70))
def test_real_cpuinfo_mutated(text: str, midr: int | None) -> None:
    _check(_identity_or_error(text, midr))


@st.composite
def _block(draw: st.DrawFn) -> str:
    """One well-formed block whose field values are hostile."""
    fields = draw(st.sampled_from([X86_FIELDS, ARM_FIELDS]))
    lines = ["processor\t: 0"]
    for field in fields:
        if draw(st.booleans()):
            value = draw(hostile_value())
            lines.append(f"{field}\t: {value}")
    return "\n".join(lines) + "\n"


@given(st.lists(_block(), min_size=1, max_size=3).map("\n".join))
@example("processor : 0\nvendor_id : GenuineIntel\ncpu family : -6\nmodel : " + "9" * 4000 + "\n")
@example("processor : 0\nCPU implementer : -0x41\nCPU variant : -0x1\nCPU part : 0x" + "f" * 5000 + "\n")
def test_hostile_field_values(text: str) -> None:
    _check(_identity_or_error(text))


@pytest.mark.parametrize("path", CPUINFO, ids=lambda p: p.parts[-3])
def test_cut_at_every_offset(path) -> None:  # type: ignore[no-untyped-def]
    text = _first_blocks(path.read_text())
    for cut in range(len(text) + 1):
        _check(_identity_or_error(text[:cut]))


@settings(deadline=files_deadline(2))  # /proc/cpuinfo and midr_el1
@given(
    cpuinfo=st.one_of(real_or_mutated(CPUINFO[:3]), hostile_text()).map(lambda t: t.encode("utf-8", "surrogatepass")),
    midr=st.none() | st.binary(max_size=64) | hostile_numbers().map(str.encode),
)
def test_read_from_a_host(cpuinfo: bytes, midr: bytes | None) -> None:
    root = scratch("hostile-cpu")
    regs = root / "sys/devices/system/cpu/cpu0/regs/identification"
    regs.mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/cpuinfo").write_bytes(cpuinfo)
    if midr is None:
        (regs / "midr_el1").unlink(missing_ok=True)
    else:
        (regs / "midr_el1").write_bytes(midr)
    try:
        identity = read_cpu_identity(HostRoot(root))
    except CpuInfoError:
        return
    _check(identity)
