"""ledger/podrecords.py, the per-pod records a driver-mode change reads to refuse turning a mode off
under held slices: a pods directory that cannot be listed is never "nothing is held" (issue 16, a
non-regular file where a host directory is expected)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.podrecords import PODS_DIR, holders, read_pod_records

from tests.unit.nonregular import KINDS, no_leftover_fifo_readers, plant, within


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "directory"] + ["file"])
def test_a_pods_directory_that_cannot_be_listed_holds_slices_of_every_manufacturer(tmp_path: Path, kind: str) -> None:
    pods = tmp_path / PODS_DIR.lstrip("/")
    if kind == "file":
        pods.parent.mkdir(parents=True)
        pods.write_text("not a directory\n")
    else:
        plant(pods, kind)
    host = HostRoot(tmp_path)
    with no_leftover_fifo_readers(tmp_path):
        records = within(tmp_path, lambda: read_pod_records(host))
    (record,) = records
    assert record.manufacturer is None and record.problem and PODS_DIR in record.problem
    assert holders(host, "cambricon", {"MLU-0"}) == records  # unknown: held, the refusal names it
    assert PODS_DIR in record.label()


def test_no_pods_directory_is_no_records(tmp_path: Path) -> None:
    assert read_pod_records(HostRoot(tmp_path)) == []
