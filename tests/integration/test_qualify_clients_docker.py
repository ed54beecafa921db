"""Qualify through the gateway with real clients: Pi, OpenClaw and Hermes read a nonce through their shell tool.

The whole path runs on the real engine (`servectl up`, `servectl gateway run`, `servectl qualify ALIAS
--via-gateway`); the routed gate's failures run against a gateway in this process
(``servectl.testing.gateway.GatewayThread``) in front of a host stand-in. The clients are the real programs,
pinned and cached by ``python3 -m servectl_ci.agent_clients`` (run by scripts/test.sh; OpenClaw on the Node 24
it installs from npm). Without them the client test skips, unless ``CI`` or ``SERVECTL_REQUIRE_CLIENTS`` is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servectl_ci.agent_clients import client_environ

from servectl.adapters.gateway_admin import gateway_status
from servectl.bench.qualify import QualifyReport, QualifySettings, ServiceFacts, run_qualify
from servectl.bench.qualify.routed import RouteTarget
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.bench.settings import ApiKey
from servectl.gateway.config import GatewayConfig
from servectl.gateway.keys import create_key
from servectl.gateway.routes import Upstream
from servectl.standin.process import HostStandin, free_port
from servectl.testing.docker import write_test_profile
from servectl.testing.gateway import GatewayThread

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
SRC = str(Path(__file__).resolve().parents[2] / "src")
ALIASES = {"chat": ["demo", "demo-rollback"]}
CLIENTS = ("pi", "openclaw", "hermes")


@pytest.fixture(scope="module")
def client_env() -> dict[str, str]:
    found = client_environ()
    missing = [name for name in CLIENTS if f"SERVECTL_CLIENT_{name.upper()}" not in found]
    if missing:
        reason = f"{', '.join(missing)} not installed: PYTHONPATH=tests/tools python3 -m servectl_ci.agent_clients"
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
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(tmp_path)}), name="qualify", clock=time.time)
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
        return run_qualify(settings=settings, facts=ServiceFacts(known=True, context_length=131072), environ=os.environ)


def test_the_routed_gate_fails_when_keys_are_not_checked_or_a_fallback_answers(
    engine: HostStandin, tmp_path: Path
) -> None:
    report = through_gateway(engine, tmp_path, {"routed": {}}, auth="none", profile="demo-rollback")
    (routed,) = report.gates
    failed = {c.case: c.message for c in routed.failures}
    assert set(failed) == {"routed engine", "routed wrong key", "routed missing key"}
    assert "is served by 'demo', not its first profile 'demo-rollback' (a fallback answered)" in failed["routed engine"]
    assert failed["routed wrong key"].startswith("routed wrong key: NOT refused (HTTP 200")


def test_qualify_alias_via_gateway_with_pi_openclaw_and_hermes_on_a_servectl_service(
    docker_client: Any, standin_image: str, test_session_id: str, tmp_path: Path, client_env: dict[str, str]
) -> None:
    """The whole path: `servectl up` a stand-in profile, `servectl gateway run`, `servectl qualify ALIAS
    --via-gateway` with the routed gate and the three real clients."""
    folder, home = tmp_path / "profiles", tmp_path / "home"
    name = f"t{os.urandom(3).hex()}-gw"
    write_test_profile(
        folder, name, port=free_port(), session=test_session_id, image={"ref": standin_image},
        engine={"context_length": 131072, "env": {"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TOKEN_RATE": "5000"}},
        container={"name": f"servectl-{name}"},
    )  # fmt: skip
    env = {**client_env, "PYTHONPATH": SRC, "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
    home.mkdir()
    listen = f"127.0.0.1:{free_port()}"
    (home / "gateway.yaml").write_text(f"listen: '{listen}'\naliases: {{chat: [{name}]}}\n")
    suite = tmp_path / "routed.yaml"
    suite.write_text(
        "name: routed\ngates:\n  routed: {}\n  clients: {clients: [pi, openclaw, hermes], timeout_s: 180}\n"
    )

    def servectl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "servectl", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)

    gateway = None
    try:
        assert (up := servectl("up", name)).returncode == 0, up.stderr
        env["GW_KEY"] = servectl("gateway", "keys", "create", "qualify").stdout.strip()
        gateway = subprocess.Popen([sys.executable, "-m", "servectl", "gateway", "run"], env=env, cwd=tmp_path,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _answers(f"http://{listen}/healthz"):
            time.sleep(0.2)
        out = tmp_path / "ev"
        result = servectl("qualify", "chat", "--via-gateway", "--api-key-env", "GW_KEY", "--suite", str(suite),
                          "--out", str(out))  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "routed 6/6, clients 3/3" in result.stdout
        evidence = json.loads((out / "qualify.json").read_text())
        assert evidence["provenance"]["profile"] == name and evidence["server"]["model"] == "chat"
        assert env["GW_KEY"] not in (out / "qualify.json").read_text()
        clients = next(g for g in evidence["gates"] if g["gate"] == "clients")
        assert [c["case"] for c in clients["cases"]] == [f"clients {client}" for client in CLIENTS]
        for case in clients["cases"]:  # shown with -s / -rP: each client's time
            print(f"{case['case']}: {case['detail']['seconds']} s, {case['detail']['gateway_requests']} requests")
        assert all(c["detail"]["gateway_requests"] >= 2 for c in clients["cases"])  # the tool call, the answer
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=30)
        servectl("down", name)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
