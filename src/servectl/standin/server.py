"""The stand-in's HTTP server: SGLang's health, model and OpenAI-compatible endpoints, with paced tokens.

Routes (``--api-key`` guards all but ``/health`` and ``/health_generate``, like SGLang):

* ``GET /health`` - 503 while starting, 200 when ready (empty bodies).
* ``GET /health_generate`` - as ``/health``, after one token's worth of time.
* ``GET /ready`` - ``{"status": "starting"|"ready", "phase": ...}`` with 503/200.
* ``GET /v1/models``, ``GET /get_model_info``, ``GET /get_server_info``.
* ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /generate`` - with and without ``stream``.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from servectl.standin.behaviour import Reply, pieces, scripted_reply, wants_script
from servectl.standin.logs import EngineLog
from servectl.standin.settings import StandinSettings
from servectl.standin.tokens import (
    chunk_deadlines,
    chunk_sizes,
    content_text,
    count_chat_prompt_tokens,
    count_text_tokens,
    generated_text,
    verify_count,
)

#: Completion length when a request sets no ``max_tokens`` (the simulated model then stops at EOS).
NATURAL_COMPLETION_TOKENS = 16
#: ``max_new_tokens`` default of SGLang's native ``/generate``.
GENERATE_DEFAULT_MAX_NEW_TOKENS = 128
SGLANG_VERSION = "0.5.23"


@dataclass
class EngineState:
    """What the HTTP side shares with the startup sequence."""

    settings: StandinSettings
    args: dict[str, Any]
    log: EngineLog
    context_length: int
    architecture: str = "LlamaForCausalLM"
    eos_token_id: int | None = None
    kv_tokens: int = 0
    phase: str = "init"
    ready: threading.Event = field(default_factory=threading.Event)
    created: int = field(default_factory=lambda: int(time.time()))
    _running: int = 0
    _generations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def served_model_name(self) -> str:
        return str(self.args.get("served_model_name") or self.args["model_path"])

    @property
    def api_key(self) -> str | None:
        key = self.args.get("api_key")
        return str(key) if key else None

    def request_started(self) -> int:
        with self._lock:
            self._running += 1
            return self._running

    def next_generation(self) -> int:
        """Count a generation request; its 1-based number (for ``STANDIN_ERROR_EVERY``)."""
        with self._lock:
            self._generations += 1
            return self._generations

    def request_finished(self) -> None:
        with self._lock:
            self._running -= 1

    @property
    def running_requests(self) -> int:
        with self._lock:
            return self._running


class RequestError(Exception):
    """A request SGLang would refuse: HTTP status and message."""

    def __init__(self, status: int, message: str, error_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {
            "object": "error",
            "message": self.message,
            "type": self.error_type,
            "param": None,
            "code": self.status,
        }


@dataclass(frozen=True)
class GenerationPlan:
    """How many tokens a request gets and how it ends."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "length" or "stop"
    cut_after_tokens: int | None  # STANDIN_DIE_AFTER_TOKENS: drop the connection after this many


def plan_generation(
    state: EngineState,
    *,
    prompt_tokens: int,
    max_tokens: int | None,
    min_tokens: int,
    ignore_eos: bool,
) -> GenerationPlan:
    """Decide the completion length for one request, or refuse it like SGLang.

    ``max_tokens`` set: exactly that many (finish ``length``). Unset: :data:`NATURAL_COMPLETION_TOKENS` (at
    least ``min_tokens``; finish ``stop``), or the rest of the context with ``ignore_eos``.
    ``STANDIN_COMPLETION_SHORTFALL`` then removes tokens (finish ``stop``).

    Raises:
        RequestError: the prompt, or prompt plus ``max_tokens``, does not fit the context length.
    """
    context = state.context_length
    if prompt_tokens >= context:
        raise RequestError(
            400,
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context} tokens).",
        )
    if max_tokens is not None:
        if prompt_tokens + max_tokens > context:
            total = prompt_tokens + max_tokens
            raise RequestError(
                400,
                f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input messages "
                f"and {max_tokens} tokens for the completion. Please reduce the number of tokens in the "
                "input messages or the completion to fit within the limit.",
            )
        count, finish = max_tokens, "length"
    elif ignore_eos:
        count, finish = context - prompt_tokens, "length"
    else:
        count, finish = min(max(NATURAL_COMPLETION_TOKENS, min_tokens), context - prompt_tokens), "stop"
    shortfall = state.settings.completion_shortfall_tokens
    if shortfall:
        count, finish = max(0, count - shortfall), "stop"
    return GenerationPlan(prompt_tokens, count, finish, state.settings.die_after_tokens)


class ConnectionCut(Exception):
    """``STANDIN_DIE_AFTER_TOKENS`` was reached: drop the connection without finishing the response."""


def paced_chunks(state: EngineState, plan: GenerationPlan) -> Iterator[tuple[int, int]]:
    """Yield ``(first_token_index, token_count)`` per chunk, each at its absolute deadline.

    Sleeps for the prefill first (``STANDIN_PREFILL_RATE``), then paces chunks of ``STANDIN_CHUNK_TOKENS`` at
    ``STANDIN_TOKEN_RATE`` (see :func:`servectl.standin.tokens.chunk_deadlines`). Logs SGLang's prefill and
    decode batch lines. Raises :class:`ConnectionCut` once ``cut_after_tokens`` tokens have been yielded.
    """
    settings = state.settings
    start = time.perf_counter()
    if settings.prefill_rate_per_s > 0:
        _sleep_until(start + plan.prompt_tokens / settings.prefill_rate_per_s)
    running = state.running_requests
    usage = plan.prompt_tokens / max(1, state.kv_tokens)
    state.log.tp(
        f"Prefill batch, #new-seq: 1, #new-token: {plan.prompt_tokens}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running - 1}, #queue-req: 0, #pending-token: 0, "
    )
    sizes = chunk_sizes(plan.completion_tokens, settings.chunk_tokens)
    cut = plan.cut_after_tokens
    if cut is not None and cut < plan.completion_tokens:
        sizes = chunk_sizes(cut, settings.chunk_tokens)
    deadlines = chunk_deadlines(time.perf_counter(), sizes, settings.token_rate_per_s)
    interval = max(1, int(state.args.get("decode_log_interval") or 40))
    emitted = 0
    for index, (size, deadline) in enumerate(zip(sizes, deadlines, strict=True)):
        _sleep_until(deadline)
        yield emitted, size
        emitted += size
        if (index + 1) % interval == 0:
            _log_decode_batch(state, plan.prompt_tokens + emitted)
    if cut is not None and cut < plan.completion_tokens:
        raise ConnectionCut()


def _log_decode_batch(state: EngineState, tokens_in_use: int) -> None:
    settings = state.settings
    accept = f"accept len: {settings.effective_accept_length:.2f}, " if settings.reports_accept_length else ""
    state.log.tp(
        f"Decode batch, #running-req: {state.running_requests}, #token: {tokens_in_use}, "
        f"token usage: {tokens_in_use / max(1, state.kv_tokens):.2f}, {accept}cuda graph: True, "
        f"gen throughput (token/s): {settings.token_rate_per_s:.2f}, #queue-req: 0, "
    )


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def usage_body(state: EngineState, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The ``usage`` object; with speculative figures when chunks are larger than one token.

    Speculative figures: ``completion_tokens_details`` (accepted/rejected draft tokens, as SGLang reports
    them) plus the extra fields ``spec_accept_length`` and ``spec_verify_ct`` (as in SGLang's ``meta_info``).
    """
    reported = completion_tokens + state.settings.usage_skew_tokens  # STANDIN_USAGE_SKEW misreports on purpose
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + reported,
        "completion_tokens": reported,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    spec = spec_figures(state, completion_tokens)
    if spec:
        accepted = completion_tokens - spec["spec_verify_ct"]
        drafts = int(state.args.get("speculative_num_draft_tokens") or 0) or max(
            state.settings.chunk_tokens, round(spec["spec_accept_length"] + 0.4999)
        )
        usage["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": max(0, spec["spec_verify_ct"] * (drafts - 1) - accepted),
        }
        usage.update(spec)
    return usage


def spec_figures(state: EngineState, completion_tokens: int) -> dict[str, Any]:
    """``spec_accept_length``/``spec_verify_ct`` as in SGLang's ``meta_info``; empty without speculation."""
    if not state.settings.reports_accept_length:
        return {}
    accept = state.settings.effective_accept_length
    return {"spec_accept_length": accept, "spec_verify_ct": verify_count(completion_tokens, accept)}


# -- request parsing ---------------------------------------------------------------------------------------


def _int_field(body: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(400, f"{name} must be a non-negative integer, got {value!r}")
        return value
    return None


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool]:
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise RequestError(400, "stream_options must be an object")
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


# -- HTTP ----------------------------------------------------------------------------------------------------


class StandinServer(ThreadingHTTPServer):
    """A threading HTTP server bound to the engine state; one thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: EngineState) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.state = state
        super().__init__(address, StandinHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name with getfqdn(), which can block on DNS in a container.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


Route = Callable[["StandinHandler", dict[str, Any]], None]


class StandinHandler(BaseHTTPRequestHandler):
    """Routes requests to the endpoint methods below; logs uvicorn-style access lines."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # tokens are small writes; Nagle would hold them back
    server: StandinServer
    server_version = "uvicorn"
    sys_version = ""

    @property
    def state(self) -> EngineState:
        return self.server.state

    # -- plumbing ----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = int(code) if str(code).isdigit() else 0
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        self.state.log.access(client, self.requestline, status, phrase)

    def log_error(self, format: str, *args: Any) -> None:
        self.state.log.uvicorn(format % args, level="WARNING")

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self._read_body()
        route = _ROUTES.get((method, path))
        if route is None:
            allowed = any(p == path for _, p in _ROUTES)
            self._send_json(405 if allowed else 404, {"detail": "Method Not Allowed" if allowed else "Not Found"})
            return
        key = self.state.api_key
        if key and not path.startswith("/health") and self.headers.get("Authorization") != f"Bearer {key}":
            self._send_json(401, {"error": "Unauthorized"})
            return
        parsed: dict[str, Any] = {}
        if method == "POST":
            try:
                loaded = json.loads(body or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                self._send_json(400, RequestError(400, f"Invalid JSON body: {err}").body())
                return
            if not isinstance(loaded, dict):
                self._send_json(400, RequestError(400, "The request body must be a JSON object").body())
                return
            parsed = loaded
        try:
            route(self, parsed)
        except RequestError as err:
            self._send_json(err.status, err.body())
        except ConnectionCut:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream

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

    def _require_ready(self) -> None:
        if not self.state.ready.is_set():
            raise RequestError(
                503,
                f"The server is not ready yet (still starting: {self.state.phase}).",
                "ServiceUnavailableError",
            )
        every = self.state.settings.error_every
        number = self.state.next_generation()
        if every is not None and number % every == 0:
            raise RequestError(
                500, f"Internal server error (STANDIN_ERROR_EVERY={every}, request {number})", "InternalServerError"
            )

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
                    "chunk_tokens": settings.chunk_tokens,
                    "accept_length": settings.effective_accept_length if settings.reports_accept_length else None,
                },
            }
        )
        self._send_json(200, info)

    # -- generation --------------------------------------------------------------------------------
    def chat_completions(self, body: dict[str, Any]) -> None:
        self._require_ready()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
            raise RequestError(400, "messages must be a non-empty list of message objects")
        prompt_tokens = count_chat_prompt_tokens(messages)
        if wants_script(body):
            reasoning_parser = self.state.args.get("reasoning_parser")
            reply = scripted_reply(
                body,
                settings=self.state.settings,
                reasoning_parser=str(reasoning_parser) if reasoning_parser else None,
                prompt_tokens=prompt_tokens,
            )
            self._send_reply(body, reply, prompt_tokens)
            return
        self._generate_openai(body, prompt_tokens, chat=True)

    def _send_reply(self, body: dict[str, Any], reply: Reply, prompt_tokens: int) -> None:
        """Send a scripted reply (see :mod:`servectl.standin.behaviour`), paced like any completion.

        The reply is cut into one-token pieces; ``max_tokens`` cuts it short (finish ``length``).
        """
        stream = bool(body.get("stream"))
        max_tokens = _int_field(body, "max_completion_tokens", "max_tokens")
        plan_generation(self.state, prompt_tokens=prompt_tokens, max_tokens=max_tokens, min_tokens=0, ignore_eos=False)
        items = _reply_pieces(reply, streamed=stream)
        finish = reply.finish_reason
        if max_tokens is not None and len(items) > max_tokens:
            items, finish = items[:max_tokens], "length"
        plan = GenerationPlan(prompt_tokens, len(items), finish, self.state.settings.die_after_tokens)
        meta = {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": str(body.get("model") or self.state.served_model_name),
        }
        include_usage, continuous = _stream_options(body)
        calls = [f"call_{uuid.uuid4().hex[:24]}" for _ in reply.tool_calls]
        self.state.request_started()
        try:
            if stream:
                self._stream_reply(plan, meta, items, calls, include_usage=include_usage, continuous=continuous)
                return
            for _ in paced_chunks(self.state, plan):
                pass
            message: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(t for k, t, _ in items if k == "content"),
                "reasoning_content": "".join(t for k, t, _ in items if k == "reasoning") or None,
                "tool_calls": None,
            }
            tool_calls = [
                {
                    "id": calls[i],
                    "index": i,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": "".join(t for k, t, j in items if k == "args" and j == i),
                    },
                }
                for i, call in enumerate(reply.tool_calls)
                if any(k == "name" and j == i for k, _, j in items)
            ]
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            self._send_json(
                200,
                {
                    "id": meta["id"],
                    "object": "chat.completion",
                    "created": meta["created"],
                    "model": meta["model"],
                    "choices": [choice],
                    "usage": usage_body(self.state, plan.prompt_tokens, plan.completion_tokens),
                },
            )
        finally:
            self.state.request_finished()

    def _stream_reply(
        self,
        plan: GenerationPlan,
        meta: dict[str, Any],
        items: list[tuple[str, str, int]],
        calls: list[str],
        *,
        include_usage: bool,
        continuous: bool,
    ) -> None:
        """Stream a scripted reply: one event per run of reasoning, content or tool-call pieces in a chunk."""

        def event(delta: dict[str, Any], finish: str | None, done: int) -> dict[str, Any]:
            usage = usage_body(self.state, plan.prompt_tokens, done) if include_usage and continuous else None
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            return {
                "id": meta["id"],
                "object": "chat.completion.chunk",
                "created": meta["created"],
                "model": meta["model"],
                "choices": [choice],
                "usage": usage,
            }

        def delta_of(kind: str, text: str, index: int) -> dict[str, Any]:
            if kind == "reasoning":
                return {"reasoning_content": text}
            if kind == "content":
                return {"content": text}
            if kind == "name":
                # sglang/srt/entrypoints/openai/serving_chat.py::_process_tool_call_stream: the first delta
                # carries id and name, later ones only argument text (id and name null)
                function: dict[str, Any] = {"name": text, "arguments": ""}
                return {"tool_calls": [{"id": calls[index], "index": index, "type": "function", "function": function}]}
            function = {"name": None, "arguments": text}
            return {"tool_calls": [{"id": None, "index": index, "type": "function", "function": function}]}

        self._start_stream()
        self._send_event(event({"role": "assistant", "content": ""}, None, 0))
        done = 0
        for first, count in paced_chunks(self.state, plan):
            done = first + count
            runs: list[tuple[str, str, int]] = []
            for kind, text, index in items[first:done]:
                if runs and runs[-1][0] == kind and runs[-1][2] == index and kind != "name":
                    runs[-1] = (kind, runs[-1][1] + text, index)
                else:
                    runs.append((kind, text, index))
            for kind, text, index in runs:
                self._send_event(event(delta_of(kind, text, index), None, done))
        self._send_event(event({}, plan.finish_reason, done))
        if include_usage:
            self._send_event(
                {**event({}, None, done), "choices": [], "usage": usage_body(self.state, plan.prompt_tokens, done)}
            )
        self._send_event("[DONE]")
        self._end_stream()

    def completions(self, body: dict[str, Any]) -> None:
        self._require_ready()
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt_tokens = count_text_tokens(prompt[0])
        elif isinstance(prompt, str):
            prompt_tokens = count_text_tokens(prompt)
        else:
            raise RequestError(400, "prompt must be a string, a list of strings or a list of token ids")
        self._generate_openai(body, prompt_tokens, chat=False)

    def _generate_openai(self, body: dict[str, Any], prompt_tokens: int, *, chat: bool) -> None:
        max_tokens = _int_field(body, "max_completion_tokens", "max_tokens") if chat else _int_field(body, "max_tokens")
        if max_tokens is None and not chat:
            max_tokens = 16  # OpenAI/SGLang completions default
        plan = plan_generation(
            self.state,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            min_tokens=_int_field(body, "min_tokens") or 0,
            ignore_eos=bool(body.get("ignore_eos")),
        )
        include_usage, continuous = _stream_options(body)
        meta = {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": str(body.get("model") or self.state.served_model_name),
        }
        matched_stop = self.state.eos_token_id if plan.finish_reason == "stop" else None
        self.state.request_started()
        try:
            if body.get("stream"):
                self._stream_openai(
                    plan,
                    meta,
                    chat=chat,
                    include_usage=include_usage,
                    continuous=continuous,
                    matched_stop=matched_stop,
                )
            else:
                for _ in paced_chunks(self.state, plan):
                    pass
                text = generated_text(0, plan.completion_tokens)
                choice: dict[str, Any] = {"index": 0}
                if chat:
                    choice["message"] = {
                        "role": "assistant",
                        "content": text,
                        "reasoning_content": None,
                        "tool_calls": None,
                    }
                else:
                    choice["text"] = text
                choice.update({"logprobs": None, "finish_reason": plan.finish_reason, "matched_stop": matched_stop})
                self._send_json(
                    200,
                    {
                        "id": meta["id"],
                        "object": "chat.completion" if chat else "text_completion",
                        "created": meta["created"],
                        "model": meta["model"],
                        "choices": [choice],
                        "usage": usage_body(self.state, plan.prompt_tokens, plan.completion_tokens),
                    },
                )
        finally:
            self.state.request_finished()

    def _stream_openai(
        self,
        plan: GenerationPlan,
        meta: dict[str, Any],
        *,
        chat: bool,
        include_usage: bool,
        continuous: bool,
        matched_stop: int | None,
    ) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choice: dict[str, Any], usage: dict[str, Any] | None) -> dict[str, Any]:
            return {
                "id": meta["id"],
                "object": obj,
                "created": meta["created"],
                "model": meta["model"],
                "choices": [choice] if choice else [],
                "usage": usage,
            }

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0}
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                c["delta"] = delta
            else:
                c["text"] = text or ""
            c.update({"logprobs": None, "finish_reason": finish, "matched_stop": matched_stop if finish else None})
            return c

        def running_usage(done: int) -> dict[str, Any] | None:
            return usage_body(self.state, plan.prompt_tokens, done) if include_usage and continuous else None

        self._start_stream()
        if chat:
            self._send_event(chunk(choice("", None, role=True), running_usage(0)))
        done = 0
        for first, count in paced_chunks(self.state, plan):
            done = first + count
            self._send_event(chunk(choice(generated_text(first, count), None), running_usage(done)))
        self._send_event(chunk(choice(None if chat else "", plan.finish_reason), running_usage(done)))
        if include_usage:
            self._send_event(chunk({}, usage_body(self.state, plan.prompt_tokens, done)))
        self._send_event("[DONE]")
        self._end_stream()

    def generate(self, body: dict[str, Any]) -> None:
        """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``, ``meta_info``."""
        self._require_ready()
        if isinstance(body.get("input_ids"), list):
            prompt_tokens = len(body["input_ids"])
        elif isinstance(body.get("text"), str):
            prompt_tokens = count_text_tokens(body["text"])
        else:
            raise RequestError(400, "Either text or input_ids should be provided.")
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, Mapping):
            raise RequestError(400, "sampling_params must be an object")
        max_new = _int_field(sampling, "max_new_tokens")
        plan = plan_generation(
            self.state,
            prompt_tokens=prompt_tokens,
            max_tokens=GENERATE_DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new,
            min_tokens=_int_field(sampling, "min_new_tokens") or 0,
            ignore_eos=bool(sampling.get("ignore_eos")),
        )
        rid = uuid.uuid4().hex
        started = time.perf_counter()

        def meta_info(done: int, finished: bool) -> dict[str, Any]:
            finish: dict[str, Any] | None = None
            if finished:
                finish = (
                    {"type": "length", "length": done}
                    if plan.finish_reason == "length"
                    else {"type": "stop", "matched": self.state.eos_token_id}
                )
            info: dict[str, Any] = {
                "id": rid,
                "finish_reason": finish,
                "prompt_tokens": plan.prompt_tokens,
                "completion_tokens": done,
                "cached_tokens": 0,
                "e2e_latency": round(time.perf_counter() - started, 6),
            }
            info.update(spec_figures(self.state, done))
            return info

        self.state.request_started()
        try:
            if body.get("stream"):
                self._start_stream()
                done = 0
                for first, count in paced_chunks(self.state, plan):
                    done = first + count
                    finished = done == plan.completion_tokens
                    self._send_event({"text": generated_text(0, done), "meta_info": meta_info(done, finished)})
                if plan.completion_tokens == 0:
                    self._send_event({"text": "", "meta_info": meta_info(0, True)})
                self._send_event("[DONE]")
                self._end_stream()
            else:
                for _ in paced_chunks(self.state, plan):
                    pass
                self._send_json(
                    200,
                    {
                        "text": generated_text(0, plan.completion_tokens),
                        "meta_info": meta_info(plan.completion_tokens, True),
                    },
                )
        finally:
            self.state.request_finished()


def _reply_pieces(reply: Reply, *, streamed: bool) -> list[tuple[str, str, int]]:
    """``(kind, text, tool index)`` per completion token: reasoning, content, then each call's name and args."""
    items: list[tuple[str, str, int]] = [("reasoning", t, -1) for t in pieces(reply.reasoning or "")]
    items += [("content", t, -1) for t in pieces(reply.content)]
    for index, call in enumerate(reply.tool_calls):
        items.append(("name", call.name, index))
        args = call.streamed_arguments if streamed and call.streamed_arguments is not None else call.arguments
        items += [("args", t, index) for t in pieces(args)]
    return items


_ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): StandinHandler.health,
    ("GET", "/health_generate"): StandinHandler.health_generate,
    ("GET", "/ready"): StandinHandler.ready,
    ("GET", "/v1/models"): StandinHandler.models,
    ("GET", "/get_model_info"): StandinHandler.model_info,
    ("GET", "/get_server_info"): StandinHandler.server_info,
    ("POST", "/v1/chat/completions"): StandinHandler.chat_completions,
    ("POST", "/v1/completions"): StandinHandler.completions,
    ("POST", "/generate"): StandinHandler.generate,
}


def make_server(state: EngineState, host: str, port: int) -> StandinServer:
    """Bind the HTTP server (``OSError`` when the address is taken); run it with ``serve_forever``."""
    return StandinServer((host, port), state)


__all__ = [
    "EngineState",
    "GenerationPlan",
    "RequestError",
    "StandinServer",
    "content_text",
    "make_server",
    "plan_generation",
]
