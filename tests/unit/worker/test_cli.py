"""``gpustack-operator worker``: its flags and a run against the stand-in stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from gpustack_operator.cli import build_parser, main
from gpustack_operator.worker.cli import parse_duration

from tests.unit.worker.standin import WorkerStandIn


def test_the_flags_parse_with_the_spec_defaults() -> None:
    args = build_parser().parse_args(["worker", "--kubeconfig", "/k"])
    assert args.kubeconfig == "/k"
    assert args.leader_election is True
    assert args.kube_leader_election_id == "worker.gpustack.ai"
    assert (args.kube_leader_lease, args.kube_leader_renew_timeout) == (15.0, 10.0)
    assert args.informer_cache_resync_period == 3600.0
    assert args.disable_applications == []
    args = build_parser().parse_args(
        ["worker", "--leader-elect=false", "--disable-applications", "*", "--kube-leader-lease", "1m30s"]
    )
    assert args.leader_election is False and args.disable_applications == ["*"] and args.kube_leader_lease == 90.0


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15.0), ("500ms", 0.5), ("1h30m", 5400.0), ("2", 2.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--kube-leader-lease", "soon"],
        ["worker", "--kube-leader-lease", "0s"],
        ["worker", "--disable-applications", "kueue,helm"],
        ["worker", "--leader-elect", "maybe"],
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_bad_values_are_one_line_not_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--manufacturer", "acme", "--kube-api-server", "http://127.0.0.1:1"]) == 2
    assert "unknown manufacturer 'acme'" in capsys.readouterr().err
    assert main(["worker", "--kube-leader-lease", "5s", "--kube-leader-renew-timeout", "10s"]) == 2
    assert "--kube-leader-renew-timeout" in capsys.readouterr().err
    assert main(["worker"]) == 2  # no API server named anywhere
    assert "no API server" in capsys.readouterr().err


ENTRY = "import sys; from gpustack_operator.entry import main; sys.exit(main())"


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


def test_a_worker_process_runs_and_stops_on_sigterm(api: WorkerStandIn) -> None:
    api.add_node("n1")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env["KUBERNETES_POD_NAMESPACE"] = "gpustack-system"
    env["KUBERNETES_POD_NAME"] = "worker-0"
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "worker", "--kube-api-server", api.url, "--secure-port=0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while api.obj("nodefeatures", "n1-gpustack-worker", "gpustack-system") is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no NodeFeature within 20s"
            time.sleep(0.05)
        lease = api.obj("leases", "worker.gpustack.ai", "gpustack-system")
        assert lease is not None and lease["spec"]["holderIdentity"] == "worker-0"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert api.obj("leases", "worker.gpustack.ai", "gpustack-system")["spec"]["holderIdentity"] == ""  # type: ignore[index]
