"""HTTP/1.1 GETs over a socket with the standard library's ``socket`` alone: the Docker engine's unix socket
(:mod:`servectl.adapters.docker.engine_socket`) and the health probe of ``status``.

Not ``http.client``: it imports ``email.parser`` and ``ssl`` (13 ms of the ~100 ms ``servectl status``
takes, ``python -X importtime``) to parse what here is one fixed request line and three response headers
(``Content-Length``, ``Transfer-Encoding: chunked``, ``Connection``), the framings the Docker engine (Go's
``net/http``) and the engines' ``/health`` answer in. Bodies without a length run to the close.
"""

from __future__ import annotations

import socket
import time


def connect_unix(path: str, timeout_s: float) -> socket.socket:
    """A stream socket connected to the unix socket at ``path``; a full listen backlog is waited out."""
    deadline = time.monotonic() + timeout_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:  # the listen backlog is full (EAGAIN): the server is busy, not gone
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
        except BaseException:
            sock.close()
            raise


def status_of(host: str, port: int, path: str, *, timeout_s: float) -> int:
    """The HTTP status of ``GET path`` at ``host:port`` over TCP, on a connection of its own, closed once the
    headers are read (a body, with or without its length, is not waited for).

    Raises ``OSError`` (refused, timed out, closed early, no HTTP).
    """
    sock = _connect_tcp(host, port, timeout_s)
    connection = Connection(sock)
    try:
        name = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in the Host header
        status, _, _ = connection.get(path, host=f"{name}:{port}", close=True, body=False)
        return status
    finally:
        connection.close()


def _connect_tcp(host: str, port: int, timeout_s: float) -> socket.socket:
    """``socket.create_connection``, less its one import: an ASCII name goes to getaddrinfo as bytes, which a
    str would reach through the idna codec (importing encodings.idna, stringprep and unicodedata) unchanged."""
    error: OSError | None = None
    name = host.encode("ascii") if host.isascii() else host
    for family, kind, proto, _, address in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"no address for {host}")


class Disconnected(ConnectionError):
    """The server closed a kept connection before answering (servers close idle ones): worth one fresh try."""


class Connection:
    """One connected socket carrying GETs, one at a time (a caller that shares one keeps a pool)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._file = sock.makefile("rb")
        self.fresh = True  # no request sent yet: a close before the answer is not an idle timeout

    def get(
        self, url: str, *, host: str = "localhost", close: bool = False, body: bool = True
    ) -> tuple[int, bytes, bool]:
        """``(status, body, keep)`` of ``GET url``; ``keep``: the connection may carry another request.

        ``close`` asks the server to close after answering (a one-off probe); ``body=False`` stops after the
        headers (the body is b"" and the connection must not be kept). Raises ``OSError``: the server
        cannot be reached, timed out, closed too early or answered in no HTTP; :class:`Disconnected` when a
        connection that had answered before was closed by the server before this request's answer.
        """
        request = (
            f"GET {url} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        was_fresh, self.fresh = self.fresh, False
        try:
            self._sock.sendall(request.encode("ascii"))
            line = self._file.readline(65537)
        except (BrokenPipeError, ConnectionResetError) as exc:
            if was_fresh:
                raise
            raise Disconnected(str(exc)) from exc
        if not line:
            if was_fresh:
                raise ConnectionError("the server closed the connection without answering")
            raise Disconnected("the server closed a kept connection")
        version, _, rest = line.decode("latin-1").partition(" ")
        code = rest.split(" ", 1)[0]
        if not version.startswith("HTTP/") or not code.isdigit():
            raise ConnectionError(f"not an HTTP answer: {line[:80]!r}")
        status = int(code)
        headers = self._headers()
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        if not body:
            return status, b"", False
        if status in (204, 304) or 100 <= status < 200:
            return status, b"", keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return status, self._chunked(), keep
        if "content-length" in headers:
            return status, self._exactly(int(headers["content-length"])), keep
        return status, self._file.read(), False  # no length: the body runs to the close

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        while True:
            line = self._file.readline(65537)
            if not line:
                raise ConnectionError("the server closed the connection in the middle of its headers")
            if line in (b"\r\n", b"\n"):
                return headers
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()

    def _exactly(self, size: int) -> bytes:
        data = self._file.read(size)
        if len(data) != size:
            raise ConnectionError(f"the server closed the connection after {len(data)} of {size} bytes")
        return data

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_line = self._file.readline(65537)
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ConnectionError(f"a bad chunk size: {size_line[:40]!r}") from None
            if size == 0:
                self._headers()  # the trailer, up to its blank line
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)  # the CRLF after each chunk

    def close(self) -> None:
        self._file.close()
        self._sock.close()
