"""T-Head's responder and partitioner (issue 10): device nodes proven by their minor numbers, the
sliced preload pair and positional quota env, partitions through the HGML stand-in."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Detected
from gpustack_operator.manufacturers.respond import (
    PRELOAD_FILE,
    ContainerRef,
    Family,
    Grant,
    Granted,
    PartitionInstance,
    RefusedError,
    RespondContext,
    SliceBudget,
)
from gpustack_operator.manufacturers.thead.partition import HgmlPartitioner
from gpustack_operator.manufacturers.thead.respond import LEDGER_PATH, LIB_CONTAINER_DIR, RESPONDER
from gpustack_operator.settings import load_settings

from tests.conftest import copy_host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

FIXTURE = "usr/local/PPU_SDK/lib/libhgml.so.fixture"
CONTROL = ["/dev/alixpu", "/dev/alixpu_ctl"]


def mkchar(root: Path, path: str, minor: int, major: int = 240) -> None:
    disk = root / path.lstrip("/")
    disk.parent.mkdir(parents=True, exist_ok=True)
    if disk.exists():
        disk.unlink()
    os.mknod(disk, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


class Node:
    def __init__(self, tmp_path: Path) -> None:
        self.root = copy_host("thead-ppu", tmp_path)
        outcome = detect_one(self.root, "thead")
        assert isinstance(outcome, Detected)
        self.group: DevicesGroup = outcome.groups[0]
        for path in CONTROL:
            mkchar(self.root, path, 0, major=241)
        for accel in self.group.accelerators:  # named by ordinal, carrying the recorded minor
            mkchar(self.root, f"/dev/alixpu_ppu{accel.index}", accel.physical_indexes[0])
        self.host_dir = tmp_path / "host"
        self.host_dir.mkdir()
        self.ctx = RespondContext(view=HostRoot(self.root), host=HostRoot(self.host_dir), settings=load_settings())
        self.lib = self.host_dir / self.ctx.lib_dir.lstrip("/") / "thead"

    def stage(self, monitor: bool = True) -> None:
        self.lib.mkdir(parents=True)
        for name in ("hggc_quota.so", "hgml_dlsym_hook.so"):
            (self.lib / name).write_bytes(b"\x7fELF")
        if monitor:
            (self.lib / "ppu-monitor").write_text("#!/bin/sh\n")

    def grant(
        self,
        family: Family,
        *indexes: int,
        budget: SliceBudget | None = None,
        env: dict[str, str] | None = None,
        group: DevicesGroup | None = None,
        partition: PartitionInstance | None = None,
    ) -> Grant:
        g = group or self.group
        return Grant(
            manufacturer="thead",
            family=family,
            accelerators=tuple(Granted(g, g.accelerators[i]) for i in indexes),
            container=ContainerRef(namespace="ns", pod="p", pod_uid="uid-1", container="main", env=env or {}),
            budget=budget if budget is not None else (SliceBudget(25, 24576) if family is Family.SLICED else None),
            partition=partition,
        )


def devices(injection: object) -> list[str]:
    return [d.host_path for d in injection.devices]  # type: ignore[attr-defined]


# -- whole-card families ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_whole_card_nodes_and_no_env(tmp_path: Path, mode: Family) -> None:
    node = Node(tmp_path)
    injection = RESPONDER.respond(node.grant(mode, 1, 3), node.ctx)
    assert devices(injection) == [*CONTROL, "/dev/alixpu_ppu1", "/dev/alixpu_ppu3"]
    assert injection.envs == {} and injection.mounts == []
    assert all(d.container_path == d.host_path and d.permissions == "rw" for d in injection.devices)


@pytest.mark.parametrize(
    ("breaks", "message"),
    [
        (lambda n: n.group.accelerators[2].physical_indexes.__setitem__(0, 3), "carries minor 2, want 3"),
        (lambda n: n.group.accelerators[2].physical_indexes.clear(), "no recorded minor number"),
        (lambda n: (n.root / "dev/alixpu_ppu2").unlink(), "alixpu_ppu2 does not exist"),
        (lambda n: (n.root / "dev/alixpu_ctl").unlink(), "alixpu_ctl does not exist"),
        (lambda n: mkchar(n.root, "/dev/alixpu_ppu2", 5), "carries minor 5, want 2"),
    ],
)
def test_an_unprovable_node_fails_the_allocation(tmp_path: Path, breaks: object, message: str) -> None:
    node = Node(tmp_path)
    breaks(node)  # type: ignore[operator]
    with pytest.raises(RefusedError, match=message):
        RESPONDER.respond(node.grant(Family.EXCLUSIVE, 2), node.ctx)


def test_a_regular_file_is_not_a_device_node(tmp_path: Path) -> None:
    node = Node(tmp_path)
    (node.root / "dev/alixpu_ppu0").unlink()
    (node.root / "dev/alixpu_ppu0").write_text("0")
    with pytest.raises(RefusedError, match="is not a character device"):
        RESPONDER.respond(node.grant(Family.SHARED, 0), node.ctx)


# -- sliced ----------------------------------------------------------------------------------------


def test_sliced_response(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage()
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0, budget=SliceBudget(10, 24576)), node.ctx)
    assert devices(injection) == [*CONTROL, "/dev/alixpu_ppu0"]
    assert injection.envs == {
        "HGGC_DEVICE_SM_LIMIT": "10",
        "HGGC_DEVICE_MEMORY_LIMIT_0": "24576",
        "HGGC_LEDGER_PATH": LEDGER_PATH,
        "LIBHGGC_LOG_LEVEL": "1",
    }
    lib = "/" + str(node.lib.relative_to(node.host_dir))
    ledger = node.ctx.pod_dir("uid-1", "main")
    mounts = {m.container_path: (m.host_path, m.read_only) for m in injection.mounts}
    assert mounts == {
        LIB_CONTAINER_DIR: (lib, True),
        PRELOAD_FILE: (node.ctx.pod_dir("uid-1", "_preload", "main"), True),
        "/usr/local/bin/ppu-monitor": (f"{lib}/ppu-monitor", True),
        "/var/run/vppu": (ledger, False),
    }
    assert stat.S_IMODE((node.host_dir / ledger.lstrip("/")).stat().st_mode) == 0o777


def test_compute_figure_is_emitted_at_100_percent(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage()
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0, budget=SliceBudget(100, 1024)), node.ctx)
    assert injection.envs["HGGC_DEVICE_SM_LIMIT"] == "100"


def test_memory_keys_are_positional_in_ascending_index(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage()
    small = node.group.model_copy(update={"memory": 8192})
    grant = Grant(
        manufacturer="thead",
        family=Family.SLICED,
        accelerators=(Granted(node.group, node.group.accelerators[2]), Granted(small, small.accelerators[4])),
        container=ContainerRef(namespace="ns", pod="p", pod_uid="u", container="c"),
        budget=SliceBudget(50, 12288),
    )
    injection = RESPONDER.respond(grant, node.ctx)
    limits = {k: v for k, v in injection.envs.items() if k.startswith("HGGC_DEVICE_MEMORY_LIMIT_")}
    # position 0 is the lower index (2), position 1 the next (4), capped at its own VRAM
    assert limits == {"HGGC_DEVICE_MEMORY_LIMIT_0": "12288", "HGGC_DEVICE_MEMORY_LIMIT_1": "8192"}
    assert devices(injection)[2:] == ["/dev/alixpu_ppu2", "/dev/alixpu_ppu4"]


def test_log_level_is_never_overwritten(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage()
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0, env={"LIBHGGC_LOG_LEVEL": "3"}), node.ctx)
    assert "LIBHGGC_LOG_LEVEL" not in injection.envs


def test_preload_file_names_both_libraries_enforcement_first(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage()
    RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    preload = node.ctx.host.read_text(node.ctx.pod_dir("uid-1", "_preload", "main"))
    assert preload == f"{LIB_CONTAINER_DIR}/hggc_quota.so\n{LIB_CONTAINER_DIR}/hgml_dlsym_hook.so\n"


@pytest.mark.parametrize("missing", ["hggc_quota.so", "hgml_dlsym_hook.so"])
def test_either_half_unstaged_is_refused(tmp_path: Path, missing: str) -> None:
    node = Node(tmp_path)
    node.stage()
    (node.lib / missing).unlink()
    with pytest.raises(RefusedError, match=f"{missing} is not staged"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)


def test_unstaged_libraries_are_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    with pytest.raises(RefusedError, match="is not staged"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)


def test_missing_monitor_is_logged_not_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.stage(monitor=False)
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert any("ppu-monitor" in line for line in injection.log)
    assert "/usr/local/bin/ppu-monitor" not in {m.container_path for m in injection.mounts}


# -- partitioned -------------------------------------------------------------------------------------


def cap_tree(node: Node, ordinal: int, gi: int, ci: int, gi_minor: int, ci_minor: int) -> None:
    base = node.root / f"proc/driver/alixpu/capabilities/ppu{ordinal}/mig/gi{gi}"
    (base / f"ci{ci}").mkdir(parents=True, exist_ok=True)
    (base / "access").write_text(f"DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\n")
    (base / f"ci{ci}" / "access").write_text(f"DeviceFileMinor: {ci_minor}\nDeviceFileMode: 292\n")
    mkchar(node.root, f"/dev/alixpu-caps/alixpu-cap{gi_minor}", gi_minor, major=242)
    mkchar(node.root, f"/dev/alixpu-caps/alixpu-cap{ci_minor}", ci_minor, major=242)


def kv(node: Node, key: str) -> str | None:
    for line in (node.root / FIXTURE).read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    return None


def test_partition_create_inject_live_destroy(tmp_path: Path) -> None:
    node = Node(tmp_path)
    cap_tree(node, 6, 1, 0, 1280, 1281)
    part = HgmlPartitioner(HostRoot(node.root))
    accel = node.group.accelerators[6]
    instance = part.create(node.group, accel, "2g.24gb", 2)
    assert (instance.start, instance.size, instance.profile) == (2, 2, "2g.24gb")
    assert instance.device_nodes == (
        "/dev/alixpu_ppu6",
        "/dev/alixpu-caps/alixpu-cap1280",
        "/dev/alixpu-caps/alixpu-cap1281",
    )
    assert instance.uuid == f"MIG-{accel.id}/1/0"
    assert kv(node, "device.6.gi.1") == "1:2:2" and kv(node, "device.6.gi.1.ci.0")
    assert part.live(instance)

    injection = RESPONDER.respond(node.grant(Family.PARTITIONED, 6, partition=instance), node.ctx)
    assert devices(injection) == [*CONTROL, *instance.device_nodes] and injection.envs == {}
    sidecar = RESPONDER.respond(node.grant(Family.VISIBILITY, 6, partition=instance), node.ctx)
    assert devices(sidecar) == devices(injection)

    part.destroy(instance)
    assert not part.live(instance)
    assert kv(node, "device.6.gi.1") == ""


def test_partition_create_failure_names_the_driver_error(tmp_path: Path) -> None:
    node = Node(tmp_path)
    edit_kv_fixture(node.root / FIXTURE, device_6_gi_create_error=8)
    with pytest.raises(RefusedError, match=r"creating a 1g\.12gb partition at placement 0 failed") as err:
        HgmlPartitioner(HostRoot(node.root)).create(node.group, node.group.accelerators[6], "1g.12gb", 0)
    assert "hgmlDeviceCreateGpuInstanceWithPlacement" in err.value.message


def test_overlapping_placement_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    cap_tree(node, 6, 1, 0, 1280, 1281)
    part = HgmlPartitioner(HostRoot(node.root))
    part.create(node.group, node.group.accelerators[6], "2g.24gb", 0)
    with pytest.raises(RefusedError, match="failed"):
        part.create(node.group, node.group.accelerators[6], "1g.12gb", 1)


def test_missing_capability_node_rolls_the_instance_back(tmp_path: Path) -> None:
    node = Node(tmp_path)
    cap_tree(node, 6, 1, 0, 1280, 1281)
    (node.root / "dev/alixpu-caps/alixpu-cap1281").unlink()
    with pytest.raises(RefusedError, match="alixpu-cap1281 does not exist"):
        HgmlPartitioner(HostRoot(node.root)).create(node.group, node.group.accelerators[6], "1g.12gb", 0)
    assert kv(node, "device.6.gi.1") == "" and kv(node, "device.6.gi.1.ci.0") == ""


def test_capability_file_without_a_minor_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    cap_tree(node, 6, 1, 0, 1280, 1281)
    (node.root / "proc/driver/alixpu/capabilities/ppu6/mig/gi1/access").write_text("DeviceFileMode: 292\n")
    with pytest.raises(RefusedError, match="carries no DeviceFileMinor"):
        HgmlPartitioner(HostRoot(node.root)).create(node.group, node.group.accelerators[6], "1g.12gb", 0)


def test_unknown_profile_and_unprovable_card_create_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path)
    part = HgmlPartitioner(HostRoot(node.root))
    with pytest.raises(RefusedError, match=r"offers no partition profile 3g\.36gb"):
        part.create(node.group, node.group.accelerators[6], "3g.36gb", 0)
    mkchar(node.root, "/dev/alixpu_ppu7", 9)
    with pytest.raises(RefusedError, match="carries minor 9, want 7"):
        part.create(node.group, node.group.accelerators[7], "1g.12gb", 0)
    assert kv(node, "device.7.gi.1") is None


def test_partitioned_grant_without_an_instance_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    with pytest.raises(RefusedError, match="carries no partition instance"):
        RESPONDER.respond(node.grant(Family.PARTITIONED, 6), node.ctx)
