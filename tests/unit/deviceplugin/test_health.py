"""``/readyz`` and ``/livez`` (health.py) over real HTTPS on 127.0.0.1, an ephemeral port,
a certificate generated for the test and verified by the client (nothing faked but the probe answers)."""

from __future__ import annotations

import http.client
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpustack_operator import api
from gpustack_operator.deviceplugin.manager import DeviceManager, ManagerOptions
from gpustack_operator.health import (
    CERT_FILE,
    KEY_FILE,
    HealthServer,
    HealthUsageError,
    generate_self_signed,
)

from tests.conftest import host


class Probes:
    def __init__(self) -> None:
        self.alive: tuple[bool, str] = (True, "ok")
        self.readiness: tuple[bool, str] = (False, "the device plugins are not registered with the kubelet yet")
        self.boom = False

    def live(self) -> tuple[bool, str]:
        return self.alive

    def ready(self) -> tuple[bool, str]:
        if self.boom:
            raise RuntimeError("the loop's state could not be read")
        return self.readiness


def client_context(cert_dir: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert_dir / CERT_FILE))
    return ctx  # verifies the chain and the host name (127.0.0.1 is in the certificate)


def get(server: HealthServer, cert_dir: Path, path: str, method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(cert_dir), timeout=10)
    try:
        conn.request(method, path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


@pytest.fixture
def probes() -> Probes:
    return Probes()


@pytest.fixture
def served(probes: Probes, tmp_path: Path) -> Iterator[tuple[HealthServer, Path]]:
    cert_dir = tmp_path / "certs"
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(cert_dir))
    server.start()
    try:
        yield server, cert_dir
    finally:
        server.stop()


def test_livez_and_readyz_answer_the_probes(served: tuple[HealthServer, Path], probes: Probes) -> None:
    server, cert_dir = served
    assert server.port != 0
    assert get(server, cert_dir, "/livez") == (200, "ok\n")
    assert get(server, cert_dir, "/readyz") == (503, "the device plugins are not registered with the kubelet yet\n")
    probes.readiness = (True, "ok")
    assert get(server, cert_dir, "/readyz") == (200, "ok\n")
    probes.alive = (False, "no detection pass completed for 50s (more than 3 periods)")
    assert get(server, cert_dir, "/livez") == (503, "no detection pass completed for 50s (more than 3 periods)\n")
    assert get(server, cert_dir, "/readyz?verbose=1") == (200, "ok\n")


def test_a_generated_pair_is_written_with_a_private_key(served: tuple[HealthServer, Path]) -> None:
    _, cert_dir = served
    assert (cert_dir / CERT_FILE).is_file()
    assert (cert_dir / KEY_FILE).stat().st_mode & 0o077 == 0


def test_other_paths_and_methods(served: tuple[HealthServer, Path], probes: Probes) -> None:
    server, cert_dir = served
    status, body = get(server, cert_dir, "/metrics")
    assert status == 404 and "/readyz" in body
    assert get(server, cert_dir, "/livez", "POST")[0] == 405
    assert get(server, cert_dir, "/livez", "HEAD") == (200, "")
    probes.boom = True
    assert get(server, cert_dir, "/readyz") == (503, "RuntimeError: the loop's state could not be read\n")


def test_a_silent_client_does_not_hold_the_others(served: tuple[HealthServer, Path]) -> None:
    server, cert_dir = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=10):  # connects, never says hello
        assert get(server, cert_dir, "/livez") == (200, "ok\n")


def test_connections_past_the_limit_are_closed(probes: Probes, tmp_path: Path) -> None:
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path), max_connections=1)
    server.start()
    try:
        # the silent connection is accepted first and holds the only slot; the next is closed at once
        with socket.create_connection(("127.0.0.1", server.port), timeout=10), pytest.raises(OSError):
            get(server, tmp_path, "/livez")
        assert eventually_ok(server, tmp_path)  # its slot comes back once it left
    finally:
        server.stop()


def eventually_ok(server: HealthServer, cert_dir: Path) -> bool:
    """The slot is released by the connection's own thread after the client closed: retry until then."""
    for _ in range(200):
        try:
            return get(server, cert_dir, "/livez") == (200, "ok\n")
        except OSError:
            time.sleep(0.05)
    return False


def test_an_existing_pair_is_served(probes: Probes, tmp_path: Path) -> None:
    crt, _key = generate_self_signed(tmp_path, ["127.0.0.1"])
    before = crt.read_bytes()
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path))
    server.start()
    try:
        assert get(server, tmp_path, "/livez")[0] == 200  # verified against the file we made
    finally:
        server.stop()
    assert crt.read_bytes() == before  # not regenerated


def test_without_cert_dir_a_private_pair_is_removed_on_stop(probes: Probes) -> None:
    server = HealthServer(probes, bind_address="127.0.0.1", port=0)
    server.start()
    private = server._private_dir
    assert private is not None and Path(private, CERT_FILE).is_file()
    server.stop()
    assert not Path(private).exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass


def test_one_file_without_the_other_is_refused(probes: Probes, tmp_path: Path) -> None:
    (tmp_path / CERT_FILE).write_text("-----BEGIN CERTIFICATE-----\n")
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path))
    with pytest.raises(HealthUsageError, match=r"holds tls.crt but not tls.key: put both"):
        server.start()


def test_a_pair_that_does_not_load_is_refused(probes: Probes, tmp_path: Path) -> None:
    (tmp_path / CERT_FILE).write_text("not a certificate\n")
    (tmp_path / KEY_FILE).write_text("not a key\n")
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path))
    with pytest.raises(HealthUsageError, match=r"could not be loaded .*PEM certificate"):
        server.start()


def test_a_cert_dir_that_is_a_file_is_refused(probes: Probes, tmp_path: Path) -> None:
    path = tmp_path / "certs"
    path.write_text("")
    with pytest.raises(HealthUsageError, match="is not a directory"):
        HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(path)).start()


def test_without_cryptography_the_remedy_is_named(
    probes: Probes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    server = HealthServer(probes, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path))
    with pytest.raises(HealthUsageError, match=r"'cryptography' package.*put tls.crt and tls.key there"):
        server.start()
    assert not (tmp_path / CERT_FILE).exists()


def test_a_port_in_use_names_the_flags(served: tuple[HealthServer, Path], probes: Probes, tmp_path: Path) -> None:
    taken, _ = served
    other = HealthServer(probes, bind_address="127.0.0.1", port=taken.port)
    with pytest.raises(HealthUsageError, match=r"--secure-port .* could not be bound"):
        other.start()
    assert other._private_dir is None  # its private pair is not left behind


def test_the_manager_as_the_source(tmp_path: Path) -> None:
    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia"])
    manager = DeviceManager(req, ManagerOptions())
    server = HealthServer(manager, bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path))
    server.start()
    try:
        assert get(server, tmp_path, "/livez") == (503, "the detection loop is not running\n")
        assert get(server, tmp_path, "/readyz") == (503, "no detection pass has completed yet\n")
    finally:
        server.stop()
