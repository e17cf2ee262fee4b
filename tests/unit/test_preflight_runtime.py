"""The kubelet's configuration as the node states it, and the container runtime resolved from it
(supplement §2.4 "Runtime resolution" 1–5), over node shapes written into tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.kubelet import (
    Outcome,
    ParseError,
    Setting,
    clean_value,
    find_kubelet,
    kubeadm_args,
    parse_env_file,
    parse_flags,
    parse_kubelet_config,
    read_kubelet,
    settings_from_flags,
    split_cmdline,
)
from gpustack_operator.preflight.runtime import (
    CONTAINERD_NAMESPACE,
    CONTAINERD_SOCKETS,
    Daemon,
    RuntimeChoiceError,
    RuntimeName,
    RuntimeResolution,
    daemon_of,
    parse_runtime_name,
    resolve_runtime,
    socket_of,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.tools import kubelet_nodes as kn
from tests.tools.kubelet_nodes import K3S_TREE, KUBELET_PID, RKE2_TREE, executable, process, write


def node(
    root: Path,
    files: dict[str, str] | None = None,
    kubelet: list[str] | None = None,
    clis: tuple[str, ...] = (),
    proc: bool = True,
) -> Path:
    """A node with a process table (unless ``proc`` is false), optional kubelet, files and CLIs."""
    kn.base(root, proc=proc)
    for rel, text in (files or {}).items():
        write(root, rel, text)
    if kubelet is not None:
        process(root, KUBELET_PID, kubelet)
    for cli in clis:
        executable(root, f"usr/bin/{cli}")
    return root


def resolve(root: Path, requested: RuntimeName | None = None) -> RuntimeResolution:
    host = HostRoot(root)
    return resolve_runtime(host, read_kubelet(host), requested)


CONTAINERD = "unix:///run/containerd/containerd.sock"


# -- the command line --------------------------------------------------------------------------


def test_cmdline_is_nul_separated() -> None:
    assert split_cmdline(b"/usr/bin/kubelet\0--config=/x\0--v=2\0") == ["/usr/bin/kubelet", "--config=/x", "--v=2"]
    assert split_cmdline("kubelet") == ["kubelet"]
    assert split_cmdline(b"") == []


def test_flags_both_spellings_last_wins_and_double_dash_ends() -> None:
    args = [
        "--config",
        "/etc/a.yaml",
        "--container-runtime-endpoint=unix:///first.sock",
        "--node-labels=x=y",
        "--container_runtime_endpoint",  # pflag's normaliser: _ is -
        "unix:///second.sock",
        "-v=2",
        "--topology-manager-policy=",  # empty: kept as stated, names nothing later
        "--",
        "--config=/after/double/dash",
    ]
    flags = parse_flags(args)
    assert flags == {
        "config": "/etc/a.yaml",
        "container-runtime-endpoint": "unix:///second.sock",
        "topology-manager-policy": "",
    }


def test_a_wanted_flag_with_no_value_after_it_is_left_out() -> None:
    assert parse_flags(["--config"]) == {}


@given(st.lists(st.text(max_size=30), max_size=12))
def test_flag_parser_never_raises(args: list[str]) -> None:
    flags = parse_flags(args)
    assert set(flags) <= {"config", "config-dir", "container-runtime-endpoint", "topology-manager-policy"}


safe_value = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=20)
wanted = st.dictionaries(st.sampled_from(["config", "config-dir", "container-runtime-endpoint"]), safe_value)


@given(wanted, st.lists(st.booleans(), min_size=3, max_size=3))
def test_flags_round_trip_through_a_cmdline(values: dict[str, str], with_equals: list[bool]) -> None:
    argv = ["/usr/bin/kubelet", "--v=2"]
    for (name, value), eq in zip(values.items(), with_equals, strict=False):
        argv += [f"--{name}={value}"] if eq else [f"--{name}", value]
    raw = b"".join(a.encode() + b"\0" for a in argv)
    assert parse_flags(split_cmdline(raw)[1:]) == values


# -- kubeadm-flags.env ---------------------------------------------------------------------------


def test_kubeadm_flags_env_as_kubeadm_writes_it() -> None:
    assert kubeadm_args(kn.KUBEADM_FLAGS) == [
        "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
        "--pod-infra-container-image=registry.k8s.io/pause:3.10",
    ]


def test_env_file_quotes_escapes_comments_and_continuations() -> None:
    text = (
        "# written by kubeadm\n"
        "; another comment\n"
        'A="one \\"two\\" \\\\ three"\n'
        "B='literal \\n $x'\n"
        "C = bare value  \n"
        "D=first \\\n"
        "second\n"
        'E="multi\n'
        'line"\n'
        "not an assignment\n"
        "export F=exported\n"
        "A=overridden\n"
    )
    assert parse_env_file(text) == {
        "A": "overridden",
        "B": "literal \\n $x",
        "C": "bare value",
        "D": "first second",
        "E": "multi\nline",
        "F": "exported",
    }


def test_unterminated_quote_names_the_line() -> None:
    with pytest.raises(ParseError, match='line 2: the " quote opened here is never closed'):
        parse_env_file('A=1\nKUBELET_KUBEADM_ARGS="--container-runtime-endpoint=x\n')


@given(st.text(max_size=200))
def test_env_parser_raises_only_parse_error(text: str) -> None:
    try:
        env = parse_env_file(text)
    except ParseError as exc:
        assert "never closed" in str(exc)
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), st.text("ab c-=/:.", max_size=20)))
def test_env_file_round_trips_double_quoted_values(env: dict[str, str]) -> None:
    text = "".join(f'{k}="{v}"\n' for k, v in env.items())
    assert parse_env_file(text) == env


# -- KubeletConfiguration files ------------------------------------------------------------------


def test_kubeadm_config_names_the_policy_and_its_empty_endpoint_names_nothing() -> None:
    config = kn.KUBEADM_CONFIG.replace("{policy}", "topologyManagerPolicy: restricted\n")
    assert parse_kubelet_config(config) == {Setting.POLICY: "restricted"}


def test_k3s_defaults_name_the_endpoint() -> None:
    assert parse_kubelet_config(kn.K3S_DEFAULTS) == {Setting.ENDPOINT: "unix:///run/k3s/containerd/containerd.sock"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: KubeletConfiguration\n  bad: indent\n", "not valid YAML at line 2"),
        ("- a\n- b\n", "is a sequence"),
        ("kind: Config\n", "kind is 'Config'"),
        ("apiVersion: v1\n", "apiVersion is 'v1'"),
        ("topologyManagerPolicy: [none]\n", "topologyManagerPolicy is a sequence"),
        ("a: !!python/object:os.system ls\n", "not valid YAML"),
    ],
)
def test_malformed_configuration_is_a_named_reason(text: str, problem: str) -> None:
    with pytest.raises(ParseError, match=problem.replace("[", r"\[")):
        parse_kubelet_config(text)


@given(st.text(max_size=200))
def test_config_parser_raises_only_parse_error(text: str) -> None:
    try:
        found = parse_kubelet_config(text)
    except ParseError:
        return
    assert set(found) <= set(Setting)


# -- a running kubelet ---------------------------------------------------------------------------


def test_kubeadm_node_running(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(kn.kubeadm_node(tmp_path)))
    assert reading.process is not None and reading.process.pid == KUBELET_PID
    assert reading.endpoint.outcome is Outcome.NAMED
    assert reading.endpoint.value == "unix:///var/run/containerd/containerd.sock"
    assert reading.endpoint.source == (
        f"--container-runtime-endpoint on the running kubelet's command line (/proc/{KUBELET_PID}/cmdline)"
    )
    assert reading.policy.value == "single-numa-node"
    assert reading.policy.source == "topologyManagerPolicy in /var/lib/kubelet/config.yaml"


def test_the_command_line_overrides_the_drop_ins_which_override_the_config_file(tmp_path: Path) -> None:
    files = {
        "opt/kubelet/config.yaml": f"containerRuntimeEndpoint: {CONTAINERD}\ntopologyManagerPolicy: none\n",
        "opt/kubelet/conf.d/10-numa.conf": "topologyManagerPolicy: best-effort\n",
        "opt/kubelet/conf.d/20-more/05-numa.conf": "topologyManagerPolicy: restricted\n",  # walked in place
        "opt/kubelet/conf.d/15-ignored.yaml": "topologyManagerPolicy: none\n",  # not *.conf
        "var/lib/kubelet/config.yaml": "topologyManagerPolicy: single-numa-node\n",  # not this kubelet's
    }
    argv = ["/usr/bin/kubelet", "--config", "/opt/kubelet/config.yaml", "--config-dir=/opt/kubelet/conf.d"]
    reading = read_kubelet(HostRoot(node(tmp_path, files, argv)))
    assert reading.policy.value == "restricted"
    assert reading.policy.source == "topologyManagerPolicy in /opt/kubelet/conf.d/20-more/05-numa.conf"
    assert reading.endpoint.value == CONTAINERD  # only the --config file names it
    assert "/var/lib/kubelet/config.yaml" not in [s.path for s in reading.sources]

    write(tmp_path, f"proc/{KUBELET_PID}/cmdline", "\0".join([*argv, "--topology-manager-policy", "none", ""]))
    assert read_kubelet(HostRoot(tmp_path)).policy.value == "none"


def test_a_kubelet_configured_by_flags_alone_is_not_answered_out_of_the_standard_path(tmp_path: Path) -> None:
    files = {"var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: {CONTAINERD}\n"}
    reading = read_kubelet(HostRoot(node(tmp_path, files, ["/usr/bin/kubelet", "--kubeconfig=/etc/k.conf"])))
    assert reading.endpoint.outcome is Outcome.NOTHING
    assert "command line" in (reading.endpoint.detail or "")


def test_the_lowest_pid_answers_where_two_kubelets_run(tmp_path: Path) -> None:
    files = {"a.yaml": "topologyManagerPolicy: restricted\n", "b.yaml": "topologyManagerPolicy: none\n"}
    node(tmp_path, files, ["/usr/bin/kubelet", "--config=/a.yaml"])
    process(tmp_path, 10, ["/usr/bin/kubelet", "--config=/b.yaml"])  # "10" lists before "1187"
    process(tmp_path, 99999, ["/usr/bin/kubelet", "--config=/b.yaml"])
    reading = read_kubelet(HostRoot(tmp_path))
    assert reading.process is not None and reading.process.pid == 10
    assert reading.policy.value == "none"


def test_a_kubelet_is_known_by_its_exe_link_when_comm_cannot_be_read(tmp_path: Path) -> None:
    node(tmp_path, {"c.yaml": "topologyManagerPolicy: restricted\n"})
    write(tmp_path, "proc/4242/cmdline", "kubelet\0--config=c.yaml\0")
    os.symlink("/var/lib/rancher/rke2/data/v1.35.7-rke2r1/bin/kubelet", tmp_path / "proc/4242/exe")
    os.symlink("/", tmp_path / "proc/4242/cwd")  # a relative --config is the kubelet's cwd's
    reading = read_kubelet(HostRoot(tmp_path))
    assert reading.process is not None and reading.process.pid == 4242
    assert reading.policy.value == "restricted"


def test_an_unreadable_config_answers_unreadable_unless_something_above_it_names_the_setting(tmp_path: Path) -> None:
    argv = ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", f"--container-runtime-endpoint={CONTAINERD}"]
    node(tmp_path, None, argv)
    (tmp_path / "var/lib/kubelet/config.yaml").mkdir(parents=True)  # fails to read for any user
    reading = read_kubelet(HostRoot(tmp_path))
    assert reading.endpoint.value == CONTAINERD  # the command line overrides the file
    assert reading.policy.outcome is Outcome.UNREADABLE
    assert reading.policy.detail == "/var/lib/kubelet/config.yaml: Is a directory"


def test_a_config_the_kubelet_names_but_that_is_gone_is_unreadable(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(node(tmp_path, None, ["/usr/bin/kubelet", "--config=/gone.yaml"])))
    assert reading.policy.outcome is Outcome.UNREADABLE
    assert reading.policy.detail == "/gone.yaml: named by the kubelet's --config, and absent"


def test_malformed_yaml_is_a_named_reason(tmp_path: Path) -> None:
    files = {"c.yaml": "topologyManagerPolicy: [restricted\n"}
    reading = read_kubelet(HostRoot(node(tmp_path, files, ["/usr/bin/kubelet", "--config=/c.yaml"])))
    assert reading.policy.outcome is Outcome.UNREADABLE
    assert (reading.policy.detail or "").startswith("/c.yaml: not valid YAML")


# -- no kubelet running ----------------------------------------------------------------------------


def test_stopped_kubeadm_node_reads_kubeadm_flags_then_config(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(kn.kubeadm_node(tmp_path, running=False)))
    assert reading.process is None
    assert reading.endpoint.source == (
        "--container-runtime-endpoint in KUBELET_KUBEADM_ARGS of /var/lib/kubelet/kubeadm-flags.env"
    )
    assert reading.policy.source == "topologyManagerPolicy in /var/lib/kubelet/config.yaml"


def test_the_standard_config_is_taken_over_a_distribution_tree(tmp_path: Path) -> None:
    files = {
        "var/lib/kubelet/config.yaml": "topologyManagerPolicy: restricted\n",
        f"{K3S_TREE}/00.conf": "topologyManagerPolicy: best-effort\n",
    }
    assert read_kubelet(HostRoot(node(tmp_path, files))).policy.value == "restricted"


def test_k3s_node_reads_its_own_tree(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(kn.k3s_node(tmp_path)))
    assert reading.process is None  # the kubelet runs inside k3s: nothing called kubelet
    assert reading.endpoint.value == "unix:///run/k3s/containerd/containerd.sock"
    assert reading.policy.outcome is Outcome.NOTHING


def test_one_tree_is_one_configuration_and_two_trees_that_disagree_are_a_conflict(tmp_path: Path) -> None:
    files = {
        f"{RKE2_TREE}/00-rke2-defaults.conf": "topologyManagerPolicy: none\n",
        f"{RKE2_TREE}/20-cli-config-dir/10-topology.conf": "topologyManagerPolicy: single-numa-node\n",
    }
    assert read_kubelet(HostRoot(node(tmp_path, files))).policy.value == "single-numa-node"

    write(tmp_path, f"{K3S_TREE}/00.conf", "topologyManagerPolicy: restricted\n")
    reading = read_kubelet(HostRoot(tmp_path))
    assert reading.policy.outcome is Outcome.CONFLICT
    assert sorted((s.value, s.source) for s in reading.policy.conflict or []) == [
        ("restricted", f"topologyManagerPolicy in /{K3S_TREE}/00.conf"),
        ("single-numa-node", f"topologyManagerPolicy in /{RKE2_TREE}/20-cli-config-dir/10-topology.conf"),
    ]


def test_two_trees_agreeing_are_no_conflict(tmp_path: Path) -> None:
    files = {
        f"{K3S_TREE}/a.conf": "topologyManagerPolicy: none\n",
        f"{RKE2_TREE}/b.conf": "topologyManagerPolicy: none\n",
    }
    assert read_kubelet(HostRoot(node(tmp_path, files))).policy.value == "none"


def test_an_unreadable_drop_in_after_the_naming_one_is_unreadable_before_it_is_not(tmp_path: Path) -> None:
    files = {f"{K3S_TREE}/50-numa.conf": "topologyManagerPolicy: restricted\n"}
    node(tmp_path, files)
    os.symlink("00-early.conf", tmp_path / K3S_TREE / "00-early.conf")  # a link loop: unreadable by anyone
    assert read_kubelet(HostRoot(tmp_path)).policy.value == "restricted"
    os.symlink("99-late.conf", tmp_path / K3S_TREE / "99-late.conf")
    reading = read_kubelet(HostRoot(tmp_path))
    assert reading.policy.outcome is Outcome.UNREADABLE
    assert reading.policy.detail == f"/{K3S_TREE}/99-late.conf: Too many levels of symbolic links"
    (tmp_path / K3S_TREE / "99-late.conf").unlink()
    (tmp_path / K3S_TREE / "99-late.conf").mkdir()  # a directory of that name is walked, not read
    assert read_kubelet(HostRoot(tmp_path)).policy.value == "restricted"


def test_malformed_kubeadm_flags_blocks_what_follows(tmp_path: Path) -> None:
    files = {
        "var/lib/kubelet/kubeadm-flags.env": 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=x\n',
        "var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: {CONTAINERD}\n",
    }
    reading = read_kubelet(HostRoot(node(tmp_path, files)))
    assert reading.endpoint.outcome is Outcome.UNREADABLE
    assert "kubeadm-flags.env: line 1" in (reading.endpoint.detail or "")


def test_without_the_host_process_table_nothing_is_read(tmp_path: Path) -> None:
    reading = read_kubelet(HostRoot(kn.kubeadm_node(tmp_path, proc=False)))
    assert not reading.process_table and reading.sources == []
    assert reading.endpoint.outcome is Outcome.NOT_READ and reading.policy.outcome is Outcome.NOT_READ
    assert f"{tmp_path}/proc/1 is absent" in (reading.not_visible or "")


# -- runtime resolution ----------------------------------------------------------------------------


def test_kubeadm_node_drives_nerdctl_at_the_kubelets_socket(tmp_path: Path) -> None:
    r = resolve(kn.kubeadm_node(tmp_path))
    assert (r.runtime, r.binary, r.socket, r.namespace) == (
        RuntimeName.NERDCTL,
        "/usr/local/bin/nerdctl",
        "/var/run/containerd/containerd.sock",
        CONTAINERD_NAMESPACE,
    )
    assert r.endpoint == "unix:///var/run/containerd/containerd.sock"
    assert r.source is not None and "command line" in r.source
    assert not r.emitted and not r.nerdctl_absent and r.reason is None
    assert r.line().startswith("runtime: nerdctl (from --container-runtime-endpoint on the running kubelet's")


def test_containerd_without_nerdctl_is_ctr_and_says_nerdctl_is_absent(tmp_path: Path) -> None:
    r = resolve(kn.kubeadm_node(tmp_path, clis=("usr/bin/ctr",)))
    assert (r.runtime, r.binary, r.nerdctl_absent) == (RuntimeName.CTR, "/usr/bin/ctr", True)


def test_containerd_kubelet_on_a_host_with_only_docker_names_both(tmp_path: Path) -> None:
    r = resolve(kn.kubeadm_node(tmp_path, clis=("usr/bin/docker",)))
    assert r.runtime is None and r.emitted
    assert "the kubelet is configured against unix:///var/run/containerd/containerd.sock" in (r.reason or "")
    assert "neither nerdctl nor ctr" in (r.reason or "")


def test_k3s_drives_its_own_ctr_at_its_own_socket(tmp_path: Path) -> None:
    r = resolve(kn.k3s_node(tmp_path))
    assert (r.runtime, r.binary, r.socket, r.nerdctl_absent) == (
        RuntimeName.CTR,
        "/usr/local/bin/ctr",
        "/run/k3s/containerd/containerd.sock",
        True,
    )
    assert r.source == f"containerRuntimeEndpoint in /{K3S_TREE}/00-k3s-defaults.conf"


@pytest.mark.parametrize(
    ("endpoint", "clis", "runtime", "says"),
    [
        ("unix:///run/cri-dockerd.sock", ("docker", "nerdctl"), RuntimeName.DOCKER, None),
        ("unix:///var/run/dockershim.sock", ("docker",), RuntimeName.DOCKER, None),
        ("/run/containerd/containerd.sock", ("nerdctl",), RuntimeName.NERDCTL, None),  # legacy bare path
        ("unix:///run/cri-dockerd.sock", ("nerdctl",), None, "carries no docker"),
        ("unix:///var/run/crio/crio.sock", ("docker", "nerdctl", "ctr"), None, "carries no client for CRI-O"),
        ("unix:///run/some/other.sock", ("docker",), None, "names no runtime preflight knows"),
        ("npipe:////./pipe/containerd-containerd", ("docker",), None, "names no runtime preflight knows"),
    ],
)
def test_the_endpoint_decides_never_the_probe_order(
    tmp_path: Path, endpoint: str, clis: tuple[str, ...], runtime: RuntimeName | None, says: str | None
) -> None:
    files = {"var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: {endpoint}\n"}
    r = resolve(node(tmp_path, files, clis=clis))
    assert r.runtime == runtime
    assert r.endpoint == endpoint and r.source == "containerRuntimeEndpoint in /var/lib/kubelet/config.yaml"
    if says is not None:
        assert r.emitted and says in (r.reason or "")


@pytest.mark.parametrize(
    ("clis", "runtime"),
    [
        (("docker", "nerdctl", "ctr"), RuntimeName.DOCKER),
        (("nerdctl", "ctr"), RuntimeName.NERDCTL),
        (("ctr",), RuntimeName.CTR),
    ],
)
def test_nothing_stated_probes_docker_then_nerdctl_then_ctr(
    tmp_path: Path, clis: tuple[str, ...], runtime: RuntimeName
) -> None:
    r = resolve(node(tmp_path, clis=clis))
    assert (r.runtime, r.source, r.probed) == (runtime, "probe", ["docker", "nerdctl", "ctr"])
    assert r.binary == f"/usr/bin/{runtime.value}"


def test_docker_only_bare_machine(tmp_path: Path) -> None:
    r = resolve(kn.docker_bare(tmp_path))
    assert (r.runtime, r.binary, r.socket, r.emitted) == (RuntimeName.DOCKER, "/usr/bin/docker", None, False)


def test_a_file_that_is_not_executable_is_not_a_runtime(tmp_path: Path) -> None:
    node(tmp_path)
    write(tmp_path, "usr/bin/docker", "not a program\n", mode=0o644)
    write(tmp_path, "usr/sbin/nerdctl", "")
    (tmp_path / "usr/sbin/nerdctl").chmod(0o755)
    r = resolve(tmp_path)
    assert (r.runtime, r.binary) == (RuntimeName.NERDCTL, "/usr/sbin/nerdctl")


def test_no_runtime_anywhere_names_what_was_probed(tmp_path: Path) -> None:
    r = resolve(node(tmp_path))
    assert r.runtime is None and r.emitted and r.probed == ["docker", "nerdctl", "ctr"]
    assert "probed docker, nerdctl, ctr in /usr/local/sbin, /usr/local/bin" in (r.reason or "")


def test_no_host_proc_refuses_to_probe_unless_runtime_is_given(tmp_path: Path) -> None:
    kn.kubeadm_node(tmp_path, proc=False, clis=("usr/bin/docker",))
    r = resolve(tmp_path)
    assert r.runtime is None and r.emitted and r.probed is None
    assert (r.reason or "").startswith("not probed: ") and "--runtime names a runtime past this" in (r.reason or "")
    given = resolve(tmp_path, RuntimeName.DOCKER)
    assert (given.runtime, given.source, given.binary, given.emitted) == (
        RuntimeName.DOCKER,
        "--runtime",
        "/usr/bin/docker",
        False,
    )


def test_runtime_flag_overrides_the_kubelet_and_keeps_its_containerd_socket(tmp_path: Path) -> None:
    kn.kubeadm_node(tmp_path, clis=("usr/bin/ctr", "usr/bin/docker"))
    r = resolve(tmp_path, RuntimeName.CTR)
    assert (r.runtime, r.source, r.socket, r.nerdctl_absent) == (
        RuntimeName.CTR,
        "--runtime",
        "/var/run/containerd/containerd.sock",
        True,
    )
    assert resolve(tmp_path, RuntimeName.DOCKER).socket is None


def test_a_runtime_flag_the_host_lacks_is_taken_and_every_step_emitted(tmp_path: Path) -> None:
    r = resolve(kn.docker_bare(tmp_path), RuntimeName.NERDCTL)
    assert (r.runtime, r.source, r.binary, r.emitted) == (RuntimeName.NERDCTL, "--runtime", None, True)
    assert "the host carries no nerdctl on its PATH" in (r.reason or "")
    assert "every container step would be emitted" in r.line()


def test_an_unreadable_kubelet_config_is_not_probed_past(tmp_path: Path) -> None:
    node(tmp_path, clis=("docker",))
    (tmp_path / "var/lib/kubelet/config.yaml").mkdir(parents=True)
    r = resolve(tmp_path)
    assert r.runtime is None and r.emitted
    assert "could not be read (/var/lib/kubelet/config.yaml: Is a directory)" in (r.reason or "")


def test_two_distribution_trees_naming_different_endpoints_name_both(tmp_path: Path) -> None:
    files = {
        f"{K3S_TREE}/00-defaults.conf": "containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n",
        f"{RKE2_TREE}/00-defaults.conf": "containerRuntimeEndpoint: unix:///run/k3s/containerd/rke2.sock\n",
    }
    r = resolve(node(tmp_path, files, clis=("nerdctl",)))
    assert r.runtime is None and r.emitted
    assert "containerd.sock" in (r.reason or "") and "rke2.sock" in (r.reason or "")
    assert "two distribution trees" in (r.reason or "")


def test_runtime_names_are_docker_nerdctl_ctr() -> None:
    assert parse_runtime_name(None) is None
    assert parse_runtime_name("ctr") is RuntimeName.CTR
    with pytest.raises(RuntimeChoiceError, match=r"'podman' is not a container runtime .* docker, nerdctl, ctr"):
        parse_runtime_name("podman")


def test_sockets_and_daemons() -> None:
    assert socket_of("unix:///run/containerd/containerd.sock") == "/run/containerd/containerd.sock"
    assert socket_of("/run/crio/crio.sock") == "/run/crio/crio.sock"
    assert socket_of("tcp://127.0.0.1:2375") is None
    assert socket_of("unix://relative.sock") is None
    assert daemon_of("/run/k3s/containerd/containerd.sock") == "containerd"
    assert daemon_of("/run/cri-dockerd.sock") == "docker"
    assert daemon_of("/var/run/crio/crio.sock") == "CRI-O"
    assert daemon_of("/run/other.sock") is None


# -- CRI endpoints in every form the kubelet accepts -----------------------------------------------

SOCKET = "/run/containerd/containerd.sock"


@pytest.mark.parametrize(
    "endpoint",
    [
        f"unix://{SOCKET}",
        f"unix:{SOCKET}",  # Go's url.Parse: scheme unix, path /run/...
        SOCKET,  # the deprecated bare path the kubelet still reads as unix://
        f"UNIX://{SOCKET}",  # a URL scheme is case-insensitive
        f'"unix://{SOCKET}"',
        f"'unix://{SOCKET}'",
        f"unix://{SOCKET}   ",
        f'  "{SOCKET}"  ',
        f"unix:///{SOCKET}",  # repeated slashes are one
        "unix:///run/containerd//containerd.sock",
        f"unix://{SOCKET}?timeout=2s",  # a query is not the path
        "unix:///run/containerd/container%64.sock",  # %xx is decoded
    ],
)
def test_every_endpoint_form_names_one_socket(endpoint: str) -> None:
    assert socket_of(endpoint) == SOCKET
    assert daemon_of(SOCKET) is Daemon.CONTAINERD


@pytest.mark.parametrize(
    "endpoint",
    [
        "unix://relative.sock",  # a host and no path
        "unix:relative.sock",
        "relative/containerd.sock",
        "tcp://127.0.0.1:2375",
        "npipe:////./pipe/containerd-containerd",
        "unix:///run/%zz.sock",  # a broken escape is no URL
        "unix:///run/x%00.sock",  # a NUL no socket path has
        "unix:///run/x\x01.sock",
        "unix:///",
        "",
        '""',
        "   ",
    ],
)
def test_what_names_no_unix_socket(endpoint: str) -> None:
    assert socket_of(endpoint) is None


@pytest.mark.parametrize(
    ("socket", "daemon"),
    [
        ("/run/containerd/containerd.sock", Daemon.CONTAINERD),
        ("/run/k3s/containerd/containerd.sock", Daemon.CONTAINERD),
        ("/var/run/containerd/containerd.sock", Daemon.CONTAINERD),
        ("/run/containerd/cri.sock", Daemon.CONTAINERD),  # under a containerd directory
        ("/var/lib/rancher/rke2/agent/containerd/containerd.sock", Daemon.CONTAINERD),
        ("/var/run/docker.sock", Daemon.DOCKER),
        ("/run/cri-dockerd.sock", Daemon.DOCKER),
        ("/var/run/dockershim.sock", Daemon.DOCKER),
        ("/run/user/1000/docker.sock", Daemon.DOCKER),
        ("/var/run/crio/crio.sock", Daemon.CRIO),
        ("/run/crio/other.sock", Daemon.CRIO),
        ("/run/other.sock", None),
        ("/", None),
    ],
)
def test_the_runtime_is_read_from_the_whole_socket_path(socket: str, daemon: Daemon | None) -> None:
    assert daemon_of(socket) is daemon


def test_the_containerd_socket_probe_order_is_the_reference_one() -> None:
    assert CONTAINERD_SOCKETS == (
        "/run/containerd/containerd.sock",
        "/run/k3s/containerd/containerd.sock",
        "/var/run/containerd/containerd.sock",
    )


def _own_var_run(root: Path) -> None:
    """A host whose /var/run is a directory of its own (not the usual link to /run)."""
    (root / "var/run").unlink()
    (root / "var/run").mkdir()


@pytest.mark.parametrize(
    ("sockets", "found"),
    [
        (("var/run/containerd/containerd.sock",), "/var/run/containerd/containerd.sock"),
        (
            ("var/run/containerd/containerd.sock", "run/k3s/containerd/containerd.sock"),
            "/run/k3s/containerd/containerd.sock",
        ),
        (("run/k3s/containerd/containerd.sock", "run/containerd/containerd.sock"), "/run/containerd/containerd.sock"),
        ((), None),
    ],
)
def test_a_probed_containerd_cli_gets_the_first_socket_present(
    tmp_path: Path, sockets: tuple[str, ...], found: str | None
) -> None:
    node(tmp_path, clis=("ctr",))
    _own_var_run(tmp_path)
    for rel in sockets:
        write(tmp_path, rel, "")
    r = resolve(tmp_path)
    assert (r.runtime, r.source, r.socket) == (RuntimeName.CTR, "probe", found)


@pytest.mark.parametrize(
    "stated",
    [f"unix:{SOCKET}", SOCKET, f"'unix://{SOCKET}'", f'"{SOCKET}"', f"unix://{SOCKET} "],
)
def test_an_endpoint_in_any_form_resolves_from_each_source(tmp_path: Path, stated: str) -> None:
    """The same endpoint through the running kubelet's command line, kubeadm-flags.env and a
    KubeletConfiguration: one socket, one runtime."""
    yaml_value = stated.replace("'", "''")
    shapes = {
        "cmdline": ({}, ["/usr/bin/kubelet", f"--container-runtime-endpoint={stated}"]),
        "kubeadm-flags": (
            {
                "var/lib/kubelet/kubeadm-flags.env": f"KUBELET_KUBEADM_ARGS=--container-runtime-endpoint={stated.strip()}\n"
            },
            None,
        ),
        "config": ({"var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: '{yaml_value}'\n"}, None),
    }
    for name, (files, argv) in shapes.items():
        root = tmp_path / name
        r = resolve(node(root, files, argv, clis=("nerdctl",)))
        assert (r.runtime, r.socket) == (RuntimeName.NERDCTL, SOCKET), name
        assert r.endpoint == clean_value(stated), name


def test_a_k3s_socket_stated_bare_is_containerd(tmp_path: Path) -> None:
    files = {f"{K3S_TREE}/00.conf": "containerRuntimeEndpoint: /run/k3s/containerd/containerd.sock\n"}
    r = resolve(node(tmp_path, files, clis=("ctr",)))
    assert (r.runtime, r.socket) == (RuntimeName.CTR, "/run/k3s/containerd/containerd.sock")


@pytest.mark.parametrize(
    ("endpoint", "clis", "says"),
    [
        (f"unix:{SOCKET}", ("docker",), f"the containerd socket {SOCKET}, but the host carries neither nerdctl"),
        (
            "/run/cri-dockerd.sock",
            ("nerdctl",),
            "the docker socket /run/cri-dockerd.sock, but the host carries no docker",
        ),
        (
            "unix:/var/run/crio/crio.sock",
            ("docker", "nerdctl"),
            "CRI-O's socket /var/run/crio/crio.sock: this host carries no client for CRI-O",
        ),
        ("unix:///run/some/other.sock", ("docker",), "the socket /run/some/other.sock, which names no runtime"),
        ("tcp://10.0.0.1:3735", ("docker",), "which is no unix socket and names no runtime"),
    ],
)
def test_messages_name_the_socket(tmp_path: Path, endpoint: str, clis: tuple[str, ...], says: str) -> None:
    files = {"var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: {endpoint}\n"}
    r = resolve(node(tmp_path, files, clis=clis))
    assert r.runtime is None and r.emitted
    assert says in (r.reason or ""), r.reason


def test_a_docker_endpoint_drives_docker_at_its_own_daemon(tmp_path: Path) -> None:
    files = {"var/lib/kubelet/config.yaml": "containerRuntimeEndpoint: unix:///var/run/docker.sock\n"}
    r = resolve(node(tmp_path, files, clis=("docker", "nerdctl")))
    assert (r.runtime, r.socket, r.namespace) == (RuntimeName.DOCKER, None, None)


def test_values_are_cleaned_and_an_empty_one_states_nothing() -> None:
    assert clean_value('  "unix:///x.sock"  ') == "unix:///x.sock"
    assert clean_value("' \"restricted\" '") == "restricted"
    assert clean_value("'mismatched\"") == "'mismatched\""
    assert clean_value('"') == '"'
    assert settings_from_flags({"container-runtime-endpoint": '""', "topology-manager-policy": " 'none' "}) == {
        Setting.POLICY: "none"
    }
    assert parse_kubelet_config("containerRuntimeEndpoint: '  '\ntopologyManagerPolicy: \"'best-effort'\"\n") == {
        Setting.POLICY: "best-effort"
    }


def test_a_quoted_empty_endpoint_falls_through_to_the_next_source(tmp_path: Path) -> None:
    files = {
        "var/lib/kubelet/kubeadm-flags.env": "KUBELET_KUBEADM_ARGS=--container-runtime-endpoint=''\n",
        "var/lib/kubelet/config.yaml": f"containerRuntimeEndpoint: unix:{SOCKET}\n",
    }
    r = resolve(node(tmp_path, files, clis=("docker", "nerdctl")))
    assert (r.runtime, r.socket) == (RuntimeName.NERDCTL, SOCKET)
    assert r.source == "containerRuntimeEndpoint in /var/lib/kubelet/config.yaml"


def test_a_proc_entry_that_only_looks_numeric_is_no_process(tmp_path: Path) -> None:
    node(tmp_path, kubelet=["/usr/bin/kubelet"])
    for odd in ("\u00b2", "\u0663", "9" * 40):  # superscript two and Arabic-Indic three: isdigit(), not int()
        write(tmp_path, f"proc/{odd}/comm", "kubelet\n")
    assert find_kubelet(HostRoot(tmp_path)) == KUBELET_PID


# -- hostile input ---------------------------------------------------------------------------------

ENDPOINT_VOCABULARY = [
    "unix:",
    "UNIX:",
    "//",
    "/",
    "///",
    "run",
    "containerd",
    "docker",
    "crio",
    ".sock",
    "%",
    "%2F",
    "%00",
    "%zz",
    "?",
    "#",
    '"',
    "'",
    " ",
    "\t",
    "\x00",
    "\ufffd",
    "tcp:",
    "npipe:",
    "k3s",
    "9" * 5000,
    "..",
]
hostile_text = st.one_of(
    st.text(),
    st.binary().map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(st.one_of(st.sampled_from(ENDPOINT_VOCABULARY), st.text(max_size=6)), max_size=40).map("".join),
)


@pytest.mark.hostile
@given(hostile_text)
def test_endpoint_parsers_take_anything(text: str) -> None:
    socket = socket_of(text)
    if socket is not None:
        assert socket.startswith("/") and socket != "/" and "//" not in socket
        assert all(ord(c) >= 0x20 and ord(c) != 0x7F for c in socket)
        assert daemon_of(socket) in (*Daemon, None)
    assert daemon_of(text) in (*Daemon, None)
    cleaned = clean_value(text)
    assert cleaned == clean_value(cleaned) and len(cleaned) <= len(text)
    try:
        named = parse_runtime_name(text)
    except RuntimeChoiceError:
        named = None
    assert named is None or named.value == text


safe_path = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12), min_size=1, max_size=6
)


@given(safe_path, st.sampled_from(["unix://{}", "unix:{}", "{}", " '{}' ", '"unix://{}" ', "unix://{}?x=1"]))
def test_an_absolute_path_survives_every_form(parts: list[str], form: str) -> None:
    path = "/" + "/".join(parts)
    assert socket_of(form.format(path)) == path


@pytest.mark.hostile
@given(st.one_of(st.binary(), hostile_text.map(lambda t: t.encode("utf-8", errors="surrogatepass"))))
def test_cmdline_and_flags_take_anything(raw: bytes) -> None:
    argv = split_cmdline(raw)
    assert all(isinstance(a, str) for a in argv)
    flags = parse_flags(argv)
    assert set(flags) <= {"config", "config-dir", "container-runtime-endpoint", "topology-manager-policy"}
    settings = settings_from_flags(flags)
    assert all(v and v == clean_value(v) for v in settings.values())


@pytest.mark.hostile
@given(
    st.one_of(
        hostile_text,
        st.lists(
            st.sampled_from(
                [
                    "KUBELET_KUBEADM_ARGS=",
                    '"',
                    "'",
                    "\\",
                    "\n",
                    "--container-runtime-endpoint=",
                    "x",
                    " ",
                    "#",
                    "export ",
                ]
            ),
            max_size=40,
        ).map("".join),
    )
)
def test_kubeadm_flags_env_takes_anything(text: str) -> None:
    try:
        args = kubeadm_args(text)
    except ParseError as exc:
        assert "never closed" in str(exc)
    else:
        assert all(isinstance(a, str) and a for a in args)
        settings_from_flags(parse_flags(args))


YAML_VOCABULARY = [
    "containerRuntimeEndpoint: ",
    "topologyManagerPolicy: ",
    "kind: KubeletConfiguration\n",
    "apiVersion: kubelet.config.k8s.io/v1beta1\n",
    "\n",
    "  ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "!!",
    "'",
    '"',
    ": ",
    "9" * 5000,
    "2001-13-45",
    "1e99999",
    "\x00",
    "\ufffd",
    "? ",
    "|",
    ">",
    "#",
]


@pytest.mark.hostile
@given(st.one_of(hostile_text, st.lists(st.sampled_from(YAML_VOCABULARY), max_size=40).map("".join)))
def test_kubelet_config_parser_raises_only_parse_error(text: str) -> None:
    try:
        found = parse_kubelet_config(text)
    except ParseError:
        return
    assert set(found) <= set(Setting)
    assert all(isinstance(v, str) and v and v == clean_value(v) for v in found.values())
