# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Shared glue for the gpustack.accelerators modules: importing the package (from the task's own Python
or, failing that, from the venv the ``install`` role made, re-running the module there), common options.

This file runs on the node, under whatever Python the task was given (``/usr/bin/python3`` on a node
the inventory says nothing about), before the package is known to be there: it keeps to the standard
library and to Python 3.7, the oldest target Python the claimed ansible-core releases support.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import stat
import subprocess
import sys
import traceback
from typing import Any, Callable, NamedTuple, Optional

from ansible.module_utils.common.respawn import has_respawned, respawn_module

# The module is its own process: skip pydantic's plugin discovery (a scan of every installed
# distribution's entry points, 50-120 ms of each task next to Ansible) unless the host asked for it.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

try:
    from gpustack_operator import api as gpustack_api

    HAS_GPUSTACK = True
    GPUSTACK_IMPORT_ERROR = None
except (ImportError, SyntaxError):  # SyntaxError: a package built for a newer Python than this task's
    gpustack_api = None
    HAS_GPUSTACK = False
    GPUSTACK_IMPORT_ERROR = traceback.format_exc()


def can_respawn() -> bool:
    """Whether this process is a module AnsiballZ started (what Ansible's respawn re-runs)."""
    main = sys.modules.get("__main__")
    return hasattr(main, "_module_fqn") and hasattr(main, "_modlib_path")


# The package's classes and tables (a few hundred models, dataclasses and enums) live as long as the
# task's short process: frozen out of the cyclic GC's reach, they are not walked again by every full
# collection the rest of the task's imports and its pass set off (~3% of a preflight task). Only in a
# module's own process -- never in one that merely imports this file (a test run).
if HAS_GPUSTACK and can_respawn():
    gc.freeze()

MANUFACTURERS = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]

# No choices for manufacturers: they cannot say "!thead" or "all". The one rule is the package's
# select_subset (gather_subset-style), applied by selected_manufacturers().
COMMON_ARGS = dict(
    host_root=dict(type="path"),
    manufacturers=dict(type="list", elements="str"),
)


# -- finding the venv the install role made -------------------------------------------------------------
#
# The install role records every venv it makes, as one small JSON file per node root --
# {"python": "<venv>/bin/python", "host_root": <the host's gpustack_host_root, or null>} -- in RECORD_DIR
# of the user it runs as (its vars/main.yml names the same directory). A later, separate run whose Python
# lacks the package reads them here, takes the first candidate that imports it -- the record for this
# task's host_root, the node's own record (no host_root), the role's default venv -- and re-runs the
# module under it with Ansible's own respawn (as the dnf and selinux modules find a Python with their
# bindings). Keyed by node root because one machine may play several nodes (a simulated fleet gives each
# host its own root and venv): a host the role never ran for finds no record of its own.

RECORD_DIR = "~/.local/state/gpustack/accelerators"
DEFAULT_VENV = "/opt/gpustack-operator/venv"
RECORD_MAX_BYTES = 4096
RECORD_MAX_FILES = 64
PATH_MAX_CHARS = 1024
PROBE_TIMEOUT = 20  # seconds: importing the package takes well under one; a hung import fails the probe
NOTE_MAX_CHARS = 300

INSTALL_REMEDY = (
    "run the gpustack.accelerators.install role for this host (it installs the wheel this collection "
    "carries into its own venv and records it in %s of the user it runs as, where later runs find it), "
    "or point ansible_python_interpreter at a Python that has the package" % RECORD_DIR
)


class RecordError(ValueError):
    """A record the install role's directory holds that cannot be used; the message is one line."""


class Record(NamedTuple):
    python: str  # the venv's interpreter, an absolute path
    host_root: Optional[str]  # the node root it was installed for (normalised); None: the node itself


class Candidate(NamedTuple):
    python: str
    origin: str  # where it came from, in words


def printable(text: str, limit: int = NOTE_MAX_CHARS) -> str:
    """``text`` on one line with anything unprintable escaped (``\\x1b``, ``\\u2028``), cut at ``limit``
    characters: host text in a task's message never breaks a line or drives a terminal."""
    out: list[str] = []
    for char in text[: limit + 1]:  # a 64 KiB hostile line is never walked past what is shown
        code = ord(char)
        if char == " " or (char.isprintable() and not 0xD800 <= code <= 0xDFFF):
            out.append(char)
        elif code < 0x100:
            out.append("\\x%02x" % code)
        elif code < 0x10000:
            out.append("\\u%04x" % code)
        else:
            out.append("\\U%08x" % code)
    said = "".join(out)
    return said if len(said) <= limit and len(text) <= limit else said[: limit - 1] + "…"


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _check_path(key: str, value: object, absolute: bool) -> str:
    if not isinstance(value, str):
        raise RecordError('its "%s" is not a string (it is %s)' % (key, _json_kind(value)))
    if len(value) > PATH_MAX_CHARS:
        raise RecordError('its "%s" is longer than %d characters' % (key, PATH_MAX_CHARS))
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise RecordError('its "%s" holds a lone surrogate, so it names no file' % key)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise RecordError("its \"%s\" holds a control character: '%s'" % (key, printable(value, 120)))
    if absolute and not value.startswith("/"):
        raise RecordError("its \"%s\" is not an absolute path: '%s'" % (key, printable(value, 120)))
    return value


def normalize_root(value: str | None) -> str | None:
    """A node root as the records and the tasks compare it: unset or empty is the node itself (None);
    ``~`` and ``~/...`` are this user's home (another user's ``~name`` is left as written, never looked
    up); ``.``, ``..`` and doubled or trailing slashes are taken out."""
    if value is None or value == "":
        return None
    if value == "~" or value.startswith("~/"):
        value = os.path.expanduser(value)
    return os.path.normpath(value)


def parse_record(data: bytes) -> Record:
    """One record file's bytes: a JSON object whose ``python`` is an absolute path and whose
    ``host_root`` is a string or null (other keys, such as ``version``, are the role's and ignored).
    Anything else is a :class:`RecordError` saying what is wrong, in one line."""
    if len(data) > RECORD_MAX_BYTES:
        raise RecordError("is larger than %d bytes" % RECORD_MAX_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError("is not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise RecordError("is not JSON (nested too deep)") from None
    except ValueError as exc:
        raise RecordError("is not JSON (%s)" % printable(str(exc), 120)) from None
    if not isinstance(doc, dict):
        raise RecordError("is not a JSON object (it is %s)" % _json_kind(doc))
    if "python" not in doc:
        raise RecordError('has no "python"')
    python = _check_path("python", doc["python"], absolute=True)
    root = doc.get("host_root")
    if root is not None:
        root = _check_path("host_root", root, absolute=False)
    return Record(python=python, host_root=normalize_root(root))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


def _not_regular(mode: int) -> str | None:
    for test, words in _KINDS:
        if test(mode):
            return "is %s, not a regular file" % words
    return None if stat.S_ISREG(mode) else "is not a regular file"


def _read_regular(path: str) -> bytes:
    """A record file's bytes: never through a symbolic link, never anything but a regular file (looked at
    before it is opened, and again once open), never blocking (O_NONBLOCK), never past the size cap."""
    try:
        why = _not_regular(os.lstat(path).st_mode)
        if why:
            raise RecordError(why)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
    except OSError as exc:
        raise RecordError("cannot be read: %s" % (exc.strerror or exc)) from None
    try:
        why = _not_regular(os.fstat(fd).st_mode)
        if why:
            raise RecordError(why)
        chunks: list[bytes] = []
        size = 0
        while size <= RECORD_MAX_BYTES:
            chunk = os.read(fd, RECORD_MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RecordError("cannot be read: %s" % (exc.strerror or exc)) from None
    finally:
        os.close(fd)
    if size > RECORD_MAX_BYTES:
        raise RecordError("is larger than %d bytes" % RECORD_MAX_BYTES)
    return b"".join(chunks)


def read_records(directory: str) -> tuple[list[tuple[str, Record]], list[str]]:
    """The records in ``directory`` (``*.json``, at most RECORD_MAX_FILES, by name) and one line per
    file that could not be used, naming it and why. A directory that is not there holds no record."""
    where = os.path.expanduser(directory)
    names: list[str] = []
    cut = False  # a directory stuffed with records is not listed to its end
    try:
        with os.scandir(where) as entries:
            for entry in entries:
                if entry.name.endswith(".json"):
                    names.append(entry.name)
                    if len(names) > 4 * RECORD_MAX_FILES:
                        cut = True
                        break
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], ["%s cannot be listed: %s" % (printable(where), exc.strerror or exc)]
    names.sort()
    records: list[tuple[str, Record]] = []
    problems: list[str] = []
    for name in names[:RECORD_MAX_FILES]:
        path = os.path.join(where, name)
        try:
            records.append((path, parse_record(_read_regular(path))))
        except RecordError as exc:
            problems.append("%s %s" % (printable(path), exc))
    if len(names) > RECORD_MAX_FILES:
        more = ("at least %d" if cut else "%d") % (len(names) - RECORD_MAX_FILES)
        problems.append("%s: %s more records not read (%d at most)" % (printable(where), more, RECORD_MAX_FILES))
    return records, problems


def candidates(records: list[Record], host_root: str | None, default_venv: str | None = None) -> list[Candidate]:
    """The interpreters to try, in order: the record for ``host_root`` (when the task names one), the
    node's own record (no root), the install role's default venv; each once."""
    wanted = normalize_root(host_root)
    found: list[Candidate] = []
    if wanted is not None:
        found += [
            Candidate(r.python, "recorded for node root %s" % r.host_root) for r in records if r.host_root == wanted
        ]
    found += [Candidate(r.python, "recorded for this node") for r in records if r.host_root is None]
    venv = DEFAULT_VENV if default_venv is None else default_venv
    found.append(Candidate(os.path.join(venv, "bin", "python"), "the install role's default venv"))
    seen: set[str] = set()
    unique: list[Candidate] = []
    for cand in found:
        if cand.python not in seen:
            seen.add(cand.python)
            unique.append(cand)
    return unique


def probe(python: str, timeout: int = PROBE_TIMEOUT) -> str | None:
    """None when ``python`` imports gpustack_operator, else why not, in a few words. It is run, with no
    input and a deadline, never waited on past ``timeout`` seconds."""
    if not os.path.lexists(python):
        return "absent"
    if not os.path.isfile(python):
        return "not a file"
    if not os.access(python, os.X_OK):
        return "not executable"
    try:
        # module.run_command has no deadline: a candidate whose import hangs must not hang the task
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            [python, "-c", "import gpustack_operator"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "did not answer in %d s" % timeout
    except OSError as exc:
        return "cannot be run: %s" % (exc.strerror or exc)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    said = lines[-1].strip() if lines else "exit status %d" % proc.returncode
    return "cannot import gpustack_operator (%s)" % printable(said, 200)


def find_interpreter(
    host_root: str | None,
    record_dir: str | None = None,
    default_venv: str | None = None,
    current: str | None = None,
    probe: Callable[[str], str | None] = probe,
) -> tuple[str | None, list[str]]:
    """The first candidate (:func:`candidates`) that imports the package, and one line per venv looked
    at and not used -- including the records of other node roots, which are never candidates."""
    where = os.path.expanduser(RECORD_DIR if record_dir is None else record_dir)
    records, tried = read_records(where)
    plain = [record for _name, record in records]
    wanted = normalize_root(host_root)
    mine = [r for r in plain if r.host_root is None or r.host_root == wanted]
    if not records:
        tried.append("no record in %s (the install role writes one for each venv it makes)" % printable(where))
    elif not mine:
        others = ", ".join("%s (%s)" % (r.host_root, r.python) for r in plain)
        this = "node root %s" % wanted if wanted is not None else "this node (the task sets no host_root)"
        tried.append(
            "no record for %s in %s, and no record of the node's own; recorded there for other node roots: %s"
            % (this, printable(where), printable(others, 600))
        )
    for cand in candidates(plain, host_root, default_venv):
        if current is not None and os.path.abspath(cand.python) == os.path.abspath(current):
            tried.append("%s (%s): this task's own Python, which lacks it" % (cand.python, cand.origin))
            continue
        why = probe(cand.python)
        if why is None:
            return cand.python, tried
        tried.append("%s (%s): %s" % (cand.python, cand.origin, why))
    return None, tried


def import_failure_message(current: str, error: str, tried: list[str], respawned: bool) -> str:
    """The one-line task failure: the interpreter that could not import the package and why, every venv
    looked at and why it was not used, and the remedy."""
    where = "%s's Python %s" % (platform.node(), current)
    if respawned:
        where += ", which this task was re-run under as the venv the install role recorded"
    looked = "; ".join(printable(line, 700) for line in tried)
    return "Failed to import the required Python library (gpustack-operator) on %s (%s).%s Remedy: %s." % (
        printable(where, 1200),
        printable(error, 200),
        (" Looked for the venv the install role makes: %s." % looked) if looked else "",
        INSTALL_REMEDY,
    )


def require_gpustack(module: Any) -> None:
    """Make sure the package is importable for this task: on a Python without it, re-run the module
    under the venv the install role recorded for this host (never returns then); when there is none,
    fail the task saying which interpreter was tried, which venvs exist and why none was used."""
    if HAS_GPUSTACK:
        return
    error = (GPUSTACK_IMPORT_ERROR or "").strip().splitlines()[-1:] or ["ImportError"]
    if has_respawned():
        msg = import_failure_message(sys.executable, error[0], [], respawned=True)
        module.fail_json(msg=msg, exception=GPUSTACK_IMPORT_ERROR)
    python, tried = find_interpreter(module.params.get("host_root"), current=sys.executable)
    if python is not None:
        if can_respawn():
            respawn_module(python)
        tried.append("%s has it, but this module was not started by Ansible, so it cannot re-run there" % python)
    module.fail_json(
        msg=import_failure_message(sys.executable, error[0], tried, respawned=False), exception=GPUSTACK_IMPORT_ERROR
    )


def selected_manufacturers(module, option="manufacturers"):
    """The option's manufacturers, ``gather_subset``-style (names, ``!name`` to exclude, ``all``;
    unset or empty is all nine), by the package's own rule (``select_subset``); a name it does not
    know, or a selection that leaves none, fails the task naming the option and the choices."""
    from gpustack_operator.manufacturers import UnknownManufacturerError, select_subset

    try:
        return select_subset(module.params.get(option))
    except UnknownManufacturerError as exc:
        module.fail_json(msg="%s: %s" % (option, exc))


ROOT_REMEDY = "name the directory the node's root is mounted at (e.g. / or /host)"


def require_path(module, option, remedy=ROOT_REMEDY):
    """Refuse an empty or blank value of a path option that is set (``None`` stays unset), or one
    holding a NUL byte, naming the option and ``remedy``: a blank path is never read as ``/`` or as
    the current directory."""
    value = module.params.get(option)
    if value is None:
        return
    if not value.strip():
        module.fail_json(msg="%s is empty: %s" % (option, remedy))
    if "\0" in value:
        module.fail_json(msg="%s %r holds a NUL byte, so it names no path" % (option, value))


def make_request(module, manufacturers=None, root_option="host_root"):
    """Validate host_root/manufacturers the way the CLI does; fail the task on a bad value.

    A module runs on the node itself, so the node view its detect pass reads and the node's root are
    one directory: ``host_root`` (``root_option`` names another option that may relocate the view).
    An empty or blank path is refused, never read as ``/``. ``manufacturers`` (already selected)
    defaults to the module's own option, through :func:`selected_manufacturers`."""
    from gpustack_operator.manufacturers import UnknownManufacturerError
    from gpustack_operator.settings import SettingsError

    require_path(module, "host_root")
    if root_option != "host_root":
        require_path(
            module, root_option, "name the node view the detect pass reads, or leave it unset to read host_root"
        )
    wanted = manufacturers if manufacturers is not None else selected_manufacturers(module)
    try:
        root = module.params.get(root_option)
        if root is None and root_option != "host_root":
            root = module.params.get("host_root")
        if root is None:
            root = gpustack_api.default_host_root()
        return gpustack_api.make_request(root, wanted)
    except (UnknownManufacturerError, SettingsError, ValueError) as exc:
        module.fail_json(msg=str(exc))
