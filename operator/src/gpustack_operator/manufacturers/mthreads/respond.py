"""Moore Threads' responder: ``MTHREADS_VISIBLE_DEVICES``, plus the sGPU QoS env for a slice (issue 10).

Visibility (exclusive, shared, sliced, and the ``sshd`` sidecar) is ``MTHREADS_VISIBLE_DEVICES``
(supplement §6.1), which the MT container toolkit turns into device nodes. It carries each card's
**driver index** (:meth:`Granted.driver_index`: the MTML enumeration index ``mthreads/detect.py``
records as ``physical_indexes``), comma-separated in ascending accelerator index. Supplement §1.4
files MThreads among the vendors where "the number travels as a value", and where a number travels
it is the driver's, never the operator's logical index (the two part when an earlier card failed its
probe); the toolkit's own documentation describes the variable as the card index.

A slice is enforced by the host sGPU kernel module, which reads ``MTHREADS_QOS_*`` variables
(supplement §1.6) -- no preload library, no mounts, no files. The spec names only the prefix; the
exact names below are **not in the spec** and are taken from the MT container toolkit's documented
variables (the same ones the reference operator writes):

- ``MTHREADS_QOS_MEMORY_LIMIT`` -- the hard VRAM cap, in **bytes** (the slice's per-card MiB
  budget × 2^20; the runtime rounds it up to its next memory tier);
- ``MTHREADS_QOS_COMPUTING_POWER_WEIGHT`` -- the compute share, ``.sliced.cores-percentage``
  (1..100) as a **scheduling weight**, not a hard cap (supplement §1.6; hence no compute overcommit
  is advertised, ``mthreads/detect.py``).

Both are per container: a multi-card slice gets the one per-card budget on each card (the budget is
per accelerator, reference rules §5) -- how the kernel module applies one figure across several
cards is not established on hardware.
"""

from __future__ import annotations

from gpustack_operator.manufacturers.respond import Family, Grant, Injection, RefusedError, RespondContext, granted_ids

VISIBLE_DEVICES = "MTHREADS_VISIBLE_DEVICES"
QOS_MEMORY_LIMIT = "MTHREADS_QOS_MEMORY_LIMIT"  # bytes (name not in the spec: MT toolkit's)
QOS_COMPUTE_WEIGHT = "MTHREADS_QOS_COMPUTING_POWER_WEIGHT"  # a weight (name not in the spec: MT toolkit's)


class MthreadsResponder:
    """Moore Threads' :class:`~gpustack_operator.manufacturers.respond.Responder`."""

    families = frozenset({Family.EXCLUSIVE, Family.SHARED, Family.SLICED, Family.VISIBILITY})

    def respond(self, grant: Grant, ctx: RespondContext) -> Injection:
        if grant.family not in self.families:
            raise RefusedError(f"{grant.container.label}: Moore Threads serves no {grant.family} allocation")
        if grant.partition is not None or grant.owner_family is Family.PARTITIONED:
            raise RefusedError(f"{grant.container.label}: Moore Threads has no hardware partitions to make visible")
        granted_ids(grant, str(grant.family))  # none, or one twice, is refused
        injection = Injection()
        if grant.family is Family.SLICED:
            budget = grant.budget
            if budget is None:
                raise RefusedError(f"{grant.container.label}: a sliced grant carries no slice budget")
            if budget.memory_mib <= 0:
                raise RefusedError(
                    f"{grant.container.label}: the slice's memory budget is {budget.memory_mib} MiB; request "
                    ".sliced.memory-percentage or .sliced.memory-mib of at least 1 MiB"
                )
            cores = budget.cores_percent if 0 < budget.cores_percent <= 100 else 100
            injection.envs[QOS_MEMORY_LIMIT] = str(budget.memory_mib * 1024 * 1024)
            injection.envs[QOS_COMPUTE_WEIGHT] = str(cores)
        injection.envs[VISIBLE_DEVICES] = ",".join(str(g.driver_index()) for g in grant.accelerators)
        return injection


RESPONDER = MthreadsResponder()
