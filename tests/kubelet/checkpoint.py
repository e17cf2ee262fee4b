"""The kubelet device manager's checkpoint file, ``<plugin dir>/kubelet_internal_checkpoint``.

Format (``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``)::

    {"Data": {"PodDeviceEntries": [{"PodUID": ..., "ContainerName": ..., "ResourceName": ...,
                                     "DeviceIDs": {"<numa id or -1>": [ids]},
                                     "AllocResp": "<base64 of the serialized ContainerAllocateResponse>"}],
              "RegisteredDevices": {"<resource>": [healthy ids]}},
     "Checksum": <uint32 stored in a uint64>}

The checksum is the kubelet's ``checksum.New(cp.Data)``: FNV-1a 32-bit over
``hashutil.DeepHashObject``'s rendering of the ``checkpointData`` struct, which is go-spew's
``%#v`` with ``SortKeys``, ``DisableMethods`` and ``SpewKeys`` set. :func:`spew` reproduces that
rendering for the one struct the checkpoint holds::

    (checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)<uid>
    ContainerName:(string)<name> ResourceName:(string)<res> DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:[a b]]
    AllocResp:([]uint8)[10 31 ...]}] RegisteredDevices:(map[string][]string)map[<res>:[a b]]}

(one line; a space between fields and between elements). Go's nil and empty differ there: a nil
slice or map prints ``<nil>``, an empty one ``[]`` / ``map[]``; JSON ``null`` is read back as nil and
written for nil, so the checksum of a file round-trips. The kubelet writes ``PodDeviceEntries: null``
when no pod holds a device (its slice is built by ``append`` from nil) -- :func:`encode` does too.
Map keys sort numerically for the NUMA map (``int64`` keys) and bytewise for resource names in the
hash; encoding/json sorts every map by its key's *string* form (``"-1" < "0" < "10" < "2"``).

Verified against two checkpoints written by real kubelets (``tests/unit/test_kubelet_standin.py``).

Divergences from the Go kubelet, all outside the checksum: ``RegisteredDevices`` lists are written
sorted (the kubelet writes a set's unsorted list), strings are JSON-escaped by Python's encoder with
Go's HTML escapes (``<``, ``>``, ``&``, U+2028, U+2029 as ``\\u00XX``) applied on top, and the
version-1 layout (``DeviceIDs`` a flat list, read by kubelets < 1.20) is read but never written.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path

FILE_NAME = "kubelet_internal_checkpoint"
NO_TOPOLOGY = -1  # the kubelet's nodeWithoutTopology


class CheckpointError(Exception):
    """The checkpoint file cannot be read: not JSON, not the layout, or a checksum mismatch."""


@dataclass
class Entry:
    """One ``PodDevicesEntry``: the devices one container holds of one resource."""

    pod_uid: str
    container: str
    resource: str
    devices: dict[int, list[str] | None] | None = field(default_factory=dict)  # NUMA id (or -1) -> ids
    alloc_resp: bytes | None = b""  # serialized v1beta1.ContainerAllocateResponse

    @property
    def device_ids(self) -> list[str]:
        """Every id once, in NUMA order (a device spanning two NUMA nodes is listed under both)."""
        seen: dict[str, None] = {}
        for numa in sorted(self.devices or {}):
            for dev in (self.devices or {})[numa] or []:
                seen.setdefault(dev, None)
        return list(seen)


@dataclass
class Checkpoint:
    entries: list[Entry] | None = None  # None is Go's nil slice (no pod holds a device)
    registered: dict[str, list[str] | None] | None = field(default_factory=dict)
    checksum: int | None = None  # as read; encode() computes its own


def _fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def _strings(values: list[str] | None) -> str:
    return "<nil>" if values is None else "[" + " ".join(values) + "]"


def spew(cp: Checkpoint) -> str:
    """go-spew ``%#v`` of the ``checkpointData`` struct (see the module docstring)."""
    out = ["(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"]
    if cp.entries is None:
        out.append("<nil>")
    else:
        parts = []
        for e in cp.entries:
            if e.devices is None:
                numa = "<nil>"
            else:
                numa = "map[" + " ".join(f"{k}:{_strings(e.devices[k])}" for k in sorted(e.devices)) + "]"
            resp = "<nil>" if e.alloc_resp is None else "[" + " ".join(str(b) for b in e.alloc_resp) + "]"
            parts.append(
                f"{{PodUID:(string){e.pod_uid} ContainerName:(string){e.container} "
                f"ResourceName:(string){e.resource} DeviceIDs:(checkpoint.DevicesPerNUMA){numa} "
                f"AllocResp:([]uint8){resp}}}"
            )
        out.append("[" + " ".join(parts) + "]")
    out.append(" RegisteredDevices:(map[string][]string)")
    if cp.registered is None:
        out.append("<nil>")
    else:
        # Go compares strings bytewise; Python's str order is by code point, which is the same
        # order as UTF-8 bytes.
        out.append("map[" + " ".join(f"{k}:{_strings(cp.registered[k])}" for k in sorted(cp.registered)) + "]")
    out.append("}")
    return "".join(out)


def checksum(cp: Checkpoint) -> int:
    """The kubelet's ``checksum.New(data)``: FNV-1a 32 of the spew rendering."""
    return _fnv1a32(spew(cp).encode("utf-8"))


def _go_json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, esc)
    return text


def encode(cp: Checkpoint) -> bytes:
    """The file's bytes, as ``MarshalCheckpoint`` writes them (the checksum computed here)."""
    entries: list[dict[str, object]] | None = None
    if cp.entries is not None:
        entries = []
        for e in cp.entries:
            devices = None
            if e.devices is not None:
                devices = {str(k): e.devices[k] for k in sorted(e.devices, key=str)}
            entries.append(
                {
                    "PodUID": e.pod_uid,
                    "ContainerName": e.container,
                    "ResourceName": e.resource,
                    "DeviceIDs": devices,
                    "AllocResp": None if e.alloc_resp is None else base64.b64encode(e.alloc_resp).decode(),
                }
            )
    registered = None if cp.registered is None else {k: cp.registered[k] for k in sorted(cp.registered)}
    doc = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered}, "Checksum": checksum(cp)}
    return _go_json(doc).encode("utf-8")


def _str(obj: dict[str, object], key: str, where: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CheckpointError(f"{where}.{key} is {type(value).__name__}, expected a string")
    return value


def _str_list(value: object, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{where} is not a list of strings")
    return list(value)


def _decode_entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict):
        raise CheckpointError(f"{where} is not an object")
    raw_ids = item.get("DeviceIDs")
    devices: dict[int, list[str] | None] | None
    if raw_ids is None:
        devices = None
    elif isinstance(raw_ids, list):  # version-1 layout: a flat list, no topology
        devices = {NO_TOPOLOGY: _str_list(raw_ids, f"{where}.DeviceIDs") or []}
    elif isinstance(raw_ids, dict):
        devices = {}
        for key, ids in raw_ids.items():
            try:
                numa = int(key)
            except ValueError:
                raise CheckpointError(f"{where}.DeviceIDs key {key!r} is not a NUMA id") from None
            devices[numa] = _str_list(ids, f"{where}.DeviceIDs[{key}]")
    else:
        raise CheckpointError(f"{where}.DeviceIDs is neither a map nor a list")
    raw_resp = item.get("AllocResp")
    resp: bytes | None = None
    if raw_resp is not None:
        if not isinstance(raw_resp, str):
            raise CheckpointError(f"{where}.AllocResp is not base64 text")
        try:
            resp = base64.b64decode(raw_resp, validate=True)
        except binascii.Error:
            raise CheckpointError(f"{where}.AllocResp is not base64") from None
    return Entry(
        pod_uid=_str(item, "PodUID", where),
        container=_str(item, "ContainerName", where),
        resource=_str(item, "ResourceName", where),
        devices=devices,
        alloc_resp=resp,
    )


def decode(raw: bytes, *, verify: bool = True) -> Checkpoint:
    """Parse a checkpoint file; with ``verify`` a checksum mismatch raises (as the kubelet's
    ``VerifyChecksum`` does, after which it starts with no allocations)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint is not JSON: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Data"), dict):
        raise CheckpointError('checkpoint has no "Data" object')
    data = doc["Data"]
    cp = Checkpoint(entries=None, registered=None, checksum=doc.get("Checksum"))
    raw_entries = data.get("PodDeviceEntries")
    if raw_entries is not None:
        if not isinstance(raw_entries, list):
            raise CheckpointError("Data.PodDeviceEntries is not a list")
        cp.entries = [_decode_entry(item, f"Data.PodDeviceEntries[{i}]") for i, item in enumerate(raw_entries)]
    raw_reg = data.get("RegisteredDevices")
    if raw_reg is not None:
        if not isinstance(raw_reg, dict):
            raise CheckpointError("Data.RegisteredDevices is not a map")
        cp.registered = {}
        for res, ids in raw_reg.items():
            cp.registered[res] = _str_list(ids, f"Data.RegisteredDevices[{res}]")
    if verify:
        want = checksum(cp)
        if cp.checksum != want:
            raise CheckpointError(f"checkpoint checksum mismatch: file says {cp.checksum}, data hashes to {want}")
    return cp


def read(plugin_dir: Path, *, verify: bool = True) -> Checkpoint | None:
    """The checkpoint in ``plugin_dir``, or None when there is none."""
    path = plugin_dir / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(raw, verify=verify)


def write(plugin_dir: Path, cp: Checkpoint) -> Path:
    """Write atomically (a temp file renamed over it), as the kubelet's checkpoint manager does."""
    path = plugin_dir / FILE_NAME
    tmp = plugin_dir / f".{FILE_NAME}.tmp"
    tmp.write_bytes(encode(cp))
    tmp.replace(path)
    return path
