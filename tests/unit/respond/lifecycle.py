"""A node for slice lifecycles: a real :class:`Allocator` driving a vendor's real responder over a
private copy of its fixture host, with the Pods a test admits, finishes and deletes.

The node view (sysfs, ``/dev``, the vendor library stand-ins) is copied once per vendor and shared;
each :class:`Bench` gets its own host tree (the per-pod records, the staged libraries) and puts the
view's mutable state (the CNDev stand-in's data, MetaX's sGPU registry writes) back as it found it.
The records are read back here with this file's own small parsers, never the product's, so a check
cannot agree with the code it checks by construction.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from gpustack_operator.allocator.core import Allocator
from gpustack_operator.allocator.ledger import D
from gpustack_operator.allocator.pods import ContainerSpec, PodSpec
from gpustack_operator.discovery.detect import resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import DetectContext, Detected
from gpustack_operator.manufacturers.respond import Family, RefusedError, RespondContext
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import Settings

from tests.conftest import copy_host
from tests.stubs.ascend import fixture as ascend_fixture
from tests.stubs.keyvalue import detect_one
from tests.unit.allocator.fakes import FakePods
from tests.unit.respond.test_amd import add_dev_nodes

PODS = "var/lib/gpustack/operator/pods"
LIB = "var/lib/gpustack/operator/lib"
VENDORS = ("amd", "hygon", "ascend", "metax", "cambricon")
HOSTS = {
    "amd": "radeon-7800xt",
    "hygon": "hygon-k100",
    "ascend": "ascend-910b-8x",
    "metax": "metax-c500",
    "cambricon": "mlu370-x8",
}
STAGED = {"amd": ("amd", "libvrocm.so"), "ascend": ("ascend/cann-8-910b", "libvruntime.so")}
AMD_QUANTUM = 6  # radeon-7800xt: 3 shader engines, WGP pairs -> a 6-CU grid (reference rules §4)
HYGON_CUS = 120  # hygon-k100: simd_count 480 / simd_per_cu 4
CNDEV_DATA = "usr/local/neuware/lib64/libcndev.so.fixture"
METAX_DEVICES = "sys/bus/pci/devices"


# -- the shared node view ---------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    root: Path
    group: DevicesGroup
    pristine: dict[Path, str]  # files the vendor's driver stand-in writes, as they were


def _prepare(vendor: str, into: Path) -> Path:
    if vendor == "ascend":
        root = ascend_fixture.copy_host(HOSTS[vendor], into)
        for card in range(8):  # container-share on, as a node prepared for slices is
            ascend_fixture.set_npu(root, card, share=1)
        return root
    root = copy_host(HOSTS[vendor], into)
    if vendor in ("amd", "hygon"):
        add_dev_nodes(root)
        (root / "dev/mkfd").write_text("")
    elif vendor == "metax":
        (root / "dev/dri").mkdir(parents=True)
        (root / "dev/mxcd").write_text("")
        for n in range(1, 9):
            (root / f"dev/dri/card{n}").write_text("")
            (root / f"dev/dri/renderD{127 + n}").write_text("")
        for sgpu in (root / METAX_DEVICES).glob("*/sgpu/sgpu*"):
            shutil.rmtree(sgpu)  # a node whose subdevices are all this allocator's
    elif vendor == "cambricon":
        caps = root / "dev/cambricon-caps"
        caps.mkdir(parents=True)
        for i in range(8):
            (root / f"dev/cambricon_dev{i}").write_text("")
            (root / f"dev/cambricon_ipcm{i}").write_text("")
            for mi in range(1, 128):
                (caps / f"cap_dev{i}_mi{mi}").write_text("")
        (root / "dev/cambricon_ctl").write_text("")
    return root


@cache
def view(vendor: str) -> View:
    """The vendor's node, copied once per test session (removed when the process ends)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"lifecycle-{vendor}-"))
    atexit.register(shutil.rmtree, scratch, True)
    root = _prepare(vendor, scratch)
    outcome = detect_one(root, vendor)
    assert isinstance(outcome, Detected), outcome
    (group,) = outcome.groups
    mutable = [root / CNDEV_DATA] if vendor == "cambricon" else []
    mutable += [p for p in (root / METAX_DEVICES).glob("*/sgpu/*") if p.is_file()] if vendor == "metax" else []
    return View(root, group, {p: p.read_text() for p in mutable})


# -- one node under test ----------------------------------------------------------------------------


@dataclass
class Bench:
    vendor: str
    view: View
    host: Path
    allocator: Allocator
    pods: FakePods
    serial: int = 0
    placed: dict[str, str] = field(default_factory=dict)  # pod uid -> accelerator id

    @property
    def resource(self) -> str:
        return self.allocator.names.resource(Family.SLICED)

    @property
    def base(self) -> str:
        return self.allocator.names.base

    def records(self, uid: str) -> Path:
        return self.host / PODS / uid

    # -- what a test does to the node --

    def admit(self, pct: int, card: str | None = None) -> tuple[str, list[str], bool, RefusedError | None]:
        """A Pod asking one slice of ``pct`` % cores and memory, allocated on the hint's card (or on
        ``card``): (its uid, the device ids asked, whether the ledger said the card has room, the
        refusal). An admitted Pod runs; a refused one fails, as the kubelet fails it."""
        self.serial += 1
        uid = f"uid-{self.serial:03d}"
        resources = {
            self.resource: "1",
            f"{self.resource}.cores-percentage": str(pct),
            f"{self.resource}.memory-percentage": str(pct),
        }
        spec = PodSpec(
            uid=uid,
            namespace="ns",
            name=f"p{self.serial:03d}",
            created=float(self.serial),
            node="node-1",
            containers=(ContainerSpec(name="main", resources=resources),),
        )
        self.pods.pods.append(spec)
        healthy = [d.id for d in self.allocator.devices(self.resource) if d.healthy]
        if card is None:
            ids = self.allocator.preferred(self.resource, healthy, [], 1)
        else:
            ids = [next(t for t in healthy if t.split(":")[1] == card)]
        room = bool(ids) and self.room(ids[0].split(":")[1], pct)
        refused: RefusedError | None = None
        try:
            self.allocator.allocate(self.resource, [ids])
        except RefusedError as exc:
            refused = exc
        self.set_phase(uid, "Failed" if refused else "Running")
        if refused is None:
            self.placed[uid] = ids[0].split(":")[1]
        return uid, ids, room, refused

    def room(self, accelerator: str, pct: int) -> bool:
        """Does the ledger status (what the hint reads) say ``accelerator`` hosts one more slice?"""
        vram = self.view.group.memory
        units = (vram * pct // 100) * D // vram
        limit = next(a for a in self.view.group.accelerators if a.id == accelerator).status.logical_sliced
        assert limit is not None
        for status in self.allocator.status()[0].accelerators:
            if status.id == accelerator:
                return status.remaining >= units and status.allocated_slices < limit.count
        raise AssertionError(f"{accelerator} is not in the ledger status")

    def set_phase(self, uid: str, phase: str) -> None:
        self.pods.pods = [PodSpec(**{**p.__dict__, "phase": phase}) if p.uid == uid else p for p in self.pods.pods]

    def finish(self, which: int) -> None:
        running = [p for p in self.pods.pods if p.phase == "Running"]
        if running:
            self.set_phase(running[which % len(running)].uid, "Succeeded")

    def delete(self, which: int, reconcile: bool) -> None:
        if self.pods.pods:
            self.pods.pods.pop(which % len(self.pods.pods))
        if reconcile:
            self.allocator.reconcile()

    # -- who holds a slice --

    def uids(self, *phases: str) -> list[str]:
        return [p.uid for p in self.pods.pods if p.phase in phases]


@dataclass(frozen=True)
class Vdev:
    bus: str
    mask: int
    vdev_id: int
    pipe_id: int


def amd_window(bench: Bench, uid: str) -> tuple[str, int, int] | None:
    path = bench.records(uid) / "amd-cumask.main.json"
    if not path.is_file():
        return None
    ((accelerator, (lo, hi)),) = json.loads(path.read_text())["accelerators"].items()
    return accelerator, lo, hi


def hygon_vdev(bench: Bench, uid: str) -> Vdev | None:
    path = bench.records(uid) / "main/hygon-vdev/vdev0.conf"
    if not path.is_file():
        return None
    fields = [line.split(":", 1)[1].strip() for line in path.read_text().splitlines()]
    return Vdev(fields[0], int(fields[1], 16) | int(fields[2], 16) << 64, int(fields[6]), int(fields[7]))


def ascend_ids(bench: Bench, uid: str) -> tuple[int, int] | None:
    path = bench.records(uid) / "main/npu_info.config"
    if not path.is_file():
        return None
    values = dict(line.split("=", 1) for line in path.read_text().splitlines())
    return int(values["physical-npu-id"]), int(values["virtual-npu-id"])


def metax_index(bench: Bench, uid: str) -> tuple[str, int] | None:
    path = bench.records(uid) / "metax-sgpu.main.json"
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    return doc["bus_id"], doc["index"]


def cambricon_instances(bench: Bench, uid: str) -> list[tuple[int, int, str]]:
    path = bench.records(uid) / "main/smlu.json"
    if not path.is_file():
        return []
    return [(r["index"], r["instance"], r["name"]) for r in json.loads(path.read_text())["instances"]]


def cndev_instance(bench: Bench, index: int, instance: int) -> str | None:
    """What the CNDev stand-in lists at ``smlu.<instance>`` of card ``index`` (``"<profile>:<name>"``)."""
    key = f"device.{index}.smlu.{instance}="
    found = None
    for line in (bench.view.root / CNDEV_DATA).read_text().splitlines():
        if line.startswith(key):
            found = line[len(key) :]
    return found or None


def lowest_free_start(size: int, taken: list[tuple[int, int]], cus: int, quantum: int) -> int | None:
    """The lowest start on the grid whose ``size``-CU window overlaps none of ``taken`` (inclusive)."""
    for start in range(0, cus - size + 1, quantum):
        if all(start + size - 1 < lo or start > hi for lo, hi in taken):
            return start
    return None


def lowest_bits(count: int, held: int, cus: int) -> int:
    mask, bit = 0, 0
    while count and bit < cus:
        if not held >> bit & 1:
            mask |= 1 << bit
            count -= 1
        bit += 1
    return mask


@cache
def _responder(vendor: str) -> object:
    responder = REGISTRY[vendor].loaded().responder
    assert responder is not None
    return responder


@contextlib.contextmanager
def bench(vendor: str, host: Path, **settings: str) -> Iterator[Bench]:
    """A fresh node for ``vendor`` (the view's driver state put back afterwards)."""
    shared = view(vendor)
    for subtree, library in [STAGED[vendor]] if vendor in STAGED else []:
        lib = host / LIB / subtree
        lib.mkdir(parents=True)
        (lib / library).write_bytes(b"\x7fELF stand-in")
    resolved = resolve_manufacturers([vendor])[vendor]
    root = HostRoot(shared.root)
    config = Settings(**settings)
    detect = DetectContext(view=root, pci=scan_pci(root), settings=config, manufacturer=resolved)
    ctx = RespondContext(view=root, host=HostRoot(host), settings=config, detect=detect)
    pods = FakePods()
    allocator = Allocator(resolved, [shared.group], responder=_responder(vendor), ctx=ctx, pods=pods)  # type: ignore[arg-type]
    try:
        yield Bench(vendor, shared, host, allocator, pods)
    finally:
        for path, text in shared.pristine.items():
            path.write_text(text)
