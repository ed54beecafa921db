"""Every API family through the gateway, driven by its real client SDK: Anthropic Messages, Ollama and OpenAI
embeddings, with the alias rewritten both ways, keys and scopes, usage, metrics by family, and refusals in each
family's own error shape with the X-Servectl-Reason code."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from servectl.gateway.cards import ProfileCard
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import create_key
from servectl.gateway.routes import Upstream
from servectl.profile.loader import search_path
from servectl.standin.process import HostStandin, free_port
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
FAST = {"STANDIN_TOKEN_RATE": "2000", "STANDIN_CHUNK_TOKENS": "2", "STANDIN_STARTUP_DELAY_S": "0"}
HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[HostStandin, HostStandin]]:
    with (
        HostStandin(["--model-path", DEMO_MODEL, "--served-model-name", "served-demo"], env=FAST) as chat,
        HostStandin(["--model-path", DEMO_MODEL, "--is-embedding"], env=FAST) as embed,
    ):
        chat.wait_ready()
        embed.wait_ready()
        yield chat, embed


class World:
    def __init__(self, gw: GatewayThread, keys: dict[str, str]) -> None:
        self.gw, self.keys, self.url = gw, keys, gw.base_url

    def claude(self, key: str = "full") -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=self.keys[key], max_retries=0, timeout=10)

    def ollama(self, key: str = "full") -> ollama.Client:
        return ollama.Client(host=self.url, headers={"Authorization": f"Bearer {self.keys[key]}"}, timeout=10)

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics").text


@pytest.fixture
def world(tmp_path: Path, engines: tuple[HostStandin, HostStandin]) -> Iterator[World]:
    chat, embed = engines
    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "aliases": {"chat": ["demo"], "embed": ["embedder"], "other": ["elsewhere"]},
            "limits": {"rate_per_minute": 6000, "max_body_bytes": 65536},
            "swap": {"drain_s": 0.5, "hold_s": 1.0},
        }
    )
    ups = [
        Upstream(profile="demo", url=chat.base_url, served_name="served-demo", ready=True),
        Upstream(profile="embedder", url=embed.base_url, served_name=DEMO_MODEL.rsplit("/", 1)[-1], ready=True),
    ]
    path = config.keys_path({"SERVECTL_HOME": str(tmp_path)})
    keys = {
        "full": create_key(path, name="full", clock=time.time)[0],
        "scoped": create_key(path, name="scoped", aliases=["other"], clock=time.time)[0],
        "reader": create_key(path, name="reader", read_only=True, clock=time.time)[0],
    }
    with GatewayThread(config, upstreams=lambda: ups, state_dir=tmp_path) as gw:
        yield World(gw, keys)


def test_anthropic_sdk_messages_stream_count_tokens_and_a_tool_call(world: World) -> None:
    with world.claude() as client:
        message = client.messages.create(model="chat", max_tokens=5, messages=HI)  # type: ignore[arg-type]
        assert message.model == "chat" and message.usage.output_tokens == 5
        with client.messages.stream(model="chat", max_tokens=6, messages=HI) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert final.model == "chat" and len(text.split()) == 6 and final.usage.output_tokens == 6
        assert client.messages.count_tokens(model="chat", messages=HI).input_tokens == 5  # type: ignore[arg-type]
        ask = [{"role": "user", "content": "weather in Paris?"}]
        with client.messages.stream(model="chat", max_tokens=99, tools=[WEATHER], messages=ask) as stream:  # type: ignore[arg-type,list-item]
            called = stream.get_final_message()
    assert called.stop_reason == "tool_use" and called.content[-1].type == "tool_use"
    metrics = world.metrics()
    assert 'servectl_gateway_family_requests_total{family="anthropic",code="200"} 4' in metrics
    assert 'servectl_gateway_key_tokens_out_total{key="full"} ' in metrics
    tokens = next(
        line for line in metrics.splitlines() if line.startswith('servectl_gateway_key_tokens_out_total{key="full"}')
    )
    assert int(tokens.rsplit(" ", 1)[1]) >= 11  # 5 + 6 + the tool call's pieces


def test_anthropic_refusals_are_anthropic_errors_with_the_reason(world: World) -> None:
    def refused(key: str | None, body: object, *, raw: bytes | None = None) -> tuple[int, dict[str, object], str]:
        headers = {"x-api-key": world.keys[key]} if key else {}
        content = raw if raw is not None else json.dumps(body).encode()
        answer = httpx.post(f"{world.url}/v1/messages", content=content, headers=headers, timeout=10)
        return answer.status_code, answer.json(), answer.headers.get("X-Servectl-Reason", "")

    ask = {"model": "chat", "max_tokens": 5, "messages": HI}
    status, body, reason = refused(None, ask)
    assert (status, body["type"], body["error"]["type"], reason) == (401, "error", "authentication_error", "auth")  # type: ignore[index]
    assert refused("scoped", ask)[::2] == (403, "forbidden")
    assert refused("scoped", ask)[1]["error"]["type"] == "permission_error"  # type: ignore[index]
    assert refused("reader", ask)[::2] == (403, "read_only")
    status, body, reason = refused("full", {**ask, "model": "nope"})
    assert (status, body["error"]["type"], reason) == (404, "not_found_error", "unknown_alias")  # type: ignore[index]
    assert refused("full", None, raw=b"{not json")[::2] == (400, "bad_request")
    assert refused("full", {**ask, "model": 3})[::2] == (400, "bad_request")
    status, body, reason = refused("full", {**ask, "pad": "x" * 70000})
    assert (status, body["error"]["type"], reason) == (413, "request_too_large", "too_large")  # type: ignore[index]
    with world.claude("scoped") as client, pytest.raises(anthropic.PermissionDeniedError, match="not granted"):
        client.messages.create(model="chat", max_tokens=5, messages=HI)  # type: ignore[arg-type]
    with world.claude() as client:  # and the gateway goes on serving
        assert client.messages.create(model="chat", max_tokens=2, messages=HI).model == "chat"  # type: ignore[arg-type]


def test_ollama_client_chat_generate_tags_and_show_through_aliases(world: World) -> None:
    with world.ollama() as client:
        whole = client.chat(model="chat", messages=HI, stream=False, options={"num_predict": 4})
        assert whole.model == "chat" and whole.eval_count == 4
        parts = list(client.chat(model="chat", messages=HI, stream=True, options={"num_predict": 6}))
        assert parts[-1].done and {p.model for p in parts} == {"chat"}
        assert client.generate(model="chat", prompt="hi", stream=False, options={"num_predict": 3}).model == "chat"
        assert [m.model for m in client.list().models] == ["chat", "embed", "other"]
        assert client.show("chat").modelinfo is not None
    with world.ollama("scoped") as client:
        assert [m.model for m in client.list().models] == ["other"]
        with pytest.raises(ollama.ResponseError) as caught:
            client.chat(model="chat", messages=HI, stream=False)
        assert caught.value.status_code == 403 and "not granted" in caught.value.error
    answer = httpx.post(f"{world.url}/api/chat", json={"model": "chat", "messages": HI},
                        headers={"Authorization": f"Bearer {world.keys['reader']}"})  # fmt: skip
    assert answer.status_code == 403 and answer.json() == {"error": answer.json()["error"]}
    assert answer.headers["X-Servectl-Reason"] == "read_only"
    bad = httpx.post(
        f"{world.url}/api/generate", content=b"[1]", headers={"Authorization": f"Bearer {world.keys['full']}"}
    )
    assert bad.status_code == 400 and "must be a JSON object" in bad.json()["error"]
    ask = {"model": "chat", "messages": HI, "stream": False}
    for content, status, reason in (  # each bad input: one line in Ollama's {"error"} with the reason header
        (b"{not json", 400, "bad_request"),
        (json.dumps({**ask, "model": 3}).encode(), 400, "bad_request"),
        (json.dumps({**ask, "model": "nope"}).encode(), 404, "unknown_alias"),
        (json.dumps({**ask, "pad": "x" * 70000}).encode(), 413, "too_large"),
    ):
        answer = httpx.post(f"{world.url}/api/chat", content=content,
                            headers={"Authorization": f"Bearer {world.keys['full']}"})  # fmt: skip
        assert (answer.status_code, answer.headers["X-Servectl-Reason"]) == (status, reason), answer.text
        assert list(answer.json()) == ["error"] and "\n" not in answer.json()["error"]
    with world.ollama() as client:  # and the gateway goes on serving
        assert client.chat(model="chat", messages=HI, stream=False, options={"num_predict": 2}).model == "chat"
    assert 'servectl_gateway_family_requests_total{family="ollama",code="200"}' in world.metrics()


def test_openai_embeddings_name_the_alias_not_the_model_path(world: World) -> None:
    with openai.OpenAI(base_url=f"{world.url}/v1", api_key=world.keys["full"], max_retries=0) as client:
        answer = client.embeddings.create(model="embed", input=["hi", "there"])
        assert answer.model == "embed" and len(answer.data) == 2 and len(answer.data[0].embedding) == 2048
        with pytest.raises(openai.BadRequestError, match="--is-embedding"):
            client.embeddings.create(model="chat", input="hi")


def test_a_path_the_engine_lacks_is_a_404_naming_it(tmp_path: Path, engines: tuple[HostStandin, HostStandin]) -> None:
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": {"chat": ["demo"]},
                                           "auth": "none"})  # fmt: skip
    up = Upstream(profile="demo", url=engines[0].base_url, served_name="served-demo", ready=True)
    old = frozenset({"/v1/chat/completions"})  # an engine build before the Anthropic routes
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path, engine_paths=lambda _p: old) as gw:
        answer = httpx.post(f"{gw.base_url}/v1/messages", json={"model": "chat", "max_tokens": 2, "messages": HI})
        assert answer.status_code == 404 and answer.headers["X-Servectl-Reason"] == "unknown_path"
        assert answer.json()["error"]["type"] == "not_found_error"
        assert "does not serve POST /v1/messages" in answer.json()["error"]["message"]
        chat = httpx.post(f"{gw.base_url}/v1/chat/completions", json={"model": "chat", "max_tokens": 2, "messages": HI})
        assert chat.status_code == 200 and chat.json()["model"] == "chat"


def test_models_carry_the_context_window_capabilities_and_state(
    tmp_path: Path, engines: tuple[HostStandin, HostStandin]
) -> None:
    aliases = {"chat": ["demo"], "small": ["tiny"], "gone": ["elsewhere"]}
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "auth": "none", "aliases": aliases})
    ups = [Upstream(profile="demo", url=engines[0].base_url, served_name="served-demo", ready=True),
           Upstream(profile="tiny", url=engines[0].base_url, served_name="served-demo", ready=True)]  # fmt: skip
    cards = {
        "demo": ProfileCard("demo", None, tools=True, reasoning=True, vision=False, embedding=False, catalog="x"),
        "tiny": ProfileCard("tiny", 8192, tools=False, reasoning=False, vision=True, embedding=False, catalog="x"),
    }
    with GatewayThread(config, upstreams=lambda: ups, state_dir=tmp_path, cards=cards.get) as gw:
        listed = {m["id"]: m for m in httpx.get(f"{gw.base_url}/v1/models").json()["data"]}
        one = httpx.get(f"{gw.base_url}/v1/models/small").json()
        missing = httpx.get(f"{gw.base_url}/v1/models/nope")
        with openai.OpenAI(base_url=f"{gw.base_url}/v1", api_key="none") as client:
            retrieved = client.models.retrieve("chat")
    chat = listed["chat"]
    # no context_length in the profile: the engine's own max_model_len (the demo model's 202752)
    assert (chat["context_window"], chat["max_model_len"], chat["capabilities"]) == (
        202752,
        202752,
        ["tools", "reasoning"],
    )
    assert chat["servectl"] == {"profiles": ["demo"], "serving": "demo", "state": "ready"}
    assert (one["context_window"], one["capabilities"]) == (8192, ["vision"])
    assert listed["gone"]["servectl"]["state"] == "down" and listed["gone"]["context_window"] is None
    assert missing.status_code == 404 and missing.headers["X-Servectl-Reason"] == "unknown_alias"
    assert retrieved.id == "chat"


def test_a_profile_card_reads_the_window_and_capabilities_off_the_profile() -> None:
    from servectl.gateway.cards import profile_card
    from servectl.profile.validate import load_profile

    card = profile_card(
        load_profile("demo", folders=search_path(environ=os.environ)).profile
    )  # the shipped demo: 32768, GLM's tool and reasoning parsers
    assert (card.context_window, card.capabilities) == (32768, ["tools", "reasoning"])
