"""The answers the gateway makes itself (not the engine's): status, the error body in the client's API family's
shape (OpenAI's by default; :mod:`servectl.gateway.families`) and the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from servectl.gateway.families import OPENAI

REASON_HEADER = "X-Servectl-Reason"
"""Every answer the gateway makes itself names why in this header and in the error's ``code``: a 503 is
``draining``, ``swapping``, ``maintenance``, ``swap_busy``, ``swap_failed``, ``admission_full``, ``upstream_down`` or
``keys_unreadable``; a 429 is ``rate_limited`` or ``budget_exhausted``; a 403 ``forbidden`` (alias) or
``read_only`` (README: 503 reasons)."""

#: What a client reads while the key file cannot be read (the operator reads why in ``servectl gateway status``).
KEYS_UNREADABLE = "the gateway cannot read its key file now to check this key; servectl gateway status says why"


class Reject(Exception):
    """An answer other than the engine's: status, OpenAI-style error body, error class for the metrics, and
    the reason a client reads (``code`` and :data:`REASON_HEADER`; default: the error class)."""

    def __init__(
        self, status: int, message: str, kind: str, *, reason: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers or {}
        self.reason = reason or kind

    def response(self, shape: Callable[[int, str, str], dict[str, Any]] | None = None) -> web.Response:
        """The answer, its body made by ``shape(status, message, reason)`` (a family's ``error_body``; default
        OpenAI's ``{"error": {"message", "type", "code"}}``)."""
        body = (shape or OPENAI.error_body)(self.status, self.message, self.reason)
        return web.json_response(body, status=self.status, headers={**self.headers, REASON_HEADER: self.reason})
