"""The Context's HTTP adapter (issue 40): never None; the real one opens an httpx client per gate or call with the
TLS verification of its URL and probes ``/health`` over a socket (``status`` imports no httpx); a FakeHost's
fake answers the gate, the standby engine's calls and ``status`` from the fake engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from servectl.adapters.http import CLIENT_TIMEOUT_S, StandardHttp
from servectl.adapters.tls import unused_tls
from servectl.service.context import Context
from servectl.service.standby_engine import EngineClient
from servectl.service.transaction.context import TxContext
from servectl.testing import FakeHost
from servectl.testing.docker import FakeDockerEngine

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_a_context_built_without_http_holds_the_standard_adapter_and_everything_below_it_uses_that(
    tmp_path: Path,
) -> None:
    ctx = Context(docker=FakeDockerEngine(), nvml=False, state_dir=tmp_path, environ={})
    http = ctx.http
    assert isinstance(http, StandardHttp) and ctx.http is http  # built once, never None
    assert ctx.runtime.http is http  # the gate and status of the runtime the context builds
    assert Context(http=http, nvml=False, state_dir=tmp_path, environ={}).http is http  # a given one is kept


def _ssl_context(client: httpx.Client) -> object:
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]  # httpx keeps what verify= built


def test_the_standard_adapter_opens_a_client_per_block_with_the_tls_its_url_needs() -> None:
    """As the gate's own client was: a 5 s default timeout, no redirects, TLS verification per URL, closed after."""
    http = StandardHttp()
    with http.client("http://127.0.0.1:8180") as plain, http.client("https://engine.example:443") as tls:
        assert plain is not tls and plain.timeout == httpx.Timeout(CLIENT_TIMEOUT_S) == tls.timeout
        assert not plain.follow_redirects and not tls.follow_redirects
        assert _ssl_context(plain) is unused_tls()  # http://: no CA bundle loaded, fails closed if ever used
        verifying = _ssl_context(tls)
        assert verifying is not unused_tls() and verifying.check_hostname  # type: ignore[attr-defined]
    assert plain.is_closed and tls.is_closed


def test_a_fake_hosts_adapter_answers_the_gate_and_status_from_the_fake_engine(tmp_path: Path) -> None:
    with FakeHost(state_dir=tmp_path / "home") as host:
        assert host.ctx.http is host.fake_http
        result = host.up(name="demo")
        url = result.url
        gate = list(host.fake_http.seen)
        assert {f"GET {url}/health", f"GET {url}/v1/models", f"POST {url}/v1/chat/completions"} <= set(gate)
        assert [s.state for s in host.status().services] == ["ready"]
        assert host.fake_http.seen[len(gate) :] == [f"GET {url}/health"]  # status's probe, through the adapter


def test_a_standby_engines_calls_go_through_the_contexts_adapter(tmp_path: Path) -> None:
    with FakeHost(state_dir=tmp_path / "home", environ=os.environ) as host:
        url = host.up(name="demo").url
        before = len(host.fake_http.seen)
        tx = TxContext.of(host.ctx)
        engine = EngineClient.of(host.ctx.resolve("demo").plan, tx)
        assert engine.http is host.ctx.http
        assert engine.ask({"model": "x", "messages": []}, "demo", 1.0, tx.ctx.clocks.monotonic)["choices"]
        assert host.fake_http.seen[before:] == [f"POST {url}/v1/chat/completions"]


_STATUS = """
import json, socket, sys, threading
server = socket.create_server(("127.0.0.1", 0))
asked = []

def answer():
    while True:
        conn, _ = server.accept()
        with conn:
            asked.append(conn.recv(4096).split(b"\\r\\n", 1)[0].decode())
            conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")

threading.Thread(target=answer, daemon=True).start()
from servectl.adapters.docker.values import ContainerState
import servectl.service.context as context

port = server.getsockname()[1]
labels = {"servectl.profile": "probed", "servectl.port": str(port), "servectl.host": "127.0.0.1"}
running = ContainerState(id="c" * 64, name="probed", image="img", status="running", labels=labels, started_at=1.0)

class OneRunning:
    def list_managed(self, label_filter=None):
        return [running]

context.Context.docker = property(lambda self: OneRunning())
sys.argv = ["servectl", "status"]
from servectl.cli.app import main
try:
    main()
except SystemExit as e:
    assert e.code in (0, None), e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] == "httpx" or m in ("ssl", "http.client", "email.parser"))
sys.stderr.write("PROBE " + json.dumps({"asked": asked, "heavy": heavy}) + "\\n")
"""


def test_status_probes_a_running_service_over_the_socket_without_importing_httpx(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "SERVECTL_HOME": str(tmp_path)}
    env.pop("SERVECTL_PROFILES", None)
    proc = subprocess.run(
        [sys.executable, "-c", _STATUS], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    line = next((line for line in proc.stderr.splitlines() if line.startswith("PROBE ")), None)
    assert line is not None, proc.stderr
    probe = json.loads(line[len("PROBE ") :])
    assert probe == {"asked": ["GET /health HTTP/1.1"], "heavy": []}
    assert "probed" in proc.stdout and "ready" in proc.stdout, proc.stdout
