"""The collection as a user gets it: the Galaxy tarball built from this checkout (what ``make
collection`` builds), installed with ansible-galaxy into a fresh project directory, and that project's
own ansible.cfg, inventory and playbook -- exactly those of the collection README's "Use it from your
own playbooks" -- run with no network: the install role puts the bundled wheel into a venv per
simulated host (dependencies from a wheelhouse, ``--no-index``), the preflight role writes the fleet
report under the project directory, and the host the install role never ran on fails with the install
hint while the others are reported. Then the README's later commands, each a new process from the same
directory (issue 17): the weekly preflight playbook, its check-mode run, an ad-hoc module and
ansible-doc -- with the inventory's interpreter still the system's, so the modules must find the venvs
the install role recorded. Nothing of this checkout is on the path: not its ansible.cfg, not its
collections/ symlink, not its pip configuration, not its venv, not this user's home -- the controller
is a venv holding ansible-core alone (ansible-core-<X.Y>-* in the machine's test cache), so the package is nowhere on
it, and only the project's own ansible.cfg tells Ansible where the collection is."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import HOSTS, REPO
from tests.tools.collection_tree import (
    COLLECTION_README,
    built_once,
    claimed_minimum,
    core_venv,
    core_version,
    download_wheelhouse,
)

pytestmark = pytest.mark.ansible

README = REPO / COLLECTION_README
FIXTURES_PLACEHOLDER = "/path/to/gpustack-operator/tests/fixtures/hosts"
INSTALLED = Path("collections") / "ansible_collections" / "gpustack" / "accelerators"


# The walk-through's command blocks, by a line only each holds.
COMMAND_BLOCKS = {
    "bash": "ansible-playbook -i inventory.yml site.yml\n",
    "later": "ansible-playbook -i inventory.yml gpustack.accelerators.preflight\n",
}


def readme_block(name: str, readme: Path = README) -> str:
    """The README's code block that starts with ``# <name>`` (or, for ``bash`` and ``later``, the
    walk-through's command blocks)."""
    blocks = re.findall(
        r"^```(?:yaml|bash|ini)\n(.*?)^```", readme.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
    )
    if name in COMMAND_BLOCKS:
        (block,) = [b for b in blocks if COMMAND_BLOCKS[name] in b]
    else:
        (block,) = [b for b in blocks if b.startswith(f"# {name}\n")]
    return str(block)


def readme_file(name: str) -> str:
    """The README's ``name``, the fixture path made this checkout's."""
    return readme_block(name).replace(FIXTURES_PLACEHOLDER, str(HOSTS))


def readme_commands(name: str = "bash") -> list[str]:
    """The shell commands of one of the README's command blocks (continuation lines joined)."""
    block = readme_block(name)
    text = block.replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def offline_prefix() -> list[str]:
    """A network namespace of our own (only a loopback, down) when this machine lets us make one."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return ["unshare", "--net"] if probe.returncode == 0 else []


@functools.cache
def controller() -> Path:
    """The bin directory of the controller's venv: this ansible-core release and nothing else."""
    return core_venv(core_version())


def user_env(project: Path) -> dict[str, str]:
    """A shell in the project directory: its PWD, the controller's ansible first on PATH, a home of its
    own (where Ansible keeps its state and the install role its records), no ANSIBLE_* variable at all
    -- the project's ansible.cfg is the only configuration -- and pip with no configuration file (no
    index, no find-links of this machine: only what the role passes)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANSIBLE_", "PIP_", "GPUSTACK_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    home = project.parent / "home"
    home.mkdir(exist_ok=True)
    env.update(
        PWD=str(project),
        HOME=str(home),
        PATH=f"{controller()}{os.pathsep}{env.get('PATH', '')}",
        ANSIBLE_NOCOLOR="1",
        PIP_CONFIG_FILE=os.devnull,
    )
    return env


def run(argv: list[str], project: Path, *, offline: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = offline_prefix() if offline else []
    return subprocess.run(
        [*prefix, *argv], cwd=project, env=user_env(project), capture_output=True, text=True, timeout=900
    )


def run_verbatim(command: str, project: Path) -> subprocess.CompletedProcess[str]:
    """A README command line exactly as written, by a shell in the project directory, with no network."""
    return run(["/bin/sh", "-c", command], project)


@pytest.fixture(scope="module")
def tarball() -> Path:
    return built_once()


@pytest.fixture(scope="module")
def members(tarball: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(tarball) as tar:
        return {m.name: m for m in tar.getmembers()}


@pytest.fixture(scope="module")
def fleet(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The README's walk-through in a fresh project directory, run once for this module's tests."""
    project = tmp_path_factory.mktemp("user") / "my-fleet"
    project.mkdir()
    shutil.copy2(tarball, project / tarball.name)
    for name in ("requirements.yml", "ansible.cfg", "inventory.yml", "site.yml"):
        (project / name).write_text(readme_file(name), encoding="utf-8")
    repo_reports = set((REPO / "reports").glob("preflight-*")) if (REPO / "reports").is_dir() else set()

    install, download, playbook = readme_commands()
    assert install == "ansible-galaxy collection install -r requirements.yml -p ./collections", install
    galaxy = run_verbatim(install, project)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    tree = project / INSTALLED
    assert (tree / "MANIFEST.json").is_file(), galaxy.stdout

    # "once, where an index is reachable": the same requirements file, this Python (the venvs' own)
    assert download.startswith("python3.12 -m pip download --only-binary=:all: -d wheelhouse -r "), download
    assert download.endswith(f" {INSTALLED}/requirements.txt"), download
    download_wheelhouse(tree / "requirements.txt", project / "wheelhouse")

    assert playbook == "ansible-playbook -i inventory.yml site.yml", playbook
    proc = run_verbatim(playbook, project)
    site_reports = sorted(p.name for p in (project / "reports").iterdir()) if (project / "reports").is_dir() else []
    # every later command is a process of its own, as a user types them days after
    later = {command: run_verbatim(command, project) for command in readme_commands("later")}
    new_repo_reports = (
        set((REPO / "reports").glob("preflight-*")) if (REPO / "reports").is_dir() else set()
    ) - repo_reports
    return {
        "project": project,
        "tree": tree,
        "proc": proc,
        "site_reports": site_reports,
        "later": later,
        "repo_reports": new_repo_reports,
    }


@pytest.mark.parametrize("name", ["requirements.yml", "ansible.cfg", "inventory.yml", "site.yml", "bash", "later"])
def test_the_repository_readme_shows_the_same_walk_through(name: str) -> None:
    assert readme_block(name, REPO / "README.md") == readme_block(name)


def recap(out: str) -> dict[str, int]:
    return {
        host: int(failed)
        for host, failed in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.M)
    }


def test_the_fleet_runs_from_the_installed_tarball_alone(fleet: dict[str, Any]) -> None:
    # the controller has no gpustack-operator: the fleet report is the collection's own code
    probe = subprocess.run([controller() / "python", "-c", "import gpustack_operator"], capture_output=True)
    assert probe.returncode != 0
    proc = fleet["proc"]
    out = proc.stdout + proc.stderr
    # bare-01 has no package: the run fails, on that host only, after the report
    assert proc.returncode != 0, out[-4000:]
    assert recap(out) == {"hgx-h100-01": 0, "mi300x-01": 0, "bare-01": 1}, out[-4000:]
    line = re.search(r"fleet preflight: .*", out)
    assert line is not None, out[-4000:]
    assert line[0].startswith("fleet preflight: 3 hosts, 2 ok, 0 unavailable, 0 unreachable"), line[0]
    assert "1 failed" in line[0], line[0]
    # the roles that ran are the installed collection's: this checkout's install role carries no
    # wheel and would have refused
    assert "this copy of gpustack.accelerators carries" not in out
    assert str(REPO) not in out.replace(str(HOSTS), ""), "the run reached into the source checkout"


def test_the_report_lands_in_the_project_directory_never_in_the_collection(fleet: dict[str, Any]) -> None:
    project: Path = fleet["project"]
    reports = fleet["site_reports"]
    assert len(reports) == 4 and {Path(r).suffix for r in reports} == {".yaml", ".html", ".xml"}, reports
    assert len([r for r in reports if r.endswith(".documents.yaml")]) == 1, reports
    # a report's name: preflight-<UTC timestamp>[.documents].yaml/.html/.junit.xml (a source file such as a
    # changelog fragment may begin with "preflight-" too, and is no report)
    assert not list((project / "collections").rglob("preflight-2*")), "a report inside the installed collection"
    assert not fleet["repo_reports"], "a report in the source checkout"


def test_a_host_without_the_package_fails_with_the_hint_and_the_others_are_reported(fleet: dict[str, Any]) -> None:
    project: Path = fleet["project"]
    (yaml_path,) = [project / "reports" / r for r in fleet["site_reports"] if re.fullmatch(r"preflight-\w+\.yaml", r)]
    doc = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    hosts = doc["hosts"]
    assert set(hosts) == {"hgx-h100-01", "mi300x-01", "bare-01"}
    assert hosts["hgx-h100-01"]["status"] == "ok", hosts["hgx-h100-01"]
    assert hosts["mi300x-01"]["status"] == "ok", hosts["mi300x-01"]
    bare = hosts["bare-01"]
    assert bare["status"] == "failed", bare
    said = json.dumps(bare)
    assert "gpustack-operator" in said and "gpustack.accelerators.install" in said, bare
    assert doc["summary"]["hosts"] == 3 and doc["summary"]["ok"] == 2 and doc["summary"]["failed"] == 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("host", ["hgx-h100-01", "mi300x-01"])
def test_each_venv_holds_the_bundled_wheel_and_the_wheelhouse(fleet: dict[str, Any], host: str) -> None:
    project: Path = fleet["project"]
    (bundled,) = (fleet["tree"] / "roles" / "install" / "files").glob("gpustack_operator-*.whl")
    venv = project / "venvs" / host
    assert sha256(venv / bundled.name) == sha256(bundled)
    version = subprocess.run([venv / "bin" / "gpustack-operator", "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"gpustack-operator {bundled.name.split('-')[1]}"
    listed = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listed.stdout)}
    for whl in (project / "wheelhouse").glob("*.whl"):
        name, whl_version = whl.name.split("-")[:2]
        assert installed.get(name.lower().replace("_", "-")) == whl_version, whl.name
    assert not list((project / "wheelhouse").glob("gpustack_operator-*")), "the package came from the wheelhouse"
    # what `dm serve` needs came with it (issue 17): the device plugin's gRPC and the API server's client
    imports = subprocess.run(
        [venv / "bin" / "python", "-c", "import grpc, kubernetes, google.protobuf, cryptography"],
        capture_output=True,
        text=True,
    )
    assert imports.returncode == 0, imports.stderr
    for name in ("grpcio", "kubernetes", "protobuf"):
        assert name in installed, name
    serve = subprocess.run(
        [venv / "bin" / "gpustack-operator", "dm", "serve", "--help"], capture_output=True, text=True
    )
    assert serve.returncode == 0 and "usage:" in serve.stdout, serve.stdout + serve.stderr


def test_module_defaults_reach_the_action_group(fleet: dict[str, Any]) -> None:
    """`group/gpustack.accelerators.accelerators` sets host_root once for its members."""
    project: Path = fleet["project"]
    play = project / "defaults.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "host_root from module_defaults",
                    "hosts": "probe",
                    "gather_facts": False,
                    "module_defaults": {
                        "group/gpustack.accelerators.accelerators": {"host_root": str(HOSTS / "mi300x-8x")}
                    },
                    "tasks": [
                        {"name": "facts", "gpustack.accelerators.accelerator_facts": {}},
                        {
                            "name": "they are the MI300X node's",
                            "ansible.builtin.assert": {
                                "that": ["ansible_facts.gpustack_accelerators.groups[0].manufacturer == 'amd'"]
                            },
                        },
                    ],
                }
            ]
        ),
        encoding="utf-8",
    )
    inventory = project / "probe.yml"
    python = project / "venvs" / "mi300x-01" / "bin" / "python"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"hosts": {"probe": {"ansible_connection": "local", "ansible_python_interpreter": str(python)}}}}
        ),
        encoding="utf-8",
    )
    proc = run([str(controller() / "ansible-playbook"), "-i", str(inventory), str(play)], project)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


# -- the runs after the first: each a process of its own, from the project directory (issue 17) ----------


def later(fleet: dict[str, Any], command: str) -> subprocess.CompletedProcess[str]:
    """The run of one of the README's later commands, exactly as written there."""
    assert command in fleet["later"], (command, list(fleet["later"]))
    proc: subprocess.CompletedProcess[str] = fleet["later"][command]
    return proc


def report_of(project: Path, out: str) -> tuple[Path, dict[str, Any]]:
    """The fleet report a run printed the path of, and its document."""
    match = re.search(r"report: +(\S+\.yaml)", out)
    assert match is not None, out[-3000:]
    path = Path(match[1])
    assert path.parent == project / "reports", path
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return path, doc


def host_document(path: Path, doc: dict[str, Any], host: str) -> dict[str, Any]:
    """A host's whole preflight document: in the report when the host is not ok, else in the side file."""
    kept = doc["hosts"][host].get("document")
    if isinstance(kept, dict):
        return kept
    side = yaml.safe_load((path.parent / doc["documents"]).read_text(encoding="utf-8"))
    found: dict[str, Any] = side["hosts"][host]
    return found


def test_a_later_separate_run_finds_the_venvs_the_install_role_recorded(fleet: dict[str, Any]) -> None:
    """The weekly run: `ansible-playbook -i inventory.yml gpustack.accelerators.preflight`, the
    inventory's interpreter the system's Python (no package), no variable naming a venv. Each installed
    host finds its own; bare-01 -- never installed -- fails naming the interpreter it tried and the
    venvs recorded for the other hosts' roots."""
    project: Path = fleet["project"]
    proc = later(fleet, "ansible-playbook -i inventory.yml gpustack.accelerators.preflight")
    out = proc.stdout + proc.stderr
    assert recap(out) == {"hgx-h100-01": 0, "mi300x-01": 0, "bare-01": 1}, out[-4000:]
    line = re.search(r"fleet preflight: .*", out)
    assert line is not None and line[0].startswith("fleet preflight: 3 hosts, 2 ok, 0 unavailable"), out[-4000:]
    hosts = report_of(project, out)[1]["hosts"]
    assert hosts["hgx-h100-01"]["status"] == "ok" and hosts["mi300x-01"]["status"] == "ok", hosts
    bare = hosts["bare-01"]
    said = " ".join(json.dumps(bare).split())
    assert bare["status"] == "failed", bare
    assert "Failed to import the required Python library (gpustack-operator)" in said, said
    assert "'s Python /usr/bin/python3 (ModuleNotFoundError: No module named 'gpustack_operator')" in said, said
    assert "recorded there for other node roots" in said, said
    for host in ("hgx-h100-01", "mi300x-01"):
        assert str(project / "venvs" / host / "bin" / "python") in said, (host, said)
    assert "gpustack.accelerators.install role for this host" in said, said


def test_each_installed_host_has_its_own_record(fleet: dict[str, Any]) -> None:
    project: Path = fleet["project"]
    records = project.parent / "home" / ".local" / "state" / "gpustack" / "accelerators"
    got = {
        doc["host_root"]: doc["python"]
        for doc in (json.loads(p.read_text(encoding="utf-8")) for p in sorted(records.glob("python-*.json")))
    }
    assert got == {
        str(HOSTS / "h100-sxm-8x"): str(project / "venvs" / "hgx-h100-01" / "bin" / "python"),
        str(HOSTS / "mi300x-8x"): str(project / "venvs" / "mi300x-01" / "bin" / "python"),
    }
    assert not (records / "python.json").exists(), "a record for the machine itself: bare-01 would find it"


def test_check_mode_runs_the_fleet_as_a_dry_run(fleet: dict[str, Any]) -> None:
    project: Path = fleet["project"]
    proc = later(fleet, "ansible-playbook -i inventory.yml gpustack.accelerators.preflight --check")
    out = proc.stdout + proc.stderr
    assert recap(out) == {"hgx-h100-01": 0, "mi300x-01": 0, "bare-01": 1}, out[-4000:]
    document = host_document(*report_of(project, out), "hgx-h100-01")
    (nvidia,) = [g for g in document["accelerators"] if g["manufacturer"] == "nvidia"]
    emitted = [r for r in nvidia["checks"] if r.get("command")]
    assert emitted and all("dry-run: nothing was started or written" in r["detail"] for r in emitted), emitted


def test_an_ad_hoc_module_from_the_project_directory(fleet: dict[str, Any]) -> None:
    proc = later(
        fleet,
        "ansible -i inventory.yml accelerators -m gpustack.accelerators.accelerator_facts -a manufacturers=nvidia,amd",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for host, manufacturer in (("hgx-h100-01", "nvidia"), ("mi300x-01", "amd")):
        match = re.search(rf"^{host} \| SUCCESS => (\{{.*?^\}})$", proc.stdout, re.MULTILINE | re.DOTALL)
        assert match is not None, out[-4000:]
        facts = json.loads(match[1])["ansible_facts"]["gpustack_accelerators"]
        assert facts["manufacturers"][manufacturer]["state"] == "detected", facts["manufacturers"]
        assert sorted(facts["manufacturers"]) == ["amd", "nvidia"]


def test_ansible_doc_from_the_project_directory(fleet: dict[str, Any]) -> None:
    module = later(fleet, "ansible-doc gpustack.accelerators.preflight")
    assert module.returncode == 0, module.stderr
    assert "> MODULE gpustack.accelerators.preflight (" in module.stdout, module.stdout[:2000]
    assert "Runs `gpustack-operator device-manager preflight' on the target" in " ".join(module.stdout.split())
    role = later(fleet, "ansible-doc -t role gpustack.accelerators.preflight")
    assert role.returncode == 0, role.stderr
    text = " ".join(role.stdout.split())
    for write in (
        "/var/lib/gpustack/operator/lib/<manufacturer>",
        "/var/lib/gpustack/operator/preflight/lock",
        "/var/lib/gpustack/operator/preflight/render-*",
        "a driver mode asked on",
        "--check",
        "preflight_dry_run",
    ):
        assert write in text, (write, text[:3000])


# -- the tarball itself ---------------------------------------------------------------------------

# What the installed collection may hold at its top, and under tests/: nothing of the checkout.
TOP = {
    "MANIFEST.json",
    "FILES.json",
    "LICENSE",
    "README.md",
    "CHANGELOG.rst",
    "requirements.txt",
    "bindep.txt",
    "changelogs",
    "docs",
    "meta",
    "plugins",
    "roles",
    "playbooks",
    "tests",
}


def test_the_tarball_carries_the_collection_and_nothing_of_the_checkout(members: dict[str, tarfile.TarInfo]) -> None:
    names = set(members)
    assert {n.split("/")[0] for n in names} <= TOP, sorted({n.split("/")[0] for n in names} - TOP)
    assert {n.split("/")[1] for n in names if n.startswith("tests/") and n.count("/") >= 1} <= {"sanity", "unit"}
    for dev_only in ("ansible.cfg", "inventory", "Makefile", "pyproject.toml", "operator", "bench", "molecule"):
        assert not any(n == dev_only or n.startswith(dev_only + "/") for n in names), dev_only
    assert not any("fixtures" in n.split("/") or n.endswith(".pyc") or "__pycache__" in n for n in names)
    assert not [n for n in names if n.startswith(("tests/unit/test_", "tests/integration", "tests/unit/source_repo"))]
    assert {"docs/preflight.md", "docs/architecture.md", "meta/runtime.yml", "meta/execution-environment.yml"} <= names
    assert "tests/unit/plugins/modules/test_preflight.py" in names and "tests/unit/conftest.py" in names


def read(tarball: Path, name: str) -> bytes:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return member.read()


def test_manifest_licence_and_readme(tarball: Path) -> None:
    manifest = json.loads(read(tarball, "MANIFEST.json"))["collection_info"]
    assert (manifest["namespace"], manifest["name"]) == ("gpustack", "accelerators")
    assert manifest["license"] == ["Apache-2.0"] and manifest["readme"] == "README.md"
    text = json.dumps(manifest)
    assert "example" not in text and "invalid" not in text, manifest  # no placeholder URLs
    licence = read(tarball, "LICENSE").decode()
    assert licence.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    for section in range(1, 10):
        assert f"\n   {section}. " in licence, f"section {section} of the Apache License 2.0 is missing"
    assert "END OF TERMS AND CONDITIONS" in licence and "APPENDIX: How to apply the Apache License" in licence
    # the collection README, not this checkout's
    assert read(tarball, "README.md") == README.read_bytes()
    assert b"ansible-galaxy collection install" in read(tarball, "README.md")


def test_the_bundled_wheel_is_the_collection_version(tarball: Path, members: dict[str, tarfile.TarInfo]) -> None:
    (wheel,) = [n for n in members if n.startswith("roles/install/files/")]
    version = json.loads(read(tarball, "MANIFEST.json"))["collection_info"]["version"]
    assert Path(wheel).name == f"gpustack_operator-{version}-py3-none-any.whl"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["version"] == version


def test_a_sanity_ignore_file_for_every_claimed_ansible_core(members: dict[str, tarfile.TarInfo]) -> None:
    major, minor = claimed_minimum()
    current = int(core_version().split(".")[1])
    for claimed in range(minor, current + 1):
        assert f"tests/sanity/ignore-{major}.{claimed}.txt" in members, claimed


def test_the_execution_environment_files(tarball: Path) -> None:
    ee = yaml.safe_load(read(tarball, "meta/execution-environment.yml"))
    assert ee["dependencies"] == {"python": "requirements.txt", "system": "bindep.txt"}
    requirements = [
        line for line in read(tarball, "requirements.txt").decode().splitlines() if line and not line.startswith("#")
    ]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert requirements == pyproject["project"]["dependencies"]

    from bindep.depends import Depends

    rules = {name: versions for name, _, versions in Depends(read(tarball, "bindep.txt").decode())._rules}
    assert rules["coreutils"] == [] and rules["python3"] == [(">=", "3.12")]


def test_the_changelog_is_generated(members: dict[str, tarfile.TarInfo], tarball: Path) -> None:
    assert {"CHANGELOG.rst", "changelogs/changelog.yaml", "changelogs/config.yaml"} <= set(members)
    version = json.loads(read(tarball, "MANIFEST.json"))["collection_info"]["version"]
    assert version in yaml.safe_load(read(tarball, "changelogs/changelog.yaml"))["releases"]


def test_no_wheel_is_committed() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.whl"], cwd=REPO, capture_output=True, text=True, check=True)
    assert tracked.stdout == ""


def test_the_action_group_is_the_modules_that_share_the_node_options(fleet: dict[str, Any]) -> None:
    tree: Path = fleet["tree"]
    runtime = yaml.safe_load((tree / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    modules = sorted(p.stem for p in (tree / "plugins" / "modules").glob("*.py"))
    proc = run(
        [str(controller() / "ansible-doc"), "--json", "-t", "module", *(f"gpustack.accelerators.{m}" for m in modules)],
        fleet["project"],
        offline=False,
    )
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    sharing = {name.split(".")[-1] for name, doc in docs.items() if "host_root" in doc["doc"].get("options", {})}
    assert sorted(runtime["action_groups"]["accelerators"]) == sorted(sharing)
    assert "fleet_report" not in sharing
