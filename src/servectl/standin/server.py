"""The stand-in's HTTP server: SGLang's health, model and OpenAI-compatible endpoints, with paced tokens.

Routes (``--api-key`` guards all but ``/health`` and ``/health_generate``, like SGLang):

* ``GET /health`` - 503 while starting, 200 when ready (empty bodies).
* ``GET /health_generate`` - as ``/health``, after one token's worth of time.
* ``GET /ready`` - ``{"status": "starting"|"ready", "phase": ...}`` with 503/200.
* ``GET /v1/models``, ``GET /get_model_info``, ``GET /get_server_info``, ``GET /v1/loads`` (running requests).
* ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /generate`` - with and without ``stream``.
* ``GET|POST /release_memory_occupation``, ``GET|POST /resume_memory_occupation`` - SGLang's memory saver
  (:mod:`servectl.standin.memory`).
* ``POST /v1/messages``, ``/v1/messages/count_tokens`` (Anthropic), ``POST /api/chat``, ``/api/generate``,
  ``GET /api/tags``, ``POST /api/show`` (Ollama), ``POST /v1/embeddings``, ``/v1/rerank``, ``/v1/score``
  (:mod:`servectl.standin.families`) - each only where SGLang's route table (the route catalog) has it; a
  ``/v1/messages`` refusal is in the Anthropic envelope, as SGLang's exception handlers make it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from servectl.profile.api_routes import route_paths
from servectl.standin.families import ROUTES, FamilyEndpoints, anthropic_error
from servectl.standin.memory import (
    ADMIN_OPTIONAL_PATHS,
    LOADS_PATH,
    RELEASE_PATH,
    RESUME_PATH,
    ROUTE_METHODS,
    BodyInvalid,
    EngineDeath,
    MemoryCallError,
    body_errors,
)
from servectl.standin.pacing import ConnectionCut
from servectl.standin.state import EngineState, RequestError
from servectl.standin.transport import StandinServer

SGLANG_VERSION = "0.5.23"

Route = Callable[["StandinHandler", dict[str, Any]], None]


class StandinHandler(FamilyEndpoints):
    """Routes requests to the endpoint methods (health and info here, generation in the base class)."""

    # -- plumbing ----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self._read_body()
        route = _ROUTES.get((method, path))
        if route is None:
            allowed = any(p == path for _, p in _ROUTES)
            self._send_json(405 if allowed else 404, {"detail": "Method Not Allowed" if allowed else "Not Found"})
            return
        key = self.state.api_key
        if path in ADMIN_OPTIONAL_PATHS:  # the admin key when the server has one, not the API key
            key = self.state.admin_api_key or key
        if key and not path.startswith("/health") and self.headers.get("Authorization") != f"Bearer {key}":
            self._send_json(401, {"error": "Unauthorized"})
            return
        if path in (RELEASE_PATH, RESUME_PATH):  # FastAPI reads a GET's body too, and validates it
            self._memory_call(body, release=path == RELEASE_PATH)
            return
        parsed: dict[str, Any] = {}
        try:
            if method == "POST":
                if path in _JSON_ONLY and self.headers.get("Content-Type", "").split(";")[0].strip().lower() != (
                    "application/json"
                ):  # http_server.py validate_json_request
                    raise RequestError(400, "header.content-type: Unsupported Media Type: Only 'application/json' "
                                       "is allowed")  # fmt: skip
                try:
                    loaded = json.loads(body or b"{}")
                except (json.JSONDecodeError, UnicodeDecodeError) as err:
                    raise RequestError(400, f"Invalid JSON body: {err}") from None
                if not isinstance(loaded, dict):
                    raise RequestError(400, "The request body must be a JSON object")
                parsed = loaded
            route(self, parsed)
        except RequestError as err:
            if path.startswith("/v1/messages"):  # http_server.py: the Anthropic envelope for its routes
                self._send_json(err.status, anthropic_error(err.status, err.message))
            else:
                self._send_json(err.status, err.body())
        except ConnectionCut:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream

    # -- memory saver ------------------------------------------------------------------------------
    def release_memory(self, body: dict[str, Any]) -> None:  # the routes table's entry; _dispatch calls below
        self._memory_call(json.dumps(body).encode(), release=True)

    def resume_memory(self, body: dict[str, Any]) -> None:
        self._memory_call(json.dumps(body).encode(), release=False)

    def _memory_call(self, raw: bytes, *, release: bool) -> None:
        ledger = self.state.memory
        request_type = "ReleaseMemoryOccupationReqInput" if release else "ResumeMemoryOccupationReqInput"
        try:
            if raw.strip():
                json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            self._send_json(400, RequestError(400, f"Invalid JSON body: {err}").body())
            return
        try:
            errors = body_errors(raw, request_type)
            if errors is not None:
                raise BodyInvalid(errors)
            if ledger is None or not self.state.ready.is_set():
                raise MemoryCallError("The server is not ready yet.")
            tags = ledger.tags_of(json.loads(raw))
            if release:
                ledger.release(tags, running_requests=self.state.running_requests, log=self.state.log)
            else:
                ledger.resume(tags)
        except BodyInvalid as invalid:
            self._send_json(invalid.status, invalid.body())
            return
        except MemoryCallError as err:
            self._send_json(400, err.body())
            return
        except EngineDeath as death:
            self.state.die(death)  # the process goes; no answer, the connection closes with it
            self.close_connection = True
            return
        self._send_json(200, None)

    def loads(self, _body: dict[str, Any]) -> None:
        ledger = self.state.memory
        if ledger is None:
            self._send_json(503, {"detail": "not ready"})
            return
        self._send_json(200, ledger.loads(self.state.running_requests))

    # -- health and info ---------------------------------------------------------------------------
    def health(self, _body: dict[str, Any]) -> None:
        self._send_bytes(200 if self.state.ready.is_set() else 503, b"", "text/plain")

    def health_generate(self, _body: dict[str, Any]) -> None:
        if self.state.ready.is_set():
            time.sleep(1.0 / self.state.settings.token_rate_per_s)
        self._send_bytes(200 if self.state.ready.is_set() else 503, b"", "text/plain")

    def ready(self, _body: dict[str, Any]) -> None:
        is_ready = self.state.ready.is_set()
        self._send_json(
            200 if is_ready else 503,
            {"status": "ready" if is_ready else "starting", "phase": self.state.phase},
        )

    def models(self, _body: dict[str, Any]) -> None:
        name = self.state.served_model_name
        self._send_json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": self.state.created,
                        "owned_by": "sglang",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.state.context_length,
                    }
                ],
            },
        )

    def model_info(self, _body: dict[str, Any]) -> None:
        args = self.state.args
        self._send_json(
            200,
            {
                "model_path": args["model_path"],
                "tokenizer_path": args.get("tokenizer_path"),
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": self.state.architecture,
            },
        )

    def server_info(self, _body: dict[str, Any]) -> None:
        settings = self.state.settings
        info = dict(self.state.args)
        info.update(
            {
                "version": SGLANG_VERSION,
                "max_total_num_tokens": self.state.kv_tokens,
                "standin": {
                    "token_rate_per_s": settings.token_rate_per_s,
                    "taper": [list(point) for point in settings.taper] or None,
                    "chunk_tokens": settings.chunk_tokens,
                    "accept_length": settings.effective_accept_length if settings.reports_accept_length else None,
                    "gpu_memory": self.state.memory.report() if self.state.memory is not None else None,
                },
            }
        )
        self._send_json(200, info)


_FAMILY_ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/v1/messages"): StandinHandler.anthropic_messages,
    ("POST", "/v1/messages/count_tokens"): StandinHandler.anthropic_count_tokens,
    ("POST", "/api/chat"): StandinHandler.ollama_chat,
    ("POST", "/api/generate"): StandinHandler.ollama_generate,
    ("GET", "/api/tags"): StandinHandler.ollama_tags,
    ("POST", "/api/show"): StandinHandler.ollama_show,
    ("POST", "/v1/embeddings"): StandinHandler.embeddings,
    ("POST", "/v1/rerank"): StandinHandler.rerank,
    ("PUT", "/v1/rerank"): StandinHandler.rerank,
    ("POST", "/v1/score"): StandinHandler.score,
}
#: The paths SGLang checks for ``Content-Type: application/json`` (``dependencies=[validate_json_request]``).
_JSON_ONLY = frozenset(str(r["path"]) for r in ROUTES["routes"] if r["json_only"])

_ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): StandinHandler.health,
    ("GET", "/health_generate"): StandinHandler.health_generate,
    ("GET", "/ready"): StandinHandler.ready,
    ("GET", "/v1/models"): StandinHandler.models,
    ("GET", "/get_model_info"): StandinHandler.model_info,
    ("GET", "/get_server_info"): StandinHandler.server_info,
    ("GET", LOADS_PATH): StandinHandler.loads,
    ("POST", "/v1/chat/completions"): StandinHandler.chat_completions,
    ("POST", "/v1/completions"): StandinHandler.completions,
    ("POST", "/generate"): StandinHandler.generate,
    **{(method, RELEASE_PATH): StandinHandler.release_memory for method in ROUTE_METHODS},
    **{(method, RESUME_PATH): StandinHandler.resume_memory for method in ROUTE_METHODS},
    # served where the engine's route table has the route (a build without it answers 404)
    **{(m, p): r for (m, p), r in _FAMILY_ROUTES.items() if p in route_paths(ROUTES, m)},
}


def make_server(state: EngineState, host: str, port: int) -> StandinServer:
    """Bind the HTTP server (``OSError`` when the address is taken); run it with ``serve_forever``."""
    return StandinServer((host, port), state, StandinHandler)


__all__ = ["SGLANG_VERSION", "StandinHandler", "make_server"]
