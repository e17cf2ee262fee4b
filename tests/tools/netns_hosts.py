"""Extra hosts for real multi-host tests: network namespaces reached over veth pairs, with sshd.

Each host is a network namespace ``<prefix>-node<i>`` joined to the root namespace by a veth pair on
its own /30 inside 198.18.0.0/15 (the benchmarking range: the only non-loopback addresses tests may
talk to here). Host ``i`` (from 0) gets ``198.18.<octet>.<4i+1>/30`` on the root side and
``198.18.<octet>.<4i+2>/30`` inside the namespace. A host with ``sshd`` runs ``sshd -D`` inside its
namespace, listening only on its namespace address, with a generated host key and an
authorized_keys holding one generated client key; a host without it answers nothing on port 22
(connection refused), which is what an unreachable node looks like to Ansible.

The namespaces share this machine's filesystem, so the same Python interpreter and installed
package work on every "host". Everything lives under one work directory and is torn down on exit:
the processes inside the namespaces (sshd and its sessions, all started here) are stopped by PID,
then the namespaces are deleted, which removes the veth pairs.

Usage::

    with netns_hosts(tmp_path, sshd=(True, True, False)) as fleet:
        fleet.hosts[0].address  # "198.18.0.2"
        fleet.client_key        # private key for user root

Needs root, ``ip`` (iproute2) with netns support, and ``sshd`` / ``ssh-keygen`` (openssh-server,
openssh-client; ``tests/tools/system_deps.sh`` installs them). :func:`unavailable` says why the
machine cannot do it (for ``pytest.skip``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
ALLOWED = ipaddress.ip_network("198.18.0.0/15")


@dataclass
class NetnsHost:
    """One namespace host: ``address`` inside the namespace, ``gateway`` on the root side."""

    namespace: str
    address: str
    gateway: str
    veth_root: str
    veth_ns: str
    sshd: bool
    port: int = 22
    sshd_pid: int | None = None
    log: Path | None = None


@dataclass
class NetnsFleet:
    workdir: Path
    client_key: Path
    hosts: list[NetnsHost] = field(default_factory=list)

    def ssh_args(self) -> list[str]:
        """ssh options that touch nothing outside the work directory (no known_hosts, no config)."""
        return [
            "-F",
            "/dev/null",
            "-i",
            str(self.client_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
        ]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False, timeout=30)


def _must(*cmd: str) -> None:
    proc = _run(*cmd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here (a skip reason), or None when they can."""
    if os.geteuid() != 0:
        return "network-namespace hosts need root (ip netns add, sshd)"
    if shutil.which("ip") is None:
        return "no `ip` command (apt-get install iproute2)"
    probe = f"gpa-probe-{os.getpid()}"
    made = _run("ip", "netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe)
    return None


def missing_tools() -> str | None:
    """The OpenSSH binaries the sshd hosts need, when absent (a setup error, not a skip)."""
    missing = [p for p in (SSHD, "ssh", "ssh-keygen") if shutil.which(p) is None]
    if missing:
        return f"missing {', '.join(missing)}: run tests/tools/system_deps.sh (openssh-server, openssh-client)"
    return None


def _existing_addresses() -> set[str]:
    out = _run("ip", "-o", "-4", "addr", "show").stdout
    return {word.split("/")[0] for line in out.splitlines() for word in line.split() if "/" in word}


def _keygen(path: Path) -> None:
    _must("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpa-test", "-f", str(path))


def _sshd_config(workdir: Path, host: NetnsHost, host_key: Path, authorized: Path) -> Path:
    config = workdir / f"sshd_config.{host.namespace}"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {host.address}:{host.port}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                # the work directory is a pytest tmp dir: its modes are not sshd's business
                "StrictModes no",
                "PermitUserEnvironment no",
                "X11Forwarding no",
                "AllowTcpForwarding no",
                "MaxStartups 64:30:128",
                "MaxSessions 64",
                f"PidFile {workdir / f'sshd.{host.namespace}.pid'}",
                "LogLevel INFO",
                "Subsystem sftp internal-sftp",
                "",
            ]
        )
    )
    return config


def _wait_listening(host: NetnsHost, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = host.log.read_text() if host.log else ""
            raise RuntimeError(f"sshd in {host.namespace} exited ({proc.returncode}): {log}")
        with contextlib.suppress(OSError), socket.create_connection((host.address, host.port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sshd in {host.namespace} is not listening on {host.address}:{host.port}")


def _namespace_pids(namespace: str) -> list[int]:
    out = _run("ip", "netns", "pids", namespace).stdout
    return [int(p) for p in out.split()]


def _stop_namespace(namespace: str) -> None:
    """Stop every process inside the namespace (all started by this helper: sshd and its
    sessions), by PID, then delete the namespace (its veth end goes, and with it the pair)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _namespace_pids(namespace)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and _namespace_pids(namespace):
            time.sleep(0.05)
    _run("ip", "netns", "del", namespace)


def _plan(sshd: Sequence[bool], prefix: str, octet: int) -> list[NetnsHost]:
    """Names and addresses of the hosts, refusing any that would clash with what exists."""
    if len(sshd) > 63:
        raise ValueError("at most 63 hosts fit one third octet")
    existing_ns = set(_run("ip", "netns", "list").stdout.split())
    taken = _existing_addresses()
    hosts = []
    for i, with_sshd in enumerate(sshd):
        name = f"{prefix}-node{i + 1}"
        gateway, address = f"198.18.{octet}.{4 * i + 1}", f"198.18.{octet}.{4 * i + 2}"
        assert ipaddress.ip_address(address) in ALLOWED
        if name in existing_ns:
            raise RuntimeError(f"network namespace {name} exists already (a crashed run?): `ip netns del {name}`")
        if {gateway, address} & taken:
            raise RuntimeError(f"{gateway} or {address} is already configured on this machine")
        hosts.append(
            NetnsHost(
                namespace=name,
                address=address,
                gateway=gateway,
                veth_root=f"{name}-h",
                veth_ns=f"{name}-n",
                sshd=with_sshd,
            )
        )
    return hosts


def _keys(fleet: NetnsFleet) -> tuple[Path, Path]:
    """Generate the client key, the (shared) host key and authorized_keys; return the last two."""
    problem = missing_tools()
    if problem:
        raise RuntimeError(problem)
    _keygen(fleet.client_key)
    host_key = fleet.workdir / "host_ed25519"
    _keygen(host_key)
    authorized = fleet.workdir / "authorized_keys"
    authorized.write_text(Path(f"{fleet.client_key}.pub").read_text())
    # sshd insists on its privilege-separation directory (compiled in as /run/sshd)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    return host_key, authorized


def _link(host: NetnsHost) -> None:
    ns = host.namespace
    _must("ip", "link", "add", host.veth_root, "type", "veth", "peer", "name", host.veth_ns)
    _must("ip", "link", "set", host.veth_ns, "netns", ns)
    _must("ip", "addr", "add", f"{host.gateway}/30", "dev", host.veth_root)
    _must("ip", "link", "set", host.veth_root, "up")
    _must("ip", "-n", ns, "addr", "add", f"{host.address}/30", "dev", host.veth_ns)
    _must("ip", "-n", ns, "link", "set", host.veth_ns, "up")
    _must("ip", "-n", ns, "link", "set", "lo", "up")


def _start_sshd(workdir: Path, host: NetnsHost, host_key: Path, authorized: Path) -> subprocess.Popen[bytes]:
    config = _sshd_config(workdir, host, host_key, authorized)
    _must(SSHD, "-t", "-f", str(config))
    host.log = workdir / f"sshd.{host.namespace}.log"
    with host.log.open("wb") as log:
        # `ip netns exec` execs sshd in place: the PID is sshd's own
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.namespace, SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    host.sshd_pid = proc.pid
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def netns_hosts(
    workdir: Path,
    sshd: Sequence[bool] = (True, True),
    prefix: str = "gpa",
    octet: int = 0,
) -> Iterator[NetnsFleet]:
    """Create one namespace host per entry of ``sshd`` (True: with an sshd), yield them, tear down.

    ``prefix`` names the namespaces and veths (keep it short: interface names have 15 characters);
    ``octet`` is the third octet of the addresses (0-255, one /30 per host from .0), so two helpers
    can run side by side with different prefixes and octets.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    fleet = NetnsFleet(workdir=workdir, client_key=workdir / "client_ed25519", hosts=_plan(sshd, prefix, octet))
    procs: list[subprocess.Popen[bytes]] = []
    made: list[NetnsHost] = []
    try:
        host_key, authorized = _keys(fleet) if any(h.sshd for h in fleet.hosts) else (Path(), Path())
        for host in fleet.hosts:
            _must("ip", "netns", "add", host.namespace)
            made.append(host)
            _link(host)
            if host.sshd:
                procs.append(_start_sshd(workdir, host, host_key, authorized))
                _wait_listening(host, procs[-1])
        yield fleet
    finally:
        for proc in procs:
            _stop(proc)
        for host in made:
            _stop_namespace(host.namespace)
            _run("ip", "link", "del", host.veth_root)  # gone with the namespace; this is a no-op then


@contextlib.contextmanager
def isolated_netns(name: str) -> Iterator[list[str]]:
    """A network namespace with only loopback: yields the command prefix that runs a program in it
    (no route anywhere, so whatever the program tries to reach, nothing leaves this machine)."""
    _must("ip", "netns", "add", name)
    try:
        _must("ip", "-n", name, "link", "set", "lo", "up")
        yield ["ip", "netns", "exec", name]
    finally:
        _stop_namespace(name)
