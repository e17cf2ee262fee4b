"""kube/rest.py: one bounded JSON round trip -- what a server that answers badly turns into (a named
``KubeRequestError``, never a traceback), and the ``Status`` message reader over any body."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from gpustack_operator.kube.nodestatus import NodeCapacityWriter
from gpustack_operator.kube.pods import make_api_client
from gpustack_operator.kube.rest import KubeRequestError, _status_message, request
from hypothesis import given
from hypothesis import strategies as st

ANSWERS = {
    "/text": (200, b"not json at all"),
    "/list": (200, b"[1, 2]"),
    "/empty": (200, b""),
    "/teapot": (418, b"<html>short and stout</html>"),
    "/status": (403, b'{"kind":"Status","message":"nodes \\"a\\" is forbidden: User cannot get","code":403}'),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        if self.path == "/slow":
            threading.Event().wait(3)
        code, body = ANSWERS.get(self.path, (200, b"{}"))
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/text", 200, "the answer is not JSON"),
        ("/list", 200, "the answer is not a JSON object"),
        ("/teapot", 418, "HTTP 418: <html>short and stout</html>"),
        ("/status", 403, 'HTTP 403: nodes "a" is forbidden: User cannot get'),
    ],
)
def test_a_bad_answer_is_a_named_error(url: str, path: str, status: int, words: str) -> None:
    with pytest.raises(KubeRequestError) as err:
        request(make_api_client(None, url), "GET", path, timeout=2)
    assert err.value.status == status
    assert str(err.value).startswith(f"GET {path} at {url}: ") and words in str(err.value)


def test_an_empty_answer_is_an_empty_object(url: str) -> None:
    assert request(make_api_client(None, url), "GET", "/empty", timeout=2) == {}


def test_a_server_that_does_not_answer_is_cut_at_the_timeout(url: str) -> None:
    with pytest.raises(KubeRequestError) as err:
        request(make_api_client(None, url), "GET", "/slow", timeout=0.5)
    assert err.value.status == 0 and "GET /slow" in str(err.value)


def test_an_empty_node_name_is_refused() -> None:
    with pytest.raises(ValueError, match="node name is empty"):
        NodeCapacityWriter(make_api_client(None, "http://127.0.0.1:1"), "", ["nvidia.com/gpu"])


@given(st.binary(max_size=2000))
def test_the_status_message_of_any_body_is_a_short_line(body: bytes) -> None:
    message = _status_message(body)
    assert isinstance(message, str) and len(message) <= 300
