"""The responder contract: what one manufacturer injects into one container for one grant.

The allocator (``allocator/``) decides *which* accelerators a container gets and records it; the
manufacturer's responder (``manufacturers/<vendor>/respond.py``) says *what the container needs* to
use them -- visibility env or device nodes, the slicing library, quota env and files, a partition
instance. This module is the contract between the two, below both (a manufacturer never imports the
allocator), plus the few rules that hold for every vendor and so live once, here:

- never-overwrite (:func:`set_default`): a variable the container's own ``env:`` sets is left alone
  (spec "Sliced": an ``envFrom:`` value is invisible, opting out needs an explicit ``env:``);
- positional order: :attr:`Grant.accelerators` is always in ascending accelerator index (spec
  "Positional injection order"), so a responder numbering ``_<i>`` keys walks it as given;
- refusals (:class:`RefusedError`) carry the gRPC status the kubelet sees (``FailedPrecondition``).

A responder is pure over its inputs except through the seams on :class:`RespondContext`: the node
view (to see which device nodes exist), the host's writable directories (per-pod working dir, Hygon's
``vdev<i>.conf``), and vendor calls (driver modes, partition create/destroy) that are real library
calls in production and compiled stand-ins in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpustack_operator.host import HostPathError, HostRoot
from gpustack_operator.ledger.models import Accelerator, DevicesGroup
from gpustack_operator.settings import Settings

T = TypeVar("T")

if TYPE_CHECKING:  # base imports this module for Backend's types
    from gpustack_operator.manufacturers.base import DetectContext

LIB_DIR = "/var/lib/gpustack/operator/lib"  # host path of the staged preload libraries
PODS_DIR = "/var/lib/gpustack/operator/pods"  # host path of the per-pod working directories

# Logical slices the reclaimer (not the kubelet) takes back: the driver object outlives the container,
# so they stay charged until the Pod is gone even when it finished (supplement §1.8 rule 7).
SLICES_HELD_UNTIL_GONE = frozenset({"metax", "cambricon"})


class Family(StrEnum):
    """The allocation families (supplement §5.1/§5.2) plus the internal visibility mode (§1.7)."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"
    VISIBILITY = "visibility"


def charges(manufacturer: str, family: Family, finished: bool, release_terminated: bool) -> bool:
    """Does a ``family`` claim of ``manufacturer`` charge its accelerators while its Pod is on the node
    (``finished``: the Pod's phase is Succeeded or Failed)? The one rule the ledger charges by and the
    responders read per-slice host records by (supplement §1.8 rules 6 and 7): visibility never
    charges; an entry charges until its Pod is gone, except that a finished Pod stops being charged for
    exclusive, shared and logical-slice claims -- not for hardware partitions, nor for the slices of
    :data:`SLICES_HELD_UNTIL_GONE` -- and ``GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS=false``
    (``release_terminated`` False) disables that exception."""
    if family is Family.VISIBILITY:
        return False
    if not finished or not release_terminated or family is Family.PARTITIONED:
        return True
    return family is Family.SLICED and manufacturer in SLICES_HELD_UNTIL_GONE


def live_slice_pods(manufacturer: str, pods: Mapping[str, bool], release_terminated: bool) -> frozenset[str]:
    """The Pods (by UID) whose per-slice host records are live: ``pods`` maps every Pod on the node to
    whether it finished; a Pod absent from it is gone, so its records are not live either. A record is
    live exactly when the ledger charges its slice (:func:`charges`), so a responder's neighbour read
    sees the room the allocation hint sees ("the refusal reads the same room the allocation hint
    does")."""
    return frozenset(
        uid for uid, finished in pods.items() if charges(manufacturer, Family.SLICED, finished, release_terminated)
    )


class Channel(StrEnum):
    """How a visibility grant travels (supplement §1.4 CDI table). Decided above the vendor (the
    allocator's CDI resolver); a responder only emits the channel it is handed."""

    ENVVAR = "envvar"
    CDI = "cdi-annotations"


class Code(StrEnum):
    """The gRPC status codes an allocation refusal is returned with (names as grpc.StatusCode)."""

    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


class RefusedError(Exception):
    """An allocation this layer will not make. ``message`` names the accelerator, what is missing and
    the remedy; the kubelet fails the Pod with ``UnexpectedAdmissionError`` carrying it."""

    def __init__(self, message: str, code: Code = Code.FAILED_PRECONDITION) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# -- what a container gets (mirrors v1beta1 ContainerAllocateResponse) ------------------------------


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True)

    container_path: str
    host_path: str
    read_only: bool = True


class DeviceNode(BaseModel):
    model_config = ConfigDict(frozen=True)

    container_path: str
    host_path: str
    permissions: str = "rwm"


class Injection(BaseModel):
    """One container's allocation response: exactly the v1beta1 ``ContainerAllocateResponse`` fields.
    ``log`` is what the decision wants logged (CDI fallback reason, aligned-down percentage...), never
    sent to the kubelet."""

    envs: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    devices: list[DeviceNode] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)
    cdi_devices: list[str] = Field(default_factory=list)
    log: list[str] = Field(default_factory=list)

    def add_device(self, path: str, host_path: str | None = None, permissions: str = "rwm") -> None:
        """Add a device node once (a node-level control node shared by two accelerators is one node)."""
        node = DeviceNode(container_path=path, host_path=host_path or path, permissions=permissions)
        if node not in self.devices:
            self.devices.append(node)

    def add_mount(self, container_path: str, host_path: str, read_only: bool = True) -> None:
        mount = Mount(container_path=container_path, host_path=host_path, read_only=read_only)
        if mount not in self.mounts:
            self.mounts.append(mount)


# -- what a container was granted ------------------------------------------------------------------


@dataclass(frozen=True)
class Granted:
    """One granted accelerator with the group (model) it belongs to."""

    group: DevicesGroup
    accelerator: Accelerator

    @property
    def id(self) -> str:
        return self.accelerator.id

    @property
    def index(self) -> int:
        """The operator's logical index (the detector's enumeration)."""
        return self.accelerator.index

    def driver_index(self) -> int:
        """The driver's own index where a number travels as a value (spec "Positional injection
        order": Ascend's physical id, Cambricon's enumeration position): the first physical index the
        detector recorded, else the logical one."""
        return self.accelerator.physical_indexes[0] if self.accelerator.physical_indexes else self.accelerator.index


@dataclass(frozen=True)
class SliceBudget:
    """A logical slice's budgets, already resolved by the allocator (reference rules §5):
    ``cores_percent`` in (0, 100] (absent or <= 0 → 100); ``memory_mib`` floor(vram·pct/100) or the
    MiB request, capped at the accelerator's VRAM; ``units`` the container's ``.sliced.units``."""

    cores_percent: int
    memory_mib: int
    units: int = 0


@dataclass(frozen=True)
class PartitionInstance:
    """A materialised hardware partition (NVIDIA MIG, T-Head / Hygon MIG-named partitioning).

    ``uuid`` is what visibility names (``MIG-…``); ``device_nodes`` are host device paths the
    instance needs (T-Head); ``registry_file`` is the instance's own file (Hygon); ``handle`` is the
    vendor's ids to destroy or verify it by (GPU instance id, compute instance id, ...)."""

    accelerator: str  # the parent accelerator id
    profile: str  # "1g.10gb"
    uuid: str
    start: int = 0  # the placement it took
    size: int = 0
    device_nodes: tuple[str, ...] = ()
    registry_file: str | None = None
    handle: Mapping[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerRef:
    """The container the allocator identified this call as serving."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    env: Mapping[str, str] = field(default_factory=dict)  # the container's own ``env:`` (literal values)
    runtime_class: str | None = None  # the Pod's ``runtimeClassName``

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.pod} container {self.container}"


@dataclass(frozen=True)
class Grant:
    """What one container was granted, as the responder sees it.

    ``accelerators`` are in ascending accelerator index (the positional order). For ``SLICED``,
    ``budget`` is set; for ``PARTITIONED`` (and ``VISIBILITY`` of a partition-backed owner)
    ``partition`` is the instance; for ``VISIBILITY`` ``owner_family`` is what the owner holds.
    ``channel`` is the visibility channel the allocator resolved (``CDI`` only ever for a non-partition
    grant of a manufacturer that reads the strategy)."""

    manufacturer: str
    family: Family
    accelerators: tuple[Granted, ...]
    container: ContainerRef
    budget: SliceBudget | None = None
    partition: PartitionInstance | None = None
    owner_family: Family | None = None
    channel: Channel = Channel.ENVVAR
    cdi_kind: str | None = None  # "nvidia.com/gpu" when channel is CDI


# -- the seams a responder may use ------------------------------------------------------------------


class Partitioner(Protocol):
    """A vendor's partition calls (NVML GPU/compute instance create for NVIDIA; the T-Head and Hygon
    equivalents). Real library calls in production; a compiled stand-in library behind them in tests."""

    def create(self, group: DevicesGroup, accelerator: Accelerator, profile: str, start: int) -> PartitionInstance:
        """Materialise ``profile`` at placement ``start``; :class:`RefusedError` naming the vendor's error."""
        ...

    def live(self, instance: PartitionInstance) -> bool:
        """Does the instance still exist (the visibility sidecar's proof of the owner)?"""
        ...

    def destroy(self, instance: PartitionInstance) -> None: ...


@dataclass
class RespondContext:
    """Where a responder may look and write.

    ``view`` is the node as this process sees it (``/dev`` to check a device node exists, ``/sys`` for
    topology). ``host`` is where host paths this process writes are reachable (in the DaemonSet the
    host's ``/var/lib/gpustack`` is mounted at the same path, so in production it is ``/``; a temporary
    tree in tests). Paths *in the response* are always host paths (the kubelet reads them on the host).
    """

    view: HostRoot
    host: HostRoot
    settings: Settings
    lib_dir: str = LIB_DIR
    pods_dir: str = PODS_DIR
    arch: str = "x86_64"
    partitioner: Partitioner | None = None
    # The detection context of the node view, for the vendor's driver-mode calls an allocation makes
    # (Ascend's container-share flag, Cambricon's sMLU mode: ``ModeDriver.read/set`` take it).
    detect: DetectContext | None = None
    # Driver seams by name (preflight's, supplement §1.5 [repo]: "the pass substitutes the manufacturer's
    # driver seam and redirects render paths"): a synthetic allocation calls the substitute instead of the
    # driver -- a mode the driver-read row established read back rather than written again, an sGPU
    # control write recorded rather than made, an sMLU instance described rather than created. Empty in
    # production, where every responder calls its driver.
    seams: dict[str, Any] = field(default_factory=dict)
    # The Pods whose per-slice host records are live for this call (:func:`live_slice_pods`), set by the
    # allocator from the Pods the call read; ``None`` (a responder called on its own, with no Pods to
    # read) counts every record on the host as live.
    live_pods: frozenset[str] | None = None

    def record_live(self, pod_uid: str) -> bool:
        """Is a per-slice host record under ``<pods_dir>/<pod_uid>/`` live -- one a neighbour read must
        place against? Every responder's neighbour read asks this, never the files alone: a finished
        Pod's records stay on the host until it is gone, but its slice is no longer charged."""
        return self.live_pods is None or pod_uid in self.live_pods

    def seam(self, name: str, default: T) -> T:
        """What a responder calls for ``name``: the substitute when one is set, else ``default``."""
        substitute = self.seams.get(name)
        return cast(T, substitute) if substitute is not None else default

    def pod_dir(self, pod_uid: str, *parts: str) -> str:
        """The host path of a pod's (or one of its containers') working directory."""
        return "/".join([self.pods_dir.rstrip("/"), pod_uid, *parts])


class Responder(Protocol):
    """One manufacturer's responder. ``families`` are those it can serve at all (the allocator never
    registers a resource for another); ``respond`` must not mutate the grant and raises only
    :class:`RefusedError` (anything else is a bug the allocator contains as ``INTERNAL``)."""

    families: frozenset[Family]

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection: ...


class Reclaimer(Protocol):
    """Optional on a responder whose slices outlive the container in the driver (MetaX sGPU
    subdevices, Cambricon sMLU instances: spec "Container identification" -- they stay charged until
    the Pod is gone, "because the reclaimer destroys them only then"). The allocator calls ``reclaim``
    once the Pod is gone from the node, before it removes the Pod's working directory, which holds the
    responder's records of what it made. Returns what it did (logged); raises :class:`RefusedError`
    when something could not be destroyed -- the directory is then kept and the reclaim retried."""

    def reclaim(self, pod_uid: str, ctx: RespondContext) -> list[str]: ...


# -- rules that hold for every vendor ---------------------------------------------------------------


def granted_ids(grant: Grant, what: str) -> list[str]:
    """The granted accelerators' ids in the grant's (ascending index) order; refused when there are
    none or one appears twice (a shared grant of N is N distinct accelerators, spec "Exclusive and
    shared": a container must not get fewer accelerators than it asked for)."""
    ids = [g.id for g in grant.accelerators]
    if not ids:
        raise RefusedError(f"{grant.container.label}: {what} grant names no accelerator")
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise RefusedError(
                f"{grant.container.label}: accelerator {i} was granted twice; a {grant.family} grant of "
                f"{len(ids)} must be {len(ids)} distinct accelerators"
            )
        seen.add(i)
    return ids


def set_default(injection: Injection, container_env: Mapping[str, str], name: str, value: str) -> None:
    """Never-overwrite (spec "Sliced"): inject ``name=value`` only if the container's own ``env:``
    does not set ``name``."""
    if name not in container_env:
        injection.envs[name] = value


def require_devices(view: HostRoot, paths: list[str], what: str) -> None:
    """Every path must exist as a node in the view, else :class:`RefusedError` naming the first missing one
    (a container started without its accelerator is worse than one that does not start)."""
    for path in paths:
        if not view.exists(path):
            raise RefusedError(f"{what}: device node {path} does not exist on this node; is the driver loaded?")


# -- the per-slice host records ---------------------------------------------------------------------

RECORD_CONFIG = ConfigDict(strict=True, extra="forbid", frozen=True)
"""A per-slice record model's configuration: exact JSON types (no ``"1"`` or ``true`` for a number,
no float for an integer -- so no ``Infinity``, ``NaN`` or ``1e400``) and no field the responder never
writes. Each field's range is the model's own (``Field(ge=..., le=...)``, a ``pattern``)."""


def record_problem(exc: ValidationError) -> str:
    """The first thing wrong with a record, on one line: ``index: Input should be ...``."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "not a record"
    first = errors[0]
    # a location part may be a key the record itself holds: quoted and cut unless it is a plain name
    where = ".".join(
        str(part)
        if isinstance(part, int) or (str(part).isidentifier() and len(str(part)) <= 40)
        else repr(str(part)[:40])
        for part in first.get("loc", ())
    )
    message = " ".join(str(first.get("msg", "invalid")).split())
    return f"{where}: {message}" if where else message


def read_record[R: BaseModel](host: HostRoot, path: str, model: type[R], what: str) -> R:
    """The per-slice host record at ``path`` as ``model`` (configured :data:`RECORD_CONFIG`), or
    :class:`ValueError` naming what is wrong: ``unreadable: <reason>`` (absent, not a regular file,
    too large, an I/O error) or ``not <what>: <field>: <why>`` (not JSON, nested past the parser's
    limit, a field of the wrong type or out of its range). The one reader every responder's reclaim
    and neighbour read takes a JSON record through, so a record on the host -- whoever wrote it --
    never raises anything else (issue 16: ``Infinity`` in a Cambricon ``smlu.json``)."""
    try:
        raw = host.read_text(path)
    except HostPathError as exc:
        raise ValueError(f"unreadable: {exc.strerror}") from None
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise ValueError(f"not {what}: {record_problem(exc)}") from None


PRELOAD_FILE = "/etc/ld.so.preload"
PRELOAD_DIR = "_preload"  # under a pod's working directory; no container can be named so


def mount_preload(
    injection: Injection,
    ctx: RespondContext,
    subtree: str,
    container_dir: str,
    library: str,
    *,
    grant: Grant,
    also: tuple[str, ...] = (),
) -> None:
    """Activate a preload library the one way every vendor does (spec "Logical slicing per
    manufacturer": through ``/etc/ld.so.preload``): the staged host directory ``<lib_dir>/<subtree>``
    read-only at ``container_dir``, and a preload file naming ``<container_dir>/<library>`` (then each
    of ``also``, one a line) at ``/etc/ld.so.preload``.

    The preload file is written per container at ``<pods_dir>/<uid>/_preload/<container>`` -- outside
    the container's own read-write working directory, so the workload cannot edit its limiter away
    (``_`` cannot begin a container name, so the directory never is one) -- and reclaimed with the Pod.
    Refused when a library was not staged: a sliced container that starts without its library is a
    whole accelerator nobody asked for."""
    host_dir = f"{ctx.lib_dir.rstrip('/')}/{subtree}"
    for name in (library, *also):
        if not ctx.host.exists(f"{host_dir}/{name}"):
            raise RefusedError(
                f"the slicing library {host_dir}/{name} is not staged on this node; "
                "the device-manager's init container stages it (check its log, or run the preload_libraries module)"
            )
    preload_dir = ctx.pod_dir(grant.container.pod_uid, PRELOAD_DIR)
    preload_file = f"{preload_dir}/{grant.container.container}"
    text = "".join(f"{container_dir.rstrip('/')}/{name}\n" for name in (library, *also))
    try:
        ctx.host.makedirs(preload_dir)
        if ctx.host.read_optional(preload_file) != text:
            ctx.host.write_text(preload_file, text)
    except HostPathError as exc:
        raise RefusedError(f"the preload file {preload_file} cannot be written: {exc}", Code.INTERNAL) from None
    injection.add_mount(container_dir, host_dir)
    injection.add_mount(PRELOAD_FILE, preload_file)


def mount_pod_dir(injection: Injection, ctx: RespondContext, grant: Grant, container_path: str) -> str:
    """The per-container working directory ``<pods_dir>/<pod uid>/<container>`` (created on the host,
    reclaimed once the Pod is gone), mounted read-write at ``container_path``; returns its host path."""
    host_path = ctx.pod_dir(grant.container.pod_uid, grant.container.container)
    ctx.host.makedirs(host_path)
    injection.add_mount(container_path, host_path, read_only=False)
    return host_path


__all__ = [
    "LIB_DIR",
    "PODS_DIR",
    "PRELOAD_FILE",
    "RECORD_CONFIG",
    "SLICES_HELD_UNTIL_GONE",
    "Channel",
    "Code",
    "ContainerRef",
    "DeviceNode",
    "Family",
    "Grant",
    "Granted",
    "Injection",
    "Mount",
    "PartitionInstance",
    "Partitioner",
    "Reclaimer",
    "RefusedError",
    "RespondContext",
    "Responder",
    "SliceBudget",
    "charges",
    "granted_ids",
    "live_slice_pods",
    "mount_pod_dir",
    "mount_preload",
    "read_record",
    "record_problem",
    "require_devices",
    "set_default",
]
