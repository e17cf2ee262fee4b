"""The container engine host the preflight probe tests run against (tests/tools/container_host.py).

A real dockerd (Debian's docker.io) whose ``/`` is a host root: an overlay of this machine's ``/``
with a test's files on top, entered by the test process -- and by the product -- as
``chroot ROOT docker ...``. These tests pin what the probe tests rely on: the probe image runs,
``--rm`` leaves nothing, the preflight label filter lists a running container, ``-v`` sources and
``--device`` nodes resolve inside ROOT (never on the machine), the stand-in vendor readers print the
capped figure from the vendor's variable and a whole card's without it, a preloaded shared library
shows in ``/proc/self/maps``, the stand-in runtimes ``nvidia`` / ``ascend`` are accepted, there is
never a bridge network, and nothing (mount, daemon, container) survives ``stop()``.

What is faked, so that no test here is read as more than it proves: THE VENDOR QUOTA IS FAKED INSIDE
THE IMAGE -- ``nvidia-smi``, ``rocm-monitor``, ``ppu-monitor`` and ``enpu-monitor`` are shell scripts
that print the value of ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` / ``VROCM_DEVICE_MEMORY_LIMIT_<i>`` /
``HGGC_DEVICE_MEMORY_LIMIT_<i>`` / the ``memory-quota`` key of the mounted npu_info.config
themselves; no vendor library enforces anything. The runtimes ``nvidia`` and ``ascend`` are plain
runc. Device nodes are ``/dev/null``'s numbers under the accelerator's name. The preloaded library is
an empty constructor.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path

import pytest
from gpustack_operator.preflight.hostexec import HostExec

from tests.tools import container_host as ch
from tests.tools.container_host import (
    PROBE_IMAGE,
    RECIPE_LABEL,
    ContainerHost,
    cannot_run,
    image_recipe,
    preload_library,
)

# the pytest fixtures: the session's host, and that host reset for each test
container_host_session = ch.container_host_session
container_host = ch.container_host

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
LABEL = "gpustack.ai/preflight=true"
NVIDIA_LIB = "/var/lib/gpustack/operator/lib/nvidia"
ACCELERATOR_NODES = (
    "/dev/nvidia0",
    "/dev/dri/card0",
    "/dev/dri/renderD128",
    "/dev/kfd",
    "/dev/davinci0",
    "/dev/davinci_manager",
)


def run_probe(host: ContainerHost, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``docker run --rm --network none ... PROBE_IMAGE args`` (the options before ``--`` go to run)."""
    if "--" in args:
        i = args.index("--")
        opts, cmd = args[:i], args[i + 1 :]
    else:
        opts, cmd = (), args
    done = host.docker("run", "--rm", "--network", "none", *opts, PROBE_IMAGE, *cmd)
    if check:
        assert done.returncode == 0, f"docker run {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


# -- the image ---------------------------------------------------------------------------------------


def test_the_probe_image_runs_and_carries_its_recipe(container_host_session: ContainerHost) -> None:
    host = container_host_session
    label = host.docker(
        "image", "inspect", "--format", f'{{{{ index .Config.Labels "{RECIPE_LABEL}" }}}}', PROBE_IMAGE, check=True
    )
    assert label.stdout.strip() == image_recipe()
    tools = "sh cat grep awk mkdir sleep kill printenv nvidia-smi rocm-monitor ppu-monitor enpu-monitor"
    done = run_probe(host, "sh", "-c", f"for t in {tools}; do command -v $t || echo MISSING $t; done; kill -0 1")
    assert "MISSING" not in done.stdout, done.stdout
    assert "/usr/local/bin/nvidia-smi" in done.stdout.splitlines()
    # the Hygon probe mounts /opt/dtk from the host: the image has none of its own
    assert run_probe(host, "test", "-e", "/opt/dtk/bin/BandwidthTest", check=False).returncode == 1


def test_the_hosts_docker_is_debians(container_host_session: ContainerHost) -> None:
    host = container_host_session
    where = host.run("sh", "-c", "command -v docker", check=True).stdout.strip()
    assert where == "/usr/bin/docker"
    version = host.docker("version", "--format", "{{.Client.Version}} {{.Server.Version}}", check=True).stdout
    client, server = version.split()
    assert "dfsg" in client and "dfsg" in server, version  # Debian's docker.io, client and daemon


def test_the_products_host_exec_drives_it(container_host_session: ContainerHost) -> None:
    """The product's own chroot runner finds and runs ROOT's docker (PATH lookup through the root)."""
    runner = HostExec(root=str(container_host_session.root), timeout=120)
    assert runner.which("docker") == "/usr/bin/docker"
    out = runner.run("docker", "run", "--rm", "--network", "none", PROBE_IMAGE, "echo", "probe-ran")
    assert out == "probe-ran\n"


# -- containers come and go ----------------------------------------------------------------------------


def test_rm_leaves_no_container(container_host: ContainerHost) -> None:
    host = container_host
    assert host.containers() == []
    assert run_probe(host, "echo", "hello").stdout == "hello\n"
    assert host.containers() == []
    assert host.docker("ps", "-a", "--format", "{{.ID}}", check=True).stdout == ""


def test_the_preflight_label_filter_lists_a_running_sleep(container_host: ContainerHost) -> None:
    host = container_host
    labelled = host.docker(
        "run", "-d", "--network", "none", "--label", LABEL, PROBE_IMAGE, "sleep", "300", check=True
    ).stdout.strip()
    other = host.docker("run", "-d", "--network", "none", PROBE_IMAGE, "sleep", "300", check=True).stdout.strip()
    listed = host.docker("ps", "--no-trunc", "--filter", f"label={LABEL}", "--format", "{{.ID}} {{.State}}", check=True)
    assert listed.stdout.split("\n")[:-1] == [f"{labelled} running"]
    assert host.containers(f"label={LABEL}") == [labelled]
    assert set(host.containers()) == {labelled, other}
    host.docker("rm", "-f", labelled, other, check=True)
    assert host.containers() == []


# -- paths resolve inside the host root ----------------------------------------------------------------


def test_the_briefs_probe_command_works_as_written(container_host: ContainerHost) -> None:
    """Exactly what the preflight runs: ``chroot ROOT docker run ...`` with the test's own PATH."""
    host = container_host
    host.mknod("/dev/nvidia0")
    host.write(f"{NVIDIA_LIB}/marker", "x\n")
    argv = ["chroot", str(host.root), "docker", "run", "--rm"]
    argv += ["-v", f"{NVIDIA_LIB}:/usr/local/vgpu:ro", "--device", "/dev/nvidia0", PROBE_IMAGE]
    done = subprocess.run([*argv, "cat", "/proc/self/maps"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "/usr/bin/cat" in done.stdout


def test_volumes_resolve_inside_the_host_root(container_host: ContainerHost) -> None:
    host = container_host
    marker = host.write(f"{NVIDIA_LIB}/marker", "only in the host root\n")
    assert marker == host.root / NVIDIA_LIB.lstrip("/") / "marker"
    assert not Path(NVIDIA_LIB, "marker").exists(), "the machine itself must not have it"
    done = run_probe(host, "-v", f"{NVIDIA_LIB}:/usr/local/vgpu:ro", "--", "cat", "/usr/local/vgpu/marker")
    assert done.stdout == "only in the host root\n"
    # read-only as asked
    assert run_probe(host, "-v", f"{NVIDIA_LIB}:/v:ro", "--", "touch", "/v/x", check=False).returncode != 0
    # a missing source is created by the daemon -- in its root, i.e. inside ROOT, not on the machine
    made = "/var/lib/gpustack/made-by-dockerd"
    run_probe(host, "-v", f"{made}:/m", "--", "true")
    assert host.path(made).is_dir()
    assert not Path(made).exists()


def test_accelerator_nodes_pass_with_device(container_host: ContainerHost) -> None:
    host = container_host
    for node in ACCELERATOR_NODES:
        made = host.mknod(node)
        assert made.is_char_device()
    opts = [arg for node in ACCELERATOR_NODES for arg in ("--device", node)]
    script = 'for d in "$@"; do stat -c "%n %F %t:%T" "$d"; cat "$d" || exit 1; done'
    done = run_probe(host, *opts, "--", "sh", "-c", script, "sh", *ACCELERATOR_NODES)
    assert done.stdout.splitlines() == [f"{node} character special file 1:3" for node in ACCELERATOR_NODES]
    # without --device the container has none of them
    assert run_probe(host, "test", "-e", "/dev/nvidia0", check=False).returncode == 1


def test_a_device_only_the_machine_has_is_refused(container_host: ContainerHost) -> None:
    """dockerd looks ``--device`` up in ROOT/dev (a fresh tmpfs), not in the machine's /dev."""
    host = container_host
    candidates = sorted(
        f"/dev/{n}"
        for n in os.listdir("/dev")
        if Path("/dev", n).is_char_device() and not host.path(f"/dev/{n}").exists()
    )
    assert candidates, "the machine's /dev has a character device ROOT/dev lacks"
    done = run_probe(host, "--device", candidates[0], "--", "true", check=False)
    assert done.returncode != 0
    assert candidates[0] in done.stderr


# -- the stand-in vendor readers (the vendor quota is faked inside the image) --------------------------


@pytest.mark.parametrize(
    ("reader", "variable", "whole"),
    [
        ("nvidia-smi", "CUDA_DEVICE_MEMORY_LIMIT", "81559"),
        ("rocm-monitor", "VROCM_DEVICE_MEMORY_LIMIT", "196592"),
        ("ppu-monitor", "HGGC_DEVICE_MEMORY_LIMIT", "98304"),
    ],
)
def test_readers_print_the_capped_figure_or_a_whole_cards(
    container_host_session: ContainerHost, reader: str, variable: str, whole: str
) -> None:
    host = container_host_session
    args = ("--query-gpu=memory.total", "--format=csv,noheader,nounits")
    # no cap in force: one whole card's figure
    assert run_probe(host, reader, *args).stdout == f"{whole}\n"
    # one figure per capped device, in device order, nothing else on stdout
    capped = run_probe(host, "-e", f"{variable}_0=40960", "-e", f"{variable}_1=20480", "--", reader, *args)
    assert capped.stdout == "40960\n20480\n"
    assert capped.stderr == ""
    # the numbering stops at the first gap, as the vendor libraries read it
    gap = run_probe(host, "-e", f"{variable}_0=1024", "-e", f"{variable}_2=2048", "--", reader, *args)
    assert gap.stdout == "1024\n"


def test_nvidia_smi_strips_the_m_suffix(container_host_session: ContainerHost) -> None:
    host = container_host_session
    env = ("-e", "CUDA_DEVICE_MEMORY_LIMIT_0=40960m", "-e", "CUDA_DEVICE_MEMORY_LIMIT_1=8192M")
    assert run_probe(host, *env, "--", "nvidia-smi").stdout == "40960\n8192\n"
    # rocm-monitor takes bare MiB and prints what it is given
    assert run_probe(host, "-e", "VROCM_DEVICE_MEMORY_LIMIT_0=512", "--", "rocm-monitor").stdout == "512\n"


def test_enpu_monitor_reads_the_mounted_quota(container_host: ContainerHost) -> None:
    host = container_host
    config = "/var/lib/gpustack/operator/lib/ascend/npu_info.config"
    target = "/etc/enpu/vcann-rt/npu_info.config"
    assert run_probe(host, "enpu-monitor").stdout == "65536\n"  # no file: a whole NPU
    host.write(config, "device-id=0\nmemory-quota=21845\naicore-quota=25\n")
    assert run_probe(host, "-v", f"{config}:{target}:ro", "--", "enpu-monitor").stdout == "21845\n"
    host.write(config, "device-id=0\n")
    keyless = run_probe(host, "-v", f"{config}:{target}:ro", "--", "enpu-monitor", check=False)
    assert (keyless.returncode, keyless.stdout) == (1, "")
    assert "memory-quota" in keyless.stderr


# -- the preload library -------------------------------------------------------------------------------


def test_a_preloaded_library_shows_in_proc_self_maps(container_host: ContainerHost) -> None:
    host = container_host
    assert preload_library().read_bytes()[:4] == b"\x7fELF"
    host.install_library(f"{NVIDIA_LIB}/libvgpu.so")
    host.write(f"{NVIDIA_LIB}/ld.so.preload", "/usr/local/vgpu/libvgpu.so\n")
    vgpu = ("-v", f"{NVIDIA_LIB}:/usr/local/vgpu:ro")
    preload = ("-v", f"{NVIDIA_LIB}/ld.so.preload:/etc/ld.so.preload:ro")
    maps = run_probe(host, *vgpu, *preload, "--", "cat", "/proc/self/maps").stdout
    mapped = {line.split()[-1] for line in maps.splitlines() if len(line.split()) == 6}
    assert "/usr/local/vgpu/libvgpu.so" in mapped, maps
    # without the preload list the loader maps nothing of it
    plain = run_probe(host, *vgpu, "--", "cat", "/proc/self/maps").stdout
    assert "libvgpu.so" not in plain


# -- runtimes and networks -----------------------------------------------------------------------------


def test_the_standin_runtimes_are_accepted(container_host_session: ContainerHost) -> None:
    host = container_host_session
    runtimes = host.docker("info", "--format", "{{range $k, $v := .Runtimes}}{{$k}}={{$v.Path}} {{end}}", check=True)
    offered = dict(item.split("=", 1) for item in runtimes.stdout.split())
    assert offered["nvidia"] == offered["ascend"] == "/usr/sbin/runc"  # stand-ins: plain runc
    for runtime in ("nvidia", "ascend"):
        assert run_probe(host, "--runtime", runtime, "--", "echo", runtime).stdout == f"{runtime}\n"
    bogus = run_probe(host, "--runtime", "no-such-runtime", "--", "true", check=False)
    assert bogus.returncode != 0
    assert "runtime" in bogus.stderr


def test_there_is_never_a_bridge(container_host_session: ContainerHost) -> None:
    host = container_host_session
    networks = host.docker("network", "ls", "--format", "{{.Name}} {{.Driver}}", check=True).stdout.splitlines()
    assert sorted(networks) == ["host host", "none null"]
    interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    assert run_probe(host, "sh", "-c", interfaces).stdout == "lo\n"  # --network none
    default = host.docker("run", "--rm", PROBE_IMAGE, "sh", "-c", interfaces, check=True)
    assert default.stdout == "lo\n"  # no --network: still no interface but lo
    machine = sorted(line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:])
    on_host = host.docker("run", "--rm", "--network", "host", PROBE_IMAGE, "sh", "-c", interfaces, check=True)
    assert sorted(on_host.stdout.split()) == machine
    # with bridge: none, even an explicit --network bridge gets no bridge, and none is ever made
    asked = host.docker("run", "--rm", "--network", "bridge", PROBE_IMAGE, "sh", "-c", interfaces, check=True)
    assert asked.stdout == "lo\n"
    assert not Path("/sys/class/net/docker0").exists()


# -- the tree: fixtures, reset, stop -------------------------------------------------------------------


@pytest.mark.parametrize("container_host", [FIXTURES / "h100-sxm-8x"], indirect=True)
def test_a_fixture_tree_is_laid_onto_the_host(container_host: ContainerHost) -> None:
    host = container_host
    fixture = FIXTURES / "h100-sxm-8x"
    # the host's merged-/usr links stay; the fixture's bin/ and lib/ content went through them
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        assert os.readlink(host.root / link) == target
    assert (host.root / "usr/bin/nvidia-smi").read_bytes() == (fixture / "usr/bin/nvidia-smi").read_bytes()
    # the test (and the product) read the fixture's sysfs and procfs at ROOT/sys and ROOT/proc
    assert sorted(os.listdir(host.root / "sys/bus/pci/devices")) == sorted(os.listdir(fixture / "sys/bus/pci/devices"))
    assert (host.root / "proc/cpuinfo").read_text() == (fixture / "proc/cpuinfo").read_text()
    assert os.readlink(host.root / "etc/os-release") == os.readlink(fixture / "etc/os-release")
    # ... and the daemon still works with the fixture's files in place
    assert run_probe(host, "echo", "ok").stdout == "ok\n"


def test_reset_gives_a_fresh_tree_and_daemon(container_host_session: ContainerHost) -> None:
    host = container_host_session
    host.reset()
    host.write("/etc/gpustack-test/left-over", "x")
    host.mknod("/dev/nvidia7")
    running = host.docker("run", "-d", "--network", "none", PROBE_IMAGE, "sleep", "300", check=True).stdout.strip()
    before = host.dockerd_pid
    host.reset()
    assert host.dockerd_pid is not None and host.dockerd_pid != before
    assert before is not None and not Path(f"/proc/{before}").exists()
    assert not host.path("/etc/gpustack-test").exists()
    assert not host.path("/dev/nvidia7").exists()
    assert host.containers() == []
    assert running not in host.docker("ps", "-aq", "--no-trunc", check=True).stdout
    assert run_probe(host, "true").returncode == 0  # the image stayed (the data-root is the slot's)


def test_stop_leaves_nothing_behind() -> None:
    reason = cannot_run()
    if reason:
        pytest.skip(reason)
    host = ContainerHost.start()
    try:
        root, pid = host.root, host.dockerd_pid
        ns = os.readlink(f"/proc/{pid}/ns/mnt")
        assert ns != os.readlink("/proc/self/ns/mnt"), "dockerd runs in its own mount namespace"
        host.mknod("/dev/nvidia0")
        host.docker(
            "run", "-d", "--network", "none", "--label", LABEL, PROBE_IMAGE, "sleep", "300", check=True
        )  # a container shim is running when stop() comes
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        assert str(root) in mounts
        # the daemon's own mounts (overlay2 layers, netns/default, proc) are not on the machine
        assert not [m for m in mounts if m.startswith(f"{root}/var/lib/docker") or ("/netns/" in m and str(root) in m)]
    finally:
        host.stop()
    mountinfo = Path("/proc/self/mountinfo").read_text()
    assert str(root) not in mountinfo
    assert not Path(f"/proc/{pid}").exists(), f"dockerd {pid} is still running"
    for entry in filter(str.isdigit, os.listdir("/proc")):
        # OSError: gone meanwhile, or a process this sandbox does not let us inspect (pid 1)
        with contextlib.suppress(OSError):
            assert os.readlink(f"/proc/{entry}/ns/mnt") != ns, f"process {entry} is left in dockerd's namespace"
    assert host.leftovers() == []
    # the slot is free again
    fd = os.open(host.slot / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    host.stop()  # idempotent
