"""The ``kubernetes.core`` collection for the deploy role's tests, without Galaxy (issue 19).

No Galaxy server is reachable where this repository is built and tested, but the ``ansible`` community
package on PyPI bundles ``kubernetes.core``: ``pip download --no-deps ansible==<ANSIBLE>`` fetches its
wheel once (its sha256 pinned below: a wheel that differs is refused, never used), and only
``ansible_collections/kubernetes/core/`` is taken out of it, into the machine's test cache
(tests/tools/machine_cache.py: ``kubernetes-core/<recipe>/``), atomically and under a lock, so a second
checkout on this machine -- a clean CI clone included -- reuses it.

    python -m tests.tools.kubernetes_core     # prints the collections dir: put it on ANSIBLE_COLLECTIONS_PATH

Why ansible 14.5.0 and not 11: ansible 11 bundles kubernetes.core 5.x, whose helm modules refuse (or
break on) helm 4, and the tests' helm is 4.1.4 (tests/tools/helm.sh); 14.5.0 bundles kubernetes.core
6.6.0, which speaks helm 4 (``--atomic`` becomes ``--rollback-on-failure`` there).

Exit: 0 and the path on stdout (last line); 3 when pip cannot fetch the wheel (the index unreachable: the
tests skip on this code only); 1 on anything else (a checksum that differs, a wheel without the
collection). Progress on stderr.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.tools.machine_cache import machine_cache

ANSIBLE = "14.5.0"
WHEEL = f"ansible-{ANSIBLE}-py3-none-any.whl"
SHA256 = "245623ccc2d31d0f6f4bdb63168d550cad305fb032cc43d96e8f61ce8ab0ba84"
COLLECTION = "ansible_collections/kubernetes/core/"
KUBERNETES_CORE = "6.6.0"  # what that wheel bundles (checked from its MANIFEST.json)
RECIPE = f"kubernetes.core-{KUBERNETES_CORE}-from-ansible-{ANSIBLE}"
FETCH_FAILED = 3


class KubernetesCoreError(RuntimeError):
    """The collection could not be provided; ``code`` is the exit status (3: pip could not fetch)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _log(message: str) -> None:
    print(f"kubernetes_core: {message}", file=sys.stderr)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _download(work: Path) -> Path:
    """``pip download --no-deps ansible==ANSIBLE`` into ``work``, checked against the pinned sha256."""
    _log(f"fetching ansible=={ANSIBLE} from the package index (once per machine, ~51 MB)")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    argv += ["--disable-pip-version-check", "--dest", str(work), f"ansible=={ANSIBLE}"]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
    )
    wheel = work / WHEEL
    if proc.returncode != 0 or not wheel.is_file():
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise KubernetesCoreError(f"pip download ansible=={ANSIBLE} failed (index unreachable?): {tail}", FETCH_FAILED)
    got = _sha256(wheel)
    if got != SHA256:
        raise KubernetesCoreError(f"{WHEEL} has sha256 {got}, expected {SHA256}: refused")
    return wheel


def _extract(wheel: Path, dest: Path) -> None:
    """Only the collection's files, each kept inside ``dest`` (no member escapes it)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if name.startswith(COLLECTION) and not name.endswith("/")]
        if not members:
            raise KubernetesCoreError(f"{WHEEL} holds no {COLLECTION}")
        root = dest.resolve()
        for name in members:
            target = (dest / name).resolve()
            if not target.is_relative_to(root):
                raise KubernetesCoreError(f"{WHEEL}: member {name!r} would land outside {dest}: refused")
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)
    manifest = json.loads((dest / COLLECTION / "MANIFEST.json").read_text(encoding="utf-8"))
    version = manifest["collection_info"]["version"]
    if version != KUBERNETES_CORE:
        raise KubernetesCoreError(f"{WHEEL} bundles kubernetes.core {version}, expected {KUBERNETES_CORE}: refused")


def provide(cache: Path | None = None) -> Path:
    """The directory to put on ``ANSIBLE_COLLECTIONS_PATH`` (it holds ``ansible_collections/kubernetes/core``),
    made once per machine. Raises :class:`KubernetesCoreError`."""
    entry = cache or machine_cache("kubernetes-core", RECIPE)
    collections = entry / "collections"
    if (collections / COLLECTION / "MANIFEST.json").is_file():
        return collections
    entry.mkdir(parents=True, exist_ok=True)
    with (entry / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (collections / COLLECTION / "MANIFEST.json").is_file():  # made while this process waited
            return collections
        with tempfile.TemporaryDirectory(prefix=".work.", dir=entry) as scratch:
            work = Path(scratch)
            _extract(_download(work), work / "collections")
            (work / "collections").rename(collections)
    return collections


def main() -> int:
    try:
        path = provide()
    except KubernetesCoreError as exc:
        _log(str(exc))
        return exc.code
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
