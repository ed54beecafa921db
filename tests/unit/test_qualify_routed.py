"""The routed gate asks what it asks outside the SDK through the run's HTTP client (issue 40: it called
``httpx.post``/``httpx.get``, a client of their own per request, which no transport of a test could reach)."""

from __future__ import annotations

from typing import Any

import httpx
from tests.unit.gate_runs import gate_run

from servectl.bench.qualify.client import Exchange
from servectl.bench.qualify.gates import routed
from servectl.bench.qualify.routed import RouteTarget
from servectl.bench.qualify.suite import RoutedGate
from servectl.bench.settings import ApiKey

GATEWAY, ENGINE = "http://gateway.test", "http://engine.test"


class _GatewayClient:
    """The SDK side of the run: the gateway lists the alias and answers as it."""

    url, model, api_key = GATEWAY, "chat", ApiKey("sk-right")

    def list_models(self) -> list[tuple[str, int | None]]:
        return [("chat", None)]

    def chat(self, messages: Any, *, max_tokens: int) -> Exchange:
        return Exchange(error=None, latency_s=0.01, content="OK", model="chat")


def test_the_routed_gate_asks_keys_engine_and_record_through_the_runs_client() -> None:
    asked: list[tuple[str, str, str | None]] = []
    counted = iter([3, 4])

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append((request.method, str(request.url), request.headers.get("authorization")))
        if request.url.path == "/metrics":
            return httpx.Response(
                200, text=f'servectl_gateway_requests_total{{alias="chat",code="200"}} {next(counted)}\n'
            )
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "glm", "max_model_len": 4096}]})
        return httpx.Response(401, text="invalid key")

    target = RouteTarget(
        alias="chat",
        profile="glm",
        served_name="glm",
        context_length=4096,
        engine_url=ENGINE,
        engine_key="sk-engine",
        metrics_url=f"{GATEWAY}/metrics",
        status=lambda: {"aliases": {"chat": {"profile": "glm"}}},
    )
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        run = gate_run(_GatewayClient(), http=http)
        result = routed.run(run, RoutedGate(), target)
    assert result.verdict == "pass", [c.message for c in result.cases if not c.ok]
    posts = [(url, auth) for method, url, auth in asked if method == "POST"]
    assert [url for url, _ in posts] == [f"{GATEWAY}/v1/chat/completions"] * 2
    assert posts[0][1] is not None and posts[0][1].startswith("Bearer servectl-wrong-") and posts[1][1] is None
    assert (f"{ENGINE}/v1/models", "Bearer sk-engine") in [(url, auth) for _, url, auth in asked]
    assert [url for _, url, _ in asked].count(f"{GATEWAY}/metrics") == 2  # before and after: counted 1 more
