"""The qualification client: the openai SDK, as real clients use it, with each request timed and costed.

Every request returns an :class:`Exchange` (never raises for an HTTP or connection error: a gate judges it).
Streaming responses are assembled the way an SDK user does: content and ``reasoning_content`` deltas joined,
tool-call deltas merged by ``index`` (the first carries ``id`` and the function name, later ones append
argument text). The client's own CPU per request (``time.thread_time``, i.e. SDK parsing and JSON work, not the
wait for the server) is recorded next to the request's wall time, so that evidence shows the client did not
distort the timings it reports.

``openai`` is imported when a client is made, not when servectl starts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai

    from servectl.bench.settings import ApiKey

#: Sent as the key when the server has none (the SDK insists on one; SGLang without --api-key ignores it).
NO_KEY = "servectl-no-key"


@dataclass(frozen=True)
class AssembledCall:
    """One tool call as the client sees it: id, function name and the arguments text."""

    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
class Exchange:
    """One request and what came back.

    Attributes:
        error: ``HTTP 500: ...`` or ``APIConnectionError: ...``; None when the server answered.
        latency_s: From sending to the last byte (the whole stream).
        ttft_s: To the first streamed chunk that carried text or a tool call (streams only).
        usage: ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` when reported.
        client_cpu_s: CPU the calling thread spent on this request (SDK, parsing), not the wait.
    """

    error: str | None
    latency_s: float
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[AssembledCall, ...] = ()
    finish_reason: str | None = None
    usage: Mapping[str, int] | None = None
    ttft_s: float | None = None
    chunks: int = 0
    client_cpu_s: float = 0.0
    model: str | None = None  # the response's ``model``: who answered

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class QualifyClient:
    """A thin, timed wrapper around ``openai.OpenAI`` for chat completions."""

    url: str
    model: str
    timeout_s: float  # the suite's request_timeout_s (its one home)
    temperature: float | None  # the suite's
    api_key: ApiKey | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    requests: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    _sdk: openai.OpenAI | None = field(default=None, repr=False)

    @property
    def sdk(self) -> openai.OpenAI:
        if self._sdk is None:
            import openai

            key = self.api_key.reveal() if self.api_key is not None else NO_KEY
            self._sdk = openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=self.timeout_s)
        return self._sdk

    def close(self) -> None:
        if self._sdk is not None:
            self._sdk.close()

    def list_models(self) -> list[tuple[str, int | None]]:
        """``(id, max_model_len)`` of every served model (SGLang adds ``max_model_len`` to each entry)."""
        entries = self.sdk.models.list().data
        out = []
        for entry in entries:
            max_len = getattr(entry, "max_model_len", None)
            out.append((entry.id, max_len if isinstance(max_len, int) and max_len > 0 else None))
        return out

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int,
        stream: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Exchange:
        """Send one chat completion (streamed with ``include_usage`` when ``stream``) and assemble the answer."""
        import openai

        kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if tools:
            kwargs["tools"] = list(tools)
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        body = {**self.extra_body, **(extra_body or {})}
        if body:
            kwargs["extra_body"] = body
        cpu0, t0 = time.thread_time(), time.perf_counter()
        try:
            if stream:
                kwargs["stream_options"] = {"include_usage": True}
                exchange = self._read_stream(self.sdk.chat.completions.create(stream=True, **kwargs), t0)
            else:
                exchange = self._read_response(self.sdk.chat.completions.create(**kwargs), t0)
        except openai.APIStatusError as err:
            exchange = Exchange(error=f"HTTP {err.status_code}: {_message(err)}", latency_s=time.perf_counter() - t0)
        except openai.APIError as err:
            exchange = Exchange(error=f"{type(err).__name__}: {err}", latency_s=time.perf_counter() - t0)
        cpu = time.thread_time() - cpu0
        self.requests += 1
        self.wall_s += exchange.latency_s
        self.client_cpu_s += cpu
        return _with_cpu(exchange, cpu)

    @staticmethod
    def _read_response(response: Any, t0: float) -> Exchange:
        latency = time.perf_counter() - t0
        if not response.choices:
            return Exchange(error="the response has no choices", latency_s=latency)
        choice = response.choices[0]
        message = choice.message
        calls = tuple(
            AssembledCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in message.tool_calls or ()
            if getattr(c, "function", None) is not None
        )
        return Exchange(
            error=None,
            latency_s=latency,
            content=message.content or "",
            reasoning=getattr(message, "reasoning_content", None) or "",
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            usage=_usage(response.usage),
            model=getattr(response, "model", None),
        )

    @staticmethod
    def _read_stream(stream: Any, t0: float) -> Exchange:
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage = None
        ttft: float | None = None
        chunks = 0
        model = None
        with stream:
            for chunk in stream:
                chunks += 1
                model = model or getattr(chunk, "model", None)
                if chunk.usage is not None:
                    usage = _usage(chunk.usage)
                for choice in chunk.choices or ():
                    delta = choice.delta
                    got = False
                    if delta.content:
                        content.append(delta.content)
                        got = True
                    thought = getattr(delta, "reasoning_content", None)
                    if thought:
                        reasoning.append(thought)
                        got = True
                    for call in delta.tool_calls or ():
                        entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": []})
                        entry["id"] = entry["id"] or call.id
                        if call.function is not None:
                            entry["name"] = entry["name"] or call.function.name
                            if call.function.arguments:
                                entry["arguments"].append(call.function.arguments)
                        got = True
                    if got and ttft is None:
                        ttft = time.perf_counter() - t0
                    if choice.finish_reason:
                        finish = choice.finish_reason
        return Exchange(
            error=None,
            latency_s=time.perf_counter() - t0,
            content="".join(content),
            reasoning="".join(reasoning),
            tool_calls=tuple(
                AssembledCall(id=c["id"], name=c["name"], arguments="".join(c["arguments"]))
                for _, c in sorted(calls.items())
            ),
            finish_reason=finish,
            usage=usage,
            ttft_s=ttft,
            chunks=chunks,
            model=model,
        )


def _usage(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    out = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int):
            out[key] = value
    return out


def _message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, Mapping) and body.get("message"):
        return str(body["message"])[:300]
    return str(getattr(err, "message", err))[:300]


def _with_cpu(exchange: Exchange, cpu_s: float) -> Exchange:
    from dataclasses import replace

    return replace(exchange, client_cpu_s=cpu_s)
