"""A non-regular file where a responder's per-slice record is expected (issue 16: "every host read
refuses non-regular files and never blocks"): a FIFO, a socket, a directory or a character device at
a neighbour's record or a gone Pod's record is refused at once, naming the file -- never a hang (the
allocation runs under the node-wide lock), never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.amd import respond as amd
from gpustack_operator.manufacturers.ascend import respond as ascend
from gpustack_operator.manufacturers.cambricon import respond as cambricon
from gpustack_operator.manufacturers.hygon import respond as hygon
from gpustack_operator.manufacturers.metax import respond as metax
from gpustack_operator.manufacturers.respond import RefusedError, RespondContext
from gpustack_operator.settings import Settings

from tests.unit.nonregular import KINDS, no_leftover_fifo_readers, plant, within

PODS = "var/lib/gpustack/operator/pods"
CALLS: dict[str, tuple[str, Callable[[RespondContext, str], object]]] = {
    "cambricon-reclaim": ("main/smlu.json", lambda ctx, path: cambricon.reclaim("gone", ctx)),
    "metax-reclaim": ("metax-sgpu.main.json", lambda ctx, path: metax.reclaim("gone", ctx)),
    "metax-neighbours": (
        "metax-sgpu.main.json",
        lambda ctx, path: metax.neighbour_indexes(ctx, "/elsewhere", "0000:0f:00.0"),
    ),
    "amd-neighbours": ("amd-cumask.main.json", lambda ctx, path: amd.neighbour_windows(ctx, "/elsewhere")),
    "hygon-neighbours": ("main/hygon-vdev/vdev0.conf", lambda ctx, path: hygon.neighbours(ctx, "/elsewhere")),
    "ascend-neighbours": ("main/npu_info.config", lambda ctx, path: ascend.neighbour_ids(ctx, "/elsewhere")),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", sorted(CALLS))
def test_a_non_regular_record_is_refused_at_once(tmp_path: Path, reader: str, kind: str) -> None:
    where, call = CALLS[reader]
    plant(tmp_path / PODS / "gone" / where, kind)
    root = HostRoot(tmp_path)
    ctx = RespondContext(view=root, host=root, settings=Settings())
    path = f"/{PODS}/gone/{where}"
    with no_leftover_fifo_readers(tmp_path), pytest.raises(RefusedError) as err:
        within(tmp_path, lambda: call(ctx, path))
    assert path in err.value.message, err.value.message
