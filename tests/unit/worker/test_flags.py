"""The worker's remaining §3.3 flags: the health endpoint (--secure-port, --bind-address, --cert-dir), the
client limits (--kube-conn-qps/-burst/-timeout) and the flags of the API not served here -- each parsed,
validated with a usage error naming it, and wired (or logged as without effect)."""

from __future__ import annotations

import argparse
import http.client
import os
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from gpustack_operator.cli import build_parser, main
from gpustack_operator.health import CERT_FILE, HealthServer, HealthUsageError, generate_in_child
from gpustack_operator.kube.bounded import REQUEST_TIMEOUT_CAP, bounded, make_worker_client, request_timeout
from gpustack_operator.kube.pods import KubeConfigError
from gpustack_operator.kube.rest import KubeRequestError, request
from gpustack_operator.settings import PciVendorMatch
from gpustack_operator.worker import apiflags
from gpustack_operator.worker.run import Worker, WorkerOptions

from tests.unit.worker.standin import WorkerStandIn

NS = "gpustack-system"
BIN = Path(sys.executable).parent


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["worker", *argv])


# -- parsing ----------------------------------------------------------------------------------------


def test_the_new_flags_have_the_spec_defaults() -> None:
    args = parse()
    assert (args.secure_port, args.bind_address, args.cert_dir) == (31443, "0.0.0.0", None)
    assert (args.kube_conn_qps, args.kube_conn_burst, args.kube_conn_timeout) == (200.0, 400, 300.0)
    assert args.disable_auths is False
    assert (args.audit_log_path, args.audit_policy_file, args.audit_webhook_config_file) == (None, None, None)
    assert args.cors_allowed_origins == []
    assert args.gopool_worker_factor == 100
    assert args.model_manager_service_account == "gpustack-operator-model-manager"
    assert apiflags.given(args) == []


def test_valid_values_parse(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: []\n")
    args = parse(
        "--secure-port=0",
        "--bind-address=::1",
        "--cert-dir",
        str(tmp_path),
        "--kube-conn-qps=2.5",
        "--kube-conn-burst=7",
        "--kube-conn-timeout=1m30s",
        "--disable-auths",
        "--audit-log-path",
        str(tmp_path / "audit.log"),
        "--audit-policy-file",
        str(policy),
        "--audit-webhook-config-file",
        str(policy),
        "--cors-allowed-origins",
        r"^https://a\.example$,//localhost(:|$)",
        "--cors-allowed-origins=.*",
        "--gopool-worker-factor=8",
        "--model-manager-service-account=mm.sa-1",
    )
    assert (args.secure_port, args.bind_address, args.cert_dir) == (0, "::1", str(tmp_path))
    assert (args.kube_conn_qps, args.kube_conn_burst, args.kube_conn_timeout) == (2.5, 7, 90.0)
    assert args.cors_allowed_origins == [r"^https://a\.example$", "//localhost(:|$)", ".*"]
    assert args.disable_auths is True and args.gopool_worker_factor == 8
    assert apiflags.given(args) == [flag for _, flag, _ in apiflags.UNSERVED]  # every one differs from its default
    assert parse("--audit-log-path=-").audit_log_path == "-"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--secure-port", "70000"], "--secure-port"),
        (["--secure-port", "https"], "--secure-port"),
        (["--bind-address", "example.com"], "--bind-address"),
        (["--cert-dir", ""], "--cert-dir"),
        (["--kube-conn-qps", "0"], "--kube-conn-qps"),
        (["--kube-conn-qps", "fast"], "--kube-conn-qps"),
        (["--kube-conn-burst", "1.5"], "--kube-conn-burst"),
        (["--kube-conn-burst", "-3"], "--kube-conn-burst"),
        (["--kube-conn-timeout", "soon"], "--kube-conn-timeout"),
        (["--kube-conn-timeout", "0s"], "--kube-conn-timeout"),
        (["--disable-auths", "maybe"], "--disable-auths"),
        (["--audit-policy-file", "/nonexistent/policy.yaml"], "--audit-policy-file"),
        (["--audit-webhook-config-file", "/"], "--audit-webhook-config-file"),
        (["--audit-log-path", "/nonexistent/dir/audit.log"], "--audit-log-path"),
        (["--audit-log-path", "/"], "--audit-log-path"),
        (["--cors-allowed-origins", "https://(a|b"], "--cors-allowed-origins"),
        (["--gopool-worker-factor", "0"], "--gopool-worker-factor"),
        (["--gopool-worker-factor", "many"], "--gopool-worker-factor"),
        (["--model-manager-service-account", "Model_Manager"], "--model-manager-service-account"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["worker", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {named}" in err, err
    assert "Traceback" not in err


def test_bad_regex_and_missing_file_say_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--cors-allowed-origins", "ok,https://(a|b"])
    assert "'https://(a|b' is not a regular expression" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["worker", "--audit-policy-file", "/nonexistent/policy.yaml"])
    assert "does not exist: name an existing file" in capsys.readouterr().err


# -- the client ---------------------------------------------------------------------------------------


def test_qps_burst_and_timeout_reach_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(kubeconfig: str | None, server: str | None, **kw: Any) -> Any:
        seen.update(kw, server=server)
        raise KubeConfigError("stopped by the test")

    monkeypatch.setattr("gpustack_operator.kube.bounded.make_api_client", fake)
    argv = ["worker", "--kube-api-server", "http://127.0.0.1:1", "--kube-conn-qps=7", "--kube-conn-burst=9"]
    assert main(argv) == 2
    assert seen == {"qps": 7.0, "burst": 9, "server": "http://127.0.0.1:1"}
    assert isinstance(seen["burst"], int)


def test_the_client_is_rate_limited(api: WorkerStandIn) -> None:
    client = make_worker_client(None, api.url, qps=10.0, burst=1, conn_timeout=300.0)
    assert (client.limiter.qps, client.limiter.burst) == (10.0, 1)  # type: ignore[attr-defined]
    started = time.monotonic()
    for _ in range(6):
        request(client, "GET", "/api/v1/nodes")
    assert time.monotonic() - started >= 0.45  # 1 token at once, then 5 at 10/s


def test_the_request_timeout_bounds_every_call() -> None:
    assert request_timeout(300.0) == REQUEST_TIMEOUT_CAP == 10.0
    assert request_timeout(2.0) == 2.0
    assert bounded(None, 2.0) == 2.0
    assert bounded(10.0, 2.0) == 2.0
    assert bounded(1.0, 2.0) == 1.0
    assert bounded((10.0, 330.0), 2.0) == (2.0, 330.0)  # a watch: its connect bounded, not its long poll


def test_a_silent_server_times_out_at_kube_conn_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = make_worker_client(None, url, qps=200.0, burst=400, conn_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(KubeRequestError):
            request(client, "GET", "/api/v1/nodes")  # its own default is 10 s
        assert time.monotonic() - started < 5.0


# -- health -------------------------------------------------------------------------------------------


def get(port: int, cert_dir: Path, path: str) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(cert_dir / CERT_FILE))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode().strip()
    finally:
        conn.close()


def wait_for(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s")


def test_the_worker_is_the_health_source(api: WorkerStandIn, tmp_path: Path) -> None:
    api.add_node("n1")
    options = WorkerOptions(
        namespace=NS, vendors=[PciVendorMatch(vendor="10de")], identity="w1", leader_election=False, backoff_max=0.2
    )
    worker = Worker(kubernetes.client.ApiClient(api.configuration()), options)
    health = HealthServer(
        worker, name="gpustack-operator-worker", bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path)
    )
    health.start()
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        assert get(health.port, tmp_path, "/livez") == (200, "ok")
        assert get(health.port, tmp_path, "/readyz") == (
            503,
            "startup has not applied the CustomResourceDefinitions yet",
        )
        worker.start()
        thread.start()
        wait_for(lambda: get(health.port, tmp_path, "/readyz") == (200, "ok"))
        worker.stop()
        thread.join(10)
        assert get(health.port, tmp_path, "/livez") == (503, "the worker is stopping")
    finally:
        worker.stop()
        health.stop()


def test_a_cache_not_listed_is_not_ready(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
    options = WorkerOptions(namespace=NS, vendors=[], identity="w1", leader_election=False, backoff_max=0.2)
    worker = Worker(kubernetes.client.ApiClient(kubernetes.client.Configuration(host=url)), options)
    worker._crds_applied.set()  # startup is not what this test is about: the caches are
    worker.nodes.start()
    try:
        wait_for(lambda: worker.nodes.last_error)
        ok, why = worker.ready()
        assert not ok and why.startswith("the Nodes cache has not listed yet (the watch of /api/v1/nodes failed")
    finally:
        worker.nodes.stop()


class Lines:
    """A child's stderr read on a thread, so the test can wait for one line while the child runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        threading.Thread(target=lambda: [self.lines.put(line) for line in stream], daemon=True).start()

    def wait(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s: {''.join(self.seen)[-3000:]}")


def test_the_worker_process_serves_health_on_a_free_port(api: WorkerStandIn, tmp_path: Path) -> None:
    api.add_node("n1")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env["KUBERNETES_POD_NAMESPACE"] = NS
    argv = [str(BIN / "gpustack-operator"), "worker", "--kube-api-server", api.url, "--disable-applications=*"]
    argv += ["--secure-port=0", "--bind-address=127.0.0.1", "--cert-dir", str(tmp_path), "--gopool-worker-factor=8"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = Lines(proc)
    try:
        note = lines.wait(r"WARNING .*not served by this product.*have no effect \((.*)\)")
        assert note.group(1) == "--gopool-worker-factor given"
        port = int(
            lines.wait(r"WARNING .*--secure-port 0: /readyz and /livez are served on https://127\.0\.0\.1:(\d+)").group(
                1
            )
        )
        assert port != 0
        assert get(port, tmp_path, "/livez") == (200, "ok")  # the generated certificate verifies
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "/cryptography/" not in maps  # the pair was written by a child: its ~11 MiB never loaded here
        wait_for(lambda: get(port, tmp_path, "/readyz") == (200, "ok"))
        assert get(port, tmp_path, "/metrics")[0] == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as again:  # the port is released at exit
        again.bind(("127.0.0.1", port))


def test_a_port_in_use_exits_2_naming_the_flags(api: WorkerStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = ["worker", "--kube-api-server", api.url, "--disable-applications=*", "--bind-address=127.0.0.1"]
        assert main([*argv, f"--secure-port={port}"]) == 2
    err = capsys.readouterr().err
    assert f"--secure-port {port} could not be bound" in err and "Traceback" not in err
    assert api.count("POST") == 0  # nothing started: the CRDs are applied only after the endpoint is up


def test_a_pair_the_child_cannot_write_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(HealthUsageError, match=r"--cert-dir .*/file/certs: a self-signed pair could not be written"):
        generate_in_child(blocker / "certs", ["localhost"])
    crt, key = generate_in_child(tmp_path / "certs", ["localhost", "127.0.0.1"], "gpustack-operator-worker")
    assert crt.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert key.stat().st_mode & 0o777 == 0o600
