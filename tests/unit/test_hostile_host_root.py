"""Hostile paths for the host root (issue 8): NUL bytes, lone surrogates, names longer than the
filesystem takes, ``..`` runs, deep and long paths, symlink loops and links that point outside. Every
:class:`HostRoot` method answers with a value or :class:`HostPathError` (``os`` raises ``ValueError``
on an embedded NUL, ``UnicodeEncodeError`` on a surrogate), and nothing resolves outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.root import HostRootError
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import HOSTS
from tests.unit.hostile import hostile_text

pytestmark = pytest.mark.hostile

ROOTS = [HOSTS / "escaping-symlink", HOSTS / "unreadable-sysfs"]
_PIECES = st.sampled_from(
    [
        "sys",
        "bus",
        "pci",
        "devices",
        "0000:00:05.0",
        "0000:00:01.0",
        "proc",
        "cpuinfo",
        "etc",
        "os-release",
        "..",
        ".",
        "",
        "\x00",
        "a\x00b",
        "\ud800",
        "\udcff",
        "x" * 300,
        "vendor",
        "driver",
    ]
)
PATHS = st.one_of(
    hostile_text(),
    st.lists(_PIECES | st.text(max_size=6), max_size=12).map("/".join),
    st.lists(_PIECES, max_size=12).map(lambda parts: "/" + "/".join(parts)),
)


def _answer(host: HostRoot, method: str, path: str) -> object:
    try:
        if method in ("read_text", "read_optional"):
            return getattr(host, method)(path, limit=4096)
        return getattr(host, method)(path)
    except HostPathError as exc:
        assert path.startswith(exc.host_path) and exc.errno  # readlink names the parent it resolved
        return exc


ANSWERS = {
    "canonical": str,
    "path": Path,
    "exists": bool,
    "is_dir": bool,
    "read_text": str,
    "read_optional": str | None,
    "listdir": list,
    "readlink": str | None,
}


@pytest.mark.parametrize("method", sorted(ANSWERS))
@given(root=st.sampled_from(ROOTS), path=PATHS)
@example(root=ROOTS[0], path="/proc/cpu\x00info")
@example(root=ROOTS[0], path="/sys/\ud800")
@example(root=ROOTS[0], path="/sys/bus/pci/devices/0000:00:05.0/../../../../../../etc/os-release")
@example(root=ROOTS[0], path="/" + "a/" * 30_000)
@example(root=ROOTS[0], path="/" + "../" * 20_000 + "proc/cpuinfo")
@example(root=ROOTS[0], path="/" + "a/../" * 13_000)
@example(root=ROOTS[1], path="/sys/bus/pci/devices/x")
def test_every_method_answers(method: str, root: Path, path: str) -> None:
    host = HostRoot(root)
    answer = _answer(host, method, path)
    assert isinstance(answer, ANSWERS[method] | HostPathError), answer
    if method == "canonical" and isinstance(answer, str):
        assert answer.startswith("/")
    if isinstance(answer, Path):  # confined to the root
        assert str(answer) == str(host.root) or str(answer).startswith(f"{host.root}/"), answer


@given(hostile_text() | st.sampled_from(["", "/\x00", "/nonexistent", str(HOSTS / "escaping-symlink/etc/os-release")]))
def test_constructing_a_root(path: str) -> None:
    try:
        host = HostRoot(path)
    except HostRootError:
        return
    assert os.path.isdir(host.root)
