"""The responders' per-slice host records under hostile bytes (issue 16, "Hostile input never escapes,
hangs or crashes"): every reader a reclaim or a neighbour read goes through -- Cambricon's
``smlu.json``, MetaX's ``metax-sgpu.<c>.json``, AMD's ``amd-cumask.<c>.json``, Hygon's ``vdev0.conf``,
Ascend's ``npu_info.config`` -- answers a record it cannot read with a refusal naming the file (the
allocator then logs it, keeps the Pod's directory and retries the reclaim), never any other exception:
``Infinity``, ``NaN``, numbers past any range, wrong types, deep nesting, undecodable bytes, real
records cut and spliced.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
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
from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.hostile import hostile_numbers, hostile_text, mutated

pytestmark = pytest.mark.hostile

PODS = "var/lib/gpustack/operator/pods"
UID = "gone-pod"

REAL = {
    "cambricon": json.dumps(
        {
            "instances": [
                {
                    "accelerator": "MLU-869a0f4b-c546-4b8a-3eec-c848b1557970",
                    "index": 2,
                    "profile": 0,
                    "instance": 1,
                    "handle": 258,
                    "name": "gpustack-0123456789abcdef01234567",
                    "node": "/dev/cambricon-caps/cap_dev2_mi1",
                }
            ]
        },
        indent=2,
    ),
    "metax": json.dumps(
        {"bus_id": "0000:0f:00.0", "index": 3, "compute": 60, "vram_mib": 32768, "alias": "gpustack-uid-main"}
    ),
    "amd": json.dumps({"accelerators": {"GPU-5a3f0c9d21e4b871": [12, 23]}}),
    "hygon": (
        "PciBusId: 0000:01:00.0\ncu_mask: 0x0000000000000fff\ncu_mask: 0x0000000000000000\ncu_count: 12\n"
        "mem: 16380 MiB\ndevice_id: 0\nvdev_id: 0\npipe_id: 0\nenable: 1\n"
    ),
    "ascend": (
        "physical-npu-id=0\nvirtual-npu-id=3\naicore-quota=25\nmemory-quota=16384\nshm-id=NPU-1\nscheduling-policy=2\n"
    ),
}
WHERE = {  # the record's path under the Pod's directory
    "cambricon": "main/smlu.json",
    "metax": "metax-sgpu.main.json",
    "amd": "amd-cumask.main.json",
    "hygon": "main/hygon-vdev/vdev0.conf",
    "ascend": "main/npu_info.config",
}

# JSON values a record's fields should never hold; json.dumps writes the non-finite floats as
# Infinity / NaN, which json.loads (and a careless reader) accepts.
_VALUES = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -0.0, 2.5, True, False, None, "", "1", "0x10", "١٢٣"]),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _json_with(value: object, key: str, real: str) -> str:
    """The real record with every field named ``key`` (at any depth) replaced by ``value``."""

    def swap(node: object) -> object:
        if isinstance(node, dict):
            return {k: (value if k == key else swap(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    return json.dumps(swap(json.loads(real)))


KEYS = {
    "cambricon": ["instances", "accelerator", "index", "profile", "instance", "handle", "name", "node"],
    "metax": ["bus_id", "index", "compute", "vram_mib", "alias"],
    "amd": ["accelerators", "GPU-5a3f0c9d21e4b871"],
}


def records(vendor: str) -> st.SearchStrategy[str]:
    real = REAL[vendor]
    texts = st.one_of(st.just(real), mutated(real), hostile_text(), hostile_numbers())
    if vendor in KEYS:
        texts = texts | st.builds(_json_with, _VALUES, st.sampled_from(KEYS[vendor]), st.just(real))
    if vendor == "amd":
        texts = texts | st.builds(lambda n: real.replace("[12, 23]", f"[0, {n}]"), st.sampled_from(["1e999", "NaN"]))
    return texts


@cache
def node(vendor: str) -> tuple[Path, RespondContext]:
    """A host whose pods directory holds one record of ``vendor`` for the Pod ``UID`` (no vendor
    library in the view: a record that reads cleanly is refused for the missing library, fast); one
    per vendor, its record rewritten by each example."""
    shm = Path("/dev/shm")  # in memory where there is one: the deadline measures the reader, not a busy disk
    memory = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix=f"hostile-records-{vendor}-", dir=memory))
    atexit.register(shutil.rmtree, root, True)
    record = root / PODS / UID / WHERE[vendor]
    record.parent.mkdir(parents=True)
    host = HostRoot(root)
    return record, RespondContext(view=host, host=host, settings=Settings())


def total(call: Callable[[], object], path: str) -> None:
    """``call`` answers or refuses naming ``path``; any other exception fails the property."""
    try:
        call()
    except RefusedError as exc:
        assert exc.message and len(exc.message.splitlines()) == 1, exc.message
        assert path in exc.message or "libcndev.so" in exc.message, exc.message


def _run(vendor: str, text: str, call: Callable[[RespondContext], object]) -> None:
    record, ctx = node(vendor)
    record.write_bytes(text.encode("utf-8", "surrogatepass"))
    total(lambda: call(ctx), f"/{PODS}/{UID}/{WHERE[vendor]}")


@given(text=records("cambricon"))
@example(text=REAL["cambricon"].replace('"index": 2', '"index": Infinity'))
@example(text=REAL["cambricon"].replace('"index": 2', '"index": 1e400'))
@example(text=REAL["cambricon"].replace('"index": 2', '"index": 99999999999999999999999'))
def test_cambricon_reclaim_reads_any_smlu_record(text: str) -> None:
    _run("cambricon", text, lambda ctx: cambricon.reclaim(UID, ctx))


@given(text=records("metax"))
@example(text=REAL["metax"].replace('"index": 3', '"index": Infinity'))
def test_metax_reclaim_and_neighbour_read_any_sgpu_record(text: str) -> None:
    _run("metax", text, lambda ctx: metax.reclaim(UID, ctx))
    _run("metax", text, lambda ctx: metax.neighbour_indexes(ctx, "/elsewhere", "0000:0f:00.0"))


@given(text=records("amd"))
@example(text=REAL["amd"].replace("[12, 23]", "[0, Infinity]"))
@example(text='{"accelerators":{"\\n":0}}')  # a key the record holds is quoted in the refusal
@example(text='{"accelerators":{"\\u2028":0}}')
def test_amd_neighbour_read_of_any_cumask_record(text: str) -> None:
    _run("amd", text, lambda ctx: amd.neighbour_windows(ctx, "/elsewhere"))


@given(text=records("hygon"))
def test_hygon_neighbour_read_of_any_vdev_config(text: str) -> None:
    _run("hygon", text, lambda ctx: hygon.neighbours(ctx, "/elsewhere"))


@given(text=records("ascend"))
@example(text=REAL["ascend"].replace("virtual-npu-id=3", "virtual-npu-id=" + "9" * 5000))
def test_ascend_neighbour_read_of_any_npu_info_config(text: str) -> None:
    path = f"/{PODS}/{UID}/{WHERE['ascend']}"
    _run("ascend", text, lambda ctx: ascend.config_ids(ctx, path))
