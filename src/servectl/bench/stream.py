"""Parse one OpenAI-style SSE stream cheaply and turn it into a :class:`RequestMeasurement`.

Pure: the caller feeds lines with their arrival times (``time.perf_counter`` seconds), so the metric math is
tested with made-up times. Token counts come only from the server's ``usage``, never from counting chunks:
speculative decoding puts several tokens in one chunk.

The work per line is one prefix test and one ``json.loads``; nothing else is kept but a few numbers.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from servectl.bench.model import FailureKind, RequestMeasurement, RequestRole

_DATA = b"data:"
_DONE = b"[DONE]"
_SPEC = b"spec_"


def _accept_length(obj: dict[str, Any], completion_tokens: int | None) -> float | None:
    """A speculative accept length, where the server reports one in the chunk.

    Looks at ``meta_info`` (SGLang's ``return_meta_info``: ``spec_accept_length`` or ``spec_verify_ct``) in
    the choice or the chunk, and at ``usage.spec_accept_length``.
    """
    places: list[Any] = [obj.get("usage"), obj.get("meta_info")]
    choices = obj.get("choices")
    if choices:
        places.append(choices[0].get("meta_info"))
    for place in places:
        if not isinstance(place, dict):
            continue
        value = place.get("spec_accept_length")
        if isinstance(value, int | float) and value > 0:
            return float(value)
        verify_ct = place.get("spec_verify_ct")
        tokens = place.get("completion_tokens", completion_tokens)
        if isinstance(verify_ct, int) and verify_ct > 0 and isinstance(tokens, int):
            return tokens / verify_ct
    return None


class StreamAccumulator:
    """Keeps what the metrics need while SSE lines arrive.

    Args:
        sent_at: When the request was sent (same clock as the arrival times).
    """

    __slots__ = (
        "_first_usage_tokens",
        "_last_usage_tokens",
        "accept_length",
        "chunks",
        "completion_tokens",
        "done",
        "finish_reason",
        "first_at",
        "last_at",
        "last_line_at",
        "malformed",
        "prompt_tokens",
        "seen_usage",
        "sent_at",
        "server_error",
        "token_chunks",
    )

    def __init__(self, *, sent_at: float) -> None:
        self.sent_at = sent_at
        self.chunks = 0
        self.token_chunks = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.last_line_at: float | None = None
        self.done = False
        self.seen_usage = False
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.accept_length: float | None = None
        self.server_error: str | None = None
        self.malformed = 0
        self._first_usage_tokens: int | None = None
        self._last_usage_tokens: int | None = None

    def feed_line(self, line: bytes, at: float) -> None:
        """Take one SSE line (without its line ending) that arrived at ``at``."""
        if not line.startswith(_DATA):
            return  # blank separator, ``: comment``, ``event:`` or ``id:``
        payload = line[5:].strip()
        self.last_line_at = at
        if payload == _DONE:
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.malformed += 1
            return
        if not isinstance(obj, dict):
            self.malformed += 1
            return
        self.chunks += 1
        error = obj.get("error")
        if error:
            self.server_error = str(error.get("message", error) if isinstance(error, dict) else error)
        usage = obj.get("usage")
        usage_tokens: int | None = None
        if isinstance(usage, dict):
            self.seen_usage = True
            prompt = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            if isinstance(prompt, int):
                self.prompt_tokens = prompt
            if isinstance(completion, int):
                usage_tokens = completion
        choices = obj.get("choices")
        carries = False
        if choices:
            choice = choices[0]
            delta = choice.get("delta") or {}
            carries = bool(
                delta.get("content")
                or delta.get("reasoning_content")
                or delta.get("reasoning")
                or delta.get("tool_calls")
            )
            if usage_tokens is not None and usage_tokens > (self.completion_tokens or 0):
                carries = True  # tokens the detokenizer held back (or special tokens) still count
            finish = choice.get("finish_reason")
            if finish:
                self.finish_reason = finish
        if usage_tokens is not None:
            self.completion_tokens = usage_tokens
        if carries:
            self.token_chunks += 1
            if self.first_at is None:
                self.first_at = at
                self._first_usage_tokens = usage_tokens
            self.last_at = at
            self._last_usage_tokens = usage_tokens
        if _SPEC in payload:  # a substring test is cheaper than walking the object for every chunk
            accept = _accept_length(obj, self.completion_tokens)
            if accept is not None:
                self.accept_length = accept

    def feed_bytes(self, data: bytes, at: float, pending: bytes = b"") -> bytes:
        """Split ``pending + data`` into lines, feed the complete ones, return the unfinished rest."""
        buf = pending + data if pending else data
        lines = buf.split(b"\n")
        feed = self.feed_line
        for line in lines[:-1]:
            if line:  # skip the blank line that ends each event
                feed(line.rstrip(b"\r") if line.endswith(b"\r") else line, at)
        return lines[-1]

    def measurement(
        self,
        *,
        role: RequestRole,
        prompt_tokens_target: int,
        prompt_words: int,
        completion_tokens_requested: int,
        fixed_length: bool,
        ended_at: float,
        sent_offset_s: float = 0.0,
        round_index: int = 0,
        stream_index: int = 0,
        client_cpu_s: float = 0.0,
        failure: FailureKind | None = None,
        error: str | None = None,
    ) -> RequestMeasurement:
        """The measurement of the stream so far, flagged when it is not a complete, full-length answer.

        Args:
            failure: A failure the caller saw (HTTP status, broken connection, timeout); it wins over the
                ones read off the stream, but a connection broken after tokens arrived is reported as an
                incomplete stream.
            error: The caller's one-line description of ``failure``.
        """
        complete = self.done and self.seen_usage and failure is None and self.server_error is None
        produced = self.completion_tokens
        failure, error = self._failure(failure, error, fixed_length, completion_tokens_requested)
        ttft = self.first_at - self.sent_at if self.first_at is not None else None
        prefill = self.prompt_tokens / ttft if ttft and ttft > 0 and self.prompt_tokens else None
        first_tokens, source = self._first_chunk_tokens()
        decode, window = self._decode_rate(first_tokens)
        return RequestMeasurement(
            role=role,
            prompt_tokens_target=prompt_tokens_target,
            prompt_words=prompt_words,
            completion_tokens_requested=completion_tokens_requested,
            round_index=round_index,
            stream_index=stream_index,
            prompt_tokens_actual=self.prompt_tokens,
            completion_tokens_produced=produced,
            ttft_s=ttft,
            prefill_tok_s=prefill,
            decode_tok_s=decode,
            decode_window_s=window,
            e2e_s=ended_at - self.sent_at,
            sent_offset_s=sent_offset_s,
            token_chunks=self.token_chunks,
            first_chunk_tokens=first_tokens,
            first_chunk_tokens_source=source,
            accept_length=self.accept_length,
            finish_reason=self.finish_reason,
            client_cpu_s=client_cpu_s,
            complete=complete,
            failure=failure,
            error=error,
        )

    def _failure(
        self, failure: FailureKind | None, error: str | None, fixed_length: bool, requested: int
    ) -> tuple[FailureKind | None, str | None]:
        """Why the stream does not count: the caller's failure, else what the stream itself shows."""
        produced = self.completion_tokens
        if failure in ("transport_error", "timeout") and self.token_chunks:
            error = f"stream broke after {self.token_chunks} token chunks ({produced or 0} tokens): {error}"
            return "incomplete_stream", error
        if failure is not None:
            return failure, error
        if self.server_error is not None:
            return "server_error", f"server error in stream: {self.server_error}"
        if not self.done:
            chunks = self.token_chunks
            return "incomplete_stream", (
                f"stream ended after {chunks} token chunks ({produced or 0} tokens) without data: [DONE]"
            )
        if not self.seen_usage:
            return "no_usage", "stream ended without a usage object; token counts are unknown"
        if fixed_length and (produced or 0) < requested:
            return "short_completion", (
                f"short completion: {produced or 0} of {requested} tokens asked "
                f"(finish_reason {self.finish_reason!r}); the server ignored min_tokens/ignore_eos"
            )
        return None, error

    def _first_chunk_tokens(self) -> tuple[int | None, Literal["usage", "estimated"] | None]:
        """Tokens in the first token chunk: from ``usage`` when the server sent it per chunk, else estimated."""
        if self.first_at is None:
            return None, None
        if self._first_usage_tokens is not None:
            return self._first_usage_tokens, "usage"
        produced = self.completion_tokens
        if produced and self.token_chunks:
            return max(1, round(produced / self.token_chunks)), "estimated"
        return None, None

    def _decode_rate(self, first_tokens: int | None) -> tuple[float | None, float | None]:
        """(decode tok/s, window s): the tokens after the first chunk over the time from it to the last one."""
        if self.first_at is None or self.last_at is None or first_tokens is None:
            return None, None
        window = self.last_at - self.first_at
        if self._first_usage_tokens is not None and self._last_usage_tokens is not None:
            decode_tokens = self._last_usage_tokens - self._first_usage_tokens
        else:
            decode_tokens = (self.completion_tokens or 0) - first_tokens
        if window > 0 and decode_tokens > 0:
            return decode_tokens / window, window
        return None, None
