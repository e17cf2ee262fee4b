"""Cambricon's responder (issue 10): device nodes injected by this layer, as the vendor plugin does by
default (spec "Exclusive and shared"; supplement §1.4, §1.6).

Whole-card families (exclusive, shared, visibility): per granted card, at its driver index ``N``
(``physicalIndexes[0]``, the cnDev enumeration position): ``/dev/cambricon_dev<N>`` (required: a card
the host exposes none for fails the allocation), then the optional per-card nodes the host exposes
(``/dev/cambricon_ipcm<N>``, ``/dev/commu<N>``, ``/dev/cmsg_ctrl<N>``, ``/dev/cambr-msgq:<N>``,
``/dev/cambr-rpc:<N>``, the cambricon-k8s-device-plugin's set), and the node-level control nodes once
per response (``/dev/cambricon_ctl``, ``/dev/cambricon_gdr``, where present).
``CAMBRICON_VISIBLE_DEVICES`` carries the driver indexes, for a deployment that runs the vendor runtime.

Sliced (sMLU): sMLU mode is enabled through :data:`~.modes.SMLU` (read first, written only when off,
never turned off here; no sMLU API → refused with no command; any other write failure names the PCI
address and cnDev index and suggests ``cnmon set -c <index> -smlu on``). Then an sMLU profile with
``mluQuota`` = cores % and ``memorySize`` = the VRAM budget is reused (same figures, capacity left) or
created, and an instance of it is made under a name derived from the pod uid, container and card, so a
retried container finds its own instance instead of making a second (idempotent). The response carries
the card's node, its ipcm node where present, the instance's own node (required) and the control nodes,
plus ``VIRTUAL_DEVICES`` = ``<dev>,<ipcm>,<instance node>`` per card (``;``-separated), the vendor
runtime's form for ``--use-runtime`` deployments (sMLU has no CDI); ``CAMBRICON_VISIBLE_DEVICES`` is not
set, since it would hand such a runtime the whole card. The instance is recorded in the container's
working directory (``smlu.json``) for the reclaimer, which destroys it once the Pod is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import cast

from pydantic import BaseModel, Field

from gpustack_operator.host import HostPathError
from gpustack_operator.host.libs import LibraryLoadError, find_library, load_library
from gpustack_operator.manufacturers.base import ModeError
from gpustack_operator.manufacturers.cambricon.cndev import (
    CndevError,
    CnDevSmlu,
    MissingSymbolError,
    SmluInstance,
    SmluProfile,
)
from gpustack_operator.manufacturers.cambricon.detect import LIBRARY, mlu_id
from gpustack_operator.manufacturers.cambricon.identity import SMLU_SEAM
from gpustack_operator.manufacturers.cambricon.modes import NO_API, SMLU
from gpustack_operator.manufacturers.respond import (
    RECORD_CONFIG,
    Code,
    Family,
    Grant,
    Granted,
    Injection,
    RefusedError,
    RespondContext,
    granted_ids,
    read_record,
)

VISIBLE = "CAMBRICON_VISIBLE_DEVICES"
VIRTUAL = "VIRTUAL_DEVICES"
CONTROL_NODES = ("/dev/cambricon_ctl", "/dev/cambricon_gdr")
PER_CARD_OPTIONAL = (
    "/dev/cambricon_ipcm{}",
    "/dev/commu{}",
    "/dev/cmsg_ctrl{}",
    "/dev/cambr-msgq:{}",
    "/dev/cambr-rpc:{}",
)
RECORD = "smlu.json"
MIB = 1 << 20
NAME_PATTERN = r"^gpustack-[0-9a-f]{24}$"  # instance_name(): the only instances this responder makes


class SmluRecordEntry(BaseModel):
    """One sMLU instance a container's ``smlu.json`` records (what the reclaimer destroys)."""

    model_config = RECORD_CONFIG

    accelerator: str = Field(max_length=256)
    index: int = Field(ge=0, le=255)  # the cnDev index; a handle is ``instance << 8 | index``
    profile: int = Field(ge=0, lt=1 << 31)
    instance: int = Field(ge=0, lt=1 << 23)  # the handle is an int32
    handle: int = Field(ge=0, lt=1 << 31)
    name: str = Field(pattern=NAME_PATTERN)
    node: str = Field(max_length=256)


class SmluRecord(BaseModel):
    """``<pods_dir>/<uid>/<container>/smlu.json``. Read strictly (:func:`..respond.read_record`): a
    value the responder never writes -- ``Infinity``, a number past its range, a string for a number,
    a name it never gives an instance -- is a corrupt record, refused, never guessed at."""

    model_config = RECORD_CONFIG

    instances: list[SmluRecordEntry] = Field(max_length=64)


def driver_index(granted: Granted) -> int:
    return granted.driver_index()


def card_node(index: int) -> str:
    return f"/dev/cambricon_dev{index}"


def _card(ctx: RespondContext, injection: Injection, granted: Granted, optional: tuple[str, ...]) -> None:
    index = driver_index(granted)
    node = card_node(index)
    if not ctx.view.exists(node):
        raise RefusedError(
            f"Cambricon MLU {granted.id}: device node {node} does not exist on this node; is the MLU driver loaded?"
        )
    injection.add_device(node)
    for pattern in optional:
        path = pattern.format(index)
        if ctx.view.exists(path):
            injection.add_device(path)


def _control(ctx: RespondContext, injection: Injection) -> None:
    for path in CONTROL_NODES:
        if ctx.view.exists(path):
            injection.add_device(path)


def instance_name(grant: Grant, granted: Granted) -> str:
    digest = hashlib.sha256(f"{grant.container.pod_uid}/{grant.container.container}/{granted.id}".encode()).hexdigest()
    return f"gpustack-{digest[:24]}"


class DescribedSmlu:
    """Preflight's seam over CNDev (supplement §1.5 [repo]): every read is the real library's; a profile
    or instance the responder would create is recorded and *described* -- named as asked, given the
    node the driver gives an instance (``/dev/cambricon-caps/cap_dev<card>_mi<n>``) -- never made, so
    the synthetic slice renders its injection and the card is unchanged."""

    def __init__(self, cn: CnDevSmlu, record: Callable[[str, str], None]) -> None:
        self._cn = cn
        self._record = record
        self._index: dict[int, int] = {}
        self._made: dict[int, list[SmluInstance]] = {}
        self._profiles = 0

    def handle(self, index: int) -> int:
        handle = self._cn.handle(index)
        self._index[handle] = index
        return handle

    def uuid(self, handle: int) -> str:
        return self._cn.uuid(handle)

    def smlu_profiles(self, handle: int) -> list[SmluProfile]:
        return self._cn.smlu_profiles(handle)

    def smlu_instances(self, handle: int) -> list[SmluInstance]:
        return [*self._cn.smlu_instances(handle), *self._made.get(handle, [])]

    def create_smlu_profile(self, handle: int, cores: int, memory_bytes: int) -> int:
        self._profiles += 1
        self._record(f"cndevCreateSMluProfileInfo(card {self._index.get(handle, handle)})", f"{cores}% {memory_bytes}")
        return 1000 + self._profiles

    def create_smlu_instance(self, handle: int, profile: int, name: str) -> None:
        index = self._index.get(handle, handle)
        made = self._made.setdefault(handle, [])
        n = len(self._cn.smlu_instances(handle)) + len(made) + 1
        node = f"/dev/cambricon-caps/cap_dev{index}_mi{n}"
        made.append(SmluInstance(profile_id=profile, instance_id=n, name=name, dev_node=node, uuid=f"described-{n}"))
        self._record(f"cndevCreateSMluInstanceByProfileId(card {index})", f"profile {profile} name {name}")

    def described(self, instance: SmluInstance) -> bool:
        return any(instance in made for made in self._made.values())


@contextlib.contextmanager
def _cndev(ctx: RespondContext, what: str) -> Iterator[CnDevSmlu]:
    path = find_library(ctx.view, LIBRARY)
    if path is None:
        raise RefusedError(f"{what}: {NO_API}: libcndev.so is not on this node; the allocation is refused")
    try:
        cn = CnDevSmlu(load_library(path))
        cn.init()
    except (LibraryLoadError, CndevError) as exc:
        raise RefusedError(f"{what}: CNDev at {path} did not initialise: {exc}", code=Code.UNAVAILABLE) from None
    record = ctx.seams.get(SMLU_SEAM)
    try:
        yield cast(CnDevSmlu, DescribedSmlu(cn, record)) if record is not None else cn
    finally:
        with contextlib.suppress(CndevError):
            cn.release()


def _no_api(what: str, exc: MissingSymbolError) -> RefusedError:
    return RefusedError(f"{what}: {NO_API}: {exc}; the allocation is refused and no command can add it")


def ensure_smlu(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    if ctx.detect is None:
        raise RefusedError("Cambricon sMLU mode cannot be read: this allocator was started without a detection context")
    driver = ctx.seam(SMLU.mode, SMLU)
    for granted in grant.accelerators:
        group = granted.group.model_copy(update={"accelerators": [granted.accelerator]})
        try:
            (state,) = driver.read(ctx.detect, [group])
            if not state.declared:
                raise RefusedError(f"Cambricon MLU {granted.id}: {state.detail}")
            if state.enabled is not True:
                change = driver.set(ctx.detect, state, True)
                injection.log.append(f"cambricon: sMLU mode turned on for {granted.id} ({change.command})")
        except ModeError as exc:
            raise RefusedError(f"Cambricon MLU {granted.id}: {exc}") from None


def _find(cn: CnDevSmlu, handle: int, name: str) -> SmluInstance | None:
    return next((i for i in cn.smlu_instances(handle) if i.name == name), None)


def _instance(cn: CnDevSmlu, grant: Grant, granted: Granted, cores: int, memory_mib: int) -> tuple[SmluInstance, int]:
    """This container's instance on ``granted`` (found by name, else made), and its profile id."""
    what = f"Cambricon MLU {granted.id}"
    index = driver_index(granted)
    name = instance_name(grant, granted)
    try:
        handle = cn.handle(index)
        if mlu_id(cn.uuid(handle)) != granted.id:
            raise RefusedError(f"{what}: cnDev index {index} now names another card; re-run detection")
        existing = _find(cn, handle, name)
        if existing is not None:
            return existing, existing.profile_id
        memory_bytes = memory_mib * MIB
        profile = next(
            (
                p
                for p in cn.smlu_profiles(handle)
                if p.quota == cores and p.memory_bytes == memory_bytes and p.remain > 0
            ),
            None,
        )
        pid = profile.id if profile is not None else cn.create_smlu_profile(handle, cores, memory_bytes)
        cn.create_smlu_instance(handle, pid, name)
        made = _find(cn, handle, name)
    except MissingSymbolError as exc:
        raise _no_api(what, exc) from None
    except CndevError as exc:
        raise RefusedError(
            f"{what}: the sMLU instance ({cores}% cores, {memory_mib} MiB) could not be made: {exc}"
        ) from None
    if made is None:
        raise RefusedError(f"{what}: cnDev made an sMLU instance {name} but does not list it", code=Code.INTERNAL)
    return made, pid


def respond_sliced(grant: Grant, ctx: RespondContext, injection: Injection) -> None:
    budget = grant.budget
    if budget is None:
        raise RefusedError("a Cambricon sliced allocation carries no slice budget", code=Code.INTERNAL)
    # mluQuota = cores%, absent or <= 0 meaning 100 (reference rules §5)
    cores = budget.cores_percent if 0 < budget.cores_percent <= 100 else 100
    for granted in grant.accelerators:  # the card nodes are required before anything is made
        if not ctx.view.exists(card_node(driver_index(granted))):
            raise RefusedError(
                f"Cambricon MLU {granted.id}: device node {card_node(driver_index(granted))} does not exist on this "
                "node; is the MLU driver loaded?"
            )
    ensure_smlu(grant, ctx, injection)
    virtual: list[str] = []
    records: list[SmluRecordEntry] = []
    with _cndev(ctx, f"Cambricon {grant.container.label}") as cn:
        for granted in grant.accelerators:
            instance, pid = _instance(cn, grant, granted, cores, budget.memory_mib)
            index = driver_index(granted)
            described = isinstance(cn, DescribedSmlu) and cn.described(instance)
            if not instance.dev_node or not (described or ctx.view.exists(instance.dev_node)):
                raise RefusedError(
                    f"Cambricon MLU {granted.id}: the sMLU instance's device node {instance.dev_node or '(none)'} "
                    "does not exist on this node"
                )
            _card(ctx, injection, granted, ("/dev/cambricon_ipcm{}",))
            injection.add_device(instance.dev_node)
            ipcm = f"/dev/cambricon_ipcm{index}"
            virtual.append(",".join([card_node(index), ipcm, instance.dev_node]))
            records.append(
                SmluRecordEntry(
                    accelerator=granted.id,
                    index=index,
                    profile=pid,
                    instance=instance.instance_id,
                    handle=instance.instance_id << 8 | index,
                    name=instance.name,
                    node=instance.dev_node,
                )
            )
    _control(ctx, injection)
    injection.envs[VIRTUAL] = ";".join(virtual)
    directory = ctx.pod_dir(grant.container.pod_uid, grant.container.container)
    try:
        ctx.host.makedirs(directory)
        ctx.host.write_text(f"{directory}/{RECORD}", SmluRecord(instances=records).model_dump_json(indent=2) + "\n")
    except HostPathError as exc:
        raise RefusedError(f"the sMLU instance record {directory}/{RECORD} cannot be written: {exc}") from None


def reclaim(pod_uid: str, ctx: RespondContext) -> list[str]:
    """Destroy the sMLU instances a gone Pod's containers recorded (``<container>/smlu.json``) that
    cnDev still lists under their name. A record that cannot be read (:class:`SmluRecord`, strictly),
    or a cnDev call that fails, is refused naming it: the allocator logs it, keeps the directory and
    retries the reclaim -- never an exception of another kind, never a destroy on a guess."""
    directory = ctx.pod_dir(pod_uid)
    if not ctx.host.is_dir(directory):
        return []
    wanted: list[tuple[int, str]] = []
    try:
        for container in ctx.host.listdir(directory):
            path = f"{directory}/{container}/{RECORD}"
            if not ctx.host.is_dir(f"{directory}/{container}") or not ctx.host.exists(path):
                continue
            try:
                record = read_record(ctx.host, path, SmluRecord, "an sMLU instance record")
            except ValueError as exc:
                raise RefusedError(
                    f"cambricon: the sMLU record {path} cannot be read ({exc}); the instances it names are unknown, "
                    "so none is destroyed and the reclaim is retried (repair the file, or destroy its instances "
                    "with cnmon and remove it)"
                ) from None
            wanted += [(r.index, r.name) for r in record.instances]
    except HostPathError as exc:
        raise RefusedError(f"cambricon: {directory} cannot be read ({exc})") from None
    if not wanted:
        return []
    done: list[str] = []
    with _cndev(ctx, f"Cambricon reclaim of Pod {pod_uid}") as cn:
        try:
            for index, name in wanted:
                instance = _find(cn, cn.handle(index), name)
                if instance is not None:
                    cn.destroy_smlu_instance(instance.instance_id << 8 | index)
                    done.append(f"sMLU instance {name} on cnDev index {index} destroyed (its Pod is gone)")
        except (CndevError, MissingSymbolError) as exc:
            raise RefusedError(
                f"cambricon: an sMLU instance of gone Pod {pod_uid} could not be destroyed: {exc}"
            ) from None
    return done


class CambriconResponder:
    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def reclaim(self, pod_uid: str, ctx: RespondContext) -> list[str]:
        return reclaim(pod_uid, ctx)

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"Cambricon serves no {grant.family} allocation")
        if not grant.accelerators:
            raise RefusedError("a Cambricon allocation names no MLU")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            # supplement §1.7: a partition-backed owner's sidecar needs partition capability; fail closed
            raise RefusedError(
                f"{grant.container.label}: the grant names a hardware partition, and Cambricon has no "
                "partitioning; refusing rather than exposing a whole MLU"
            )
        granted_ids(grant, str(grant.family))  # one MLU twice is refused (spec "Exclusive and shared")
        injection = Injection()
        if grant.family is Family.SLICED:
            respond_sliced(grant, ctx, injection)
            return injection
        for granted in grant.accelerators:
            _card(ctx, injection, granted, PER_CARD_OPTIONAL)
        _control(ctx, injection)
        injection.envs[VISIBLE] = ",".join(str(driver_index(g)) for g in grant.accelerators)
        return injection


RESPONDER = CambriconResponder()

__all__ = ["RESPONDER", "CambriconResponder", "SmluRecord", "SmluRecordEntry", "instance_name", "reclaim"]
