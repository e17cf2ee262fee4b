"""A real container engine "host" for the preflight probe tests: dockerd whose ``/`` is a host root.

The product's ``preflight`` enters the node's host root (``--host-root ROOT``) with
``chroot ROOT docker run ...`` to start its probe containers, so on a real node the ``-v`` sources and
``--device`` paths it names are resolved by the host's dockerd, against the host's own ``/``. This
module builds such a host out of a directory::

    with ContainerHost.start(fixture=FIXTURES / "h100-sxm-8x") as host:
        host.mknod("/dev/nvidia0")
        host.write("/var/lib/gpustack/operator/lib/nvidia/marker", "x")
        host.docker("run", "--rm", "--device", "/dev/nvidia0",
                    "-v", "/var/lib/gpustack/operator/lib/nvidia:/usr/local/vgpu:ro",
                    PROBE_IMAGE, "cat", "/usr/local/vgpu/marker")
        preflight(host_root=host.root)        # chroot host.root docker ... works the same way

What ROOT is
------------
``host.root`` (``tests/.build/docker/slot-<n>/root``) is an overlayfs mount: lowerdir = this machine's
``/`` (its root file system only, none of the mounts under it), upperdir/workdir beside it in the
slot. So ROOT carries this machine's real binaries -- Debian's docker.io (``/usr/bin/docker``,
``/usr/sbin/dockerd``, containerd, runc) and everything they link -- and every write through ROOT
lands in the upper directory, never on the machine. On top of it, in the test process's mount
namespace (so the test and dockerd both see them):

* ``ROOT/dev``: a fresh tmpfs with null zero full random urandom tty, ``pts`` (a new devpts
  instance), ``ptmx``, ``shm`` (tmpfs), the ``fd``/``stdin``/``stdout``/``stderr`` links, and
  whatever :meth:`ContainerHost.mknod` adds (a fake accelerator is a character device with
  ``/dev/null``'s numbers: ``docker run --device`` accepts it and the container can open it);
* ``ROOT/run`` and ``ROOT/tmp``: fresh tmpfs (the real ``/run`` and ``/tmp`` hold other processes'
  files). ``ROOT/var/run`` is the machine's ``/var/run -> /run`` link, so ``/var/run/docker.sock``
  is the daemon's ``/run/docker.sock`` inside ROOT.

A fixture tree (``tests/fixtures/hosts/<name>/``) is copied in *through* ROOT, with ``tar`` run inside
``chroot ROOT`` and ``--keep-directory-symlink`` -- laid onto a merged-/usr host the way a package
would be. Why not upperdir = a copy of the fixture (the first design): the fixtures carry ``bin/``,
``lib/`` and ``lib64/`` as directories (a shell and its loader for their vendor CLIs); as an upper
layer those would replace the host's ``/bin -> usr/bin``, ``/lib -> usr/lib`` and
``/lib64 -> usr/lib64`` links with directories holding only dash and libc, and dockerd, docker and
every other binary would lose their loader and libraries. Extracting inside the chroot also resolves
absolute links (``/var/run -> /run``) inside ROOT, never onto the machine.

The test process sees the fixture's ``proc/`` and ``sys/`` files at ``ROOT/proc`` and ``ROOT/sys``,
exactly what the product reads as the host's procfs and sysfs.

Why dockerd runs pivoted into ROOT, not chrooted
------------------------------------------------
dockerd is started as ``setpriv --pdeathsig TERM unshare --mount --propagation private sh -c ...``:
in its own private mount namespace it mounts a real ``proc`` on ``ROOT/proc``, a fresh ``sysfs`` on
``ROOT/sys`` with the machine's (hybrid, v1) ``/sys/fs/cgroup`` bound recursively under it, binds the
slot's ext4 ``data/`` directory onto ``ROOT/var/lib/docker`` (overlay2 needs a real file system
there; an overlay upper cannot be overlayfs), then ``pivot_root . .`` and detaches the old root
before it ``exec``\\ s ``/usr/sbin/dockerd``. Compared with ``chroot ROOT dockerd``:

* ROOT is dockerd's real root mount, so runc's own ``pivot_root`` works as on a real host
  (``DOCKER_RAMDISK=true``, which a chrooted dockerd needs, would put every container on a
  ``chroot`` instead);
* the daemon's namespace holds only ROOT and its own mounts: no copy of the machine's other mounts
  (another test's ``/run/netns/<name>`` would otherwise stay pinned, and its namespace alive, for as
  long as dockerd runs);
* everything dockerd mounts (``proc``, ``sys``, the data directory, each container's overlay2
  ``merged``, ``/run/docker/netns/default``) lives and dies with that namespace: after dockerd is
  stopped there is nothing to unmount for it on the machine -- only the four mounts above, which
  :meth:`ContainerHost.stop` unmounts in reverse order;
* the test's own view of ``ROOT/proc`` and ``ROOT/sys`` stays the fixture's.

``setpriv --pdeathsig TERM`` makes dockerd stop if the test process dies without cleaning up; a
later :meth:`ContainerHost.start` on the same slot unmounts what such a run left.

The daemon (``ROOT/etc/docker/daemon.json``)
--------------------------------------------
The recipe of docs/test-infrastructure.md: ``bridge: none`` (no bridge is ever created; the only
networks are ``host`` and ``none``; a container without ``--network``, or with ``--network bridge``,
gets no interface but ``lo``, and its ``docker run`` prints dockerd's "WARNING: IPv4 forwarding is
disabled" on stderr), no iptables / ip6tables / forwarding / masquerading, ``default-ulimits`` nofile at this
process's hard limit, cgroupfs, overlay2, the socket ``unix:///run/docker.sock``, exec-root
``/run/docker``, data-root ``/var/lib/docker``. Two extra runtimes, ``nvidia`` and ``ascend``, are
plain runc: STAND-INS for the vendors' container runtimes (nvidia-container-runtime,
ascend-docker-runtime), so ``docker run --runtime nvidia|ascend`` is accepted as on a node that has
them -- nothing of what those runtimes add (device injection, hooks) happens. ROOT's ``docker`` is
Debian's everywhere: a static CLI some machines carry in ``/usr/local/bin`` is removed inside ROOT
(an overlay whiteout; the machine keeps it).

The probe image ``localhost/gpustack-probe:test``
--------------------------------------------------
``docker import`` of the Debian bookworm minbase rootfs tarball tests/tools/rootfs_tar.sh caches (the
one the molecule image is built from too), plus the stand-in vendor readers of
tests/tools/probe_image/bin/ in ``/usr/local/bin``: ``nvidia-smi``, ``rocm-monitor``, ``ppu-monitor``,
``enpu-monitor`` (each prints one MiB figure per visible device and nothing else: the capped figure
from the vendor's variable or config file, else a whole card's figure -- THE VENDOR QUOTA IS FAKED
INSIDE THE IMAGE by these readers; no vendor library enforces anything here) and ``kill`` (minbase
has no procps). It carries the label ``gpustack.recipe`` (:func:`image_recipe`) and is imported again
only when the recipe changes. ``/opt/dtk/bin/BandwidthTest`` is not in it (the Hygon probe mounts
/opt/dtk from the host).

Slots
-----
Each host takes a free slot ``tests/.build/docker/slot-<n>/`` (an ``flock``; dockerd inherits the
lock, so a slot whose daemon outlived its test is never reused under it): ``data/`` is the persistent
data-root (the image stays imported between runs), ``upper/``, ``work/`` are emptied on every
start, ``root/`` is the mount point, ``dockerd.log`` the daemon's log. Test sessions side by side get
different slots.

Pytest
------
:func:`container_host_session` (one host for the whole test process, started empty on first use,
stopped when the session ends) and :func:`container_host` (each test: that host after
:meth:`ContainerHost.reset` -- a fresh upper tree, a freshly started daemon, no containers; about
1.5 s). A test module takes them by assignment (an import would trip ruff's F811 on every test
argument)::

    from tests.tools import container_host as ch
    container_host_session = ch.container_host_session
    container_host = ch.container_host

    @pytest.mark.parametrize("container_host", [FIXTURES / "h100-sxm-8x"], indirect=True)
    def test_probe(container_host): ...        # the tree copied in after the reset

They skip with :func:`cannot_run`'s reason, except under CI (``CI`` set), where they fail.

Costs measured on a 2-core machine: the rootfs tarball once per machine (debootstrap, ~60 s); the
image import once per slot (~3 s); a start on a slot that has the image ~0.3 s (dockerd ready in
~0.25 s); reset ~1.5-1.8 s (dockerd takes ~1 s to exit); stop ~1 s; ``docker run --rm`` ~0.35 s.

Caveats: the machine's ``/`` is the lower layer while it keeps changing (overlayfs tolerates it; a
file changed on the machine during a test may show either version). Reading this slot's
``upper``/``work`` directories *through* ROOT fails with ELOOP (overlayfs guards its own layers).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import io
import json
import os
import posixpath
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / ".build" / "docker"
IMAGE_SOURCES = Path(__file__).resolve().parent / "probe_image"
ROOTFS_SCRIPT = Path(__file__).resolve().parent / "rootfs_tar.sh"
SYSTEM_DEPS = Path(__file__).resolve().parent / "system_deps.sh"

PROBE_IMAGE = "localhost/gpustack-probe:test"
RECIPE_LABEL = "gpustack.recipe"
# The vendor container runtimes the daemon offers, each plain runc (stand-ins, see the docstring).
STANDIN_RUNTIMES = ("nvidia", "ascend")
# The PATH every command inside ROOT runs with (a host's login PATH).
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the machine needs (Debian's docker.io brings dockerd, containerd, runc and the CLI).
ENGINE_FILES = ("/usr/sbin/dockerd", "/usr/bin/docker", "/usr/bin/containerd", "/usr/sbin/runc")
TOOLS = ("unshare", "setpriv", "pivot_root", "chroot", "mount", "umount", "tar", "gcc")
SLOTS = 8
# Bump when the way the image is assembled (not its inputs) changes: a new recipe reimports it.
_IMAGE_ASSEMBLY = "1"
# Device nodes of the fresh ROOT/dev: name -> (major, minor).
_DEV_NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
_DEV_LINKS = {
    "ptmx": "pts/ptmx",
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}

_MS_NOSUID = 0x2
_MNT_DETACH = 0x2
_libc = ctypes.CDLL(None, use_errno=True)

# What runs in dockerd's own mount namespace before it becomes dockerd (argv: ROOT, data directory).
_DOCKERD_SCRIPT = r"""
set -eu
cd "$1"
mount -t proc proc proc
mount -t sysfs sysfs sys
mount --rbind /sys/fs/cgroup sys/fs/cgroup
mount --bind "$2" var/lib/docker
pivot_root . .
umount -l .
cd /
exec /usr/sbin/dockerd --config-file /etc/docker/daemon.json
"""


class ContainerHostError(RuntimeError):
    """The host could not be set up, or a step of it failed (the message says which and why)."""


# -- the machine -------------------------------------------------------------------------------------


@functools.cache
def cannot_run() -> str | None:
    """Why this machine cannot run a :class:`ContainerHost`, or None when it can.

    Installs what is missing on the way, as root: Debian's docker.io through
    tests/tools/system_deps.sh (the reason then names its failure). Checks the tools, overlayfs and
    that an overlay with ``/`` as its lower layer mounts in tests/.build/docker.
    """
    if os.uname().sysname != "Linux":
        return "needs Linux (overlayfs, mount namespaces)"
    if os.geteuid() != 0:
        return "needs root (mounts, mount namespaces, dockerd)"
    if any(c in str(BUILD) for c in ",:\n"):
        return f"{BUILD} holds a comma or colon, which overlayfs mount options cannot carry"
    if not any(line.split()[-1:] == ["overlay"] for line in Path("/proc/filesystems").read_text().splitlines()):
        subprocess.run(["modprobe", "overlay"], capture_output=True)
        if "overlay" not in Path("/proc/filesystems").read_text():
            return "the kernel has no overlayfs (not in /proc/filesystems, modprobe overlay failed)"
    missing = [f for f in ENGINE_FILES if not os.path.exists(f)]
    if missing:
        deps = subprocess.run(["bash", str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=1800)
        missing = [f for f in ENGINE_FILES if not os.path.exists(f)]
        if deps.returncode != 0 or missing:
            return (
                f"Debian's docker.io is not installed ({', '.join(missing)} missing) and "
                f"tests/tools/system_deps.sh failed (exit {deps.returncode}): {(deps.stdout + deps.stderr)[-2000:]}"
            )
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"missing tools: {', '.join(absent)}"
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD, prefix="probe-") as tmp:
        for d in ("upper", "work", "root"):
            Path(tmp, d).mkdir()
        try:
            _mount("overlay", Path(tmp, "root"), "overlay", data=_overlay_options(Path(tmp)))
        except OSError as exc:
            return f"an overlay with lowerdir=/ and its upper layer in {BUILD} does not mount: {exc}"
        _umount(Path(tmp, "root"))
    return None


def _mount(source: str, target: Path, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    rc = _libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount -t {fstype} {source} {target} ({data}): {os.strerror(err)}")


def _umount(target: Path, *, detach: bool = False) -> None:
    if _libc.umount2(str(target).encode(), _MNT_DETACH if detach else 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def _overlay_options(slot: Path) -> str:
    return f"lowerdir=/,upperdir={slot / 'upper'},workdir={slot / 'work'}"


def _mountinfo_under(path: Path) -> list[str]:
    """Mount points at or under ``path`` in this process's namespace, as mountinfo lists them."""
    prefix = str(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


def _mount_namespace_members(ns: str) -> list[int]:
    """PIDs of the processes in mount namespace ``ns`` (``mnt:[<inode>]``)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                    pids.append(int(entry))
    return pids


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()


# -- the image and the preload library ---------------------------------------------------------------


def _rootfs_tar(*, build: bool) -> Path:
    argv = ["bash", str(ROOTFS_SCRIPT)] + ([] if build else ["--path"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise ContainerHostError(f"tests/tools/rootfs_tar.sh failed: {done.stderr[-3000:]}")
    return Path(done.stdout.strip())


def _image_scripts() -> list[Path]:
    return sorted(p for p in (IMAGE_SOURCES / "bin").iterdir() if p.is_file())


def image_recipe() -> str:
    """The probe image's recipe id: the rootfs tarball's name, the stand-in scripts, the assembly."""
    parts = [_IMAGE_ASSEMBLY.encode(), _rootfs_tar(build=False).name.encode()]
    for script in _image_scripts():
        parts += [script.name.encode(), script.read_bytes()]
    return _sha(*parts)[:16]


def _write_image_tar(out: io.BufferedIOBase | Any, base: Path) -> None:
    """The rootfs tarball with the stand-ins appended under ./usr/local/bin, streamed to ``out``."""
    with tarfile.open(base, "r:") as src, tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        for script in _image_scripts():
            data = script.read_bytes()
            info = tarfile.TarInfo(f"./usr/local/bin/{script.name}")
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            dst.addfile(info, io.BytesIO(data))


def preload_library() -> Path:
    """``libprobe-standin.so`` built with gcc from tests/tools/probe_image/probe_standin.c (cached).

    An empty constructor: preloaded into a container, /proc/self/maps shows it under whatever name
    it was copied to. :meth:`ContainerHost.install_library` puts a copy into the host root.
    """
    source = IMAGE_SOURCES / "probe_standin.c"
    out = BUILD / f"libprobe-standin-{_sha(source.read_bytes())[:12]}.so"
    if not out.exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        built = subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(tmp), str(source)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if built.returncode != 0:
            raise ContainerHostError(f"gcc {source.name} failed: {built.stderr}")
        os.replace(tmp, out)
    return out


# -- the host ----------------------------------------------------------------------------------------


class ContainerHost:
    """One host root with a real dockerd inside it (see the module docstring).

    Make one with :meth:`start`; it is a context manager (``with ContainerHost.start() as host``).
    """

    root: Path
    """The host root: pass it to ``--host-root`` and to ``chroot``."""

    def __init__(self, slot: Path, lock_fd: int) -> None:
        self.slot = slot
        self.root = slot / "root"
        self.log = slot / "dockerd.log"
        self._lock_fd: int | None = lock_fd
        self._mounts: list[Path] = []
        self._dockerd: subprocess.Popen[bytes] | None = None
        self.dockerd_pid: int | None = None
        """The running daemon's PID (None when stopped); the last one stays in :attr:`last_dockerd_pid`."""
        self.last_dockerd_pid: int | None = None
        self._mount_ns: str | None = None
        self.last_mount_ns: str | None = None
        """dockerd's mount namespace (``mnt:[<inode>]``) of the last daemon, for leftover checks."""
        self.started_in: float = 0.0
        """Seconds the last start (or reset) took: mounts, copy-in, dockerd ready, image checked."""

    # -- life cycle --

    @classmethod
    def start(cls, fixture: Path | None = None, *, timeout: float = 60.0) -> ContainerHost:
        """Mount a fresh host root (``fixture``'s files copied in, if given) and start dockerd in it.

        The probe image is imported when the slot's data-root lacks it (or holds an older recipe).
        Raises :class:`ContainerHostError` with :func:`cannot_run`'s reason, or the failed step.
        """
        reason = cannot_run()
        if reason:
            raise ContainerHostError(reason)
        slot, fd = _take_slot()
        host = cls(slot, fd)
        atexit.register(host.stop)
        try:
            host._boot(fixture, timeout)
        except BaseException:
            host.stop()
            raise
        return host

    def reset(self, fixture: Path | None = None, *, timeout: float = 60.0) -> None:
        """A fresh host root in place: daemon stopped, upper tree emptied, all mounted and started again.

        ``root`` keeps its path; the imported image stays (it lives in the slot's data-root). Running
        containers are removed. About a second.
        """
        if self._lock_fd is None:
            raise ContainerHostError("reset() after stop()")
        self._stop_dockerd()
        self._unmount_all()
        self._boot(fixture, timeout)

    def stop(self) -> None:
        """Remove every container, stop dockerd by its PID, unmount ROOT's mounts, free the slot.

        Idempotent; also registered with :mod:`atexit`. Processes left in dockerd's own mount
        namespace after it exited (container shims it started) are killed by PID.
        """
        atexit.unregister(self.stop)
        try:
            self._stop_dockerd()
        finally:
            self._unmount_all()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> ContainerHost:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def leftovers(self) -> list[str]:
        """What this host left behind on the machine: mounts under ROOT, a live daemon, processes in
        its mount namespace. Empty after :meth:`stop`."""
        found = [f"mount {m}" for m in _mountinfo_under(self.root)]
        pid = self.last_dockerd_pid
        if pid is not None and self._dockerd is None and Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                found.append(f"process {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()}) still running")
        if self.last_mount_ns and self._dockerd is None:
            found += [f"process {p} in dockerd's namespace" for p in _mount_namespace_members(self.last_mount_ns)]
        return found

    # -- running things as the host --

    def env(self) -> dict[str, str]:
        """The environment commands inside ROOT run with: a host's PATH, HOME=/root, nothing DOCKER_*."""
        return {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}

    def run(
        self, *argv: str, timeout: float = 120.0, input: str | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``chroot ROOT argv...`` (text output captured)."""
        done = subprocess.run(
            ["chroot", str(self.root), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=self.env(),
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise ContainerHostError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-3000:]}")
        return done

    def docker(
        self, *args: str, timeout: float = 120.0, input: str | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``chroot ROOT docker args...``: the host's own docker CLI (Debian's) against its daemon."""
        return self.run("docker", *args, timeout=timeout, input=input, check=check)

    def containers(self, *filters: str) -> list[str]:
        """IDs of all containers (``docker ps -aq``), optionally ``--filter``\\ ed."""
        argv = ["ps", "-aq", "--no-trunc"]
        for f in filters:
            argv += ["--filter", f]
        return self.docker(*argv, check=True).stdout.split()

    # -- shaping the host root --

    def path(self, host_path: str) -> Path:
        """``ROOT/<host_path>`` lexically. Prefer :meth:`write` / :meth:`copy_in` for writing: a path
        through an absolute link (``/var/run -> /run``) resolves on the machine from outside ROOT."""
        return self.root / host_path.lstrip("/")

    def copy_in(self, tree: Path, dest: str = "/") -> None:
        """Copy ``tree``'s contents into ROOT at ``dest``, resolving every path inside ROOT.

        ``tar`` inside ``chroot ROOT`` with ``--keep-directory-symlink``: the host's directory links
        (``/bin -> usr/bin``) stay and receive the files, existing directories keep their metadata,
        existing files and links are replaced.
        """
        entries = sorted(os.listdir(tree))
        if not entries:
            return
        extract = 'mkdir -p "$1" && exec tar -C "$1" -xpf - --keep-directory-symlink --no-overwrite-dir --numeric-owner'
        with subprocess.Popen(
            ["tar", "-C", str(tree), "-cf", "-", "--numeric-owner", "--", *entries], stdout=subprocess.PIPE
        ) as pack:
            done = subprocess.run(
                ["chroot", str(self.root), "sh", "-c", extract, "sh", dest],
                stdin=pack.stdout,
                capture_output=True,
                env=self.env(),
                timeout=300,
            )
        if pack.returncode != 0 or done.returncode != 0:
            raise ContainerHostError(f"copying {tree} into {self.root}{dest} failed: {done.stderr.decode()[-3000:]}")

    def write(self, host_path: str, data: str | bytes, mode: int = 0o644) -> Path:
        """Write one file at ``host_path`` inside ROOT (parents created, 0755); returns its ROOT path."""
        rel = _relative(host_path)
        with tempfile.TemporaryDirectory(dir=BUILD, prefix="stage-") as tmp:
            target = Path(tmp, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.encode() if isinstance(data, str) else data)
            target.chmod(mode)
            for parent in Path(rel).parents:
                if str(parent) != ".":
                    Path(tmp, parent).chmod(0o755)
            self.copy_in(Path(tmp))
        return self.root / rel

    def install_library(self, host_path: str) -> Path:
        """A copy of :func:`preload_library` at ``host_path`` inside ROOT (e.g. ``.../nvidia/libvgpu.so``)."""
        return self.write(host_path, preload_library().read_bytes(), 0o755)

    def mknod(self, host_path: str, major: int = 1, minor: int = 3, mode: int = 0o666) -> Path:
        """A character device at ``host_path`` (under /dev) in ROOT's /dev tmpfs, parents created.

        ``/dev/null``'s numbers by default: a stand-in accelerator node (``/dev/nvidia0``,
        ``/dev/dri/renderD128``, ``/dev/kfd``, ``/dev/davinci0``, ...) that ``docker run --device``
        accepts and a container can open. Returns its ROOT path.
        """
        rel = _relative(host_path)
        if not rel.startswith("dev/") or rel == "dev/":
            raise ValueError(f"{host_path}: device nodes go under /dev")
        node = self.root / rel
        walk = self.root / "dev"
        for part in Path(rel).parts[1:-1]:
            walk = walk / part
            if walk.is_symlink():
                raise ValueError(f"{host_path}: {walk} is a link")
            walk.mkdir(mode=0o755, exist_ok=True)
        if node.is_symlink() or node.exists():
            node.unlink()
        os.mknod(node, stat.S_IFCHR | mode, os.makedev(major, minor))
        node.chmod(mode)
        return node

    # -- internals --

    def _boot(self, fixture: Path | None, timeout: float) -> None:
        began = time.monotonic()
        self._scavenge()
        for d in ("upper", "work"):
            shutil.rmtree(self.slot / d, ignore_errors=True)
            (self.slot / d).mkdir()
        for d in ("root", "data"):
            (self.slot / d).mkdir(exist_ok=True)
        self._mount_tree()
        if fixture is not None:
            self.copy_in(fixture)
        self._configure()
        self._start_dockerd(timeout)
        stale = self.containers()
        if stale:  # a previous run on this slot's data-root was killed with containers around
            self.docker("rm", "-f", *stale, check=True)
        self._ensure_image()
        self.started_in = time.monotonic() - began

    def _scavenge(self) -> None:
        """Unmount what a killed run left under this slot's ROOT (deepest first)."""
        for point in sorted(_mountinfo_under(self.root), key=len, reverse=True):
            with contextlib.suppress(OSError):
                _umount(Path(point), detach=True)

    def _mount_tree(self) -> None:
        root = self.root
        self._do_mount("overlay", root, "overlay", data=_overlay_options(self.slot))
        dev = root / "dev"
        self._do_mount("tmpfs", dev, "tmpfs", _MS_NOSUID, "mode=755,size=65536k")
        for name, (major, minor) in _DEV_NODES.items():
            os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            (dev / name).chmod(0o666)
        for d in ("pts", "shm"):
            (dev / d).mkdir()
        self._do_mount("devpts", dev / "pts", "devpts", _MS_NOSUID, "newinstance,ptmxmode=0666,mode=0620")
        self._do_mount("shm", dev / "shm", "tmpfs", _MS_NOSUID, "mode=1777,size=65536k")
        for name, target in _DEV_LINKS.items():
            (dev / name).symlink_to(target)
        self._do_mount("tmpfs", root / "run", "tmpfs", _MS_NOSUID, "mode=755")
        self._do_mount("tmpfs", root / "tmp", "tmpfs", _MS_NOSUID, "mode=1777")

    def _do_mount(self, source: str, target: Path, fstype: str, flags: int = 0, data: str | None = None) -> None:
        _mount(source, target, fstype, flags, data)
        self._mounts.append(target)

    def _unmount_all(self) -> None:
        errors = []
        while self._mounts:
            target = self._mounts.pop()
            try:
                _umount(target)
            except OSError:
                try:
                    _umount(target, detach=True)
                except OSError as exc:
                    errors.append(str(exc))
        if errors:
            raise ContainerHostError("; ".join(errors))

    def _configure(self) -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard == resource.RLIM_INFINITY:
            hard = 1048576
        config = {
            "hosts": ["unix:///run/docker.sock"],
            "exec-root": "/run/docker",
            "data-root": "/var/lib/docker",
            "pidfile": "/run/docker.pid",
            "bridge": "none",
            "iptables": False,
            "ip6tables": False,
            "ip-forward": False,
            "ip-masq": False,
            "userland-proxy": False,
            "default-ulimits": {"nofile": {"Name": "nofile", "Soft": hard, "Hard": hard}},
            "exec-opts": ["native.cgroupdriver=cgroupfs"],
            "storage-driver": "overlay2",
            "default-runtime": "runc",
            # stand-ins for nvidia-container-runtime / ascend-docker-runtime: plain runc
            "runtimes": {name: {"path": "/usr/sbin/runc"} for name in STANDIN_RUNTIMES},
            "shutdown-timeout": 5,
        }
        self.write("/etc/docker/daemon.json", json.dumps(config, indent=2) + "\n")
        (self.root / "var/lib/docker").mkdir(parents=True, exist_ok=True)
        # ROOT's docker is Debian's on every machine: hide a static CLI / daemon under /usr/local
        for name in (
            "usr/local/bin/docker",
            "usr/local/bin/dockerd",
            "usr/local/sbin/docker",
            "usr/local/sbin/dockerd",
        ):
            if os.path.lexists(self.root / name):
                (self.root / name).unlink()

    def _start_dockerd(self, timeout: float) -> None:
        assert self._lock_fd is not None
        env = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        with open(self.log, "ab") as log:
            log.write(f"---- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting dockerd in {self.root}\n".encode())
            log.flush()
            self._dockerd = subprocess.Popen(
                [
                    "setpriv",
                    "--pdeathsig",
                    "TERM",
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    _DOCKERD_SCRIPT,
                    "sh",
                    str(self.root),
                    str(self.slot / "data"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                pass_fds=(self._lock_fd,),
                start_new_session=True,
            )
        self.dockerd_pid = self.last_dockerd_pid = self._dockerd.pid
        sock = self.root / "run/docker.sock"
        deadline = time.monotonic() + timeout
        while True:
            if self._dockerd.poll() is not None:
                raise ContainerHostError(f"dockerd exited {self._dockerd.returncode}:\n{self._log_tail()}")
            if sock.exists() and _ping(sock):
                break
            if time.monotonic() > deadline:
                raise ContainerHostError(f"dockerd not ready after {timeout:.0f} s:\n{self._log_tail()}")
            time.sleep(0.05)
        with contextlib.suppress(OSError):
            self._mount_ns = self.last_mount_ns = os.readlink(f"/proc/{self._dockerd.pid}/ns/mnt")

    def _stop_dockerd(self) -> None:
        proc = self._dockerd
        if proc is None:
            return
        try:
            if proc.poll() is None:
                with contextlib.suppress(subprocess.SubprocessError, ContainerHostError, OSError):
                    ids = self.containers()
                    if ids:
                        self.docker("rm", "-f", *ids, timeout=60)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            # container shims outlive a daemon only with containers running; they are ours: by PID
            ns = self._mount_ns
            if ns:
                deadline = time.monotonic() + 10
                while (left := [p for p in _mount_namespace_members(ns) if p != os.getpid()]) and (
                    time.monotonic() < deadline
                ):
                    for pid in left:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    time.sleep(0.05)
        finally:
            self._dockerd = None
            self.dockerd_pid = None
            self._mount_ns = None

    def _ensure_image(self) -> None:
        recipe = image_recipe()
        got = self.docker(
            "image", "inspect", "--format", f'{{{{ index .Config.Labels "{RECIPE_LABEL}" }}}}', PROBE_IMAGE
        )
        if got.returncode == 0 and got.stdout.strip() == recipe:
            return
        base = _rootfs_tar(build=True)
        argv = [
            "chroot",
            str(self.root),
            "docker",
            "import",
            "--change",
            f"LABEL {RECIPE_LABEL}={recipe}",
            "--change",
            'CMD ["sleep", "infinity"]',
            "-",
            PROBE_IMAGE,
        ]
        with subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env()
        ) as imp:
            assert imp.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # docker import failed early: its stderr says why
                _write_image_tar(imp.stdin, base)
            _out, err = imp.communicate(timeout=300)
        if imp.returncode != 0:
            raise ContainerHostError(f"docker import {PROBE_IMAGE} failed: {err.decode()[-3000:]}")
        self.docker("image", "prune", "-f")  # the previous recipe's image, now untagged

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no dockerd log)"


def _relative(host_path: str) -> str:
    norm = posixpath.normpath("/" + host_path.lstrip("/"))
    if norm == "/" or ".." in norm.split("/"):
        raise ValueError(f"{host_path}: not a path inside the host root")
    return norm.lstrip("/")


def _ping(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = s.recv(4096)
        except OSError:
            return False
    return reply.startswith(b"HTTP/1.") and reply.rstrip().endswith(b"OK")


def _take_slot() -> tuple[Path, int]:
    BUILD.mkdir(parents=True, exist_ok=True)
    for n in range(SLOTS):
        slot = BUILD / f"slot-{n}"
        slot.mkdir(exist_ok=True)
        fd = os.open(slot / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return slot, fd
    raise ContainerHostError(f"all {SLOTS} slots under {BUILD} are in use (other test sessions, or their daemons)")


# -- pytest ------------------------------------------------------------------------------------------


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the container host tests: {reason}")
    pytest.skip(reason)


# The session's host: one per test process, however many test modules take the fixtures (each module
# that assigns them has its own session-scoped fixture definition; they all share this one host).
_SESSION_HOST: list[ContainerHost] = []


def _stop_session_host() -> None:
    while _SESSION_HOST:
        host = _SESSION_HOST.pop()
        host.stop()
        left = host.leftovers()
        if left:
            print(f"tests/tools/container_host.py: the session's host left behind: {left}", file=sys.stderr)


@pytest.fixture(scope="session")
def container_host_session(request: pytest.FixtureRequest) -> ContainerHost:
    """The :class:`ContainerHost` of this test session (started empty on first use; tests share it,
    stopped when the session ends). Do not ``stop()`` it in a test."""
    reason = cannot_run()
    if reason:
        _skip_or_fail(reason)
    if not _SESSION_HOST:
        _SESSION_HOST.append(ContainerHost.start())
        request.config.add_cleanup(_stop_session_host)
    return _SESSION_HOST[0]


@pytest.fixture
def container_host(request: pytest.FixtureRequest, container_host_session: ContainerHost) -> ContainerHost:
    """The session's host, reset for this test: a fresh upper tree, a fresh daemon, no containers.

    The tree is empty, or a fixture tree copied in when the test parametrizes this fixture
    indirectly: ``@pytest.mark.parametrize("container_host", [FIXTURES / "h100-sxm-8x"], indirect=True)``.
    """
    fixture: Path | None = getattr(request, "param", None)
    container_host_session.reset(fixture)
    return container_host_session


__all__: Sequence[str] = (
    "PROBE_IMAGE",
    "STANDIN_RUNTIMES",
    "ContainerHost",
    "ContainerHostError",
    "cannot_run",
    "container_host",
    "container_host_session",
    "image_recipe",
    "preload_library",
)
