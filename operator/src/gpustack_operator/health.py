"""``/readyz`` and ``/livez`` over HTTPS on ``--bind-address:--secure-port``: the Device Manager's
(supplement §3.5) and the worker's (§3.3), one server for both.

:class:`HealthServer` answers two paths from a :class:`HealthSource` -- the Device Manager's detection
loop (``deviceplugin/manager.py``) or the worker (``worker/run.py``); each says what live and ready mean:

* ``GET /livez`` -- 200 ``ok`` while the source says it is alive, else 503 with its reason;
* ``GET /readyz`` -- 200 ``ok`` once the source says it is ready, else 503 with its reason;
* anything else 404, a method other than GET/HEAD 405.

``name`` (the component: ``gpustack-operator-device-manager``, ``gpustack-operator-worker``) is the
generated certificate's common name and the ``Server`` header. ``generate_in_child`` writes a generated
pair from a child process (:func:`generate_in_child`: the worker, whose memory is bounded, never imports
``cryptography``).

TLS with ``tls.crt`` / ``tls.key`` from ``--cert-dir``. When the directory holds neither, a self-signed
pair is generated into it (with the ``cryptography`` package; without it a clear error names the remedy);
when ``--cert-dir`` is not given, into a private temporary directory removed on :meth:`HealthServer.stop`.
One of the two files without the other, or a pair that does not load, is an error naming the files.

Bounded: every connection has a socket timeout (handshake and request, ``timeout`` seconds), at most
``max_connections`` are served at once (the rest are closed at once), the server thread and the
per-connection threads are daemons, and :meth:`HealthServer.stop` ends it without waiting on clients.
Stdlib only (``http.server`` + ``ssl``).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
TIMEOUT = 5.0
MAX_CONNECTIONS = 16
CERT_DAYS = 365
DEFAULT_NAME = "gpustack-operator"  # each component passes its own name


class HealthUsageError(ValueError):
    """The endpoint cannot be served as asked (certificates, address, port): the message names the remedy."""


class HealthSource(Protocol):
    def live(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...


# -- certificates -----------------------------------------------------------------------------------


def generate_self_signed(directory: Path, hosts: list[str], common_name: str = DEFAULT_NAME) -> tuple[Path, Path]:
    """Write a self-signed EC P-256 pair (``tls.crt``, ``tls.key`` 0600) for ``common_name``, valid for
    ``hosts`` (IP addresses and DNS names), into ``directory``. Raises :class:`HealthUsageError` when the
    ``cryptography`` package is missing or the directory cannot be written."""
    pair = _write_pair(directory, hosts, common_name)
    _log_generated(directory)
    return pair


# Run by generate_in_child: the pair written in a child process, its error as one line on stderr.
_CHILD = """
import sys
from pathlib import Path
from gpustack_operator.health import HealthUsageError, _write_pair
try:
    _write_pair(Path(sys.argv[1]), sys.argv[3:], sys.argv[2])
except HealthUsageError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""
CHILD_TIMEOUT = 60.0


def generate_in_child(directory: Path, hosts: list[str], common_name: str = DEFAULT_NAME) -> tuple[Path, Path]:
    """:func:`generate_self_signed` in a child Python process, so that this process never imports
    ``cryptography`` (~11 MiB of resident memory that would stay for the process's life); the same
    errors, as :class:`HealthUsageError`."""
    argv = [sys.executable, "-P", "-c", _CHILD, str(directory), common_name, *hosts]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HealthUsageError(f"--cert-dir {directory}: a self-signed pair could not be generated ({exc})") from None
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise HealthUsageError(
            lines[-1] if lines else f"--cert-dir {directory}: generating a self-signed pair exited {proc.returncode}"
        )
    _log_generated(directory)
    return directory / CERT_FILE, directory / KEY_FILE


def _log_generated(directory: Path) -> None:
    log.warning(
        "no %s/%s in %s: serving /readyz and /livez with a self-signed pair generated there",
        CERT_FILE,
        KEY_FILE,
        directory,
    )


def _write_pair(directory: Path, hosts: list[str], common_name: str) -> tuple[Path, Path]:
    try:
        from cryptography import x509  # noqa: PLC0415 -- optional: only for a generated pair
        from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
        from cryptography.x509.oid import NameOID  # noqa: PLC0415
    except ImportError:
        raise HealthUsageError(
            f"--cert-dir {directory} holds no {CERT_FILE}/{KEY_FILE} and a self-signed pair needs the 'cryptography' "
            f"package, which is not installed: put {CERT_FILE} and {KEY_FILE} there (e.g. from a Secret) or "
            "install cryptography"
        ) from None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    crt, pem_key = directory / CERT_FILE, directory / KEY_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(pem_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    except OSError as exc:
        raise HealthUsageError(
            f"--cert-dir {directory}: a self-signed pair could not be written ({exc.strerror or exc}): give a "
            f"writable directory, or one holding {CERT_FILE} and {KEY_FILE}"
        ) from None
    return crt, pem_key


def tls_context(
    cert_dir: Path, hosts: list[str], common_name: str = DEFAULT_NAME, *, in_child: bool = False
) -> ssl.SSLContext:
    """The server context from ``cert_dir`` (a pair generated there when it holds neither file; by a
    child process with ``in_child``, :func:`generate_in_child`)."""
    if cert_dir.exists() and not cert_dir.is_dir():
        raise HealthUsageError(
            f"--cert-dir {cert_dir} is not a directory: name the directory holding {CERT_FILE} and {KEY_FILE}"
        )
    crt, key = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    have = [p.exists() for p in (crt, key)]
    if not any(have):
        (generate_in_child if in_child else generate_self_signed)(cert_dir, hosts, common_name)
    elif not all(have):
        present, missing = (crt, key) if have[0] else (key, crt)
        raise HealthUsageError(
            f"--cert-dir {cert_dir} holds {present.name} but not {missing.name}: "
            f"put both {CERT_FILE} and {KEY_FILE} there, or neither (a self-signed pair is then generated)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(crt), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise HealthUsageError(
            f"--cert-dir {cert_dir}: {CERT_FILE}/{KEY_FILE} could not be loaded ({exc}): give a PEM certificate and "
            "its unencrypted private key"
        ) from None
    return context


# -- the server -------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = TIMEOUT  # the socket timeout of each read and write (the server sets it per connection too)
    protocol_version = "HTTP/1.1"
    sys_version = ""

    def version_string(self) -> str:
        return self.server.name  # the Server header: the component

    def _answer(self, head_only: bool) -> None:
        path = self.path.split("?", 1)[0]
        probe = {"/livez": self.server.source.live, "/readyz": self.server.source.ready}.get(path)
        if probe is None:
            code, text = 404, f"no such path: {path[:100]!r} (try /readyz or /livez)"
        else:
            try:
                ok, reason = probe()
            except Exception as exc:  # a probe that fails says so, never a traceback to the client
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            code, text = (200, "ok") if ok else (503, reason)
        body = (text + "\n").encode("utf-8", "replace")
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(False)

    def do_HEAD(self) -> None:
        self._answer(True)

    def _refuse(self) -> None:
        body = b"only GET and HEAD\n"
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("health %s: " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        source: HealthSource,
        timeout: float,
        limit: int,
        *,
        name: str = DEFAULT_NAME,
    ) -> None:
        self.name = name
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.context = context
        self.source = source
        self.timeout_seconds = timeout
        self.slots = threading.BoundedSemaphore(limit)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: closed, the client retries
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake happens here, in the connection's own thread and under its timeout, so a
        # client that never speaks cannot hold the accept loop.
        request.settimeout(self.timeout_seconds)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            log.debug("health %s: TLS handshake failed: %s", client_address, exc)
            return
        try:
            _Handler(tls, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("health %s: connection ended with an error", client_address, exc_info=True)


class HealthServer:
    """The HTTPS endpoint (see the module docstring). :meth:`start` binds (raising
    :class:`HealthUsageError` naming the flag), :meth:`stop` ends it."""

    def __init__(
        self,
        source: HealthSource,
        *,
        name: str = DEFAULT_NAME,
        generate_in_child: bool = False,
        bind_address: str = "0.0.0.0",
        port: int = 32443,
        cert_dir: str | None = None,
        hosts: list[str] | None = None,
        timeout: float = TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.source = source
        self.name = name
        self.generate_in_child = generate_in_child  # a generated pair: written by a child process
        self.bind_address = bind_address
        self.requested_port = port
        self.cert_dir = cert_dir
        self.hosts = hosts or []
        self.timeout = timeout
        self.max_connections = max_connections
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._private_dir: str | None = None

    def _cert_dir(self) -> Path:
        if self.cert_dir is not None:
            return Path(self.cert_dir)
        self._private_dir = tempfile.mkdtemp(prefix=f"{self.name}-certs-")
        return Path(self._private_dir)

    def start(self) -> None:
        hosts = ["localhost", "127.0.0.1", "::1", *self.hosts]
        if self.bind_address not in ("0.0.0.0", "::"):
            hosts.append(self.bind_address)
        try:
            context = tls_context(self._cert_dir(), hosts, self.name, in_child=self.generate_in_child)
            try:
                self._server = _Server(
                    (self.bind_address, self.requested_port),
                    context,
                    self.source,
                    self.timeout,
                    self.max_connections,
                    name=self.name,
                )
            except OSError as exc:
                raise HealthUsageError(
                    f"--bind-address {self.bind_address} --secure-port {self.requested_port} could not be bound "
                    f"({exc.strerror or exc}): choose a free port with --secure-port, or an address of this node "
                    "with --bind-address"
                ) from None
        except HealthUsageError:
            self._remove_private()
            raise
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="health", daemon=True
        )
        self._thread.start()
        log.info("serving /readyz and /livez on https://%s:%d", self.bind_address, self.port)

    @property
    def port(self) -> int:
        """The bound port (the one the kernel chose for ``port=0``)."""
        if self._server is None:
            return self.requested_port
        return int(self._server.server_address[1])

    def stop(self, timeout: float = 5.0) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._remove_private()

    def _remove_private(self) -> None:
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None


__all__ = [
    "CERT_FILE",
    "DEFAULT_NAME",
    "KEY_FILE",
    "HealthServer",
    "HealthSource",
    "HealthUsageError",
    "generate_in_child",
    "generate_self_signed",
    "tls_context",
]
