"""plugins/module_utils/gpustack.py: a later, separate run finds the venv the install role made (issue 17).

The install role records each venv it makes -- ``{"python": <venv>/bin/python, "host_root": <the
node's root or null>}`` -- under ``~/.local/state/gpustack/accelerators/`` of the user it runs as. A
module whose own Python cannot import gpustack-operator reads those records (host input: regular files
only, never blocking, bounded), probes the candidates in order -- the record for this host's root, the
node's own record, the install role's default venv -- and re-runs itself under the first that imports
the package (Ansible's respawn); when none does, the task fails naming the interpreter it ran under,
every venv it looked at and why each was not used, and the install role as the remedy."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.unit.hostile import deep_nesting, hostile_text
from tests.unit.nonregular import KINDS, no_leftover_fifo_readers, plant, within

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpustack.accelerators.plugins.module_utils import gpustack

ROLE = REPO / "roles" / "install"


def record(python: str, host_root: str | None = None, **extra: Any) -> bytes:
    return json.dumps({"python": python, "host_root": host_root, **extra}).encode()


def one_line(text: str) -> bool:
    return len(text.splitlines()) == 1 and text == text.strip() and len(text) <= 400


# -- the record --------------------------------------------------------------------------------------


def test_a_record_the_role_writes_reads_back() -> None:
    got = gpustack.parse_record(record("/opt/v/bin/python", "/srv/nodes/h100/", version="0.1.0"))
    assert got == gpustack.Record(python="/opt/v/bin/python", host_root="/srv/nodes/h100")


@pytest.mark.parametrize("root", [None, ""])
def test_a_record_without_a_root_is_the_nodes_own(root: str | None) -> None:
    assert gpustack.parse_record(record("/opt/v/bin/python", root)).host_root is None


def test_a_record_without_the_host_root_key_is_the_nodes_own() -> None:
    assert gpustack.parse_record(b'{"python": "/v/bin/python"}\n') == gpustack.Record("/v/bin/python", None)


REFUSED = [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"/opt/v/bin/python\n", "is not JSON"),
    (b"", "is not JSON"),
    (b'["/opt/v/bin/python"]', "is not a JSON object (it is an array)"),
    (b'"/opt/v/bin/python"', "is not a JSON object (it is a string)"),
    (b'{"host_root": null}', 'has no "python"'),
    (b'{"python": 3}', '"python" is not a string (it is a number)'),
    (b'{"python": "bin/python"}', '"python" is not an absolute path'),
    (b'{"python": ""}', '"python" is not an absolute path'),
    # found by the hostile profile: a value of blanks ended the message in blanks
    (b'{"python": " "}', "\"python\" is not an absolute path: ' '"),
    (b'{"python": "\\r "}', "\"python\" holds a control character: '\\x0d '"),
    (b'{"python": "/v/bin/py\\u0000thon"}', '"python" holds a control character'),
    (b'{"python": "/v/bin/py\\nthon"}', '"python" holds a control character'),
    (b'{"python": "/v/bin/\\ud800python"}', '"python" holds a lone surrogate'),
    (b'{"python": "/v/bin/python", "host_root": 7}', '"host_root" is not a string (it is a number)'),
    (b'{"python": "/v/bin/python", "host_root": ["/"]}', '"host_root" is not a string (it is an array)'),
    (b'{"python": "/v/bin/python", "host_root": "/x\\u001b[2J"}', '"host_root" holds a control character'),
    (b"[" * 100_000, "is larger than 4096 bytes"),
    (b"[" * 4000 + b"]" * 4000, "is larger than 4096 bytes"),
    (b"[" * 2000, "is not JSON"),
    (json.dumps({"python": "/" + "p" * 2000}).encode(), '"python" is longer than 1024 characters'),
]


@pytest.mark.parametrize(("data", "words"), REFUSED, ids=[w for _, w in REFUSED])
def test_a_bad_record_is_refused_in_one_line(data: bytes, words: str) -> None:
    with pytest.raises(gpustack.RecordError) as info:
        gpustack.parse_record(data)
    assert words in str(info.value), str(info.value)
    assert one_line(str(info.value)), str(info.value)


@pytest.mark.parametrize(
    ("value", "normal"),
    [(None, None), ("", None), ("/", "/"), ("/srv//x/", "/srv/x"), ("/srv/./x/../y", "/srv/y")],
)
def test_roots_compare_normalised(value: str | None, normal: str | None) -> None:
    assert gpustack.normalize_root(value) == normal


def test_a_root_under_the_home_directory_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ops")
    assert gpustack.normalize_root("~/nodes/a/") == "/home/ops/nodes/a"
    assert gpustack.normalize_root("~") == "/home/ops"
    # another user's home is never looked up (no NSS call on a task's path)
    assert gpustack.normalize_root("~ops/x") == "~ops/x"


# -- reading the records: host reads ------------------------------------------------------------------


def test_the_records_are_read_and_a_bad_one_costs_that_one_only(tmp_path: Path) -> None:
    (tmp_path / "python.json").write_bytes(record("/v/own/bin/python"))
    (tmp_path / "python-0123456789abcdef.json").write_bytes(record("/v/a/bin/python", "/nodes/a"))
    (tmp_path / "python-broken.json").write_bytes(b"not json")
    (tmp_path / "notes.txt").write_text("not a record: not read")
    records, problems = gpustack.read_records(str(tmp_path))
    assert sorted(r for _, r in records) == [
        gpustack.Record("/v/a/bin/python", "/nodes/a"),
        gpustack.Record("/v/own/bin/python", None),
    ]
    assert problems == [f"{tmp_path}/python-broken.json is not JSON (Expecting value: line 1 column 1 (char 0))"]


def test_no_record_directory_is_no_record(tmp_path: Path) -> None:
    assert gpustack.read_records(str(tmp_path / "absent")) == ([], [])


@pytest.mark.parametrize("kind", KINDS)
def test_a_non_regular_record_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    (tmp_path / "python.json").write_bytes(record("/v/own/bin/python"))
    plant(tmp_path / "python-x.json", kind)
    with no_leftover_fifo_readers(tmp_path):
        records, problems = within(tmp_path, lambda: gpustack.read_records(str(tmp_path)))
    assert [r for _, r in records] == [gpustack.Record("/v/own/bin/python", None)]
    words = {"fifo": "a FIFO", "socket": "a socket", "directory": "a directory", "chardev": "a character device"}
    assert problems == [f"{tmp_path}/python-x.json is {words[kind]}, not a regular file"]


def test_a_symlinked_record_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(record("/v/bin/python"))
    (tmp_path / "python.json").symlink_to(elsewhere)
    records, problems = gpustack.read_records(str(tmp_path))
    assert records == []
    assert problems == [f"{tmp_path}/python.json is a symbolic link, not a regular file"]


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "directory"])
def test_a_record_directory_that_is_no_directory_is_named_at_once(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "records"
    plant(where, kind)
    with no_leftover_fifo_readers(tmp_path):
        records, problems = within(tmp_path, lambda: gpustack.read_records(str(where)))
    assert records == []
    assert problems == [f"{where} cannot be listed: Not a directory"]


def test_an_oversized_record_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    (tmp_path / "python.json").write_bytes(b" " * (64 * 1024 * 1024))
    records, problems = gpustack.read_records(str(tmp_path))
    assert records == []
    assert problems == [f"{tmp_path}/python.json is larger than 4096 bytes"]


def test_at_most_64_records_are_read(tmp_path: Path) -> None:
    for i in range(70):
        (tmp_path / f"python-{i:03d}.json").write_bytes(record(f"/v/{i}/bin/python", f"/nodes/{i}"))
    records, problems = gpustack.read_records(str(tmp_path))
    assert len(records) == 64
    assert problems == [f"{tmp_path}: 6 more records not read (64 at most)"]


# -- which venv, in which order -------------------------------------------------------------------------


def test_the_candidates_are_this_roots_record_then_the_nodes_own_then_the_default_venv() -> None:
    records = [
        gpustack.Record("/v/other/bin/python", "/nodes/other"),
        gpustack.Record("/v/own/bin/python", None),
        gpustack.Record("/v/a/bin/python", "/nodes/a"),
    ]
    got = gpustack.candidates(records, "/nodes/a/", default_venv="/opt/gpustack-operator/venv")
    assert [c.python for c in got] == [
        "/v/a/bin/python",
        "/v/own/bin/python",
        "/opt/gpustack-operator/venv/bin/python",
    ]
    unrooted = gpustack.candidates(records, None, default_venv="/opt/gpustack-operator/venv")
    assert [c.python for c in unrooted] == ["/v/own/bin/python", "/opt/gpustack-operator/venv/bin/python"]


def test_a_venv_named_twice_is_tried_once() -> None:
    records = [gpustack.Record("/opt/gpustack-operator/venv/bin/python", None)]
    got = gpustack.candidates(records, None, default_venv="/opt/gpustack-operator/venv")
    assert [c.python for c in got] == ["/opt/gpustack-operator/venv/bin/python"]


def write_records(directory: Path, *records: tuple[str, str | None]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, (python, root) in enumerate(records):
        (directory / f"python-{i}.json").write_bytes(record(python, root))


def test_the_first_candidate_that_imports_the_package_is_chosen(tmp_path: Path) -> None:
    write_records(tmp_path / "rec", ("/v/broken/bin/python", "/nodes/a"), ("/v/own/bin/python", None))
    answers = {"/v/broken/bin/python": "cannot import gpustack_operator (ModuleNotFoundError: No module ...)"}
    found, tried = gpustack.find_interpreter(
        "/nodes/a",
        record_dir=str(tmp_path / "rec"),
        default_venv=str(tmp_path / "default"),
        current="/usr/bin/python3",
        probe=answers.get,
    )
    assert found == "/v/own/bin/python"
    assert tried == [
        "/v/broken/bin/python (recorded for node root /nodes/a): cannot import gpustack_operator "
        "(ModuleNotFoundError: No module ...)"
    ]


def test_nothing_found_names_every_venv_looked_at_and_why(tmp_path: Path) -> None:
    write_records(tmp_path / "rec", ("/v/a/bin/python", "/nodes/a"), ("/v/b/bin/python", "/nodes/b"))
    found, tried = gpustack.find_interpreter(
        "/nodes/c",
        record_dir=str(tmp_path / "rec"),
        default_venv=str(tmp_path / "default"),
        current="/usr/bin/python3",
        probe=gpustack.probe,
    )
    assert found is None
    assert tried == [
        f"no record for node root /nodes/c in {tmp_path}/rec, and no record of the node's own; "
        "recorded there for other node roots: /nodes/a (/v/a/bin/python), /nodes/b (/v/b/bin/python)",
        f"{tmp_path}/default/bin/python (the install role's default venv): absent",
    ]


def test_a_task_without_a_root_on_a_machine_with_rooted_records_says_so(tmp_path: Path) -> None:
    write_records(tmp_path / "rec", ("/v/a/bin/python", "/nodes/a"))
    found, tried = gpustack.find_interpreter(
        None,
        record_dir=str(tmp_path / "rec"),
        default_venv=str(tmp_path / "default"),
        current="/usr/bin/python3",
        probe=gpustack.probe,
    )
    assert found is None
    assert tried[0] == (
        f"no record for this node (the task sets no host_root) in {tmp_path}/rec, and no record of the "
        "node's own; recorded there for other node roots: /nodes/a (/v/a/bin/python)"
    )


def test_an_empty_machine_says_no_record_was_found(tmp_path: Path) -> None:
    found, tried = gpustack.find_interpreter(
        None,
        record_dir=str(tmp_path / "rec"),
        default_venv=str(tmp_path / "default"),
        current="/usr/bin/python3",
        probe=gpustack.probe,
    )
    assert found is None
    assert tried == [
        f"no record in {tmp_path}/rec (the install role writes one for each venv it makes)",
        f"{tmp_path}/default/bin/python (the install role's default venv): absent",
    ]


def test_the_tasks_own_python_is_never_respawned_into(tmp_path: Path) -> None:
    write_records(tmp_path / "rec", ("/v/own/bin/python", None))
    found, tried = gpustack.find_interpreter(
        None,
        record_dir=str(tmp_path / "rec"),
        default_venv=str(tmp_path / "default"),
        current="/v/own/bin/python",
        probe=lambda python: None,
    )
    assert found == f"{tmp_path}/default/bin/python"
    assert tried == ["/v/own/bin/python (recorded for this node): this task's own Python, which lacks it"]


# -- probing a candidate: a real process with a deadline ---------------------------------------------------


def script(path: Path, body: str, mode: int = 0o755) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return str(path)


def test_probe_says_why_a_candidate_is_not_used(tmp_path: Path) -> None:
    assert gpustack.probe(str(tmp_path / "absent")) == "absent"
    assert gpustack.probe(str(tmp_path)) == "not a file"
    assert gpustack.probe(script(tmp_path / "plain", "exit 0", 0o644)) == "not executable"
    failing = script(tmp_path / "failing", "echo 'Traceback'>&2; echo \"ModuleNotFoundError: no gpustack\">&2; exit 1")
    assert gpustack.probe(failing) == "cannot import gpustack_operator (ModuleNotFoundError: no gpustack)"
    hostile = script(tmp_path / "hostile", r"printf 'x\033[2J\n' >&2; exit 3")
    assert gpustack.probe(hostile) == r"cannot import gpustack_operator (x\x1b[2J)"


def test_probe_never_waits_on_a_hung_interpreter(tmp_path: Path) -> None:
    hung = script(tmp_path / "hung", "exec sleep 60")
    said = within(tmp_path, lambda: gpustack.probe(hung, timeout=1))
    assert said == "did not answer in 1 s"


def test_probe_accepts_a_python_that_has_the_package() -> None:
    assert gpustack.probe(sys.executable) is None


# -- the task: respawn, or fail with everything it looked at ------------------------------------------------


class TaskFailedError(Exception):
    pass


class FakeModule:
    def __init__(self, **params: Any) -> None:
        self.params = params
        self.failure: dict[str, Any] | None = None

    def fail_json(self, msg: str, **kwargs: Any) -> NoReturn:
        self.failure = dict(kwargs, msg=msg)
        raise TaskFailedError(msg)


@pytest.fixture
def without_gpustack() -> Iterator[ModuleType]:
    """The module_utils as imported by a Python without the package (the import really fails)."""
    blocked: dict[str, Any] = {name: None for name in sys.modules if name.split(".")[0] == "gpustack_operator"}
    blocked["gpustack_operator"] = None
    with mock.patch.dict(sys.modules, blocked):
        importlib.reload(gpustack)
        yield gpustack
    importlib.reload(gpustack)


class Respawned(Exception):  # noqa: N818 - stands for the process being replaced
    pass


def respawn_stand_in(python: str) -> NoReturn:
    raise Respawned(python)


def venv_python(tmp_path: Path) -> str:
    """A venv's interpreter that has the package: this Python, under another name."""
    return script(tmp_path / "venv-python", f'exec {sys.executable} "$@"')


def test_a_task_without_the_package_respawns_into_the_recorded_venv(
    without_gpustack: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = venv_python(tmp_path)
    write_records(tmp_path / "rec", ("/v/a/bin/python", "/nodes/a"), (python, "/nodes/b"))
    monkeypatch.setattr(without_gpustack, "RECORD_DIR", str(tmp_path / "rec"))
    monkeypatch.setattr(without_gpustack, "respawn_module", respawn_stand_in)
    monkeypatch.setattr(without_gpustack, "can_respawn", lambda: True)
    with pytest.raises(Respawned) as info:
        without_gpustack.require_gpustack(FakeModule(host_root="/nodes/b"))
    assert str(info.value) == python


def test_a_task_without_the_package_and_no_venv_names_what_it_looked_at(
    without_gpustack: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_records(tmp_path / "rec", (sys.executable, "/nodes/b"))
    monkeypatch.setattr(without_gpustack, "RECORD_DIR", str(tmp_path / "rec"))
    monkeypatch.setattr(without_gpustack, "DEFAULT_VENV", str(tmp_path / "default"))
    monkeypatch.setattr(without_gpustack, "respawn_module", respawn_stand_in)
    monkeypatch.setattr(without_gpustack, "can_respawn", lambda: True)
    module = FakeModule(host_root="/nodes/c")
    with pytest.raises(TaskFailedError):
        without_gpustack.require_gpustack(module)
    assert module.failure is not None
    msg = module.failure["msg"]
    assert msg.startswith("Failed to import the required Python library (gpustack-operator) on "), msg
    assert f"'s Python {sys.executable} (ModuleNotFoundError: " in msg
    assert f"no record for node root /nodes/c in {tmp_path}/rec" in msg
    assert f"recorded there for other node roots: /nodes/b ({sys.executable})" in msg
    assert f"{tmp_path}/default/bin/python (the install role's default venv): absent" in msg
    assert "run the gpustack.accelerators.install role for this host" in msg
    assert "ansible_python_interpreter" in msg
    assert len(msg.splitlines()) == 1, msg
    assert "gpustack_operator" in module.failure["exception"]


def test_a_found_venv_outside_ansible_is_named_not_respawned_into(
    without_gpustack: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = venv_python(tmp_path)
    write_records(tmp_path / "rec", (python, None))
    monkeypatch.setattr(without_gpustack, "RECORD_DIR", str(tmp_path / "rec"))
    monkeypatch.setattr(without_gpustack, "respawn_module", respawn_stand_in)
    module = FakeModule(host_root=None)
    with pytest.raises(TaskFailedError):
        without_gpustack.require_gpustack(module)
    assert module.failure is not None
    assert f"{python} has it, but this module was not started by Ansible" in module.failure["msg"]


def test_a_respawned_task_that_still_cannot_import_says_where_it_ran(
    without_gpustack: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(without_gpustack, "has_respawned", lambda: True)
    monkeypatch.setattr(without_gpustack, "respawn_module", respawn_stand_in)
    module = FakeModule(host_root=None)
    with pytest.raises(TaskFailedError):
        without_gpustack.require_gpustack(module)
    assert module.failure is not None
    assert f"'s Python {sys.executable}, which this task was re-run under" in module.failure["msg"]


def test_a_task_with_the_package_neither_reads_records_nor_respawns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpustack, "read_records", mock.Mock(side_effect=AssertionError("read")))
    monkeypatch.setattr(gpustack, "respawn_module", respawn_stand_in)
    module = FakeModule(host_root=None)
    gpustack.require_gpustack(module)
    assert module.failure is None


# -- one rule: the role writes where the modules read ---------------------------------------------------------


def test_the_install_role_records_where_the_modules_look() -> None:
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert role_vars["__install_record_dir"] == gpustack.RECORD_DIR == "~/.local/state/gpustack/accelerators"
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["install_venv"] == gpustack.DEFAULT_VENV
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    assert specs["argument_specs"]["main"]["options"]["install_venv"]["default"] == gpustack.DEFAULT_VENV


# -- hostile input -----------------------------------------------------------------------------------------


def _json_value() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | hostile_text()
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )


def _record_like() -> st.SearchStrategy[bytes]:
    """JSON objects shaped like a record, with hostile values where the paths go."""
    return st.builds(
        lambda python, root, extra: json.dumps({"python": python, "host_root": root, **extra}).encode(),
        _json_value() | hostile_text().map(lambda t: "/" + t),
        _json_value(),
        st.dictionaries(st.text(max_size=8), _json_value(), max_size=3),
    )


def _any_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=5000),
        hostile_text().map(lambda t: t.encode("utf-8", "surrogatepass")),
        deep_nesting().map(str.encode),
        _record_like(),
    )


def _check_parsed(data: bytes) -> None:
    try:
        got = gpustack.parse_record(data)
    except gpustack.RecordError as exc:
        assert one_line(str(exc)), str(exc)
        return
    assert got.python.startswith("/") and len(got.python) <= 1024
    assert not any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in got.python)
    assert got.host_root is None or isinstance(got.host_root, str)


@pytest.mark.hostile
@given(_any_bytes())
def test_hostile_record_bytes_are_a_record_or_a_one_line_refusal(data: bytes) -> None:
    _check_parsed(data)


@pytest.mark.hostile
@given(st.one_of(st.none(), hostile_text()))
def test_hostile_roots_normalise_without_raising(value: str | None) -> None:
    got = gpustack.normalize_root(value)
    assert got is None or isinstance(got, str)


def _tree_entry() -> st.SearchStrategy[tuple[str, str, bytes]]:
    names = st.sampled_from(["python.json", "python-a.json", "python-b.json", "x.json", "python-c.json"])
    # (a socket is bound elsewhere and moved in, which /dev/shm refuses: the parametrized test has it)
    kinds = st.sampled_from(["file", "file", "fifo", "directory", "symlink"])
    return st.tuples(names, kinds, _any_bytes())


@pytest.mark.hostile
# Each example makes a directory of FIFOs, directories and files and removes it: a 2 s deadline (the
# profile's 100 ms is a parser's, and a busy disk is not the reader's doing); a blocked read still fails,
# at `within`'s own 5 s.
@settings(deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_tree_entry(), max_size=6, unique_by=lambda e: e[0]))
def test_hostile_record_directories_are_read_without_blocking_or_raising(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str, bytes]]
) -> None:
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rec-", dir=base or tmp_path_factory.getbasetemp()))
    try:
        for name, kind, data in entries:
            path = where / name
            if kind == "file":
                path.write_bytes(data)
            elif kind == "symlink":
                path.symlink_to(where / "python.json")
            else:
                plant(path, kind)
        with no_leftover_fifo_readers(where):
            records, problems = within(where, lambda: gpustack.read_records(str(where)), deadline=5)
        assert len(records) + len(problems) == len(entries)
        for problem in problems:
            assert one_line(problem.replace(str(where), "D")), problem
        for _, got in records:
            assert got.python.startswith("/")
    finally:
        for path in where.iterdir():
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        where.rmdir()


@pytest.mark.hostile
@given(st.lists(hostile_text(), max_size=4))
def test_hostile_probe_reasons_and_paths_make_a_one_line_message(lines: list[str]) -> None:
    msg = gpustack.import_failure_message("/usr/bin/python3", "ModuleNotFoundError: x", lines, respawned=False)
    assert len(msg.splitlines()) == 1 and "\x1b" not in msg
    for line in lines:  # every line is said, escaped
        assert gpustack.printable(line)[:40] in msg
