"""End to end, more vendors and cross-cutting rules: the Device Manager's plugins driven as a kubelet
drives them (tests/kubelet/standin.py over real gRPC unix sockets, tests/kube/apiserver.py over HTTP
on loopback for the official client), on copies of the fixture nodes (issue 10).

Covered here, each through register -> admit (hint, Allocate) -> kubelet restart -> re-register ->
admit again where it makes sense:

* partitioned on T-Head (thead-ppu, PPUs 6 and 7 in partitioning mode in the HGML stand-in's data)
  and on Hygon (hygon-k100-mig, the libhydmi_mig stand-in): no NUMA topology on the ``.partitioned``
  pool, exactly the instance injected (T-Head: its device nodes; Hygon: its registry file), the sshd
  sidecar sees that instance, a Pod deleted from the API server has its instance destroyed;
* NVIDIA's CDI ``auto`` strategy (reference rules §11) on a copy of h100-sxm-8x carrying a
  containerd 2.x configuration and a generated CDI specification;
* Cambricon sMLU and MetaX sGPU slices, and their reclaim once the Pod is gone;
* container identification of a batch created in one second (supplement §1.8: the kubelet's
  pod-resources answer wins over creation timestamps);
* an API server that cannot be reached during Allocate (``UNAVAILABLE``, nothing charged).

The vendors' boundaries are the compiled stand-in libraries the fixtures carry (they keep their state
in the copy's ``<lib>.fixture``) and device nodes created in the copy (character devices where the
responder checks minor numbers, regular files where it checks existence only).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as dp

from tests.conftest import copy_host, host
from tests.integration.test_kubelet_e2e import (
    GPU,
    NODE,
    NV_ENV,
    NVIDIA_RESOURCES,
    SHARED,
    SLICED,
    Node,
    accelerator,
    accelerators,
    detected,
    serve_node,  # noqa: F401 -- the fixture, found by pytest under this name
)
from tests.kube.apiserver import pod_manifest
from tests.kubelet.standin import AdmissionError
from tests.stubs.keyvalue import edit_kv_fixture
from tests.unit.allocator_cdi.specs import nvidia_yaml
from tests.unit.respond.test_amd import add_dev_nodes

Containers = list[tuple[str, Mapping[str, str]]]
RECLAIM_TIMEOUT = 15.0  # the reconcile runs every 0.2 s here; a loaded machine is slower


@pytest.fixture
def served(serve_node: Callable[[Path, str], Node]) -> Callable[[Path, str], Node]:  # noqa: F811
    """test_kubelet_e2e's ``serve_node``: the Device Manager in-process for a node, stopped at the end."""
    return serve_node


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = RECLAIM_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def kv(path: Path, key: str) -> str | None:
    """A ``key=value`` line of a stand-in's data file (None when absent)."""
    for line in path.read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    return None


def mkchar(root: Path, path: str, minor: int, major: int = 240) -> None:
    disk = root / path.lstrip("/")
    disk.parent.mkdir(parents=True, exist_ok=True)
    if disk.exists():
        disk.unlink()
    os.mknod(disk, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def device_paths(resp: dp.ContainerAllocateResponse) -> list[str]:
    return [d.host_path for d in resp.devices]


def healthy_count(node: Node, resource: str) -> int:
    return len(node.kubelet.healthy(resource))


def room(node: Node, resource: str) -> int:
    """What the kubelet can still hand out of a ``.partitioned`` pool: its healthy tokens less those
    live containers hold -- the plugin reports the node's remaining room in slices this way."""
    return len(node.kubelet.allocatable(resource))


def slices_of(accelerator: Mapping[str, Any], profile: str) -> int:
    """A partition profile's compute-slice count, as detection reports it."""
    sliced = accelerator["status"]["physicalSliced"]
    (found,) = [p for p in sliced["profiles"] if p["name"] == profile]
    return int(found["computeSlices"])


# --- partitioned: T-Head (thead-ppu) -----------------------------------------------------------------

PPU = "alibabacloud.com/ppu"
PPU_PART = f"{PPU}.partitioned"
PPU_VIS = "device.gpustack.ai/thead.visibility"
HGML_DATA = "usr/local/PPU_SDK/lib/libhgml.so.fixture"


def thead_node(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of thead-ppu with the nodes a T-Head container is given: the control nodes, every card's
    node carrying its detected minor, and per partitioning card the driver's capability tree (the
    ``access`` files naming each GPU / compute instance's minor and those capability nodes)."""
    root = copy_host("thead-ppu", tmp_path)  # HGML writes created instances into its data file
    (group,) = detected(root, "thead")
    for control in ("/dev/alixpu", "/dev/alixpu_ctl"):
        mkchar(root, control, 0, major=241)
    for acc in group["accelerators"]:
        mkchar(root, f"/dev/alixpu_ppu{acc['index']}", acc["physicalIndexes"][0])
        if not acc["status"].get("physicalSliced"):
            continue
        for gi in range(1, 9):
            base = root / f"proc/driver/alixpu/capabilities/ppu{acc['index']}/mig/gi{gi}"
            (base / "ci0").mkdir(parents=True, exist_ok=True)
            gi_minor = 1000 + 100 * acc["index"] + 2 * gi
            (base / "access").write_text(f"DeviceFileMinor: {gi_minor}\nDeviceFileMode: 292\n")
            (base / "ci0/access").write_text(f"DeviceFileMinor: {gi_minor + 1}\nDeviceFileMode: 292\n")
            mkchar(root, f"/dev/alixpu-caps/alixpu-cap{gi_minor}", gi_minor, major=242)
            mkchar(root, f"/dev/alixpu-caps/alixpu-cap{gi_minor + 1}", gi_minor + 1, major=242)
    return root, group


def live_gis(root: Path, ordinal: int) -> list[str]:
    """The GPU instances HGML's stand-in holds on PPU ``ordinal`` (``device.<i>.gi.<id>`` non-empty)."""
    prefix = f"device.{ordinal}.gi."
    return [
        line.split("=", 1)[0]
        for line in (root / HGML_DATA).read_text().splitlines()
        if line.startswith(prefix) and ".ci." not in line and line.split("=", 1)[1]
    ]


def test_thead_partition_is_exactly_the_instance_and_is_destroyed_with_its_pod(
    served: Callable[[Path, str], Node], tmp_path: Path
) -> None:
    root, group = thead_node(tmp_path)
    parts = [a for a in group["accelerators"] if a["status"].get("physicalSliced")]
    assert parts, "the fixture has no PPU in partitioning mode"
    ordinals = {a["index"] for a in parts}
    node = served(root, "thead")
    resources = [PPU, f"{PPU}.shared", f"{PPU}.sliced", PPU_PART, PPU_VIS]
    node.wait_registered(resources)
    tokens = sum(a["status"]["physicalSliced"]["count"] for a in parts)
    node.kubelet.wait_capacity(PPU_PART, tokens)
    assert all(not d.topology.nodes for d in node.kubelet.devices(PPU_PART).values())  # no NUMA hint
    assert not node.kubelet.options(PPU_PART).get_preferred_allocation_available  # type: ignore[union-attr]
    # a partitioning card serves no whole-card family (the whole-card pool's first list has arrived)
    node.kubelet.wait_for(PPU, lambda d: len(d) > 0)
    assert set(accelerators(node.kubelet.healthy(PPU))).isdisjoint(a["id"] for a in parts)

    profile = {PPU_PART: "1", f"{PPU_PART}.mig-2g.24gb": "1"}
    uid, _ = node.admit([("main", profile), ("sshd", {PPU_VIS: "1"})])
    created = {o: live_gis(root, o) for o in ordinals}
    (card,) = [o for o, gis in created.items() if gis]  # one instance, on one card
    (gi_key,) = created[card]
    gi = int(gi_key.rsplit(".", 1)[1])
    main = node.kubelet.results(uid)["main"][PPU_PART]
    nodes = device_paths(main)
    gi_minor = int((root / f"proc/driver/alixpu/capabilities/ppu{card}/mig/gi{gi}/access").read_text().split()[1])
    # the control nodes, the parent card's node and the instance's two capability nodes: nothing else
    assert sorted(nodes) == sorted(
        [
            "/dev/alixpu",
            "/dev/alixpu_ctl",
            f"/dev/alixpu_ppu{card}",
            f"/dev/alixpu-caps/alixpu-cap{gi_minor}",
            f"/dev/alixpu-caps/alixpu-cap{gi_minor + 1}",
        ]
    )
    assert not any(p.startswith("/dev/alixpu_ppu") and p != f"/dev/alixpu_ppu{card}" for p in nodes)
    assert sorted(device_paths(node.kubelet.results(uid)["sshd"][PPU_VIS])) == sorted(nodes)  # the instance
    want = tokens - slices_of(parts[0], "2g.24gb")
    node.kubelet.wait_for(PPU_PART, lambda d: room(node, PPU_PART) == want)

    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    node.kubelet.wait_for(PPU_PART, lambda d: len(d) == tokens, timeout=15)
    # the Pod is deleted from the API server: the next reconcile destroys its instance
    node.gone(uid)
    wait_until(lambda: not live_gis(root, card), f"the instance {gi_key} on PPU {card} to be destroyed")
    node.kubelet.wait_for(PPU_PART, lambda d: room(node, PPU_PART) == tokens)
    uid2, _ = node.admit([("main", profile)])
    assert sum(len(live_gis(root, o)) for o in ordinals) == 1
    nodes2 = device_paths(node.kubelet.results(uid2)["main"][PPU_PART])
    assert any(p.startswith("/dev/alixpu-caps/") for p in nodes2)


# --- partitioned: Hygon (hygon-k100-mig) -----------------------------------------------------------------

DCU = "hygon.com/dcu"
DCU_PART = f"{DCU}.partitioned"
DCU_VIS = "device.gpustack.ai/hygon.visibility"
DMI_DATA = "opt/hyhal/lib/libhydmi_mig.so.1.fixture"
REGISTRY = "/etc/dmi_mig_config"


def hygon_node(tmp_path: Path) -> Path:
    root = copy_host("hygon-k100-mig", tmp_path)
    add_dev_nodes(root)  # /dev/kfd and the DRM nodes sysfs lists
    (root / "dev/mkfd").write_text("")
    (root / "etc/dmi_mig_config/ci").mkdir()
    # the stand-in writes the driver's registry file where it is told (the copy's registry)
    edit_kv_fixture(root / DMI_DATA, registry=root / REGISTRY.lstrip("/"))
    return root


def registry_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / REGISTRY.lstrip("/") / "ci").iterdir())


def test_hygon_partition_is_the_registry_file_and_is_destroyed_with_its_pod(
    served: Callable[[Path, str], Node], tmp_path: Path
) -> None:
    root = hygon_node(tmp_path)
    (group,) = detected(root, "hygon")
    assert all(a["status"].get("physicalSliced") for a in group["accelerators"])
    node = served(root, "hygon")
    resources = [DCU_PART, DCU_VIS]
    node.wait_registered(resources)
    tokens = sum(a["status"]["physicalSliced"]["count"] for a in group["accelerators"])
    node.kubelet.wait_capacity(DCU_PART, tokens)
    assert node.kubelet.resources() == sorted(resources)  # a partitioned node serves only partitions
    assert all(not d.topology.nodes for d in node.kubelet.devices(DCU_PART).values())
    assert not node.kubelet.options(DCU_PART).get_preferred_allocation_available  # type: ignore[union-attr]

    profile = {DCU_PART: "1", f"{DCU_PART}.mig-2g.15gb": "1"}
    uid, _ = node.admit([("main", profile), ("sshd", {DCU_VIS: "1"})])
    (conf,) = registry_files(root)
    registry = f"{REGISTRY}/ci/{conf}"
    main = node.kubelet.results(uid)["main"][DCU_PART]
    mounts = {m.container_path: m for m in main.mounts}
    assert mounts[registry].host_path == registry and mounts[registry].read_only
    assert [m for m in mounts if m.startswith(REGISTRY)] == [registry]  # exactly this instance's file
    instance = dict(main.envs)["DMI_MIG_VISIBLE_DEVICE"]
    assert instance.startswith("MIG-") and instance[4:] in (root / registry.lstrip("/")).read_text()
    sshd = node.kubelet.results(uid)["sshd"][DCU_VIS]
    assert dict(sshd.envs)["DMI_MIG_VISIBLE_DEVICE"] == instance
    assert registry in {m.container_path for m in sshd.mounts}
    assert sorted(device_paths(sshd)) == sorted(device_paths(main))
    want = tokens - slices_of(group["accelerators"][0], "2g.15gb")
    node.kubelet.wait_for(DCU_PART, lambda d: room(node, DCU_PART) == want)

    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    node.kubelet.wait_for(DCU_PART, lambda d: len(d) == tokens, timeout=15)
    node.gone(uid)
    wait_until(lambda: conf not in registry_files(root), f"the registry file {registry} to be removed")
    node.kubelet.wait_for(DCU_PART, lambda d: room(node, DCU_PART) == tokens)
    uid2, _ = node.admit([("main", profile)])
    (conf2,) = registry_files(root)
    second = dict(node.kubelet.envs(uid2, "main"))["DMI_MIG_VISIBLE_DEVICE"]
    # a fresh instance (the stand-in, like the driver, reuses the freed ids, so its uuid may repeat)
    assert second.startswith("MIG-") and second[4:] in (root / REGISTRY.lstrip("/") / "ci" / conf2).read_text()
    assert f"{REGISTRY}/ci/{conf2}" in {m.container_path for m in node.kubelet.results(uid2)["main"][DCU_PART].mounts}


# --- NVIDIA CDI auto (reference rules §11) ---------------------------------------------------------------

CDI_ANNOTATION = "cdi.k8s.io/gpustack-nvidia"


def cdi_node(tmp_path: Path) -> tuple[Path, list[str]]:
    """h100-sxm-8x plus what a containerd 2.x node with the NVIDIA CDI generator carries."""
    root = copy_host("h100-sxm-8x", tmp_path)
    (group,) = detected(root, "nvidia")
    uuids = [a["id"] for a in sorted(group["accelerators"], key=lambda a: a["index"])]
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text('version = 3\n\n[plugins."io.containerd.cri.v1.runtime"]\n')
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text(nvidia_yaml(*uuids))
    return root, uuids


def test_cdi_auto_annotates_an_exclusive_pod_and_falls_back_per_container(
    served: Callable[[Path, str], Node], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, uuids = cdi_node(tmp_path)
    monkeypatch.setenv("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY", "auto")
    node = served(root, "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(GPU, 8)

    def cdi(uid: str) -> tuple[dict[str, str], dict[str, str]]:
        resp = node.kubelet.results(uid)["main"][GPU]
        return dict(resp.annotations), dict(resp.envs)

    uid, grants = node.admit([("main", {GPU: "1"})])
    (card,) = accelerators(grants["main"][GPU].device_ids)
    annotations, envs = cdi(uid)
    assert annotations == {CDI_ANNOTATION: f"nvidia.com/gpu={card}"}
    assert NV_ENV not in envs  # exactly one channel
    # a Pod naming a runtime class: its handler owns injection, the variable is used
    uid_rc, grants_rc = node.admit([("main", {GPU: "1"})], runtime_class="nvidia")
    annotations, envs = cdi(uid_rc)
    assert CDI_ANNOTATION not in annotations
    assert envs[NV_ENV] == accelerator(grants_rc["main"][GPU].device_ids[0])

    node.kubelet.restart()
    node.wait_registered(NVIDIA_RESOURCES, count=2)
    node.kubelet.wait_for(GPU, lambda d: len(d) == 8, timeout=15)
    uid2, grants2 = node.admit([("main", {GPU: "2"})])
    cards2 = accelerators(grants2["main"][GPU].device_ids)
    annotations, envs = cdi(uid2)
    assert sorted(annotations[CDI_ANNOTATION].split(",")) == sorted(f"nvidia.com/gpu={c}" for c in cards2)
    assert NV_ENV not in envs
    # the specification no longer names one free card: a grant including it takes the variable
    held = {card, *accelerators(grants_rc["main"][GPU].device_ids), *cards2}
    free = [u for u in uuids if u not in held]
    (root / "etc/cdi/nvidia.yaml").write_text(nvidia_yaml(*[u for u in uuids if u != free[0]]))
    uid3, grants3 = node.admit([("main", {GPU: str(len(free))})])
    annotations, envs = cdi(uid3)
    assert sorted(accelerators(grants3["main"][GPU].device_ids)) == sorted(free)
    assert CDI_ANNOTATION not in annotations
    assert sorted(envs[NV_ENV].split(",")) == sorted(free)


# --- sliced: Cambricon sMLU (mlu370-x8) and MetaX sGPU (metax-c500) ---------------------------------------

MLU = "cambricon.com/mlu"
CNDEV_DATA = "usr/local/neuware/lib64/libcndev.so.fixture"
METAX = "metax-tech.com/gpu"


def cambricon_node(tmp_path: Path) -> Path:
    root = copy_host("mlu370-x8", tmp_path)  # cnDev records sMLU mode, profiles and instances in its data
    dev = root / "dev"
    (dev / "cambricon-caps").mkdir(parents=True)
    for i in range(8):
        (dev / f"cambricon_dev{i}").write_text("")
        (dev / f"cambricon_ipcm{i}").write_text("")
        for mi in range(1, 9):
            (dev / "cambricon-caps" / f"cap_dev{i}_mi{mi}").write_text("")
    (dev / "cambricon_ctl").write_text("")
    return root


def smlu_instance(resp: dp.ContainerAllocateResponse) -> tuple[int, int, str]:
    """(cnDev index, instance id, node) from a sliced response's ``VIRTUAL_DEVICES``."""
    (entry,) = dict(resp.envs)["VIRTUAL_DEVICES"].split(";")
    card, ipcm, instance = entry.split(",")
    found = re.fullmatch(r"/dev/cambricon-caps/cap_dev(\d+)_mi(\d+)", instance)
    assert found, instance
    index, mi = int(found[1]), int(found[2])
    assert (card, ipcm) == (f"/dev/cambricon_dev{index}", f"/dev/cambricon_ipcm{index}")
    return index, mi, instance


def test_cambricon_smlu_slice_is_injected_and_destroyed_once_its_pod_is_gone(
    served: Callable[[Path, str], Node], tmp_path: Path
) -> None:
    root = cambricon_node(tmp_path)
    (group,) = detected(root, "cambricon")
    node = served(root, "cambricon")
    resources = [MLU, f"{MLU}.shared", f"{MLU}.sliced", "device.gpustack.ai/cambricon.visibility"]
    node.wait_registered(resources)
    node.kubelet.wait_capacity(MLU, len(group["accelerators"]))
    data = root / CNDEV_DATA
    containers: Containers = [
        ("main", {f"{MLU}.sliced": "1", f"{MLU}.sliced.cores-percentage": "30", f"{MLU}.sliced.memory-mib": "12288"})
    ]

    def admit_slice() -> tuple[str, int, int]:
        uid, grants = node.admit(containers)
        (acc,) = accelerators(grants["main"][f"{MLU}.sliced"].device_ids)
        resp = node.kubelet.results(uid)["main"][f"{MLU}.sliced"]
        index, mi, instance = smlu_instance(resp)
        physical = {a["id"]: a["physicalIndexes"][0] for a in group["accelerators"]}
        assert index == physical[acc]  # the granted card's driver index
        assert instance in device_paths(resp) and f"/dev/cambricon_dev{index}" in device_paths(resp)
        assert "CAMBRICON_VISIBLE_DEVICES" not in dict(resp.envs)  # it would hand a runtime the whole card
        assert kv(data, f"device.{index}.smlu") == "1"
        assert kv(data, f"device.{index}.smlu.{mi}")  # the instance exists in cnDev
        return uid, index, mi

    uid, index, mi = admit_slice()
    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    uid2, index2, mi2 = admit_slice()
    assert (index2, mi2) != (index, mi)
    node.gone(uid)
    wait_until(lambda: not kv(data, f"device.{index}.smlu.{mi}"), f"sMLU instance {mi} on MLU {index} to go")
    assert kv(data, f"device.{index2}.smlu.{mi2}")  # the other Pod's instance is untouched
    node.gone(uid2)
    wait_until(lambda: not kv(data, f"device.{index2}.smlu.{mi2}"), f"sMLU instance {mi2} on MLU {index2} to go")


def metax_node(tmp_path: Path) -> Path:
    root = copy_host("metax-c500", tmp_path)  # the sgpu registries are sysfs files the responder writes
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/mxcd").write_text("")
    for n in range(1, 9):
        (root / f"dev/dri/card{n}").write_text("")
        (root / f"dev/dri/renderD{127 + n}").write_text("")
    return root


def test_metax_sgpu_slice_is_injected_and_destroyed_once_its_pod_is_gone(
    served: Callable[[Path, str], Node], tmp_path: Path
) -> None:
    root = metax_node(tmp_path)
    (group,) = detected(root, "metax")
    node = served(root, "metax")
    resources = [METAX, f"{METAX}.shared", f"{METAX}.sliced", "device.gpustack.ai/metax.visibility"]
    node.wait_registered(resources)
    node.kubelet.wait_capacity(METAX, len(group["accelerators"]))
    bus = {a["id"]: a["topology"]["pciBusId"] for a in group["accelerators"]}
    vram = group["memory"] // 4
    containers: Containers = [
        (
            "main",
            {
                f"{METAX}.sliced": "1",
                f"{METAX}.sliced.cores-percentage": "25",
                f"{METAX}.sliced.memory-mib": str(vram),
            },
        )
    ]

    def admit_slice() -> tuple[str, Path, int]:
        uid, grants = node.admit(containers)
        (acc,) = accelerators(grants["main"][f"{METAX}.sliced"].device_ids)
        env = node.kubelet.envs(uid, "main")
        found = re.fullmatch(
            r"sgpu=([0-9a-f:.]+)#(\d+);compute=25;vram=(\d+);alias=gpustack-(.+)-main", env["METAX_SGPUS"]
        )
        assert found, env["METAX_SGPUS"]
        assert found[1] == bus[acc] and int(found[3]) == vram and found[4] == uid
        registry = root / "sys/bus/pci/devices" / bus[acc] / "sgpu"
        index = int(found[2])
        assert f"index={index} compute=25 vram={vram} alias=gpustack-{uid}-main" in (registry / "create").read_text()
        (registry / f"sgpu{index}").mkdir()  # the driver lists the subdevice it made
        return uid, registry, index

    uid, registry, index = admit_slice()
    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    uid2, registry2, index2 = admit_slice()
    assert (registry2, index2) != (registry, index)
    (registry / "destroy").write_text("")
    node.gone(uid)
    wait_until(lambda: (registry / "destroy").read_text() == f"{index}\n", f"sgpu{index} to be destroyed")
    # the working directory goes right after the destroy, on the same release (the watch's event)
    gone = node.write_root / "var/lib/gpustack/operator/pods" / uid
    wait_until(lambda: not gone.exists(), f"{gone} to be removed")
    assert (node.write_root / "var/lib/gpustack/operator/pods" / uid2).exists()  # the live Pod keeps its record


# --- identification: a batch of identical Pods (supplement §1.8) -------------------------------------------


def test_a_batch_created_in_one_second_is_identified_by_the_kubelet_not_by_age(
    served: Callable[[Path, str], Node],
) -> None:
    """Two sliced Pods alike but for their memory, created in the same second, admitted newest first:
    by creation time and name the older one would be chosen, but the kubelet names the Pod it admits,
    so each container gets its own memory limit and its own preload file."""
    node = served(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)

    def batch(generation: int) -> None:
        now = float(int(time.time()))
        pods = {}
        for name, mib in (("a", "10240"), ("b", "20480")):
            manifest = pod_manifest(
                f"batch{generation}-{name}",
                node_name=NODE,
                uid=f"0000000{generation}-0000-0000-0000-00000000000{name}",  # "a" sorts first too
                containers=[("main", {SLICED: "1", f"{SLICED}.memory-mib": mib})],
            )
            pods[name] = (node.api.add_pod(manifest, created=now), mib)
        assert pods["a"][0]["metadata"]["creationTimestamp"] == pods["b"][0]["metadata"]["creationTimestamp"]
        for name in ("b", "a"):  # the opposite order of creation
            pod, mib = pods[name]
            uid = pod["metadata"]["uid"]
            node.kubelet.admit(pod)
            env = node.kubelet.envs(uid, "main")
            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{mib}m", name
            preload = {m.container_path: m for m in node.kubelet.results(uid)["main"][SLICED].mounts}
            assert f"/pods/{uid}/" in preload["/etc/ld.so.preload"].host_path

    batch(1)
    node.kubelet.restart()
    node.wait_registered(NVIDIA_RESOURCES, count=2)
    batch(2)


# --- the API server unreachable during Allocate -----------------------------------------------------------


def test_an_unreachable_api_server_refuses_unavailable_and_charges_nothing(
    served: Callable[[Path, str], Node],
) -> None:
    node = served(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    for resource in NVIDIA_RESOURCES:  # every pool's first list (each its own stream) has arrived
        node.kubelet.wait_for(resource, lambda d: len(d) > 0)
    before = {r: sorted(node.kubelet.healthy(r)) for r in NVIDIA_RESOURCES}
    node.api.fail(503, count=-1)  # every request, until healed
    with pytest.raises(AdmissionError) as err:
        node.admit([("main", {GPU: "1"})], name="while-down")
    assert err.value.code == grpc.StatusCode.UNAVAILABLE
    # the Pod reached the watch-backed view before the outage; the grant cannot be recorded on it
    # (issue 18: the durable annotation is written before Allocate answers), so it is given back
    assert "could not be recorded on the Pod" in err.value.details and "503" in err.value.details
    (failed,) = [c for c in node.kubelet.calls if c.error]
    assert failed.method == "Allocate" and failed.resource == GPU
    node.api.heal()
    time.sleep(1.0)  # several reconcile periods: a charge would show on the stream by now
    assert {r: sorted(node.kubelet.healthy(r)) for r in NVIDIA_RESOURCES} == before
    assert not (node.write_root / "var/lib/gpustack/operator/pods").exists() or not list(
        (node.write_root / "var/lib/gpustack/operator/pods").iterdir()
    )
    # the rejected Pod is Failed for good (as a real kubelet leaves it); its controller's next Pod is
    # admitted and may take every card: nothing was held back
    uid, grants = node.admit([("main", {GPU: "8"})], name="after")
    assert sorted(accelerators(grants["main"][GPU].device_ids)) == sorted(accelerators(before[GPU]))
    assert sorted(node.kubelet.envs(uid, "main")[NV_ENV].split(",")) == sorted(accelerators(before[GPU]))
