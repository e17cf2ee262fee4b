"""``gpustack-operator dm preflight --runtime / --probe-image`` and the ``topology`` section, as a
process over fixture nodes given a kubelet (a real kubeadm node's process table and files, a k3s
agent, a bare docker machine, a host root without its /proc)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_host, host, run_cli
from tests.tools import kubelet_nodes as kn

RUNTIME_LINE = "DEBUG gpustack_operator.preflight.run: runtime: "


@pytest.fixture
def kubeadm(tmp_path: Path) -> Path:
    """The CPU-only VM fixture made a kubeadm worker on containerd, its kubelet running."""
    return kn.kubeadm_node(copy_host("cpu-only-vm", tmp_path))


def preflight(root: Path | str, *args: str) -> tuple[int, dict[str, object], str]:
    proc = run_cli(
        "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia,amd", *args
    )
    return proc.returncode, yaml.safe_load(proc.stdout) if proc.stdout else {}, proc.stderr


@pytest.mark.parametrize("value", ["podman", "Docker", "", "crio"])
def test_runtime_outside_the_three_is_a_usage_error_before_the_pass(value: str) -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host("cpu-only-vm")),
        "--host-root",
        str(host("cpu-only-vm")),
        "--runtime",
        value,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # refused before the pass: no document
    assert f"argument --runtime: {value!r} is not a container runtime preflight can drive" in proc.stderr
    assert "use one of docker, nerdctl, ctr" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("Ubuntu:24.04", "the repository path 'Ubuntu' must be lower-case"),
        ("ubuntu@sha256:1234", "a sha256 digest is exactly 64 lower-case hex digits"),
        ("registry:port/probe", "the registry 'registry:port' has a port that is not a number"),
        ("ubuntu:", "the tag after ':' is empty"),
        ("", "it is empty"),
    ],
)
def test_bad_probe_image_is_a_usage_error_naming_the_problem(image: str, problem: str) -> None:
    proc = run_cli(
        "dm",
        "preflight",
        "--detect-root",
        str(host("cpu-only-vm")),
        "--host-root",
        str(host("cpu-only-vm")),
        "--probe-image",
        image,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"argument --probe-image: {image!r} is not an OCI image reference: {problem}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_kubeadm_node_runtime_from_the_kubelet_at_vv_and_topology_in_the_document(kubeadm: Path) -> None:
    rc, doc, err = preflight(kubeadm, "-vv")
    assert rc == 0, err
    assert list(doc) == ["accelerators", "network", "topology"]
    topology = doc["topology"]
    assert isinstance(topology, dict)
    assert (topology["policy"], topology["depth"], "note" in topology) == ("single-numa-node", "declared", False)
    (line,) = [x for x in err.splitlines() if x.startswith(RUNTIME_LINE)]
    assert line == (
        f"{RUNTIME_LINE}nerdctl (from --container-runtime-endpoint on the running kubelet's command line "
        f"(/proc/{kn.KUBELET_PID}/cmdline); endpoint unix:///var/run/containerd/containerd.sock; "
        "CLI /usr/local/bin/nerdctl; socket /var/run/containerd/containerd.sock, namespace gpustack-preflight)"
    )
    assert f"kubelet: pid {kn.KUBELET_PID}: /usr/bin/kubelet --bootstrap-kubeconfig" in err
    quiet = run_cli(
        "dm", "preflight", "--detect-root", str(kubeadm), "--host-root", str(kubeadm), "--manufacturer", "nvidia"
    )
    assert "runtime:" not in quiet.stderr  # a decision line, at -vv only


def test_runtime_flag_and_probe_image_are_taken(kubeadm: Path) -> None:
    rc, doc, err = preflight(
        kubeadm, "-vv", "--runtime", "docker", "--probe-image", "registry.example.com:5000/mirror/ubuntu:24.04"
    )
    assert rc == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith(RUNTIME_LINE)]
    assert line.startswith(f"{RUNTIME_LINE}docker (from --runtime; endpoint unix:///var/run/containerd/containerd.sock")
    assert "the host carries no docker on its PATH" in line and "every container step would be emitted" in line
    assert "probeImage" not in doc and "runtime" not in doc


def test_the_probe_image_is_the_probes_and_a_probe_that_prints_nothing_is_no_pass(tmp_path: Path) -> None:
    """The kubeadm node's nerdctl is an empty stand-in: the probes are started through it, in the
    preflight namespace against the kubelet's socket, with --probe-image -- and a container that prints
    nothing is unavailable, never a silent pass."""
    root = kn.kubeadm_node(copy_host("h100-sxm-8x", tmp_path))
    proc = run_cli(
        "dm", "preflight", "--detect-root", str(root), "--host-root", str(root), "--manufacturer", "nvidia",
        "--probe-image", "nvidia/cuda:12",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    (group,) = yaml.safe_load(proc.stdout)["accelerators"]
    assert group["detection"]["state"] == "ok"
    rows = [r for r in group["checks"] if r["capability"] == "sliced-runtime-loaded"]
    assert rows and {r["state"] for r in rows} == {"unavailable"}
    assert "printed no address map" in rows[0]["reason"]
    command = rows[0]["command"]
    assert command.startswith(f"/usr/sbin/chroot {root} nerdctl --address /var/run/containerd/containerd.sock")
    assert "--namespace gpustack-preflight run --rm" in command and " nvidia/cuda:12 -c " in command
    assert "--gpus device=GPU-" in command  # nerdctl's door to the NVIDIA hook


def test_k3s_node(tmp_path: Path) -> None:
    root = kn.k3s_node(copy_host("cpu-only-vm", tmp_path))
    rc, doc, err = preflight(root, "-vv")
    assert rc == 0, err
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["policy"] == "unknown"
    assert "no kubelet is running, so there is no command line to read" in topology["note"]
    assert f"{RUNTIME_LINE}ctr (from containerRuntimeEndpoint in /{kn.K3S_TREE}/00-k3s-defaults.conf" in err


def test_docker_only_bare_machine(tmp_path: Path) -> None:
    rc, doc, err = preflight(kn.docker_bare(copy_host("cpu-only-vm", tmp_path)), "-vv")
    assert rc == 0, err
    assert f"{RUNTIME_LINE}docker (from probe; CLI /usr/bin/docker)" in err
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["note"].startswith("nothing the kubelet reads named")


def test_fixture_without_host_proc_reports_not_read_and_probes_nothing() -> None:
    rc, doc, err = preflight(host("cpu-only-vm"), "-vv")
    assert rc == 0, err
    topology = doc["topology"]
    assert isinstance(topology, dict)
    assert topology["policy"] == "unknown" and topology["note"].startswith("not read: ")
    assert f"{RUNTIME_LINE}none -- not probed: " in err


def test_topology_that_could_not_be_read_leaves_the_exit_code_alone(kubeadm: Path) -> None:
    config = kubeadm / "var/lib/kubelet/config.yaml"
    config.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: [broken\n")
    rc, doc, err = preflight(kubeadm)
    assert rc == 0, err
    topology = doc["topology"]
    assert isinstance(topology, dict) and topology["policy"] == "unknown"
    assert topology["note"].startswith(
        "a file the kubelet reads could not be read: /var/lib/kubelet/config.yaml: not valid YAML"
    )


def test_unusable_root_still_writes_the_document_with_topology(tmp_path: Path) -> None:
    """A directory that is no node's root (no /etc) is a host root not entered: the run carries on as a
    dry run and says so. (A typed path naming nothing is a usage error instead: test_cli_summary.)"""
    (tmp_path / "empty").mkdir()
    rc, doc, err = preflight(tmp_path / "empty", "--runtime", "ctr")
    assert rc == 1, err
    topology = doc["topology"]
    assert isinstance(topology, dict)
    assert topology["note"].startswith("not read: the host root was never looked in (no host root to enter: ")
    assert "so it is not a node's root" in topology["note"]


def test_help_names_the_flags() -> None:
    out = run_cli("dm", "preflight", "--help").stdout
    assert "--runtime {docker,nerdctl,ctr}" in out and "--probe-image IMAGE" in out
