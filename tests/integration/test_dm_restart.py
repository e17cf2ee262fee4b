"""Restart recovery (issue 18): ``gpustack-operator dm serve`` as a real process against the kubelet
stand-in and the HTTP API-server stand-in, killed with SIGKILL -- by the test, or by itself at one step
of ``Allocate`` -- and started again. After the restart, before anything else happens:

- the advertised health equals the truth: a card a running Pod holds is Unhealthy for the other
  families in the restarted process's *first* device list;
- no card is granted twice: a forced allocation on a held card is refused, naming the holder;
- a retried ``Allocate`` is not charged twice;
- the SSH visibility sidecar still resolves its owner (from the annotation);
- a holding the kubelet's pod-resources ``List`` names but no annotation records is recovered and logged.

The self-kill is the test-only seam ``GPUSTACK_OPERATOR_TEST_KILL_AT`` (``allocator/durable.py``
``kill_point``: inert unless the variable names a step when the process starts). Processes are
started and stopped by their pid only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpustack_operator.allocator.durable import KILL_AT_ENV, KILL_POINTS
from gpustack_operator.allocator.pods import ALLOCATED_ANNOTATION as ALLOCATED
from gpustack_operator.deviceplugin.api import deviceplugin_pb2 as dp
from gpustack_operator.deviceplugin.api import deviceplugin_pb2_grpc as dp_grpc

from tests.conftest import BIN, copy_host, host
from tests.integration.test_kubelet_e2e import (
    GPU,
    NV_ENV,
    NV_VIS,
    NVIDIA_RESOURCES,
    PARTITIONED,
    SHARED,
    SLICED,
    accelerator,
    short_dir,
    stage_hami_core,
)
from tests.kube.apiserver import APIServerStandIn, pod_manifest
from tests.kube.routes_publish import PublishStandIn
from tests.kubelet.standin import AdmissionError, KubeletStandIn

NODE = "node-a"
REGISTER_TIMEOUT = 60.0
SLICE = {SLICED: "1", f"{SLICED}.memory-percentage": "50"}


@dataclass
class Cluster:
    api: APIServerStandIn
    kubelet: KubeletStandIn
    base: Path
    write_root: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    root: Path = field(default_factory=lambda: host("h100-sxm-8x"))
    resources: tuple[str, ...] = tuple(NVIDIA_RESOURCES)
    extra: tuple[str, ...] = ()

    def start(self, kill_at: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
        if kill_at:
            env[KILL_AT_ENV] = kill_at
        argv = [str(BIN / "gpustack-operator"), "device-manager", "serve", "-v=1", "--manufacturer", "nvidia"]
        argv += ["--detect-root", str(self.root), "--kube-socket", str(self.kubelet.socket)]
        argv += ["--pod-resources-socket", str(self.kubelet.pod_resources_socket)]
        argv += ["--kube-api-server", self.api.url, "--node-name", NODE, "--host-write-root", str(self.write_root)]
        argv += ["--secure-port", "0", "--bind-address", "127.0.0.1"]  # /readyz, /livez: loopback, any port
        argv += list(self.extra)
        with self.log.open("a") as sink:
            sink.write(f"--- start {self.starts + 1} (kill at {kill_at}) ---\n")
            sink.flush()
            self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        self.starts += 1
        for resource in self.resources:
            self.kubelet.wait_registered(resource, self.starts, timeout=REGISTER_TIMEOUT)
        # the restarted process's first device list has arrived (a killed plugin's tokens were all
        # marked Unhealthy by the kubelet until then)
        for resource in (SHARED, NV_VIS):
            self.kubelet.wait_for(resource, lambda d: any(x.health == "Healthy" for x in d.values()), timeout=30)

    def kill(self) -> None:
        """SIGKILL the serve process this test started (by its pid)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.wait_dead()

    def wait_dead(self) -> None:
        assert self.proc is not None
        code = self.proc.wait(30)
        assert code == -signal.SIGKILL, self.text()[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def text(self) -> str:
        return self.log.read_text()

    def pod(self, name: str, containers: list[tuple[str, dict[str, str]]]) -> dict[str, Any]:
        return self.api.add_pod(pod_manifest(name, node_name=NODE, containers=containers))

    def held_on(self, resource: str, card: str) -> list[bool]:
        """Each of ``card``'s tokens of ``resource``: True when Healthy."""
        return [d.health == "Healthy" for t, d in self.kubelet.devices(resource).items() if accelerator(t) == card]

    def allocate(self, resource: str, ids: list[str]) -> dp.AllocateResponse:
        """One Allocate straight to the plugin's socket (what a kubelet with a stale device list sends)."""
        socket = self.kubelet.accepted(resource)[-1].endpoint
        with grpc.insecure_channel(f"unix://{self.kubelet.plugin_dir / socket}") as channel:
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
            return dp_grpc.DevicePluginStub(channel).Allocate(request, timeout=30)  # type: ignore[no-any-return]

    def annotation(self, name: str) -> dict[str, Any]:
        stored = self.api.get("default", name)
        assert stored is not None
        raw = (stored["metadata"].get("annotations") or {}).get(ALLOCATED)
        return json.loads(raw) if raw else {}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with short_dir() as base, APIServerStandIn() as api:
        kubelet = KubeletStandIn(
            base / "dp", base / "pr" / "kubelet.sock", node_name=NODE, pod_status=api.pod_status
        ).start()
        write_root = tmp_path / "host"
        write_root.mkdir()
        stage_hami_core(write_root)
        c = Cluster(api, kubelet, base, write_root, tmp_path / "dm.log")
        try:
            yield c
        finally:
            c.stop()
            kubelet.close()
    assert "Traceback" not in c.text(), c.text()[-4000:]


@pytest.fixture
def published(tmp_path: Path) -> Iterator[Cluster]:
    """:func:`cluster` with an API server that also keeps the Node, its NodeFeature and the ``Devices``
    object (``tests/kube/routes_publish.py``), and a detection pass every half second, so serve
    publishes the ledger's status soon after a grant."""
    with short_dir() as base, PublishStandIn() as api:
        api.add_node(NODE)
        kubelet = KubeletStandIn(
            base / "dp", base / "pr" / "kubelet.sock", node_name=NODE, pod_status=api.pod_status
        ).start()
        write_root = tmp_path / "host"
        write_root.mkdir()
        stage_hami_core(write_root)
        c = Cluster(api, kubelet, base, write_root, tmp_path / "dm.log", extra=("--monitor-period", "0.5"))
        try:
            yield c
        finally:
            c.stop()
            kubelet.close()
    assert "Traceback" not in c.text(), c.text()[-4000:]


def status_holders(api: PublishStandIn) -> dict[str, list[str]]:
    """Accelerator id -> the Pods its published ``Devices`` status names as holders."""
    obj = api.obj("devices", NODE) or {}
    groups = (obj.get("status") or {}).get("groups") or []
    return {a["id"]: [h["pod"] for h in a.get("holders", [])] for g in groups for a in g["accelerators"]}


def test_the_devices_status_rebuilds_a_holding_no_annotation_records(published: Cluster) -> None:
    """Restart recovery's third source: a Pod whose annotation is gone (and no node record: an
    exclusive grant has none) is still held after a SIGKILL, rebuilt from the ``Devices`` status the
    killed process published -- read before the restarted one publishes its own."""
    cluster = published
    cluster.start()
    holder = cluster.pod("holder", [("main", {GPU: "1"})])
    (held,) = [accelerator(t) for t in cluster.kubelet.admit(holder)["main"][GPU].device_ids]
    deadline = time.monotonic() + 30
    while status_holders(cluster.api).get(held) != ["default/holder"]:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"the status never named the holder: {status_holders(cluster.api)}"  # type: ignore[arg-type]
        time.sleep(0.1)
    cluster.kill()
    cluster.api.update("default", "holder", lambda p: p["metadata"]["annotations"].pop(ALLOCATED))
    cluster.start()
    assert not any(cluster.held_on(SHARED, held)) and not any(cluster.held_on(SLICED, held))
    assert "default/holder container main: exclusive on" in cluster.text()
    assert "recovered from the Devices status" in cluster.text()
    # the restarted process publishes the rebuilt ledger: the holder is still named
    deadline = time.monotonic() + 30
    while status_holders(cluster.api).get(held) != ["default/holder"]:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "the restarted process dropped the holder from the status"
        time.sleep(0.1)


@contextmanager
def refused(code: grpc.StatusCode) -> Iterator[list[grpc.RpcError]]:
    caught: list[grpc.RpcError] = []
    with pytest.raises(grpc.RpcError) as err:
        yield caught
    assert err.value.code() == code, err.value.details()
    caught.append(err.value)


def test_running_pods_survive_a_sigkill_of_serve(cluster: Cluster) -> None:
    cluster.start()
    holder = cluster.pod("holder", [("main", {GPU: "1"})])
    grants = cluster.kubelet.admit(holder)
    (held,) = [accelerator(t) for t in grants["main"][GPU].device_ids]
    sliced = cluster.pod("slice", [("main", SLICE)])
    grants = cluster.kubelet.admit(sliced)
    (slice_card,) = [accelerator(t) for t in grants["main"][SLICED].device_ids]
    assert slice_card != held
    # an SSH Instance whose main was allocated; its sidecar's Allocate comes after the restart (the
    # kubelet is given the Pod without the sidecar, so the sidecar is still to be served)
    ssh = cluster.pod("ssh", [("main", {GPU: "1"}), ("sshd", {NV_VIS: "1"})])
    only_main = {**ssh, "spec": {**ssh["spec"], "containers": ssh["spec"]["containers"][:1]}}
    grants = cluster.kubelet.admit(only_main, start=False)
    (ssh_card,) = [accelerator(t) for t in grants["main"][GPU].device_ids]
    # a holding no annotation records (a Pod admitted by a Device Manager that wrote none)
    cluster.api.update("default", "holder", lambda p: p["metadata"]["annotations"].pop(ALLOCATED))

    cluster.kill()
    cluster.start()

    # the first device list of the restarted process: the held cards are Unhealthy for other families
    assert not any(cluster.held_on(SHARED, held)) and not any(cluster.held_on(SLICED, held))
    assert not any(cluster.held_on(GPU, slice_card)) and not any(cluster.held_on(SHARED, slice_card))
    assert all(cluster.held_on(SLICED, slice_card))
    assert not any(cluster.held_on(SHARED, ssh_card))
    assert cluster.kubelet.capacity(SHARED) == 50  # 8 cards x 10 shares, 3 held
    assert "holder container main: exclusive on" in cluster.text()
    assert "recovered from the kubelet's pod-resources List" in cluster.text()

    # no card is granted twice: forced calls on held cards are refused, naming the holder
    late = cluster.pod("late", [("main", SLICE)])
    token = next(t for t in cluster.kubelet.devices(SLICED) if accelerator(t) == held)
    with pytest.raises(AdmissionError) as err:
        cluster.kubelet.admit(late, force={"main": {SLICED: [token]}})
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION and "default/holder" in err.value.details
    greedy = cluster.pod("greedy", [("main", {GPU: "1"})])
    token = next(t for t in cluster.kubelet.devices(GPU) if accelerator(t) == slice_card)
    with pytest.raises(AdmissionError) as err:
        cluster.kubelet.admit(greedy, force={"main": {GPU: [token]}})
    assert "default/slice" in err.value.details

    # the sidecar resolves its owner after the restart
    vis = next(iter(cluster.kubelet.healthy(NV_VIS)))
    response = cluster.allocate(NV_VIS, [vis])
    assert dict(response.container_responses[0].envs)[NV_ENV] == ssh_card


@pytest.mark.parametrize("step", KILL_POINTS)
def test_a_sigkill_at_each_step_of_allocate_grants_nothing_twice(cluster: Cluster, step: str) -> None:
    cluster.start()
    holder = cluster.pod("holder", [("main", {GPU: "1"})])
    (held,) = [accelerator(t) for t in cluster.kubelet.admit(holder)["main"][GPU].device_ids]
    cluster.kill()

    cluster.start(kill_at=step)
    victim = cluster.pod("victim", [("main", {GPU: "1"})])
    with pytest.raises(AdmissionError) as err:
        cluster.kubelet.admit(victim)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE  # the process died under the call
    cluster.wait_dead()
    recorded = cluster.annotation("victim")
    if step in ("after-identify", "after-reserve"):
        assert recorded == {}  # killed before the patch: nothing durable names it
    else:
        assert recorded["main"]["mode"] == "exclusive"  # killed after the patch: the record names it

    cluster.start()
    # the truth: the holder's card is held, the failed victim (Failed by the kubelet) holds nothing
    assert not any(cluster.held_on(SHARED, held))
    assert cluster.kubelet.capacity(SHARED) == 70
    # the kubelet retries the Pod: one charge, on one card
    cluster.api.set_phase("default", "victim", "Pending")
    grants = cluster.kubelet.admit(victim)
    (card,) = [accelerator(t) for t in grants["main"][GPU].device_ids]
    assert card != held
    cluster.kubelet.wait_capacity(SHARED, 60, timeout=10)
    assert cluster.annotation("victim")["main"]["accelerators"] == [card]
    # and neither card can be taken by another mode
    for name, target in (("x1", held), ("x2", card)):
        pod = cluster.pod(name, [("main", SLICE)])
        token = next(t for t in cluster.kubelet.devices(SLICED) if accelerator(t) == target)
        with pytest.raises(AdmissionError) as err:
            cluster.kubelet.admit(pod, force={"main": {SLICED: [token]}})
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_a_partition_made_before_a_sigkill_is_owned_and_destroyed_with_its_pod(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Killed after the partition was materialised and recorded on the node, before the annotation
    patch: the restarted process owns the instance from the node record, and destroys it once the
    Pod is gone -- a MIG instance is never leaked."""
    cluster.root = copy_host("a100-mig", tmp_path)  # the NVML stand-in records its instances in it
    cluster.resources = (GPU, SHARED, SLICED, PARTITIONED, NV_VIS)
    cluster.start(kill_at="after-reserve")
    pod = cluster.pod("mig", [("main", {PARTITIONED: "1", f"{PARTITIONED}.mig-1g.10gb": "1"})])
    with pytest.raises(AdmissionError):
        cluster.kubelet.admit(pod)
    cluster.wait_dead()
    made = [p for p in cluster.root.rglob("*.instances")]
    assert made and any(line.startswith("gi ") for line in made[0].read_text().splitlines())
    assert cluster.annotation("mig") == {}  # the patch never happened

    cluster.start()
    assert "mig container main: partitioned on" in cluster.text()
    assert "recovered from its node record" in cluster.text()
    cluster.api.delete("default", "mig")  # the Pod is gone: its partition is destroyed on the event
    for _ in range(300):
        if not any(line.startswith("gi ") for line in made[0].read_text().splitlines()):
            break
        threading.Event().wait(0.1)  # poll the stand-in's instance file (a bounded wait, not a timing)
    assert not any(line.startswith("gi ") for line in made[0].read_text().splitlines()), made[0].read_text()
