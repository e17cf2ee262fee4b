"""Parsers of the sysfs values the interface inventory reads, and the port verdict as a function."""

from gpustack_operator.discovery.network import (
    LinkState,
    PortEnum,
    PortReading,
    judge_ports,
    parse_flags,
    parse_mtu,
    parse_numa_affinity,
    parse_port_enum,
)
from hypothesis import given
from hypothesis import strategies as st

# the RDMA core's own names (drivers/infiniband/core/sysfs.c)
STATE_NAMES = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER", "UNKNOWN"]
PHYS_NAMES = [
    "<unknown>",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "Phy Test",
]


def test_port_enum_reads_the_kernel_format() -> None:
    assert parse_port_enum("4: ACTIVE\n") == PortEnum(4, "ACTIVE")
    assert parse_port_enum("5: LinkUp\n") == PortEnum(5, "LinkUp")
    assert parse_port_enum("7: Phy Test\n") == PortEnum(7, "Phy Test")
    assert parse_port_enum("5: ACTIVE_DEFER\n") == PortEnum(5, "ACTIVE_DEFER")
    for garbage in ("", "\n", "ACTIVE", "four: ACTIVE", "4:", "\x00\ufffdgarbage", "4: ACT\x00IVE"):
        assert parse_port_enum(garbage) is None, garbage


@given(st.integers(min_value=0, max_value=2**31), st.sampled_from(STATE_NAMES + PHYS_NAMES))
def test_port_enum_round_trips_what_the_kernel_prints(ordinal: int, name: str) -> None:
    assert parse_port_enum(f"{ordinal}: {name}\n") == PortEnum(ordinal, name)


@given(st.text(max_size=80))
def test_port_enum_never_raises_and_keeps_names_whole(text: str) -> None:
    parsed = parse_port_enum(text)
    if parsed is not None:
        assert parsed.name == parsed.name.strip() and parsed.name
        assert f"{parsed.ordinal}: {parsed.name}" in text or f"{parsed.ordinal}:{parsed.name}" in text


@given(st.integers(min_value=0, max_value=0x7FFFFFFF))
def test_mtu_round_trips(mtu: int) -> None:
    assert parse_mtu(f"{mtu}\n") == mtu


@given(st.text(max_size=30))
def test_mtu_is_zero_for_anything_not_a_number(text: str) -> None:
    value = parse_mtu(text)
    stripped = text.strip()
    if stripped.isascii() and stripped.isdecimal() and int(stripped) <= 0x7FFFFFFF:
        assert value == int(stripped)
    else:
        assert value == 0


def test_mtu_examples() -> None:
    assert [parse_mtu(t) for t in ("1500\n", "65536", "-1", "0x5dc", "9000 ", "99999999999")] == [
        1500,
        65536,
        0,
        0,
        9000,
        0,
    ]


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_flags_round_trip(flags: int) -> None:
    assert parse_flags(f"0x{flags:x}\n") == flags


@given(st.text(max_size=30))
def test_flags_never_raise(text: str) -> None:
    value = parse_flags(text)
    assert value is None or (value >= 0 and text.strip().lower().startswith("0x"))


def test_flags_examples() -> None:
    assert parse_flags("0x1003\n") == 0x1003
    assert parse_flags("0x9") == 0x9
    assert [parse_flags(t) for t in ("4099", "0x", "0xzz", "")] == [None, None, None, None]


@given(st.integers(min_value=0, max_value=1023))
def test_numa_round_trips(node: int) -> None:
    assert parse_numa_affinity(f"{node}\n") == str(node)


@given(st.one_of(st.none(), st.text(max_size=20)))
def test_numa_is_empty_for_unknown_never_zero(text: str | None) -> None:
    value = parse_numa_affinity(text)
    assert value == "" or (value.isdecimal() and int(value) >= 0)
    assert parse_numa_affinity("-1\n") == ""
    assert parse_numa_affinity(None) == ""


# -- the verdict over port readings ------------------------------------------------------------

ACTIVE = PortEnum(4, "ACTIVE")
DEFER = PortEnum(5, "ACTIVE_DEFER")
DOWN = PortEnum(1, "DOWN")
LINK_UP = PortEnum(5, "LinkUp")
DISABLED = PortEnum(3, "Disabled")

_reading: st.SearchStrategy[PortReading] = st.one_of(
    st.tuples(st.sampled_from([ACTIVE, DEFER, DOWN]), st.sampled_from([LINK_UP, DISABLED])),
    st.just("state: No such file or directory"),
)


@given(st.dictionaries(st.integers(min_value=1, max_value=12).map(str), _reading, max_size=5))
def test_failed_only_when_every_port_was_read_and_none_carries_the_link(ports: dict[str, PortReading]) -> None:
    link = judge_ports("/sys/class/infiniband/mlx5_0/ports", list(ports.items()))
    some_ok = any(r == (ACTIVE, LINK_UP) for r in ports.values())
    some_unreadable = any(isinstance(r, str) for r in ports.values())
    if some_ok:
        assert link.state is LinkState.OK and link.reason is None
    elif some_unreadable or not ports:
        assert link.state is LinkState.UNVERIFIED and link.reason
    else:
        assert link.state is LinkState.FAILED
        assert link.reason is not None
        # ports in sorted order, whatever order they were read in
        order = [int(p) for p in ports]
        positions = [link.reason.index(f"port {p}:") for p in sorted(order)]
        assert positions == sorted(positions)
    assert link.first_seen_time is None  # the pass stamps it, not the checker


def test_reason_format_is_the_reference_one() -> None:
    link = judge_ports("p", [("2", (DOWN, DISABLED)), ("1", (DEFER, LINK_UP))])
    assert link.state is LinkState.FAILED
    assert link.reason == (
        'the RDMA link is not usable: port 1: state="5: ACTIVE_DEFER" phys_state="5: LinkUp"; '
        'port 2: state="1: DOWN" phys_state="3: Disabled"'
    )
