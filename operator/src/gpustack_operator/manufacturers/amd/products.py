"""AMD marketing names: libdrm's ``amdgpu.ids`` on the host, then a built-in copy of its rows.

``amdgpu.ids`` (``device_id,<tab>revision_id,<tab>product_name``) is what names an AMD card
everywhere else on the node: libdrm's ``amdgpu_get_marketing_name``, ROCr's agent "Marketing Name"
(``rocminfo``) and AMD SMI's market name all read it. A device id alone does not name a card — the
Navi 32 id ``747e`` is the RX 7800 XT at revision ``c8`` and the RX 7700 XT at ``ff`` — so the
lookup is by (device, revision), as libdrm's is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpustack_operator.host import HostRoot
from gpustack_operator.host.root import HostPathError

# Where libdrm installs the table: the distribution's libdrm, and AMD's own (amdgpu-install).
AMDGPU_IDS_PATHS = (
    "/usr/share/libdrm/amdgpu.ids",
    "/opt/amdgpu/share/libdrm/amdgpu.ids",
)

# Rows of libdrm's data/amdgpu.ids for the accelerators this operator is deployed on, for a host
# (or a container without the host's /usr/share) that carries no table or an older one.
BUILT_IN: Mapping[tuple[str, str], str] = {
    ("738c", "01"): "AMD Instinct MI100",
    ("7408", "00"): "AMD Instinct MI250X",
    ("740c", "01"): "AMD Instinct MI250X / MI250",
    ("740f", "02"): "AMD Instinct MI210",
    ("7448", "00"): "AMD Radeon Pro W7900",
    ("744c", "c8"): "AMD Radeon RX 7900 XTX",
    ("744c", "cc"): "AMD Radeon RX 7900 XT",
    ("744c", "ce"): "AMD Radeon RX 7900 GRE",
    ("745e", "cc"): "AMD Radeon Pro W7800",
    ("747e", "c8"): "AMD Radeon RX 7800 XT",
    ("747e", "ff"): "AMD Radeon RX 7700 XT",
    ("74a0", "00"): "AMD Instinct MI300A",
    ("74a1", "00"): "AMD Instinct MI300X",
    ("74a5", "00"): "AMD Instinct MI325X",
    ("74b5", "00"): "AMD Instinct MI300X VF",
    ("7550", "c0"): "AMD Radeon RX 9070 XT",
    ("7551", "c0"): "AMD Radeon AI PRO R9700",
    ("75a0", "00"): "AMD Instinct MI350X",
    ("75a3", "00"): "AMD Instinct MI355X",
}


def parse_amdgpu_ids(text: str) -> dict[tuple[str, str], str]:
    """``amdgpu.ids`` → {(device, revision): name}, ids lowercase. Comments, the version line and
    malformed lines are skipped (libdrm skips them too); the first row of a pair wins, as libdrm's
    linear search does."""
    table: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) != 3 or not parts[2]:
            continue
        device, revision, name = parts
        if not _is_hex(device, 4) or not _is_hex(revision, 2):
            continue
        table.setdefault((device.lower(), revision.lower()), name)
    return table


def _is_hex(text: str, width: int) -> bool:
    return len(text) == width and all(c in "0123456789abcdefABCDEF" for c in text)


def host_tables(host: HostRoot, paths: Iterable[str] = AMDGPU_IDS_PATHS) -> list[dict[tuple[str, str], str]]:
    """The host's ``amdgpu.ids`` tables, in search order (unreadable ones are skipped: a name
    source, not a measurement)."""
    tables = []
    for path in paths:
        try:
            text = host.read_optional(path, limit=1024 * 1024)
        except HostPathError:
            continue
        if text is not None:
            tables.append(parse_amdgpu_ids(text))
    return tables


def marketing_name(tables: Iterable[Mapping[tuple[str, str], str]], device: str, revision: str | None) -> str | None:
    """The first table's name for (device, revision), the built-in rows last."""
    if revision is None:
        return None
    key = (device.lower(), revision.lower())
    for table in (*tables, BUILT_IN):
        if key in table:
            return table[key]
    return None
