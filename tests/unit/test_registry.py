"""The registry imports identities only; a manufacturer's backend loads when a pass needs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.manufacturers.base import Backend

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"

PROBE = """
import json, sys
from gpustack_operator import api
before = sorted(m for m in sys.modules if m.endswith(".backend") or m == "pynvml")
req = api.make_request(sys.argv[1], None)
doc = api.detect(req)
after = sorted(m for m in sys.modules if m.endswith(".backend") or m == "pynvml")
print(json.dumps({"before": before, "after": after, "groups": len(doc["groups"])}))
"""


def loaded(host: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(HOSTS / host)], capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_every_backend_exports_a_backend() -> None:
    for name, manufacturer in REGISTRY.items():
        backend = manufacturer.loaded()
        assert isinstance(backend, Backend), name
        assert manufacturer.monitor is backend.monitor


def test_importing_the_api_loads_no_backend() -> None:
    assert loaded("cpu-only-vm")["before"] == []


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("cpu-only-vm", []),
        ("h100-sxm-8x", ["gpustack_operator.manufacturers.nvidia.backend", "pynvml"]),
        ("mi300x-8x", ["gpustack_operator.manufacturers.amd.backend"]),
    ],
)
def test_a_pass_loads_only_the_backends_the_bus_needs(host: str, expected: list[str]) -> None:
    result = loaded(host)
    assert result["after"] == expected
    assert result["groups"] == (1 if expected else 0)
