"""The stand-in's scripted answers have SGLang's wire shape (raw HTTP, no SDK in between).

SGLang (sglang/srt/entrypoints/openai/serving_chat.py): a streamed tool call starts with a delta carrying
``id``, ``index``, ``type`` and the function ``name`` with empty ``arguments``; later deltas carry argument
text with ``id`` and ``name`` null; the finish reason is ``tool_calls``. The reasoning parser puts thinking in
``reasoning_content`` (message or delta).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from servectl.standin.behaviour import example_for, pieces
from servectl.standin.process import HostStandin
from servectl.standin.tokens import count_text_tokens

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "f"]}},
            "required": ["city", "unit"],
        },
    },
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    argv = ["--model-path", DEMO_MODEL, "--reasoning-parser", "glm45", "--tool-call-parser", "glm47"]
    with HostStandin(argv, env={"STANDIN_TOKEN_RATE": "5000", "STANDIN_CHUNK_TOKENS": "3"}) as engine:
        engine.wait_ready()
        yield engine.base_url


def _events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=10) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_streamed_tool_call_opens_with_id_and_name_then_sends_argument_text(url: str) -> None:
    messages = [{"role": "user", "content": "Weather in Oslo? Use get_weather."}]
    events = _events(url, {"messages": messages, "tools": [TOOL]})
    calls = [c for e in events for ch in e["choices"] for c in ch["delta"].get("tool_calls") or []]
    first, rest = calls[0], calls[1:]
    assert first["id"].startswith("call_") and first["index"] == 0 and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert rest and all(c["id"] is None and c["function"]["name"] is None for c in rest)
    assert json.loads("".join(c["function"]["arguments"] for c in rest)) == {"city": "example", "unit": "celsius"}
    finishes = [ch["finish_reason"] for e in events for ch in e["choices"] if ch["finish_reason"]]
    assert finishes == ["tool_calls"]


def test_thinking_on_splits_reasoning_content_from_content_and_counts_both(url: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": True}}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).json()
    message = r["choices"][0]["message"]
    assert message["reasoning_content"] and "<think>" not in message["content"]
    assert r["usage"]["completion_tokens"] == count_text_tokens(message["reasoning_content"] + message["content"])
    deltas = [ch["delta"] for e in _events(url, body) for ch in e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]


def test_max_tokens_cuts_a_scripted_answer_with_finish_length(url: str) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}, "max_tokens": 2}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 2


def test_examples_follow_the_schema_and_pieces_join_back() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "mode": {"enum": ["a", "b"]},
        },
    }
    assert example_for(schema) == {"n": 3, "tags": ["example", "example"], "mode": "a"}
    text = ' {"city": "Oslo", "n": 3}'
    assert "".join(pieces(text)) == text and len(pieces(text)) == count_text_tokens(text)


def test_a_fixed_length_request_with_thinking_off_stays_a_plain_completion(url: str) -> None:
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "chat_template_kwargs": {"enable_thinking": False},
        "max_tokens": 40,
        "ignore_eos": True,
    }
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).json()
    assert r["usage"]["completion_tokens"] == 40 and r["choices"][0]["finish_reason"] == "length"
