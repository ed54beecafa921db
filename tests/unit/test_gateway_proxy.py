"""The gateway in front of a stand-in engine on this host: routing, rewriting, keys, limits, holds, faults."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from servectl.adapters.gateway_admin import GatewayHold, GatewayMaintenance, gateway_status
from servectl.adapters.state import History
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import create_key
from servectl.gateway.routes import Upstream
from servectl.standin.process import HostStandin, free_port
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
ALIASES = {"chat": ["demo", "demo-rollback"], "other": ["elsewhere"]}


def _standin(**env: str) -> HostStandin:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "served-demo", "--decode-log-interval", "1"]
    return HostStandin(flags, env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_CHUNK_TOKENS": "4", **env})


@pytest.fixture(scope="module")
def engine() -> Iterator[HostStandin]:
    with _standin() as eng:
        eng.wait_ready()
        yield eng


def _config(**limits: float) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "aliases": ALIASES,
            "limits": limits,
            "swap": {"drain_s": 0.5, "hold_s": 1.0},
        }
    )


@pytest.fixture
def gateway(tmp_path: Path, engine: HostStandin) -> Iterator[tuple[GatewayThread, str]]:
    config = _config(rate_per_minute=600, max_body_bytes=4096, body_timeout_s=0.5, header_timeout_s=0.5)
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    env = {"SERVECTL_HOME": str(tmp_path)}
    key, _ = create_key(config.keys_path(env), name="laptop", clock=time.time)
    create_key(config.keys_path(env), name="only-other", aliases=["other"], clock=time.time)
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path, startup_s=lambda _p: 7.0) as gw:
        yield gw, key


def _sdk(gw: GatewayThread, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url + "/v1", api_key=key, max_retries=0, timeout=10)


def _post(gw: GatewayThread, key: str | None, body: object, *, raw: bytes | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(gw.base_url + "/v1/chat/completions", content=content, headers=headers, timeout=10)


CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def test_models_lists_the_aliases_the_key_grants(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    assert [m.id for m in _sdk(gw, key).models.list()] == ["chat", "other"]


def test_a_chat_goes_to_the_alias_service_and_the_answer_names_the_alias(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    answer = _sdk(gw, key).chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=8)  # fmt: skip
    assert answer.model == "chat"  # the engine answered as served-demo
    assert answer.usage is not None and answer.usage.completion_tokens == 8


def test_a_stream_passes_through_with_the_alias_and_its_tokens_are_counted(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    stream = _sdk(gw, key).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=12, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert {c.model for c in chunks} == {"chat"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    metrics = httpx.get(gw.base_url + "/metrics").text
    assert 'servectl_gateway_tokens_out_total{alias="chat"} 12' in metrics
    assert 'servectl_gateway_requests_total{alias="chat",code="200"} 1' in metrics
    assert 'servectl_gateway_ttfb_seconds_count{alias="chat"} 1' in metrics


def test_keys_are_checked_bearer_and_x_api_key(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    assert _post(gw, None, CHAT).status_code == 401
    assert _post(gw, "sk-servectl-wrong", CHAT).status_code == 401
    by_header = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers={"x-api-key": key}, timeout=10)
    assert by_header.status_code == 200
    assert httpx.get(gw.base_url + "/healthz").status_code == 200  # no key needed


def test_a_key_without_the_alias_gets_403(gateway: tuple[GatewayThread, str], tmp_path: Path) -> None:
    gw, _ = gateway
    other, _ = create_key(gw.keys_path or tmp_path, name="chat-denied", aliases=["other"], clock=time.time)
    time.sleep(1.1)  # the key ring re-reads the file at most once a second
    response = _post(gw, other, CHAT)
    assert response.status_code == 403
    assert "not granted alias 'chat'" in response.json()["error"]["message"]


def test_an_unknown_alias_gets_404_naming_the_aliases(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    response = _post(gw, key, {**CHAT, "model": "gpt-4"})
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no alias 'gpt-4'; aliases: chat, other"


def test_a_body_that_is_not_json_gets_400_naming_the_problem(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    response = _post(gw, key, None, raw=b'{"model": "chat",')
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("the request body is not JSON: Expecting")
    assert "line 1, column" in response.json()["error"]["message"]
    assert _post(gw, key, [1, 2]).json()["error"]["message"] == "the request body must be a JSON object, not list"
    wrong = _post(gw, key, {**CHAT, "model": 3})  # a wrong type: one line in OpenAI's shape, the gateway serving on
    assert (wrong.status_code, wrong.headers["X-Servectl-Reason"]) == (400, "bad_request")
    assert set(wrong.json()["error"]) == {"message", "type", "code"} and "\n" not in wrong.json()["error"]["message"]
    assert _post(gw, key, CHAT).status_code == 200


def test_a_5000_digit_number_in_the_body_gets_400_not_500(tmp_path: Path, engine: HostStandin) -> None:
    config = _config(max_body_bytes=65536)
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="k", clock=time.time)
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path) as gw:
        raw = b'{"model": "chat", "max_tokens": ' + b"9" * 5000 + b', "messages": []}'
        response = _post(gw, key, None, raw=raw)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == "the request body holds a number too long to read"


def test_a_body_over_the_limit_gets_413(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    response = _post(gw, key, {**CHAT, "padding": "x" * 5000})
    assert response.status_code == 413


def test_a_key_over_its_rate_gets_429_with_retry_after(tmp_path: Path, engine: HostStandin) -> None:
    config = _config(rate_per_minute=3)
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="slow", clock=time.time)
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path) as gw:
        codes = [_post(gw, key, CHAT) for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["Retry-After"]) >= 1


def test_an_expired_key_gets_401(tmp_path: Path, engine: HostStandin) -> None:
    config = _config()
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="old", expires_s=1,
                        clock=lambda: time.time() - 10)  # fmt: skip
    with GatewayThread(config, upstreams=lambda: [], state_dir=tmp_path) as gw:
        response = _post(gw, key, CHAT)
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]


def test_a_slow_header_client_is_cut(gateway: tuple[GatewayThread, str]) -> None:
    gw, _ = gateway
    with socket.create_connection((gw.config.host, gw.config.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the gateway, no request ever completed
        assert time.monotonic() - t0 < 3


def test_a_slow_body_client_gets_408_and_the_connection_closes(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    with socket.create_connection((gw.config.host, gw.config.port), timeout=5) as sock:
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        sock.sendall((head + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode())
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 408")


def test_nothing_running_for_the_alias_gets_503_with_retry_after(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    response = _post(gw, key, {**CHAT, "model": "other"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "7"
    assert "elsewhere is not running" in response.json()["error"]["message"]


def test_a_request_during_a_hold_waits_and_then_goes_through(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    results: list[httpx.Response] = []
    with GatewayHold(
        gw.state_dir,
        History(gw.state_dir, clock=time.time),
        profiles=["demo", "demo-rollback"],
        reason="swap demo -> demo-rollback",
    ):
        worker = threading.Thread(target=lambda: results.append(_post(gw, key, CHAT)))
        worker.start()
        time.sleep(0.3)
        assert not results  # held
        status = gateway_status(gw.state_dir)
        assert status is not None and status["aliases"]["chat"]["state"] == "held"
        assert status["aliases"]["other"]["state"] == "down"
    worker.join(5)
    assert results[0].status_code == 200


def test_a_request_held_past_hold_s_gets_503_with_retry_after(gateway: tuple[GatewayThread, str]) -> None:
    gw, key = gateway
    with GatewayHold(
        gw.state_dir,
        History(gw.state_dir, clock=time.time),
        profiles=["demo"],
        reason="swap demo -> demo-rollback",
        expect_s=30,
    ):
        t0 = time.monotonic()
        response = _post(gw, key, CHAT)
    assert response.status_code == 503
    assert 0.9 < time.monotonic() - t0 < 3
    assert 25 <= int(response.headers["Retry-After"]) <= 30
    assert "held while servectl swap demo -> demo-rollback" in response.json()["error"]["message"]


def test_during_a_maintenance_the_aliases_are_answered_503_maintenance_at_once_with_the_eta(
    gateway: tuple[GatewayThread, str],
) -> None:
    """A campaign takes production away for its whole run: clients learn so at once, with when to come back,
    not after hold_s of waiting and not as a bare upstream_down; the swaps under it take their own holds."""
    gw, key = gateway
    with GatewayMaintenance(gw.state_dir, profiles=["demo"], reason="campaign six", eta_s=600) as away:
        t0 = time.monotonic()
        response = _post(gw, key, CHAT)
        assert time.monotonic() - t0 < 0.5  # not held: answered at once
        assert response.status_code == 503 and response.headers["X-Servectl-Reason"] == "maintenance"
        assert response.json()["error"]["code"] == "maintenance"
        assert 595 <= int(response.headers["Retry-After"]) <= 600
        assert "away for maintenance: servectl campaign six, expected back in about" in response.text
        status = gateway_status(gw.state_dir)
        assert status is not None and status["aliases"]["chat"]["state"] == "maintenance"
        assert status["holds"] == ["campaign six"]
        with GatewayHold(
            gw.state_dir,
            History(gw.state_dir, clock=time.time),
            profiles=["demo"],
            reason="swap demo -> six.fast",
            expect_s=5,
        ):
            away.update(eta_s=42)  # a new ETA after a visit
            t0 = time.monotonic()
            during = _post(gw, key, CHAT)
            assert time.monotonic() - t0 < 0.5  # the maintenance answers before the swap's hold would wait
        assert during.headers["X-Servectl-Reason"] == "maintenance"
        assert 40 <= int(during.headers["Retry-After"]) <= 42
        assert _post(gw, key, {**CHAT, "model": "other"}).headers["X-Servectl-Reason"] != "maintenance"
    assert _post(gw, key, CHAT).status_code == 200  # production back: served again
    status = gateway_status(gw.state_dir)
    assert status is not None and status["holds"] == []


def test_a_stream_still_running_after_the_drain_is_cut_with_an_error_event(
    gateway: tuple[GatewayThread, str],
) -> None:
    gw, key = gateway
    slow = {**CHAT, "max_tokens": 20000, "stream": True}
    events: list[bytes] = []

    def read() -> None:
        with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=slow,
                          headers={"Authorization": f"Bearer {key}"}, timeout=10) as r:  # fmt: skip
            events.extend(r.iter_lines())

    worker = threading.Thread(target=read)
    worker.start()
    time.sleep(0.3)
    with GatewayHold(
        gw.state_dir, History(gw.state_dir, clock=time.time), profiles=["demo"], reason="down demo"
    ) as hold:
        assert hold.reply == {"ok": True, "finished": 0, "cut": 1}
    worker.join(5)
    assert not worker.is_alive()
    last = json.loads(events[-2].removeprefix("data: ") if events[-1] == "" else events[-1].removeprefix("data: "))
    assert "cut after 0.5 s of drain" in last["error"]["message"]


def test_the_client_leaving_mid_stream_stops_the_engine_generating(tmp_path: Path) -> None:
    with _standin(STANDIN_TOKEN_RATE="50", STANDIN_CHUNK_TOKENS="1") as eng:
        eng.wait_ready()
        up = Upstream(profile="demo", url=eng.base_url, served_name="served-demo", ready=True)
        with GatewayThread(_config().model_copy(update={"auth": "none"}), upstreams=lambda: [up],
                           state_dir=tmp_path) as gw:  # fmt: skip
            with httpx.stream("POST", gw.base_url + "/v1/chat/completions",
                              json={**CHAT, "max_tokens": 5000, "stream": True}, timeout=10) as r:  # fmt: skip
                for n, _ in enumerate(r.iter_lines()):
                    if n > 10:
                        break
            time.sleep(0.5)
            decoded = sum("Decode batch" in line for line in eng.lines)
            time.sleep(0.6)  # 30 more tokens' time at 50 tok/s
            assert sum("Decode batch" in line for line in eng.lines) == decoded
            assert decoded < 60


def test_the_engine_dying_mid_stream_ends_the_stream_with_an_error_event(tmp_path: Path) -> None:
    with _standin(STANDIN_DIE_AFTER_TOKENS="8") as eng:
        eng.wait_ready()
        up = Upstream(profile="demo", url=eng.base_url, served_name="served-demo", ready=True)
        with GatewayThread(_config().model_copy(update={"auth": "none"}), upstreams=lambda: [up],
                           state_dir=tmp_path) as gw:  # fmt: skip
            sdk = openai.OpenAI(base_url=gw.base_url + "/v1", api_key="none", max_retries=0, timeout=10)
            stream = sdk.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=100, stream=True)  # fmt: skip
            with pytest.raises(openai.APIError, match="failed mid-answer"):
                list(stream)


def test_an_on_request_alias_swaps_to_its_profile_once_and_the_requests_wait_for_it(
    tmp_path: Path, engine: HostStandin
) -> None:
    from servectl.errors import SwapRolledBack

    running: list[Upstream] = []
    swaps: list[str] = []

    def start(profile: str) -> None:
        swaps.append(profile)
        if profile == "broken":
            raise SwapRolledBack("broken failed its health gate; demo is back")
        time.sleep(0.5)  # the model load
        running.append(Upstream(profile=profile, url=engine.base_url, served_name="served-demo", ready=True))

    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "auth": "none",
            "aliases": {"big": ["demo"], "bad": ["broken"], "manual": ["elsewhere"]},
            "swap": {"hold_s": 5, "on_request": ["big", "bad"], "min_loaded_s": 0},
        }
    )
    with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start) as gw:
        answers: list[httpx.Response] = []
        body = {**CHAT, "model": "big"}
        workers = [threading.Thread(target=lambda: answers.append(_post(gw, None, body))) for _ in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(10)
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert swaps == ["demo"]  # one swap for the three requests
        failed = _post(gw, None, {**CHAT, "model": "bad"})
        assert failed.status_code == 503
        assert failed.json()["error"]["message"] == (
            "alias 'bad': the swap to broken failed: broken failed its health gate; demo is back; "
            "what ran before still serves its aliases"
        )
        assert _post(gw, None, {**CHAT, "model": "big"}).status_code == 200  # still routed
        assert _post(gw, None, {**CHAT, "model": "manual"}).status_code == 503  # not opted in: no swap
        assert swaps == ["demo", "broken"]


def test_on_request_names_aliases_of_the_file() -> None:
    with pytest.raises(ValueError, match=r"swap\.on_request: 'chatt' is not an alias"):
        GatewayConfig.model_validate({"aliases": {"chat": ["demo"]}, "swap": {"on_request": ["chatt"]}})


def test_a_stream_waiting_for_a_swap_on_request_gets_sse_comments_then_the_answer(
    tmp_path: Path, engine: HostStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.gateway.on_request

    monkeypatch.setattr(servectl.gateway.on_request, "KEEPALIVE_S", 0.2)
    running: list[Upstream] = []

    def start(profile: str) -> None:
        time.sleep(1.0)  # the model load
        running.append(Upstream(profile=profile, url=engine.base_url, served_name="served-demo", ready=True))

    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "auth": "none",
            "aliases": {"big": ["demo"]},
            "swap": {"hold_s": 5, "on_request": ["big"]},
        }
    )
    with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start) as gw:
        body = {**CHAT, "model": "big", "stream": True, "max_tokens": 8}
        with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=body, timeout=10) as response:
            lines = [line for line in response.iter_lines() if line]
    comments = [line for line in lines if line.startswith(":")]
    assert 2 <= len(comments) <= 6 and comments[0] == ": servectl is swapping to serve big"
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert data and {d["model"] for d in data} == {"big"}
    assert lines[-1] == "data: [DONE]"


@pytest.mark.parametrize("when_busy", ["wait", "refuse"])
def test_a_swap_on_request_that_would_stop_a_busy_service_waits_or_is_refused_by_policy(
    tmp_path: Path, when_busy: str
) -> None:
    with _standin(STANDIN_TOKEN_RATE="50", STANDIN_CHUNK_TOKENS="1") as slow:
        slow.wait_ready()
        running = [Upstream(profile="demo", url=slow.base_url, served_name="served-demo", ready=True)]
        swaps: list[str] = []

        def start(profile: str) -> None:
            swaps.append(profile)
            running.append(Upstream(profile=profile, url=slow.base_url, served_name="served-demo", ready=True))

        config = GatewayConfig.model_validate(
            {
                "listen": f"127.0.0.1:{free_port()}",
                "auth": "none",
                "aliases": {"small": ["demo"], "big": ["large"]},
                "swap": {"hold_s": 5, "on_request": ["big"], "when_busy": when_busy},
            }
        )
        with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start) as gw:
            body = {**CHAT, "model": "small", "stream": True, "max_tokens": 5000}  # 100 s at 50 tokens/s
            with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=body, timeout=10) as busy:
                lines = busy.iter_lines()  # held: a dropped iterator would close the stream
                next(line for line in lines if line.startswith("data: {"))  # in flight now
                answer = _post(gw, None, {**CHAT, "model": "big", "max_tokens": 2})
            if when_busy == "wait":
                assert answer.status_code == 200 and swaps == ["large"]
                return
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "5"
            assert answer.json()["error"]["message"] == (
                "alias 'big': not swapping to large while demo (1 in flight) is serving (swap.when_busy: refuse); retry"
            )
            assert swaps == []
            time.sleep(0.3)  # the client left: the stream is no longer in flight
            assert _post(gw, None, {**CHAT, "model": "big", "max_tokens": 2}).status_code == 200  # now it swaps
            assert swaps == ["large"]


Swaps = list[tuple[float, float, str]]  # (began, ended, profile)


def _turn_taking_gateway(engine: HostStandin, **swap: float) -> tuple[GatewayConfig, list[Upstream], Swaps]:
    """Aliases one -> pa and two -> pb, both swapped to on request, on one (pretend) card: ``start`` replaces
    what runs inside a gateway hold, as ``servectl swap`` does (it drains the requests in flight)."""
    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "auth": "none",
            "aliases": {"one": ["pa"], "two": ["pb"]},
            "swap": {"drain_s": 2, "hold_s": 10, "on_request": ["one", "two"], **swap},
        }
    )
    return config, [Upstream(profile="pa", url=engine.base_url, served_name="served-demo", ready=True)], []


@pytest.fixture
def own_engine() -> Iterator[HostStandin]:
    """A stand-in of the test's own: the module's may still be answering streams earlier tests left."""
    with _standin() as eng:
        eng.wait_ready()
        yield eng


def test_two_on_request_aliases_hammered_at_once_take_turns_of_min_loaded_s(
    tmp_path: Path, own_engine: HostStandin
) -> None:
    # it counts answers served between swaps: on the module's shared stand-in, streams earlier tests left
    # running slowed each answer enough to fail it when the whole file ran (alone it passed)
    engine = own_engine
    config, running, swaps = _turn_taking_gateway(engine, min_loaded_s=1.0)

    def start(profile: str) -> None:
        old = [u.profile for u in running]
        with GatewayHold(
            tmp_path,
            History(tmp_path, clock=time.time),
            profiles=[*old, profile],
            reason=f"swap -> {profile}",
            target=profile,
        ):
            t0 = time.monotonic()
            running.clear()
            time.sleep(0.3)  # the model load
            running.append(Upstream(profile=profile, url=engine.base_url, served_name="served-demo", ready=True))
            swaps.append((t0, time.monotonic(), profile))

    answers: list[tuple[str, int, float]] = []  # alias, status, when it finished
    with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start) as gw:
        stop = time.monotonic() + 4.0

        def client(alias: str) -> None:
            with httpx.Client(timeout=15) as http:
                while time.monotonic() < stop:
                    r = http.post(gw.base_url + "/v1/chat/completions", json={**CHAT, "model": alias})
                    answers.append((alias, r.status_code, time.monotonic()))

        workers = [threading.Thread(target=client, args=(alias,)) for alias in ("one", "two", "one", "two")]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        metrics = httpx.get(gw.base_url + "/metrics").text
    assert [a for a in answers if a[1] != 200] == []
    assert 2 <= len(swaps) <= 4.0 / 1.0 + 1, swaps  # not one per request
    assert {p for _, _, p in swaps} == {"pa", "pb"}
    assert f'servectl_gateway_swap_events_total{{event="on_request"}} {len(swaps)}' in metrics
    busy = 0
    for (_, ended, profile), (began, _, _) in itertools.pairwise(swaps):
        assert began - ended >= 1.0  # the loaded one stayed min_loaded_s ...
        if began > stop:
            # the clients stopped sending in this turn: a last request of the other alias, sent before the
            # stop, waited out min_loaded_s while nothing asked the loaded one any more (1 run in 8 here)
            continue
        busy += 1
        alias = {"pa": "one", "pb": "two"}[profile]
        assert sum(1 for a, _, t in answers if a == alias and ended < t < began) >= 5  # ... and served meanwhile
    assert busy >= 2, swaps
    served = {alias: sum(1 for a, _, _ in answers if a == alias) for alias in ("one", "two")}
    assert served["one"] >= 10 and served["two"] >= 10, served


def test_a_request_that_waits_hold_s_for_its_swap_s_turn_gets_503_swapping_with_retry_after(
    tmp_path: Path, engine: HostStandin
) -> None:
    config, running, _ = _turn_taking_gateway(engine, min_loaded_s=5.0, hold_s=0.5)
    running.clear()  # nothing runs: the first swap is at once, the next waits 5 s

    def start(profile: str) -> None:
        running[:] = [Upstream(profile=profile, url=engine.base_url, served_name="served-demo", ready=True)]

    with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start,
                       startup_s=lambda _p: 7.0) as gw:  # fmt: skip
        assert _post(gw, None, {**CHAT, "model": "one"}).status_code == 200
        t0 = time.monotonic()
        held = _post(gw, None, {**CHAT, "model": "two"})
        assert 0.4 < time.monotonic() - t0 < 2.0
        assert _post(gw, None, {**CHAT, "model": "one"}).status_code == 200  # the loaded alias goes on
    assert held.status_code == 503 and held.headers["X-Servectl-Reason"] == "swapping"
    assert held.json()["error"]["message"] == (
        "alias 'two': the swap to pb waits for its turn (what runs stays loaded swap.min_loaded_s = 5 s); retry"
    )
    assert 10 <= int(held.headers["Retry-After"]) <= 12  # the turn (4.5 s left) and pb's start (7 s)
    assert [u.profile for u in running] == ["pa"]


def test_clients_that_leave_while_waiting_for_their_turn_leave_the_swap_free_for_the_next(
    tmp_path: Path, engine: HostStandin
) -> None:
    config, running, swaps = _turn_taking_gateway(engine, min_loaded_s=1.5)

    def start(profile: str) -> None:
        swaps.append((time.monotonic(), time.monotonic(), profile))
        running[:] = [Upstream(profile=profile, url=engine.base_url, served_name="served-demo", ready=True)]

    with GatewayThread(config, upstreams=lambda: list(running), state_dir=tmp_path, start=start) as gw:
        assert _post(gw, None, {**CHAT, "model": "two"}).status_code == 200  # pa ran before: swapped at once
        left: list[str] = []

        def leave(after_s: float) -> None:
            try:
                httpx.post(gw.base_url + "/v1/chat/completions", json={**CHAT, "model": "one"}, timeout=after_s)
            except httpx.ReadTimeout:
                left.append("timed out")

        # the first waits for pb's time holding the swap lock, the second for the lock, and leaves first
        leaving = [threading.Thread(target=leave, args=(after_s,)) for after_s in (0.8, 0.3)]
        for w in leaving:
            w.start()
            time.sleep(0.2)
        for w in leaving:
            w.join(5)
        assert left == ["timed out", "timed out"]
        time.sleep(1.5)  # pb's time is up
        t0 = time.monotonic()
        assert _post(gw, None, {**CHAT, "model": "one"}).status_code == 200
        assert time.monotonic() - t0 < 1.0  # the lock was given back: no wait for hold_s
    assert [p for _, _, p in swaps] == ["pb", "pa"]
    assert swaps[-1][0] >= t0  # swapped for the request that stayed, not for the two that left
