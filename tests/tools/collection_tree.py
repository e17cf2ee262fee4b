"""Build the collection's Galaxy tarball, and install it the way a user does.

The repository root *is* the collection, but it also holds the package, fixtures and the project's own
tests, and the tarball has to carry what the repository must not (the package wheel). So the build
works on a staging copy, laid out as ``ansible_collections/gpustack/accelerators/``:

1. the repository's collection content: every file ``galaxy.yml``'s ``build_ignore`` does not name;
2. ``README.md`` <- ``docs/collection-README.md`` (the README of the *installed* collection: how to
   install and use it; the repository's README is about this checkout);
3. ``tests/unit/`` <- ``tests/ansible_units/`` (the repository's ``tests/unit`` holds the package's
   pytest tests), so ``ansible-test units`` runs in the installed collection's standard layout;
4. ``roles/install/files/gpustack_operator-<version>-py3-none-any.whl``, built here from ``operator/``
   (``pip wheel --no-deps``): what the install role installs by default. Never committed;
5. ``roles/deploy/files/gpustack-operator/`` <- ``operator/chart/gpustack-operator`` (``operator/`` is
   build-ignored): the chart the deploy role installs by default. Never committed (.gitignore).

then ``ansible-galaxy collection build`` writes ``dist/gpustack-accelerators-<version>.tar.gz``.

    python -m tests.tools.collection_tree                   # what `make collection` runs
    python -m tests.tools.collection_tree --install /tmp/c  # ... and install it under /tmp/c (-p)
    python -m tests.tools.collection_tree --release-changelog 0.2.0   # antsibull-changelog release

The collection's ansible-test sanity ignore files are ``tests/sanity/ignore-<X.Y>.txt``, one per
ansible-core version ``meta/runtime.yml`` claims, shipped as they are.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.tools.machine_cache import machine_cache

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "dist"
COLLECTION_README = Path("docs") / "collection-README.md"
UNITS = REPO / "tests" / "ansible_units"
# where the install role looks for the wheel it installs by default (role_path/files)
WHEEL_DIR = Path("roles") / "install" / "files"
# the chart in the source tree, and where the deploy role looks for it (its default deploy_chart)
CHART_SOURCE = Path("operator") / "chart" / "gpustack-operator"
CHART_DIR = Path("roles") / "deploy" / "files" / "gpustack-operator"
GET_PIP_STANDIN = Path(__file__).with_name("get_pip_standin.py")
BIN = Path(sys.executable).parent


def galaxy(source: Path = REPO) -> dict[str, Any]:
    info: dict[str, Any] = yaml.safe_load((source / "galaxy.yml").read_text(encoding="utf-8"))
    return info


def core_version() -> str:
    import ansible.release

    return ".".join(ansible.release.__version__.split(".")[:2])


def claimed_minimum() -> tuple[int, int]:
    """The lowest ansible-core X.Y ``meta/runtime.yml``'s ``requires_ansible`` admits."""
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)(?:\.\d+)?", runtime["requires_ansible"].strip())
    if match is None:
        raise SystemExit(f"meta/runtime.yml: requires_ansible {runtime['requires_ansible']!r} is not '>=X.Y.Z'")
    return int(match[1]), int(match[2])


def ignored(rel: str, patterns: list[str]) -> bool:
    """``ansible-galaxy collection build``'s test for one relative path (fnmatch, ``*`` crosses ``/``)."""
    return rel.rsplit("/", maxsplit=1)[-1] in {"__pycache__", ".git"} or any(fnmatch.fnmatch(rel, p) for p in patterns)


def copy_content(dest: Path, source: Path = REPO) -> None:
    """The repository's collection content (what build_ignore leaves in) into ``dest``; the repository's
    own ``tests/unit`` and the collection README source stay behind (the staging replaces them), and so
    does a directory left with nothing in it (``extensions/`` without its ``molecule/``)."""
    patterns = [str(p) for p in galaxy(source).get("build_ignore", [])]
    replaced = {"tests/unit", str(COLLECTION_README)}

    def walk(src: Path, rel: str) -> None:
        for entry in sorted(src.iterdir()):
            path = f"{rel}{entry.name}"
            if path in replaced or ignored(path, patterns) or entry.suffix in (".pyc", ".retry"):
                continue
            target = dest / path
            if entry.is_dir() and not entry.is_symlink():
                walk(entry, f"{path}/")
            elif entry.is_symlink():
                raise SystemExit(f"{path}: a symbolic link in the collection content (copy the file instead)")
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(entry, target)

    walk(source, "")


def build_wheel(out: Path) -> Path:
    """``gpustack_operator-<version>-py3-none-any.whl`` in ``out`` (no index needed when setuptools is
    importable here; otherwise pip's isolated build fetches it)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("gpustack_operator-*.whl"):
        old.unlink()
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "--wheel-dir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"pip wheel failed:\n{proc.stdout}{proc.stderr}")
    (wheel,) = out.glob("gpustack_operator-*.whl")
    return wheel


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def stage(base: Path, wheel: Path | None, source: Path = REPO) -> Path:
    """The staging copy of ``source`` (this checkout, or an export of a commit) under
    ``base/ansible_collections/gpustack/accelerators`` (made afresh); ``wheel`` None stages no wheel and no
    chart (for the changelog, which needs only the plugins)."""
    tree = base / "ansible_collections" / "gpustack" / "accelerators"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    copy_content(tree, source)
    shutil.copy2(source / COLLECTION_README, tree / "README.md")
    ignores = sorted(p.name for p in (tree / "tests" / "sanity").glob("ignore-*.txt"))
    low = claimed_minimum()
    current = tuple(int(x) for x in core_version().split("."))
    wanted = [f"ignore-{low[0]}.{minor}.txt" for minor in range(low[1], current[1] + 1)] if low[0] == current[0] else []
    missing = sorted(set(wanted) - set(ignores))
    if missing:
        raise SystemExit(
            f"tests/sanity lacks {', '.join(missing)} for the ansible-core versions meta/runtime.yml claims"
        )
    units = source / UNITS.relative_to(REPO)
    shutil.copytree(units, tree / "tests" / "unit", ignore=shutil.ignore_patterns("__pycache__", "source_repo.txt"))
    if wheel is not None:
        version = galaxy()["version"]
        if wheel_version(wheel) != version:
            raise SystemExit(
                f"{wheel.name} is not version {version}: the collection and the package it carries are released "
                "together (galaxy.yml version == pyproject.toml version)"
            )
        (tree / WHEEL_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, tree / WHEEL_DIR / wheel.name)
        stage_chart(tree, source)
    return tree


def stage_chart(tree: Path, source: Path = REPO) -> Path:
    """``operator/chart/gpustack-operator`` of ``source`` as the deploy role's default chart in ``tree``
    (a copy a checkout may hold there, which .gitignore keeps out of git, is replaced)."""
    chart = source / CHART_SOURCE
    if not (chart / "Chart.yaml").is_file():
        raise SystemExit(f"{chart} holds no Chart.yaml: the deploy role would carry no chart")
    target = tree / CHART_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(chart, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=False)
    return target


@functools.cache
def empty_config() -> Path:
    """An ansible.cfg that sets nothing (ansible refuses os.devnull: it wants a .cfg name)."""
    path = Path(tempfile.mkdtemp(prefix="gpustack-ansible-cfg-")) / "ansible.cfg"
    path.write_text("[defaults]\n", encoding="utf-8")
    return path


def quiet_env() -> dict[str, str]:
    """ansible-galaxy with no configuration of this checkout (its ansible.cfg points at collections/)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(empty_config()), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


def build(dist: Path = DIST) -> Path:
    """Build the tarball into ``dist`` (replacing an older build of the same version) and return it."""
    info = galaxy()
    with tempfile.TemporaryDirectory(prefix="gpustack-collection-") as scratch:
        wheel = build_wheel(Path(scratch) / "wheel")
        tree = stage(Path(scratch) / "stage", wheel)
        dist.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(dist), str(tree)],
            capture_output=True,
            text=True,
            env=quiet_env(),
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"ansible-galaxy collection build failed:\n{proc.stdout}{proc.stderr}")
    return dist / f"{info['namespace']}-{info['name']}-{info['version']}.tar.gz"


@functools.cache
def built_once() -> Path:
    """One build per test session, outside the repository (tests never touch dist/)."""
    return build(Path(tempfile.mkdtemp(prefix="gpustack-collection-dist-")))


def install(tarball: Path, dest: Path) -> Path:
    """``ansible-galaxy collection install -p dest <tarball>`` (offline, replacing an installed copy);
    returns the installed collection's directory."""
    proc = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--force", "-p", str(dest), str(tarball)],
        capture_output=True,
        text=True,
        env=quiet_env(),
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"ansible-galaxy collection install failed:\n{proc.stdout}{proc.stderr}")
    return dest / "ansible_collections" / "gpustack" / "accelerators"


def download_wheelhouse(requirements: Path, wheelhouse: Path, cache: Path | None = None) -> Path:
    """``pip download --only-binary=:all: -r <requirements> -d <wheelhouse>`` for this Python, taken from
    ``cache`` (default: the machine's test cache, tests/tools/machine_cache.py) offline when it has
    everything; the index is asked (once, into the cache) otherwise."""
    cache = cache or machine_cache("pip")
    wheelhouse.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)

    def pip(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "-r", str(requirements)]
        return subprocess.run([*command, *args], capture_output=True, text=True, check=False)

    offline = ("--no-index", "--find-links", str(cache), "--dest", str(wheelhouse))
    if pip(*offline).returncode != 0:
        online = pip("--dest", str(cache))
        if online.returncode != 0:
            raise SystemExit(f"pip download failed:\n{online.stdout}{online.stderr}")
        proc = pip(*offline)
        if proc.returncode != 0:
            raise SystemExit(f"pip download from {cache} failed:\n{proc.stdout}{proc.stderr}")
    return wheelhouse


def point_units_at_source(tree: Path) -> None:
    """The unit tests run the package and read the fixture nodes of a source checkout (neither ships);
    ansible-test passes no environment of ours to pytest, so they find it through this file (see
    tests/ansible_units/conftest.py)."""
    (tree / "tests" / "unit" / "source_repo.txt").write_text(f"{REPO}\n", encoding="utf-8")


def core_venv(version: str) -> Path:
    """The ``bin`` of a venv holding ansible-core ``version`` (X.Y, its newest patch release) beside
    this one's packages, made once per machine in its test cache (tests/tools/machine_cache.py), keyed
    by the interpreter it is made with (pip, from the configured index)."""
    base = os.path.realpath(sys._base_executable)  # the interpreter a venv made here points at
    key = hashlib.sha256(f"{base} {sys.version}".encode()).hexdigest()[:10]
    venv = machine_cache(f"ansible-core-{version}-{key}")
    stamp = venv / ".installed"
    if not stamp.is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        proc = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"ansible-core=={version}.*", "pyyaml"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"pip install ansible-core=={version}.* failed:\n{proc.stdout}{proc.stderr}")
        stamp.touch()
    return venv / "bin"


def install_get_pip_standin(bin_dir: Path = BIN, home: Path | None = None) -> None:
    """ansible-test downloads a get-pip script that is unreachable here; give it the stand-in under
    every name it may ask for (the pip version is the pin of the ansible-test in ``bin_dir``'s venv),
    in the cache under ``home`` (the one ansible-test will run with; default: this process's)."""
    (source,) = bin_dir.parent.glob("lib/python3*/site-packages/ansible_test/_internal/python_requirements.py")
    versions = set(re.findall(r"pip='([0-9.]+)'", source.read_text()))
    cache = (home or Path.home()) / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for version in versions:
        shutil.copy2(GET_PIP_STANDIN, cache / f"get_pip_{version.replace('.', '_')}.py")


def release_changelog(version: str) -> None:
    """``antsibull-changelog release`` for ``version``, over what is committed (HEAD). It runs in a
    staging copy of an export of HEAD: antsibull-changelog copies the collection to list its plugins
    with ansible-doc, and the repository's fixture nodes hold symlinks that deliberately point nowhere.
    The release's changelog.yaml and CHANGELOG.rst come back; the fragments it consumed are removed
    here (commit them together)."""
    with tempfile.TemporaryDirectory(prefix="gpustack-changelog-") as scratch:
        export = Path(scratch) / "head"
        export.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
        tree = stage(Path(scratch) / "stage", None, export)
        proc = subprocess.run(
            [str(BIN / "antsibull-changelog"), "release", "-v", "--version", version],
            cwd=tree,
            capture_output=True,
            text=True,
            env=quiet_env(),
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"antsibull-changelog release failed:\n{proc.stdout}{proc.stderr}")
        shutil.copy2(tree / "changelogs" / "changelog.yaml", REPO / "changelogs" / "changelog.yaml")
        shutil.copy2(tree / "CHANGELOG.rst", REPO / "CHANGELOG.rst")
        left = {p.name for p in (tree / "changelogs" / "fragments").iterdir()}
        for fragment in (REPO / "changelogs" / "fragments").iterdir():
            if fragment.name not in left and not fragment.name.startswith("."):
                fragment.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=DIST, help="where the tarball goes (default: dist/)")
    parser.add_argument("--install", type=Path, metavar="DIR", help="then install it under DIR (ansible-galaxy -p)")
    parser.add_argument("--release-changelog", metavar="VERSION", help="only run antsibull-changelog release")
    args = parser.parse_args(argv)
    if args.release_changelog:
        release_changelog(args.release_changelog)
        print(REPO / "CHANGELOG.rst")
        return 0
    tarball = build(args.dist)
    print(tarball)
    if args.install:
        tree = install(tarball, args.install)
        point_units_at_source(tree)
        print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
