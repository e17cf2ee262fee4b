"""The allocator's node-local per-pod records under ``/var/lib/gpustack/operator/pods``.

Each Pod the allocator served a slice to has a working directory ``pods/<pod uid>/`` (reclaimed when
the Pod is gone). Its ``allocation.json`` names what it holds::

    {"pod": "<namespace>/<name>", "manufacturer": "ascend", "mode": "sliced",
     "accelerators": ["<accelerator id>", ...]}

A directory without a readable record still counts as held (by an unknown manufacturer): a record
this code cannot read is never taken as "nothing is held". Preflight never writes here.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field, ValidationError

from gpustack_operator.host import HostPathError, HostRoot

PODS_DIR = "/var/lib/gpustack/operator/pods"


class PodRecord(BaseModel):
    uid: str
    pod: str | None = None
    manufacturer: str | None = None  # None: the record could not be read
    mode: str | None = None
    accelerators: list[str] = Field(default_factory=list)
    problem: str | None = None

    def label(self) -> str:
        name = self.pod or "unknown pod"
        return f"{name} (uid {self.uid})" + (f" [{self.problem}]" if self.problem else "")


class _Allocation(BaseModel):
    pod: str | None = None
    manufacturer: str
    mode: str | None = None
    accelerators: list[str] = Field(default_factory=list)


def read_pod_records(host: HostRoot) -> list[PodRecord]:
    """Every pod directory's record; a missing pods directory is no records. A pods directory that
    cannot be listed (not a directory -- a file, a FIFO, a device -- or unreadable) is one unreadable
    record: what it holds is unknown, which is never "nothing is held"."""
    if not host.exists(PODS_DIR):
        return []
    try:
        uids = host.listdir(PODS_DIR)
    except HostPathError as exc:
        return [PodRecord(uid="?", problem=f"the pods directory cannot be listed: {exc}")]
    records: list[PodRecord] = []
    for uid in uids:
        path = f"{PODS_DIR}/{uid}/allocation.json"
        try:
            raw = host.read_text(path)
            alloc = _Allocation.model_validate(json.loads(raw))
        except (HostPathError, ValueError, ValidationError, RecursionError) as exc:  # Recursion: [[[[...
            problem = "no allocation record" if isinstance(exc, HostPathError) else f"unreadable record: {exc}"
            records.append(PodRecord(uid=uid, problem=problem.splitlines()[0]))
            continue
        records.append(PodRecord(uid=uid, **alloc.model_dump()))
    return records


def holders(host: HostRoot, manufacturer: str, accelerators: set[str] | None = None) -> list[PodRecord]:
    """Pods that hold slices of ``manufacturer`` (on ``accelerators`` when given). Unreadable records
    count as holders: refusing wrongly costs a ``force``; proceeding wrongly strands a running Pod."""
    held = []
    for record in read_pod_records(host):
        if record.manufacturer is None or (
            record.manufacturer == manufacturer
            and (accelerators is None or not record.accelerators or accelerators & set(record.accelerators))
        ):
            held.append(record)
    return held
