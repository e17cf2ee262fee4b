"""CPU identity → NFD labels → general node key (reference-rules §1, with the spec's examples)."""

import contextlib
import os
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.node.cpu import (
    CpuInfoError,
    general_node_key,
    identity_from_cpuinfo,
    parse_cpuinfo,
    read_cpu_identity,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.nonregular import plant, within


@pytest.mark.parametrize(
    ("vendor", "family", "model", "name", "expected"),
    [
        ("AMD", "25", "1", "AMD EPYC 7763 64-Core Processor", "amd-epyc-7763"),
        ("AMD", "25", "1", None, "amd-25-1"),
        ("AMD", "25", "1", "@cpu.model.name", "amd-25-1"),  # unresolved NFD template
        ("Intel", "6", "143", "Intel(R) Xeon(R) Platinum 8480+", "intel-xeon-platinum-8480"),
        ("Intel", "6", "85", "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "intel-xeon-gold-6248"),
        ("Intel", "6", "106", "Intel Xeon Processor (Icelake)", "intel-xeon-processor-icelake"),
        ("Hygon", "24", "2", "Hygon C86 7285 32-core Processor", "hygon-c86-7285"),
        ("VendorUnknown", "31", "53264", None, "generic-31-53264"),
        ("vendorunknown", None, None, None, "generic"),
        ("", None, None, None, "generic"),
        (None, None, None, None, "generic"),
        ("AMD", "25", None, None, "amd"),  # family without id: no id
        ("AMD", "25", "1", "(TM)", "amd"),  # a present name wins even when it normalizes to nothing
        ("ARM", "63", "53441", None, "arm-63-53441"),
    ],
)
def test_general_node_key(vendor, family, model, name, expected) -> None:  # type: ignore[no-untyped-def]
    assert general_node_key(vendor, family, model, name) == expected


def test_long_name_is_cut_to_the_budget() -> None:
    name = "AMD EPYC 9654 96-Core Processor EPYC 9654 96-Core Processor EPYC 9654 96-Core Processor"
    key = general_node_key("AMD", "25", "17", name)
    assert key == "amd-epyc-9654-96-core-processor-epyc-9654-96-core-proc"
    assert len(key + ".capacity") <= 63


X86_BLOCK = """processor\t: {n}
vendor_id\t: {vendor}
cpu family\t: {family}
model\t\t: {model}
model name\t: {name}
stepping\t: 1
physical id\t: {phys}
siblings\t: 4
core id\t\t: {core}
cpu cores\t: 2
flags\t\t: fpu vme de pse {extra}

"""


def _x86(vendor: str, family: int, model: int, name: str, extra: str = "") -> str:
    return "".join(
        X86_BLOCK.format(n=n, vendor=vendor, family=family, model=model, name=name, phys=0, core=n % 2, extra=extra)
        for n in range(4)
    )


def test_x86_identity_counts_cores_and_threads() -> None:
    ident = identity_from_cpuinfo(parse_cpuinfo(_x86("AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor")))
    assert (ident.vendor_id, ident.family, ident.id, ident.cores, ident.threads) == ("AMD", "25", "1", 2, 4)
    assert not ident.hypervisor


@pytest.mark.parametrize(
    ("raw", "nfd"),
    [
        ("GenuineIntel", "Intel"),
        ("HygonGenuine", "Hygon"),
        ("CentaurHauls", "VIA"),
        ("  Shanghai  ", "VendorUnknown"),
    ],
)
def test_x86_vendor_names_follow_cpuid(raw: str, nfd: str) -> None:
    assert identity_from_cpuinfo(parse_cpuinfo(_x86(raw, 6, 1, "x"))).vendor_id == nfd


def test_vm_flag() -> None:
    ident = identity_from_cpuinfo(
        parse_cpuinfo(_x86("GenuineIntel", 6, 106, "Intel Xeon Processor (Icelake)", "hypervisor"))
    )
    assert ident.hypervisor


ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: {impl}
CPU architecture: 8
CPU variant\t: {variant}
CPU part\t: {part}
CPU revision\t: {rev}

"""


@pytest.mark.parametrize(
    ("impl", "variant", "part", "rev", "vendor", "family", "model"),
    [
        ("0x41", "0x3", "0xd0c", "1", "ARM", "63", "53441"),  # Ampere Altra (Neoverse-N1 r3p1)
        ("0x48", "0x1", "0xd01", "0", "VendorUnknown", "31", "53264"),  # Kunpeng 920: not in cpuid
        ("0xc0", "0x0", "0xac3", "0", "Ampere", "15", "44080"),  # AmpereOne
    ],
)
def test_arm_identity_matches_cpuid(impl, variant, part, rev, vendor, family, model) -> None:  # type: ignore[no-untyped-def]
    ident = identity_from_cpuinfo(parse_cpuinfo(ARM.format(impl=impl, variant=variant, part=part, rev=rev)))
    assert (ident.vendor_id, ident.family, ident.id, ident.name) == (vendor, family, model, None)


def test_arm_prefers_midr() -> None:
    ident = identity_from_cpuinfo(
        parse_cpuinfo(ARM.format(impl="0x41", variant="0x3", part="0xd0c", rev="1")), midr=0x413FD0C1
    )
    assert (ident.family, ident.id) == ("63", "53441")


@pytest.mark.parametrize("text", ["", "garbage without colon\n", "processor : 0\ncpu family : six\nvendor_id : x\n"])
def test_garbled_cpuinfo_is_a_clear_error(text: str) -> None:
    with pytest.raises(CpuInfoError):
        identity_from_cpuinfo(parse_cpuinfo(text))


@given(st.text())
def test_cpuinfo_parser_never_crashes_unexpectedly(text: str) -> None:
    with contextlib.suppress(CpuInfoError):
        identity_from_cpuinfo(parse_cpuinfo(text))


# -- the arm64 MIDR register file (issue 16): what it cannot say costs the CPU identity, nothing else --

MIDR = "sys/devices/system/cpu/cpu0/regs/identification/midr_el1"


def _arm_node(root: Path) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(ARM.format(impl="0x41", variant="0x3", part="0xd0c", rev="1"))
    (root / MIDR).parent.mkdir(parents=True)
    return root


def test_midr_as_the_kernel_writes_it_decides(tmp_path: Path) -> None:
    root = _arm_node(tmp_path)
    (root / MIDR).write_text("0x00000000413fd0c1\n")
    ident = read_cpu_identity(HostRoot(root))
    assert (ident.vendor_id, ident.family, ident.id, ident.arch) == ("ARM", "63", "53441", "arm64")


@pytest.mark.parametrize("kind", ["directory", "fifo", "socket", "loop"])
def test_an_unreadable_midr_is_a_cpu_info_error_naming_it(tmp_path: Path, kind: str) -> None:
    root = _arm_node(tmp_path)
    if kind == "loop":
        os.symlink("midr_el1", root / MIDR)
    else:
        plant(root / MIDR, kind)
    with pytest.raises(CpuInfoError, match="midr_el1") as err:
        within(root, lambda: read_cpu_identity(HostRoot(root)))
    assert "CPU identity" in str(err.value) or "cannot read" in str(err.value)


@pytest.mark.parametrize("raw", ["", "\n", "-0x41", "0x1_0", "0x" + "f" * 5000, "0x413fd0c1 junk", "٣"])
def test_a_midr_that_is_no_register_value_is_a_cpu_info_error(tmp_path: Path, raw: str) -> None:
    root = _arm_node(tmp_path)
    (root / MIDR).write_text(raw)
    with pytest.raises(CpuInfoError, match="midr_el1"):
        read_cpu_identity(HostRoot(root))


def test_a_fifo_at_proc_cpuinfo_is_a_cpu_info_error_at_once(tmp_path: Path) -> None:
    plant(tmp_path / "proc/cpuinfo", "fifo")
    with pytest.raises(CpuInfoError, match=r"/proc/cpuinfo: .*FIFO"):
        within(tmp_path, lambda: read_cpu_identity(HostRoot(tmp_path)))
