"""The stale-container sweep (supplement §2.5, §2.8 "A sweep that could not be completed …" and "Not
every unhappy sweep is one of these"): the listing parser, the spec's classification table, the
commands per CLI and the reason text.

The container CLIs are faked at the runner boundary here (:class:`Scripted` answers each argv the way
the CLI would, in its real output format, and records what ran); the same paths run through a real
chroot into a host tree carrying CLI scripts in tests/integration/test_preflight_lock_sweep.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.hostexec import HostExec, HostExecError
from gpustack_operator.preflight.models import State
from gpustack_operator.preflight.runtime import CONTAINERD_NAMESPACE, RuntimeName, RuntimeResolution
from gpustack_operator.preflight.sweep import (
    CAPABILITY,
    LABEL,
    Step,
    failure_reason,
    is_id,
    other_runtimes,
    parse_listing,
    stale_rows,
    sweep,
    targets,
)
from hypothesis import given
from hypothesis import strategies as st

SOCK = "/run/containerd/containerd.sock"
ID1 = "3f4e2a1b9c8d"
ID2 = "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2"

DOCKER = RuntimeResolution(runtime=RuntimeName.DOCKER, source="probe", binary="/usr/bin/docker")
NERDCTL = RuntimeResolution(
    runtime=RuntimeName.NERDCTL,
    source="probe",
    binary="/usr/local/bin/nerdctl",
    socket=SOCK,
    namespace=CONTAINERD_NAMESPACE,
)
CTR = RuntimeResolution(
    runtime=RuntimeName.CTR, source="probe", binary="/usr/bin/ctr", socket=SOCK, namespace=CONTAINERD_NAMESPACE
)
NOTHING = RuntimeResolution(runtime=None, emitted=True, reason="no container runtime is on the host's PATH")

Answer = str | HostExecError


@dataclass(frozen=True)
class Scripted(HostExec):
    """A runner answering by the CLI's subcommand: ``answers[(cli, word)]`` is stdout, or the
    :class:`HostExecError` the real runner raises for a non-zero exit. Unscripted calls print
    nothing and succeed (a removal that worked)."""

    answers: dict[tuple[str, str], Answer] = field(default_factory=dict, compare=False)
    calls: list[tuple[float, list[str]]] = field(default_factory=list, compare=False)

    def run(self, name: str, *args: str) -> str:
        self.calls.append((self.timeout, [name, *args]))
        cli = name.rsplit("/", 1)[-1]
        words = [a for a in args if not a.startswith("-") and a not in (SOCK, CONTAINERD_NAMESPACE)]
        for word in words:
            answer = self.answers.get((cli, word))
            if answer is not None:
                if isinstance(answer, HostExecError):
                    raise answer
                return answer
        return ""

    def argvs(self) -> list[list[str]]:
        return [argv for _, argv in self.calls]


def runner(**answers: Answer) -> Scripted:
    """``docker_ps=...`` scripts ``("docker", "ps")``; ``ctr_containers_rm`` is keyed on ``rm``."""
    table: dict[tuple[str, str], Answer] = {}
    for key, value in answers.items():
        cli, _, word = key.partition("_")
        table[(cli, word.rsplit("_", 1)[-1])] = value
    return Scripted(root="/host", answers=table)


def fail(text: str) -> HostExecError:
    return HostExecError(text)


# -- the listing parser -----------------------------------------------------------------------------


def test_docker_listing_in_its_real_format() -> None:
    listing = parse_listing(f"{ID1}\n{ID2}\r\n\n  {ID1}  \n", RuntimeName.DOCKER)
    assert listing.ids == (ID1, ID2) and listing.garbled == ()


@pytest.mark.parametrize(
    "line",
    [
        "CONTAINER ID   IMAGE     COMMAND",  # a table header: -q was not honoured
        "WARNING: No swap limit support",
        "--rm",  # would be an option to rm
        "3F4E2A1B9C8D",  # docker prints lower case
        "3f4e2a1b9c8",  # 11 digits
        "3f4e2a1b9c8d; rm -rf /",
        "$(reboot)",
        "3f4e2a1b9c8d 9a8b7c6d5e4f",
    ],
)
def test_anything_but_one_hex_id_a_line_is_reported_not_taken(line: str) -> None:
    listing = parse_listing(f"{ID1}\n{line}\n", RuntimeName.DOCKER)
    assert listing.ids == (ID1,) and listing.garbled == (line.strip(),)


def test_ctr_ids_are_containerd_identifiers() -> None:
    output = "gpustack-preflight-GPU-0\nprobe.1_a\nx\n-bad\nbad-\na..b\n" + "a" * 77 + "\n"
    listing = parse_listing(output, RuntimeName.CTR)
    assert listing.ids == ("gpustack-preflight-GPU-0", "probe.1_a", "x")
    assert listing.garbled == ("-bad", "bad-", "a..b", "a" * 77)


@given(st.text(max_size=400), st.sampled_from(list(RuntimeName)))
def test_listing_parser_never_raises_and_only_ids_are_taken(output: str, runtime: RuntimeName) -> None:
    listing = parse_listing(output, runtime)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    assert set(listing.ids) | set(listing.garbled) == set(lines)
    assert len(set(listing.ids)) == len(listing.ids)
    for cid in listing.ids:
        assert is_id(cid, runtime) and not cid.startswith("-")
        assert re.fullmatch(r"[A-Za-z0-9._-]+", cid)
    assert not set(listing.ids) & set(listing.garbled)


@given(st.lists(st.one_of(st.from_regex(r"[0-9a-f]{12}", fullmatch=True), st.text(max_size=40)), max_size=8))
def test_sweep_over_any_listing_never_raises_and_removes_only_ids(lines: list[str]) -> None:
    run = runner(docker_ps="\n".join(lines))
    result = sweep(run, DOCKER)
    removals = [argv for argv in run.argvs() if argv[1] == "rm"]
    assert [argv[-1] for argv in removals] == list(parse_listing("\n".join(lines), RuntimeName.DOCKER).ids)
    assert all(argv[:3] == ["/usr/bin/docker", "rm", "-f"] and len(argv) == 4 for argv in removals)
    assert result.ok == (not parse_listing("\n".join(lines), RuntimeName.DOCKER).garbled)


# -- commands per CLI -------------------------------------------------------------------------------


def test_docker_lists_by_label_and_removes_each_found_with_a_timeout() -> None:
    run = runner(docker_ps=f"{ID1}\n{ID2}\n")
    result = sweep(run, DOCKER, timeout=7.5)
    assert run.calls == [
        (7.5, ["/usr/bin/docker", "ps", "-aq", "--filter", "label=gpustack.ai/preflight=true"]),
        (7.5, ["/usr/bin/docker", "rm", "-f", ID1]),
        (7.5, ["/usr/bin/docker", "rm", "-f", ID2]),
    ]
    assert [r.container for r in result.removed] == [ID1, ID2] and result.ok
    assert failure_reason(result) is None


def test_nerdctl_is_pointed_at_the_resolved_socket_in_the_preflight_namespace() -> None:
    run = runner(nerdctl_ps=f"{ID1}\n")
    assert sweep(run, NERDCTL).ok
    base = ["/usr/local/bin/nerdctl", "--address", SOCK, "--namespace", "gpustack-preflight"]
    assert run.argvs() == [[*base, "ps", "-aq", "--filter", f"label={LABEL}"], [*base, "rm", "-f", ID1]]


def test_nerdctl_without_a_socket_uses_its_own_default_address() -> None:
    run = runner()
    sweep(run, NERDCTL.model_copy(update={"socket": None}))
    assert run.argvs() == [
        ["/usr/local/bin/nerdctl", "--namespace", "gpustack-preflight", "ps", "-aq", "--filter", f"label={LABEL}"]
    ]


def test_ctr_filters_by_the_quoted_label_and_removes_task_then_container() -> None:
    run = runner(ctr_ls="gpustack-preflight-GPU-0\n", ctr_tasks=fail("ctr: exit status 1: ctr: no running task found"))
    result = sweep(run, CTR)
    base = ["/usr/bin/ctr", "--address", SOCK, "--namespace", "gpustack-preflight"]
    assert run.argvs() == [
        [*base, "containers", "ls", "-q", 'labels."gpustack.ai/preflight"==true'],
        [*base, "tasks", "rm", "-f", "gpustack-preflight-GPU-0"],
        [*base, "containers", "rm", "gpustack-preflight-GPU-0"],
    ]
    assert result.ok and [r.container for r in result.removed] == ["gpustack-preflight-GPU-0"]


def test_commands_run_through_the_host_root() -> None:
    run = runner(docker_ps=fail("/usr/bin/docker: exit status 1: permission denied"))
    reason = failure_reason(sweep(run, DOCKER))
    assert reason is not None
    assert "/usr/sbin/chroot /host /usr/bin/docker ps -aq --filter label=gpustack.ai/preflight=true" in reason


# -- the spec's table ---------------------------------------------------------------------------------


def test_listing_failure_on_the_driven_runtime_is_a_failure_in_the_spec_words() -> None:
    run = runner(docker_ps=fail("/usr/bin/docker: exit status 1: permission denied"))
    result = sweep(run, DOCKER)
    (failure,) = result.failures
    assert failure.step is Step.LIST and failure.target.driven and result.ignored == ()
    reason = failure_reason(result)
    assert reason is not None
    assert reason.startswith(
        "the stale-container sweep could not be completed, so a container an earlier run left behind may still "
        "be holding this accelerator and every answer measured against it here is unsafe to trust: docker: exit "
        "status 1: permission denied (listing the containers labelled gpustack.ai/preflight=true on docker, the "
        "runtime this run drives: "
    )
    assert reason.endswith(
        "clear the leftovers by hand (docker ps -aq --filter label=gpustack.ai/preflight=true, then docker rm -f "
        "<id> for each id it prints), then run it again"
    )


def test_listing_failure_on_another_runtime_is_nothing() -> None:
    """The last row: nerdctl beside a containerd that is not listening stays green."""
    down = fail(
        '/usr/local/bin/nerdctl: exit status 1: time="2025-01-01T00:00:00Z" level=fatal msg="cannot access '
        'containerd socket "/run/containerd/containerd.sock": no such file or directory"'
    )
    run = runner(docker_ps=f"{ID1}\n", nerdctl_ps=down)
    result = sweep(run, DOCKER, [NERDCTL])
    assert result.ok and failure_reason(result) is None
    (ignored,) = result.ignored
    assert (
        ignored.step is Step.LIST and not ignored.target.driven and ignored.error.startswith("nerdctl: exit status 1")
    )
    assert [r.container for r in result.removed] == [ID1]


@pytest.mark.parametrize("driven", [True, False], ids=["driven", "other"])
def test_removal_failure_on_any_runtime_is_a_failure(driven: bool) -> None:
    stuck = fail(
        "/usr/bin/docker: exit status 1: Error response from daemon: cannot remove container "
        f"/{ID1}: could not kill: permission denied"
    )
    run = runner(docker_ps=f"{ID1}\n{ID2}\n", docker_rm=stuck)
    result = sweep(run, DOCKER) if driven else sweep(run, NOTHING, [DOCKER])
    assert [f.step for f in result.failures] == [Step.REMOVE, Step.REMOVE]
    assert result.failures[0].container == ID1 and result.failures[0].target.driven is driven
    reason = failure_reason(result)
    assert reason is not None
    assert f"docker: exit status 1: Error response from daemon: cannot remove container /{ID1}" in reason
    assert f"(removing container {ID1} from docker, which listed it as labelled gpustack.ai/preflight=true: " in reason
    assert reason.count("docker ps -aq --filter label=gpustack.ai/preflight=true, then docker rm -f <id>") == 1


def test_garbled_listing_on_the_driven_runtime_fails_but_its_ids_are_still_removed() -> None:
    run = runner(docker_ps=f"{ID1}\nCONTAINER ID   IMAGE\n\x1b[31m{ID2}\n")
    result = sweep(run, DOCKER)
    assert [r.container for r in result.removed] == [ID1]
    (failure,) = result.failures
    assert failure.step is Step.LIST
    assert "docker's listing printed 2 line(s) that are not container ids" in failure.error
    assert "'CONTAINER ID   IMAGE'" in failure.error and "not acted on" in failure.error


def test_garbled_listing_on_another_runtime_is_ignored() -> None:
    run = runner(nerdctl_ps="nerdctl: command output changed\n")
    result = sweep(run, DOCKER, [NERDCTL])
    assert result.ok and len(result.ignored) == 1


def test_container_already_gone_is_removed_not_failed() -> None:
    run = runner(
        docker_ps=f"{ID1}\n",
        docker_rm=fail(f"docker: exit status 1: Error response from daemon: No such container: {ID1}"),
    )
    result = sweep(run, DOCKER)
    assert result.ok and [r.container for r in result.removed] == [ID1]


def test_ctr_container_that_will_not_go_names_the_task_error_too() -> None:
    run = runner(
        ctr_ls="probe-0\n",
        ctr_tasks=fail("ctr: exit status 1: ctr: failed to kill task: permission denied"),
        ctr_rm=fail("ctr: exit status 1: ctr: cannot delete a non stopped container: {running 0 0001-01-01}"),
    )
    result = sweep(run, CTR)
    (failure,) = result.failures
    assert failure.step is Step.REMOVE and failure.container == "probe-0"
    assert failure.error == (
        "ctr: exit status 1: ctr: cannot delete a non stopped container: {running 0 0001-01-01} "
        "(before it: ctr: exit status 1: ctr: failed to kill task: permission denied)"
    )
    reason = failure_reason(result)
    assert reason is not None
    assert (
        "ctr --address /run/containerd/containerd.sock --namespace gpustack-preflight containers ls -q "
        "'labels.\"gpustack.ai/preflight\"==true', then ctr --address /run/containerd/containerd.sock --namespace "
        "gpustack-preflight tasks rm -f <id> and ctr --address /run/containerd/containerd.sock --namespace "
        "gpustack-preflight containers rm <id> for each id it prints"
    ) in reason


def test_timeout_is_a_listing_failure_like_any_other() -> None:
    run = runner(docker_ps=fail("/usr/bin/docker did not answer within 30s"))
    result = sweep(run, DOCKER)
    assert result.failures[0].error == "docker did not answer within 30s"


def test_nothing_driven_is_skipped_not_failed() -> None:
    run = runner()
    result = sweep(run, NOTHING)
    assert result.ok and result.swept == () and run.calls == []
    assert result.skipped is not None and "no container runtime is on the host's PATH" in result.skipped


def test_failures_on_two_runtimes_name_both_cleanups() -> None:
    run = runner(
        docker_ps=f"{ID1}\n",
        docker_rm=fail("docker: exit status 1: denied"),
        nerdctl_ps=f"{ID2[:12]}\n",
        nerdctl_rm=fail("nerdctl: exit status 1: denied"),
    )
    reason = failure_reason(sweep(run, NERDCTL, [DOCKER]))
    assert reason is not None
    assert "nerdctl --address /run/containerd/containerd.sock --namespace gpustack-preflight ps -aq" in reason
    assert "docker ps -aq --filter label=gpustack.ai/preflight=true" in reason
    assert reason.index("nerdctl --address") < reason.index("docker ps")  # driven first


# -- which runtimes are asked -------------------------------------------------------------------------


def test_one_containerd_socket_is_asked_once() -> None:
    found = targets(NERDCTL, [CTR, DOCKER, DOCKER])
    assert [(t.runtime, t.driven) for t in found] == [(RuntimeName.NERDCTL, True), (RuntimeName.DOCKER, False)]


def node(tmp_path: Path, clis: tuple[str, ...], sockets: tuple[str, ...] = (), var_run_link: bool = False) -> HostRoot:
    (tmp_path / "etc").mkdir()
    for cli in clis:
        path = tmp_path / "usr/bin" / cli
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    for sock in sockets:
        path = tmp_path / sock.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    if var_run_link:
        (tmp_path / "var").mkdir(exist_ok=True)
        (tmp_path / "var/run").symlink_to("/run")
    return HostRoot(tmp_path)


def test_other_runtimes_beside_docker_are_containerd_at_each_socket_once(tmp_path: Path) -> None:
    host = node(
        tmp_path, ("docker", "nerdctl", "ctr"), (SOCK, "/run/k3s/containerd/containerd.sock"), var_run_link=True
    )
    found = other_runtimes(host, DOCKER)
    assert [(r.runtime, r.binary, r.socket) for r in found] == [
        (RuntimeName.NERDCTL, "/usr/bin/nerdctl", SOCK),
        (RuntimeName.NERDCTL, "/usr/bin/nerdctl", "/run/k3s/containerd/containerd.sock"),
    ]  # /var/run/containerd/containerd.sock is the first one through the link
    assert all(r.namespace == "gpustack-preflight" for r in found)


def test_other_runtimes_beside_the_driven_containerd_is_docker(tmp_path: Path) -> None:
    host = node(tmp_path, ("docker", "nerdctl"), (SOCK,))
    driven = NERDCTL.model_copy(update={"socket": "/var/run/containerd/containerd.sock"})
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("../run")
    found = other_runtimes(HostRoot(tmp_path), driven)
    assert [(r.runtime, r.socket) for r in found] == [(RuntimeName.DOCKER, None)]
    assert host.exists(SOCK)


def test_containerd_through_ctr_where_nerdctl_is_absent_and_none_without_a_socket(tmp_path: Path) -> None:
    host = node(tmp_path, ("ctr",), (SOCK,))
    assert [(r.runtime, r.socket) for r in other_runtimes(host, NOTHING)] == [(RuntimeName.CTR, SOCK)]
    (tmp_path / SOCK.lstrip("/")).unlink()
    assert other_runtimes(HostRoot(tmp_path), NOTHING) == []


# -- rows ---------------------------------------------------------------------------------------------


def test_one_unavailable_row_per_accelerator() -> None:
    rows = stale_rows(["GPU-0", "GPU-1"], "the reason")
    assert [(r.accelerator, r.capability, r.state, r.reason) for r in rows] == [
        ("GPU-0", CAPABILITY, State.UNAVAILABLE, "the reason"),
        ("GPU-1", CAPABILITY, State.UNAVAILABLE, "the reason"),
    ]
    assert CAPABILITY == "stale-container-sweep"
