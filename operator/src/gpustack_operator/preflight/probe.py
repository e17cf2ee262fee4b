"""The slice probes: a real container granted the allocator's own injection, reporting back what it
sees (supplement §2.5 side effects, §2.6 emitted steps, §2.7 "Slice rows — probes"; reference §8).

One probe per accelerator that can host a logical slice, and -- for co-tenancy -- two more on that
accelerator, started together. Each probe is:

* **never privileged**: exactly the responder's device nodes (``--device host:container:perms``), mounts
  (``-v host:container[:ro]``), environment (``-e``), CDI devices and annotations -- what it measures is
  the isolation that injection establishes, and a privileged container would be handed every device;
* named for its accelerator (``gpustack-preflight-<manufacturer>-<accelerator>[-a|-b]``), labelled
  ``gpustack.ai/preflight=true`` (what the stale sweep collects), started with ``--rm``, on
  ``--network none`` (a probe reaches nothing; the image is pulled by the daemon, not the container);
* run through the host's own CLI in the host root (``chroot <host> docker run ...``); on containerd in
  the namespace ``gpustack-preflight`` against the resolved socket;
* handed to the vendor container runtime where its user-space driver comes from one: docker
  ``--runtime nvidia|ascend``; nerdctl's door to the NVIDIA hook is ``--gpus`` (its ``--runtime`` names an
  OCI shim); nerdctl + Ascend has no door, and ``ctr`` never starts a probe (``ctr run`` passes no device
  node; only ``--privileged``, which would measure the wrong isolation) -- both are emitted, rewritten in a
  dialect that can.

Inside, the probe prints its own address map and the vendor reader's output between markers::

    gpustack-preflight-maps-begin / <cat /proc/self/maps> / gpustack-preflight-maps-end
    gpustack-preflight-reader-begin / <reader: one MiB figure per visible accelerator> / ...-reader-end rc=N

``cat`` is a dynamically linked program started under the injection's ``/etc/ld.so.preload``, so its map
names every shared object the injection preloads -- ``sliced-runtime-loaded`` at ``measured`` is "every
library the preload file names is in the container's address space". Hygon mounts no shared object of
ours: its reader's figure comes from the driver's per-slice record, which exists only for a process that
entered vgpu mode, so a figure read there answers the row. ``sliced-quota-in-force`` is "the reader
reported the cap the injection set (half the accelerator), not the accelerator's own figure".

A step that cannot be taken (:class:`Emitted`) is printed complete and the row says it was emitted: an
answer, not a failure; the row keeps the depth the simulation earned (``simulated``).
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import ProbeTraits
from gpustack_operator.manufacturers.respond import Injection
from gpustack_operator.preflight.hostexec import HostExec, decode
from gpustack_operator.preflight.runtime import CONTAINERD_NAMESPACE, LABEL, RuntimeName, RuntimeResolution
from gpustack_operator.preload.layout import _family_dir, runtime_major

if TYPE_CHECKING:  # the reference is parsed by the caller (api.run_preflight), only when one is given
    from gpustack_operator.preflight.imageref import ImageRef

log = logging.getLogger(__name__)

MAPS_BEGIN = "gpustack-preflight-maps-begin"
MAPS_END = "gpustack-preflight-maps-end"
READER_BEGIN = "gpustack-preflight-reader-begin"
READER_END = "gpustack-preflight-reader-end"
PROBE_TIMEOUT = 300.0  # the first run of an image pulls it
PRELOAD_FILE = "/etc/ld.so.preload"
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_.-]+")
_FIGURE = re.compile(r"^\s*([0-9]{1,12})(?:\s*(?:MiB|MB|M))?\b")
_END = re.compile(rf"^{READER_END} rc=([0-9]{{1,3}})$")
EVIDENCE_LINES = 40

Progress = Callable[[str], None]


def probe_name(manufacturer: str, accelerator: str, suffix: str = "") -> str:
    """The container's name: the accelerator's own, so two cards never render over one path."""
    base = _NAME_CHARS.sub("-", f"gpustack-preflight-{manufacturer}-{accelerator}").strip("-.")
    return f"{base}-{suffix}" if suffix else base


def script(reader: str) -> str:
    """What the probe runs (``sh -c``): its map, then the reader, each between markers."""
    return (
        f"echo {MAPS_BEGIN}; cat /proc/self/maps; echo {MAPS_END}; "
        f"echo {READER_BEGIN}; {reader}; echo {READER_END} rc=$?"
    )


@dataclass(frozen=True)
class ImageChoice:
    image: str | None
    why_none: str | None = None


def probe_image(traits: ProbeTraits, group: DevicesGroup, override: ImageRef | None) -> ImageChoice:
    """``--probe-image`` when given, else the family's default (§2.7), else why there is none."""
    if override is not None:
        return ImageChoice(str(override))
    if traits.image is None:
        return ImageChoice(None, f"{traits.no_image or 'no default probe image is claimed'}: pass --probe-image")
    values: dict[str, str] = {}
    if "{runtime_major}" in traits.image:
        major = runtime_major(group.runtime_version)
        if major is None:
            return ImageChoice(
                None,
                f"its runtime version ({group.runtime_version}) names no major for the probe "
                f"image {traits.image}: pass --probe-image",
            )
        values["runtime_major"] = str(major)
    if "{family}" in traits.image:
        family = _family_dir(group.manufacturer, group.family)
        if family is None:
            return ImageChoice(None, f"no SoC family to name the probe image {traits.image}: pass --probe-image")
        values["family"] = family
    return ImageChoice(traits.image.format(**values))


@dataclass(frozen=True)
class Door:
    """How this run starts containers: the CLI it drives (``runtime``) through the host root, or why
    every container step is emitted instead (§2.6 cases 3 and 4; dry-run and staging are per step)."""

    runner: HostExec | None
    resolution: RuntimeResolution | None
    no_host: str | None = None  # case 4: why there is no host root to enter

    @property
    def runtime(self) -> RuntimeName | None:
        r = self.resolution
        if self.runner is None or r is None or r.runtime is None or r.emitted or r.binary is None:
            return None
        return r.runtime

    def why_not(self) -> str:
        if self.no_host is not None or self.runner is None:
            return f"there is no host root to enter ({self.no_host or 'none given'})"
        r = self.resolution
        if r is None:
            return "no container runtime was resolved"
        probed = f" (probed: {', '.join(r.probed)})" if r.probed else ""
        return f"no container runtime can be driven on this host: {r.reason or 'none found'}{probed}"


def _devices(injection: Injection) -> list[str]:
    args = []
    for node in injection.devices:
        args += ["--device", f"{node.host_path}:{node.container_path}:{node.permissions or 'rwm'}"]
    for name in injection.cdi_devices:
        args += ["--device", name]
    return args


def _mounts(injection: Injection) -> list[str]:
    args = []
    for mount in injection.mounts:
        args += ["-v", f"{mount.host_path}:{mount.container_path}{':ro' if mount.read_only else ''}"]
    return args


def _envs(injection: Injection) -> list[str]:
    args = []
    for key, value in sorted(injection.envs.items()):
        args += ["-e", f"{key}={value}"]
    for key, value in sorted(injection.annotations.items()):
        args += ["--annotation", f"{key}={value}"]
    return args


def run_args(
    dialect: RuntimeName,
    injection: Injection,
    *,
    name: str,
    image: str,
    traits: ProbeTraits,
    socket: str | None = None,
) -> list[str]:
    """The CLI's arguments (after its name) that start one probe, in ``dialect`` (docker or nerdctl)."""
    door: list[str] = []
    if traits.vendor_runtime is not None:
        if dialect is RuntimeName.DOCKER:
            door = ["--runtime", traits.vendor_runtime]
        elif traits.nerdctl_gpus:
            visible = next((v for k, v in injection.envs.items() if k.endswith("_VISIBLE_DEVICES")), "all")
            door = ["--gpus", "all" if visible in ("", "all") else f"device={visible}"]
    globals_: list[str] = []
    if dialect is RuntimeName.NERDCTL:
        globals_ = [*(["--address", socket] if socket else []), "--namespace", CONTAINERD_NAMESPACE]
    return [
        *globals_,
        "run",
        "--rm",
        "--label",
        LABEL,
        "--name",
        name,
        "--network",
        "none",
        *door,
        *_devices(injection),
        *_mounts(injection),
        *_envs(injection),
        "--entrypoint",
        "/bin/sh",
        image,
        "-c",
        script(traits.reader),
    ]


@dataclass(frozen=True)
class Step:
    """One container step: the host argv, and -- when it cannot be taken -- why (it is then emitted)."""

    argv: list[str]
    emitted: str | None = None

    @property
    def shown(self) -> str:
        return shlex.join(self.argv)


def has_door(traits: ProbeTraits, dialect: RuntimeName) -> bool:
    """Can ``dialect`` hand this probe to its vendor runtime (§2.5)?"""
    if traits.vendor_runtime is None or dialect is RuntimeName.DOCKER:
        return dialect is not RuntimeName.CTR
    return dialect is RuntimeName.NERDCTL and traits.nerdctl_gpus


def step(
    door: Door,
    injection: Injection,
    *,
    name: str,
    image: str,
    traits: ProbeTraits,
    blocked: str | None = None,
) -> Step:
    """The step for one probe, emitted where it cannot be run (§2.6): ``blocked`` is the run's own reason
    (``--dry-run``, a library tree that could not be staged); then no host root, no runtime, and a
    runtime that cannot pass the vendor runtime (rewritten in a dialect that can)."""
    r = door.resolution
    socket = r.socket if r is not None else None
    runtime = door.runtime
    chroot = door.runner.command if door.runner is not None else (lambda n, *a: [n, *a])
    if runtime is not None and has_door(traits, runtime):
        argv = chroot(
            runtime.value, *run_args(runtime, injection, name=name, image=image, traits=traits, socket=socket)
        )
        return Step(argv, blocked)
    if runtime is None:
        argv = chroot("docker", *run_args(RuntimeName.DOCKER, injection, name=name, image=image, traits=traits))
        return Step(argv, blocked or door.why_not())
    # case 5: ctr (never starts a probe), or nerdctl for a vendor runtime it has no door to
    if runtime is RuntimeName.CTR and has_door(traits, RuntimeName.NERDCTL):
        argv = chroot(
            "nerdctl", *run_args(RuntimeName.NERDCTL, injection, name=name, image=image, traits=traits, socket=socket)
        )
        absent = (
            "; nerdctl is absent on this host, install it to run this" if r is not None and r.nerdctl_absent else ""
        )
        why = (
            "ctr never starts a probe (ctr run passes no device node, only --privileged, which grants every "
            f"device and would measure the wrong isolation): rewritten for nerdctl against the socket ctr "
            f"resolved{absent}"
        )
    else:
        argv = chroot("docker", *run_args(RuntimeName.DOCKER, injection, name=name, image=image, traits=traits))
        who = "ctr never starts a probe" if runtime is RuntimeName.CTR else f"{runtime.value} has no door"
        why = (
            f"{who} to the {traits.vendor_runtime} container runtime this probe needs (nerdctl's --runtime names "
            f"an OCI shim): rewritten for docker with --runtime {traits.vendor_runtime}, containerd addressing "
            "dropped"
        )
    return Step(argv, f"{blocked}; and {why}" if blocked else why)


# -- running and reading back ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """What one probe container did."""

    rc: int | None  # None: it did not finish (timeout) or could not be started at all
    stdout: str
    stderr: str
    elapsed: float
    problem: str | None = None

    def failure(self) -> str | None:
        if self.problem is not None:
            return self.problem
        if self.rc != 0:
            tail = (self.stderr.strip() or self.stdout.strip()).splitlines()
            return f"exit status {self.rc}: {tail[-1] if tail else 'no output'}"
        return None


def run_together(steps: Sequence[Step], timeout: float = PROBE_TIMEOUT) -> list[Ran]:
    """Start every step at once and wait for all (co-tenancy's two slices are started together)."""
    procs: list[tuple[subprocess.Popen[bytes] | None, str | None]] = []
    start = time.monotonic()
    for s in steps:
        try:
            procs.append((subprocess.Popen(s.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE), None))
        except OSError as exc:
            procs.append((None, f"{s.argv[0]}: {exc.strerror or exc}"))
    out: list[Ran] = []
    for proc, problem in procs:
        if proc is None:
            out.append(Ran(None, "", "", 0.0, problem))
            continue
        left = max(1.0, timeout - (time.monotonic() - start))
        try:
            stdout, stderr = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            out.append(
                Ran(
                    None,
                    decode(stdout),
                    decode(stderr),
                    time.monotonic() - start,
                    f"did not finish within {timeout:.0f}s",
                )
            )
            continue
        out.append(Ran(proc.returncode, decode(stdout), decode(stderr), time.monotonic() - start))
    return out


@dataclass(frozen=True)
class Evidence:
    """The probe's output, parsed: the mapped paths and the reader's figures (``None``: the section is
    missing -- the script never got there)."""

    maps: list[str] | None
    map_lines: list[str] = field(default_factory=list)
    figures: list[int] | None = None
    reader_rc: int | None = None
    reader_text: str = ""


def _section(lines: list[str], begin: str, end: str | re.Pattern[str]) -> tuple[list[str], str | None] | None:
    try:
        i = lines.index(begin)
    except ValueError:
        return None
    for j in range(i + 1, len(lines)):
        line = lines[j]
        if (isinstance(end, str) and line == end) or (isinstance(end, re.Pattern) and end.match(line)):
            return lines[i + 1 : j], line
    return lines[i + 1 :], None


def parse_evidence(stdout: str) -> Evidence:
    """Never raises: whatever is not a map line or a figure is ignored (the image's own tools print what
    they like)."""
    lines = [line.rstrip("\r") for line in stdout.splitlines()]
    maps_part = _section(lines, MAPS_BEGIN, MAPS_END)
    maps = None
    map_lines: list[str] = []
    if maps_part is not None:
        maps = []
        for line in maps_part[0]:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                maps.append(fields[5].strip())
                map_lines.append(line)
    reader_part = _section(lines, READER_BEGIN, _END)
    if reader_part is None:
        return Evidence(maps, map_lines)
    body, end = reader_part
    figures = [int(m.group(1)) for line in body if (m := _FIGURE.match(line))]
    rc = int(m.group(1)) if end is not None and (m := _END.match(end)) else None
    return Evidence(maps, map_lines, figures, rc, "\n".join(body[:EVIDENCE_LINES]))


def maps_evidence(evidence: Evidence, libraries: Sequence[str]) -> str:
    """The lines of the map naming the injection's libraries, between the markers (the row's evidence)."""
    wanted = [line for line in evidence.map_lines if any(line.endswith(lib) for lib in libraries)]
    shown = list(dict.fromkeys(wanted))[:EVIDENCE_LINES]
    return "\n".join([MAPS_BEGIN, *shown, MAPS_END])


def preloaded(injection: Injection, read: Callable[[str], str]) -> list[str] | None:
    """The container paths of the libraries the injection's preload file names (``None``: it mounts none);
    ``read`` reads a host path (the rendered file)."""
    for mount in injection.mounts:
        if mount.container_path == PRELOAD_FILE:
            try:
                text = read(mount.host_path)
            except Exception:  # an unreadable render is reported as naming nothing
                return []
            return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return None


__all__ = [
    "Door",
    "Evidence",
    "ImageChoice",
    "Prober",
    "Ran",
    "Step",
    "maps_evidence",
    "parse_evidence",
    "preloaded",
    "probe_image",
    "probe_name",
    "run_args",
    "run_together",
    "step",
]


@dataclass
class Prober:
    """What the capability pass needs to take (or emit) the container steps of one run.

    ``blocked`` is the run's own reason every step is emitted (``--dry-run``, or the library tree that
    could not be staged, §2.6 cases 1 and 2); ``door`` the runtime (cases 3-5); ``image`` the
    ``--probe-image``; ``progress`` where long steps are reported (stderr: which probe, which
    accelerator, elapsed); ``timings`` every probe's wall time (the bench reads it)."""

    door: Door
    image: ImageRef | None = None
    blocked: str | None = None
    progress: Progress | None = None
    timeout: float = PROBE_TIMEOUT
    timings: list[float] = field(default_factory=list)

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def run(self, steps: Sequence[Step], what: str) -> list[Ran]:
        names = ", ".join(s.argv[s.argv.index("--name") + 1] for s in steps if "--name" in s.argv)
        self.say(f"probe {names}: {what}: starting")
        ran = run_together(steps, self.timeout)
        for r in ran:
            self.timings.append(r.elapsed)
        longest = max((r.elapsed for r in ran), default=0.0)
        failed = [f for r in ran if (f := r.failure())]
        self.say(f"probe {names}: {what}: {'failed: ' + failed[0] if failed else 'done'} ({longest:.1f}s)")
        return ran
