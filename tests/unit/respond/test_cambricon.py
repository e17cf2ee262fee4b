"""Cambricon's responder (issue 10): the card/control nodes, sMLU mode, sMLU profile + instance through
the CNDev stand-in (tests/stubs/cambricon/fake_cndev.c)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gpustack_operator.discovery.detect import resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import DetectContext, Detected
from gpustack_operator.manufacturers.cambricon.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    ContainerRef,
    Family,
    Grant,
    Granted,
    RefusedError,
    RespondContext,
    SliceBudget,
)
from gpustack_operator.node.pci import scan_pci
from gpustack_operator.settings import load_settings

from tests.conftest import REPO, copy_host
from tests.stubs.keyvalue import detect_one, edit_kv_fixture

LIB = "usr/local/neuware/lib64/libcndev.so"
FIXTURE = LIB + ".fixture"


def build_without_smlu(out: Path) -> None:
    source = REPO / "tests/stubs/cambricon/fake_cndev.c"
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-DFAKE_CNDEV_NO_SMLU", "-o", str(out), str(source)]
    subprocess.run([*cmd, "-ldl"], check=True, capture_output=True)


class Node:
    def __init__(self, tmp_path: Path, *, no_smlu: bool = False, nodes: tuple[str, ...] = ("dev", "ipcm")) -> None:
        self.root = copy_host("mlu370-x8", tmp_path)
        if no_smlu:  # before anything loads the library
            (self.root / LIB).unlink()
            build_without_smlu(self.root / LIB)
        outcome = detect_one(self.root, "cambricon")
        assert isinstance(outcome, Detected)
        self.group: DevicesGroup = outcome.groups[0]
        dev = self.root / "dev"
        (dev / "cambricon-caps").mkdir(parents=True)
        for i in range(8):
            for kind in nodes:
                (dev / f"cambricon_{kind}{i}").write_text("")
            for mi in range(1, 4):
                (dev / "cambricon-caps" / f"cap_dev{i}_mi{mi}").write_text("")
        (dev / "cambricon_ctl").write_text("")
        host_root = HostRoot(self.root)
        resolved = resolve_manufacturers(["cambricon"])["cambricon"]
        detect = DetectContext(view=host_root, pci=scan_pci(host_root), settings=load_settings(), manufacturer=resolved)
        self.host_dir = tmp_path / "host"
        self.host_dir.mkdir()
        self.ctx = RespondContext(view=host_root, host=HostRoot(self.host_dir), settings=load_settings(), detect=detect)

    def grant(
        self,
        family: Family,
        *indexes: int,
        container: str = "main",
        group: DevicesGroup | None = None,
        budget: SliceBudget | None = None,
    ) -> Grant:
        g = group or self.group
        return Grant(
            manufacturer="cambricon",
            family=family,
            accelerators=tuple(Granted(g, g.accelerators[i]) for i in indexes),
            container=ContainerRef(namespace="ns", pod="p", pod_uid="uid-1", container=container),
            budget=budget if budget is not None else (SliceBudget(30, 12288) if family is Family.SLICED else None),
        )

    def kv(self, key: str) -> str | None:
        for line in (self.root / FIXTURE).read_text().splitlines():
            if line.startswith(key + "="):
                return line.split("=", 1)[1]
        return None


def devices(injection: object) -> list[str]:
    return [d.host_path for d in injection.devices]  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_whole_card_nodes_control_once_and_visible_devices(tmp_path: Path, mode: Family) -> None:
    node = Node(tmp_path)
    injection = RESPONDER.respond(node.grant(mode, 1, 4), node.ctx)
    assert devices(injection) == [
        "/dev/cambricon_dev1",
        "/dev/cambricon_ipcm1",
        "/dev/cambricon_dev4",
        "/dev/cambricon_ipcm4",
        "/dev/cambricon_ctl",
    ]
    assert injection.envs == {"CAMBRICON_VISIBLE_DEVICES": "1,4"}


def test_the_driver_index_names_the_node(tmp_path: Path) -> None:
    node = Node(tmp_path)
    group = node.group.model_copy(deep=True)
    group.accelerators[2].physical_indexes = [5]  # an earlier card failed a probe
    injection = RESPONDER.respond(node.grant(Family.EXCLUSIVE, 2, group=group), node.ctx)
    assert devices(injection)[0] == "/dev/cambricon_dev5" and injection.envs["CAMBRICON_VISIBLE_DEVICES"] == "5"


def test_only_the_optional_nodes_the_host_exposes(tmp_path: Path) -> None:
    node = Node(tmp_path, nodes=("dev",))
    (node.root / "dev/commu0").write_text("")
    (node.root / "dev/cambr-msgq:0").write_text("")
    (node.root / "dev/cambricon_gdr").write_text("")
    injection = RESPONDER.respond(node.grant(Family.EXCLUSIVE, 0), node.ctx)
    assert devices(injection) == [
        "/dev/cambricon_dev0",
        "/dev/commu0",
        "/dev/cambr-msgq:0",
        "/dev/cambricon_ctl",
        "/dev/cambricon_gdr",
    ]


@pytest.mark.parametrize("mode", [Family.EXCLUSIVE, Family.SLICED])
def test_a_card_without_its_node_fails_the_allocation(tmp_path: Path, mode: Family) -> None:
    node = Node(tmp_path)
    (node.root / "dev/cambricon_dev3").unlink()
    with pytest.raises(RefusedError, match="/dev/cambricon_dev3 does not exist"):
        RESPONDER.respond(node.grant(mode, 3), node.ctx)
    assert node.kv("device.3.smlu") == "0"  # nothing was switched on for a card that cannot be served


def test_sliced_turns_smlu_on_and_injects_the_instance(tmp_path: Path) -> None:
    node = Node(tmp_path)
    injection = RESPONDER.respond(node.grant(Family.SLICED, 2), node.ctx)
    assert node.kv("device.2.smlu") == "1"
    assert node.kv("device.2.profile.0") == f"30:{12288 << 20}:16:15"
    assert devices(injection) == [
        "/dev/cambricon_dev2",
        "/dev/cambricon_ipcm2",
        "/dev/cambricon-caps/cap_dev2_mi1",
        "/dev/cambricon_ctl",
    ]
    assert injection.envs == {
        "VIRTUAL_DEVICES": "/dev/cambricon_dev2,/dev/cambricon_ipcm2,/dev/cambricon-caps/cap_dev2_mi1"
    }
    assert any("cnmon set -c 2 -smlu on" in line for line in injection.log)
    record = json.loads((node.host_dir / node.ctx.pod_dir("uid-1", "main", "smlu.json").lstrip("/")).read_text())
    assert record["instances"][0]["handle"] == (1 << 8) | 2 and record["instances"][0]["profile"] == 0


def test_smlu_already_on_is_not_written(tmp_path: Path) -> None:
    node = Node(tmp_path)
    edit_kv_fixture(node.root / FIXTURE, device_0_smlu_set_error=13)  # a write would fail
    injection = RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert injection.log == [] and "/dev/cambricon-caps/cap_dev0_mi1" in devices(injection)


def test_a_retried_container_gets_its_own_instance_back_and_profiles_are_reused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = RESPONDER.respond(node.grant(Family.SLICED, 1), node.ctx)
    again = RESPONDER.respond(node.grant(Family.SLICED, 1), node.ctx)
    assert first == again
    assert node.kv("device.1.smlu.2") is None  # no second instance
    other = RESPONDER.respond(node.grant(Family.SLICED, 1, container="second"), node.ctx)
    assert "/dev/cambricon-caps/cap_dev1_mi2" in devices(other)
    assert node.kv("device.1.profiles") == "1"  # same figures: the profile is reused
    RESPONDER.respond(node.grant(Family.SLICED, 1, container="third", budget=SliceBudget(50, 4096)), node.ctx)
    assert node.kv("device.1.profiles") == "2"


def test_no_smlu_api_refuses_without_a_command(tmp_path: Path) -> None:
    node = Node(tmp_path, no_smlu=True)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)
    assert "no sMLU API" in err.value.message and "cnmon" not in err.value.message


def test_smlu_write_failure_names_pci_index_and_cnmon(tmp_path: Path) -> None:
    node = Node(tmp_path)
    edit_kv_fixture(node.root / FIXTURE, device_3_smlu_set_error=13)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(node.grant(Family.SLICED, 3), node.ctx)
    message = err.value.message
    assert "PCI 0000:41:00.0" in message and "cnDev index 3" in message
    assert "cnmon set -c 3 -smlu on" in message and "CNDEV_ERROR_NO_PERMISSION" in message
    assert node.kv("device.3.smlu") == "0"


@pytest.mark.parametrize("key", ["profile_create_error", "instance_create_error"])
def test_profile_or_instance_failure_is_refused(tmp_path: Path, key: str) -> None:
    node = Node(tmp_path)
    edit_kv_fixture(node.root / FIXTURE, **{f"device_0_{key}": 15})
    with pytest.raises(RefusedError, match=r"sMLU instance \(30% cores, 12288 MiB\) could not be made"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)


def test_missing_instance_node_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    (node.root / "dev/cambricon-caps/cap_dev0_mi1").unlink()
    with pytest.raises(RefusedError, match="cap_dev0_mi1 does not exist"):
        RESPONDER.respond(node.grant(Family.SLICED, 0), node.ctx)


def test_reclaim_destroys_a_gone_pods_smlu_instances(tmp_path: Path) -> None:
    """The reclaimer (called by the allocator once the Pod is gone) destroys exactly the instances the
    Pod's containers recorded, in the stand-in's own state; a second reclaim finds nothing to do."""
    node = Node(tmp_path)
    RESPONDER.respond(node.grant(Family.SLICED, 1), node.ctx)
    RESPONDER.respond(node.grant(Family.SLICED, 1, container="second"), node.ctx)
    assert node.kv("device.1.smlu.1") and node.kv("device.1.smlu.2")
    done = RESPONDER.reclaim("uid-1", node.ctx)
    assert len(done) == 2 and all("destroyed" in line for line in done)
    assert not node.kv("device.1.smlu.1") and not node.kv("device.1.smlu.2")
    assert RESPONDER.reclaim("uid-1", node.ctx) == []
    assert RESPONDER.reclaim("another-pod", node.ctx) == []


def test_reclaim_of_an_unreadable_record_is_refused(tmp_path: Path) -> None:
    node = Node(tmp_path)
    RESPONDER.respond(node.grant(Family.SLICED, 1), node.ctx)
    (node.host_dir / node.ctx.pod_dir("uid-1", "main", "smlu.json").lstrip("/")).write_text("[[[")
    with pytest.raises(RefusedError, match="cannot be read"):
        RESPONDER.reclaim("uid-1", node.ctx)
    assert node.kv("device.1.smlu.1")  # nothing destroyed on a guess


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("index", float("inf")),  # json.dumps writes Infinity, which json.loads reads back
        ("index", float("nan")),
        ("index", 10**30),
        ("index", 256),  # a handle is instance << 8 | index: an index is one byte
        ("index", -1),
        ("index", "1"),
        ("index", True),
        ("name", "vendor-made"),  # not a name this responder gives an instance: never destroyed
        ("name", 7),
        ("instances", {"index": 1}),
    ],
)
def test_reclaim_refuses_a_record_no_slice_of_ours_could_have_written(
    tmp_path: Path, field: str, value: object
) -> None:
    """A gone Pod's record with a value the responder never writes is refused naming the file (the
    allocator keeps the directory and retries), never an exception, and nothing is destroyed."""
    node = Node(tmp_path)
    RESPONDER.respond(node.grant(Family.SLICED, 1), node.ctx)
    edit_kv_fixture(node.root / FIXTURE, **{"device.1.smlu.2": "0:vendor-made"})  # someone else's instance
    path = node.host_dir / node.ctx.pod_dir("uid-1", "main", "smlu.json").lstrip("/")
    doc = json.loads(path.read_text())
    if field == "instances":
        doc["instances"] = value
    else:
        doc["instances"][0][field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(RefusedError) as err:
        RESPONDER.reclaim("uid-1", node.ctx)
    assert "/pods/uid-1/main/smlu.json" in err.value.message
    assert node.kv("device.1.smlu.1") and node.kv("device.1.smlu.2") == "0:vendor-made"
