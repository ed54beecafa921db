"""The gateway container's 503s say why, on the real Docker engine: ``upstream_down``, ``admission_full``,
``swapping`` and ``draining``, each in the ``X-Servectl-Reason`` header and the JSON error's ``code``, with a
``Retry-After``; and ``status --json`` counts a request in flight.

The gateway world of ``test_gateway_docker`` (its profiles, key and CLI helpers) with another gateway file:
``chat`` on profile a (running), ``idle`` on b (not running, not swapped to on request), ``other`` on b
(swapped to on request, but a, restarted under the gateway's eyes, must stay loaded ``swap.min_loaded_s`` =
120 s, longer than ``hold_s``), and ``limits.max_concurrency: 1``. The drain test stops the gateway, so it comes last.
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

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, docker_client: Any, standin_image: str,
          test_session_id: str) -> Iterator[World]:  # fmt: skip
    w = World(tmp_path_factory.mktemp("gateway-reasons"), docker_client, standin_image, test_session_id)
    config = yaml.safe_load(w.config.read_text(encoding="utf-8"))
    config["aliases"] = {"chat": [w.a], "idle": [w.b], "other": [w.b]}
    config["limits"] = {**config["limits"], "max_concurrency": 1}
    config["swap"] = {"drain_s": 10, "hold_s": 2, "on_request": ["other"], "min_loaded_s": 120}
    w.config.write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        w.ok("up", w.a)
        w.key = w.ok("gateway", "keys", "create", "laptop", "--rate", "1000000").strip()
        up = w.ok("gateway", "up", "--config", str(w.config))
        assert f"chat -> {w.a} -> ready" in up, up
        yield w
    finally:
        w.cleanup()


def _ask(world: World, alias: str, **body: Any) -> httpx.Response:
    return httpx.post(world.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {world.key}"},
                      json={"model": alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body},
                      timeout=30)  # fmt: skip


def _reason(response: httpx.Response) -> tuple[int, str, str, str]:
    """(status, header reason, JSON code, JSON message) of a refusal; Retry-After must be a positive number."""
    assert int(response.headers.get("Retry-After", "0")) >= 1, (response.status_code, response.headers, response.text)
    error = response.json()["error"]
    return response.status_code, response.headers["X-Servectl-Reason"], error["code"], error["message"]


class LongStream:
    """A streamed completion of 20,000 tokens (about 50 s at the stand-in's 400 tokens/s), open for the block."""

    def __init__(self, world: World) -> None:
        self._client = httpx.Client(timeout=60)
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20000, "stream": True}
        self._stream = self._client.stream("POST", world.url + "/v1/chat/completions", json=body,
                                           headers={"Authorization": f"Bearer {world.key}"})  # fmt: skip
        self.lines = 0

    def __enter__(self) -> LongStream:
        response = self._stream.__enter__()
        assert response.status_code == 200
        self._lines = response.iter_lines()  # kept: a dropped iterator closes the stream
        while self.lines < 5:  # the first tokens came: the engine is generating
            next(self._lines)
            self.lines += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.__exit__(None, None, None)
        self._client.close()


def test_an_alias_whose_profile_is_not_running_is_503_upstream_down(world: World) -> None:
    assert _ask(world, "chat").status_code == 200
    status, header, code, message = _reason(_ask(world, "idle"))
    assert (status, header, code) == (503, "upstream_down", "upstream_down")
    assert message == f"alias 'idle': {world.b} is not running; start it: servectl up PROFILE"


def test_a_swap_on_request_that_waits_past_hold_s_for_its_turn_is_503_swapping(world: World) -> None:
    # a ran before the gateway first looked, so it counts as loaded long enough: the gateway sees it stop
    # (a request while it is down) and start again, and then a must stay loaded min_loaded_s = 120 s
    world.ok("down", world.a)
    assert _reason(_ask(world, "chat"))[:2] == (503, "upstream_down")
    world.ok("up", world.a)
    assert _ask(world, "chat").status_code == 200
    t0 = time.monotonic()
    status, header, code, message = _reason(_ask(world, "other"))
    assert (status, header, code) == (503, "swapping", "swapping")
    assert "waits for its turn" in message and "swap.min_loaded_s = 120 s" in message
    assert 2 <= time.monotonic() - t0 < 10  # it waited hold_s, then said why
    assert _ask(world, "chat").status_code == 200  # what runs stayed loaded
    # this world's services only: status lists every servectl service on the engine (another test's may run)
    running = [s["profile"] for s in json.loads(world.ok("status", "--json"))["services"]]
    assert [p for p in running if p in (world.a, world.b)] == [world.a]


def test_a_request_past_max_concurrency_is_503_admission_full_and_status_counts_the_one_in_flight(
    world: World,
) -> None:
    with LongStream(world):
        status, header, code, message = _reason(_ask(world, "chat"))
        assert (status, header, code) == (503, "admission_full", "admission_full")
        assert message == "the gateway is at its max_concurrency; retry shortly"
        live = json.loads(world.ok("status", "--json"))["gateway"]["aliases"]["chat"]
        assert (live["state"], live["in_flight"], live["held"]) == ("ready", 1, 0)
    deadline = time.monotonic() + 10
    while (answer := _ask(world, "chat")).status_code != 200:  # the stream's slot comes back
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)
    assert json.loads(world.ok("status", "--json"))["gateway"]["aliases"]["chat"]["in_flight"] == 0


def test_a_request_while_the_gateway_drains_to_stop_is_503_draining(world: World) -> None:
    with LongStream(world):
        stopping = threading.Thread(target=world.ok, args=("gateway", "down"))
        stopping.start()
        deadline = time.monotonic() + 8
        while True:  # admission_full (the stream holds the one slot) until the stop signal arrives
            response = _ask(world, "chat")
            if response.status_code == 503 and response.headers.get("X-Servectl-Reason") == "draining":
                break
            assert response.status_code == 503 and time.monotonic() < deadline, (response.status_code, response.text)
            assert response.headers.get("X-Servectl-Reason") == "admission_full", response.headers
            time.sleep(0.1)
        status, header, code, message = _reason(response)
        assert (status, header, code) == (503, "draining", "draining")
        assert message == "the gateway is stopping (draining its requests); retry shortly"
        assert response.headers["Connection"] == "close"
    stopping.join(30)
    assert not stopping.is_alive() and world.servectl("gateway", "status").returncode == 1
