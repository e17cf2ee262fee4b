"""helm for the tests: tests/tools/helm.sh's binary (helm 4.1.4 from npm, cached per machine) with its
HELM_CACHE_HOME / HELM_CONFIG_HOME / HELM_DATA_HOME in a directory of the caller's, so no run reaches the
network for helm's own state or touches the user's (docs/chart.md "helm for the tests")."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

HELM_SH = Path(__file__).resolve().parent / "helm.sh"
UNAVAILABLE = 3  # helm.sh's exit code when npm cannot fetch the package


class HelmUnavailableError(Exception):
    """npm cannot fetch helm here (the message is helm.sh's reason): the one reason to skip."""


@dataclass(frozen=True)
class Helm:
    path: str
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120.0, **extra_env: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **extra_env}
        return subprocess.run([self.path, *args], capture_output=True, text=True, timeout=timeout, env=env)


def provide(home: Path) -> Helm:
    """The helm binary with its homes under ``home``; :class:`HelmUnavailableError` when npm cannot fetch it,
    ``RuntimeError`` for any other failure of helm.sh (a checksum that differs, say)."""
    proc = subprocess.run(["bash", str(HELM_SH)], capture_output=True, text=True, timeout=300)
    if proc.returncode == UNAVAILABLE:
        raise HelmUnavailableError(proc.stderr.strip())
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"tests/tools/helm.sh failed (exit {proc.returncode}): {proc.stderr.strip()}")
    env = dict(os.environ)
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(home / var.lower())
    return Helm(proc.stdout.strip().splitlines()[-1], env)
