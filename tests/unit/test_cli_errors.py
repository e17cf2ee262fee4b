"""Bad input never prints a traceback (issue 16): ``detect``, ``monitor``, ``mode`` and ``preflight``
name the problem in one line on stderr -- the trace goes to the debug log (``-v=3``) only -- and a usage
error (an unusable ``--detect-root``) exits 2 for every command that takes one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from gpustack_operator import api, cli
from gpustack_operator.manufacturers.base import DetectContext, DetectOutcome, Manufacturer, MonitorOutcome
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import HOSTS, host
from tests.unit.hostile import hostile_text

NODE = str(host("mixed-cambricon-metax"))


def exit_code(argv: list[str]) -> int:
    """``cli.main``'s exit code, whether it returns it or exits with it (argparse, usage errors)."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        assert isinstance(exc.code, int)
        return exc.code


def boom(self: Manufacturer, ctx: DetectContext) -> DetectOutcome:
    raise RuntimeError(f"invalid memory address in {self.name}")


def sample_boom(ctx: DetectContext) -> MonitorOutcome:
    raise RuntimeError(f"invalid memory address in {ctx.manufacturer.name}")


def test_a_crashing_detector_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Manufacturer, "detect", boom)
    code = cli.main(["dm", "detect", "--detect-root", NODE, "--manufacturer", "metax", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    reason = json.loads(out)["node"]["unmeasured"]["metax"]
    assert reason == "the metax detector crashed: RuntimeError: invalid memory address in metax"
    assert "metax could not be measured" in err
    assert "Traceback" not in err


def test_a_crashing_monitor_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Manufacturer, "monitor", property(lambda self: sample_boom))
    code = cli.main(["dm", "monitor", "--detect-root", NODE, "--manufacturer", "metax"])
    out, err = capsys.readouterr()
    assert code == 0
    reason = yaml.safe_load(out)["unmeasured"]["metax"]
    assert reason == "the metax monitor crashed: RuntimeError: invalid memory address in metax"
    assert "Traceback" not in err


def test_the_trace_is_there_at_debug_verbosity(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked for (-v=3), the trace is logged: the one-line message says to run it again so."""
    monkeypatch.setattr(Manufacturer, "detect", boom)
    cli.main(["dm", "detect", "-v=3", "--detect-root", NODE, "--manufacturer", "metax"])
    assert "Traceback" in capsys.readouterr().err


def test_a_crashed_preflight_writes_its_document_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api, "run_preflight", crash)
    code = cli.main(["dm", "preflight", "--dry-run", "--detect-root", NODE, "--host-root", NODE])
    out, err = capsys.readouterr()
    assert code == 1
    assert yaml.safe_load(out)["accelerators"]  # the document is written
    assert "RuntimeError: a bug" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    [
        ["dm", "detect"],
        ["dm", "monitor"],
        ["dm", "mode", "cambricon", "smlu"],
        ["dm", "mode", "cambricon", "smlu", "--enable", "--dry-run"],
        ["dm", "preflight", "--dry-run"],
        ["dm", "preflight"],
        ["dm", "serve", "--node-name", "n1"],
    ],
)
@pytest.mark.parametrize("root", ["nope", "a-file", ""])
def test_an_unusable_detect_root_is_a_usage_error_everywhere(
    command: list[str], root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Preflight too (issue 17): a --detect-root the user typed that names no directory is their typo,
    not nine unavailable answers each blaming "--host-root"; the line names the flag they used."""
    (tmp_path / "a-file").write_text("not a directory\n")
    value = str(tmp_path / root) if root else ""
    code = exit_code([*command, "--detect-root", value])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("gpustack-operator: error: --detect-root")
    assert (value or "empty") in line
    assert "--host-root" not in line


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["dm", "preflight", "--dry-run", "--detect-root", NODE], "host root"),
        (["dm", "preflight", "--detect-root", NODE], "host root"),
        (["dm", "detect"], "host root"),  # the same root as --detect-root for these: named as typed
        (["dm", "monitor"], "host root"),
        (["dm", "mode", "metax", "sgpu"], "host root"),
    ],
)
@pytest.mark.parametrize("root", ["nope", "a-file", "fifo", "/dev/null", "/proc/self/status", ""])
def test_a_host_root_the_user_typed_must_be_a_directory(
    command: list[str], named: str, root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An explicit --host-root that does not exist or is no directory is a usage error naming
    --host-root (issue 17: preflight took ``--host-root /nope`` as "not asked", a silent dry run)."""
    (tmp_path / "a-file").write_text("not a directory\n")
    os.mkfifo(tmp_path / "fifo")
    value = root if root.startswith("/") or not root else str(tmp_path / root)
    code = exit_code([*command, "--host-root", value])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("gpustack-operator: error: --host-root")
    assert (value or "empty") in line
    assert "--detect-root" not in line
    if value:
        assert f"{named} {value!r} cannot be used: " in line
        assert ("No such file or directory" if root == "nope" else "not a directory") in line


def test_the_default_host_root_absent_is_a_dry_run_not_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The spec's "a run with no host root to enter carries on as a dry run rather than stopping" is
    about the default /host not being mounted: not given, its absence is never a usage error."""
    monkeypatch.setattr(cli, "CONTAINER_HOST_ROOT", str(tmp_path / "host"))
    code = exit_code(["dm", "preflight", "--detect-root", NODE, "--manufacturer", "metax"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = yaml.safe_load(out)
    assert str(tmp_path / "host") in doc["topology"]["note"]  # the default was looked for, and said absent
    assert "never looked in" in doc["topology"]["note"]


@pytest.mark.hostile
def test_any_typed_root_is_a_directory_or_one_line_naming_its_flag(tmp_path: Path) -> None:
    """Whatever a root flag names -- hostile text, a FIFO, a device, a file, paths under real
    directories --, the check answers at once: the value back when it is a directory, else a usage error
    of one printable line that starts with the flag and names the value, cut short."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    roots = st.one_of(
        st.sampled_from([*SPECIAL_ROOTS, str(fifo), str(tmp_path), "/", "", " ", "\0", "/tmp/\0x"]),
        hostile_text(),
        st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["", "/", "/tmp", str(HOSTS)]), hostile_text()),
    )

    flags = [("--detect-root", cli.NODE_VIEW_REMEDY), ("--host-root", cli.HOST_ROOT_REMEDY)]

    @given(root=roots, flag=st.sampled_from(flags))
    def check(root: str, flag: tuple[str, str]) -> None:
        try:
            assert cli.existing_root(root, *flag) == root
        except api.RootArgumentError as exc:
            message = str(exc)
            assert message.startswith(flag[0]) and message.isprintable(), message
            assert len(message) <= 1_000
            return
        assert os.path.isdir(root)

    check()


# Roots a user or a broken mount hands the read-only commands: none a directory of a node, several not
# directories at all (a character device, a FIFO, a file, /proc's own), fixture nodes, and hostile text
# (NUL bytes, lone surrogates, undecodable bytes, 10,000-deep nesting, names past NAME_MAX).
SPECIAL_ROOTS = ["/dev/null", "/proc/self/fd/0", "/proc/self/status", "/proc", "/sys", "/nonexistent", "."]
READS = [
    ["dm", "detect", "--manufacturer", "metax"],
    ["dm", "detect", "-o", "json", "--manufacturer", "metax,cambricon"],
    ["dm", "monitor", "--manufacturer", "metax"],
    ["dm", "mode", "metax", "sgpu"],
]


@pytest.mark.hostile
def test_any_detect_root_is_answered_never_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever --detect-root names, a read-only command exits 0, 1 or 2 without a traceback; a usage
    error (exit 2) is one line naming the problem with nothing on stdout, and detect and monitor write
    their document whenever they run."""
    monkeypatch.chdir(tmp_path)  # a relative root resolves in an empty directory
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    roots = st.one_of(
        st.sampled_from([*SPECIAL_ROOTS, str(fifo), str(HOSTS / "unreadable-sysfs"), str(HOSTS / "escaping-symlink")]),
        hostile_text(),
        st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["", "/", "/tmp", str(HOSTS)]), hostile_text()),
    )

    # a whole command per example (a pass over whatever the root holds, a fork per manufacturer the bus
    # shows), not one parser call: the profile's 100 ms is a parser's budget; a hang still fails
    @settings(deadline=timedelta(seconds=2))
    @given(command=st.sampled_from(READS), root=roots)
    def check(command: list[str], root: str) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = exit_code([*command, "--detect-root", root])
        assert code in (0, 1, 2), (code, err.getvalue())
        assert "Traceback" not in err.getvalue()
        if code == 2:  # one line, after argparse's usage for what argparse refuses (a root like "-x")
            *usage, line = err.getvalue().splitlines()
            assert not usage or usage[0].startswith("usage: "), usage
            assert line.startswith("gpustack-operator") and ": error: " in line, line
            assert out.getvalue() == ""
        elif command[1] != "mode":
            assert out.getvalue()

    check()


@pytest.mark.parametrize(
    "command",
    [
        ["dm", "detect", "--detect-root", str(host("h100-sxm-8x"))],
        ["dm", "detect", "--detect-root", str(host("cpu-only-vm")), "--manufacturer", "nvidia"],
        ["dm", "monitor", "--detect-root", str(host("cpu-only-vm"))],
        ["dm", "mode", "metax", "sgpu", "--detect-root", NODE],
    ],
)
def test_a_stdout_that_takes_nothing_is_named_not_called_a_bug(command: list[str]) -> None:
    """A full disk (``/dev/full``) under the document: one line naming stdout and the reason, exit 1 --
    not "a bug", and nothing more at the interpreter's exit ("Exception ignored ...")."""
    from tests.conftest import BIN

    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [str(BIN / "gpustack-operator"), *command], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if "error:" in ln or "Exception" in ln]
    assert "could not be written to stdout" in line and "No space left on device" in line, proc.stderr
    assert "a bug" not in proc.stderr and "Traceback" not in proc.stderr
