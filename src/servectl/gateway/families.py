"""The API families the gateway speaks, as one table: per path, the family that owns it, and per family how a
refusal looks, how its stream is framed, where its usage is, and how a held stream is kept alive.

The proxy has one mechanism for every family (:mod:`servectl.gateway.proxy`): the alias is the body's ``model``
(OpenAI, Anthropic and Ollama all name it there), rewritten to the engine's served name on the way in and back
to the alias on the way out; keys come as ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (what the OpenAI,
Ollama and Anthropic SDKs send); scopes, budgets, holds, drains and swap on request are the same. What differs is
written here, from SGLang 0.5.23's own definitions (the route catalog, :mod:`servectl.profile.api_routes`):

* ``openai``: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, ``/v1/embeddings``,
  ``/v1/rerank``, ``/v1/score``; errors ``{"error": {"message", "type", "code"}}``; server-sent events split on a
  blank line; usage ``completion_tokens``.
* ``anthropic``: ``/v1/messages``, ``/v1/messages/count_tokens``; errors ``{"type": "error", "error": {"type",
  "message"}}`` with SGLang's status -> type map; ``event: ...`` frames; usage ``output_tokens`` (the stream's
  last ``message_delta`` carries the total); a held stream gets ``ping`` events (the protocol's keep-alive).
* ``ollama``: ``/api/chat``, ``/api/generate``, ``/api/show`` (and ``GET /api/tags``, answered by the gateway:
  the aliases the key may use); errors ``{"error": "..."}``; NDJSON split on a newline, streamed unless the body
  says ``"stream": false``; usage ``eval_count`` (SGLang sends none in a stream); a held stream gets nothing
  (NDJSON has no comment line).

Every refusal also names its reason in ``X-Servectl-Reason`` (:mod:`servectl.gateway.reject`), whatever the shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from servectl.profile.api_routes import DEFAULT_ROUTES, load_routes, load_routes_file, route_paths

OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                      404: "not_found_error", 429: "rate_limit_error"}  # fmt: skip


def _openai_error(status: int, message: str, reason: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": OPENAI_ERROR_TYPES.get(status, "server_error"), "code": reason}}


@cache
def _anthropic_types() -> dict[int, str]:
    """SGLang's status -> Anthropic error type (``ERROR_TYPE_MAP`` and its exception handler's, which adds 413)."""
    routes = load_routes(DEFAULT_ROUTES)["anthropic"]
    merged = {**routes["error_types"]["map"], **routes["http_error_types"]["map"]}
    return {int(status): kind for status, kind in merged.items()}


def anthropic_error_type(status: int) -> str:
    return _anthropic_types().get(status, "api_error")


def _anthropic_error(status: int, message: str, reason: str) -> dict[str, Any]:
    del reason  # the Anthropic envelope has no code; X-Servectl-Reason carries it
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def _ollama_error(status: int, message: str, reason: str) -> dict[str, Any]:
    del status, reason
    return {"error": message}


def _sse_error(body: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _anthropic_stream_error(message: str, reason: str) -> bytes:
    del reason
    status = 503 if "swap" in message or "cut" in message else 500
    data = json.dumps({"type": "error", "error": {"type": anthropic_error_type(status), "message": message}})
    return f"event: error\ndata: {data}\n\n".encode()


@dataclass(frozen=True)
class Family:
    """What one API family's clients expect of the gateway (see the module docstring)."""

    name: str
    error_body: Callable[[int, str, str], dict[str, Any]]  # (status, message, reason) -> the refusal's body
    stream_error: Callable[[str, str], bytes]  # (message, reason) -> an error inside a begun stream
    stream_types: tuple[str, ...]  # the content types of its streams
    separator: bytes  # where a stream's events end (the model is rewritten per whole event)
    usage_out: re.Pattern[bytes]  # the completion-token count in an answer or event
    keepalive: bytes | None  # what a held stream gets while a swap on request loads ({alias}; None: nothing)
    streams_by_default: bool = False  # Ollama streams unless the body says "stream": false

    def streamed(self, body: Mapping[str, Any]) -> bool:
        """Whether the request asks for a stream."""
        return body.get("stream") is True or (self.streams_by_default and body.get("stream", True) is not False)


def _usage(field: str) -> re.Pattern[bytes]:
    """The pattern of a family's completion-token count (``"FIELD": N``) in an answer or event."""
    return re.compile(rb'"' + field.encode() + rb'"\s*:\s*(\d+)')


def _sse_family(
    name: str,
    *,
    error_body: Callable[[int, str, str], dict[str, Any]],
    stream_error: Callable[[str, str], bytes],
    usage_field: str,
    keepalive: bytes,
) -> Family:
    """A family whose streams are server-sent events (each frame ends in a blank line)."""
    return Family(name=name, error_body=error_body, stream_error=stream_error, stream_types=("text/event-stream",),
                  separator=b"\n\n", usage_out=_usage(usage_field), keepalive=keepalive)  # fmt: skip


OPENAI = _sse_family(
    "openai",
    error_body=_openai_error,
    stream_error=lambda message, reason: _sse_error(
        {"error": {"message": message, "type": "server_error", "code": reason}}
    ),
    usage_field="completion_tokens",
    keepalive=b": servectl is swapping to serve {alias}\n\n",
)
ANTHROPIC = _sse_family(
    "anthropic",
    error_body=_anthropic_error,
    stream_error=_anthropic_stream_error,
    usage_field="output_tokens",
    keepalive=b'event: ping\ndata: {"type": "ping"}\n\n',
)
OLLAMA = Family(
    name="ollama",
    error_body=_ollama_error,
    stream_error=lambda message, reason: json.dumps({"error": message}).encode() + b"\n",
    stream_types=("application/x-ndjson",),
    separator=b"\n",
    usage_out=_usage("eval_count"),
    keepalive=None,
    streams_by_default=True,
)
FAMILIES = (OPENAI, ANTHROPIC, OLLAMA)

#: POST paths routed by the body's ``model``, and the family each belongs to.
PROXIED: dict[str, Family] = {
    "/v1/chat/completions": OPENAI,
    "/v1/completions": OPENAI,
    "/v1/responses": OPENAI,
    "/v1/embeddings": OPENAI,
    "/v1/rerank": OPENAI,
    "/v1/score": OPENAI,
    "/v1/messages": ANTHROPIC,
    "/v1/messages/count_tokens": ANTHROPIC,
    "/api/chat": OLLAMA,
    "/api/generate": OLLAMA,
    "/api/show": OLLAMA,
}
PROXIED_PATHS = tuple(PROXIED)


_ANY_MODEL = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')


@cache
def answers_model_path() -> frozenset[str]:
    """Paths whose answer names the engine's model path, not its served name (SGLang's embeddings answer
    ``tokenizer_manager.model_path``; the route catalog says which)."""
    said = load_routes(DEFAULT_ROUTES)["openai"]["embedding_response_model"]["answers"]
    return frozenset({"/v1/embeddings"} if said == "model_path" else ())


def rewrite_last_model(data: bytes, alias: str, *, tail: int = 4096) -> bytes:
    """The last ``"model": "..."`` in ``data``'s last ``tail`` bytes -> ``"model": "<alias>"`` (a whole JSON answer
    whose model field comes after its data, as an embeddings answer's does)."""
    start = max(0, len(data) - tail)
    found = list(_ANY_MODEL.finditer(data, start))
    if not found:
        return data
    last = found[-1]
    return data[: last.start()] + b'"model":' + json.dumps(alias).encode() + data[last.end() :]


def family_of(path: str) -> Family:
    """The family whose clients call ``path`` (``/api/...``: Ollama, ``/v1/messages...``: Anthropic, else OpenAI)."""
    if path in PROXIED:
        return PROXIED[path]
    if path.startswith("/api/"):
        return OLLAMA
    if path.startswith("/v1/messages"):
        return ANTHROPIC
    return OPENAI


@cache
def engine_paths(catalog: str = DEFAULT_ROUTES) -> frozenset[str]:
    """The POST paths an engine with route catalog ``catalog`` serves."""
    return frozenset(route_paths(load_routes(catalog), "POST"))


def file_paths(path: Path) -> frozenset[str]:
    """The POST paths of a route table extracted from an image (``<catalog>.routes.json``).

    Raises:
        FileRefused, OSError, ValueError: it cannot be read, or it is no route table.
    """
    return frozenset(route_paths(load_routes_file(path), "POST"))


def ollama_tags(aliases: list[str], now: str) -> dict[str, Any]:
    """``GET /api/tags`` as SGLang answers it (``ollama/serving.py::get_tags``), one entry per alias."""
    tags = load_routes(DEFAULT_ROUTES)["ollama"]["tags"]
    return {
        "models": [
            {"name": a, "model": a, "modified_at": now, "size": tags["size"], "digest": tags["digest"],
             "details": {"format": "sglang", "family": a, "parameter_size": "unknown"}}
            for a in aliases
        ]
    }  # fmt: skip


__all__ = [
    "ANTHROPIC",
    "FAMILIES",
    "OLLAMA",
    "OPENAI",
    "PROXIED",
    "PROXIED_PATHS",
    "Family",
    "answers_model_path",
    "engine_paths",
    "family_of",
    "file_paths",
    "ollama_tags",
    "rewrite_last_model",
]  # fmt: skip
