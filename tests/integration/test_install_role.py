"""The install role for real, from this checkout's copy of the collection, on a local 'target': a wheel
built here installed into a fresh venv, where the dependencies come from (a wheelhouse with no index,
a mirror), the index install that happens only when asked for with a pinned version, and the refusals
that leave the target untouched. The default -- the wheel the built collection carries -- is run from
the installed tarball in test_collection_install.py (this checkout carries no wheel, and says so)."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO
from tests.tools.collection_tree import build_wheel, download_wheelhouse

pytestmark = pytest.mark.ansible


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's dependencies as wheels (pip download once, from the cache when it has them)."""
    return download_wheelhouse(REPO / "requirements.txt", tmp_path_factory.mktemp("wheelhouse"))


def offline_prefix() -> list[str]:
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return ["unshare", "--net"] if probe.returncode == 0 else []


SYSTEM_PYTHON = "/usr/bin/python3"  # this machine's own Python: no gpustack-operator package
RECORDS = Path(".local") / "state" / "gpustack" / "accelerators"


def home_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The user the role runs as gets a home of this test's own: its records stay in the test."""
    (tmp_path / "home").mkdir(exist_ok=True)
    return env | {"HOME": str(tmp_path / "home")}


def run_play(
    env: dict[str, str], tmp_path: Path, vars_: dict[str, object], *, offline: bool = False
) -> subprocess.CompletedProcess[str]:
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
    env = home_env(env, tmp_path)
    if offline:
        # no network and no pip configuration of this machine: only what the role tells pip
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return subprocess.run(
        [*(offline_prefix() if offline else []), str(BIN / "ansible-playbook"), "-i", str(inv), str(play)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def installed(venv: Path) -> dict[str, str]:
    listed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed.stdout)}


def wheels(directory: Path) -> dict[str, str]:
    return {w.name.split("-")[0].lower().replace("_", "-"): w.name.split("-")[1] for w in directory.glob("*.whl")}


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


def later_run(env: dict[str, str], tmp_path: Path, host_root: Path) -> subprocess.CompletedProcess[str]:
    """A new, separate ansible-playbook process, as the weekly run is: the host's Python is this
    machine's own (no package), and nothing in the inventory names the venv."""
    play = tmp_path / "later.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "target",
                    "gather_facts": False,
                    "tasks": [
                        {"name": "facts", "gpustack.accelerators.accelerator_facts": {"host_root": str(host_root)}},
                        {
                            "name": "they are the MI300X node's",
                            "ansible.builtin.assert": {
                                "that": ["ansible_facts.gpustack_accelerators.groups[0].manufacturer == 'amd'"]
                            },
                        },
                    ],
                }
            ]
        )
    )
    inv = tmp_path / "later-inv.yml"
    target = {"ansible_connection": "local", "ansible_python_interpreter": SYSTEM_PYTHON}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"target": target}}}))
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), str(play)],
        cwd=REPO,
        env=home_env(env, tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_later_separate_run_finds_the_venv_the_role_recorded(
    ansible_env: dict[str, str], tmp_path: Path, wheel: Path, wheelhouse: Path
) -> None:
    """Issue 17: install, then -- in another ansible-playbook process, with the host's interpreter
    still the system's -- the modules re-run under the recorded venv. The install pulls in what
    `dm serve` needs: the venv imports grpc, kubernetes and cryptography, and `dm serve --help` answers."""
    venv = tmp_path / "venv"
    first = run_play(
        ansible_env,
        tmp_path,
        {
            "install_wheel": str(wheel),
            "install_venv": str(venv),
            "install_python": sys.executable,
            "install_find_links": str(wheelhouse),
        },
        offline=True,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Verify the venv imports the package and what device-manager serve needs" in first.stdout
    (record,) = (tmp_path / "home" / RECORDS).iterdir()
    assert record.name == "python.json"
    assert json.loads(record.read_text()) == {
        "python": str(venv / "bin" / "python"),
        "host_root": None,
        "venv": str(venv),
        "version": wheel.name.split("-")[1],
    }
    imports = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import grpc, kubernetes, google.protobuf, cryptography; print(grpc.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    assert imports.returncode == 0, imports.stderr
    serve = subprocess.run(
        [venv / "bin" / "gpustack-operator", "dm", "serve", "--help"], capture_output=True, text=True
    )
    assert serve.returncode == 0 and "usage:" in serve.stdout, serve.stdout + serve.stderr

    second = later_run(ansible_env, tmp_path, REPO / "tests/fixtures/hosts/mi300x-8x")
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-4000:]
    assert "Failed to import" not in out


def test_a_run_with_no_venv_anywhere_names_what_it_looked_at(ansible_env: dict[str, str], tmp_path: Path) -> None:
    proc = later_run(ansible_env, tmp_path, REPO / "tests/fixtures/hosts/mi300x-8x")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "Failed to import the required Python library (gpustack-operator) on " in out, out[-3000:]
    assert f"'s Python {SYSTEM_PYTHON} (ModuleNotFoundError: No module named 'gpustack_operator')" in out, out[-3000:]
    records = tmp_path / "home" / RECORDS
    assert f"no record in {records} (the install role writes one for each venv it makes)" in out, out[-3000:]
    assert "/opt/gpustack-operator/venv/bin/python (the install role's default venv): absent" in out, out[-3000:]
    assert "Remedy: run the gpustack.accelerators.install role for this host" in out, out[-3000:]
    assert "Traceback" not in proc.stdout


def test_dependencies_from_a_wheelhouse_with_no_index_and_no_network(
    ansible_env: dict[str, str], tmp_path: Path, wheel: Path, wheelhouse: Path
) -> None:
    venv = tmp_path / "venv"
    proc = run_play(
        ansible_env,
        tmp_path,
        {
            "install_wheel": str(wheel),
            "install_venv": str(venv),
            "install_python": sys.executable,
            "install_find_links": str(wheelhouse),
        },
        offline=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = installed(venv)
    assert got["gpustack-operator"] == wheel.name.split("-")[1]
    for name, version in wheels(wheelhouse).items():
        assert got.get(name) == version, name


def simple_index(root: Path, *sources: Path) -> str:
    """A PEP 503 'simple' index over the wheels in ``sources`` (a mirror, as a file:// URL)."""
    for source in sources:
        for whl in source.glob("*.whl"):
            project = root / "simple" / whl.name.split("-")[0].lower().replace("_", "-")
            project.mkdir(parents=True, exist_ok=True)
            link = f'<a href="{whl.as_uri()}">{html.escape(whl.name)}</a>\n'
            with (project / "index.html").open("a", encoding="utf-8") as page:
                page.write(link)
    return (root / "simple").as_uri() + "/"


def test_dependencies_from_a_mirror(ansible_env: dict[str, str], tmp_path: Path, wheel: Path, wheelhouse: Path) -> None:
    venv = tmp_path / "venv"
    mirror = simple_index(tmp_path / "mirror", wheelhouse)
    proc = run_play(
        ansible_env,
        tmp_path,
        {
            "install_wheel": str(wheel),
            "install_venv": str(venv),
            "install_python": sys.executable,
            "install_index_url": mirror,
        },
        offline=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed(venv)["gpustack-operator"] == wheel.name.split("-")[1]


def test_an_index_install_when_asked_for_with_a_pinned_version(
    ansible_env: dict[str, str], tmp_path: Path, wheel: Path, wheelhouse: Path
) -> None:
    """install_source=index installs gpustack-operator==<version> by name -- here from a mirror of our
    own that holds it, with no network."""
    venv = tmp_path / "venv"
    version = wheel.name.split("-")[1]
    mirror = simple_index(tmp_path / "mirror", wheelhouse, wheel.parent)
    proc = run_play(
        ansible_env,
        tmp_path,
        {
            "install_source": "index",
            "install_version": version,
            "install_venv": str(venv),
            "install_python": sys.executable,
            "install_index_url": mirror,
        },
        offline=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Install gpustack-operator from the index (pinned)" in proc.stdout
    assert installed(venv)["gpustack-operator"] == version
    assert not list(venv.glob("*.whl")), "an index install copies no wheel"


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "no bundled wheel",
        {},
        "this copy of gpustack.accelerators carries 0 gpustack-operator wheels under",
    ),
    (
        "index, no version",
        {"install_source": "index"},
        "install_source=index installs gpustack-operator by name from a package index: set install_version",
    ),
    (
        "index, a range",
        {"install_source": "index", "install_version": ">=0.1"},
        "set install_version to the exact version to install (e.g. 0.1.0), or leave install_source at bundled",
    ),
    (
        "index and a wheel",
        {"install_source": "index", "install_version": "0.1.0", "install_wheel": "/tmp/x.whl"},
        "install_wheel (/tmp/x.whl) and install_source=index ask for two different packages",
    ),
    (
        "wheelhouse and index",
        {"install_find_links": "/srv/wheels", "install_index_url": "https://mirror.invalid/simple"},
        "install_find_links (/srv/wheels) installs with no index at all (--no-index)",
    ),
]


@pytest.mark.parametrize(("case", "vars_", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_remedy_and_make_nothing(
    ansible_env: dict[str, str], tmp_path: Path, case: str, vars_: dict[str, Any], message: str
) -> None:
    venv = tmp_path / "venv"
    proc = run_play(ansible_env, tmp_path, {"install_venv": str(venv), "install_python": sys.executable, **vars_})
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out
    assert message in out, out[-3000:]
    assert not venv.exists(), f"{case}: the venv was made before the refusal"


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
