"""Swap on request without thrash, on the real Docker engine: two aliases on two stand-in profiles that replace
each other (one card), hammered at once through the gateway, swap once per ``swap.min_loaded_s``, not once
per request, and no request fails.

The gateway world of ``test_gateway_docker`` (its key and CLI helpers), with its two profiles rewritten as
``test_standby_gateway_docker`` does: each its own port, both on card 0 by their ``servectl.gpus`` label (no
GPU request reaches Docker), and a gateway file with one alias per profile. The gateway is the real container
(``servectl gateway up``); run as root here, the state folder is root's, so the container runs as uid 65532
and its swaps take the state lock root's ``up`` made, in the folder ``gateway up`` shared with its group.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from test_gateway_docker import World

from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

MIN_LOADED_S = 4.0
HAMMER_S = 20.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, docker_client: Any, standin_image: str,
         test_session_id: str) -> Iterator[World]:  # fmt: skip
    w = World(tmp_path_factory.mktemp("on-request-gateway"), docker_client, standin_image, test_session_id)
    for name in (w.a, w.b):
        path = w.profiles / f"{name}.yaml"
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        doc["serve"] = {**doc["serve"], "port": free_port()}
        doc["container"]["labels"] = {**doc["container"]["labels"], "servectl.gpus": "0"}  # one (fake) card
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    config = yaml.safe_load(w.config.read_text(encoding="utf-8"))
    config["aliases"] = {"one": [w.a], "two": [w.b]}
    config["swap"] = {"drain_s": 10, "hold_s": 60, "on_request": ["one", "two"], "min_loaded_s": MIN_LOADED_S}
    w.config.write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        w.ok("up", w.a)
        w.key = w.ok("gateway", "keys", "create", "laptop", "--rate", "1000000").strip()
        up = w.ok("gateway", "up", "--config", str(w.config))
        assert f"one -> {w.a} -> ready" in up, up
        yield w
    finally:
        w.cleanup()


def test_two_aliases_hammered_at_once_swap_once_per_min_loaded_s_and_no_request_fails(pair: World) -> None:
    sdk = pair.sdk()
    answers: list[tuple[str, float]] = []  # alias, when it finished
    failures: list[str] = []
    stop = time.monotonic() + HAMMER_S

    def client(alias: str) -> None:
        while time.monotonic() < stop:
            try:
                answer = sdk.chat.completions.create(model=alias, messages=[{"role": "user", "content": "hi"}],
                                                     max_tokens=8)  # fmt: skip
                assert answer.model == alias and answer.usage is not None and answer.usage.completion_tokens == 8
                answers.append((alias, time.monotonic()))
            except Exception as err:
                failures.append(f"{alias}: {type(err).__name__}: {err}")

    workers = [threading.Thread(target=client, args=(alias,)) for alias in ("one", "two", "one", "two")]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join(HAMMER_S + 90)
    elapsed = time.monotonic() - t0
    metrics = httpx.get(pair.url + "/metrics").text
    swaps = int(next(line.split()[-1] for line in metrics.splitlines()
                     if line.startswith('servectl_gateway_swap_events_total{event="on_request"}')))  # fmt: skip
    print(f"{swaps} swaps on request in {elapsed:.1f} s; answers: "
          f"one {sum(a == 'one' for a, _ in answers)}, two {sum(a == 'two' for a, _ in answers)}")  # fmt: skip
    assert failures == []
    assert 2 <= swaps <= elapsed / MIN_LOADED_S + 1  # not one per request
    served = {alias: [t for a, t in answers if a == alias] for alias in ("one", "two")}
    assert len(served["one"]) >= 5 and len(served["two"]) >= 5, {a: len(t) for a, t in served.items()}
    assert 'servectl_gateway_swap_events_total{event="on_request_deferred"}' in metrics  # swaps waited turns
    user = pair.client.containers.get(pair.gateway_name).attrs["Config"]["User"]
    assert user == "65532:65532" or pair.home.stat().st_uid != 0, user  # never root
    history = json.loads((pair.home / "history.json").read_text())
    swapped = [e for e in history if e.get("event") == "swap"]
    assert len(swapped) == swaps, swapped  # each swap on request recorded by the container in root's history


def test_a_swap_on_request_between_profiles_that_share_a_port_runs_in_the_gateway_container(pair: World) -> None:
    """Issue 39 (12): in the container (uid 65532) the replaced service's docker-proxy is a process it cannot
    name; preflight tells it by the ports the Docker API says that container publishes, so the swap runs."""
    status = json.loads(pair.ok("status", "--json"))
    (running,) = [s["profile"] for s in status["services"]]
    other = pair.b if running == pair.a else pair.a
    alias = "two" if other == pair.b else "one"
    port = yaml.safe_load((pair.profiles / f"{running}.yaml").read_text(encoding="utf-8"))["serve"]["port"]
    path = pair.profiles / f"{other}.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["serve"] = {**doc["serve"], "port": port}  # the same host port as the service it replaces
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    answer = httpx.post(
        pair.url + "/v1/chat/completions", timeout=120, headers={"Authorization": f"Bearer {pair.key}"}, json=body
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == alias
    after = json.loads(pair.ok("status", "--json"))
    assert [(s["profile"], s["port"]) for s in after["services"]] == [(other, port)]


def _deferred(pair: World) -> int:
    metrics = httpx.get(pair.url + "/metrics", timeout=10).text
    line = 'servectl_gateway_swap_events_total{event="on_request_deferred"}'
    return next((int(float(ln.split()[-1])) for ln in metrics.splitlines() if ln.startswith(line)), 0)


def test_a_service_no_alias_names_does_not_restart_the_anti_thrash_clock(pair: World) -> None:
    """Issue 39 (13): a service started on another card and port while one alias's service has been loaded long
    enough does not make the next swap on request wait min_loaded_s (only what the swap replaces counts)."""
    status = json.loads(pair.ok("status", "--json"))
    (running,) = [s["profile"] for s in status["services"]]
    other = pair.b if running == pair.a else pair.a
    alias = "two" if other == pair.b else "one"
    time.sleep(MIN_LOADED_S + 1)  # what runs has been loaded long enough
    doc = yaml.safe_load((pair.profiles / f"{running}.yaml").read_text(encoding="utf-8"))
    third = f"gw{pair.tid}-unrelated"
    doc.pop("rollback", None)
    doc.update(name=third, model={**doc["model"], "served_name": third})
    doc["serve"] = {**doc["serve"], "port": free_port()}
    doc["container"] = {**doc["container"], "name": f"gwtest-{pair.tid}-{third}",
                        "labels": {**doc["container"]["labels"], "servectl.gpus": "1"}}  # fmt: skip
    (pair.profiles / f"{third}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    pair.ok("up", third)
    try:
        before = _deferred(pair)
        body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        answer = httpx.post(
            pair.url + "/v1/chat/completions", timeout=120, headers={"Authorization": f"Bearer {pair.key}"}, json=body
        )
        assert answer.status_code == 200, answer.text
        assert _deferred(pair) == before  # swapped at once: the unrelated service's start did not count
        profiles = {s["profile"] for s in json.loads(pair.ok("status", "--json"))["services"]}
        assert profiles == {other, third}
    finally:
        pair.servectl("down", third)
