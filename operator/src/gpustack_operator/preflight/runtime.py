"""Which container CLI preflight's container steps would drive on this node (supplement §2.4).

"Runtime resolution" 1–5, as built here:

1. **The kubelet's own CRI endpoint** decides, wherever the host states one (read by
   :mod:`.kubelet`: a running kubelet's command line, its ``--config`` file and ``--config-dir``
   drop-ins, the command line overriding both). Reproducing production is the point: a host carrying
   both docker and containerd, with a kubelet talking to containerd, must not be probed docker-first.
2. **No kubelet running**: ``kubeadm-flags.env``, ``config.yaml``, the distribution's
   ``kubelet.conf.d`` tree, the first source naming an endpoint winning.
3. **Nothing states an endpoint**: probe ``docker``, then ``nerdctl``, then ``ctr`` on the host's
   ``PATH`` (an executable file in ``/usr/local/sbin``, ``/usr/local/bin``, ``/usr/sbin``,
   ``/usr/bin``, ``/sbin`` or ``/bin`` under the host root).
4. **No host ``/proc``**: refuse to probe — every container step is emitted; ``--runtime`` names a
   runtime past it.
5. **A conflict within one source** (two distribution trees naming different endpoints): every
   container step is emitted, naming both endpoints.

An endpoint is read in every form the kubelet accepts (``unix:///run/x.sock``, ``unix:/run/x.sock``,
the legacy bare path ``/run/x.sock``; blanks and quotes around it dropped: :func:`socket_of`), and
maps onto a CLI by the daemon its socket belongs to, read from the whole path (:func:`daemon_of`):

* containerd (a ``containerd.sock``, or any socket under a ``containerd`` directory: upstream's
  ``/run/containerd/…``, k3s/RKE2's ``/run/k3s/containerd/…``, ``/var/run/containerd/…``) →
  ``nerdctl``, or ``ctr`` when the host carries no nerdctl (then ``nerdctl_absent`` is recorded: a
  ``ctr`` step is printed as a nerdctl command, §2.6), pointed at that socket in the
  ``gpustack-preflight`` namespace (§2.5); with no socket stated, the first of
  :data:`CONTAINERD_SOCKETS` the host has;
* docker (``cri-dockerd.sock``, ``dockershim.sock``, ``docker.sock``, e.g. ``/var/run/docker.sock``,
  ``/run/cri-dockerd.sock``) → ``docker``, which finds its own daemon;
* **CRI-O** (``crio.sock``): none of docker, nerdctl and ctr can talk to CRI-O's daemon, and
  probing past the endpoint would measure a runtime no workload on this node uses — so the runtime
  is named unsupported and every container step is emitted (``--runtime`` overrides). This is this
  implementation's decision; the spec names only the three CLIs.

A kubelet configuration that could not be read is not "nothing stated": the unreadable file may be
the one naming the endpoint, so the steps are emitted naming the file rather than probed past it.

``--runtime`` given: that runtime, source ``--runtime``, whatever the kubelet says; when the host
carries no such executable every container step is emitted, and the result says so.
"""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import unquote

from gpustack_operator.host import HostRoot
from gpustack_operator.ledger.models import CamelModel
from gpustack_operator.preflight.hostexec import HOST_PATH
from gpustack_operator.preflight.hostexec import which as host_which
from gpustack_operator.preflight.kubelet import KubeletReading, Outcome, clean_value

CONTAINERD_NAMESPACE = "gpustack-preflight"
# The label every preflight container carries: what the probes start with and the stale sweep looks for.
LABEL_KEY = "gpustack.ai/preflight"
LABEL = f"{LABEL_KEY}=true"
# Where a containerd socket sits when nothing names one, in the order probed (reference rules §7):
# upstream's default, k3s/RKE2's, then the /var/run spelling (a link to /run on most hosts, a
# directory of its own on a few).
CONTAINERD_SOCKETS = (
    "/run/containerd/containerd.sock",
    "/run/k3s/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
)
UNIX_SCHEME = "unix"
# RFC 3986 scheme, what Go's url.Parse (the kubelet's endpoint parser) takes as one.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SLASHES = re.compile(r"/{2,}")
RUNTIME_FLAG = "--runtime"
PROBE_SOURCE = "probe"
EMITTED = "every container step would be emitted instead of run"


class RuntimeName(StrEnum):
    """The container CLIs preflight can drive (the ``--runtime`` values)."""

    DOCKER = "docker"
    NERDCTL = "nerdctl"
    CTR = "ctr"


PROBE_ORDER = (RuntimeName.DOCKER, RuntimeName.NERDCTL, RuntimeName.CTR)
CONTAINERD_CLIS = frozenset({RuntimeName.NERDCTL, RuntimeName.CTR})


class Daemon(StrEnum):
    CONTAINERD = "containerd"
    DOCKER = "docker"
    CRIO = "CRI-O"


class RuntimeChoiceError(ValueError):
    """``--runtime`` names something that is not one of :class:`RuntimeName` (a usage error)."""


def parse_runtime_name(value: str | None) -> RuntimeName | None:
    """``None`` stays ``None``; anything but docker/nerdctl/ctr raises :class:`RuntimeChoiceError`."""
    if value is None:
        return None
    try:
        return RuntimeName(value)
    except ValueError:
        allowed = ", ".join(r.value for r in RuntimeName)
        raise RuntimeChoiceError(
            f"{value!r} is not a container runtime preflight can drive: use one of {allowed} "
            "(or leave it out to resolve it from the kubelet)"
        ) from None


class RuntimeResolution(CamelModel):
    """The resolved runtime. Not part of the report document (§2.8 has three sections); the CLI logs
    it at ``-vv`` and the Ansible module returns it.

    ``runtime`` is ``None`` exactly when nothing could be driven, and then ``reason`` says why;
    ``emitted`` is true whenever container steps could not be run (also for a ``--runtime`` the host
    lacks).
    """

    runtime: RuntimeName | None = None
    source: str | None = None  # which flag or file said it: "--runtime", "probe", or the kubelet source
    endpoint: str | None = None  # the kubelet's CRI endpoint, as stated
    binary: str | None = None  # host path of the CLI
    socket: str | None = None  # the containerd socket a nerdctl/ctr step is pointed at
    namespace: str | None = None  # the containerd namespace preflight's containers go in
    nerdctl_absent: bool = False  # a ctr step's nerdctl rewrite names a CLI this host lacks
    probed: list[str] | None = None  # what was looked for, in order, when probing
    emitted: bool = False
    reason: str | None = None

    def line(self) -> str:
        """The decision in one line (``-vv``)."""
        if self.runtime is None:
            return f"runtime: none -- {self.reason}"
        where = f"from {self.source}" if self.source else ""
        parts = [p for p in (where, self.endpoint and f"endpoint {self.endpoint}") if p]
        parts += [f"CLI {self.binary}" if self.binary else "no CLI on the host"]
        if self.socket:
            parts.append(f"socket {self.socket}, namespace {self.namespace}")
        text = f"runtime: {self.runtime.value} ({'; '.join(parts)})"
        return f"{text} -- {self.reason}" if self.reason else text


def which(host: HostRoot, name: str) -> str | None:
    """Where the host carries ``name`` as an executable file on its standard PATH (links resolved
    inside the host root), or ``None``."""
    return host_which(host, name, executable=True)


def socket_of(endpoint: str) -> str | None:
    """The socket path of a CRI endpoint in every form the kubelet accepts, or ``None`` for one that
    names no unix socket (``npipe://``, ``tcp://``, ``unix://relative.sock``, a relative path).

    The kubelet parses the endpoint with Go's ``url.Parse`` and dials the path of a ``unix`` URL; a
    value with no scheme is its deprecated bare path, read as ``unix://`` + the value. So
    ``unix:///run/x.sock``, ``unix:/run/x.sock``, ``UNIX:///run/x.sock`` and ``/run/x.sock`` are one
    socket; the query and fragment are not part of the path, ``%xx`` is decoded, a control character
    or a broken ``%`` escape is no URL at all. Surrounding blanks and quotes (a value copied out of a
    shell line or a quoted YAML scalar) are dropped first, as the kubelet-file reader drops them.
    Repeated slashes are one (``unix:////run/x.sock`` dials ``/run/x.sock``)."""
    value = clean_value(endpoint)
    if _has_control(value):
        return None
    scheme, colon, rest = value.partition(":")
    if colon and _SCHEME.fullmatch(scheme):
        if scheme.lower() != UNIX_SCHEME:
            return None
        if rest.startswith("//"):
            authority, _, tail = rest[2:].partition("/")
            if authority:  # unix://relative.sock: a host name and no path
                return None
            rest = "/" + tail
        value = rest
    path = value.split("#", 1)[0].split("?", 1)[0]
    if _BAD_ESCAPE.search(path):
        return None
    path = _SLASHES.sub("/", unquote(path, errors="replace"))
    if not path.startswith("/") or path == "/" or _has_control(path):  # %00 decodes to a NUL no socket has
        return None
    return path


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def daemon_of(socket: str) -> Daemon | None:
    """The daemon a CRI socket belongs to, read from the whole path: its file name first
    (``containerd.sock``, ``docker.sock`` / ``cri-dockerd.sock`` / ``dockershim.sock``,
    ``crio.sock``), then the directories it sits in, innermost first -- a socket under a
    ``containerd`` directory is containerd's (``/run/k3s/containerd/…``, ``/run/containerd/cri.sock``),
    one under ``crio`` CRI-O's. ``None`` when nothing in it names a runtime."""
    parts = [p.lower() for p in socket.split("/") if p]
    if not parts:
        return None
    name = parts[-1].removesuffix(".sock")
    for part in [name, *reversed(parts[:-1])]:
        if "containerd" in part:
            return Daemon.CONTAINERD
        if "docker" in part:  # docker.sock, cri-dockerd.sock, dockershim.sock
            return Daemon.DOCKER
        if "crio" in part or "cri-o" in part:
            return Daemon.CRIO
    return None


def _containerd_socket(host: HostRoot, stated: str | None) -> str | None:
    if stated is not None:
        return stated
    return next((s for s in CONTAINERD_SOCKETS if host.exists(s)), None)


def _driven(
    host: HostRoot,
    runtime: RuntimeName,
    binary: str | None,
    *,
    source: str | None,
    endpoint: str | None = None,
    socket: str | None = None,
    probed: list[str] | None = None,
    reason: str | None = None,
) -> RuntimeResolution:
    """A resolution for ``runtime``; a containerd CLI gets its socket and namespace. No binary means
    every container step is emitted."""
    containerd = runtime in CONTAINERD_CLIS
    return RuntimeResolution(
        runtime=runtime,
        source=source,
        endpoint=endpoint,
        binary=binary,
        socket=_containerd_socket(host, socket) if containerd else None,
        namespace=CONTAINERD_NAMESPACE if containerd else None,
        nerdctl_absent=containerd and which(host, RuntimeName.NERDCTL) is None,
        probed=probed,
        emitted=binary is None,
        reason=reason,
    )


def _none(
    reason: str, *, endpoint: str | None = None, source: str | None = None, probed: list[str] | None = None
) -> RuntimeResolution:
    return RuntimeResolution(runtime=None, source=source, endpoint=endpoint, probed=probed, emitted=True, reason=reason)


def resolve_runtime(host: HostRoot, kubelet: KubeletReading, requested: RuntimeName | None = None) -> RuntimeResolution:
    """The runtime container steps would use on this node (see the module docstring)."""
    endpoint = kubelet.endpoint
    stated = endpoint.value if endpoint.outcome is Outcome.NAMED else None
    stated_socket = socket_of(stated) if stated else None
    if requested is not None:
        return _requested(host, requested, stated, stated_socket)
    if endpoint.outcome is Outcome.NOT_READ:
        return _none(
            f"not probed: {endpoint.detail}; nothing can say which kubelet runs here, so {EMITTED} "
            f"({RUNTIME_FLAG} names a runtime past this)"
        )
    if endpoint.outcome is Outcome.UNREADABLE:
        return _none(
            f"the kubelet's configuration could not be read ({endpoint.detail}), and it may be what names "
            f"the CRI endpoint; probing past it could drive a runtime no workload here uses, so {EMITTED} "
            f"({RUNTIME_FLAG} names one)"
        )
    if endpoint.outcome is Outcome.CONFLICT:
        named = "; ".join(f"{s.source} names {s.value}" for s in endpoint.conflict or [])
        return _none(
            f"two distribution trees name different CRI endpoints ({named}); only one can be this node's "
            f"kubelet's, so {EMITTED} ({RUNTIME_FLAG} picks one)"
        )
    if stated is not None:
        return _from_endpoint(host, stated, stated_socket, endpoint.source)
    return _probe(host)


def _requested(
    host: HostRoot, requested: RuntimeName, stated: str | None, stated_socket: str | None
) -> RuntimeResolution:
    """``--runtime``: that runtime whatever the kubelet says (a containerd CLI still gets the kubelet's
    containerd socket when it names one)."""
    binary = which(host, requested)
    socket = stated_socket if stated_socket and daemon_of(stated_socket) is Daemon.CONTAINERD else None
    reason = None
    if binary is None:
        reason = f"the host carries no {requested.value} on its PATH ({', '.join(HOST_PATH)}), so {EMITTED}"
    return _driven(host, requested, binary, source=RUNTIME_FLAG, endpoint=stated, socket=socket, reason=reason)


def _from_endpoint(host: HostRoot, endpoint: str, socket: str | None, source: str | None) -> RuntimeResolution:
    daemon = daemon_of(socket) if socket else None
    said = f"the kubelet is configured against {clean_value(endpoint)} ({source})"
    if daemon is Daemon.CONTAINERD:
        for cli in (RuntimeName.NERDCTL, RuntimeName.CTR):
            if (binary := which(host, cli)) is not None:
                return _driven(host, cli, binary, source=source, endpoint=endpoint, socket=socket)
        return _none(
            f"{said}, the containerd socket {socket}, but the host carries neither nerdctl nor ctr on its PATH, "
            f"so {EMITTED}",
            endpoint=endpoint,
            source=source,
            probed=[RuntimeName.NERDCTL.value, RuntimeName.CTR.value],
        )
    if daemon is Daemon.DOCKER:
        if (binary := which(host, RuntimeName.DOCKER)) is not None:
            return _driven(host, RuntimeName.DOCKER, binary, source=source, endpoint=endpoint)
        return _none(
            f"{said}, the docker socket {socket}, but the host carries no docker on its PATH, so {EMITTED}",
            endpoint=endpoint,
            source=source,
            probed=[RuntimeName.DOCKER.value],
        )
    if daemon is Daemon.CRIO:
        return _none(
            f"{said}, CRI-O's socket {socket}: this host carries no client for CRI-O that preflight can drive "
            f"(docker, nerdctl and ctr cannot reach its daemon), so {EMITTED}",
            endpoint=endpoint,
            source=source,
        )
    what = f"the socket {socket}, which" if socket else "which is no unix socket and"
    return _none(
        f"{said}, {what} names no runtime preflight knows (containerd, docker via cri-dockerd, CRI-O), so {EMITTED}",
        endpoint=endpoint,
        source=source,
    )


def _probe(host: HostRoot) -> RuntimeResolution:
    probed = [r.value for r in PROBE_ORDER]
    for runtime in PROBE_ORDER:
        if (binary := which(host, runtime)) is not None:
            return _driven(host, runtime, binary, source=PROBE_SOURCE, probed=probed)
    return _none(
        f"nothing the kubelet reads states a CRI endpoint, and no container runtime is on the host's PATH "
        f"(probed {', '.join(probed)} in {', '.join(HOST_PATH)}), so {EMITTED}",
        probed=probed,
    )


def unusable_root_resolution(reason: str, requested: RuntimeName | None) -> RuntimeResolution:
    """The host root itself cannot be read: nothing can be resolved or checked."""
    if requested is not None:
        return RuntimeResolution(
            runtime=requested,
            source=RUNTIME_FLAG,
            emitted=True,
            reason=f"the host root could not be used ({reason}), so whether it carries {requested.value} is "
            f"unknown and {EMITTED}",
        )
    return _none(f"not resolved: the host root could not be used ({reason}), so {EMITTED}")
