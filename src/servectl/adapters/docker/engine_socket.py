"""Reads from a local Docker engine over its unix socket: HTTP/1.1 GETs on a kept-open ``socket``.

``servectl status`` lists containers and inspects them; importing the Docker SDK for that (requests, urllib3,
certifi: ~300 ms, ``python -X importtime``) cost more than the rest of the command. The engine answers those
reads as plain JSON over ``/var/run/docker.sock``, so :class:`DockerSdkEngine
<servectl.adapters.docker.sdk.DockerSdkEngine>` reads through here when the engine is local (``DOCKER_HOST``
unset or ``unix://...``, no TLS settings) and keeps the SDK for everything else (creating, starting, logs,
one-shot runs). The paths carry no API version: the engine answers in its own current version, the one the
SDK's default ``version="auto"`` negotiates, so the documents are the ones the SDK returns.

The requests go over :mod:`servectl.adapters.plain_http` (HTTP/1.1 GETs on a kept-open socket), not
``http.client``, which imports ``email.parser`` and ``ssl`` for what ``status`` does not need.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from servectl.adapters.plain_http import Connection, Disconnected, connect_unix

DEFAULT_SOCKET = "/var/run/docker.sock"


class DockerApiError(Exception):
    """The engine answered with an error status (``status``: the HTTP status; ``explanation``: its message)."""

    def __init__(self, status: int, explanation: str) -> None:
        super().__init__(f"{status} {explanation}")
        self.status = status
        self.explanation = explanation


def local_socket(environ: Mapping[str, str]) -> str | None:
    """The unix socket of the engine ``environ`` points at, or None when it is not a local socket (a TCP or SSH
    ``DOCKER_HOST``, or TLS settings): the SDK handles those."""
    if environ.get("DOCKER_TLS_VERIFY") or environ.get("DOCKER_CERT_PATH"):
        return None
    host = environ.get("DOCKER_HOST") or ""
    if not host:
        return DEFAULT_SOCKET
    if host.startswith("unix://"):
        return host[len("unix://") :] or DEFAULT_SOCKET
    return None


class DockerSocket:
    """GET requests to the engine at unix socket ``path``, connections kept open between them.

    Safe to share between threads (the gateway lists services while a swap on request runs in a worker thread):
    a request takes an idle kept connection or opens one, and gives it back when the answer is read, so two
    threads never write to one connection (each carries one request at a time).

    Raises (from :meth:`get`): ``OSError`` when the engine cannot be reached (no socket, refused, permission,
    timeout); :class:`DockerApiError` for an error status other than 404.
    """

    def __init__(self, path: str, *, timeout_s: float) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any | None:
        """The JSON document at ``path`` (``params`` as the query), or None for 404 (no such object)."""
        url = path + ("?" + urlencode(dict(params)) if params else "")
        for attempt in (1, 2):
            connection = self._take()
            try:
                status, body, keep = connection.get(url)
                break
            except Disconnected:
                connection.close()  # the engine closed a kept connection: one fresh try
                if attempt == 2:
                    raise
            except BaseException:
                connection.close()
                raise
        if keep:
            self._give_back(connection)
        else:
            connection.close()
        if status == 404:
            return None
        if status >= 400:
            raise DockerApiError(status, _message(body))
        return json.loads(body)

    def _take(self) -> Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Connection(connect_unix(self.path, self._timeout_s))

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the kept connections (one in use by another thread closes when its answer is read)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def container_path(id_or_name: str) -> str:
    return f"/containers/{quote(id_or_name, safe='/:')}/json"


def image_path(ref: str) -> str:
    return f"/images/{quote(ref, safe='/:')}/json"


def _message(body: bytes) -> str:
    try:
        document = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:300]
    if isinstance(document, dict) and "message" in document:
        return str(document["message"]).strip()
    return str(document)[:300]
