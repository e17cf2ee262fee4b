"""Controller-side artifacts for the molecule scenarios (extensions/molecule/*/prepare.yml runs this).

The containers run with no network at all, so everything they need is made here and copied in:

* the vendor-library stand-ins compiled into the fixture trees (``tests.stubs.build``);
* the package as a wheel (``pip wheel --no-deps``) and a wheelhouse of exactly its dependencies
  (``pip download``, offline from the machine's test cache -- tests/tools/machine_cache.py -- when it
  has them, else from the index once), which the install role installs from with ``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheelhouse>``;
* ``roots.tar``: fixture nodes' root filesystems placed at the paths they get in the container
  (symlinks kept; optionally without some files, e.g. a node whose container runtime did not inject
  the vendor library), plus stand-ins for the vendor CLIs the preflight's cross-check runs as the host
  (``chroot <root> nvidia-smi -L``, ``npu-smi info -l``). Those answer in the tools' own output format
  with the accelerators the package itself detects on the fixture (``gpustack-operator dm detect -o
  json``), so they agree with whatever the detection serves today. One archive: one transfer.

Prints one JSON document: {"wheel", "wheelhouse", "wheelhouse_tar", "roots_tar", "roots": [paths],
"clis": {path: which}}.

    python -m tests.tools.molecule_artifacts --out tests/.build/molecule/preflight \
        --root /host=h100-sxm-8x --cli /host/usr/bin/nvidia-smi=h100-sxm-8x \
        --root /hosts/l40s=mixed-nvidia-mellanox:usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import io
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from tests.tools.machine_cache import machine_cache

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "fixtures" / "hosts"
CLI = Path(sys.executable).parent / "gpustack-operator"


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


def newest_source() -> float:
    """The newest modification time among what goes into the wheel."""
    sources = [REPO / "pyproject.toml", REPO / "README.md", *(REPO / "operator" / "src").rglob("*")]
    return max(p.stat().st_mtime for p in sources if p.is_file() and "__pycache__" not in p.parts)


def build_wheel(dist: Path, shared: Path) -> Path:
    """The package wheel in ``dist``: built (no index needed when setuptools is importable here) into
    ``shared`` unless the wheel there is newer than every source, then copied."""
    shared.mkdir(parents=True, exist_ok=True)
    built = sorted(shared.glob("gpustack_operator-*.whl"))
    if len(built) != 1 or built[0].stat().st_mtime < newest_source():
        for old in built:
            old.unlink()
        isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        proc = pip("wheel", "--quiet", "--no-deps", *isolation, "--wheel-dir", str(shared), str(REPO))
        if proc.returncode != 0:
            raise SystemExit(f"pip wheel failed:\n{proc.stdout}{proc.stderr}")
        built = sorted(shared.glob("gpustack_operator-*.whl"))
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("gpustack_operator-*.whl"):
        old.unlink()
    (wheel,) = built
    return Path(shutil.copy2(wheel, dist / wheel.name))


def build_wheelhouse(wheel: Path, wheelhouse: Path, cache: Path) -> Path:
    """Exactly the dependencies of the wheel, as wheels, in ``wheelhouse`` (and packed as
    ``<wheelhouse>.tar``: one transfer into the container instead of one per file). They are taken
    from ``cache`` offline; the index is asked only when the cache lacks something."""
    for old in wheelhouse.glob("*.whl"):
        old.unlink()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    binary = ("--quiet", "--only-binary=:all:")
    offline = ("download", *binary, "--no-index", "--find-links", str(cache), "--dest", str(wheelhouse), str(wheel))
    if pip(*offline).returncode != 0:
        online = pip("download", *binary, "--dest", str(cache), str(wheel))
        if online.returncode != 0:
            raise SystemExit(f"pip download failed:\n{online.stdout}{online.stderr}")
        proc = pip(*offline)
        if proc.returncode != 0:
            raise SystemExit(f"pip download from {cache} failed:\n{proc.stdout}{proc.stderr}")
    for own in [*wheelhouse.glob("gpustack_operator-*"), *cache.glob("gpustack_operator-*")]:
        own.unlink()  # the install role installs the wheel by path
    with tarfile.open(wheelhouse.with_suffix(".tar"), "w") as tar:
        for whl in sorted(wheelhouse.glob("*.whl")):
            tar.add(whl, arcname=whl.name)
    return wheelhouse


def add_root(tar: tarfile.TarFile, spec: str) -> str:
    """``/path=FIXTURE[:EXCLUDED,...]``: the fixture tree under ``path`` in the archive."""
    path, _, rest = spec.partition("=")
    fixture, _, excluded = rest.partition(":")
    source = HOSTS / fixture
    if not path.startswith("/") or not source.is_dir():
        raise SystemExit(f"--root {spec}: expected /path=<fixture host under {HOSTS}>")
    skip = {e.strip("/") for e in excluded.split(",") if e}
    base = path.strip("/")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = info.name.removeprefix(base).lstrip("/")
        # what a preflight run on the shared fixture staged onto it is not the node as imaged
        staged = rel == "var/lib/gpustack" or rel.startswith("var/lib/gpustack/")
        return None if rel in skip or staged or info.ischr() or info.isblk() else info

    tar.add(source, arcname=base, filter=keep)
    return path


def fixture_cli(fixture: str, tool: str, excluded: tuple[str, ...] = ()) -> str | None:
    """Where the fixture node already carries ``tool`` on the host PATH the preflight searches."""
    from gpustack_operator.preflight.hostexec import HOST_PATH

    for directory in HOST_PATH:
        rel = f"{directory.strip('/')}/{tool}"
        if rel not in excluded and (HOSTS / fixture / rel).is_file():
            return rel
    return None


def add_cli(tar: tarfile.TarFile, spec: str) -> str:
    """``/root/usr/bin/<tool>=FIXTURE``: a stand-in for ``tool`` serving that fixture's accelerators,
    unless the fixture node carries its own (tests/fixtures/tools/build_host_clis.py), which is then
    the one the preflight finds. Returns which one the root has."""
    path, _, fixture = spec.partition("=")
    tool = path.rsplit("/", 1)[-1]
    makers = {"nvidia-smi": nvidia_smi, "npu-smi": npu_smi}
    if tool not in makers or not (HOSTS / fixture).is_dir():
        raise SystemExit(f"--cli {spec}: expected /.../<{' or '.join(makers)}>=<fixture host>")
    own = fixture_cli(fixture, tool)
    if own:
        return f"the fixture's own /{own}"
    data = makers[tool](fixture).encode()
    info = tarfile.TarInfo(path.strip("/"))
    info.size, info.mode, info.mtime = len(data), 0o755, int(time.time())
    tar.addfile(info, io.BytesIO(data))
    return "a stand-in written by tests/tools/molecule_artifacts.py"


def detect(fixture: str, manufacturer: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(CLI), "dm", "detect", "--host-root", str(HOSTS / fixture), "--manufacturer", manufacturer, "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"gpustack-operator dm detect on {fixture} failed:\n{proc.stderr}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def accelerators(fixture: str, manufacturer: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    doc = detect(fixture, manufacturer)
    return [(g, a) for g in doc["groups"] if g["manufacturer"] == manufacturer for a in g["accelerators"]]


def script(tool: str, args: list[str], lines: list[str], fixture: str) -> str:
    """A ``#!/bin/sh`` stand-in (printf is a dash builtin: the host root carries only a shell)."""
    body = "\n".join(f"printf '%s\\n' {shlex.quote(line)}" for line in lines)
    test = " && ".join(f'[ "${i}" = {shlex.quote(a)} ]' for i, a in enumerate(args, start=1))
    return (
        "#!/bin/sh\n"
        f"# Stand-in for {tool} on a molecule fixture node ({fixture}): answers `{tool} {' '.join(args)}` in the\n"
        "# tool's own format with the accelerators gpustack-operator detects on that fixture.\n"
        f'if [ "$#" -eq {len(args)} ] && {test}; then\n{body}\nexit 0\nfi\n'
        f"echo \"{tool}: this stand-in answers only '{' '.join(args)}'\" >&2\nexit 1\n"
    )


def nvidia_smi(fixture: str) -> str:
    """``nvidia-smi -L``: ``GPU <index>: <name> (UUID: <uuid>)`` per GPU."""
    lines = [f"GPU {a['index']}: {g['name']} (UUID: {a['id']})" for g, a in accelerators(fixture, "nvidia")]
    if not lines:
        raise SystemExit(f"{fixture}: no NVIDIA accelerator detected to list")
    return script("nvidia-smi", ["-L"], lines, fixture)


def npu_smi(fixture: str) -> str:
    """``npu-smi info -l``: the total, then an ``NPU ID`` block per card."""
    accs = accelerators(fixture, "ascend")
    if not accs:
        raise SystemExit(f"{fixture}: no Ascend accelerator detected to list")
    pad = " " * 8
    lines = [f"{pad}{'Total Count':<31}: {len(accs)}", ""]
    for _, a in accs:
        card = (a.get("physicalIndexes") or [a["index"]])[0]
        lines += [f"{pad}{'NPU ID':<31}: {card}", f"{pad}{'Chip Count':<31}: 1", ""]
    return script("npu-smi", ["info", "-l"], lines[:-1], fixture)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="e.g. tests/.build/molecule/<scenario>")
    parser.add_argument("--no-wheel", action="store_true", help="skip the wheel and wheelhouse")
    parser.add_argument("--root", action="append", default=[], metavar="/PATH=HOST[:EXCLUDED,...]")
    parser.add_argument("--cli", action="append", default=[], metavar="/PATH/TOOL=HOST")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    from tests.stubs.build import build_all

    # Scenarios may run side by side (each with its own --out): the stand-ins and the wheel are built
    # in shared places (the fixture trees, the in-tree build/), one at a time.
    with (REPO / "tests" / ".build" / "molecule-artifacts.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build_all()
        result: dict[str, Any] = {}
        if not args.no_wheel:
            wheel = build_wheel(out / "dist", REPO / "tests" / ".build" / "molecule" / "wheel")
            wheelhouse = build_wheelhouse(wheel, out / "wheelhouse", machine_cache("pip"))
            result.update(wheel=str(wheel), wheelhouse=str(wheelhouse), wheelhouse_tar=f"{wheelhouse}.tar")
    roots_tar = out / "roots.tar"
    with tarfile.open(roots_tar, "w") as tar:
        result["roots"] = [add_root(tar, spec) for spec in args.root]
        result["clis"] = {spec.partition("=")[0]: add_cli(tar, spec) for spec in args.cli}
    result["roots_tar"] = str(roots_tar)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
