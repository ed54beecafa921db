"""The stand-in's Anthropic, Ollama and embeddings routes, driven by the real client SDKs, against the route
catalog read off SGLang 0.5.23's source."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from servectl_ci.sglang_venv import is_built, venv_python

from servectl.profile.api_routes import extract, load_routes, route_paths
from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
ROUTES = load_routes()
FAST = {"STANDIN_TOKEN_RATE": "2000", "STANDIN_STARTUP_DELAY_S": "0"}
HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def claude(engine: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=engine, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with HostStandin(["--model-path", DEMO_MODEL, "--served-model-name", "demo-served"], env=FAST) as proc:
        proc.wait_ready()
        yield proc.base_url


def test_the_route_catalog_names_every_family_with_its_source() -> None:
    paths = route_paths(ROUTES, "POST")
    assert {"/v1/messages", "/v1/messages/count_tokens", "/api/chat", "/api/generate", "/api/show"} <= paths
    assert {"/v1/embeddings", "/v1/rerank", "/v1/score", "/v1/chat/completions", "/v1/responses"} <= paths
    assert "/api/tags" in route_paths(ROUTES, "GET")
    chat = next(r for r in ROUTES["routes"] if r["path"] == "/api/chat")
    assert chat["env"] == "SGLANG_OLLAMA_CHAT_ROUTE" and chat["source"].startswith(
        "sglang/srt/entrypoints/http_server.py:"
    )
    assert ROUTES["anthropic"]["sse_frame"]["template"] == "event: {event_type}\ndata: {data}\n\n"
    assert ROUTES["anthropic"]["http_error_types"]["map"]["503"] == "overloaded_error"
    assert ROUTES["ollama"]["stream_media_type"]["values"] == ["application/x-ndjson"]
    assert ROUTES["openai"]["embedding_response_model"]["answers"] == "model_path"


@pytest.mark.skipif(
    not is_built() and not os.environ.get("SERVECTL_REQUIRE_SGLANG_PARSER"),
    reason="the SGLang 0.5.23 parser venv is not built (CI builds it and sets SERVECTL_REQUIRE_SGLANG_PARSER)",
)
def test_the_shipped_route_catalog_is_what_the_sglang_source_says() -> None:
    code = "import importlib.util as u; print(list(u.find_spec('sglang').submodule_search_locations)[0])"
    done = subprocess.run([str(venv_python()), "-c", code], capture_output=True, text=True, check=True)
    root = Path(done.stdout.strip())
    assert extract(root.parent, ROUTES["version"]) == ROUTES, "stale: python scripts/extract_sglang_catalogs.py"


def test_anthropic_messages_answer_with_usage_and_the_requested_model(claude: anthropic.Anthropic) -> None:
    client = claude
    message = client.messages.create(model="demo-served", max_tokens=6, messages=HI)
    assert message.model == "demo-served" and message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 6)
    assert message.content[0].type == "text" and len(message.content[0].text.split()) == 6
    assert client.messages.count_tokens(model="demo-served", messages=HI).input_tokens == 5


def test_anthropic_stream_sends_sglangs_event_sequence(engine: str, claude: anthropic.Anthropic) -> None:
    body = {"model": "demo-served", "max_tokens": 3, "stream": True, "messages": HI}
    with httpx.stream("POST", f"{engine}/v1/messages", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert events == ["message_start", "content_block_start", *["content_block_delta"] * 3, "content_block_stop",
                      "message_delta", "message_stop"]  # fmt: skip
    client = claude
    with client.messages.stream(model="demo-served", max_tokens=4, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert len(text.split()) == 4 and final.usage.output_tokens == 4 and final.usage.input_tokens == 5


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_call_is_a_tool_use_block(claude: anthropic.Anthropic, stream: bool) -> None:
    client = claude
    ask = {"model": "demo-served", "max_tokens": 100, "tools": [WEATHER],
           "messages": [{"role": "user", "content": "weather in Paris?"}]}  # fmt: skip
    if stream:
        with client.messages.stream(**ask) as s:  # type: ignore[arg-type]
            message = s.get_final_message()
    else:
        message = client.messages.create(**ask)  # type: ignore[arg-type]
    assert message.stop_reason == "tool_use"
    call = message.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "example"}
    follow = client.messages.create(
        model="demo-served", max_tokens=100, tools=[WEATHER],  # type: ignore[list-item]
        messages=[*ask["messages"], {"role": "assistant", "content": message.content},  # type: ignore[list-item]
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}],
    )  # fmt: skip
    assert follow.stop_reason == "end_turn" and "sunny" in follow.content[0].text  # type: ignore[union-attr]


def test_anthropic_refusals_are_in_the_anthropic_envelope(engine: str, claude: anthropic.Anthropic) -> None:
    client = claude
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="demo-served", max_tokens=0, messages=HI)  # type: ignore[arg-type]
    assert caught.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                            "message": "max_tokens: Value error, max_tokens must be "
                                                            "positive"}}  # fmt: skip
    answer = httpx.post(f"{engine}/v1/messages", json={"model": 3})
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert answer.json()["error"]["message"] == (
        "messages: Field required; max_tokens: Field required; model: Input should be a valid string"
    )
    plain = httpx.post(f"{engine}/v1/messages", content=b"{}", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 400 and "Only 'application/json' is allowed" in plain.json()["error"]["message"]


def test_ollama_chat_generate_tags_and_show(engine: str) -> None:
    with ollama.Client(host=engine) as client:
        _ollama_calls(engine, client)


def _ollama_calls(engine: str, client: ollama.Client) -> None:
    whole = client.chat(model="demo-served", messages=HI, stream=False, options={"num_predict": 5})
    assert whole.done and whole.eval_count == 5 and whole.prompt_eval_count == 5
    assert len(whole.message.content.split()) == 5
    parts = list(client.chat(model="demo-served", messages=HI, options={"num_predict": 5}, stream=True))
    assert parts[-1].done and parts[-1].done_reason == "stop" and parts[-1].message.content == ""
    assert not any(p.done for p in parts[:-1])
    # SGLang sends the finishing chunk as the empty done line: a streamed answer lacks its last piece
    assert "".join(p.message.content for p in parts) == whole.message.content.rsplit(" ", 1)[0]
    assert len(client.generate(model="demo-served", prompt="hi", stream=False, options={"num_predict": 3})
               .response.split()) == 3  # fmt: skip
    assert client.generate(model="demo-served", prompt="  ", stream=False).done
    tags = client.list()
    assert [m.model for m in tags.models] == ["demo-served"]
    assert tags.models[0].digest == ROUTES["ollama"]["tags"]["digest"]
    shown = client.show("demo-served")
    assert shown.modelinfo is not None and shown.modelinfo["demo-served.context_length"] == 202752
    with httpx.stream("POST", f"{engine}/api/generate", json={"model": "m", "prompt": "hi"}) as response:
        assert response.headers["content-type"] == "application/x-ndjson"


def test_ollama_refuses_wrong_types(engine: str) -> None:
    answer = httpx.post(f"{engine}/api/chat", json={"model": "m", "messages": "hi"})
    assert answer.status_code == 400 and answer.json()["message"] == "messages: Input should be a valid list"


def test_embeddings_need_an_embedding_model() -> None:
    with HostStandin(["--model-path", DEMO_MODEL], env=FAST) as proc:
        proc.wait_ready()
        with (
            openai.OpenAI(base_url=f"{proc.base_url}/v1", api_key="unused", max_retries=0) as client,
            pytest.raises(openai.BadRequestError, match="--is-embedding"),
        ):
            client.embeddings.create(model="demo", input="hi")
    with HostStandin(["--model-path", DEMO_MODEL, "--is-embedding"], env=FAST) as proc:
        proc.wait_ready()
        with openai.OpenAI(base_url=f"{proc.base_url}/v1", api_key="unused", max_retries=0) as client:
            answer = client.embeddings.create(model="demo", input=["hi", "there", "hi"])
        assert [len(d.embedding) for d in answer.data] == [2048] * 3  # the demo model's hidden_size
        assert answer.data[0].embedding == answer.data[2].embedding != answer.data[1].embedding
        assert answer.model == DEMO_MODEL and answer.usage.prompt_tokens == 3
        ranked = httpx.post(f"{proc.base_url}/v1/rerank", json={"query": "a b", "documents": ["c", "a b"]}).json()
        assert [r["index"] for r in ranked] == [1, 0]
