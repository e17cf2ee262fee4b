"""The report's ``topology`` section: the kubelet's TopologyManager policy (supplement §2.8).

Read "off the same command line and out of the same configuration the CRI endpoint is read from"
(:mod:`.kubelet`): a running kubelet's ``--topology-manager-policy`` over its ``--config-dir``
drop-ins over its ``--config`` file; with no kubelet running, ``kubeadm-flags.env``, then
``/var/lib/kubelet/config.yaml``, then the distribution's ``kubelet.conf.d`` tree.

A policy no readable configuration names is ``unknown`` — never the kubelet's default ``none``,
which would publish a value nobody read — with a note giving one of the four reasons (§2.8):

* nothing the kubelet reads named one (:data:`NOTE_NOTHING_NAMED`);
* a file could not be read (:data:`NOTE_UNREADABLE`; a value that is no policy counts as a file
  that could not be read as one — the kubelet itself would refuse it);
* two distribution trees name different policies (:data:`NOTE_TREES_DISAGREE`);
* the host's process table is not visible — "not read" (:data:`NOTE_NOT_READ`).

The depth is ``declared`` whatever the answer: the policy is read out of declared configuration and
nothing runs. The section never affects the exit code.
"""

from __future__ import annotations

from gpustack_operator.preflight.kubelet import Answer, KubeletReading, Outcome
from gpustack_operator.preflight.models import Depth, Topology, TopologyPolicy

NOTE_NOTHING_NAMED = "nothing the kubelet reads named a TopologyManager policy"
NOTE_UNREADABLE = "a file the kubelet reads could not be read"
NOTE_TREES_DISAGREE = "two distribution trees name different TopologyManager policies"
NOTE_NOT_READ = "not read"
UNKNOWN_NOT_DEFAULTED = "so the policy is unknown rather than defaulted"

POLICIES = tuple(p for p in TopologyPolicy if p is not TopologyPolicy.UNKNOWN)


def topology_section(reading: KubeletReading, timestamp: str) -> Topology:
    """The section for one reading of the kubelet."""
    answer = reading.policy
    if answer.outcome is Outcome.NAMED:
        return _named(answer, timestamp)
    return unknown(timestamp, _note(answer))


def unknown(timestamp: str, note: str) -> Topology:
    return Topology(timestamp=timestamp, policy=TopologyPolicy.UNKNOWN, depth=Depth.DECLARED, note=note)


def not_read(timestamp: str, why: str) -> Topology:
    """The section when nothing could be looked at (the host root itself is unusable)."""
    return unknown(timestamp, f"{NOTE_NOT_READ}: {why}; no kubelet configuration was looked for")


def _named(answer: Answer, timestamp: str) -> Topology:
    value = answer.value or ""
    try:
        policy = TopologyPolicy(value)
    except ValueError:
        policy = TopologyPolicy.UNKNOWN
    if policy is TopologyPolicy.UNKNOWN:
        allowed = ", ".join(p.value for p in POLICIES)
        return unknown(
            timestamp,
            f"{NOTE_UNREADABLE} as a policy: {answer.source} is {value!r}, which is none of {allowed} "
            f"(a kubelet refuses to start with it), {UNKNOWN_NOT_DEFAULTED}",
        )
    return Topology(timestamp=timestamp, policy=policy, depth=Depth.DECLARED)


def _note(answer: Answer) -> str:
    if answer.outcome is Outcome.NOT_READ:
        return (
            f"{NOTE_NOT_READ}: {answer.detail}; without it nothing can say which kubelet runs here or which files "
            "it loaded, so no file at a standard path is taken as this node's kubelet's"
        )
    if answer.outcome is Outcome.UNREADABLE:
        return f"{NOTE_UNREADABLE}: {answer.detail}; it may be the one that names the policy, {UNKNOWN_NOT_DEFAULTED}"
    if answer.outcome is Outcome.CONFLICT:
        named = "; ".join(f"{s.source} names {s.value}" for s in answer.conflict or [])
        return (
            f"{NOTE_TREES_DISAGREE} ({named}); only one of them can be this node's kubelet's, {UNKNOWN_NOT_DEFAULTED}"
        )
    return (
        f"{NOTE_NOTHING_NAMED} ({answer.detail}), {UNKNOWN_NOT_DEFAULTED}: a kubelet nobody configured runs "
        "none, but no configuration read here says this one was left so"
    )
