"""Verify scenario `driver_modes`: the container-share flags are really set in the vendor stand-in's
state (libdcmi.so.fixture), and the package in the container reads them back the same way."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from controller import HOSTS, VENV, container, sha256

# testinfra's own podman backend (through molecule's inventory it would fall back to one ad-hoc
# `ansible` run per command for the podman connection)
testinfra_hosts = ["podman://" + container("gpustack-driver-modes")]  # this run's container

LIB = "usr/local/Ascend/driver/lib64/driver/libdcmi.so"
ON = {2, 5}  # converge turned these on, and card 0 (on since prepare) off; card 7 was only predicted


def flags(text: str) -> dict[int, str]:
    """card -> share= token of each npu line, as the stand-in persists them."""
    out = {}
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0] == "npu":
            kv = dict(t.split("=", 1) for t in tokens[1:])
            out[int(kv["card"])] = kv["share"]
    return out


def test_the_stand_in_is_the_controllers_build(host):
    assert host.file(f"/host/{LIB}").sha256sum == sha256(HOSTS / "ascend-910b-8x" / LIB)


def test_container_share_flags_in_the_vendor_state_file(host):
    state = flags(host.file(f"/host/{LIB}.fixture").content_string)
    original = flags((HOSTS / "ascend-910b-8x" / f"{LIB}.fixture").read_text(encoding="utf-8"))
    assert sorted(state) == sorted(original) == list(range(8))
    assert set(original.values()) == {"0"}
    assert {card for card, share in state.items() if share == "1"} == ON
    assert {card for card, share in state.items() if share == "0"} == set(range(8)) - ON


def test_only_the_share_flags_changed(host):
    now = host.file(f"/host/{LIB}.fixture").content_string.splitlines()
    before = (HOSTS / "ascend-910b-8x" / f"{LIB}.fixture").read_text(encoding="utf-8").splitlines()
    assert len(now) == len(before)
    for a, b in zip(now, before, strict=True):
        assert [t for t in a.split() if not t.startswith("share=")] == [
            t for t in b.split() if not t.startswith("share=")
        ]


def test_the_package_reads_the_modes_back(host):
    # the CLI's root defaults to / (the node view it runs in), never to /host: name the node's root
    out = host.check_output(f"{VENV}/bin/gpustack-operator dm mode ascend container-share --host-root /host")
    modes = yaml.safe_load(out)["modes"]
    assert len(modes) == 8
    assert all(m["declared"] for m in modes)
    assert {m["index"] for m in modes if m["enabled"]} == ON


def test_the_container_has_no_network(host):
    # podman's network none: only the loopback interface, nothing leaves the machine
    assert host.check_output("ls /sys/class/net") == "lo"
