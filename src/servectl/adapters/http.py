"""The Context's HTTP side: the httpx clients of the health gate and of a warm standby's engine calls, and the
``/health`` probe of ``status``.

:class:`HttpAdapter` is the interface the core takes; :class:`StandardHttp` is the real one:

* :meth:`~StandardHttp.client` opens a short-lived httpx client per use (the health gate's per start, a
  standby engine's per call), closed when the block ends: no redirects followed, a 5 s timeout that each
  request's own overrides, and TLS verification as the URL needs it (:func:`servectl.adapters.tls.verify_for`:
  httpx's own verifying context for ``https://``, an unused fail-closed one for ``http://``);
* :meth:`~StandardHttp.status_code` asks ``GET`` with the standard library's socket alone
  (:mod:`servectl.adapters.plain_http`): ``status`` imports neither httpx (and, through its command line, rich
  and click: ~100-250 ms with a client's TLS context, several times what the probes take) nor ``http.client``
  and ``ssl`` (13 ms more, ``python -X importtime``).

Nothing is imported or opened until used, so ``status``, ``--help`` and ``up --dry-run`` load no httpx.
``servectl.testing.http.FakeHttp`` answers both from a transport (a fake engine's), for tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx

#: The timeout of a client :meth:`StandardHttp.client` opens (each request of the gate and the standby engine
#: gives its own; httpx's default).
CLIENT_TIMEOUT_S = 5.0


class HttpAdapter(Protocol):
    """How the core reaches an engine over HTTP: an httpx client for a block of requests, and a bare probe."""

    def client(self, url: str) -> AbstractContextManager[httpx.Client]:
        """An httpx client for requests to ``url`` (and the paths below it), for the ``with`` block: the one
        the adapter owns, or one opened for the block and closed at its end. Requests follow no redirect."""

    def status_code(self, url: str, *, timeout_s: float) -> int | None:
        """The HTTP status of ``GET url`` within ``timeout_s``, on a connection of its own; None where none came
        (refused, timed out, closed early, no HTTP)."""


class StandardHttp:
    """The real :class:`HttpAdapter`: an httpx client opened per block, with the TLS verification of its URL, and
    probes over the standard library's socket (see the module docstring). It holds nothing open between uses."""

    @contextmanager
    def client(self, url: str) -> Iterator[httpx.Client]:
        import httpx

        from servectl.adapters.tls import verify_for

        with httpx.Client(timeout=CLIENT_TIMEOUT_S, verify=verify_for(url)) as client:
            yield client

    def status_code(self, url: str, *, timeout_s: float) -> int | None:
        from urllib.parse import urlsplit

        from servectl.adapters.plain_http import status_of

        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            return status_of(parts.hostname or "127.0.0.1", parts.port or 80, path, timeout_s=timeout_s)
        except OSError:
            return None
