"""The gateway's /ui dashboard in front of a stand-in on this host: the page, its key check, and the JSON it
reads (aliases, services, cards, recent requests without prompt text, history, redacted log tail)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from servectl.adapters.state import History
from servectl.gateway.config import GatewayConfig
from servectl.gateway.dashboard import DashboardSources
from servectl.gateway.keys import create_key
from servectl.gateway.routes import Upstream
from servectl.standin.process import HostStandin, free_port
from servectl.testing.fakes import FakeGpuInventory
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
ALIASES = {"chat": ["demo"], "other": ["elsewhere"]}
ENGINE_KEY = "engine-secret-value-123"
PROMPT = "the secret plan is purple elephants"


@pytest.fixture(scope="module")
def engine() -> Iterator[HostStandin]:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "served-demo"]
    with HostStandin(flags, env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_CHUNK_TOKENS": "4"}) as eng:
        eng.wait_ready()
        yield eng


class World:
    def __init__(self, gw: GatewayThread, keys: dict[str, str], log_calls: list[tuple[str, int]]) -> None:
        self.gw, self.keys, self.log_calls = gw, keys, log_calls

    def get(self, path: str, key: str | None = "admin") -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys[key]}"} if key else {}
        return httpx.get(self.gw.base_url + path, headers=headers, timeout=10)

    def chat(self, key: str = "admin", **extra: object) -> httpx.Response:
        body = {"model": "chat", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 6, **extra}
        headers = {"Authorization": f"Bearer {self.keys[key]}"}
        return httpx.post(self.gw.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=10)


def _world(tmp_path: Path, engine: HostStandin, gpus: FakeGpuInventory) -> Iterator[World]:
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": ALIASES})
    env = {"SERVECTL_HOME": str(tmp_path)}
    keys = {
        "admin": create_key(config.keys_path(env), name="admin", clock=time.time)[0],
        "scoped": create_key(config.keys_path(env), name="scoped", aliases=["other"], clock=time.time)[0],
        "watch": create_key(config.keys_path(env), name="watch", read_only=True, clock=time.time)[0],
    }
    History(tmp_path, clock=time.time).record(
        {"event": "up", "profile": "demo", "startup_s": 12.5, "container_id": "c1"}
    )
    History(tmp_path, clock=time.time).record(
        {"event": "swap", "profile": "elsewhere", "replaced": "demo", "startup_s": 3.0}
    )
    calls: list[tuple[str, int]] = []

    def logs(profile: str, tail: int) -> list[str]:
        calls.append((profile, tail))
        return [
            "INFO server_args=ServerArgs(api_key='sk-abc12345', port=30000)",
            f"token {ENGINE_KEY} seen",
            "download with hf_" + "Q7" * 15 + " and sk-" + "k" * 20,
        ]

    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True, api_key=ENGINE_KEY)
    sources = DashboardSources(
        history=History(tmp_path, warn=lambda _line: None, clock=time.time).readable_events,
        gpus=gpus.snapshot,
        logs=logs,
    )
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path, dashboard=sources) as gw:
        yield World(gw, keys, calls)


@pytest.fixture
def world(tmp_path: Path, engine: HostStandin) -> Iterator[World]:
    yield from _world(tmp_path, engine, FakeGpuInventory.scenario("foreign_pid", card=1, mib=20_480))


def test_the_page_and_its_script_carry_no_data_and_a_strict_policy(world: World) -> None:
    page = world.get("/ui", key=None)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/ui/dashboard.js"' in page.text and "chat" not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    script = world.get("/ui/dashboard.js", key=None)
    assert script.status_code == 200 and "sessionStorage" in script.text and "Bearer" in script.text
    assert "http://" not in script.text and "https://" not in script.text  # nothing from the network
    assert world.get("/ui/dashboard.css", key=None).headers["content-type"].startswith("text/css")


def test_the_data_needs_a_valid_key(world: World) -> None:
    for path in ("/ui/api/overview", "/ui/api/requests", "/ui/api/history", "/ui/api/logs?profile=demo"):
        answer = world.get(path, key=None)
        assert answer.status_code == 401 and "no key" in answer.json()["error"]["message"], path
    bad = httpx.get(world.gw.base_url + "/ui/api/overview", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert bad.status_code == 401 and "unknown key" in bad.json()["error"]["message"]


def test_the_overview_shows_aliases_services_and_per_card_memory(world: World) -> None:
    o = world.get("/ui/api/overview").json()
    assert o["key"] == "admin"
    chat = next(a for a in o["aliases"] if a["alias"] == "chat")
    assert chat == {
        "alias": "chat",
        "profiles": ["demo"],
        "profile": "demo",
        "state": "ready",
        "in_flight": 0,
        "held": 0,
    }
    assert [a["alias"] for a in o["aliases"]] == ["chat", "other"]
    assert o["services"] == [
        {"profile": "demo", "served_name": "served-demo", "url": o["services"][0]["url"], "state": "ready"}
    ]
    assert ENGINE_KEY not in str(o)
    cards = o["gpus"]["devices"]
    assert o["gpus"]["available"] and [c["index"] for c in cards] == [0, 1]
    assert cards[1]["memory_used_bytes"] == 20_480 * 2**20 and cards[0]["memory_used_bytes"] == 0
    assert cards[0]["memory_total_bytes"] == 97_887 * 2**20


def test_without_nvml_the_cards_are_unknown_with_the_drivers_reason(tmp_path: Path, engine: HostStandin) -> None:
    for w in _world(tmp_path, engine, FakeGpuInventory.scenario("no_driver")):
        gpus = w.get("/ui/api/overview").json()["gpus"]
        assert gpus["available"] is False and gpus["devices"] == []
        assert gpus["problem"].startswith("NVML unavailable: NVML library")


def test_recent_requests_keep_time_alias_key_name_status_latency_tokens_and_no_prompt(world: World) -> None:
    assert world.chat().status_code == 200
    assert world.chat(stream=True, stream_options={"include_usage": True}).status_code == 200
    assert world.chat("scoped").status_code == 403
    rows = world.get("/ui/api/requests").json()["requests"]
    assert [(r["alias"], r["key"], r["status"]) for r in rows] == [
        ("chat", "scoped", 403), ("chat", "admin", 200), ("chat", "admin", 200)
    ]  # fmt: skip
    streamed, whole = rows[1], rows[2]
    assert whole["tokens_out"] == 6 and streamed["tokens_out"] == 6
    assert whole["latency_ms"] > 0 and whole["ttfb_ms"] is not None and rows[0]["ttfb_ms"] is None
    assert set(whole) == {"at", "path", "alias", "key", "status", "latency_ms", "ttfb_ms", "tokens_out"}
    text = world.get("/ui/api/requests").text
    assert PROMPT not in text and world.keys["admin"] not in text


def test_a_read_only_key_reads_the_dashboard_but_sends_no_completion(world: World) -> None:
    assert world.chat().status_code == 200
    o = world.get("/ui/api/overview", key="watch").json()
    assert o["key"] == "watch" and [a["alias"] for a in o["aliases"]] == ["chat", "other"]
    assert [r["key"] for r in world.get("/ui/api/requests", key="watch").json()["requests"]] == ["admin"]
    assert world.get("/ui/api/logs?profile=demo", key="watch").json()["lines"]
    refused = world.chat("watch")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only"


def test_a_key_scoped_to_an_alias_sees_only_that_alias_and_its_services(world: World) -> None:
    assert world.chat().status_code == 200
    o = world.get("/ui/api/overview", key="scoped").json()
    assert o["key"] == "scoped" and [a["alias"] for a in o["aliases"]] == ["other"]
    assert o["services"] == []  # "other" routes to elsewhere, which does not run
    assert world.get("/ui/api/requests", key="scoped").json()["requests"] == []
    events = world.get("/ui/api/history", key="scoped").json()["events"]
    assert [e["profile"] for e in events] == ["elsewhere"]
    refused = world.get("/ui/api/logs?profile=demo", key="scoped")
    assert refused.status_code == 404 and world.log_calls == []


def test_a_scoped_key_sees_no_hold_of_a_profile_out_of_its_scope(world: World) -> None:
    from servectl.adapters.gateway_admin import GatewayHold

    with GatewayHold(
        world.gw.state_dir,
        History(world.gw.state_dir, clock=time.time),
        profiles=["demo"],
        reason="up demo",
        expect_s=1.0,
    ):
        assert world.get("/ui/api/overview").json()["gateway"]["holds"] == ["up demo"]
        assert world.get("/ui/api/overview", key="scoped").json()["gateway"]["holds"] == []
    with GatewayHold(
        world.gw.state_dir,
        History(world.gw.state_dir, clock=time.time),
        profiles=["elsewhere"],
        reason="up elsewhere",
        expect_s=1.0,
    ):
        assert world.get("/ui/api/overview", key="scoped").json()["gateway"]["holds"] == ["up elsewhere"]
    with GatewayHold(
        world.gw.state_dir,
        History(world.gw.state_dir, clock=time.time),
        profiles=["demo", "elsewhere"],
        reason="swap demo -> elsewhere",
    ):
        assert world.get("/ui/api/overview", key="scoped").json()["gateway"]["holds"] == []


def test_the_history_shows_the_swaps_newest_first(world: World) -> None:
    events = world.get("/ui/api/history").json()["events"]
    assert [(e["event"], e["profile"]) for e in events] == [("swap", "elsewhere"), ("up", "demo")]
    assert events[0]["replaced"] == "demo" and events[1]["startup_s"] == 12.5
    assert "container_id" not in events[1]


def test_the_log_tail_is_redacted_and_bounded(world: World) -> None:
    logs = world.get("/ui/api/logs?profile=demo&tail=100000").json()
    assert world.log_calls == [("demo", 500)]
    assert logs["lines"] == [
        "INFO server_args=ServerArgs(api_key='***', port=30000)",
        "token *** seen",
        "download with *** and ***",
    ]
    unknown = world.get("/ui/api/logs?profile=nope")
    assert unknown.status_code == 404 and "services: demo" in unknown.json()["error"]["message"]


def test_an_open_gateway_serves_the_dashboard_without_a_key(tmp_path: Path, engine: HostStandin) -> None:
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": ALIASES, "auth": "none"})
    sources = DashboardSources(
        history=History(tmp_path, warn=lambda _line: None, clock=time.time).readable_events,
        gpus=FakeGpuInventory.scenario("no_driver").snapshot,
    )
    with GatewayThread(config, upstreams=lambda: [], state_dir=tmp_path, dashboard=sources) as gw:
        o = httpx.get(gw.base_url + "/ui/api/overview", timeout=5).json()
        assert o["key"] is None and o["logs"] is False and o["services"] == []
