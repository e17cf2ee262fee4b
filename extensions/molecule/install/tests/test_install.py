"""Verify scenario `install`: the refusal made nothing; the venv holds the controller's wheel under
Python >= 3.12, installed with no index reachable; the modules ran from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from controller import BUILD, VENV, cli, container, detect, sha256

# testinfra's own podman backend (through molecule's inventory it would fall back to one ad-hoc
# `ansible` run per command for the podman connection)
testinfra_hosts = ["podman://" + container("gpustack-install")]  # this run's container


def wheel() -> Path:
    (whl,) = (BUILD / "install" / "dist").glob("gpustack_operator-*.whl")
    return whl


def test_old_interpreter_refused_before_anything_was_made(host):
    assert host.check_output("/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])'") == "(3, 11)"
    assert not host.file("/opt/refused").exists


def test_venv_runs_python_3_12_or_newer(host):
    version = host.check_output(f"{VENV}/bin/python -c 'import sys; print(*sys.version_info[:2])'")
    assert tuple(map(int, version.split())) >= (3, 12)
    cfg = host.file(f"{VENV}/pyvenv.cfg").content_string
    assert "home = /opt/python/bin" in cfg
    assert "include-system-site-packages = false" in cfg


def test_the_controllers_wheel_is_what_was_installed(host):
    copied = host.file(f"{VENV}/{wheel().name}")
    assert copied.is_file and copied.mode == 0o644
    assert copied.sha256sum == sha256(wheel())
    origin = host.check_output(f"{VENV}/bin/python -c 'import gpustack_operator; print(gpustack_operator.__file__)'")
    assert origin.startswith(f"{VENV}/lib/python3.")
    assert origin.endswith("/site-packages/gpustack_operator/__init__.py")
    version = host.check_output(f"{VENV}/bin/gpustack-operator --version")
    assert version == cli("--version").stdout.strip()


def test_dependencies_came_from_the_wheelhouse_with_no_network(host):
    # podman's network none: only the loopback interface exists, so pip could reach no index
    assert host.check_output("ls /sys/class/net") == "lo"
    listed = json.loads(host.check_output(f"{VENV}/bin/python -m pip list --format json --disable-pip-version-check"))
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in listed}
    assert installed["gpustack-operator"] == wheel().name.split("-")[1]
    for whl in (BUILD / "install" / "wheelhouse").glob("*.whl"):
        name, version = whl.name.split("-")[:2]
        assert installed.get(name.lower().replace("_", "-")) == version, whl.name


def test_modules_ran_from_the_venv(host):
    facts = json.loads(host.file("/root/gpustack-accelerators.json").content_string)
    expected = detect("rtx4090")
    assert facts["groups"] == expected["groups"]
    assert facts["groups"] and facts["groups"][0]["manufacturer"] == "nvidia"
    assert facts["node"]["labels"] == expected["node"]["labels"]
