"""AMD's responder (manufacturers/amd/respond.py) over copies of the amdgpu fixture hosts: the node
injection of every family, the sliced enforcers (HSA_CU_MASK, VROCM_*), CU-window placement and its
records, and every refusal. The node view and the host's writable tree are one temp copy; /dev nodes
and the staged library are plain files in it (what the responder checks is that they exist)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.amd import cumask
from gpustack_operator.manufacturers.amd.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    PRELOAD_FILE,
    ContainerRef,
    DeviceNode,
    Family,
    Grant,
    Granted,
    Injection,
    Mount,
    RefusedError,
    RespondContext,
    SliceBudget,
)
from gpustack_operator.settings import Settings

from tests.conftest import copy_host
from tests.unit.test_amd_detect import detect, detected

NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"
LIB = "var/lib/gpustack/operator/lib/amd"
PODS = "/var/lib/gpustack/operator/pods"


def make_node(tmp_path: Path, name: str, *, dev: bool = True, staged: bool = True) -> Path:
    root = copy_host(name, tmp_path)
    if dev:
        add_dev_nodes(root)
    if staged:
        lib = root / LIB
        lib.mkdir(parents=True)
        for file in ("libvrocm.so", "rocm-cumask-check", "rocm-monitor"):
            (lib / file).write_text("stand-in\n")
    return root


def add_dev_nodes(root: Path) -> None:
    """/dev/kfd and every /dev/dri node the fixture's sysfs lists (a regular file stands for each)."""
    (root / "dev/dri").mkdir(parents=True, exist_ok=True)
    (root / "dev/kfd").write_text("")
    for entry in (root / "sys/class/drm").iterdir():
        if entry.name.startswith(("card", "renderD")) and "-" not in entry.name:
            (root / "dev/dri" / entry.name).write_text("")


def group_of(root: Path, manufacturer: str = "amd") -> DevicesGroup:
    (group,) = detected(detect(root, manufacturer)).groups
    return group


def context(root: Path) -> RespondContext:
    return RespondContext(view=HostRoot(root), host=HostRoot(root), settings=Settings())


def grant(
    group: DevicesGroup,
    indexes: list[int],
    family: Family = Family.EXCLUSIVE,
    *,
    cores: int = 100,
    memory: int = 4096,
    uid: str = "pod-a",
    container: str = "main",
    env: dict[str, str] | None = None,
    manufacturer: str = "amd",
) -> Grant:
    accelerators = tuple(Granted(group, a) for a in group.accelerators if a.index in indexes)
    return Grant(
        manufacturer=manufacturer,
        family=family,
        accelerators=accelerators,
        container=ContainerRef(namespace="ns", pod=uid, pod_uid=uid, container=container, env=env or {}),
        budget=SliceBudget(cores_percent=cores, memory_mib=memory) if family is Family.SLICED else None,
    )


def paths(injection: Injection) -> list[str]:
    return [d.host_path for d in injection.devices]


# -- every family: the node injection --------------------------------------------------------------


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_plain_injection_is_kfd_and_each_cards_drm_nodes(tmp_path: Path, family: Family) -> None:
    root = make_node(tmp_path, "mi300x-8x")
    group = group_of(root)
    injection = RESPONDER.respond(grant(group, [1, 3], family), context(root))
    # the BMC VGA is card0, so the MI300X at index 1 is card2 / renderD129 (read from sysfs)
    assert paths(injection) == [
        "/dev/kfd",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
        "/dev/dri/card4",
        "/dev/dri/renderD131",
    ]
    assert injection.devices[0] == DeviceNode(container_path="/dev/kfd", host_path="/dev/kfd")
    assert injection.envs == {"AMD_VISIBLE_DEVICES": "none"}
    assert injection.mounts == []


def test_amd_visible_devices_none_even_when_the_container_sets_it(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    g = grant(group_of(root), [0], env={"AMD_VISIBLE_DEVICES": "all"})
    assert RESPONDER.respond(g, context(root)).envs["AMD_VISIBLE_DEVICES"] == "none"


@pytest.mark.parametrize("missing", ["dev/kfd", "dev/dri/card1", "dev/dri/renderD128"])
def test_a_missing_device_node_refuses(tmp_path: Path, missing: str) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    (root / missing).unlink()
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group_of(root), [0]), context(root))
    assert f"/{missing} does not exist" in err.value.message


def test_an_accelerator_no_kfd_node_names_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    group = group_of(root)
    props = root / NODES / "1/properties"
    props.write_text(props.read_text().replace("unique_id ", "unique_id 1"))  # another card now
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group, [0]), context(root))
    assert "no KFD node of this node names it" in err.value.message


def test_partitioned_is_not_served(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    assert Family.PARTITIONED not in RESPONDER.families
    with pytest.raises(RefusedError):
        RESPONDER.respond(grant(group_of(root), [0], Family.PARTITIONED), context(root))


# -- sliced ----------------------------------------------------------------------------------------


def test_sliced_injection_on_two_mi300x(tmp_path: Path) -> None:
    root = make_node(tmp_path, "mi300x-8x")
    group = group_of(root)
    g = grant(group, [2, 5], Family.SLICED, cores=50, memory=98296)
    injection = RESPONDER.respond(g, context(root))
    ids = [a.id for a in group.accelerators if a.index in (2, 5)]
    assert injection.envs["ROCR_VISIBLE_DEVICES"] == ",".join(ids)
    assert injection.envs["HSA_CU_MASK"] == "0:0-151;1:0-151"
    assert injection.envs["VROCM_DEVICE_MEMORY_LIMIT_0"] == "98296"
    assert injection.envs["VROCM_DEVICE_MEMORY_LIMIT_1"] == "98296"
    assert injection.envs["VROCM_LEDGER_PATH"] == "/var/run/gpustack/amd/vrocm.ledger"
    assert injection.envs["LIBVROCM_LOG_LEVEL"] == "1"
    assert injection.envs["AMD_VISIBLE_DEVICES"] == "none"
    lib = "/var/lib/gpustack/operator/lib/amd"
    assert Mount(container_path="/usr/local/gpustack/amd", host_path=lib) in injection.mounts
    preload = f"{PODS}/pod-a/_preload/main"  # per container, outside its read-write working dir
    assert Mount(container_path=PRELOAD_FILE, host_path=preload) in injection.mounts
    assert (root / preload.lstrip("/")).read_text() == "/usr/local/gpustack/amd/libvrocm.so\n"
    for tool in ("rocm-cumask-check", "rocm-monitor"):
        assert Mount(container_path=f"/usr/local/bin/{tool}", host_path=f"{lib}/{tool}") in injection.mounts
    ledger = Mount(container_path="/var/run/gpustack/amd", host_path=f"{PODS}/pod-a/main", read_only=False)
    assert ledger in injection.mounts
    assert (root / PODS.lstrip("/") / "pod-a/main").is_dir()
    assert len(paths(injection)) == 5  # kfd + two cards' nodes, as exclusive
    assert injection.log == []  # 50% of 304 is on the 8-CU atom


def test_never_overwrite_log_level(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    g = grant(group_of(root), [0], Family.SLICED, cores=50, env={"LIBVROCM_LOG_LEVEL": "3"})
    assert "LIBVROCM_LOG_LEVEL" not in RESPONDER.respond(g, context(root)).envs


def test_no_cores_request_is_the_whole_card_mask(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    g = grant(group_of(root), [0], Family.SLICED, cores=0)
    assert RESPONDER.respond(g, context(root)).envs["HSA_CU_MASK"] == "0:0-59"


# The reference §4 table as the responder emits it: (host, cores%, mask or refusal, delivered log).
# RDNA 60 CU / 3 SE: 30 WGPs in atoms of 3, window = 2n CUs; CDNA 304 CU / 8 XCC: atoms of 8 CUs.
MASK_ROWS = [
    ("radeon-7800xt", 100, "0:0-59", None),
    ("radeon-7800xt", 50, "0:0-29", None),
    ("radeon-7800xt", 10, "0:0-5", None),
    ("radeon-7800xt", 9, "0:0-5", "10%"),  # the minimum: 2.7 WGPs rounds to one 3-WGP atom
    ("radeon-7800xt", 15, "0:0-5", "10%"),  # 4.5 → 5 WGPs, aligned down to 3
    ("radeon-7800xt", 25, "0:0-11", "20%"),  # 7.5 → 8, aligned down to 6
    ("radeon-7800xt", 33, "0:0-17", "30%"),  # 9.9 → 10, aligned down to 9
    ("radeon-7800xt", 99, "0:0-59", "100%"),  # 29.7 → 30
    ("mi300x-8x", 100, "0:0-303", None),
    ("mi300x-8x", 3, "0:0-7", "2.6%"),  # the minimum: 9.12 → 9, aligned down to 8
    ("mi300x-8x", 10, "0:0-23", "7.9%"),  # 30.4 → 30 → 24
    ("mi300x-8x", 25, "0:0-71", "23.7%"),  # 76 → 72
    ("mi300x-8x", 50, "0:0-151", None),
    ("mi300x-8x", 33, "0:0-95", "31.6%"),  # 100.3 → 100 → 96
]


@pytest.mark.parametrize(("name", "percent", "mask", "delivered"), MASK_ROWS)
def test_cu_mask_rows(tmp_path: Path, name: str, percent: int, mask: str, delivered: str | None) -> None:
    root = make_node(tmp_path, name)
    injection = RESPONDER.respond(grant(group_of(root), [0], Family.SLICED, cores=percent), context(root))
    assert injection.envs["HSA_CU_MASK"] == mask
    if delivered is None:
        assert injection.log == []
    else:
        (line,) = injection.log
        assert f"{percent}% of" in line and line.endswith(f"{delivered} delivered")


@pytest.mark.parametrize(
    ("name", "percent", "minimum"),
    [("radeon-7800xt", 8, 9), ("radeon-7800xt", 1, 9), ("mi300x-8x", 2, 3), ("mi300x-8x", 1, 3)],
)
def test_below_the_minimum_is_refused_naming_it(tmp_path: Path, name: str, percent: int, minimum: int) -> None:
    root = make_node(tmp_path, name)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group_of(root), [0], Family.SLICED, cores=percent), context(root))
    assert err.value.message.endswith(f"; its smallest slice is {minimum}%")
    assert not (root / PODS.lstrip("/") / "pod-a/amd-cumask.main.json").exists()


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("num_xcc 8", "num_xcc 0"), "reports no XCC count"),
        (("gfx_target_version 90402", "gfx_target_version 80003"), "unrecognised GPU architecture"),
        (("simd_count 1216", "simd_count 1212"), "quantum does not divide"),
    ],
)
def test_a_topology_that_cannot_be_masked_is_refused(tmp_path: Path, edit: tuple[str, str], needle: str) -> None:
    root = make_node(tmp_path, "mi300x-8x")
    group = group_of(root)
    props = root / NODES / "2/properties"
    props.write_text(props.read_text().replace(*edit))
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group, [0], Family.SLICED, cores=50), context(root))
    assert needle in err.value.message
    # the same card still serves a whole-card grant: only the mask is impossible
    assert "/dev/kfd" in paths(RESPONDER.respond(grant(group, [0]), context(root)))


def test_library_not_staged_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt", staged=False)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group_of(root), [0], Family.SLICED, cores=50), context(root))
    assert "libvrocm.so is not staged" in err.value.message


def test_a_tool_not_staged_is_not_mounted_and_logged(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    (root / LIB / "rocm-monitor").unlink()
    injection = RESPONDER.respond(grant(group_of(root), [0], Family.SLICED, cores=50), context(root))
    assert [m.container_path for m in injection.mounts if m.container_path.startswith("/usr/local/bin")] == [
        "/usr/local/bin/rocm-cumask-check"
    ]
    assert any("rocm-monitor is not mounted" in line for line in injection.log)


# -- placement across containers -------------------------------------------------------------------


def test_slices_take_the_lowest_free_window_then_overlap_least(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    group = group_of(root)
    ctx = context(root)
    masks = [
        RESPONDER.respond(grant(group, [0], Family.SLICED, cores=pct, uid=uid), ctx).envs["HSA_CU_MASK"]
        for uid, pct in [("a", 50), ("b", 20), ("c", 30), ("d", 10)]
    ]
    # a: 0-29; b: the lowest free start on the 6-CU grid, 30-41; c: 42-59 fits exactly; the card is
    # full, so d takes the window overlapping least -- all overlap by 6, ties to the lowest start
    assert masks == ["0:0-29", "0:30-41", "0:42-59", "0:0-5"]


def test_full_card_takes_the_start_overlapping_least(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    group = group_of(root)
    ctx = context(root)
    # two slices stacked on 0-11 (merged: counted once), one on 12-59 -> 24-CU requests
    for uid, pct in [("a", 20), ("b", 20)]:
        assert RESPONDER.respond(grant(group, [0], Family.SLICED, cores=pct, uid=uid), ctx).envs["HSA_CU_MASK"] == (
            "0:0-11" if uid == "a" else "0:12-23"
        )
    mask = RESPONDER.respond(grant(group, [0], Family.SLICED, cores=80, uid="c"), ctx).envs["HSA_CU_MASK"]
    # 48 CUs on the 6-CU grid against merged 0-23: start 0 overlaps 24, 6 overlaps 18, 12 overlaps 12
    assert mask == "0:12-59"
    # now every CU is held at least once: every 12-CU start overlaps fully, so the lowest start wins
    assert RESPONDER.respond(grant(group, [0], Family.SLICED, cores=20, uid="d"), ctx).envs["HSA_CU_MASK"] == "0:0-11"


def test_place_prefers_least_overlap_with_merged_occupancy() -> None:
    topology = cumask.CuMaskTopology(gfx="gfx1101", cu=60, se=3, sa_per_se=2, xcc=1)
    held = [cumask.Window(0, 29), cumask.Window(0, 29), cumask.Window(36, 59)]
    # free CUs are 30-35 only; a 12-CU window: start 24 overlaps 6 (24-29) + 0 + 0 ... start 30 overlaps
    # 30-41 ∩ 36-59 = 6; tie -> the lowest start, 24. Without merging, start 24 would count 12.
    assert cumask.place(topology, 12, held) == cumask.Window(24, 35)
    assert cumask.place(topology, 6, held) == cumask.Window(30, 35)  # the free hole first
    assert cumask.place(topology, 60, []) == cumask.Window(0, 59)
    with pytest.raises(cumask.CuMaskTopologyError):
        cumask.place(topology, 9, [])  # off the 6-CU grid


def test_a_retried_container_gets_the_same_windows(tmp_path: Path) -> None:
    root = make_node(tmp_path, "mi300x-8x")
    group = group_of(root)
    ctx = context(root)
    RESPONDER.respond(grant(group, [0], Family.SLICED, cores=25, uid="x"), ctx)
    first = RESPONDER.respond(grant(group, [0, 1], Family.SLICED, cores=25, uid="y"), ctx)
    again = RESPONDER.respond(grant(group, [0, 1], Family.SLICED, cores=25, uid="y"), ctx)
    assert first.envs["HSA_CU_MASK"] == again.envs["HSA_CU_MASK"] == "0:72-143;1:0-71"
    record = json.loads((root / PODS.lstrip("/") / "y/amd-cumask.main.json").read_text())
    assert record == {"accelerators": {group.accelerators[0].id: [72, 143], group.accelerators[1].id: [0, 71]}}


def test_a_retry_asking_for_a_different_size_is_placed_again(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    group = group_of(root)
    ctx = context(root)
    assert RESPONDER.respond(grant(group, [0], Family.SLICED, cores=20, uid="y"), ctx).envs["HSA_CU_MASK"] == "0:0-11"
    assert RESPONDER.respond(grant(group, [0], Family.SLICED, cores=50, uid="y"), ctx).envs["HSA_CU_MASK"] == "0:0-29"


@pytest.mark.parametrize("text", ["{not json", '{"accelerators": {"GPU-1": [5, 2]}}', '{"other": 1}', "[]"])
def test_a_corrupt_neighbour_record_fails_closed(tmp_path: Path, text: str) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    group = group_of(root)
    neighbour = root / PODS.lstrip("/") / "other-pod/amd-cumask.main.json"
    neighbour.parent.mkdir(parents=True)
    neighbour.write_text(text)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(grant(group, [0], Family.SLICED, cores=50), context(root))
    assert f"{PODS}/other-pod/amd-cumask.main.json" in err.value.message
    assert "remove the file if its pod is gone" in err.value.message
    # a whole-card grant reads no occupancy and is unaffected
    assert RESPONDER.respond(grant(group, [0]), context(root)).envs == {"AMD_VISIBLE_DEVICES": "none"}


def test_the_containers_own_corrupt_record_is_simply_replaced(tmp_path: Path) -> None:
    root = make_node(tmp_path, "radeon-7800xt")
    own = root / PODS.lstrip("/") / "pod-a/amd-cumask.main.json"
    own.parent.mkdir(parents=True)
    own.write_text("garbage")
    injection = RESPONDER.respond(grant(group_of(root), [0], Family.SLICED, cores=50), context(root))
    assert injection.envs["HSA_CU_MASK"] == "0:0-29"
    assert json.loads(own.read_text())["accelerators"]
