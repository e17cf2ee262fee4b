"""The device-plugin responders against the product's reference rules, one table row per rule
(issue 10). Row ids name the rule they pin: ``ref4-*`` reference-rules §4 (AMD ``HSA_CU_MASK``),
``ref5-*`` §5 (per-vendor slice output), ``ref9-*`` §9 (Ascend and Hygon), ``ref11-*`` §11 "Apply",
``ref14-*`` / ``ref16-*`` / ``ref17-*`` / ``ref110-*`` supplement §1.4 / §1.6 / §1.7 / §1.10, and
``ref61-*`` / ``ref63-*`` supplement §6.1 / §6.3.

Every vendor boundary is faked where it is elsewhere in tests/unit/respond: node trees copied from
tests/fixtures/hosts (device nodes as files, sysfs as files), the compiled stand-in libraries of
tests/stubs (DCMI, CNDev, HGML) behind the driver calls, and a temporary host tree for what the
responders write. The per-vendor node builders are the vendor test modules' own."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from gpustack_operator.allocator.budget import slice_budget
from gpustack_operator.allocator.resources import ResourceNames
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.amd import cumask
from gpustack_operator.manufacturers.amd.cumask import CuMaskTopology, CuMaskTopologyError, Window
from gpustack_operator.manufacturers.amd.respond import RESPONDER as AMD
from gpustack_operator.manufacturers.ascend.respond import CONFIG_CONTAINER_PATH, LIB_CONTAINER_DIR
from gpustack_operator.manufacturers.ascend.respond import RESPONDER as ASCEND
from gpustack_operator.manufacturers.cambricon.respond import RESPONDER as CAMBRICON
from gpustack_operator.manufacturers.hygon import vdev
from gpustack_operator.manufacturers.hygon.respond import RESPONDER as HYGON
from gpustack_operator.manufacturers.iluvatar.respond import RESPONDER as ILUVATAR
from gpustack_operator.manufacturers.metax.respond import RESPONDER as METAX
from gpustack_operator.manufacturers.mthreads.respond import RESPONDER as MTHREADS
from gpustack_operator.manufacturers.nvidia.respond import RESPONDER as NVIDIA
from gpustack_operator.manufacturers.respond import (
    PRELOAD_FILE,
    Channel,
    ContainerRef,
    Family,
    Grant,
    Granted,
    Injection,
    PartitionInstance,
    RefusedError,
    RespondContext,
    Responder,
    SliceBudget,
)
from gpustack_operator.manufacturers.thead.respond import RESPONDER as THEAD
from hypothesis import given
from hypothesis import strategies as st

from tests.stubs.ascend import fixture as dcmi_fixture
from tests.unit.respond import test_amd as amd_t
from tests.unit.respond import test_ascend as asc_t
from tests.unit.respond import test_cambricon as cam_t
from tests.unit.respond import test_hygon as hy_t
from tests.unit.respond import test_iluvatar as il_t
from tests.unit.respond import test_metax as mx_t
from tests.unit.respond import test_mthreads as mt_t
from tests.unit.respond import test_nvidia as nv_t
from tests.unit.respond import test_thead as th_t

VENDORS = ("nvidia", "iluvatar", "mthreads", "amd", "hygon", "metax", "ascend", "cambricon", "thead")
KFD_NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What test_ascend clears: a CANN install on the test machine must not change the DCMI lookup."""
    for name in ("CANN_HOME", "ASCEND_TOOLKIT_HOME", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)


# -- one node per vendor ----------------------------------------------------------------------------


@dataclass
class World:
    """One vendor's node, its detected group and the context its responder is called with."""

    vendor: str
    responder: Responder
    ctx: RespondContext
    group: DevicesGroup
    root: Path | None = None  # the node view, where it is a tree (device-node vendors)
    node: Any = None  # the vendor test module's own node helper, where there is one
    runtime_class: str | None = None
    slice_at: int = 0  # a position the fixture can slice on
    extra: dict[str, Any] = field(default_factory=dict)

    def grant(
        self,
        family: Family,
        *positions: int,
        budget: SliceBudget | None = None,
        env: dict[str, str] | None = None,
        owner_family: Family | None = None,
        partition: PartitionInstance | None = None,
        uid: str = "uid-1",
        container: str = "main",
        channel: Channel = Channel.ENVVAR,
        group: DevicesGroup | None = None,
    ) -> Grant:
        g = group or self.group
        if budget is None and family is Family.SLICED:
            budget = SliceBudget(cores_percent=30, memory_mib=min(4096, g.memory))
        return Grant(
            manufacturer=self.vendor,
            family=family,
            accelerators=tuple(Granted(g, g.accelerators[p]) for p in positions),
            container=ContainerRef(
                namespace="ns",
                pod="p",
                pod_uid=uid,
                container=container,
                env=env or {},
                runtime_class=self.runtime_class,
            ),
            budget=budget,
            owner_family=owner_family,
            partition=partition,
            channel=channel,
            cdi_kind="nvidia.com/gpu" if channel is Channel.CDI else None,
        )

    def respond(self, grant: Grant) -> Injection:
        return self.responder.respond(grant, self.ctx)

    def pods_written(self) -> bool:
        return self.ctx.host.exists(self.ctx.pods_dir)


def build(vendor: str, tmp_path: Path) -> World:
    if vendor == "nvidia":
        return World(vendor, NVIDIA, nv_t.staged(tmp_path, "nvidia/cuda-12"), nv_t.group(4))
    if vendor == "iluvatar":
        return World(vendor, ILUVATAR, nv_t.staged(tmp_path, "iluvatar"), il_t.GROUP, runtime_class="iluvatar")
    if vendor == "mthreads":
        return World(vendor, MTHREADS, nv_t.staged(tmp_path), mt_t.GROUP)
    if vendor == "amd":
        root = amd_t.make_node(tmp_path, "mi300x-8x")
        return World(vendor, AMD, amd_t.context(root), amd_t.group_of(root), root=root)
    if vendor == "hygon":
        root = hy_t.make_node(tmp_path)
        return World(vendor, HYGON, amd_t.context(root), amd_t.group_of(root, "hygon"), root=root)
    if vendor == "metax":
        root = mx_t.make_node(tmp_path)
        return World(vendor, METAX, mx_t.context(root), mx_t.group_of(root), root=root, slice_at=1)
    if vendor == "ascend":
        ascend = asc_t.Node(tmp_path)
        ascend.stage("ascend/cann-8-910b")
        return World(vendor, ASCEND, ascend.ctx, ascend.group, root=ascend.root, node=ascend)
    if vendor == "cambricon":
        cambricon = cam_t.Node(tmp_path)
        return World(vendor, CAMBRICON, cambricon.ctx, cambricon.group, root=cambricon.root, node=cambricon)
    if vendor == "thead":
        thead = th_t.Node(tmp_path)
        thead.stage()
        return World(vendor, THEAD, thead.ctx, thead.group, root=thead.root, node=thead)
    raise AssertionError(vendor)


def device_paths(injection: Injection) -> list[str]:
    return [d.host_path for d in injection.devices]


# == supplement §6.1 "Who injects the devices" ======================================================

# (vendor, visibility env: name -> how its value is made, per-card node patterns, once-per-response
# node patterns, optional node patterns). "ids" = accelerator ids, "driver" = the driver's indexes.
CARD, RENDER = r"/dev/dri/card\d+", r"/dev/dri/renderD\d+"
WHO_INJECTS = [
    pytest.param("nvidia", {"NVIDIA_VISIBLE_DEVICES": "ids"}, (), (), (), id="ref61-nvidia-visible-env"),
    pytest.param("ascend", {"ASCEND_VISIBLE_DEVICES": "driver"}, (), (), (), id="ref61-ascend-visible-env"),
    pytest.param("iluvatar", {"IX_VISIBLE_DEVICES": "ids"}, (), (), (), id="ref61-iluvatar-visible-env"),
    pytest.param("mthreads", {"MTHREADS_VISIBLE_DEVICES": "driver"}, (), (), (), id="ref61-mthreads-visible-env"),
    pytest.param(
        "amd", {"AMD_VISIBLE_DEVICES": "none"}, (CARD, RENDER), (r"/dev/kfd",), (), id="ref61-amd-nodes-kfd-dri"
    ),
    pytest.param("hygon", {}, (CARD, RENDER), (r"/dev/kfd", r"/dev/mkfd"), (), id="ref61-hygon-nodes-kfd-mkfd-dri"),
    pytest.param(
        "metax", {}, (CARD, RENDER), (r"/dev/mxcd",), (r"/dev/mxnd", r"/dev/mxgd"), id="ref61-metax-nodes-mxcd-dri"
    ),
    pytest.param(
        "cambricon",
        {"CAMBRICON_VISIBLE_DEVICES": "driver"},
        (r"/dev/cambricon_dev\d+",),
        (r"/dev/cambricon_ctl",),
        (r"/dev/cambricon_ipcm\d+", r"/dev/cambricon_gdr", r"/dev/commu\d+", r"/dev/cmsg_ctrl\d+"),
        id="ref61-cambricon-nodes-and-visible-env",
    ),
    pytest.param(
        "thead", {}, (r"/dev/alixpu_ppu\d+",), (r"/dev/alixpu", r"/dev/alixpu_ctl"), (), id="ref61-thead-nodes-alixpu"
    ),
]


@pytest.mark.parametrize(("vendor", "env", "per_card", "once", "optional"), WHO_INJECTS)
def test_who_injects_the_devices(
    tmp_path: Path,
    vendor: str,
    env: dict[str, str],
    per_card: tuple[str, ...],
    once: tuple[str, ...],
    optional: tuple[str, ...],
) -> None:
    world = build(vendor, tmp_path)
    positions = (1, 3)
    injection = world.respond(world.grant(Family.EXCLUSIVE, *positions))
    granted = [world.group.accelerators[p] for p in positions]
    expected: dict[str, str] = {}
    for name, how in env.items():
        if how == "ids":
            expected[name] = ",".join(a.id for a in granted)
        elif how == "driver":
            expected[name] = ",".join(str(a.physical_indexes[0]) for a in granted)
        else:
            expected[name] = how
    assert injection.envs == expected
    paths = device_paths(injection)
    for pattern in per_card:
        assert sum(bool(re.fullmatch(pattern, p)) for p in paths) == len(positions), (pattern, paths)
    for pattern in once:
        assert sum(bool(re.fullmatch(pattern, p)) for p in paths) == 1, (pattern, paths)
    allowed = per_card + once + optional
    assert all(any(re.fullmatch(a, p) for a in allowed) for p in paths), paths
    if not per_card and not once:  # a visibility-env vendor: its runtime makes the nodes
        assert paths == [] and injection.mounts == []


# == supplement §1.4 "Shared grant of N = N distinct accelerators" =================================


@pytest.mark.parametrize("vendor", [pytest.param(v, id=f"ref14-{v}-distinct-accelerators") for v in VENDORS])
def test_one_accelerator_twice_is_refused(tmp_path: Path, vendor: str) -> None:
    world = build(vendor, tmp_path)
    with pytest.raises(RefusedError) as err:
        world.respond(world.grant(Family.SHARED, 1, 1))
    assert "granted twice" in err.value.message
    assert world.group.accelerators[1].id in err.value.message
    assert not world.pods_written()


# == supplement §1.4 verbose-logging table and the never-overwrite rule =============================

QUIET = [
    pytest.param("nvidia", "LIBCUDA_LOG_LEVEL", "0", id="ref14-log-nvidia-libcuda-0"),
    pytest.param("iluvatar", "LIBCUDA_LOG_LEVEL", "0", id="ref14-log-iluvatar-libcuda-0"),
    pytest.param("ascend", "ENPU_LOG_LEVEL", "1", id="ref14-log-ascend-enpu-1"),
    pytest.param("thead", "LIBHGGC_LOG_LEVEL", "1", id="ref14-log-thead-libhggc-1"),
    pytest.param("amd", "LIBVROCM_LOG_LEVEL", "1", id="ref14-log-amd-libvrocm-1"),
    pytest.param("nvidia", "CUDA_DEVICE_ORDER", "PCI_BUS_ID", id="ref14-nvidia-device-order-pci-bus-id"),
    pytest.param("ascend", "ENPU_DSMI_HOOK", "1", id="ref14-ascend-dsmi-hook-1"),
]


@pytest.mark.parametrize(("vendor", "name", "value"), QUIET)
def test_sliced_defaults_are_injected_unless_declared(tmp_path: Path, vendor: str, name: str, value: str) -> None:
    world = build(vendor, tmp_path)
    assert world.respond(world.grant(Family.SLICED, world.slice_at)).envs[name] == value
    declared = world.respond(world.grant(Family.SLICED, world.slice_at, env={name: "7"}, uid="uid-2"))
    assert name not in declared.envs  # the container's own env: wins (never-overwrite)


@pytest.mark.parametrize(
    ("vendor", "name"),
    [
        pytest.param("iluvatar", "CUDA_DEVICE_ORDER", id="ref14-device-order-is-nvidia-only"),
        pytest.param("iluvatar", "ENPU_DSMI_HOOK", id="ref14-dsmi-hook-is-ascend-only"),
    ],
)
def test_a_default_is_not_injected_for_another_vendor(tmp_path: Path, vendor: str, name: str) -> None:
    world = build(vendor, tmp_path)
    assert name not in world.respond(world.grant(Family.SLICED, 0)).envs


# == supplement §1.6 enforcer table (all preload libraries through /etc/ld.so.preload) ===============

# (vendor, preload file lines, env keys, env-key prefixes, container mount paths)
ENFORCERS = [
    pytest.param(
        "nvidia",
        ["/usr/local/vgpu/libvgpu.so"],
        {"CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0"},
        (),
        (),
        id="ref16-nvidia-hami-core",
    ),
    pytest.param(
        "iluvatar",
        ["/usr/local/vgpu/libvgpu.so"],
        {"CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0"},
        (),
        (),
        id="ref16-iluvatar-hami-core",
    ),
    pytest.param(
        "ascend", [f"{LIB_CONTAINER_DIR}/libvruntime.so"], set(), (), (CONFIG_CONTAINER_PATH,), id="ref16-ascend-vcann"
    ),
    pytest.param(
        "thead",
        ["/usr/local/vppu/hggc_quota.so", "/usr/local/vppu/hgml_dlsym_hook.so"],
        {"HGGC_DEVICE_SM_LIMIT", "HGGC_DEVICE_MEMORY_LIMIT_0", "HGGC_LEDGER_PATH"},
        (),
        (),
        id="ref16-thead-quota-and-hook",
    ),
    pytest.param(
        "amd",
        ["/usr/local/gpustack/amd/libvrocm.so"],
        {"VROCM_DEVICE_MEMORY_LIMIT_0", "VROCM_LEDGER_PATH", "HSA_CU_MASK"},
        (),
        ("/usr/local/bin/rocm-cumask-check", "/usr/local/bin/rocm-monitor"),
        id="ref16-amd-vrocm-and-cu-mask",
    ),
    pytest.param("mthreads", None, set(), ("MTHREADS_QOS_",), (), id="ref16-mthreads-qos-env"),
    pytest.param("hygon", None, set(), (), ("/etc/vdev/docker",), id="ref16-hygon-vdev-conf"),
    pytest.param("metax", None, {"METAX_SGPUS"}, (), (), id="ref16-metax-sgpu"),
    pytest.param("cambricon", None, {"VIRTUAL_DEVICES"}, (), (), id="ref16-cambricon-smlu"),
]


@pytest.mark.parametrize(("vendor", "preload", "keys", "prefixes", "mounts"), ENFORCERS)
def test_enforcer_per_manufacturer(
    tmp_path: Path,
    vendor: str,
    preload: list[str] | None,
    keys: set[str],
    prefixes: tuple[str, ...],
    mounts: tuple[str, ...],
) -> None:
    world = build(vendor, tmp_path)
    injection = world.respond(world.grant(Family.SLICED, world.slice_at))
    assert keys <= set(injection.envs), injection.envs
    for prefix in prefixes:
        assert any(k.startswith(prefix) for k in injection.envs), injection.envs
    by_path = {m.container_path: m for m in injection.mounts}
    for path in mounts:
        assert path in by_path and by_path[path].read_only
    if preload is None:
        assert PRELOAD_FILE not in by_path
    else:
        text = world.ctx.host.read_text(by_path[PRELOAD_FILE].host_path)
        assert text.splitlines() == preload


def test_ref16_thead_sliced_has_no_visible_devices_env_and_emits_compute_at_100(tmp_path: Path) -> None:
    world = build("thead", tmp_path)
    injection = world.respond(world.grant(Family.SLICED, 0, budget=SliceBudget(100, 1024)))
    assert injection.envs["HGGC_DEVICE_SM_LIMIT"] == "100"
    assert not any(k.endswith("VISIBLE_DEVICES") for k in injection.envs)
    assert injection.envs["HGGC_LEDGER_PATH"].startswith("/var/run/vppu/")


def test_ref16_amd_rocr_visible_devices_match_the_injected_nodes(tmp_path: Path) -> None:
    world = build("amd", tmp_path)
    injection = world.respond(world.grant(Family.SLICED, 2, 5, budget=SliceBudget(50, 1024)))
    ids = injection.envs["ROCR_VISIBLE_DEVICES"].split(",")
    assert ids == [world.group.accelerators[2].id, world.group.accelerators[5].id]
    assert all(re.fullmatch(r"GPU-[0-9a-f]{16}", i) for i in ids)
    assert sum(p.startswith("/dev/dri/renderD") for p in device_paths(injection)) == len(ids)
    assert injection.envs["AMD_VISIBLE_DEVICES"] == "none"


# -- Ascend container-share read outcomes (supplement §1.6) ----------------------------------------


def share_untouched(node: Any) -> None:
    dcmi_fixture.set_global(node.root, share_get_rc=-8005, share_set_rc=-8002)  # any touch would fail


def share_already_on(node: Any) -> None:
    dcmi_fixture.set_npu(node.root, 1, share=1, share_set_rc=-8002)  # a write would fail


def share_not_loaded(node: Any) -> None:
    (node.root / dcmi_fixture.LIB).unlink()


def share_read_fails(node: Any) -> None:
    dcmi_fixture.set_npu(node.root, 1, share_get_rc=-8005)


def share_read_and_write_fail(node: Any) -> None:
    dcmi_fixture.set_npu(node.root, 1, share_get_rc=-8005, share_set_rc=-8002)


# (setup, family, refused message parts or None, flag afterwards)
SHARE_ROWS = [
    pytest.param(share_untouched, Family.EXCLUSIVE, None, "0", id="ref16-share-exclusive-never-touched"),
    pytest.param(None, Family.SHARED, None, "1", id="ref16-share-shared-written-when-off"),
    pytest.param(None, Family.VISIBILITY, None, "1", id="ref16-share-visibility-written-when-off"),
    pytest.param(None, Family.SLICED, None, "1", id="ref16-share-sliced-written-when-off"),
    pytest.param(share_already_on, Family.SHARED, None, "1", id="ref16-share-read-first-on-not-written"),
    pytest.param(
        share_not_loaded, Family.SHARED, ("libdcmi is not loaded",), None, id="ref16-share-not-loaded-refused-no-cmd"
    ),
    pytest.param(share_read_fails, Family.SHARED, None, "1", id="ref16-share-other-read-failure-still-writes"),
    pytest.param(
        share_read_and_write_fail,
        Family.SHARED,
        ("read failed", "write failed", "npu-smi set -t device-share -i 1 -c 0 -d 1"),
        "0",
        id="ref16-share-write-failure-both-reasons-and-remedy",
    ),
]


@pytest.mark.parametrize(("setup", "family", "refused", "flag"), SHARE_ROWS)
def test_ascend_container_share_outcomes(
    tmp_path: Path,
    setup: Callable[[Any], None] | None,
    family: Family,
    refused: tuple[str, ...] | None,
    flag: str | None,
) -> None:
    world = build("ascend", tmp_path)
    if setup is not None:
        setup(world.node)
    if refused is None:
        injection = world.respond(world.grant(family, 1))
        assert injection.envs["ASCEND_VISIBLE_DEVICES"] == str(world.group.accelerators[1].physical_indexes[0])
    else:
        with pytest.raises(RefusedError) as err:
            world.respond(world.grant(family, 1))
        for part in refused:
            assert part in err.value.message
        if refused == ("libdcmi is not loaded",):
            assert "npu-smi set" not in err.value.message  # no command can load a library
    if flag is not None:
        assert dcmi_fixture.npu_value(world.node.root, 1, "share") == flag


def test_ref16_share_v2_declares_no_flag_and_is_allowed(tmp_path: Path) -> None:
    node = asc_t.Node(tmp_path, asc_t.V2)
    injection = ASCEND.respond(node.grant(Family.SHARED, 1), node.ctx)
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == str(node.group.accelerators[1].physical_indexes[1])
    assert any(node.group.accelerators[1].id in line for line in injection.log)


# -- Cambricon sMLU (supplement §1.6) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "smlu"),
    [
        pytest.param(Family.EXCLUSIVE, "0", id="ref16-smlu-exclusive-leaves-mode"),
        pytest.param(Family.SHARED, "0", id="ref16-smlu-shared-leaves-mode"),
        pytest.param(Family.SLICED, "1", id="ref16-smlu-enabled-only-for-sliced"),
    ],
)
def test_cambricon_smlu_mode_only_for_sliced(tmp_path: Path, family: Family, smlu: str) -> None:
    world = build("cambricon", tmp_path)
    before = world.node.kv("device.3.smlu")
    assert before == "0"
    injection = world.respond(world.grant(family, 3))
    assert world.node.kv("device.3.smlu") == smlu
    if family is Family.SLICED:  # the sMLU env, never the whole-card variable
        assert "CAMBRICON_VISIBLE_DEVICES" not in injection.envs
        assert injection.envs["VIRTUAL_DEVICES"].startswith("/dev/cambricon_dev3,")
    else:
        assert injection.envs == {"CAMBRICON_VISIBLE_DEVICES": "3"}


def test_ref16_smlu_no_api_is_refused_without_a_command(tmp_path: Path) -> None:
    node = cam_t.Node(tmp_path, no_smlu=True)
    with pytest.raises(RefusedError) as err:
        CAMBRICON.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert "no sMLU API" in err.value.message and "cnmon" not in err.value.message


# == supplement §1.7 visibility (the sshd sidecar) ==================================================


@pytest.mark.parametrize("vendor", [pytest.param(v, id=f"ref17-{v}-sidecar-plain-no-slicing") for v in VENDORS])
def test_sidecar_of_a_sliced_owner_is_the_plain_injection(tmp_path: Path, vendor: str) -> None:
    """Visibility reuses main's accelerators with a plain (non-sliced) response: the device-node
    vendors inject their nodes for the sidecar too, nobody writes or mounts a slicing artifact."""
    world = build(vendor, tmp_path)
    at = world.slice_at
    plain = world.respond(world.grant(Family.EXCLUSIVE, at))
    sidecar = world.respond(
        world.grant(Family.VISIBILITY, at, owner_family=Family.SLICED, budget=SliceBudget(30, 1024), container="sshd")
    )
    assert sidecar.envs == plain.envs
    assert sidecar.devices == plain.devices
    assert sidecar.mounts == [] and sidecar.annotations == {}
    assert not world.pods_written()  # no config, record or working directory
    if vendor in ("amd", "cambricon", "hygon", "metax", "thead"):
        assert sidecar.devices  # device-node manufacturers inject their nodes for the sidecar too


NO_PARTITIONS = ("iluvatar", "mthreads", "amd", "metax", "ascend", "cambricon")


@pytest.mark.parametrize(
    "vendor", [pytest.param(v, id=f"ref17-{v}-partition-owner-fails-closed") for v in NO_PARTITIONS]
)
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "unrecorded"])
def test_sidecar_of_a_partition_owner_needs_partition_capability(tmp_path: Path, vendor: str, recorded: bool) -> None:
    world = build(vendor, tmp_path)
    owner = world.group.accelerators[0].id
    instance = PartitionInstance(accelerator=owner, profile="1g", uuid="MIG-00000000") if recorded else None
    with pytest.raises(RefusedError) as err:
        world.respond(world.grant(Family.VISIBILITY, 0, owner_family=Family.PARTITIONED, partition=instance))
    assert "partition" in err.value.message
    assert not world.pods_written()


@pytest.mark.parametrize(
    "vendor", [pytest.param(v, id=f"ref17-{v}-partition-owner-never-the-parent") for v in ("nvidia", "hygon", "thead")]
)
def test_sidecar_of_a_partition_owner_without_its_instance_is_refused(tmp_path: Path, vendor: str) -> None:
    world = build(vendor, tmp_path)
    with pytest.raises(RefusedError) as err:
        world.respond(world.grant(Family.VISIBILITY, 0, owner_family=Family.PARTITIONED))
    assert "parent" in err.value.message


# == supplement §1.10 defensive guards ===============================================================


def test_ref110_nvidia_mixed_cuda_majors_are_refused(tmp_path: Path) -> None:
    ctx = nv_t.staged(tmp_path, "nvidia/cuda-12", "nvidia/cuda-11")
    g12, g11 = nv_t.group(2, "12.4", "a"), nv_t.group(2, "11.8", "b", first=2)
    grant = nv_t.sliced((Granted(g12, g12.accelerators[0]), Granted(g11, g11.accelerators[0])))
    with pytest.raises(RefusedError) as err:
        NVIDIA.respond(grant, ctx)
    assert "CUDA 12" in err.value.message and "CUDA 11" in err.value.message
    assert not ctx.host.exists(ctx.pods_dir)


@pytest.mark.parametrize(
    ("vendor", "needle"),
    [
        pytest.param("ascend", "exactly one NPU", id="ref110-ascend-sliced-one-npu"),
        pytest.param("hygon", "exactly one DCU", id="ref110-hygon-sliced-one-dcu"),
        pytest.param("metax", "exactly one GPU", id="ref110-metax-sliced-one-gpu"),
    ],
)
def test_multi_accelerator_slice_is_refused(tmp_path: Path, vendor: str, needle: str) -> None:
    world = build(vendor, tmp_path)
    with pytest.raises(RefusedError) as err:
        world.respond(world.grant(Family.SLICED, 1, 2))
    assert needle in err.value.message
    assert not world.pods_written()


# == supplement §6.3: the Iluvatar handler =========================================================


@pytest.mark.parametrize(
    ("runtime_class", "ok"),
    [
        pytest.param("iluvatar", True, id="ref63-iluvatar-handler-named"),
        pytest.param(None, False, id="ref63-iluvatar-no-handler-refused"),
        pytest.param("nvidia", False, id="ref63-iluvatar-other-handler-refused"),
    ],
)
def test_iluvatar_slice_needs_its_handler(tmp_path: Path, runtime_class: str | None, ok: bool) -> None:
    world = build("iluvatar", tmp_path)
    world.runtime_class = runtime_class
    if ok:
        assert world.respond(world.grant(Family.SLICED, 0)).envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    else:
        with pytest.raises(RefusedError, match="runtimeClassName: iluvatar"):
            world.respond(world.grant(Family.SLICED, 0))


# == reference rules §11 "Apply": exactly one channel ================================================


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY])
@pytest.mark.parametrize(
    "channel", [pytest.param(Channel.ENVVAR, id="ref11-envvar"), pytest.param(Channel.CDI, id="ref11-cdi")]
)
def test_apply_exactly_one_channel(tmp_path: Path, family: Family, channel: Channel) -> None:
    world = build("nvidia", tmp_path)
    injection = world.respond(world.grant(family, 0, 2, channel=channel))
    ids = [world.group.accelerators[0].id, world.group.accelerators[2].id]
    if channel is Channel.ENVVAR:
        assert injection.envs["NVIDIA_VISIBLE_DEVICES"] == f"{ids[0]},{ids[1]}"
        assert injection.annotations == {}
    else:
        assert injection.annotations == {
            "cdi.k8s.io/gpustack-nvidia": f"nvidia.com/gpu={ids[0]},nvidia.com/gpu={ids[1]}"
        }
        assert "NVIDIA_VISIBLE_DEVICES" not in injection.envs
    assert injection.cdi_devices == []


def test_ref11_partition_never_travels_as_cdi(tmp_path: Path) -> None:
    world = build("nvidia", tmp_path)
    instance = PartitionInstance(accelerator=world.group.accelerators[1].id, profile="1g.10gb", uuid=nv_t.MIG_UUID)
    injection = world.respond(world.grant(Family.PARTITIONED, 1, partition=instance, channel=Channel.CDI))
    assert injection.envs == {"NVIDIA_VISIBLE_DEVICES": nv_t.MIG_UUID}
    assert injection.annotations == {}


# == reference rules §5 per-vendor output ============================================================


def test_ref5_docs_example_24564_mib_at_50_percent_is_12282m(tmp_path: Path) -> None:
    names = ResourceNames(base="nvidia.com/gpu", manufacturer="nvidia")
    budget = slice_budget(names, {names.sliced_memory_percentage: "50"}, 24564)
    g = nv_t.group(2).model_copy(update={"memory": 24564})
    grant = nv_t.sliced(
        tuple(Granted(g, a) for a in g.accelerators), memory=budget.memory_mib, cores=budget.cores_percent
    )
    injection = NVIDIA.respond(grant, nv_t.staged(tmp_path, "nvidia/cuda-12"))
    assert injection.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "12282m"
    assert injection.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "12282m"  # one per allocated card
    assert injection.envs["CUDA_DEVICE_SM_LIMIT"] == "100"  # no cores request is 100
    assert injection.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/tmp/vgpu/cudevshr.cache"


@pytest.mark.parametrize(
    ("runtime", "subtree"),
    [
        pytest.param("12.4", "nvidia/cuda-12", id="ref5-nvidia-libdir-cuda-12"),
        pytest.param("11.8", "nvidia/cuda-11", id="ref5-nvidia-libdir-cuda-11"),
        pytest.param("13.0", "nvidia/cuda-13", id="ref5-nvidia-libdir-cuda-13"),
        pytest.param(None, "nvidia/cuda-12", id="ref5-nvidia-libdir-default-12"),
    ],
)
def test_nvidia_library_directory_is_the_cuda_major(tmp_path: Path, runtime: str | None, subtree: str) -> None:
    ctx = nv_t.staged(tmp_path, subtree)
    g = nv_t.group(1, runtime)
    injection = NVIDIA.respond(nv_t.sliced(nv_t.granted(g, 0)), ctx)
    by_path = {m.container_path: m.host_path for m in injection.mounts}
    assert by_path["/usr/local/vgpu"] == f"{ctx.lib_dir}/{subtree}"


@pytest.mark.parametrize(
    ("vendor", "key"),
    [
        pytest.param("amd", "VROCM_DEVICE_MEMORY_LIMIT_0", id="ref5-amd-bare-mib"),
        pytest.param("thead", "HGGC_DEVICE_MEMORY_LIMIT_0", id="ref5-thead-bare-mib"),
        pytest.param("nvidia", "CUDA_DEVICE_MEMORY_LIMIT_0", id="ref5-nvidia-mib-m"),
    ],
)
@pytest.mark.parametrize("memory", [1, 1500, 12282])
def test_memory_limit_units(tmp_path: Path, vendor: str, key: str, memory: int) -> None:
    world = build(vendor, tmp_path)
    injection = world.respond(world.grant(Family.SLICED, 0, budget=SliceBudget(50, memory)))
    assert injection.envs[key] == (f"{memory}m" if vendor == "nvidia" else str(memory))


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "thead"])
def test_ref5_memory_is_capped_at_each_cards_vram(tmp_path: Path, vendor: str) -> None:
    world = build(vendor, tmp_path)
    small = world.group.model_copy(update={"memory": 2048})
    grant = world.grant(Family.SLICED, 0, budget=SliceBudget(50, 4096), group=small)
    limit = next(v for k, v in world.respond(grant).envs.items() if k.endswith("MEMORY_LIMIT_0"))
    assert limit.rstrip("m") == "2048"


def test_ref5_ascend_memory_quota_in_npu_info_config(tmp_path: Path) -> None:
    world = build("ascend", tmp_path)
    world.respond(world.grant(Family.SLICED, 2, budget=SliceBudget(40, 12345)))
    assert "memory-quota=12345" in world.node.config().splitlines()
    assert "aicore-quota=40" in world.node.config().splitlines()


@pytest.mark.parametrize(
    ("vendor", "read"),
    [
        pytest.param("nvidia", lambda w, i: i.envs["CUDA_DEVICE_SM_LIMIT"], id="ref5-cores-absent-100-nvidia"),
        pytest.param("thead", lambda w, i: i.envs["HGGC_DEVICE_SM_LIMIT"], id="ref5-cores-absent-100-thead"),
        pytest.param(
            "ascend",
            lambda w, i: next(x for x in w.node.config().splitlines() if x.startswith("aicore-quota=")).split("=")[1],
            id="ref5-cores-absent-100-ascend",
        ),
    ],
)
def test_no_cores_request_is_100(tmp_path: Path, vendor: str, read: Callable[[World, Injection], str]) -> None:
    world = build(vendor, tmp_path)
    injection = world.respond(world.grant(Family.SLICED, world.slice_at, budget=SliceBudget(0, 1024)))
    assert read(world, injection) == "100"


# == reference rules §4 AMD HSA_CU_MASK =============================================================

ARCH_ROWS = [
    pytest.param("gfx1030", cumask.Architecture.RDNA, id="ref4-arch-gfx10-rdna"),
    pytest.param("gfx1101", cumask.Architecture.RDNA, id="ref4-arch-gfx11-rdna"),
    pytest.param("gfx1201", cumask.Architecture.RDNA, id="ref4-arch-gfx12-rdna"),
    pytest.param("gfx942", cumask.Architecture.CDNA, id="ref4-arch-gfx9-cdna"),
    pytest.param("gfx908", cumask.Architecture.CDNA, id="ref4-arch-gfx908-cdna"),
    pytest.param("gfx90a", cumask.Architecture.CDNA, id="ref4-arch-gfx90a-cdna-xcc1"),
    pytest.param("gfx803", None, id="ref4-arch-gfx8-refused"),
    pytest.param("gfx1300", None, id="ref4-arch-gfx13-refused"),
    pytest.param("", None, id="ref4-arch-empty-refused"),
]


@pytest.mark.parametrize(("gfx", "arch"), ARCH_ROWS)
def test_architecture_from_the_gfx_name(gfx: str, arch: cumask.Architecture | None) -> None:
    topology = CuMaskTopology(gfx=gfx, cu=96, se=4, sa_per_se=1, xcc=1)  # XCC 1 never makes it RDNA
    assert topology.architecture is arch
    if arch is None:
        with pytest.raises(CuMaskTopologyError, match="unrecognised GPU architecture"):
            topology.validate()
    else:
        topology.validate()


RX7800XT = CuMaskTopology("gfx1101", 60, 3, 2, 1)
MI300X = CuMaskTopology("gfx942", 304, 32, 1, 8)
RDNA_SE1 = CuMaskTopology("gfx1101", 60, 1, 2, 1)  # 30 WGPs, atom 1: the rounding shows unaligned
CDNA_110 = CuMaskTopology("gfx90a", 110, 8, 1, 1)

# (topology, cores %, window CUs)
WINDOW_ROWS = [
    pytest.param(RX7800XT, 100, 60, id="ref4-rdna-100-whole-card"),
    pytest.param(RX7800XT, 50, 30, id="ref4-rdna-window-2n"),  # 15 WGPs, a multiple of 3 → 30 CUs
    pytest.param(RX7800XT, 15, 6, id="ref4-rdna-align-down-se"),  # 4.5 → 5 WGPs → 3 → 6 CUs
    pytest.param(RX7800XT, 9, 6, id="ref4-rdna-min-9"),  # 2.7 → 3 WGPs: one atom
    pytest.param(RDNA_SE1, 15, 10, id="ref4-rdna-round-half-up"),  # 4.5 → 5 WGPs (not banker's 4)
    pytest.param(RDNA_SE1, 5, 4, id="ref4-rdna-round-half-up-1.5"),
    pytest.param(MI300X, 100, 304, id="ref4-cdna-100-whole-card"),
    pytest.param(MI300X, 3, 8, id="ref4-cdna-min-3"),  # 9.12 → 9 → 8
    pytest.param(MI300X, 10, 24, id="ref4-cdna-align-down-xcc"),  # 30.4 → 30 → 24
    pytest.param(CDNA_110, 15, 17, id="ref4-cdna-round-half-up"),  # 16.5 → 17 (XCC 1: no alignment)
    pytest.param(CDNA_110, 5, 6, id="ref4-cdna-round-half-up-5.5"),
]


@pytest.mark.parametrize(("topology", "percent", "cus"), WINDOW_ROWS)
def test_window_size(topology: CuMaskTopology, percent: int, cus: int) -> None:
    assert topology.window_cus(percent) == cus
    assert cus % topology.quantum == 0


@pytest.mark.parametrize(
    ("topology", "minimum", "quantum"),
    [
        pytest.param(RX7800XT, 9, 6, id="ref4-rdna-min-60cu-3se-9pct-quantum-2se"),
        pytest.param(MI300X, 3, 8, id="ref4-cdna-min-304cu-8xcc-3pct-quantum-xcc"),
    ],
)
def test_minimum_and_quantum(topology: CuMaskTopology, minimum: int, quantum: int) -> None:
    assert topology.min_percent == minimum
    assert topology.quantum == quantum
    topology.window_cus(minimum)
    with pytest.raises(CuMaskTopologyError) as err:  # below is refused, never clamped
        topology.window_cus(minimum - 1)
    assert str(err.value).endswith(f"; its smallest slice is {minimum}%")


def half_up(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2))


@st.composite
def topologies(draw: st.DrawFn) -> CuMaskTopology:
    if draw(st.booleans()):
        se = draw(st.integers(1, 8))
        wgps = se * draw(st.integers(1, 16))
        return CuMaskTopology(draw(st.sampled_from(["gfx1030", "gfx1100", "gfx1201"])), 2 * wgps, se, 2, 0)
    xcc = draw(st.integers(1, 8))
    return CuMaskTopology(
        draw(st.sampled_from(["gfx90a", "gfx942", "gfx908"])), xcc * draw(st.integers(1, 40)), 4, 1, xcc
    )


@given(topologies(), st.integers(1, 100))
def test_ref4_window_and_minimum_follow_the_formulas(topology: CuMaskTopology, percent: int) -> None:
    """The rule restated independently: RDNA n = half-up(WGPs·pct/100) aligned down to SE, window
    2n; CDNA n = half-up(CU·pct/100) aligned down to XCC; minimum ceil((100·atom − 50)/units)."""
    rdna = topology.architecture is cumask.Architecture.RDNA
    units, atom = (topology.cu // 2, topology.se) if rdna else (topology.cu, topology.xcc)
    n = half_up(Fraction(units * percent, 100)) // atom * atom
    minimum = math.ceil(Fraction(100 * atom - 50, units))
    assert topology.min_percent == minimum
    assert topology.quantum == (2 * topology.se if rdna else topology.xcc)
    if n == 0:
        assert percent < minimum
        with pytest.raises(CuMaskTopologyError, match=rf"; its smallest slice is {minimum}%$"):
            topology.window_cus(percent)
    else:
        assert percent >= minimum
        assert topology.window_cus(percent) == (2 * n if rdna else n)


VALIDATE_ROWS = [
    pytest.param(CuMaskTopology("gfx942", 0, 32, 1, 8), "reports 0 compute units", id="ref4-validate-cu-0"),
    pytest.param(CuMaskTopology("gfx1101", 0, 3, 2, 1), "reports 0 compute units", id="ref4-validate-rdna-cu-0"),
    pytest.param(CuMaskTopology("gfx1101", 61, 3, 2, 1), "is odd", id="ref4-validate-rdna-odd-cu"),
    pytest.param(CuMaskTopology("gfx1101", 60, 0, 2, 1), "0 shader engines", id="ref4-validate-rdna-se-0"),
    pytest.param(CuMaskTopology("gfx1101", 4, 3, 2, 1), "exceed its 2 WGPs", id="ref4-validate-rdna-se-gt-wgps"),
    pytest.param(CuMaskTopology("gfx942", 304, 32, 1, 0), "no XCC count", id="ref4-validate-cdna-xcc-0"),
    pytest.param(CuMaskTopology("gfx1101", 64, 3, 2, 1), "quantum does not divide", id="ref4-validate-rdna-quantum"),
    pytest.param(CuMaskTopology("gfx942", 300, 32, 1, 8), "quantum does not divide", id="ref4-validate-cdna-quantum"),
]


@pytest.mark.parametrize(("topology", "needle"), VALIDATE_ROWS)
def test_validate_refusals(topology: CuMaskTopology, needle: str) -> None:
    with pytest.raises(CuMaskTopologyError, match=needle):
        topology.validate()
    with pytest.raises(CuMaskTopologyError):  # and nothing is derived from it
        topology.window_cus(50)


# (occupied windows, window CUs, placed) on the 60 CU / 3 SE card (quantum 6)
PLACE_ROWS = [
    pytest.param([], 12, Window(0, 11), id="ref4-place-lowest-free-empty"),
    pytest.param([Window(0, 29)], 12, Window(30, 41), id="ref4-place-lowest-free-start"),
    pytest.param([Window(0, 3)], 6, Window(6, 11), id="ref4-place-on-the-quantum-grid"),
    pytest.param([Window(0, 47), Window(54, 59)], 12, Window(42, 53), id="ref4-place-full-least-overlap"),
    pytest.param(
        [Window(0, 29), Window(0, 29), Window(36, 59)], 12, Window(24, 35), id="ref4-place-occupancy-merged-first"
    ),
    pytest.param([Window(0, 59)], 12, Window(0, 11), id="ref4-place-ties-lowest-start"),
]


@pytest.mark.parametrize(("occupied", "cus", "placed"), PLACE_ROWS)
def test_placement(occupied: list[Window], cus: int, placed: Window) -> None:
    assert cumask.place(RX7800XT, cus, occupied) == placed


def test_ref4_mask_string_positions_in_rocr_visible_devices(tmp_path: Path) -> None:
    world = build("amd", tmp_path)
    other = world.respond(world.grant(Family.SLICED, 5, budget=SliceBudget(25, 1024), uid="first"))
    assert other.envs["HSA_CU_MASK"] == "0:0-71"
    injection = world.respond(world.grant(Family.SLICED, 2, 5, budget=SliceBudget(25, 1024)))
    rocr = injection.envs["ROCR_VISIBLE_DEVICES"].split(",")
    assert rocr == [world.group.accelerators[2].id, world.group.accelerators[5].id]
    # card 5 is position 1 and its first window is held: 72-143 there, 0-71 on card 2 (position 0)
    assert injection.envs["HSA_CU_MASK"] == "0:0-71;1:72-143"


@pytest.mark.parametrize(
    ("host", "mask"),
    [
        pytest.param("radeon-7800xt", "0:0-59", id="ref4-no-cores-rdna-whole-card"),
        pytest.param("mi300x-8x", "0:0-303", id="ref4-no-cores-cdna-whole-card"),
    ],
)
def test_no_cores_request_is_the_whole_card_mask(tmp_path: Path, host: str, mask: str) -> None:
    root = amd_t.make_node(tmp_path, host)
    grant = amd_t.grant(amd_t.group_of(root), [0], Family.SLICED, cores=0, memory=512)
    injection = AMD.respond(grant, amd_t.context(root))
    assert injection.envs["HSA_CU_MASK"] == mask
    assert injection.envs["VROCM_DEVICE_MEMORY_LIMIT_0"] == "512"
    assert injection.envs["AMD_VISIBLE_DEVICES"] == "none"


def test_ref4_responder_refuses_below_the_minimum_naming_it(tmp_path: Path) -> None:
    world = build("amd", tmp_path)
    with pytest.raises(RefusedError) as err:
        world.respond(world.grant(Family.SLICED, 0, budget=SliceBudget(2, 1024)))
    assert err.value.message.endswith("; its smallest slice is 3%")
    assert world.group.accelerators[0].id in err.value.message


# == reference rules §9 Ascend ======================================================================


@pytest.mark.parametrize(
    ("host", "indexes", "expected"),
    [
        pytest.param(asc_t.V1, [7, 3, 0], "7", id="ref9-910b-physical-id"),
        pytest.param(asc_t.V2, [7, 3, 0], "3", id="ref9-950-dcmi-device-id"),
        pytest.param(asc_t.V2, [7], None, id="ref9-a5-one-index-refused"),
    ],
)
def test_ascend_visible_devices(tmp_path: Path, host: str, indexes: list[int], expected: str | None) -> None:
    node = asc_t.Node(tmp_path, host)
    group = asc_t.with_indexes(node.group, 0, indexes)
    grant = node.grant(Family.EXCLUSIVE, 0, group=group)
    if expected is None:
        with pytest.raises(RefusedError, match="carries no dcmi device index"):
            ASCEND.respond(grant, node.ctx)
    else:
        assert ASCEND.respond(grant, node.ctx).envs == {"ASCEND_VISIBLE_DEVICES": expected}


def test_ref9_npu_info_config_keys_and_physical_id_on_950(tmp_path: Path) -> None:
    node = asc_t.Node(tmp_path, asc_t.V2)
    node.stage("ascend/cann-9-950")
    group = asc_t.with_indexes(node.group, 0, [7, 3, 0])
    group.accelerators[0].id = "Ascend 950 PR 0"  # spaces in the id: shm-id turns them to '-'
    injection = ASCEND.respond(node.grant(Family.SLICED, 0, group=group, budget=SliceBudget(20, 8192)), node.ctx)
    lines = node.config().splitlines()
    keys = [line.split("=", 1)[0] for line in lines]
    assert keys == ["physical-npu-id", "virtual-npu-id", "aicore-quota", "memory-quota", "shm-id", "scheduling-policy"]
    assert lines == [
        "physical-npu-id=7",  # always the physical id, also on 950
        "virtual-npu-id=0",
        "aicore-quota=20",
        "memory-quota=8192",
        "shm-id=Ascend-950-PR-0",
        "scheduling-policy=2",
    ]
    assert injection.envs["ASCEND_VISIBLE_DEVICES"] == "3"


def test_ref9_virtual_npu_id_lowest_free_per_physical_npu_and_idempotent(tmp_path: Path) -> None:
    world = build("ascend", tmp_path)

    def vnpu(uid: str, position: int) -> str:
        world.respond(world.grant(Family.SLICED, position, uid=uid))
        config: str = world.node.config(uid)
        return next(x for x in config.splitlines() if x.startswith("virtual-npu-id=")).split("=")[1]

    assert [vnpu("a", 0), vnpu("b", 0), vnpu("c", 1), vnpu("a", 0), vnpu("d", 0)] == ["0", "1", "0", "0", "2"]


# (family, CANN version, library subtree or None = refused)
LIBDIR_ROWS = [
    pytest.param("910B", "8.0.RC2", "ascend/cann-8-910b", id="ref9-libdir-910b-cann8"),
    pytest.param("910B", "9.0", "ascend/cann-9-910b", id="ref9-libdir-910b-cann9"),
    pytest.param("910B", None, "ascend/cann-8-910b", id="ref9-libdir-default-major-8"),
    pytest.param("910C", "9.0.0", "ascend/cann-9-910c", id="ref9-libdir-910c-cann9-lowercase"),
    pytest.param("910C", "8.1", "ascend/cann-8-910c", id="ref9-libdir-910c-cann8"),
    pytest.param("310P", "9.0", "ascend/cann-9-310p", id="ref9-libdir-310p-cann9"),
    pytest.param("950", "9.1", "ascend/cann-9-950", id="ref9-libdir-950-cann9"),
    pytest.param("310P", "8.0", None, id="ref9-slicing-310p-cann8-refused"),
    pytest.param("950", "8.0", None, id="ref9-slicing-950-cann8-refused"),
    pytest.param("910B", "10.0", None, id="ref9-slicing-major-numeric-10-refused"),
    pytest.param("910B", "7.0", None, id="ref9-slicing-910b-cann7-refused"),
    pytest.param("310B", "9.0", None, id="ref9-slicing-310b-refused"),
]


@pytest.mark.parametrize(("family", "runtime", "subtree"), LIBDIR_ROWS)
def test_ascend_logical_slicing_pairs(tmp_path: Path, family: str, runtime: str | None, subtree: str | None) -> None:
    node = asc_t.Node(tmp_path)
    if subtree is not None:
        node.stage(subtree)
    group = asc_t.with_indexes(node.group, 0, [4, 4, 0]).model_copy(
        update={"family": family, "runtime_version": runtime}
    )
    grant = node.grant(Family.SLICED, 0, group=group)
    if subtree is None:
        with pytest.raises(RefusedError, match="has no vcann-rt build"):
            ASCEND.respond(grant, node.ctx)
        assert dcmi_fixture.npu_value(node.root, 0, "share") == "0"  # refused before the flag
    else:
        injection = ASCEND.respond(grant, node.ctx)
        by_path = {m.container_path: m.host_path for m in injection.mounts}
        assert by_path[LIB_CONTAINER_DIR] == f"{node.ctx.lib_dir}/{subtree}"


# == reference rules §9 Hygon =======================================================================

HYGON_KEYS = ["PciBusId", "cu_mask", "cu_mask", "cu_count", "mem", "device_id", "vdev_id", "pipe_id", "enable"]


def hygon_slice(world: World, position: int, cores: int, uid: str, memory: int = 4096) -> vdev.Vdev:
    world.respond(world.grant(Family.SLICED, position, budget=SliceBudget(cores, memory), uid=uid))
    assert world.root is not None
    return vdev.parse(hy_t.vdev_file(world.root, uid).read_text())


def test_ref9_hygon_vdev_conf_exact_keys_and_order(tmp_path: Path) -> None:
    world = build("hygon", tmp_path)
    hygon_slice(world, 1, 33, "a", memory=5000)
    assert world.root is not None
    lines = hy_t.vdev_file(world.root, "a").read_text().splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == HYGON_KEYS
    values = [line.split(": ", 1)[1] for line in lines]
    assert values[0] == world.group.accelerators[1].topology.pci_bus_id
    assert all(re.fullmatch(r"0x[0-9a-f]{16}", v) for v in values[1:3])
    assert values[3] == str(math.ceil(Fraction(33 * 120, 100)))  # ceil(39.6) = 40 of 120 CUs
    assert int(values[1], 16) | int(values[2], 16) << 64 == (1 << 40) - 1  # the lowest bits
    assert values[4] == "5000 MiB"
    assert values[5] == str(world.group.accelerators[1].index)
    assert values[6:] == ["0", "0", "1"]


@pytest.mark.parametrize(
    ("percent", "cus"),
    [
        pytest.param(25, 120, id="ref9-hygon-cu-count-exact"),
        pytest.param(33, 120, id="ref9-hygon-cu-count-ceil"),
        pytest.param(1, 120, id="ref9-hygon-cu-count-ceil-small"),
        pytest.param(34, 64, id="ref9-hygon-cu-count-ceil-64"),
        pytest.param(100, 120, id="ref9-hygon-cu-count-whole"),
        pytest.param(150, 120, id="ref9-hygon-cu-count-capped"),
    ],
)
def test_hygon_cu_count(percent: int, cus: int) -> None:
    assert vdev.cu_count(percent, cus) == min(cus, math.ceil(Fraction(percent * cus, 100)))


def test_ref9_hygon_lowest_free_cu_bits(tmp_path: Path) -> None:
    world = build("hygon", tmp_path)
    assert world.root is not None
    bus = world.group.accelerators[0].topology.pci_bus_id
    held = ((1 << 10) - 1) | (((1 << 10) - 1) << 20)  # CUs 0-9 and 20-29
    hy_t.write_neighbour(world.root, "n", vdev.Vdev(bus, held, 20, 100, 0, 0, 0).render())
    mine = hygon_slice(world, 0, 15, "a")  # ceil(18) = 18 CUs
    assert mine.cu_mask == (((1 << 10) - 1) << 10) | (((1 << 8) - 1) << 30)  # 10-19, then 30-37
    assert mine.cu_mask & held == 0


def test_ref9_hygon_vdev_id_node_wide_pipe_id_per_card(tmp_path: Path) -> None:
    world = build("hygon", tmp_path)
    first = hygon_slice(world, 0, 10, "a")
    second = hygon_slice(world, 1, 10, "b")  # another card: pipe starts over, vdev_id does not
    third = hygon_slice(world, 0, 10, "c")
    assert [(s.vdev_id, s.pipe_id) for s in (first, second, third)] == [(0, 0), (1, 0), (2, 1)]


@pytest.mark.parametrize(
    ("what", "limit"),
    [
        pytest.param("vdev_id", vdev.MAX_VDEV_ID, id="ref9-hygon-vdev-id-below-200"),
        pytest.param("pipe_id", vdev.MAX_PIPE_ID, id="ref9-hygon-pipe-id-below-20"),
    ],
)
def test_hygon_id_limits(tmp_path: Path, what: str, limit: int) -> None:
    world = build("hygon", tmp_path)
    assert world.root is not None
    bus = world.group.accelerators[0].topology.pci_bus_id
    for i in range(limit - 1):  # empty one-id neighbours: on this card for pipes, elsewhere for vdev ids
        on = bus if what == "pipe_id" else f"0000:{0x80 + i // 20:02x}:00.0"
        hy_t.write_neighbour(
            world.root, f"n{i}", vdev.Vdev(on, 0, 0, 1, 0, i, i % limit if what == "pipe_id" else i % 20).render()
        )
    last = hygon_slice(world, 0, 1, "a")
    assert getattr(last, what) == limit - 1  # the highest id is still handed out
    with pytest.raises(RefusedError, match=f"every {what} \\(0-{limit - 1}\\)"):
        world.respond(world.grant(Family.SLICED, 0, budget=SliceBudget(1, 1), uid="b"))


def test_ref9_hygon_corrupt_neighbour_fails_closed(tmp_path: Path) -> None:
    world = build("hygon", tmp_path)
    assert world.root is not None
    hy_t.write_neighbour(world.root, "n", "PciBusId: 0000:01:00.0\ncu_mask: garbage\n")
    with pytest.raises(RefusedError, match="cannot be read"):
        world.respond(world.grant(Family.SLICED, 2))
    assert not hy_t.vdev_file(world.root, "uid-1").exists()


def test_ref9_hygon_more_cus_than_the_mask_addresses_is_refused(tmp_path: Path) -> None:
    world = build("hygon", tmp_path)
    assert world.root is not None
    for props in (world.root / KFD_NODES).glob("*/properties"):  # 480 SIMDs / 4 per CU → 160 CUs
        props.write_text(props.read_text().replace("simd_count 480", "simd_count 640"))
    with pytest.raises(RefusedError, match="two 64-bit cu_mask words"):
        world.respond(world.grant(Family.SLICED, 0))
    assert not hy_t.vdev_file(world.root, "uid-1").exists()
