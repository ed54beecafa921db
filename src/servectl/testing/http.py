"""A fake of the Context's HTTP adapter (:class:`servectl.adapters.http.HttpAdapter`): the health gate, a standby
engine's calls and ``status``'s ``/health`` probes answered by an httpx transport, usually a fake engine's::

    http = FakeHttp(engine.http_transport())
    ctx = Context(docker=engine, http=http, ...)
    ...
    assert "GET http://127.0.0.1:8180/health" in http.seen
    http.close()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


class FakeHttp:
    """The HTTP adapter over one httpx client on ``transport`` (an ``httpx.MockTransport``, a fake engine's
    :meth:`~servectl.testing.docker.FakeDockerEngine.http_transport`): every client and probe is that client,
    which follows no redirect, as the real adapter's. ``close`` closes it.

    Attributes:
        seen: each request sent, ``"METHOD url"``, in order (the gate's, a standby engine's, the probes').
    """

    def __init__(self, transport: httpx.BaseTransport) -> None:
        import httpx

        self.seen: list[str] = []
        self._client = httpx.Client(transport=transport, event_hooks={"request": [self._record]})

    def _record(self, request: httpx.Request) -> None:
        self.seen.append(f"{request.method} {request.url}")

    @contextmanager
    def client(self, url: str) -> Iterator[httpx.Client]:
        """The one client (left open at the block's end)."""
        yield self._client

    def status_code(self, url: str, *, timeout_s: float) -> int | None:
        """``GET url`` through the client; None where the transport raises (refused, timed out)."""
        import httpx

        try:
            return self._client.get(url, timeout=timeout_s).status_code
        except httpx.HTTPError:
            return None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> FakeHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
