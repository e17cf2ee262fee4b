"""MetaX's responder (manufacturers/metax/respond.py) over a copy of metax-c500: the device nodes of
every family, and the sliced sGPU path through the sysfs registry -- a temp tree, so what is asserted
is what the responder writes to ``sched_class`` / ``create`` and what it injects. In the fixture GPU 0
(0000:0e:00.0) hosts sgpu0 and sgpu1 under fixed-share; the others have an empty registry under
best-effort."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.metax.respond import RESPONDER
from gpustack_operator.manufacturers.respond import Family, Grant, RefusedError, RespondContext
from gpustack_operator.settings import Settings

from tests.conftest import copy_host
from tests.stubs.keyvalue import detect_one
from tests.unit.respond.test_amd import grant, paths

PODS = "var/lib/gpustack/operator/pods"
DEVICES = "sys/bus/pci/devices"


def make_node(tmp_path: Path, optional: bool = False) -> Path:
    root = copy_host("metax-c500", tmp_path)
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/mxcd").write_text("")
    if optional:
        (root / "dev/mxnd").write_text("")
        (root / "dev/mxgd").write_text("")
    for n in range(1, 9):
        (root / f"dev/dri/card{n}").write_text("")
        (root / f"dev/dri/renderD{127 + n}").write_text("")
    return root


def group_of(root: Path) -> DevicesGroup:
    outcome = detect_one(root, "metax")
    (group,) = outcome.groups  # type: ignore[union-attr]
    return group


def context(root: Path) -> RespondContext:
    return RespondContext(view=HostRoot(root), host=HostRoot(root), settings=Settings())


def sliced(group: DevicesGroup, index: int, cores: int, memory: int = 32768, uid: str = "pod-a") -> Grant:
    return grant(group, [index], Family.SLICED, cores=cores, memory=memory, uid=uid, manufacturer="metax")


def registry(root: Path, bus: str) -> Path:
    return root / DEVICES / bus / "sgpu"


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
def test_plain_injection(tmp_path: Path, family: Family) -> None:
    root = make_node(tmp_path)
    injection = RESPONDER.respond(grant(group_of(root), [0, 3], family, manufacturer="metax"), context(root))
    assert paths(injection) == [
        "/dev/mxcd",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
        "/dev/dri/card4",
        "/dev/dri/renderD131",
    ]
    assert injection.envs == {} and injection.mounts == []


def test_optional_nodes_are_added_when_present(tmp_path: Path) -> None:
    root = make_node(tmp_path, optional=True)
    injection = RESPONDER.respond(grant(group_of(root), [1], manufacturer="metax"), context(root))
    assert paths(injection) == ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd", "/dev/dri/card2", "/dev/dri/renderD129"]


@pytest.mark.parametrize("missing", ["dev/mxcd", "dev/dri/card2", "dev/dri/renderD129"])
def test_a_missing_device_node_refuses_and_creates_nothing(tmp_path: Path, missing: str) -> None:
    root = make_node(tmp_path)
    (root / missing).unlink()
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root), 1, 50), context(root))
    assert f"/{missing} does not exist" in err.value.message
    assert registry(root, "0000:0f:00.0").joinpath("create").read_text() == ""


def test_a_slice_sets_fixed_share_and_creates_a_subdevice(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    injection = RESPONDER.respond(sliced(group, 1, 60), context(root))
    reg = registry(root, "0000:0f:00.0")
    assert reg.joinpath("sched_class").read_text() == "1\n"  # was best-effort, no subdevice in use
    alias = "gpustack-pod-a-main"
    assert reg.joinpath("create").read_text() == f"index=0 compute=60 vram=32768 alias={alias}\n"
    assert injection.envs == {"METAX_SGPUS": f"sgpu=0000:0f:00.0#0;compute=60;vram=32768;alias={alias}"}
    assert paths(injection) == ["/dev/mxcd", "/dev/dri/card2", "/dev/dri/renderD129"]


def test_the_index_skips_live_subdevices_and_neighbours(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    ctx = context(root)
    first = RESPONDER.respond(sliced(group, 0, 25, uid="a"), ctx)  # sgpu0, sgpu1 exist
    assert first.envs["METAX_SGPUS"].startswith("sgpu=0000:0e:00.0#2;compute=25;")
    second = RESPONDER.respond(sliced(group, 0, 25, uid="b"), ctx)  # a's sgpu2 not listed yet: its record
    assert second.envs["METAX_SGPUS"].startswith("sgpu=0000:0e:00.0#3;")


def test_a_retry_reuses_the_subdevice(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    ctx = context(root)
    reg = registry(root, "0000:0f:00.0")
    first = RESPONDER.respond(sliced(group, 1, 50), ctx)
    (reg / "sgpu0").mkdir()  # the driver listed it
    (reg / "create").write_text("")
    again = RESPONDER.respond(sliced(group, 1, 50), ctx)
    assert again.envs == first.envs
    assert (reg / "create").read_text() == ""  # no second subdevice


def test_a_retry_with_another_budget_fails_closed(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    ctx = context(root)
    RESPONDER.respond(sliced(group, 1, 50), ctx)
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group, 1, 70), ctx)
    assert "a live subdevice is never changed" in err.value.message


def test_a_class_other_than_fixed_share_under_live_subdevices_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    reg = registry(root, "0000:0e:00.0")
    (reg / "sched_class").write_text("2\n")
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root), 0, 50), context(root))
    assert "burst-share" in err.value.message and "cannot change while one is in use" in err.value.message
    assert (reg / "sched_class").read_text() == "2\n" and (reg / "create").read_text() == ""


def test_a_gpu_without_a_registry_cannot_be_sliced(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    shutil.rmtree(registry(root, "0000:10:00.0"))
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root), 2, 50), context(root))
    assert "no sgpu registry at /sys/bus/pci/devices/0000:10:00.0/sgpu" in err.value.message


def test_all_subdevices_in_use_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    reg = registry(root, "0000:0e:00.0")
    for n in range(2, 16):
        (reg / f"sgpu{n}").mkdir()
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root), 0, 50), context(root))
    assert "all 16 sgpu subdevices are in use" in err.value.message


def test_a_corrupt_neighbour_record_fails_closed(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    bad = root / PODS / "other/metax-sgpu.main.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"bus_id": 3}')
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(sliced(group_of(root), 1, 50), context(root))
    assert f"/{PODS}/other/metax-sgpu.main.json" in err.value.message
    assert registry(root, "0000:0f:00.0").joinpath("create").read_text() == ""


def test_a_whole_gpu_slice_takes_the_native_path(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    injection = RESPONDER.respond(sliced(group, 1, 100, memory=group.memory), context(root))
    assert injection.envs == {} and any("native path" in line for line in injection.log)
    assert registry(root, "0000:0f:00.0").joinpath("create").read_text() == ""


def test_more_than_one_gpu_sliced_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    g = grant(group_of(root), [0, 1], Family.SLICED, cores=50, manufacturer="metax")
    with pytest.raises(RefusedError) as err:
        RESPONDER.respond(g, context(root))
    assert "exactly one GPU" in err.value.message


def test_reclaim_destroys_the_gone_pods_listed_subdevices(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    group = group_of(root)
    ctx = context(root)
    reg = registry(root, "0000:0f:00.0")
    RESPONDER.respond(sliced(group, 1, 50, uid="gone"), ctx)
    (reg / "sgpu0").mkdir()  # the driver listed it
    (reg / "destroy").write_text("")
    done = RESPONDER.reclaim("gone", ctx)
    assert (reg / "destroy").read_text() == "0\n"
    assert done == ["sgpu0 on 0000:0f:00.0 destroyed (gpustack-gone-main: its Pod is gone)"]
    assert RESPONDER.reclaim("never-sliced", ctx) == []


def test_reclaim_skips_a_subdevice_the_driver_no_longer_lists(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    ctx = context(root)
    RESPONDER.respond(sliced(group_of(root), 1, 50, uid="gone"), ctx)
    (registry(root, "0000:0f:00.0") / "destroy").write_text("")
    assert RESPONDER.reclaim("gone", ctx) == []
    assert (registry(root, "0000:0f:00.0") / "destroy").read_text() == ""


def test_reclaim_of_an_unreadable_record_is_refused(tmp_path: Path) -> None:
    root = make_node(tmp_path)
    ctx = context(root)
    RESPONDER.respond(sliced(group_of(root), 1, 50, uid="gone"), ctx)
    (root / ctx.pod_dir("gone", "metax-sgpu.main.json").lstrip("/")).write_text("{not json")
    with pytest.raises(RefusedError, match="what it made is unknown"):
        RESPONDER.reclaim("gone", ctx)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bus_id", "../../../../elsewhere"),  # a record is never a path: only a PCI address names a GPU
        ("bus_id", "0000:0f:00.0/../../../../elsewhere"),
        ("index", 16),  # the driver's DefaultDevCnt: sgpu0..sgpu15
        ("index", -1),
        ("index", True),
        ("compute", 0),
        ("compute", 101),
    ],
)
def test_reclaim_refuses_a_record_no_slice_of_ours_could_have_written(
    tmp_path: Path, field: str, value: object
) -> None:
    """A record field outside what the responder writes is corruption: the reclaim is refused naming
    the file (the directory is kept) and nothing is written to any registry."""
    root = make_node(tmp_path)
    ctx = context(root)
    RESPONDER.respond(sliced(group_of(root), 1, 50, uid="gone"), ctx)
    record = root / ctx.pod_dir("gone", "metax-sgpu.main.json").lstrip("/")
    doc = json.loads(record.read_text())
    doc[field] = value
    record.write_text(json.dumps(doc))
    planted = root / "elsewhere/sgpu"  # what a path-shaped bus id would reach
    (planted / "sgpu0").mkdir(parents=True)
    (registry(root, "0000:0f:00.0") / "sgpu0").mkdir()
    for reg in (planted, registry(root, "0000:0f:00.0")):
        (reg / "destroy").write_text("")
    with pytest.raises(RefusedError) as err:
        RESPONDER.reclaim("gone", ctx)
    assert f"{PODS}/gone/metax-sgpu.main.json" in err.value.message and field in err.value.message
    assert (planted / "destroy").read_text() == "" and (registry(root, "0000:0f:00.0") / "destroy").read_text() == ""
