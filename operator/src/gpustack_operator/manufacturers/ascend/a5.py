"""The two Ascend A5 (Atlas 950) host-state facts preflight files (supplement §2.7 "A5 host-state
rows", §6.3 "Ascend A5 facts"; reference rules §8).

Neither reads a driver nor starts a container: each reads one file through the *host root* (never the
detect view), so both are ``declared``:

* ``ascend-docker-runtime`` -- the ``version=`` line of the Ascend Docker Runtime installer's record,
  ``/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info`` (the path and the
  ``grep '^version='`` read are the vendor-prerequisites page's own, supplement §6.3). MindCluster 26.0.0
  or newer is required (an older runtime fails container creation on ``/dev/devmm_svm``): a major of
  26 or more (``v26.0.0``, ``v26.0.0.beta.1``, ``v27…``) is ok, anything else (``v7.3.0``,
  ``v7.0.RC1``, ``unknown``, no file, no ``version=`` line) is not.
* ``hccl-ranktable`` -- ``/etc/hccl_rootinfo.json``: absent (with the host's ``/etc`` there) or at
  ``"version": "2.0"`` is ok; any other version, unparsable JSON, a missing version, a symbolic link
  (followed here it would resolve inside this container, while the vendor runtime follows it on the
  host -- the answer names the target instead) or no host root to look in is not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpustack_operator.host import HostPathError, HostRoot

RUNTIME_INFO = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info"
RANKTABLE = "/etc/hccl_rootinfo.json"
MIN_MINDCLUSTER_MAJOR = 26
RANKTABLE_VERSION = "2.0"
A5_FAMILY = "950"

RUNTIME_WHY = (
    "an Atlas A5 accelerator needs the Ascend Docker Runtime of MindCluster 26.0.0 or newer: an older runtime "
    "does not inject /dev/devmm_svm, so every allocation fails at container creation; install MindCluster "
    f"26.0.0 or newer (check with `grep '^version=' {RUNTIME_INFO}` on the host)"
)
RANKTABLE_WHY = (
    f"an Atlas A5 accelerator accepts only an HCCL ranktable at version {RANKTABLE_VERSION} (1.0 is A2, 1.2 is "
    f"A3): with any other {RANKTABLE} on the host, multi-card HCCL initialisation fails; remove the file or "
    f"replace it with a version {RANKTABLE_VERSION} ranktable"
)


@dataclass(frozen=True)
class HostFact:
    """One read: ``ok`` and the words for the row (``detail`` when ok, else ``reason``)."""

    ok: bool
    words: str


def _version_major(version: str) -> int | None:
    match = re.match(r"v?(\d+)\.", version.strip())
    return int(match.group(1)) if match else None


def runtime_version(host: HostRoot | None, problem: str | None = None) -> HostFact:
    """``ascend-docker-runtime``: the MindCluster version the installer recorded."""
    if host is None:
        return HostFact(False, f"the host was never looked at ({problem or 'no host root'}); {RUNTIME_WHY}")
    try:
        text = host.read_optional(RUNTIME_INFO)
    except HostPathError as exc:
        return HostFact(False, f"{RUNTIME_INFO} could not be read ({exc}); {RUNTIME_WHY}")
    if text is None:
        return HostFact(False, f"no {RUNTIME_INFO} on the host, so the runtime's version is unknown; {RUNTIME_WHY}")
    versions = [line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("version=")]
    if not versions:
        return HostFact(False, f"{RUNTIME_INFO} records no version= line; {RUNTIME_WHY}")
    version = versions[0]
    major = _version_major(version)
    if major is None or major < MIN_MINDCLUSTER_MAJOR:
        return HostFact(
            False, f"the Ascend Docker Runtime records version {version!r} in {RUNTIME_INFO}; {RUNTIME_WHY}"
        )
    return HostFact(True, f"the Ascend Docker Runtime records version {version} (MindCluster 26.0.0 or newer)")


def ranktable(host: HostRoot | None, problem: str | None = None) -> HostFact:
    """``hccl-ranktable``: absent or version 2.0 is ok (the healthy state is no file at all)."""
    if host is None:
        return HostFact(
            False,
            f"the host was never looked at ({problem or 'no host root'}), and an unmounted host root is the same "
            f"absence as a missing {RANKTABLE}, only one of which is healthy; {RANKTABLE_WHY}",
        )
    if not host.is_dir("/etc"):
        return HostFact(False, f"the host root {host.root} carries no /etc, so {RANKTABLE} was not looked for")
    try:
        target = host.readlink(RANKTABLE)
    except HostPathError as exc:
        return HostFact(False, f"{RANKTABLE} could not be examined ({exc}); {RANKTABLE_WHY}")
    if target is not None:
        return HostFact(
            False,
            f"{RANKTABLE} is a symbolic link to {target}: followed here it would resolve inside this container "
            f"while the vendor runtime follows it on the host, so it was not read -- read {target} on the host; "
            f"{RANKTABLE_WHY}",
        )
    try:
        text = host.read_optional(RANKTABLE)
    except HostPathError as exc:
        return HostFact(False, f"{RANKTABLE} could not be read ({exc}); {RANKTABLE_WHY}")
    if text is None:
        return HostFact(True, f"no {RANKTABLE} on the host (the healthy state)")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return HostFact(False, f"{RANKTABLE} is not parsable JSON ({exc}); {RANKTABLE_WHY}")
    version = doc.get("version") if isinstance(doc, dict) else None
    if version is None:
        return HostFact(False, f"{RANKTABLE} carries no version field; {RANKTABLE_WHY}")
    if str(version) != RANKTABLE_VERSION:
        return HostFact(False, f"{RANKTABLE} is at version {version!r}; {RANKTABLE_WHY}")
    return HostFact(True, f"{RANKTABLE} is at version {RANKTABLE_VERSION}")


__all__ = ["A5_FAMILY", "RANKTABLE", "RUNTIME_INFO", "HostFact", "ranktable", "runtime_version"]
