"""``status``'s own /health probe: the Context's standard HTTP adapter over ``servectl.adapters.plain_http``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servectl.adapters.http import StandardHttp
from servectl.service.services import HEALTH_PROBE_TIMEOUT_S


def status_of(url: str) -> int | None:
    """What ``status`` asks of a running service at ``url``."""
    return StandardHttp().status_code(f"{url}/health", timeout_s=HEALTH_PROBE_TIMEOUT_S)


class _Health(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:
        self.send_response(self.code if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_the_probe_reads_the_status_and_none_where_nothing_answers(server: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _Health.code = 200
    assert status_of(url) == 200
    _Health.code = 503
    assert status_of(url) == 503
    server.shutdown()
    server.server_close()
    assert status_of(url) is None  # refused


def test_an_answer_that_never_ends_its_body_is_still_healthy_at_once() -> None:
    # HTTP/1.1, no Content-Length, the connection left open: only the status line and headers are read
    import socket
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nstreaming")

    threading.Thread(target=serve, daemon=True).start()
    started = time.monotonic()
    assert status_of(f"http://127.0.0.1:{port}") == 200
    assert time.monotonic() - started < 0.9  # not the probe's 1 s timeout
    for conn in held:
        conn.close()
    listener.close()
