"""Hygon's responder (manufacturers/hygon/respond.py, vdev.py) and partitioner (partition.py) over
copies of hygon-k100 / hygon-k100-mig: node injection, vdev0.conf placement and its refusals, and the
partition lifecycle over the libhydmi_mig stand-in (tests/stubs/hygon/fake_hydmi_mig.c), which writes
the driver's registry file into the copy when told where it is (``registry=``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.hygon import vdev
from gpustack_operator.manufacturers.hygon.partition import DmiPartitioner, parse_mig_uuid
from gpustack_operator.manufacturers.hygon.respond import RESPONDER
from gpustack_operator.manufacturers.respond import Family, Grant, Mount, PartitionInstance, RefusedError

from tests.conftest import copy_host
from tests.stubs.keyvalue import edit_kv_fixture
from tests.unit.respond.test_amd import add_dev_nodes, context, grant, group_of, paths

PODS = "var/lib/gpustack/operator/pods"
LIB = "opt/hyhal/lib/libhydmi_mig.so.1"


def make_node(tmp_path: Path, name: str = "hygon-k100", mkfd: bool = True) -> Path:
    root = copy_host(name, tmp_path)
    add_dev_nodes(root)
    if mkfd:
        (root / "dev/mkfd").write_text("")
    return root


def sliced(group: DevicesGroup, index: int, cores: int, uid: str = "pod-a", memory: int = 16380) -> Grant:
    return grant(group, [index], Family.SLICED, cores=cores, memory=memory, uid=uid, manufacturer="hygon")


def vdev_file(root: Path, uid: str = "pod-a", container: str = "main") -> Path:
    return root / PODS / uid / container / "hygon-vdev/vdev0.conf"


def write_neighbour(root: Path, uid: str, text: str) -> None:
    path = vdev_file(root, uid)
    path.parent.mkdir(parents=True)
    path.write_text(text)


# -- node injection --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_plain_injection(tmp_path: Path, family: Family) -> None:
    root = make_node(tmp_path)
    injection = RESPONDER.respond(grant(group_of(root, "hygon"), [0, 2], family, manufacturer="hygon"), context(root))
    assert paths(injection) == [
        "/dev/kfd",
        "/dev/mkfd",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
        "/dev/dri/card3",
        "/dev/dri/renderD130",
    ]
    assert injection.envs == {} and injection.mounts == []


def test_no_mkfd_is_served_without_it_and_logged(tmp_path: Path) -> None:
    root = make_node(tmp_path, mkfd=False)
    injection = RESPONDER.respond(grant(group_of(root, "hygon"), [1], manufacturer="hygon"), context(root))
    assert paths(injection) == ["/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD129"]
    assert any("/dev/mkfd does not exist" in line for line in injection.log)


@pytest.mark.parametrize("missing", ["dev/kfd", "dev/dri/card1", "dev/dri/renderD128"])
def test_a_missing_device_node_refuses_and_writes_nothing(tmp_path: Path, missing: str) -> None:
    root = make_node(tmp_path)
    (root / missing).unlink()
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root, "hygon"), 0, 25), context(root))
    assert f"/{missing} does not exist" in err.value.message
    assert not vdev_file(root).exists()


# -- sliced: vdev0.conf ----------------------------------------------------------------------------


def test_a_slice_writes_vdev0_and_mounts_it_read_only(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root, "hygon")
    injection = RESPONDER.respond(sliced(group, 0, 25), context(root))
    assert vdev_file(root).read_text() == (
        "PciBusId: 0000:01:00.0\n"
        "cu_mask: 0x000000003fffffff\n"  # ceil(25% of 120) = 30 CUs, the lowest bits
        "cu_mask: 0x0000000000000000\n"
        "cu_count: 30\n"
        "mem: 16380 MiB\n"
        "device_id: 0\n"
        "vdev_id: 0\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )
    directory = f"/{PODS}/pod-a/main/hygon-vdev"
    assert injection.mounts == [Mount(container_path="/etc/vdev/docker", host_path=directory, read_only=True)]
    assert "/dev/dri/card1" in paths(injection)


def test_slices_take_the_next_free_bits_and_ids(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root, "hygon")
    ctx = context(root)
    RESPONDER.respond(sliced(group, 0, 25, uid="a"), ctx)
    RESPONDER.respond(sliced(group, 0, 60, uid="b"), ctx)
    RESPONDER.respond(sliced(group, 1, 10, uid="c"), ctx)
    b = vdev.parse(vdev_file(root, "b").read_text())
    c = vdev.parse(vdev_file(root, "c").read_text())
    # b: 72 CUs after a's 30 -> bits 30..101, across both 64-bit words
    assert (b.cu_count, b.cu_mask, b.vdev_id, b.pipe_id) == (72, ((1 << 72) - 1) << 30, 1, 1)
    assert "cu_mask: 0xffffffffc0000000\ncu_mask: 0x0000003fffffffff\n" in vdev_file(root, "b").read_text()
    # c: another DCU, so its CUs and pipe start over; vdev_id is node-wide
    assert (c.pci_bus_id, c.cu_count, c.cu_mask, c.vdev_id, c.pipe_id, c.device_id) == (
        "0000:21:00.0",
        12,
        (1 << 12) - 1,
        2,
        0,
        1,
    )


def test_a_retried_slice_keeps_its_file(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root, "hygon")
    ctx = context(root)
    RESPONDER.respond(sliced(group, 0, 25, uid="a"), ctx)
    RESPONDER.respond(sliced(group, 0, 25, uid="b"), ctx)
    first = vdev_file(root, "b").read_text()
    RESPONDER.respond(sliced(group, 0, 25, uid="b"), ctx)
    assert vdev_file(root, "b").read_text() == first
    assert vdev.parse(first).vdev_id == 1


def test_a_file_naming_another_dcu_is_placed_afresh(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root, "hygon")
    ctx = context(root)
    RESPONDER.respond(sliced(group, 0, 25, uid="b"), ctx)
    RESPONDER.respond(sliced(group, 3, 25, uid="b"), ctx)
    again = vdev.parse(vdev_file(root, "b").read_text())
    assert (again.pci_bus_id, again.device_id, again.vdev_id) == ("0000:61:00.0", 3, 0)


def test_more_than_one_dcu_sliced_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    g = grant(group_of(root, "hygon"), [0, 1], Family.SLICED, cores=50, manufacturer="hygon")
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(g, context(root))
    assert "exactly one DCU" in err.value.message
    assert not vdev_file(root).exists()


@pytest.mark.parametrize(
    "text",
    [
        "garbage",
        vdev.Vdev("0000:01:00.0", 0b111, 2, 100, 0, 5, 0).render(),  # count disagrees with the mask
        vdev.Vdev("0000:01:00.0", 1, 1, 100, 0, 200, 0).render(),  # vdev_id out of range
        vdev.Vdev("0000:01:00.0", 1, 1, 100, 0, 1, 0).render().replace("0x0000000000000001", "0x1"),
        vdev.Vdev("0000:01:00.0", 1, 1, 100, 0, 1, 0).render().replace("enable: 1", "enable: 0"),
    ],
)
def test_a_corrupt_neighbour_fails_closed(tmp_path: Path, text: str) -> None:
    root = make_node(tmp_path)
    write_neighbour(root, "other", text)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root, "hygon"), 1, 25), context(root))
    assert f"/{PODS}/other/main/hygon-vdev/vdev0.conf cannot be read" in err.value.message
    assert not vdev_file(root).exists()


# Reference rules §9 "a corrupt neighbouring config fails the allocation closed": configs that each
# parse but contradict each other or their card. DCU 0 is 0000:01:00.0, DCU 1 0000:21:00.0, 120 CUs each.
CORRUPT_SETS = [
    pytest.param(
        [("a", vdev.Vdev("0000:01:00.0", 0b1, 1, 1, 0, 7, 0)), ("b", vdev.Vdev("0000:21:00.0", 0b1, 1, 1, 1, 7, 0))],
        "both name vdev_id 7, which is unique on the node",
        id="one-vdev-id-twice",
    ),
    pytest.param(
        [("a", vdev.Vdev("0000:01:00.0", 1 << 125, 1, 1, 0, 0, 0))],
        "its cu_mask names CU 125, past the 120 CUs of DCU 0000:01:00.0",
        id="mask-past-the-card",
    ),
    pytest.param(
        [("a", vdev.Vdev("0000:21:00.0", 1 << 120, 1, 1, 1, 0, 0))],  # on the other card: checked too
        "its cu_mask names CU 120, past the 120 CUs of DCU 0000:21:00.0",
        id="mask-past-another-card",
    ),
    pytest.param(
        [("a", vdev.Vdev("0000:01:00.0", 0b01, 1, 1, 0, 0, 3)), ("b", vdev.Vdev("0000:01:00.0", 0b10, 1, 1, 0, 1, 3))],
        "both name pipe_id 3 on DCU 0000:01:00.0",
        id="one-pipe-id-twice-on-a-card",
    ),
    pytest.param(
        [("a", vdev.Vdev("0000:01:00.0", 0b11, 2, 1, 0, 0, 0)), ("b", vdev.Vdev("0000:01:00.0", 0b10, 1, 1, 0, 1, 1))],
        "both hold CU 1 of DCU 0000:01:00.0",
        id="one-cu-twice-on-a-card",
    ),
]


@pytest.mark.parametrize(("configs", "why"), CORRUPT_SETS)
def test_contradicting_neighbours_fail_closed_naming_the_files(
    tmp_path: Path, configs: list[tuple[str, vdev.Vdev]], why: str
) -> None:
    root = make_node(tmp_path)
    for uid, config in configs:
        write_neighbour(root, uid, config.render())
    group = group_of(root, "hygon")
    for index in (0, 1):  # whichever DCU the slice is for: the node's ids are unknown
        with pytest.raises(RefusedError) as err:
            RESPONDER.respond(sliced(group, index, 10), context(root))
        message = err.value.message
        assert why in message
        for uid, _ in configs:
            assert f"/{PODS}/{uid}/main/hygon-vdev/vdev0.conf" in message
        assert "remove the file if its pod is gone, or delete the pod that holds it" in message
        assert not vdev_file(root).exists()


@pytest.mark.parametrize(("configs", "why"), CORRUPT_SETS)
def test_a_corrupt_set_of_finished_pods_holds_nothing(
    tmp_path: Path, configs: list[tuple[str, vdev.Vdev]], why: str
) -> None:
    """Only live slices are neighbours: the allocator's ``live_pods`` leaves the finished ones out."""
    root = make_node(tmp_path)
    for uid, config in configs:
        write_neighbour(root, uid, config.render())
    ctx = dataclasses.replace(context(root), live_pods=frozenset({"pod-a"}))
    RESPONDER.respond(sliced(group_of(root, "hygon"), 0, 10), ctx)
    assert vdev.parse(vdev_file(root).read_text()) == vdev.Vdev("0000:01:00.0", (1 << 12) - 1, 12, 16380, 0, 0, 0)


def test_vdev_id_exhaustion_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    for i in range(vdev.MAX_VDEV_ID):  # 200 one-CU slices, 20 a card, on cards this node does not have
        bus = f"0000:{0x80 + i // 20:02x}:00.0"
        write_neighbour(root, f"p{i}", vdev.Vdev(bus, 1 << i % 20, 1, 1, 0, i, i % 20).render())
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root, "hygon"), 0, 10), context(root))
    assert "every vdev_id (0-199)" in err.value.message


def test_pipe_id_exhaustion_on_one_card_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    for i in range(vdev.MAX_PIPE_ID):
        write_neighbour(root, f"p{i}", vdev.Vdev("0000:01:00.0", 1 << i, 1, 1, 0, i, i).render())
    group = group_of(root, "hygon")
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group, 0, 10), context(root))
    assert "every pipe_id (0-19)" in err.value.message
    RESPONDER.respond(sliced(group, 1, 10), context(root))
    assert vdev.parse(vdev_file(root).read_text()).vdev_id == 20  # another card: its pipes are free


def test_no_free_cus_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root, "hygon")
    ctx = context(root)
    RESPONDER.respond(sliced(group, 0, 95, uid="a"), ctx)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group, 0, 10, uid="b"), ctx)
    assert "other slices hold all but 6" in err.value.message


@pytest.mark.parametrize(("percent", "cus", "count"), [(25, 120, 30), (1, 120, 2), (100, 120, 120), (33, 64, 22)])
def test_cu_count_is_ceil_capped(percent: int, cus: int, count: int) -> None:
    assert vdev.cu_count(percent, cus) == count


def test_vdev_round_trips() -> None:
    config = vdev.Vdev("0000:41:00.0", ((1 << 80) - 1) << 20, 80, 32760, 2, 199, 19)
    assert vdev.parse(config.render()) == config


# -- partitioned -----------------------------------------------------------------------------------


def mig_node(tmp_path: Path, **fixture: object) -> Path:
    root = make_node(tmp_path, "hygon-k100-mig")
    (root / "etc/dmi_mig_config/ci").mkdir()
    edit_kv_fixture(root / (LIB + ".fixture"), registry=root / "etc/dmi_mig_config", **fixture)
    return root


def partition_grant(group: DevicesGroup, index: int, instance: PartitionInstance, family: Family) -> Grant:
    g = grant(group, [index], family, manufacturer="hygon")
    return dataclasses.replace(g, partition=instance, owner_family=Family.PARTITIONED)


def test_a_partition_is_created_injected_and_destroyed(tmp_path: Path) -> None:
    root = mig_node(tmp_path)
    group = group_of(root, "hygon")
    parts = DmiPartitioner(HostRoot(root))
    instance = parts.create(group, group.accelerators[2], "2g.15gb", 1)
    registry = "/etc/dmi_mig_config/ci/dev2gi3ci0.conf"  # dev2 names 0000:41:00.0; GI ids start at 3
    assert (instance.registry_file, instance.start, instance.size) == (registry, 1, 1)
    assert instance.uuid == "MIG-" + parse_mig_uuid((root / registry.lstrip("/")).read_text())  # type: ignore[operator]
    assert parts.live(instance)
    for family in (Family.PARTITIONED, Family.VISIBILITY):
        injection = RESPONDER.respond(partition_grant(group, 2, instance, family), context(root))
        assert injection.envs == {"DMI_MIG_VISIBLE_DEVICE": instance.uuid}
        assert Mount(container_path=registry, host_path=registry) in injection.mounts
        assert Mount(container_path="/opt/hyhal", host_path="/opt/hyhal") in injection.mounts
        assert paths(injection) == ["/dev/kfd", "/dev/mkfd", "/dev/dri/card3", "/dev/dri/renderD130"]
    second = parts.create(group, group.accelerators[2], "2g.15gb", 2)
    assert second.registry_file == "/etc/dmi_mig_config/ci/dev2gi4ci0.conf" and second.uuid != instance.uuid
    parts.destroy(instance)
    assert not (root / registry.lstrip("/")).exists()
    assert not parts.live(instance) and parts.live(second)
    parts.destroy(instance)  # already gone: fine
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(partition_grant(group, 2, instance, Family.PARTITIONED), context(root))
    assert "does not exist on this node" in err.value.message


@pytest.mark.parametrize(
    ("fixture", "profile", "start", "needle"),
    [
        ({"create_error": 23}, "2g.15gb", 0, "the GPU instance could not be created"),
        ({"ci_create_error": 999}, "2g.15gb", 0, "the compute instance could not be created"),
        ({"registry_skip": 1}, "2g.15gb", 0, "registry file /etc/dmi_mig_config/ci/dev0gi3ci0.conf is missing"),
        ({}, "3g.20gb", 0, "offers no such profile"),
        ({}, "4g.31gb", 1, "1 is not a legal placement (legal starts: 0, 2)"),
    ],
)
def test_partition_create_failures(
    tmp_path: Path, fixture: dict[str, object], profile: str, start: int, needle: str
) -> None:
    root = mig_node(tmp_path, **fixture)
    group = group_of(root, "hygon")
    parts = DmiPartitioner(HostRoot(root))
    with pytest.raises(RefusedError) as err:
        parts.create(group, group.accelerators[0], profile, start)
    assert needle in err.value.message
    # nothing half-made is left: the whole card can still be carved
    edit_kv_fixture(root / (LIB + ".fixture"), create_error=0, ci_create_error=0, registry_skip=0)
    assert parts.create(group, group.accelerators[0], "8g.63gb", 0).size == 4


def test_overlapping_placement_is_the_drivers_refusal(tmp_path: Path) -> None:
    root = mig_node(tmp_path)
    group = group_of(root, "hygon")
    parts = DmiPartitioner(HostRoot(root))
    parts.create(group, group.accelerators[0], "4g.31gb", 0)
    with pytest.raises(RefusedError) as err:
        parts.create(group, group.accelerators[0], "2g.15gb", 1)
    assert "could not be created" in err.value.message


def test_no_multi_instance_library_refuses_partitions(tmp_path: Path) -> None:
    root = make_node(tmp_path)  # hygon-k100: no libhydmi_mig
    group = group_of(root, "hygon")
    with pytest.raises(RefusedError) as err:
        DmiPartitioner(HostRoot(root)).create(group, group.accelerators[0], "2g.15gb", 0)
    assert "no libhydmi_mig.so" in err.value.message


def test_a_partition_grant_without_its_instance_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path, "hygon-k100-mig")
    g = grant(group_of(root, "hygon"), [0], Family.PARTITIONED, manufacturer="hygon")
    with pytest.raises(RefusedError):
        RESPONDER.respond(g, context(root))
