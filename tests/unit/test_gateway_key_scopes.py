"""Gateway key scopes (aliases, read-only), budgets per period, per-key usage, and the reasons a client reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from servectl.errors import UsageError
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import Budget, KeyRing, create_key, parse_budget, read_keys
from servectl.gateway.routes import Upstream
from servectl.gateway.usage import UsageBook, period_bounds, usage_path, usage_rows
from servectl.standin.process import HostStandin, free_port
from servectl.testing.gateway import GatewayThread

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL = str(REPO / "examples" / "demo-model")
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def engine() -> Iterator[HostStandin]:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "served-demo"]
    with HostStandin(flags, env={"STANDIN_TOKEN_RATE": "2000", "STANDIN_CHUNK_TOKENS": "4"}) as eng:
        eng.wait_ready()
        yield eng


def _gateway(tmp_path: Path, engine: HostStandin, drain_s: float = 0.5, **limits: int) -> GatewayThread:
    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{free_port()}",
            "aliases": {"chat": ["demo"], "other": ["elsewhere"]},
            "limits": limits,
            "swap": {"drain_s": drain_s, "hold_s": 0.5},
        }
    )
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    return GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path)


def _keys(tmp_path: Path) -> Path:
    return tmp_path / "gateway" / "keys.json"


def _post(gw: GatewayThread, key: str, body: object = CHAT) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                      timeout=10)  # fmt: skip


def _error(response: httpx.Response) -> tuple[int, str, str]:
    """(status, the reason header, the error code), checking the message is one line."""
    error = response.json()["error"]
    assert "\n" not in error["message"] and error["code"] == response.headers["X-Servectl-Reason"]
    return response.status_code, response.headers["X-Servectl-Reason"], error["message"]


def test_a_read_only_key_lists_models_and_is_refused_completions(tmp_path: Path, engine: HostStandin) -> None:
    watcher, _ = create_key(_keys(tmp_path), name="watcher", read_only=True, clock=time.time)
    with _gateway(tmp_path, engine) as gw:
        models = httpx.get(gw.base_url + "/v1/models", headers={"Authorization": f"Bearer {watcher}"})
        assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == ["chat", "other"]
        status, reason, message = _error(_post(gw, watcher))
    assert (status, reason) == (403, "read_only")
    assert message.startswith("key 'watcher' is read-only: it may only GET") and "POST /v1/chat/completions" in message


def test_an_alias_scoped_key_gets_403_naming_what_it_may_use(tmp_path: Path, engine: HostStandin) -> None:
    key, _ = create_key(_keys(tmp_path), name="other-only", aliases=["other"], clock=time.time)
    with _gateway(tmp_path, engine) as gw:
        status, reason, message = _error(_post(gw, key))
        models = httpx.get(gw.base_url + "/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
    assert (status, reason) == (403, "forbidden")
    assert message == "key 'other-only' is not granted alias 'chat' (it may use: other)"
    assert [m["id"] for m in models["data"]] == ["other"]


def test_a_budget_refuses_with_429_budget_exhausted_distinct_from_the_rate_limit(
    tmp_path: Path, engine: HostStandin
) -> None:
    budgeted, _ = create_key(_keys(tmp_path), name="ci", budget=Budget(2, "day"), clock=time.time)
    rated, _ = create_key(_keys(tmp_path), name="bursty", rate_per_minute=1, clock=time.time)
    with _gateway(tmp_path, engine) as gw:
        assert [_post(gw, budgeted).status_code for _ in range(2)] == [200, 200]
        over = _post(gw, budgeted)
        assert _post(gw, rated).status_code == 200
        limited = _post(gw, rated)
        metrics = httpx.get(gw.base_url + "/metrics").text
    status, reason, message = _error(over)
    assert (status, reason) == (429, "budget_exhausted")
    assert message.startswith("key 'ci' has used its budget of 2/day requests")
    midnight = period_bounds("day", time.time())[1]
    assert abs(int(over.headers["Retry-After"]) - (midnight - time.time())) < 5
    assert _error(limited)[:2] == (429, "rate_limited") and int(limited.headers["Retry-After"]) >= 1
    assert 'servectl_gateway_key_requests_total{key="ci",code="200"} 2' in metrics
    assert 'servectl_gateway_key_requests_total{key="ci",code="429"} 1' in metrics
    assert 'servectl_gateway_key_budget_used{key="ci"} 2' in metrics
    assert 'servectl_gateway_key_budget_limit{key="ci"} 2' in metrics
    assert 'servectl_gateway_key_tokens_out_total{key="ci"} 16' in metrics
    assert budgeted not in metrics and rated not in metrics
    assert 'servectl_gateway_errors_total{alias="-",class="rate"} 1' in metrics


def test_usage_is_kept_beside_the_key_file_and_survives_a_restart(tmp_path: Path, engine: HostStandin) -> None:
    key, entry = create_key(_keys(tmp_path), name="ci", budget=Budget(3, "day"), clock=time.time)
    with _gateway(tmp_path, engine) as gw:
        assert [_post(gw, key).status_code for _ in range(2)] == [200, 200]
    text = usage_path(_keys(tmp_path)).read_text()
    assert key not in text and entry.sha256 not in text
    with _gateway(tmp_path, engine) as gw:  # a restart goes on counting the period where it stopped
        assert [_post(gw, key).status_code for _ in range(2)] == [200, 429]
    (row,) = usage_rows(_keys(tmp_path), read_keys(_keys(tmp_path)), now=time.time())
    assert (row["budget_used"], row["requests_total"], row["tokens_out_total"]) == (
        3,
        3,
        24,
    )  # the refused one is not counted


def test_keys_create_and_list_on_the_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "SERVECTL_HOME": str(tmp_path),
           "SERVECTL_PROFILES": str(tmp_path / "profiles")}  # fmt: skip

    def servectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servectl", "gateway", "keys", *args], capture_output=True,
                              text=True, env=env, check=False, cwd=tmp_path)  # fmt: skip

    config = tmp_path / "gateway.yaml"
    config.write_text("aliases: {chat: demo, small: demo}\n")
    made = servectl("create", "ci", "--aliases", "chat,small", "--budget", "1000/day", "--config", str(config))
    assert made.returncode == 0, made.stderr
    assert "key 'ci' for chat, small; budget 1000/day; expires never" in made.stderr
    watcher = servectl("create", "watch", "--read-only", "--config", str(config))
    assert "key 'watch' for every alias; read-only;" in watcher.stderr
    bad = servectl("create", "x", "--budget", "10/year", "--config", str(config))
    assert (
        bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--budget '10/year': write requests per" in bad.stderr
    )
    typo = servectl("create", "x", "--aliases", "chta", "--config", str(config))
    assert typo.returncode == 2 and "--aliases: chta not in the gateway file's aliases (chat, small)" in typo.stderr
    before = _keys(tmp_path).read_text()
    assert "x" not in [e.name for e in read_keys(_keys(tmp_path))]  # bad input loses nothing, adds nothing
    listed = servectl("list", "--config", str(config))
    assert listed.stdout.splitlines()[0].split()[:8] == ["ci", "chat,", "small", "0", "of", "1000/day", "0", "requests"]
    assert "(read-only)" in listed.stdout.splitlines()[1]
    rows = json.loads(servectl("list", "--json", "--config", str(config)).stdout)
    assert [(r["name"], r["budget"], r["read_only"]) for r in rows] == [
        ("ci", "1000/day", False),
        ("watch", None, True),
    ]
    assert _keys(tmp_path).read_text() == before


def test_a_key_file_from_before_scopes_still_works(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, entry = create_key(path, name="old", clock=time.time)
    old = {"keys": [{"name": "old", "sha256": entry.sha256, "aliases": None, "expires_at": None,
                     "created_at": entry.created_at, "rate_per_minute": None}]}  # fmt: skip
    path.write_text(json.dumps(old))
    found = KeyRing(path, recheck_s=0, clock=time.time).check(key)
    assert found is not None and not found.read_only and found.budget is None and found.allows_method("POST")
    create_key(path, name="new", read_only=True, clock=time.time)  # rewritten in the new shape, the old key kept
    assert [(e.name, e.read_only) for e in read_keys(path)] == [("old", False), ("new", True)]


@pytest.mark.parametrize(("text", "budget"), [("1000/day", Budget(1000, "day")), (" 5 / Hour", Budget(5, "hour")),
                                              ("1/month", Budget(1, "month"))])  # fmt: skip
def test_budgets_parse(text: str, budget: Budget) -> None:
    assert parse_budget(text) == budget and str(parse_budget(str(budget))) == str(budget)


@pytest.mark.parametrize(
    "text", ["1000", "0/day", "10/year", "-1/day", "ten/day", "", "9" * 29 + "/day", "1000000000001/day"]
)
def test_bad_budgets_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--budget .*: write requests per period such as 1000/day"):
        parse_budget(text)


@pytest.mark.parametrize("rate", [0, -1, 10**6 + 1, 10**28])
def test_bad_rates_are_refused_in_one_line_and_no_key_is_made(tmp_path: Path, rate: int) -> None:
    with pytest.raises(UsageError, match=r"^--rate -?\d+: write requests per minute from 1 to 1,000,000$"):
        create_key(_keys(tmp_path), name="typo", rate_per_minute=rate, clock=time.time)
    assert read_keys(_keys(tmp_path)) == []


def test_periods_are_utc_calendar_ones() -> None:
    at = datetime(2026, 2, 18, 13, 45, tzinfo=UTC).timestamp()  # a Wednesday
    ts = {p: tuple(datetime.fromtimestamp(x, UTC).isoformat()[:16] for x in period_bounds(p, at))
          for p in ("hour", "day", "week", "month")}  # fmt: skip
    assert ts == {
        "hour": ("2026-02-18T13:00", "2026-02-18T14:00"),
        "day": ("2026-02-18T00:00", "2026-02-19T00:00"),
        "week": ("2026-02-16T00:00", "2026-02-23T00:00"),
        "month": ("2026-02-01T00:00", "2026-03-01T00:00"),
    }


def test_the_budget_starts_again_in_the_next_period_and_a_recreated_key_from_zero(tmp_path: Path) -> None:
    now = [datetime(2026, 2, 18, 23, 59, tzinfo=UTC).timestamp()]
    path = tmp_path / "keys.json"
    _, entry = create_key(path, name="ci", budget=Budget(1, "day"), clock=time.time)
    book = UsageBook(usage_path(path), clock=lambda: now[0])
    assert book.over_budget(entry) == 0
    book.charge(entry)
    assert book.over_budget(entry) == 60
    now[0] += 61
    assert book.over_budget(entry) == 0
    book.charge(entry)
    book.flush()
    again = UsageBook(usage_path(path), clock=lambda: now[0])
    assert again.over_budget(entry) > 0
    from dataclasses import replace

    assert again.over_budget(replace(entry, created_at=entry.created_at + 1)) == 0


def test_a_damaged_usage_file_is_one_line_and_counting_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text("{nope")
    book = UsageBook(path, clock=time.time)
    assert book.error is not None and str(path) in book.error and "\n" not in book.error
    _, entry = create_key(tmp_path / "keys.json", name="a", budget=Budget(1, "day"), clock=time.time)
    book.charge(entry)
    assert book.over_budget(entry) > 0


def test_each_503_names_its_reason_in_the_header_and_the_error_code(tmp_path: Path, engine: HostStandin) -> None:
    from servectl.adapters.gateway_admin import GatewayHold
    from servectl.adapters.state import History

    key, _ = create_key(_keys(tmp_path), name="k", clock=time.time)
    with _gateway(tmp_path, engine, drain_s=10, max_concurrency=1) as gw:
        status, reason, message = _error(_post(gw, key, {**CHAT, "model": "other"}))
        assert (status, reason) == (503, "upstream_down") and "elsewhere is not running" in message
        with GatewayHold(
            gw.state_dir, History(gw.state_dir, clock=time.time), profiles=["demo"], reason="swap demo -> b", expect_s=9
        ):
            held = _post(gw, key)
        assert _error(held)[:2] == (503, "swapping") and held.headers["Retry-After"]
        long = {**CHAT, "max_tokens": 6000, "stream": True}  # 3 s at 2000 tok/s
        with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=long, timeout=10,
                          headers={"Authorization": f"Bearer {key}"}) as streaming:  # fmt: skip
            lines = streaming.iter_lines()  # one iterator: a dropped one closes the stream
            next(lines)
            assert _error(_post(gw, key))[:2] == (503, "admission_full")
            gw.request_stop()
            time.sleep(0.3)
            draining = _post(gw, key)
            assert _error(draining)[:2] == (503, "draining") and draining.headers["Connection"] == "close"
            rest = [line for line in lines if line]  # the stream in flight still finishes
        assert rest[-1] == "data: [DONE]"
