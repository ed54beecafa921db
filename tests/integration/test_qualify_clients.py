"""Qualify through the gateway with real clients: Pi and Hermes read a nonce through their own shell tool.

The gateway runs in this process (``servectl.testing.gateway.GatewayThread``) in front of a host stand-in; the
clients are the real programs, pinned and cached by ``python3 -m servectl.testing.agent_clients`` (run by
scripts/test.sh). Without them these tests skip, unless ``CI`` or ``SERVECTL_REQUIRE_CLIENTS`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.gateway_admin import gateway_status
from servectl.bench.model import ApiKey
from servectl.bench.qualify import QualifyReport, QualifySettings, ServiceFacts, run_qualify
from servectl.bench.qualify.routed import RouteTarget
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import create_key
from servectl.gateway.routes import Upstream
from servectl.standin.process import HostStandin, free_port
from servectl.testing.agent_clients import client_environ
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
ALIASES = {"chat": ["demo", "demo-rollback"]}


@pytest.fixture(scope="module")
def client_env() -> dict[str, str]:
    found = client_environ()
    if {"SERVECTL_CLIENT_PI", "SERVECTL_CLIENT_HERMES"} - set(found):
        reason = "Pi and Hermes are not installed: python3 -m servectl.testing.agent_clients"
        if os.environ.get("CI") or os.environ.get("SERVECTL_REQUIRE_CLIENTS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return {**os.environ, **found}


@pytest.fixture(scope="module")
def engine() -> Iterator[HostStandin]:
    flags = ["--model-path", DEMO_MODEL, "--served-model-name", "served-demo", "--context-length", "131072"]
    env = {"STANDIN_TOKEN_RATE": "5000", "STANDIN_CHUNK_TOKENS": "8", "STANDIN_STARTUP_DELAY_S": "0"}
    with HostStandin(flags, env=env) as eng:
        eng.wait_ready()
        yield eng


def through_gateway(
    engine: HostStandin, tmp_path: Path, gates: dict[str, Any], *, auth: str = "keys", profile: str = "demo"
) -> QualifyReport:
    config = GatewayConfig.model_validate({"listen": f"127.0.0.1:{free_port()}", "aliases": ALIASES, "auth": auth})
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="qualify")
    up = Upstream(profile="demo", url=engine.base_url, served_name="served-demo", ready=True)
    loaded = LoadedSuite(Suite.model_validate({"name": "t", "gates": gates}), source="test", sha256="0" * 64)
    with GatewayThread(config, upstreams=lambda: [up], state_dir=tmp_path) as gw:
        route = RouteTarget(
            alias="chat",
            profile=profile,
            served_name="served-demo",
            context_length=131072,
            engine_url=engine.base_url,
            metrics_url=f"{gw.base_url}/metrics",
            status=lambda: gateway_status(tmp_path),
        )
        settings = QualifySettings(url=gw.base_url, suite=loaded, model="chat", api_key=ApiKey(key), route=route)
        return run_qualify(settings=settings, facts=ServiceFacts(known=True, context_length=131072))


def test_pi_and_hermes_read_the_nonce_through_the_gateway(
    engine: HostStandin, tmp_path: Path, client_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in client_env.items():
        monkeypatch.setenv(name, value)
    report = through_gateway(engine, tmp_path, {"routed": {}, "clients": {"clients": ["pi", "hermes"]}})
    routed, clients = report.gates
    assert routed.verdict == "pass", [c.message for c in routed.failures]
    assert clients.verdict == "pass", [(c.message, c.detail.get("output_tail")) for c in clients.failures]
    assert report.counts == "routed 6/6, clients 2/2"
    assert all(c.detail["gateway_requests"] >= 2 for c in clients.cases)  # the tool call and the answer


def test_the_routed_gate_fails_when_keys_are_not_checked_or_a_fallback_answers(
    engine: HostStandin, tmp_path: Path
) -> None:
    report = through_gateway(engine, tmp_path, {"routed": {}}, auth="none", profile="demo-rollback")
    (routed,) = report.gates
    failed = {c.case: c.message for c in routed.failures}
    assert set(failed) == {"routed engine", "routed wrong key", "routed missing key"}
    assert "is served by 'demo', not its first profile 'demo-rollback' (a fallback answered)" in failed["routed engine"]
    assert failed["routed wrong key"].startswith("routed wrong key: NOT refused (HTTP 200")
