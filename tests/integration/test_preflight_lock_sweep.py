"""The preflight lock and the stale-container sweep, for real (supplement §2.5, §2.8).

The lock: two real processes on one host-root tree -- a child holds it, the parent's acquire is
refused naming the lock and the child's pid; once the child is gone (killed, no cleanup run) the
parent takes it, and the file is still there. A read-only host root (a real read-only bind mount in a
private mount namespace) is the distinct error.

The sweep: the node's container CLIs are ``#!/bin/sh`` stand-ins inside a tmp host-root tree, entered
with the real chroot runner (:class:`HostExec`), as the crosscheck tests do. Each records its argv and
keeps its "daemon"'s containers in a state file (``<id> <state> <labels>``), answering in the real CLI's
output format: ``ps -q`` / ``containers ls -q`` print ids one a line, filtered by label the way the
daemon filters, removals print the id or the daemon's own error on stderr with exit status 1; a
containerd CLI must be given the namespace and a socket the "daemon" serves. What is faked is the
daemon behind each CLI (no container engine runs here); the argv, the chroot, the timeouts, the
parsing and the classification are the real code's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.hostexec import HostExec
from gpustack_operator.preflight.kubelet import read_kubelet
from gpustack_operator.preflight.lock import LOCK_PATH, LockHeldError, acquire, parse_holder
from gpustack_operator.preflight.runtime import RuntimeName, RuntimeResolution, resolve_runtime
from gpustack_operator.preflight.sweep import Step, failure_reason, other_runtimes, sweep

from tests.conftest import REPO, make_enterable
from tests.integration.test_preflight_tiers import node, stand_in_state
from tests.tools import kubelet_nodes as kn

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mount need root")

CLI = REPO / ".venv/bin/gpustack-operator"
CALLS = "var/log/fake-cli.calls"
LABELLED = "gpustack.ai/preflight=true"
# ids as the CLIs print them with -q (docker and nerdctl truncate to 12 hex digits)
LEFT1, LEFT2, WORKLOAD = "3f4e2a1b9c8d", "0a1b2c3d4e5f", "9e8d7c6b5a49"

# Rewrites the state file with container $1 set to state $2 (empty: removed). Shell builtins only:
# the tree carries nothing but dash.
UPDATE = """
update() {
  keep=
  while read -r cid st labels; do
    if [ "$cid" = "$1" ]; then
      [ -n "$2" ] && keep="$keep$cid $2 $labels
"
    else
      keep="$keep$cid $st $labels
"
    fi
  done < "$S/containers"
  printf '%s' "$keep" > "$S/containers"
}
state_of() {
  found=
  [ -e "$S/containers" ] || return 0
  while read -r cid st labels; do [ "$cid" = "$1" ] && found=$st; done < "$S/containers"
}
labelled() {
  [ -e "$S/containers" ] || return 0
  while read -r cid st labels; do
    case ",$labels," in *",gpustack.ai/preflight=true,"*) printf '%s\\n' "$cid";; esac
  done < "$S/containers"
}
unexpected() { echo "fake $CLI: unexpected arguments: $*" >&2; exit 2; }
"""

PRELUDE = """#!/bin/sh
CLI={cli}
{{ printf '%s' "$CLI"; for a in "$@"; do printf ' %s' "$a"; done; printf '\\n'; }} >> /var/log/fake-cli.calls
"""

DOCKER = (
    PRELUDE.format(cli="docker")
    + UPDATE
    + r"""
S=/var/lib/fake-docker
if [ -e "$S/denied" ]; then
  echo 'permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.47/containers/json?all=1": dial unix /var/run/docker.sock: connect: permission denied' >&2
  exit 1
fi
case "$1" in
ps)
  [ "$*" = "ps -aq --filter label=gpustack.ai/preflight=true" ] || unexpected "$@"
  [ -e "$S/hang" ] && read -r _ < "$S/hang"
  if [ -e "$S/extra" ]; then while IFS= read -r l; do printf '%s\n' "$l"; done < "$S/extra"; fi
  labelled
  exit 0;;
rm)
  [ "$2" = "-f" ] && [ $# -eq 3 ] || unexpected "$@"
  state_of "$3"
  [ -n "$found" ] || { echo "Error response from daemon: No such container: $3" >&2; exit 1; }
  if [ "$found" = stuck ]; then
    echo "Error response from daemon: cannot remove container \"/$3\": could not kill: permission denied" >&2
    exit 1
  fi
  update "$3" ""
  printf '%s\n' "$3"
  exit 0;;
esac
unexpected "$@"
"""
)

# Both containerd CLIs: the global flags, then a daemon that must be served at the address given.
CONTAINERD = r"""
addr=/run/containerd/containerd.sock
ns=default
while :; do
  case "$1" in
    --address|-a) addr=$2; shift 2;;
    --namespace|-n) ns=$2; shift 2;;
    *) break;;
  esac
done
served=
if [ -e /var/lib/fake-containerd/listening ]; then
  while IFS= read -r s; do [ "$s" = "$addr" ] && served=1; done < /var/lib/fake-containerd/listening
fi
S=/var/lib/fake-containerd/$ns
"""

NERDCTL = (
    PRELUDE.format(cli="nerdctl")
    + UPDATE
    + CONTAINERD
    + r"""
if [ ! -e "$addr" ]; then
  echo "time=\"2025-06-01T10:00:00Z\" level=fatal msg=\"cannot access containerd socket \\\"$addr\\\": no such file or directory\"" >&2
  exit 1
fi
if [ -z "$served" ]; then
  echo "time=\"2025-06-01T10:00:00Z\" level=fatal msg=\"failed to dial \\\"$addr\\\": context deadline exceeded: connection error: desc = \\\"transport: error while dialing: dial unix://$addr: connect: connection refused\\\"\"" >&2
  exit 1
fi
case "$1" in
ps)
  [ "$*" = "ps -aq --filter label=gpustack.ai/preflight=true" ] || unexpected "$@"
  labelled
  exit 0;;
rm)
  [ "$2" = "-f" ] && [ $# -eq 3 ] || unexpected "$@"
  state_of "$3"
  [ -n "$found" ] || { echo "time=\"2025-06-01T10:00:00Z\" level=fatal msg=\"1 errors:\\nno such container: $3\"" >&2; exit 1; }
  if [ "$found" = stuck ]; then
    echo "time=\"2025-06-01T10:00:00Z\" level=fatal msg=\"1 errors:\\nfailed to remove container \\\"$3\\\": permission denied\"" >&2
    exit 1
  fi
  update "$3" ""
  printf '%s\n' "$3"
  exit 0;;
esac
unexpected "$@"
"""
)

CTR = (
    PRELUDE.format(cli="ctr")
    + UPDATE
    + CONTAINERD
    + r"""
if [ -z "$served" ]; then
  echo "ctr: failed to dial \"$addr\": context deadline exceeded: connection error: desc = \"transport: error while dialing: dial unix://$addr: connect: connection refused\"" >&2
  exit 1
fi
case "$1 $2" in
"containers ls")
  [ $# -eq 4 ] && [ "$3" = "-q" ] && [ "$4" = 'labels."gpustack.ai/preflight"==true' ] || unexpected "$@"
  labelled
  exit 0;;
"tasks rm")
  [ $# -eq 4 ] && [ "$3" = "-f" ] || unexpected "$@"
  state_of "$4"
  case "$found" in
    running) update "$4" stopped; exit 0;;
    stuck) echo "ctr: failed to kill task $4: permission denied" >&2; exit 1;;
    *) echo "ctr: no running task found: task $4 not found" >&2; exit 1;;
  esac;;
"containers rm")
  [ $# -eq 3 ] || unexpected "$@"
  state_of "$3"
  case "$found" in
    running|stuck) echo "ctr: cannot delete a non stopped container: {running 0 0001-01-01 00:00:00 +0000 UTC}" >&2; exit 1;;
    "") echo "ctr: container \"$3\" in namespace \"$ns\": not found" >&2; exit 1;;
    *) update "$3" ""; exit 0;;
  esac;;
esac
unexpected "$@"
"""
)

SCRIPTS = {"usr/bin/docker": DOCKER, "usr/local/bin/nerdctl": NERDCTL, "usr/bin/ctr": CTR}


def enterable(root: Path, clis: tuple[str, ...] = ("docker", "nerdctl", "ctr")) -> Path:
    """A node (etc, /run, /var/run -> /run, pid 1) with a shell and the chosen CLI stand-ins."""
    kn.base(root)
    make_enterable(root)
    (root / "var/log").mkdir(parents=True, exist_ok=True)
    for rel, text in SCRIPTS.items():
        if rel.rsplit("/", 1)[-1] in clis:
            kn.write(root, rel, text, mode=0o755)
    return root


def docker_daemon(root: Path, *containers: str, **flags: str) -> None:
    kn.write(root, "var/lib/fake-docker/containers", "".join(f"{c}\n" for c in containers))
    for name, text in flags.items():
        kn.write(root, f"var/lib/fake-docker/{name}", text)


def containerd_daemon(root: Path, namespace: str, *containers: str) -> None:
    kn.write(root, f"var/lib/fake-containerd/{namespace}/containers", "".join(f"{c}\n" for c in containers))


def listen(root: Path, *sockets: str) -> None:
    """The containerd "daemon" serves these addresses; each socket is a real unix socket file."""
    kn.write(root, "var/lib/fake-containerd/listening", "".join(f"{s}\n" for s in sockets))


def socket_file(root: Path, rel: str = "run/containerd/containerd.sock") -> None:
    """A real unix socket file with nothing behind it (bound, then closed)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def calls(root: Path) -> list[str]:
    path = root / CALLS
    return path.read_text().splitlines() if path.exists() else []


def state(root: Path, daemon: str = "fake-docker/containers") -> list[str]:
    return (root / "var/lib" / daemon).read_text().splitlines()


def resolution(root: Path, runtime: RuntimeName | None = None) -> RuntimeResolution:
    host = HostRoot(root)
    return resolve_runtime(host, read_kubelet(host), runtime)


# -- the sweep ---------------------------------------------------------------------------------------


def test_docker_leftovers_are_removed_and_nothing_else(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node", ("docker",))
    docker_daemon(
        root, f"{LEFT1} exited {LABELLED}", f"{WORKLOAD} running app=web", f"{LEFT2} running app=x,{LABELLED}"
    )
    driven = resolution(root)
    assert driven.runtime is RuntimeName.DOCKER and driven.binary == "/usr/bin/docker"
    result = sweep(HostExec(str(root)), driven, other_runtimes(HostRoot(root), driven))
    assert result.ok and failure_reason(result) is None
    assert [r.container for r in result.removed] == [LEFT1, LEFT2]
    assert state(root) == [f"{WORKLOAD} running app=web"]
    assert calls(root) == [
        "docker ps -aq --filter label=gpustack.ai/preflight=true",
        f"docker rm -f {LEFT1}",
        f"docker rm -f {LEFT2}",
    ]


def test_denied_listing_on_the_driven_docker_is_the_sweep_failure(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node", ("docker",))
    docker_daemon(root, f"{LEFT1} exited {LABELLED}", denied="")
    result = sweep(HostExec(str(root)), resolution(root))
    (failure,) = result.failures
    assert failure.step is Step.LIST and failure.target.driven
    reason = failure_reason(result)
    assert reason is not None
    assert (
        "unsafe to trust: docker: exit status 1: permission denied while trying to connect to the Docker daemon"
        in reason
    )
    assert f"/usr/sbin/chroot {root} /usr/bin/docker ps -aq --filter label=gpustack.ai/preflight=true" in reason
    assert (
        "clear the leftovers by hand (docker ps -aq --filter label=gpustack.ai/preflight=true, then docker rm -f"
        in reason
    )
    assert state(root) == [f"{LEFT1} exited {LABELLED}"]  # nothing removed


def test_kubeadm_node_nerdctl_at_the_kubelets_socket_in_the_preflight_namespace(tmp_path: Path) -> None:
    root = tmp_path / "node"
    kn.kubeadm_node(root)
    enterable(root, ("nerdctl", "ctr"))
    socket_file(root)
    listen(root, "/var/run/containerd/containerd.sock")
    containerd_daemon(root, "gpustack-preflight", f"{LEFT1} running {LABELLED}")
    containerd_daemon(root, "default", f"{LEFT2} running {LABELLED}")  # not preflight's namespace
    driven = resolution(root)
    assert (driven.runtime, driven.socket) == (RuntimeName.NERDCTL, "/var/run/containerd/containerd.sock")
    others = other_runtimes(HostRoot(root), driven)
    assert others == []  # /run/containerd/containerd.sock is the same socket, asked once
    result = sweep(HostExec(str(root)), driven, others)
    assert result.ok and [r.container for r in result.removed] == [LEFT1]
    base = "nerdctl --address /var/run/containerd/containerd.sock --namespace gpustack-preflight"
    assert calls(root) == [f"{base} ps -aq --filter label=gpustack.ai/preflight=true", f"{base} rm -f {LEFT1}"]
    assert state(root, "fake-containerd/gpustack-preflight/containers") == []
    assert state(root, "fake-containerd/default/containers") == [f"{LEFT2} running {LABELLED}"]


def test_nerdctl_beside_a_containerd_not_listening_stays_green(tmp_path: Path) -> None:
    """The spec's last row: the CLI is there, its socket file is there, nothing is behind it."""
    root = enterable(tmp_path / "node")
    socket_file(root)
    docker_daemon(root, f"{LEFT1} exited {LABELLED}")
    driven = resolution(root)
    assert driven.runtime is RuntimeName.DOCKER
    others = other_runtimes(HostRoot(root), driven)
    assert [(o.runtime, o.socket) for o in others] == [(RuntimeName.NERDCTL, "/run/containerd/containerd.sock")]
    result = sweep(HostExec(str(root)), driven, others)
    assert result.ok and failure_reason(result) is None
    assert [r.container for r in result.removed] == [LEFT1]
    (ignored,) = result.ignored
    assert ignored.step is Step.LIST and ignored.error.startswith("nerdctl: exit status 1: ")
    assert "connection refused" in ignored.error


def test_removal_failure_on_another_runtime_fails_the_sweep(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node")
    socket_file(root)
    listen(root, "/run/containerd/containerd.sock")
    docker_daemon(root)
    containerd_daemon(root, "gpustack-preflight", f"{LEFT2} stuck {LABELLED}")
    driven = resolution(root)
    result = sweep(HostExec(str(root)), driven, other_runtimes(HostRoot(root), driven))
    (failure,) = result.failures
    assert failure.step is Step.REMOVE and failure.container == LEFT2 and not failure.target.driven
    reason = failure_reason(result)
    assert reason is not None
    assert f'failed to remove container \\"{LEFT2}\\": permission denied' in reason
    assert (
        "nerdctl --address /run/containerd/containerd.sock --namespace gpustack-preflight ps -aq --filter "
        "label=gpustack.ai/preflight=true, then nerdctl --address /run/containerd/containerd.sock --namespace "
        "gpustack-preflight rm -f <id> for each id it prints"
    ) in reason


def test_ctr_kills_a_running_task_then_removes_its_container(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node", ("ctr",))
    socket_file(root)
    listen(root, "/run/containerd/containerd.sock")
    containerd_daemon(
        root,
        "gpustack-preflight",
        f"gpustack-preflight-GPU-0 running {LABELLED}",
        f"gpustack-preflight-GPU-1 stopped {LABELLED}",
        "unrelated stopped app=db",
    )
    driven = resolution(root)
    assert (driven.runtime, driven.socket) == (RuntimeName.CTR, "/run/containerd/containerd.sock")
    result = sweep(HostExec(str(root)), driven)
    assert result.ok and [r.container for r in result.removed] == [
        "gpustack-preflight-GPU-0",
        "gpustack-preflight-GPU-1",
    ]
    assert state(root, "fake-containerd/gpustack-preflight/containers") == ["unrelated stopped app=db"]
    base = "ctr --address /run/containerd/containerd.sock --namespace gpustack-preflight"
    assert calls(root)[0] == f'{base} containers ls -q labels."gpustack.ai/preflight"==true'
    assert calls(root)[1:3] == [
        f"{base} tasks rm -f gpustack-preflight-GPU-0",
        f"{base} containers rm gpustack-preflight-GPU-0",
    ]


def test_output_that_is_not_ids_is_reported_and_never_executed(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node", ("docker",))
    docker_daemon(
        root,
        f"{LEFT1} exited {LABELLED}",
        extra="CONTAINER ID   IMAGE     COMMAND\n--all\n$(touch /pwned)\n",
    )
    result = sweep(HostExec(str(root)), resolution(root))
    assert [r.container for r in result.removed] == [LEFT1]
    (failure,) = result.failures
    assert failure.step is Step.LIST and "printed 3 line(s) that are not container ids" in failure.error
    assert [c for c in calls(root) if " rm " in c] == [f"docker rm -f {LEFT1}"]
    assert not (root / "pwned").exists()


def test_a_cli_that_hangs_is_cut_off_by_the_timeout(tmp_path: Path) -> None:
    root = enterable(tmp_path / "node", ("docker",))
    docker_daemon(root)
    os.mkfifo(root / "var/lib/fake-docker/hang")  # opening it for reading blocks: nobody writes
    result = sweep(HostExec(str(root)), resolution(root), timeout=1.0)
    (failure,) = result.failures
    assert failure.error == "docker did not answer within 1s"


# -- the lock ----------------------------------------------------------------------------------------

HOLD = """
import sys
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.lock import LockError, acquire
try:
    held = acquire(HostRoot(sys.argv[1]))
except LockError as exc:
    print("refused", exc, flush=True)
else:
    print("held", held.holder.pid, flush=True)
sys.stdin.read()  # hold it until the parent closes stdin or kills this process
"""


def hold(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"child {proc.pid} exited without a word: rc={proc.wait(timeout=10)}"
    return line.strip()


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def test_a_second_process_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)  # no /var/lib/gpustack: created by the holder
    child = hold(root)
    try:
        assert first_line(child) == f"held {child.pid}"
        with pytest.raises(LockHeldError) as info:
            acquire(HostRoot(root))
        text = str(info.value)
        assert f"another preflight run holds this node's lock {LOCK_PATH} (pid {child.pid}, started " in text
        assert f"ps -o pid,lstart,args -p {child.pid}" in text
    finally:
        stop(child)  # SIGKILL: no release, no cleanup -- the kernel drops the lock
    lock = root / LOCK_PATH.lstrip("/")
    assert lock.is_file()
    with acquire(HostRoot(root)) as held:
        assert held.holder.pid == os.getpid()
        assert parse_holder(lock.read_text()).pid == os.getpid()
    assert lock.is_file()  # never removed


def test_the_lock_is_not_held_by_what_the_holder_started(tmp_path: Path) -> None:
    """A container CLI the run starts (here a grandchild that keeps every fd it may) does not carry
    the lock past the run: the fd is close-on-exec."""
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    sleeper = shutil.which("sleep")
    assert sleeper is not None
    script = HOLD.replace(
        "sys.stdin.read()",
        f"import subprocess; p = subprocess.Popen([{sleeper!r}, '60'], close_fds=False); print(p.pid, flush=True); "
        "sys.stdin.read()",
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    grandchild = None
    try:
        assert first_line(child).startswith("held")
        grandchild = int(first_line(child))
        stop(child)
        with acquire(HostRoot(root)) as held:
            assert held.held
        assert os.path.exists(f"/proc/{grandchild}")  # still running, and not holding the lock
    finally:
        stop(child)
        if grandchild is not None:
            os.kill(grandchild, 9)


def test_concurrent_runs_exactly_one_holds(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    children = [hold(root) for _ in range(3)]
    try:
        words = [first_line(c) for c in children]
        held = [c for c, w in zip(children, words, strict=True) if w.startswith("held")]
        assert len(held) == 1, words
        for w in words:
            if w.startswith("refused"):
                assert f"holds this node's lock {LOCK_PATH} (" in w
                assert f"pid {held[0].pid}," in w or "it recorded no pid" in w
    finally:
        for c in children:
            stop(c)


@pytest.mark.parametrize("existing", [False, True], ids=["fresh-root", "lock-already-there"])
def test_read_only_host_root_is_the_distinct_error(tmp_path: Path, existing: bool) -> None:
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    if existing:
        acquire(HostRoot(root)).release()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) for a private mount namespace")
    script = """
import sys
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.lock import LockHeldError, LockUnusableError, acquire
try:
    acquire(HostRoot(sys.argv[1]))
except LockUnusableError as exc:
    print("unusable", exc.errno, exc)
except LockHeldError as exc:
    print("held-error", exc)
else:
    print("acquired")
"""
    shell = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && exec "$2" -c "$3" "$1"'
    proc = subprocess.run(
        [unshare, "--mount", "sh", "-c", shell, "_", str(root), sys.executable, script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 and ("mount" in proc.stderr or "unshare" in proc.stderr) and not proc.stdout:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    assert proc.stdout.startswith("unusable 30 "), proc.stdout + proc.stderr  # EROFS
    assert (
        f"the preflight lock {LOCK_PATH} under the host root {root} could not be created: EROFS (Read-only file system)"
    ) in proc.stdout
    assert "mount the node's / writable at the host root" in proc.stdout
    assert (root / "var").exists() is existing  # the private mount was read-only: nothing was written through it


# -- the lock around a whole run ---------------------------------------------------------------------


def test_a_run_that_only_toggles_a_mode_refuses_while_another_run_holds_the_lock(tmp_path: Path) -> None:
    """§2.5, §2.8: the lock is taken by every run that will write -- here a Cambricon node, whose run
    starts no probe (no container runtime, and Cambricon's tier starts none) but stages and asks sMLU
    on where it is off. A real second process holds it: the run refuses before it toggles or stages
    anything, naming the holder; --dry-run, which writes nothing, takes no lock and is not refused;
    once the holder is gone (killed, no cleanup), the run goes ahead and the lock file stays."""
    root = node("mlu370-x8", tmp_path)
    before = stand_in_state(root)
    child = hold(root)
    try:
        assert first_line(child) == f"held {child.pid}"
        rc, groups, err = run_cli(root, "--manufacturer=cambricon")
        assert rc == 1, err
        (group,) = groups
        reason = group["detection"]["reason"]
        assert group["detection"]["state"] == "unavailable" and "checks" not in group
        assert f"holds this node's lock {LOCK_PATH} (pid {child.pid}, started " in reason
        assert stand_in_state(root) == before  # no sMLU mode asked on, not even put straight back
        assert not (root / "var/lib/gpustack/operator/lib").exists()  # nothing staged
        rc, (group,), err = run_cli(root, "--manufacturer=cambricon", "--dry-run")
        assert rc == 0 and group["detection"]["state"] == "ok" and group["checks"], err
        assert stand_in_state(root) == before
    finally:
        stop(child)
    rc, (group,), err = run_cli(root, "--manufacturer=cambricon")
    assert rc == 0 and group["detection"]["state"] == "ok", err
    assert stand_in_state(root) != before  # this run did ask sMLU on (and put it back): a write to guard
    assert (root / LOCK_PATH.lstrip("/")).is_file()
    with acquire(HostRoot(root)):  # released at the end of the run
        pass


def run_cli(root: Path, *flags: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        [str(CLI), "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), *flags],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, yaml.safe_load(proc.stdout)["accelerators"], proc.stderr
