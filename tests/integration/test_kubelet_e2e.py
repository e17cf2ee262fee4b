"""End to end: the Device Manager's device plugins against the kubelet stand-in (real gRPC on unix
sockets) and the API-server stand-in (real HTTP, the official client), on fixture nodes.

Each family goes the kubelet's whole way -- register, ListAndWatch, admission (the hint, then
Allocate), a kubelet restart that wipes every plugin socket, re-registration, admission again --
and the assertions are on what a container would be given (the ``ContainerAllocateResponse`` the
kubelet recorded) and what the kubelet is told about health (the ``ListAndWatch`` stream).

The product runs in-process (``deviceplugin.serve.serve`` on a thread, its reconcile period cut to a
fraction of a second so a Pod's removal is noticed quickly) except in
:func:`test_cli_serve_subprocess`, which runs ``gpustack-operator device-manager serve`` as a user
would and ends it with SIGTERM. Fixture nodes whose stand-in library keeps state (the a100-mig NVML
partitions, Ascend's container-share flag) are copied into the test's own directory first.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpustack_operator import api as gapi
from gpustack_operator.deviceplugin import serve as dm_serve
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as dp

from tests.conftest import BIN, copy_host, host
from tests.kube.apiserver import APIServerStandIn, pod_manifest
from tests.kubelet.standin import AdmissionError, Grant, KubeletStandIn

NODE = "node-a"
# /readyz and /livez of every serve started here: loopback, any free port (never 0.0.0.0:32443)
LOOPBACK = dm_serve.ManagerOptions(secure_port=0, bind_address="127.0.0.1")
LOOPBACK_FLAGS = ("--secure-port", "0", "--bind-address", "127.0.0.1")
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
SLICED = "nvidia.com/gpu.sliced"
PARTITIONED = "nvidia.com/gpu.partitioned"
NV_VIS = "device.gpustack.ai/nvidia.visibility"
NV_ENV = "NVIDIA_VISIBLE_DEVICES"
REGISTER_TIMEOUT = 30.0  # the plugins look at their sockets every second; a loaded machine is slower


def accelerator(token: str) -> str:
    """``<group>:<accelerator>:<index>`` -> the accelerator id (it may itself hold ``:``)."""
    return token.split(":", 1)[1].rsplit(":", 1)[0]


def accelerators(tokens: list[str]) -> list[str]:
    return [accelerator(t) for t in tokens]


def detected(root: Path, manufacturer: str) -> list[dict[str, Any]]:
    """The groups the detect pass finds on the node (what the allocator is built from)."""
    proc = subprocess.run(
        [
            str(BIN / "gpustack-operator"),
            "dm",
            "detect",
            "--detect-root",
            str(root),
            "-o",
            "json",
            "--manufacturer",
            manufacturer,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")} | {"NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    groups: list[dict[str, Any]] = json.loads(proc.stdout)["groups"]
    return groups


@dataclass
class Node:
    """One fixture node served: the API server, the kubelet and the Device Manager's plugins."""

    root: Path
    manufacturer: str
    api: APIServerStandIn
    kubelet: KubeletStandIn
    write_root: Path
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    outcome: list[BaseException | int] = field(default_factory=list)
    counter: int = 0

    def pod(self, containers: list[tuple[str, Mapping[str, str]]], **kw: Any) -> dict[str, Any]:
        self.counter += 1
        name = kw.pop("name", f"pod-{self.counter}")
        return self.api.add_pod(pod_manifest(name, node_name=NODE, containers=containers, **kw))

    def admit(
        self, containers: list[tuple[str, Mapping[str, str]]], **kw: Any
    ) -> tuple[str, dict[str, dict[str, Grant]]]:
        force = kw.pop("force", None)
        pod = self.pod(containers, **kw)
        return pod["metadata"]["uid"], self.kubelet.admit(pod, force=force)

    def gone(self, uid: str) -> None:
        """The Pod is deleted: gone from the API server and from the kubelet."""
        pod = self.api.by_uid(uid)
        assert pod is not None
        self.api.delete(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.kubelet.remove(uid)

    def wait_registered(self, resources: list[str], count: int = 1) -> None:
        deadline = time.monotonic() + REGISTER_TIMEOUT
        for resource in resources:
            if self.outcome:
                raise AssertionError(f"the device manager ended early: {self.outcome[0]!r}")
            self.kubelet.wait_registered(resource, count, timeout=max(0.1, deadline - time.monotonic()))
        for resource in resources:  # and its first device list has arrived on the stream
            self.kubelet.wait_for(resource, lambda d: len(d) > 0, timeout=max(0.1, deadline - time.monotonic()))


@contextmanager
def short_dir() -> Iterator[Path]:
    # unix socket paths must fit sockaddr_un (108 bytes); pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="e2e-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stage_hami_core(write_root: Path, majors: tuple[int, ...] = (11, 12, 13)) -> None:
    """What the device-manager's init container stages: the HAMi-core build per CUDA major."""
    for major in majors:
        lib = write_root / f"var/lib/gpustack/operator/lib/nvidia/cuda-{major}"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / "libvgpu.so").write_bytes(b"\x7fELF stand-in")


@pytest.fixture
def serve_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path, str], Node]]:
    """Start the Device Manager in-process for a fixture node; every node is stopped at the end."""
    monkeypatch.setattr(dm_serve, "RECONCILE_PERIOD", 0.2)
    for key in [k for k in os.environ if k.startswith("GPUSTACK_")]:
        monkeypatch.delenv(key)
    started: list[Node] = []
    with short_dir() as base:

        def start(root: Path, manufacturer: str) -> Node:
            n = len(started)
            apiserver = APIServerStandIn().start()
            kubelet = KubeletStandIn(
                base / f"dp{n}", base / f"pr{n}" / "kubelet.sock", node_name=NODE, pod_status=apiserver.pod_status
            ).start()
            write_root = base / f"host{n}"
            write_root.mkdir()
            stage_hami_core(write_root)
            node = Node(root, manufacturer, apiserver, kubelet, write_root)
            started.append(node)
            req = gapi.make_request(str(root), [manufacturer])
            opts = dm_serve.ServeOptions(
                node_name=NODE,
                kube_socket=str(kubelet.socket),
                pod_resources_socket=str(kubelet.pod_resources_socket),
                kube_api_server=apiserver.url,
                host_write_root=str(write_root),
            )

            def run() -> None:
                try:
                    node.outcome.append(dm_serve.serve(req, opts, stop=node.stop, manager=LOOPBACK))  # type: ignore[union-attr]
                except BaseException as exc:
                    node.outcome.append(exc)

            node.thread = threading.Thread(target=run, name=f"dm-{manufacturer}", daemon=True)
            node.thread.start()
            return node

        yield start
        for node in started:
            node.stop.set()
            if node.thread is not None:
                node.thread.join(30)
            node.kubelet.close()
            node.api.close()
        for node in started:
            assert node.outcome == [0], f"the device manager did not stop cleanly: {node.outcome}"
            left = sorted(p.name for p in node.kubelet.plugin_dir.iterdir() if p.name.startswith("gpustack-"))
            assert left == [], f"plugin sockets left behind: {left}"


NVIDIA_RESOURCES = [GPU, SHARED, SLICED, NV_VIS]


def healthy_on(node: Node, resource: str, acc: str) -> list[bool]:
    return [d.health == "Healthy" for t, d in node.kubelet.devices(resource).items() if accelerator(t) == acc]


# --- NVIDIA, whole-card families (h100-sxm-8x) --------------------------------------------------------


def test_nvidia_registers_every_family_with_its_token_capacity(serve_node: Callable[[Path, str], Node]) -> None:
    root = host("h100-sxm-8x")
    (group,) = detected(root, "nvidia")
    node = serve_node(root, "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    cards = len(group["accelerators"])
    slices = sum(a["status"]["logicalSliced"]["count"] for a in group["accelerators"])
    assert cards == 8
    expected = {GPU: cards, SHARED: cards * 10, SLICED: slices, NV_VIS: cards * 512}
    for resource, count in expected.items():
        node.kubelet.wait_capacity(resource, count, timeout=10)
    assert node.kubelet.resources() == sorted(NVIDIA_RESOURCES)  # no partitioned pool on a node without MIG
    hints = {r: node.kubelet.options(r).get_preferred_allocation_available for r in NVIDIA_RESOURCES}  # type: ignore[union-attr]
    assert hints == {GPU: True, SHARED: True, SLICED: True, NV_VIS: False}
    # every token names one detected accelerator; exclusive tokens carry its NUMA node
    ids = {a["id"] for a in group["accelerators"]}
    assert set(accelerators(node.kubelet.healthy(GPU))) == ids
    numa = {a["id"]: int(a["topology"]["numaAffinity"]) for a in group["accelerators"]}
    for token, dev in node.kubelet.devices(GPU).items():
        assert [n.ID for n in dev.topology.nodes] == [numa[accelerator(token)]]


def test_exclusive_grant_names_the_uuid_and_takes_the_card_from_other_modes(
    serve_node: Callable[[Path, str], Node],
) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    uid, grants = node.admit([("main", {GPU: "1"})], name="ex")
    (card,) = accelerators(grants["main"][GPU].device_ids)
    assert node.kubelet.envs(uid, "main") == {NV_ENV: card}
    assert [c.method for c in node.kubelet.calls if c.resource == GPU] == ["GetPreferredAllocation", "Allocate"]
    # the card's shared and sliced tokens go Unhealthy on the stream; every other card's stay Healthy
    node.kubelet.wait_for(SHARED, lambda d: not any(healthy_on(node, SHARED, card)))
    node.kubelet.wait_for(SLICED, lambda d: not any(healthy_on(node, SLICED, card)))
    assert node.kubelet.capacity(SHARED) == 70
    assert all(healthy_on(node, GPU, card)) and all(healthy_on(node, NV_VIS, card))
    # the Pod is deleted from the API server: the allocator's reconcile notices, the tokens come back
    node.gone(uid)
    node.kubelet.wait_capacity(SHARED, 80, timeout=10)
    # each pool is its own ListAndWatch stream: the sliced pool's update arrives on its own
    node.kubelet.wait_for(SLICED, lambda d: all(healthy_on(node, SLICED, card)), timeout=10)


def test_shared_grant_of_two_is_two_distinct_accelerators(serve_node: Callable[[Path, str], Node]) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    uid, grants = node.admit([("main", {SHARED: "2"})])
    cards = accelerators(grants["main"][SHARED].device_ids)
    assert len(set(cards)) == 2
    assert sorted(node.kubelet.envs(uid, "main")[NV_ENV].split(",")) == sorted(cards)
    (hint,) = [c for c in node.kubelet.calls if c.method == "GetPreferredAllocation"]
    assert hint.response.container_responses[0].deviceIDs[:] == grants["main"][SHARED].device_ids
    # a stale kubelet offering two tokens of one card is refused, not given one card
    first = sorted(node.kubelet.healthy(SHARED))
    one_card = [t for t in first if accelerator(t) == accelerator(first[0])][:2]
    with pytest.raises(AdmissionError) as err:
        node.admit([("main", {SHARED: "2"})], force={"main": {SHARED: one_card}})
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert accelerator(first[0]) in err.value.details and "distinct" in err.value.details


def test_sliced_pod_gets_its_memory_limit_and_the_preload(serve_node: Callable[[Path, str], Node]) -> None:
    root = host("h100-sxm-8x")
    (group,) = detected(root, "nvidia")
    node = serve_node(root, "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    uid, grants = node.admit([("main", {SLICED: "1", f"{SLICED}.memory-percentage": "50"})])
    (card,) = accelerators(grants["main"][SLICED].device_ids)
    env = node.kubelet.envs(uid, "main")
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{group['memory'] * 50 // 100}m"  # floor(50 % of VRAM)
    assert env["CUDA_DEVICE_SM_LIMIT"] == "100"  # cores-percentage defaults to 100
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env[NV_ENV] == card
    resp = node.kubelet.results(uid)["main"][SLICED]
    mounts = {m.container_path: m for m in resp.mounts}
    preload = mounts["/etc/ld.so.preload"]
    assert preload.read_only
    staged = node.write_root / preload.host_path.lstrip("/")
    assert staged.read_text() == "/usr/local/vgpu/libvgpu.so\n"
    # the card is now held sliced: its exclusive and shared tokens are Unhealthy, its sliced ones not
    node.kubelet.wait_for(GPU, lambda d: not any(healthy_on(node, GPU, card)))
    node.kubelet.wait_for(SHARED, lambda d: not any(healthy_on(node, SHARED, card)))  # its own stream
    assert all(healthy_on(node, SLICED, card))


@pytest.mark.parametrize("owner", ["exclusive", "sliced"])
def test_sshd_visibility_names_exactly_mains_accelerators(serve_node: Callable[[Path, str], Node], owner: str) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    if owner == "exclusive":
        main: dict[str, str] = {GPU: "2"}
        count = "2"
    else:
        main = {SLICED: "1", f"{SLICED}.memory-mib": "10240"}
        count = "1"
    uid, grants = node.admit([("main", main), ("sshd", {NV_VIS: count})])
    main_cards = accelerators(next(iter(grants["main"].values())).device_ids)
    env = node.kubelet.envs(uid, "sshd")
    assert sorted(env[NV_ENV].split(",")) == sorted(main_cards)
    assert not any(k.startswith("CUDA_DEVICE_") for k in env)  # a plain response: no slicing artifacts
    assert not node.kubelet.results(uid)["sshd"][NV_VIS].mounts


def test_cross_mode_allocation_is_refused_naming_accelerator_and_holder(
    serve_node: Callable[[Path, str], Node],
) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    _, grants = node.admit([("main", {GPU: "1"})], name="holder")
    (card,) = accelerators(grants["main"][GPU].device_ids)
    token = next(t for t in node.kubelet.devices(SHARED) if accelerator(t) == card)
    # a kubelet whose device list predates the exclusive grant hands out one of the card's shared tokens
    with pytest.raises(AdmissionError) as err:
        node.admit([("main", {SHARED: "1"})], name="late", force={"main": {SHARED: [token]}})
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert card in err.value.details and "default/holder container main" in err.value.details
    assert err.value.reason == "UnexpectedAdmissionError"
    # the refusal charged nothing: a fresh shared pod is admitted on another card
    _, again = node.admit([("main", {SHARED: "1"})])
    assert accelerators(again["main"][SHARED].device_ids) != [card]


@pytest.mark.parametrize(
    ("family", "containers"),
    [
        ("exclusive", [("main", {GPU: "1"})]),
        ("shared", [("main", {SHARED: "2"})]),
        ("sliced", [("main", {SLICED: "1", f"{SLICED}.memory-percentage": "25"})]),
        ("visibility", [("main", {GPU: "1"}), ("sshd", {NV_VIS: "1"})]),
    ],
)
def test_nvidia_family_survives_a_kubelet_restart(
    serve_node: Callable[[Path, str], Node], family: str, containers: list[tuple[str, dict[str, str]]]
) -> None:
    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered(NVIDIA_RESOURCES)
    node.kubelet.wait_capacity(SHARED, 80)
    uid, before = node.admit(containers)
    main = next(iter(before["main"].values()))
    env = node.kubelet.envs(uid, "main")
    assert sorted(env[NV_ENV].split(",")) == sorted(set(accelerators(main.device_ids)))
    node.kubelet.restart()
    node.wait_registered(NVIDIA_RESOURCES, count=2)
    assert sorted({r.resource for r in node.kubelet.registrations if r.generation == 1}) == sorted(NVIDIA_RESOURCES)
    # capacity is back (less what the surviving Pod's card keeps from other modes)
    node.kubelet.wait_capacity(NV_VIS, 8 * 512, timeout=15)
    node.kubelet.wait_for(GPU, lambda d: len(d) == 8, timeout=15)
    # the kubelet reloaded the first Pod's devices from its checkpoint; a second Pod is admitted
    assert node.kubelet.grants(uid)["main"][main.resource].device_ids == main.device_ids
    uid2, after = node.admit(containers)
    env2 = node.kubelet.envs(uid2, "main")
    assert env2[NV_ENV]
    if family in ("exclusive", "visibility"):
        assert set(env2[NV_ENV].split(",")).isdisjoint(env[NV_ENV].split(","))
    if family == "visibility":
        assert node.kubelet.envs(uid2, "sshd")[NV_ENV] == env2[NV_ENV]
    assert node.kubelet.grants(uid2)["main"][main.resource].device_ids == next(iter(after["main"].values())).device_ids


# --- NVIDIA MIG (a100-mig, the compiled NVML stand-in) ---------------------------------------------------


def test_partitioned_registers_allocates_a_mig_and_survives_a_restart(
    serve_node: Callable[[Path, str], Node], tmp_path: Path
) -> None:
    root = copy_host("a100-mig", tmp_path)  # the stand-in records created instances beside its data
    (group,) = detected(root, "nvidia")
    mig = [a for a in group["accelerators"] if a["status"].get("physicalSliced")]
    whole = [a for a in group["accelerators"] if not a["status"].get("physicalSliced")]
    assert mig and whole
    node = serve_node(root, "nvidia")
    resources = [GPU, SHARED, SLICED, PARTITIONED, NV_VIS]
    node.wait_registered(resources)
    tokens = sum(a["status"]["physicalSliced"]["count"] for a in mig)
    node.kubelet.wait_capacity(PARTITIONED, tokens)
    node.kubelet.wait_capacity(GPU, len(whole))
    # a card in partitioning mode serves only the partitioned pool (and visibility)
    assert set(accelerators(node.kubelet.healthy(GPU))) == {a["id"] for a in whole}
    assert all(not d.topology.nodes for d in node.kubelet.devices(PARTITIONED).values())  # no NUMA hint
    assert not node.kubelet.options(PARTITIONED).get_preferred_allocation_available  # type: ignore[union-attr]
    profile = {PARTITIONED: "1", f"{PARTITIONED}.mig-1g.10gb": "1"}
    uid, _ = node.admit([("main", profile), ("sshd", {NV_VIS: "1"})])
    instance = node.kubelet.envs(uid, "main")[NV_ENV]
    assert instance.startswith("MIG-")
    assert node.kubelet.envs(uid, "sshd")[NV_ENV] == instance  # the instance, never the parent card
    assert not [c for c in node.kubelet.calls if c.method == "GetPreferredAllocation" and c.resource == PARTITIONED]
    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    node.kubelet.wait_for(PARTITIONED, lambda d: len(d) == tokens, timeout=15)
    uid2, _ = node.admit([("main", profile)])
    second = node.kubelet.envs(uid2, "main")[NV_ENV]
    assert second.startswith("MIG-") and second != instance


# --- AMD (mi300x-8x) and Ascend (ascend-910b-8x) ---------------------------------------------------------

AMD = "amd.com/gpu"
AMD_VIS = "device.gpustack.ai/amd.visibility"
NPU = "huawei.com/npu"
NPU_VIS = "device.gpustack.ai/ascend.visibility"


def amd_node(tmp_path: Path) -> Path:
    root = copy_host("mi300x-8x", tmp_path)
    # the fixture carries sysfs only: /dev/kfd and the DRM nodes sysfs lists, a regular file each
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/kfd").write_text("")
    for entry in (root / "sys/class/drm").iterdir():
        if entry.name.startswith(("card", "renderD")) and "-" not in entry.name:
            (root / "dev/dri" / entry.name).write_text("")
    return root


def stage(write_root: Path, subtree: str, *files: str) -> None:
    lib = write_root / "var/lib/gpustack/operator/lib" / subtree
    lib.mkdir(parents=True, exist_ok=True)
    for name in files:
        (lib / name).write_text("stand-in\n")


def family_cycle(
    node: Node,
    resources: list[str],
    containers: list[tuple[str, Mapping[str, str]]],
    check: Callable[[str, dict[str, dict[str, Grant]]], set[str]],
    *,
    exclusive: bool,
) -> None:
    """admit -> check -> kubelet restart -> re-register -> admit -> check; ``check`` returns the
    accelerators a Pod holds (an exclusive second Pod must get others)."""
    node.wait_registered(resources)
    uid, grants = node.admit(containers)
    first = check(uid, grants)
    node.kubelet.restart()
    node.wait_registered(resources, count=2)
    assert sorted({r.resource for r in node.kubelet.registrations if r.generation == 1}) == sorted(resources)
    uid2, grants2 = node.admit(containers)
    second = check(uid2, grants2)
    if exclusive:
        assert first.isdisjoint(second)


@pytest.mark.parametrize("family", ["exclusive", "shared", "sliced", "visibility"])
def test_amd_family_cycle(serve_node: Callable[[Path, str], Node], tmp_path: Path, family: str) -> None:
    root = amd_node(tmp_path)
    (group,) = detected(root, "amd")
    node = serve_node(root, "amd")
    stage(node.write_root, "amd", "libvrocm.so", "rocm-cumask-check", "rocm-monitor")
    resources = [AMD, f"{AMD}.shared", f"{AMD}.sliced", AMD_VIS]
    containers: list[tuple[str, Mapping[str, str]]] = {
        "exclusive": [("main", {AMD: "1"})],
        "shared": [("main", {f"{AMD}.shared": "2"})],
        "sliced": [("main", {f"{AMD}.sliced": "1", f"{AMD}.sliced.memory-percentage": "50"})],
        "visibility": [("main", {AMD: "1"}), ("sshd", {AMD_VIS: "1"})],
    }[family]

    def nodes_of(resp: dp.ContainerAllocateResponse, cards: int) -> list[str]:
        assert dict(resp.envs)["AMD_VISIBLE_DEVICES"] == "none"
        paths = sorted(d.container_path for d in resp.devices)
        assert paths.count("/dev/kfd") == 1  # kfd once, each card's two DRM nodes
        assert len([p for p in paths if p.startswith("/dev/dri/card")]) == cards
        assert len([p for p in paths if p.startswith("/dev/dri/renderD")]) == cards
        assert all((root / d.host_path.lstrip("/")).exists() for d in resp.devices)
        return paths

    def check(uid: str, grants: dict[str, dict[str, Grant]]) -> set[str]:
        ((resource, grant),) = grants["main"].items()
        cards = set(accelerators(grant.device_ids))
        resp = node.kubelet.results(uid)["main"][resource]
        main_nodes = nodes_of(resp, len(cards))
        if family == "sliced":
            (card,) = cards
            env = dict(resp.envs)
            assert env["ROCR_VISIBLE_DEVICES"] == card
            assert env["VROCM_DEVICE_MEMORY_LIMIT_0"] == str(group["memory"] * 50 // 100)  # bare MiB
            assert env["HSA_CU_MASK"].startswith("0:")
            assert "/etc/ld.so.preload" in {m.container_path for m in resp.mounts}
        if family == "visibility":
            assert nodes_of(node.kubelet.results(uid)["sshd"][AMD_VIS], len(cards)) == main_nodes
        return cards

    node.kubelet.wait_capacity(AMD, len(group["accelerators"]))
    family_cycle(node, resources, containers, check, exclusive=family in ("exclusive", "visibility"))


@pytest.mark.parametrize(
    "family",
    [
        "exclusive",
        "shared",
        "sliced",
        "visibility",
    ],
)
def test_ascend_family_cycle(serve_node: Callable[[Path, str], Node], tmp_path: Path, family: str) -> None:
    root = copy_host("ascend-910b-8x", tmp_path)  # a tenanted grant may switch container-share on
    (group,) = detected(root, "ascend")
    node = serve_node(root, "ascend")
    stage(node.write_root, "ascend/cann-8-910b", "libvruntime.so")
    resources = [NPU, f"{NPU}.shared", f"{NPU}.sliced", NPU_VIS]
    physical = {a["id"]: str(a["physicalIndexes"][0]) for a in group["accelerators"]}
    containers: list[tuple[str, Mapping[str, str]]] = {
        "exclusive": [("main", {NPU: "1"})],
        "shared": [("main", {f"{NPU}.shared": "2"})],
        "sliced": [("main", {f"{NPU}.sliced": "1", f"{NPU}.sliced.memory-mib": "8192"})],
        "visibility": [("main", {NPU: "1"}), ("sshd", {NPU_VIS: "1"})],
    }[family]

    def check(uid: str, grants: dict[str, dict[str, Grant]]) -> set[str]:
        ((resource, grant),) = grants["main"].items()
        cards = accelerators(grant.device_ids)
        env = node.kubelet.envs(uid, "main")
        # the driver's index, in ascending accelerator order -- never the token
        assert env["ASCEND_VISIBLE_DEVICES"].split(",") == sorted((physical[c] for c in cards), key=int)
        if family == "sliced":
            resp = node.kubelet.results(uid)["main"][resource]
            config = {m.container_path: m for m in resp.mounts}["/etc/enpu/vcann-rt/npu_info.config"]
            text = (node.write_root / config.host_path.lstrip("/")).read_text()
            assert f"physical-npu-id={physical[cards[0]]}" in text and "memory-quota=8192" in text
            assert env["ENPU_DSMI_HOOK"] == "1"
        if family == "visibility":
            assert node.kubelet.envs(uid, "sshd")["ASCEND_VISIBLE_DEVICES"] == env["ASCEND_VISIBLE_DEVICES"]
        return set(cards)

    node.kubelet.wait_capacity(NPU, len(group["accelerators"]))
    family_cycle(node, resources, containers, check, exclusive=family in ("exclusive", "visibility"))


# --- the CLI, as a user runs it ----------------------------------------------------------------------------


def healthy_count(devices: Mapping[str, dp.Device]) -> int:
    return sum(1 for d in devices.values() if d.health == "Healthy")


def cli_scenario(kubelet: KubeletStandIn, apiserver: APIServerStandIn, log: Path) -> None:
    try:
        for resource in NVIDIA_RESOURCES:
            kubelet.wait_registered(resource, 1, timeout=REGISTER_TIMEOUT)
    except TimeoutError:
        raise AssertionError(log.read_text()[-3000:]) from None
    kubelet.wait_capacity(GPU, 8)
    kubelet.wait_capacity(SHARED, 80)
    pod = apiserver.add_pod(pod_manifest("ex", node_name=NODE, containers=[("main", {GPU: "1"})]))
    uid = pod["metadata"]["uid"]
    (card,) = accelerators(kubelet.admit(pod)["main"][GPU].device_ids)
    assert kubelet.envs(uid, "main") == {NV_ENV: card}
    kubelet.wait_for(SHARED, lambda d: healthy_count(d) == 70)
    # the node's pods are listed from the API server, bound to this node
    lists = [r for r in apiserver.requests if r.path == "/api/v1/pods"]
    assert lists and all(r.query.get("fieldSelector") == f"spec.nodeName={NODE}" for r in lists)

    kubelet.restart()
    for resource in NVIDIA_RESOURCES:
        kubelet.wait_registered(resource, 2, timeout=REGISTER_TIMEOUT)
    kubelet.wait_for(SHARED, lambda d: healthy_count(d) == 70, timeout=15)

    # the first Pod is deleted; the next allocation reads the node's pods and reclaims its card
    apiserver.delete("default", "ex")
    kubelet.remove(uid)
    pod2 = apiserver.add_pod(pod_manifest("ex2", node_name=NODE, containers=[("main", {SHARED: "1"})]))
    kubelet.admit(pod2)
    kubelet.wait_for(SHARED, lambda d: healthy_count({t: x for t, x in d.items() if accelerator(t) == card}) == 10)


def test_cli_serve_subprocess(tmp_path: Path) -> None:
    """``gpustack-operator device-manager serve`` as a process: registers, admits, re-registers after
    a kubelet restart, reclaims a deleted Pod on the next allocation, and SIGTERM removes its sockets."""
    help_run = subprocess.run(
        [str(BIN / "gpustack-operator"), "device-manager", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert help_run.returncode == 0, help_run.stderr
    assert "--kube-api-server" in help_run.stdout
    assert "Reservations are durable" in " ".join(help_run.stdout.split())  # the help says what is durable
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    log_path = tmp_path / "dm.log"
    write_root = tmp_path / "host"
    write_root.mkdir()
    with short_dir() as base, APIServerStandIn() as apiserver, log_path.open("w") as log:
        kubelet = KubeletStandIn(
            base / "dp", base / "pr" / "kubelet.sock", node_name=NODE, pod_status=apiserver.pod_status
        ).start()
        argv = [str(BIN / "gpustack-operator"), "device-manager", "serve", "--manufacturer", "nvidia"]
        argv += ["--detect-root", str(host("h100-sxm-8x")), "--kube-socket", str(kubelet.socket)]
        argv += ["--pod-resources-socket", str(kubelet.pod_resources_socket), "--kube-api-server", apiserver.url]
        argv += ["--node-name", NODE, "--host-write-root", str(write_root), *LOOPBACK_FLAGS]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            cli_scenario(kubelet, apiserver, log_path)
        finally:
            proc.send_signal(signal.SIGTERM)  # the process this test started, by its pid
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                raise
            finally:
                kubelet.close()
        left = sorted(p.name for p in (base / "dp").iterdir() if p.name.startswith(("gpustack-", ".gpustack-")))
    out = log_path.read_text()
    assert code == 0, out[-3000:]
    assert left == [], f"sockets left behind: {left}"
    assert "Traceback" not in out


def test_checkpoint_names_what_the_plugins_granted(serve_node: Callable[[Path, str], Node]) -> None:
    """The kubelet's own record (kubelet_internal_checkpoint) after real allocations decodes to the
    plugin's responses, under the kubelet's checksum: what a node-side reader of the checkpoint sees."""
    from tests.kubelet import checkpoint as ckpt

    node = serve_node(host("h100-sxm-8x"), "nvidia")
    node.wait_registered([GPU])
    node.kubelet.wait_capacity(GPU, 8)
    uid, _ = node.admit([("main", {GPU: "2"})])
    cp = ckpt.read(node.kubelet.plugin_dir)  # raises on a checksum mismatch
    assert cp is not None and cp.entries is not None
    (entry,) = cp.entries
    assert (entry.pod_uid, entry.container, entry.resource) == (uid, "main", GPU)
    resp = dp.ContainerAllocateResponse.FromString(entry.alloc_resp or b"")
    assert sorted(resp.envs[NV_ENV].split(",")) == sorted(accelerators(entry.device_ids))
    assert sorted((cp.registered or {})[GPU] or []) == sorted(node.kubelet.healthy(GPU))
    raw = json.loads((node.kubelet.plugin_dir / ckpt.FILE_NAME).read_text())
    assert set(raw["Data"]["PodDeviceEntries"][0]["DeviceIDs"]) <= {"0", "1"}  # keyed by the cards' NUMA nodes
