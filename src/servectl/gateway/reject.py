"""The answers the gateway makes itself (not the engine's): status, OpenAI-style error body and the reason."""

from __future__ import annotations

from aiohttp import web

REASON_HEADER = "X-Servectl-Reason"
"""Every answer the gateway makes itself names why in this header and in the error's ``code``: a 503 is
``draining``, ``swapping``, ``swap_busy``, ``swap_failed``, ``admission_full``, ``upstream_down`` or
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

    def response(self) -> web.Response:
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error"}.get(self.status, "server_error")  # fmt: skip
        body = {"error": {"message": self.message, "type": kind, "code": self.reason}}
        return web.json_response(body, status=self.status, headers={**self.headers, REASON_HEADER: self.reason})
