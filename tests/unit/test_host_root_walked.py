"""A ``HostRoot`` takes a walk up where an earlier one of the same pass ended (``_walked``, issue 8's
performance work): every answer -- path, ``ELOOP``, ``ENOTDIR``, an absent part seen appearing -- is
the one a fresh ``HostRoot`` walking the whole path gives."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.host.root import MAX_SYMLINKS

from tests.conftest import HOSTS


def _answer(root: HostRoot, path: str) -> tuple[str, object]:
    try:
        return ("path", root.canonical(path))
    except HostPathError as exc:
        return ("error", exc.errno)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "f").write_text("x")
    (tmp_path / "a" / "file").write_text("y")
    links = {
        "a/b/up": "../b",
        "abs": "/a/b",
        "loop1": "loop2",
        "loop2": "loop1",
        "dangling": "missing/x",
        "tofile": "a/b/c/f",
        "a/self": ".",
        "a/b/c/top": "../../..",
        "deep": "/a/b/up/up/up",
    }
    for name, target in links.items():
        os.symlink(target, tmp_path / name)
    # a chain of links: dir<i> -> dir<i+1> -> ... -> a
    for i in range(MAX_SYMLINKS + 2):
        os.symlink(f"dir{i + 1}" if i <= MAX_SYMLINKS else "a", tmp_path / f"dir{i}")
    return tmp_path


@pytest.mark.parametrize(
    ("known", "name", "expected"),
    [
        ("/dir3", "self", "path"),  # 39 links to reach "a", the 40th is the last one allowed
        ("/dir2", "self", "error"),  # 40, and one more
        ("/dir2", "b", "path"),  # 40, and no link
        ("/dir3/b/up", "up", "error"),  # 40, and one more
    ],
)
def test_links_followed_before_the_known_part_still_count_toward_eloop(
    tree: Path, known: str, name: str, expected: str
) -> None:
    # dir<k> is (MAX_SYMLINKS + 2 - k) links away from "a"
    path = f"{known}/{name}"
    warm = HostRoot(tree)
    assert _answer(warm, known)[0] == "path"
    assert _answer(warm, path) == _answer(HostRoot(tree), path)
    assert _answer(warm, path)[0] == expected
    if expected == "error":
        assert _answer(warm, path)[1] == errno.ELOOP


def test_an_absent_part_is_never_taken_for_known(tree: Path) -> None:
    root = HostRoot(tree)
    assert root.canonical("/a/new/f") == "/a/new/f"
    (tree / "a" / "new").mkdir()
    os.symlink("../b", tree / "a" / "new" / "f")
    assert root.canonical("/a/new/f") == HostRoot(tree).canonical("/a/new/f") == "/a/b"


def test_a_file_walked_through_is_enotdir_from_a_known_parent(tree: Path) -> None:
    root = HostRoot(tree)
    root.canonical("/tofile")
    with pytest.raises(HostPathError) as caught:
        root.canonical("/tofile/x")
    assert caught.value.errno == errno.ENOTDIR
    assert _answer(HostRoot(tree), "/tofile/x") == ("error", errno.ENOTDIR)


def _names(root: Path) -> list[str]:
    names: set[str] = set()
    for _, dirs, files in os.walk(root):
        names.update(dirs)
        names.update(files)
        if len(names) > 200:
            break
    return [*sorted(names), "", ".", "..", "missing", "sys", "devices", "net"]


@pytest.mark.parametrize("node", ["tree", "h100-sxm-8x", "escaping-symlink", "mixed-nvidia-mellanox"])
def test_a_pass_of_related_paths_answers_as_fresh_walks(node: str, tree: Path) -> None:
    top = tree if node == "tree" else HOSTS / node
    names = _names(top)
    rnd = random.Random(node)
    for _ in range(150):
        warm = HostRoot(top)
        base = "/" + "/".join(rnd.choice(names) for _ in range(rnd.randint(0, 6)))
        for _ in range(10):
            kind = rnd.random()
            if kind < 0.4:
                path = f"{base}/{rnd.choice(names)}"
            elif kind < 0.6:
                path = base
            elif kind < 0.8:
                path = "/" + "/".join(rnd.choice(names) for _ in range(rnd.randint(0, 8)))
            else:
                got = _answer(warm, base)
                path = f"{got[1] if got[0] == 'path' else base}/{rnd.choice(names)}"
            assert _answer(warm, path) == _answer(HostRoot(top), path), path
