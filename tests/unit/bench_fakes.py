"""A scripted OpenAI-compatible streaming server for ``httpx.MockTransport``, with a scripted clock.

The server advances the clock before it yields each chunk, so the bench client stamps exact, known arrival
times: TTFT, chunk spacing (``chunk_tokens / rate_tok_s``) and so the expected decode tok/s are exact.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


class ScriptedClock:
    """A clock that only moves when the fake server says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@dataclass
class FakeOpenAIServer:
    """Behaviour knobs of the fake; every request body it saw is kept in ``bodies``."""

    clock: ScriptedClock | None = None  # None: real time (time.sleep) for concurrency tests
    model: str = "fake-model"
    models: tuple[str, ...] | None = None
    max_model_len: int | None = None
    overhead_tokens: int = 11
    tokens_per_word: float = 1.25
    rate_tok_s: float = 500.0
    chunk_tokens: int = 1
    ttft_s: float = 0.2
    continuous_usage: bool = True
    shortfall: int = 0
    shortfall_every: int = 0  # 0: every request (when shortfall > 0); n: every n-th measured request
    die_after_tokens: int | None = None
    die_every: int = 0
    status: int = 200
    status_from_request: int = 0  # answer ``status`` from this chat request number on (1-based)
    models_status: int = 200
    accept_length: float | None = None
    server_info: dict[str, Any] | None = None
    required_key: str | None = None
    reasoning: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def prompt_tokens(self, content: str) -> int:
        return self.overhead_tokens + math.ceil(len(content.split()) * self.tokens_per_word)

    def _sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(dict(request.headers))
        if self.required_key is not None and request.headers.get("authorization") != f"Bearer {self.required_key}":
            return httpx.Response(401, json={"error": "bad key"})
        if request.url.path == "/v1/models":
            if self.models_status != 200:
                return httpx.Response(self.models_status, text="nope")
            entry: dict[str, Any] = {"id": self.model, "object": "model"}
            if self.max_model_len is not None:
                entry["max_model_len"] = self.max_model_len
            data = [entry] + [{"id": m} for m in (self.models or ()) if m != self.model]
            return httpx.Response(200, json={"object": "list", "data": data})
        if request.url.path == "/get_server_info":
            if self.server_info is None:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json=self.server_info)
        assert request.url.path == "/v1/chat/completions"
        body = json.loads(request.content)
        with self._lock:
            self.bodies.append(body)
            number = len(self.bodies)
        if self.status != 200 and number >= self.status_from_request:
            return httpx.Response(self.status, json={"error": {"message": "engine overloaded"}})
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=self._stream(body, number))

    def _stream(self, body: dict[str, Any], number: int) -> Iterator[bytes]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield from self._chunks(body, number)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _chunks(self, body: dict[str, Any], number: int) -> Iterator[bytes]:
        prompt = self.prompt_tokens(body["messages"][0]["content"])
        asked = int(body["max_tokens"])
        measured = asked > 1
        total = asked
        if self.shortfall and measured and (not self.shortfall_every or number % self.shortfall_every == 0):
            total = asked - self.shortfall
        die = None
        if self.die_after_tokens is not None and measured and (not self.die_every or number % self.die_every == 0):
            die = self.die_after_tokens
        continuous = self.continuous_usage and body.get("stream_options", {}).get("continuous_usage_stats")
        base = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "model": self.model}
        # role chunk first: no token
        yield sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        self._sleep(self.ttft_s)
        produced = 0
        first = True
        while produced < total:
            if not first:
                self._sleep(self.chunk_tokens / self.rate_tok_s)
            first = False
            step = min(self.chunk_tokens, total - produced)
            produced += step
            key = "reasoning_content" if self.reasoning else "content"
            chunk: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": {key: "x" * step}}]}
            if continuous:
                chunk["usage"] = {
                    "prompt_tokens": prompt,
                    "completion_tokens": produced,
                    "total_tokens": prompt + produced,
                }
            yield sse(chunk)
            if die is not None and produced >= die:
                return  # connection ends: no finish chunk, no usage, no [DONE]
        finish: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        if self.accept_length is not None:
            finish["choices"][0]["meta_info"] = {"spec_accept_length": self.accept_length}
        yield sse(finish)
        if body.get("stream_options", {}).get("include_usage"):
            yield sse(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": produced,
                        "total_tokens": prompt + produced,
                    },
                }
            )
        yield b"data: [DONE]\n\n"


def route_run_bench(monkeypatch: Any) -> FakeOpenAIServer:
    """Route ``servectl.bench.profile_run.run_bench`` to a scripted server (100 tok/s, 2 tokens a chunk).

    The real ``run_bench`` still does the work, given the fake's transport and clock; returns the fake.
    ``monkeypatch`` is the test's ``pytest.MonkeyPatch``, which undoes the routing when the test ends.
    """
    import servectl.bench.profile_run

    fake = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=100.0, chunk_tokens=2)
    real = servectl.bench.profile_run.run_bench

    def routed(**kwargs: Any) -> Any:
        assert fake.clock is not None
        return real(**kwargs, transport=fake.transport(), clock=fake.clock)

    monkeypatch.setattr(servectl.bench.profile_run, "run_bench", routed)
    return fake
