"""The install role for real: a wheel built here, installed into a fresh venv on a local 'target'."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO

pytestmark = pytest.mark.ansible


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("gpustack_operator-*.whl")
    return whl


def run_play(env: dict[str, str], tmp_path: Path, vars_: dict[str, object]) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "install.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "target",
                    "gather_facts": False,
                    "roles": [{"role": "gpustack.accelerators.install", "vars": vars_}],
                    "post_tasks": [
                        {
                            "name": "facts through the installed package",
                            "gpustack.accelerators.accelerator_facts": {
                                "host_root": str(REPO / "tests/fixtures/hosts/mi300x-8x")
                            },
                        }
                    ],
                }
            ]
        )
    )
    inv = tmp_path / "inv.yml"
    # a bare target: the system's own Python runs the role's modules until the role switches interpreters
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "target": {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
                    }
                }
            }
        )
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), str(play)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_install_from_wheel_then_modules_use_it(ansible_env: dict[str, str], tmp_path: Path, wheel: Path) -> None:
    venv = tmp_path / "venv"
    proc = run_play(
        ansible_env,
        tmp_path,
        {
            "install_wheel": str(wheel),
            "install_venv": str(venv),
            "install_python": sys.executable,
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (venv / "bin/gpustack-operator").exists()
    assert "ok: [target]" in proc.stdout and "facts through the installed package" in proc.stdout


def test_old_python_is_refused_with_the_remedy(ansible_env: dict[str, str], tmp_path: Path, wheel: Path) -> None:
    proc = run_play(
        ansible_env,
        tmp_path,
        {
            "install_wheel": str(wheel),
            "install_venv": str(tmp_path / "v"),
            "install_python": "/usr/bin/python3",
        },
    )
    assert proc.returncode != 0
    assert "gpustack-operator needs >= 3.12" in proc.stdout
