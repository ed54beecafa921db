"""The stand-in speaks the OpenAI API as the real openai SDK expects it: models, streaming chat with usage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")


@pytest.fixture
def client() -> Iterator[openai.OpenAI]:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "demo", "--api-key", "sk-test"]
    with HostStandin(flags, env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_CHUNK_TOKENS": "4"}) as engine:
        engine.wait_ready()
        with openai.OpenAI(base_url=f"{engine.base_url}/v1", api_key="sk-test", max_retries=0) as sdk:
            yield sdk


def test_models_list_the_served_name(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["demo"]


def test_streaming_chat_completion_reports_usage_in_the_last_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens > 0 and usage.total_tokens == usage.prompt_tokens + 12
    assert text  # the tokens arrive as content deltas
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 3  # 12 tokens in chunks of 4


def test_a_wrong_key_is_refused_with_401(client: openai.OpenAI) -> None:
    wrong = client.with_options(api_key="sk-wrong")
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
