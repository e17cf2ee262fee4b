"""Moore Threads' responder (manufacturers/mthreads/respond.py): MTHREADS_VISIBLE_DEVICES (the driver
index) for every family it serves, the sGPU QoS env for a slice, no library, no mounts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.mthreads.respond import RESPONDER
from gpustack_operator.manufacturers.respond import (
    ContainerRef,
    Family,
    Grant,
    Granted,
    PartitionInstance,
    RefusedError,
    SliceBudget,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.respond.test_nvidia import staged

# logical index i, MTML index 2 + i: an earlier card failed its probe, so the two differ
GROUP = DevicesGroup(
    id="mtt-s4000",
    manufacturer="mthreads",
    name="MTT S4000",
    memory=49152,
    accelerators=[Accelerator(id=f"MT-{i}", index=i, physical_indexes=[i + 2]) for i in range(6)],
)


def grant(family: Family, indexes: tuple[int, ...], budget: SliceBudget | None = None, **kw: Any) -> Grant:
    ctr = ContainerRef(namespace="ns", pod="p", pod_uid="u", container="c", env={"MTHREADS_QOS_X": "1"})
    return Grant(
        manufacturer="mthreads",
        family=family,
        accelerators=tuple(Granted(group=GROUP, accelerator=GROUP.accelerators[i]) for i in indexes),
        container=ctr,
        budget=budget,
        **kw,
    )


def test_registered_families() -> None:
    assert REGISTRY["mthreads"].responder is RESPONDER
    assert RESPONDER.families == {Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY}


@pytest.mark.parametrize("family", [Family.EXCLUSIVE, Family.SHARED, Family.VISIBILITY])
@pytest.mark.parametrize("indexes", [(0,), (1, 4), (0, 1, 2, 3, 4, 5)])
def test_whole_cards_are_the_driver_indexes(tmp_path: Path, family: Family, indexes: tuple[int, ...]) -> None:
    out = RESPONDER.respond(grant(family, indexes), staged(tmp_path))
    assert out.envs == {"MTHREADS_VISIBLE_DEVICES": ",".join(str(i + 2) for i in indexes)}
    assert (out.mounts, out.devices, out.annotations) == ([], [], {})


@given(st.integers(1, 49152), st.integers(1, 100))
def test_sliced_qos_env(memory: int, cores: int) -> None:
    from gpustack_operator.host import HostRoot
    from gpustack_operator.manufacturers.respond import RespondContext
    from gpustack_operator.settings import load_settings

    ctx = RespondContext(view=HostRoot("/"), host=HostRoot("/"), settings=load_settings({}))
    out = RESPONDER.respond(grant(Family.SLICED, (3,), SliceBudget(cores_percent=cores, memory_mib=memory)), ctx)
    assert out.envs == {
        "MTHREADS_QOS_MEMORY_LIMIT": str(memory << 20),
        "MTHREADS_QOS_COMPUTING_POWER_WEIGHT": str(cores),
        "MTHREADS_VISIBLE_DEVICES": "5",
    }
    assert out.mounts == [] and out.devices == []


def test_sliced_reference_figure(tmp_path: Path) -> None:
    """Half of a 48 GiB S4000 is 24576 MiB = 25769803776 bytes."""
    out = RESPONDER.respond(
        grant(Family.SLICED, (0,), SliceBudget(cores_percent=8, memory_mib=49152 // 2)), staged(tmp_path)
    )
    assert out.envs["MTHREADS_QOS_MEMORY_LIMIT"] == "25769803776"
    assert out.envs["MTHREADS_QOS_COMPUTING_POWER_WEIGHT"] == "8"


@pytest.mark.parametrize(
    ("budget", "match"),
    [(None, "no slice budget"), (SliceBudget(cores_percent=50, memory_mib=0), "memory budget is 0 MiB")],
)
def test_sliced_refusals(tmp_path: Path, budget: SliceBudget | None, match: str) -> None:
    with pytest.raises(RefusedError, match=match):
        RESPONDER.respond(grant(Family.SLICED, (0,), budget), staged(tmp_path))


@pytest.mark.parametrize("family", [Family.PARTITIONED, Family.VISIBILITY])
def test_partitions_are_refused(tmp_path: Path, family: Family) -> None:
    instance = PartitionInstance(accelerator="MT-0", profile="x", uuid="MIG-x")
    with pytest.raises(RefusedError):
        RESPONDER.respond(grant(family, (0,), partition=instance), staged(tmp_path))


def test_empty_grant_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="names no accelerator"):
        RESPONDER.respond(grant(Family.EXCLUSIVE, ()), staged(tmp_path))
