"""Test helpers for the stand-ins whose ``<lib>.fixture`` is ``key=value`` lines (Cambricon, MetaX,
Iluvatar, MThreads, T-Head), and a one-manufacturer detection pass over a node."""

from __future__ import annotations

import re
from pathlib import Path

from gpustack_operator.discovery.detect import detect_node, resolve_manufacturers
from gpustack_operator.host import HostRoot
from gpustack_operator.manufacturers.base import DetectOutcome
from gpustack_operator.settings import load_settings


def edit_kv_fixture(path: Path, **values: object) -> None:
    """Set ``key=value`` lines in a stand-in's data file (``device_3_uuid_error`` → ``device.3.uuid_error``)."""
    lines = path.read_text().splitlines()
    for raw, value in values.items():
        key = re.sub(r"^device_(\d+)_", r"device.\1.", raw)
        lines = [ln for ln in lines if not ln.startswith(key + "=")] + [f"{key}={value}"]
    path.write_text("\n".join(lines) + "\n")


def detect_one(root: Path, manufacturer: str) -> DetectOutcome:
    """One detection pass over ``root`` for ``manufacturer`` alone."""
    return detect_node(HostRoot(root), resolve_manufacturers([manufacturer]), load_settings()).outcomes[manufacturer]
