"""The stand-in's HTTP transport: a threading server bound to the engine state, and the handler plumbing
(access log lines, JSON replies, chunked server-sent-event streams) that every endpoint uses."""

from __future__ import annotations

import json
import socket
import socketserver
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servectl.standin.state import EngineState


class StandinServer(ThreadingHTTPServer):
    """A threading HTTP server bound to the engine state; one thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: EngineState, handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.state = state
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name with getfqdn(), which can block on DNS in a container.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class HandlerBase(BaseHTTPRequestHandler):
    """Writes responses and uvicorn-style access lines; the endpoints live in subclasses."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # tokens are small writes; Nagle would hold them back
    server: StandinServer
    server_version = "uvicorn"
    sys_version = ""

    @property
    def state(self) -> EngineState:
        return self.server.state

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = int(code) if str(code).isdigit() else 0
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        self.state.log.access(client, self.requestline, status, phrase)

    def log_error(self, format: str, *args: Any) -> None:
        self.state.log.uvicorn(format % args, level="WARNING")

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self._send_bytes(status, data, "application/json", headers)

    def _send_bytes(
        self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send_event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = f"data: {text}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


__all__ = ["HandlerBase", "StandinServer"]
