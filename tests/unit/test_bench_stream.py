"""SSE parsing and per-request metric math of the bench, with made-up arrival times."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servectl.bench.stream import StreamAccumulator


def line(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode()


def token_chunk(text: str, *, completion: int | None = None, prompt: int = 100, key: str = "content") -> bytes:
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": {key: text}}]}
    if completion is not None:
        obj["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
    return line(obj)


def final_usage(completion: int, prompt: int = 100) -> bytes:
    return line({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def measure(acc: StreamAccumulator, *, asked: int, ended_at: float = 99.0, **kw: Any):  # type: ignore[no-untyped-def]
    return acc.measurement(
        role="measure",
        prompt_tokens_target=100,
        prompt_words=80,
        completion_tokens_requested=asked,
        fixed_length=True,
        ended_at=ended_at,
        **kw,
    )


def paced_stream(*, rate: float, chunk: int, total: int, ttft: float, continuous: bool) -> StreamAccumulator:
    """A stream whose first token chunk arrives at ``ttft`` and the rest every ``chunk / rate`` seconds."""
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(line({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}), 0.001)
    t = ttft
    produced = 0
    while produced < total:
        produced += chunk
        acc.feed_line(token_chunk("ab", completion=produced if continuous else None), t)
        t += chunk / rate
    acc.feed_line(line({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}), t)
    acc.feed_line(final_usage(total), t)
    acc.feed_line(b"data: [DONE]", t)
    return acc


@pytest.mark.parametrize("rate", [50.0, 500.0, 5000.0])
@pytest.mark.parametrize("chunk", [1, 4])
def test_decode_rate_is_tokens_after_first_chunk_over_token_window(rate: float, chunk: int) -> None:
    acc = paced_stream(rate=rate, chunk=chunk, total=40, ttft=0.25, continuous=True)
    m = measure(acc, asked=40)
    assert m.ok
    assert m.decode_tok_s == pytest.approx(rate, rel=1e-9)
    assert m.first_chunk_tokens == chunk
    assert m.first_chunk_tokens_source == "usage"
    assert m.token_chunks == 40 // chunk
    assert m.completion_tokens_produced == 40


def test_token_counts_come_from_usage_not_from_counting_chunks() -> None:
    # Speculative decoding: 10 chunks of 4 tokens each; counting chunks would say 10 tokens.
    acc = paced_stream(rate=100.0, chunk=4, total=40, ttft=0.1, continuous=True)
    m = measure(acc, asked=40)
    assert m.completion_tokens_produced == 40
    assert m.token_chunks == 10


def test_without_continuous_usage_first_chunk_tokens_are_estimated_from_mean_chunk_size() -> None:
    acc = paced_stream(rate=100.0, chunk=4, total=40, ttft=0.1, continuous=False)
    m = measure(acc, asked=40)
    assert m.first_chunk_tokens == 4
    assert m.first_chunk_tokens_source == "estimated"
    assert m.decode_tok_s == pytest.approx(100.0)


def test_ttft_skips_role_only_chunk_and_prefill_is_prompt_tokens_over_ttft() -> None:
    acc = paced_stream(rate=100.0, chunk=1, total=10, ttft=0.5, continuous=True)
    m = measure(acc, asked=10)
    assert m.ttft_s == pytest.approx(0.5)
    assert m.prefill_tok_s == pytest.approx(100 / 0.5)
    assert m.prompt_tokens_actual == 100


def test_reasoning_content_counts_as_a_token_chunk() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(token_chunk("think", key="reasoning_content", completion=1), 0.3)
    acc.feed_line(token_chunk("more", key="reasoning_content", completion=2), 0.4)
    acc.feed_line(final_usage(2), 0.4)
    acc.feed_line(b"data: [DONE]", 0.4)
    m = measure(acc, asked=2)
    assert m.ttft_s == pytest.approx(0.3)
    assert m.decode_tok_s == pytest.approx(1 / 0.1)


def test_a_rise_in_streamed_usage_marks_a_token_chunk_even_with_empty_text() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(token_chunk("", completion=1), 0.2)  # detokenizer held the text back
    acc.feed_line(token_chunk("ab", completion=2), 0.3)
    acc.feed_line(final_usage(2), 0.3)
    acc.feed_line(b"data: [DONE]", 0.3)
    assert measure(acc, asked=2).ttft_s == pytest.approx(0.2)


def test_stream_without_done_is_incomplete_and_not_ok() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    for i in range(1, 6):
        acc.feed_line(token_chunk("x", completion=i), 0.1 * i)
    m = measure(acc, asked=20)
    assert not m.ok
    assert not m.complete
    assert m.failure == "incomplete_stream"
    assert m.error is not None and "5 token chunks (5 tokens) without data: [DONE]" in m.error


def test_stream_without_usage_is_flagged_no_usage() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(token_chunk("x"), 0.1)
    acc.feed_line(token_chunk("y"), 0.2)
    acc.feed_line(b"data: [DONE]", 0.2)
    m = measure(acc, asked=2)
    assert m.failure == "no_usage"
    assert not m.ok


def test_fewer_tokens_than_asked_is_flagged_short_completion() -> None:
    acc = paced_stream(rate=100.0, chunk=1, total=37, ttft=0.1, continuous=True)
    m = measure(acc, asked=40)
    assert m.complete
    assert not m.ok
    assert m.failure == "short_completion"
    assert m.error is not None and "37 of 40 tokens" in m.error


def test_short_completion_is_accepted_when_fixed_length_is_off() -> None:
    acc = paced_stream(rate=100.0, chunk=1, total=37, ttft=0.1, continuous=True)
    m = acc.measurement(
        role="measure",
        prompt_tokens_target=100,
        prompt_words=80,
        completion_tokens_requested=40,
        fixed_length=False,
        ended_at=1.0,
    )
    assert m.ok
    assert m.failure is None and m.error is None
    assert m.completion_tokens_produced == 37
    assert m.decode_tok_s == pytest.approx(100.0)


def test_error_object_in_stream_is_flagged_server_error() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(token_chunk("x", completion=1), 0.1)
    acc.feed_line(line({"error": {"message": "KV cache exhausted", "code": 500}}), 0.2)
    acc.feed_line(b"data: [DONE]", 0.2)
    m = measure(acc, asked=4)
    assert m.failure == "server_error"
    assert m.error == "server error in stream: KV cache exhausted"


def test_connection_broken_after_tokens_is_reported_as_incomplete_stream() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(token_chunk("x", completion=3), 0.1)
    m = measure(acc, asked=10, failure="transport_error", error="RemoteProtocolError: incomplete chunked read")
    assert m.failure == "incomplete_stream"
    assert m.error == "stream broke after 1 token chunks (3 tokens): RemoteProtocolError: incomplete chunked read"


def test_connection_refused_before_any_token_stays_transport_error() -> None:
    m = measure(StreamAccumulator(sent_at=0.0), asked=10, failure="transport_error", error="ConnectError: refused")
    assert m.failure == "transport_error"
    assert m.ttft_s is None and m.decode_tok_s is None


def test_bytes_split_across_reads_and_crlf_line_endings_parse_the_same() -> None:
    payload = (
        token_chunk("a", completion=1)
        + b"\r\n\r\n"
        + token_chunk("b", completion=2)
        + b"\r\n\r\n"
        + final_usage(2)
        + b"\r\n\r\n"
        + b"data: [DONE]\r\n\r\n"
    )
    acc = StreamAccumulator(sent_at=0.0)
    pending = b""
    for i in range(0, len(payload), 7):
        pending = acc.feed_bytes(payload[i : i + 7], 0.1 + i / 1000, pending)
    assert pending == b""
    assert acc.done and acc.completion_tokens == 2 and acc.token_chunks == 2 and acc.malformed == 0


def test_comments_events_and_blank_lines_are_ignored_and_bad_json_is_counted() -> None:
    acc = StreamAccumulator(sent_at=0.0)
    for raw in (b": keep-alive", b"event: message", b"", b"data: {not json"):
        acc.feed_line(raw, 0.1)
    assert acc.chunks == 0 and acc.malformed == 1


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"choices": [{"index": 0, "delta": {}, "meta_info": {"spec_accept_length": 3.25}}]}, 3.25),
        (
            {"choices": [{"index": 0, "delta": {}, "meta_info": {"spec_verify_ct": 10, "completion_tokens": 40}}]},
            4.0,
        ),
        (
            {
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 40, "spec_accept_length": 2.5},
            },
            2.5,
        ),
    ],
)
def test_speculative_accept_length_is_read_where_the_server_reports_it(where: dict[str, Any], expected: float) -> None:
    acc = StreamAccumulator(sent_at=0.0)
    acc.feed_line(line(where), 0.1)
    assert acc.accept_length == pytest.approx(expected)
