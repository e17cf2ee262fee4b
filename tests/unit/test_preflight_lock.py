"""The preflight run lock (supplement §2.5 host writes, §2.8 "Only one preflight runs on a node at a
time"), over host roots written into tmp_path. Two real processes contending for it are in
tests/integration/test_preflight_lock_sweep.py; here one process, whose second acquire is a second
open file description and so a second lock owner, as a second run's would be."""

from __future__ import annotations

import errno
import os
import re
from datetime import datetime
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.lock import (
    LOCK_PATH,
    Holder,
    LockError,
    LockHeldError,
    LockUnusableError,
    acquire,
    parse_holder,
)
from hypothesis import given
from hypothesis import strategies as st


def root(tmp_path: Path) -> HostRoot:
    (tmp_path / "etc").mkdir(exist_ok=True)
    return HostRoot(tmp_path)


def test_absent_tree_is_created_and_the_holder_recorded(tmp_path: Path) -> None:
    held = acquire(root(tmp_path))
    try:
        lock = tmp_path / LOCK_PATH.lstrip("/")
        assert lock.is_file() and held.disk == str(lock) and held.path == LOCK_PATH
        assert parse_holder(lock.read_text()) == held.holder
        assert held.holder.pid == os.getpid()
        assert held.holder.started is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", held.holder.started)
        assert held.held
    finally:
        held.release()
    assert not held.held and lock.is_file()  # never removed


def test_second_acquire_refused_naming_the_lock_the_holder_and_the_remedy(tmp_path: Path) -> None:
    host = root(tmp_path)
    with acquire(host) as held, pytest.raises(LockHeldError) as info:
        acquire(host)
    text = str(info.value)
    assert f"another preflight run holds this node's lock {LOCK_PATH}" in text
    assert f"pid {os.getpid()}, started {held.holder.started}, as it recorded" in text
    assert "a second run's stale-container sweep would remove the first run's live probes" in text
    assert "wait for that run to finish" in text and f"ps -o pid,lstart,args -p {os.getpid()}" in text
    assert info.value.holder == held.holder and info.value.path == LOCK_PATH
    assert isinstance(info.value, LockError)


def test_released_lock_is_taken_again_and_the_record_rewritten(tmp_path: Path) -> None:
    host = root(tmp_path)
    first = acquire(host)
    first.release()
    first.release()  # idempotent
    lock = tmp_path / LOCK_PATH.lstrip("/")
    lock.write_text("pid=1\nstarted=2000-01-01T00:00:00Z\ntrailing garbage from an older record\n")
    with acquire(host) as second:
        assert parse_holder(lock.read_text()) == second.holder != Holder(pid=1, started="2000-01-01T00:00:00Z")
        assert "garbage" not in lock.read_text()


def test_garbled_record_leaves_the_pid_out_of_the_refusal(tmp_path: Path) -> None:
    host = root(tmp_path)
    with acquire(host) as held:
        os.ftruncate(held.fd, 0)
        os.pwrite(held.fd, b"\xff\xfepid=abc\nstarted=yesterday\n", 0)
        with pytest.raises(LockHeldError) as info:
            acquire(host)
    assert info.value.holder == Holder()
    assert "(it recorded no pid)" in str(info.value) and "pgrep -af 'device-manager preflight'" in str(info.value)


def test_lock_path_through_a_host_symlink_stays_inside_the_root(tmp_path: Path) -> None:
    """/var/lib/gpustack an absolute link on the host: resolved against the host root, never this
    machine's /."""
    (tmp_path / "data/gpustack").mkdir(parents=True)
    (tmp_path / "var/lib").mkdir(parents=True)
    (tmp_path / "var/lib/gpustack").symlink_to("/data/gpustack")
    with acquire(root(tmp_path)) as held:
        assert held.disk == str(tmp_path / "data/gpustack/operator/preflight/lock")
        assert Path(held.disk).is_file()


def test_directory_in_the_way_is_the_distinct_error_naming_path_and_errno(tmp_path: Path) -> None:
    (tmp_path / LOCK_PATH.lstrip("/")).mkdir(parents=True)
    with pytest.raises(LockUnusableError) as info:
        acquire(root(tmp_path))
    text = str(info.value)
    assert f"the preflight lock {LOCK_PATH} under the host root {tmp_path} could not be created: EISDIR" in text
    assert info.value.errno == errno.EISDIR
    assert "pass --dry-run, which starts nothing and takes no lock" in text
    assert not isinstance(info.value, LockHeldError)


def test_file_where_a_parent_directory_belongs_is_the_distinct_error(tmp_path: Path) -> None:
    (tmp_path / "var/lib").mkdir(parents=True)
    (tmp_path / "var/lib/gpustack").write_text("not a directory")
    with pytest.raises(LockUnusableError) as info:
        acquire(root(tmp_path))
    assert info.value.errno in (errno.ENOTDIR, errno.EEXIST)
    code = errno.errorcode[info.value.errno]
    assert f"the preflight lock {LOCK_PATH} under the host root {tmp_path} could not be created: {code}" in str(
        info.value
    )


def test_fifo_at_the_lock_path_is_refused_not_waited_on(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_PATH.lstrip("/")
    lock.parent.mkdir(parents=True)
    os.mkfifo(lock)
    with pytest.raises(LockUnusableError) as info:
        acquire(root(tmp_path))
    assert "could not be used, as it is not a regular file: EINVAL" in str(info.value)


def test_fd_is_not_inherited_by_what_the_run_starts(tmp_path: Path) -> None:
    with acquire(root(tmp_path)) as held:
        assert not os.get_inheritable(held.fd)


@given(st.text(max_size=300))
def test_holder_parser_never_raises_and_only_keeps_well_formed_values(text: str) -> None:
    holder = parse_holder(text)
    if holder.pid is not None:
        assert 0 < holder.pid <= 2**22
        assert any(re.fullmatch(rf"pid=0*{holder.pid}", line.strip()) for line in text.splitlines())
    if holder.started is not None:
        assert any(line.strip() == f"started={holder.started}" for line in text.splitlines())


@given(
    st.integers(min_value=1, max_value=2**22),
    st.datetimes(min_value=datetime(1000, 1, 1)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
)
def test_holder_record_round_trips(pid: int, started: str) -> None:
    holder = Holder(pid=pid, started=started)
    assert parse_holder(holder.render()) == holder
