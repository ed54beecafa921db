"""servectl gateway on the real Docker engine: the gateway container in front of stand-in services.

One module-scoped world (two profiles of the stand-in on one port, a gateway container with alias ``chat``
spanning both, a key): the README's production story (an openai-SDK client loops through the gateway while
``servectl swap`` goes back and forth, and no request fails), then the faults of issue 21. Every container
carries this session's label and a name of its own; the teardown removes them, passed or failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
import yaml
from servectl_ci.agent_clients import client_environ

from servectl.standin.process import free_port

pytestmark = pytest.mark.integration

SESSION_LABEL = "servectl.test-session"
REPO = Path(__file__).resolve().parents[2]


class World:
    """Profiles, state folder, gateway file and key of this module; helpers to run servectl as a user does."""

    def __init__(self, tmp: Path, client: Any, image: str, session: str) -> None:
        self.client = client
        self.image = image
        self.tid = uuid.uuid4().hex[:8]
        self.labels = {SESSION_LABEL: session, "servectl.test-gateway": self.tid}
        self.port, self.gw_port = free_port(), free_port()
        self.profiles, self.home, self.tmp = tmp / "profiles", tmp / "home", tmp
        self.profiles.mkdir()
        self.a, self.b = f"gw{self.tid}-a", f"gw{self.tid}-b"
        self.gateway_name = f"servectl-gateway-{self.tid}"
        for name, other in ((self.a, self.b), (self.b, self.a)):
            doc = {
                "name": name,
                "extends": "demo",
                "rollback": other,
                "image": {"ref": image},
                "model": {"served_name": name},
                "serve": {"port": self.port, "api_key_env": "GWTEST_ENGINE_KEY"},  # the gateway must send it
                "engine": {
                    "env": {"STANDIN_STARTUP_DELAY_S": "0.5", "STANDIN_TOKEN_RATE": "400", "STANDIN_CHUNK_TOKENS": "2"}
                },
                "container": {"name": f"gwtest-{self.tid}-{name}", "labels": self.labels, "stop_grace_s": 2},
                "health": {"startup_timeout_s": 60, "stall_timeout_s": 30},
            }
            (self.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        self.config = tmp / "gateway.yaml"
        tmp.chmod(0o755)  # the gateway container, uid 65532 when root runs this, reads the file's folder
        self.config.write_text(
            yaml.safe_dump(
                {
                    "listen": f"127.0.0.1:{self.gw_port}",
                    "aliases": {"chat": [self.a, self.b]},
                    "limits": {"max_body_bytes": 65536, "header_timeout_s": 2, "body_timeout_s": 2},
                    "swap": {"drain_s": 10, "hold_s": 60},
                }
            )
        )
        self.url = f"http://127.0.0.1:{self.gw_port}"
        self.key = ""
        self.engine_key = "engine-" + uuid.uuid4().hex

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(REPO / "src"),
            "SERVECTL_PROFILES": str(self.profiles),
            "SERVECTL_HOME": str(self.home),
            "SERVECTL_GATEWAY_CONTAINER": self.gateway_name,
            "GWTEST_ENGINE_KEY": self.engine_key,
        }

    def servectl(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servectl", *args], env=self.env, cwd=self.tmp, text=True,
                              capture_output=True, timeout=timeout, check=False)  # fmt: skip

    def ok(self, *args: str) -> str:
        result = self.servectl(*args)
        assert result.returncode == 0, f"servectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def gateway_pid(self) -> int:
        """The host pid of the gateway's Python process (the container's init is its parent)."""
        top = self.client.containers.get(self.gateway_name).top(ps_args="-o pid,args")
        return next(int(row[0]) for row in top["Processes"] if "gateway" in row[-1] and "python" in row[-1])

    def sdk(self, key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key or self.key, max_retries=0, timeout=60)

    def start(self) -> str:
        """``up a``, a key for alias ``chat``, ``gateway up``: the gateway's ``up`` output (``chat`` on ``a``)."""
        self.ok("up", self.a)
        self.key = self.ok(
            "gateway", "keys", "create", "laptop", "--alias", "chat", "--rate", "1000000", "--config", str(self.config)
        ).strip()
        up = self.ok("gateway", "up", "--config", str(self.config))
        assert f"chat -> {self.a} -> ready" in up, up
        return up

    def swap(self, target: str) -> tuple[float, float, str]:
        """``servectl swap target``, then ``status`` must route ``chat`` to it: (start, end, the status)."""
        t0 = time.monotonic()
        self.ok("swap", target)
        t1 = time.monotonic()
        status = self.ok("status")
        assert f"chat -> {target} -> ready" in status, status
        return t0, t1, status

    def cleanup(self) -> None:
        for c in self.client.containers.list(all=True, filters={"label": f"servectl.test-gateway={self.tid}"}):
            with contextlib.suppress(Exception):
                c.remove(force=True)
        with contextlib.suppress(Exception):
            self.client.containers.get(self.gateway_name).remove(force=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, docker_client: Any, standin_image: str,
          test_session_id: str) -> Iterator[World]:  # fmt: skip
    w = World(tmp_path_factory.mktemp("gateway"), docker_client, standin_image, test_session_id)
    try:
        up = w.start()
        assert f"gateway http://127.0.0.1:{w.gw_port}" in up, up
        yield w
    finally:
        w.cleanup()


def _chat(sdk: openai.OpenAI, *, stream: bool, max_tokens: int = 24) -> str:
    messages = [{"role": "user", "content": "Say something."}]
    if not stream:
        answer = sdk.chat.completions.create(model="chat", messages=messages, max_tokens=max_tokens)  # type: ignore[arg-type]
        assert answer.model == "chat" and answer.usage is not None and answer.usage.completion_tokens == max_tokens
        return answer.choices[0].message.content or ""
    chunks = list(sdk.chat.completions.create(model="chat", messages=messages, max_tokens=max_tokens, stream=True,  # type: ignore[arg-type]
                                              stream_options={"include_usage": True}))  # fmt: skip
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == max_tokens
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


class Rounds:
    """``one(n)`` called in a loop from a thread for the ``with`` block: ``done`` when each passed (``spans``: when
    it began and ended), ``failures`` what went wrong."""

    def __init__(self, one: Callable[[int], None]) -> None:
        self.one = one
        self.done: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop)

    def __enter__(self) -> Rounds:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.one(n)
                self.done.append(time.monotonic())
                self.spans.append((began, self.done[-1]))
            except Exception as err:
                self.failures.append(f"{type(err).__name__}: {err}")
            n += 1


def test_clients_keep_their_alias_and_no_request_fails_while_swap_goes_back_and_forth(world: World) -> None:
    sdk = world.sdk()

    def chat_round(n: int) -> None:
        assert _chat(sdk, stream=n % 2 == 0), "an empty answer"

    with Rounds(chat_round) as chat:
        time.sleep(1.0)
        swaps = []
        for target in (world.b, world.a, world.b):
            swaps.append(world.swap(target)[:2])
            time.sleep(0.5)
    assert chat.failures == []
    assert len(chat.done) > 20
    assert all(any(t0 <= t <= t1 + 2 for t in chat.done) for t0, t1 in swaps)  # requests went on during each swap
    metrics = httpx.get(world.url + "/metrics").text
    assert 'servectl_gateway_swap_events_total{event="hold"} 3' in metrics
    assert 'servectl_gateway_swap_events_total{event="release"} 3' in metrics


WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HI = [{"role": "user", "content": "Say something."}]


def test_anthropic_and_ollama_clients_keep_their_alias_and_no_request_fails_across_swaps(world: World) -> None:
    claude = anthropic.Anthropic(base_url=world.url, api_key=world.key, max_retries=0, timeout=60)
    olla = ollama.Client(host=world.url, headers={"Authorization": f"Bearer {world.key}"}, timeout=60)

    def anthropic_round(n: int) -> None:
        if n % 4 == 0:
            message = claude.messages.create(model="chat", max_tokens=8, messages=HI)  # type: ignore[arg-type]
            assert message.model == "chat" and message.usage.output_tokens == 8
        elif n % 4 == 1:
            with claude.messages.stream(model="chat", max_tokens=8, messages=HI) as stream:  # type: ignore[arg-type]
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
            assert final.model == "chat" and len(text.split()) == 8 and final.usage.output_tokens == 8
        elif n % 4 == 2:
            assert claude.messages.count_tokens(model="chat", messages=HI).input_tokens > 0  # type: ignore[arg-type]
        else:
            ask = [{"role": "user", "content": "weather in Paris?"}]
            with claude.messages.stream(model="chat", max_tokens=99, tools=[WEATHER], messages=ask) as stream:  # type: ignore[arg-type,list-item]
                called = stream.get_final_message()
            assert called.stop_reason == "tool_use" and called.content[-1].type == "tool_use"

    def ollama_round(n: int) -> None:
        if n % 3 == 0:
            answer = olla.chat(model="chat", messages=HI, stream=False, options={"num_predict": 6})
            assert answer.model == "chat" and answer.eval_count == 6
        elif n % 3 == 1:
            parts = list(olla.generate(model="chat", prompt="Say something.", stream=True, options={"num_predict": 6}))
            assert parts[-1].done and {p.model for p in parts} == {"chat"}
        else:
            assert [m.model for m in olla.list().models] == ["chat"]

    with claude, olla, Rounds(anthropic_round) as a, Rounds(ollama_round) as o:
        time.sleep(1.0)
        swaps = [world.swap(target)[:2] for target in (world.b, world.a)]
        time.sleep(0.5)
    assert a.failures == [] and o.failures == []
    assert len(a.done) > 8 and len(o.done) > 8
    assert all(any(t0 <= t <= t1 + 2 for t in a.done) for t0, t1 in swaps)
    metrics = httpx.get(world.url + "/metrics").text
    assert 'servectl_gateway_family_requests_total{family="anthropic",code="200"}' in metrics
    assert 'servectl_gateway_family_requests_total{family="ollama",code="200"}' in metrics


class Trap:
    """A listener standing for every address but the gateway's (HTTP(S)_PROXY): records who tried to go where."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Trap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.server.accept()
                with conn:
                    conn.settimeout(2)
                    with contextlib.suppress(OSError):
                        self.seen.append(conn.recv(200))  # e.g. CONNECT api.anthropic.com:443


def test_claude_code_configured_by_gateway_clients_reads_a_nonce_through_its_tool_across_swaps(world: World) -> None:
    """Claude Code from npm (pinned, cached by servectl_ci.agent_clients) with the settings `servectl gateway
    clients claude-code` writes: `claude -p` runs in a loop while the alias swaps, each run reads a fresh nonce
    file with its Bash tool, no run fails, every request it made reached the gateway and none went elsewhere."""
    found = client_environ().get("SERVECTL_CLIENT_CLAUDE")
    if found is None:
        reason = "claude not installed: PYTHONPATH=tests/tools python3 -m servectl_ci.agent_clients"
        if os.environ.get("CI") or os.environ.get("SERVECTL_REQUIRE_CLIENTS"):
            pytest.fail(reason)
        pytest.skip(reason)
    key = world.ok("gateway", "keys", "create", "claude41", "--alias", "chat", "--config", str(world.config)).strip()
    settings = world.tmp / "claude-settings.json"
    world.ok("gateway", "clients", "claude-code", "--key-env", "GW_KEY", "--write", str(settings),
             "--config", str(world.config))  # fmt: skip
    configured = json.loads(settings.read_text())
    assert configured["env"]["ANTHROPIC_BASE_URL"] == world.url and configured["env"]["ANTHROPIC_MODEL"] == "chat"
    assert configured["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"  # the demo profile's window, not 1M
    home, work = world.tmp / "claude-home", world.tmp / "claude-work"
    home.mkdir()
    work.mkdir()
    time.sleep(1.2)  # the key ring re-reads the file within a second

    def claude_round(n: int, env: dict[str, str]) -> None:
        nonce = uuid.uuid4().hex[:12]
        (work / f"nonce-{n}.txt").write_text(nonce + "\n")
        prompt = f"Read the file {work}/nonce-{n}.txt with cat and tell me the nonce."
        run = subprocess.run([found, "-p", prompt, "--allowedTools", "Bash", "--settings", str(settings)], env=env,
                             cwd=work, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        said = f"exit {run.returncode}: {run.stdout[-500:]}{run.stderr[-500:]}"
        assert run.returncode == 0 and nonce in run.stdout, said

    with Trap() as trap:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GW_KEY": key, "HTTPS_PROXY": trap.url,
               "HTTP_PROXY": trap.url, "NO_PROXY": "127.0.0.1"}  # fmt: skip
        with Rounds(lambda n: claude_round(n, env)) as runs:
            time.sleep(1.0)
            swaps = [world.swap(target)[:2] for target in (world.b, world.a)]
            time.sleep(0.5)
    assert runs.failures == []
    assert len(runs.done) >= 3
    assert all(any(began < t1 and ended > t0 for began, ended in runs.spans) for t0, t1 in swaps)  # runs met swaps
    assert trap.seen == []  # nothing tried to leave for another address
    answers = set()  # each answer Claude Code got (its transcripts), against what the gateway counted for its key
    for transcript in (home / ".claude" / "projects").rglob("*.jsonl"):
        for line in transcript.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("type") == "assistant":
                answers.add(entry["message"]["id"])
    metrics = httpx.get(world.url + "/metrics").text
    counted = {line.split("} ")[0] + "}": float(line.split("} ")[1]) for line in metrics.splitlines()
               if line.startswith('servectl_gateway_key_requests_total{key="claude41"')}  # fmt: skip
    assert counted == {'servectl_gateway_key_requests_total{key="claude41",code="200"}': len(answers)}
    assert len(answers) >= 2 * len(runs.done)  # the tool call and the answer, per run
    print(f"claude -p: {len(runs.done)} runs across 2 swaps, {len(answers)} requests, all through the gateway")


def test_openai_embeddings_keep_their_alias_and_no_request_fails_across_a_swap(world: World) -> None:
    """Two stand-in profiles started with --is-embedding on their own port, alias ``embed`` added to the running
    gateway's file: the openai SDK's embeddings loop while ``servectl swap`` replaces one with the other."""
    c, d = f"gw{world.tid}-e1", f"gw{world.tid}-e2"
    port = free_port()
    for name, other in ((c, d), (d, c)):
        doc = {
            "name": name, "extends": "demo", "rollback": other, "image": {"ref": world.image},
            "model": {"served_name": name}, "serve": {"port": port},
            "engine": {"args": {"is-embedding": True}, "env": {"STANDIN_STARTUP_DELAY_S": "0.5"}},
            "container": {"name": f"gwtest-{world.tid}-{name}", "labels": world.labels, "stop_grace_s": 2},
            "health": {"startup_timeout_s": 60, "stall_timeout_s": 30},
        }  # fmt: skip
        (world.profiles / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    original = world.config.read_text()
    try:
        edited = yaml.safe_load(original)
        edited["aliases"]["embed"] = [c, d]
        saved = world.config.with_name(".gateway.yaml.new")
        saved.write_text(yaml.safe_dump(edited))
        os.replace(saved, world.config)
        world.ok("up", c)
        key = world.ok("gateway", "keys", "create", "embed41", "--alias", "embed", "--config", str(world.config))
        sdk = world.sdk(key.strip())
        _until(lambda: [m.id for m in sdk.models.list()] == ["embed"])

        def embed_round(n: int) -> None:
            answer = sdk.embeddings.create(model="embed", input=["hi", f"round {n}"])
            assert answer.model == "embed" and len(answer.data) == 2 and answer.data[1].embedding

        with Rounds(embed_round) as rounds:
            time.sleep(1.0)
            t0 = time.monotonic()
            world.ok("swap", d)
            t1 = time.monotonic()
            time.sleep(0.5)
        assert rounds.failures == []
        assert len(rounds.done) > 8 and any(began < t1 and ended > t0 for began, ended in rounds.spans)
        assert f"embed -> {d} -> ready" in world.ok("status")
    finally:
        world.config.write_text(original)
        for name in (d, c):
            world.servectl("down", name)
            with contextlib.suppress(Exception):
                world.client.containers.get(f"gwtest-{world.tid}-{name}").remove(force=True)
            (world.profiles / f"{name}.yaml").unlink(missing_ok=True)
        _until(lambda: "embed ->" not in world.ok("gateway", "status"))  # the next tests see the file's aliases


def test_read_only_keys_and_unknown_aliases_are_refused_in_each_familys_shape(world: World) -> None:
    reader = world.ok("gateway", "keys", "create", "reader41", "--read-only").strip()
    time.sleep(1.2)  # the key ring re-reads the file within a second
    with anthropic.Anthropic(base_url=world.url, api_key=reader, max_retries=0) as claude:
        with pytest.raises(anthropic.PermissionDeniedError, match="read-only") as refused:
            claude.messages.create(model="chat", max_tokens=4, messages=HI)  # type: ignore[arg-type]
        assert refused.value.response.headers["X-Servectl-Reason"] == "read_only"
        assert refused.value.body == {"type": "error", "error": {"type": "permission_error",
                                                                 "message": refused.value.body["error"]["message"]}}  # type: ignore[index]  # fmt: skip
    with ollama.Client(host=world.url, headers={"Authorization": f"Bearer {reader}"}) as olla:
        with pytest.raises(ollama.ResponseError, match="read-only") as denied:
            olla.chat(model="chat", messages=HI, stream=False)
        assert denied.value.status_code == 403
        assert [m.model for m in olla.list().models] == ["chat"]  # a GET: allowed
    with (
        anthropic.Anthropic(base_url=world.url, api_key=world.key, max_retries=0) as claude,
        pytest.raises(anthropic.NotFoundError, match="no alias 'claude-opus'"),
    ):
        claude.messages.create(model="claude-opus", max_tokens=4, messages=HI)  # type: ignore[arg-type]
    bad = httpx.post(world.url + "/api/chat", headers={"Authorization": f"Bearer {world.key}"}, content=b"model=chat")
    assert bad.status_code == 400 and set(bad.json()) == {"error"} and "not JSON" in bad.json()["error"]


def test_bad_requests_get_413_400_404_401_and_slow_clients_are_cut(world: World) -> None:
    headers = {"Authorization": f"Bearer {world.key}"}
    big = httpx.post(world.url + "/v1/chat/completions", headers=headers, content=b"{" + b" " * 70000 + b"}")
    assert big.status_code == 413
    bad = httpx.post(world.url + "/v1/chat/completions", headers=headers, content=b"model=chat")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
    unknown = httpx.post(world.url + "/v1/chat/completions", headers=headers, json={"model": "gpt-5"})
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "no alias 'gpt-5'; aliases: chat"
    assert httpx.get(world.url + "/v1/models").status_code == 401
    with socket.create_connection(("127.0.0.1", world.gw_port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        t0 = time.monotonic()
        assert sock.recv(100) == b"" and time.monotonic() - t0 < 5
    with socket.create_connection(("127.0.0.1", world.gw_port), timeout=10) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {world.key}\r\n"
                     "Content-Length: 50\r\n\r\n{".encode())  # fmt: skip
        assert sock.recv(100).startswith(b"HTTP/1.1 408")


def test_scoped_keys_budgets_and_usage_through_the_gateway_container(world: World) -> None:
    budgeted = world.ok(
        "gateway", "keys", "create", "ci", "--aliases", "chat", "--budget", "3/day", "--config", str(world.config)
    ).strip()
    watcher = world.ok("gateway", "keys", "create", "watcher", "--read-only").strip()
    time.sleep(1.2)  # the key ring re-reads the file within a second
    assert [m.id for m in world.sdk(watcher).models.list()] == ["chat"]
    with pytest.raises(openai.PermissionDeniedError, match="read-only") as refused:
        _chat(world.sdk(watcher), stream=False)
    assert refused.value.response.headers["X-Servectl-Reason"] == "read_only"
    assert refused.value.code == "read_only"
    assert _chat(world.sdk(budgeted), stream=True) and _chat(world.sdk(budgeted), stream=False)
    assert [m.id for m in world.sdk(budgeted).models.list()] == ["chat"]
    with pytest.raises(openai.RateLimitError, match="has used its budget of 3/day") as over:
        _chat(world.sdk(budgeted), stream=False)
    assert over.value.code == "budget_exhausted" and int(over.value.response.headers["Retry-After"]) <= 86400
    metrics = httpx.get(world.url + "/metrics").text
    assert 'servectl_gateway_key_requests_total{key="ci",code="200"} 3' in metrics
    assert 'servectl_gateway_key_requests_total{key="ci",code="429"} 1' in metrics
    assert 'servectl_gateway_key_requests_total{key="watcher",code="403"} 1' in metrics
    assert 'servectl_gateway_key_budget_used{key="ci"} 3' in metrics
    assert 'servectl_gateway_key_tokens_out_total{key="ci"} 48' in metrics
    assert budgeted not in metrics and watcher not in metrics
    time.sleep(1.5)  # the gateway writes usage.json at most once a second
    rows = {r["name"]: r for r in json.loads(world.ok("gateway", "keys", "list", "--json"))}
    assert (rows["ci"]["budget_used"], rows["ci"]["requests_total"], rows["ci"]["tokens_out_total"]) == (3, 3, 48)
    assert rows["watcher"]["read_only"] and rows["watcher"]["requests_total"] == 1
    assert budgeted not in (world.home / "gateway" / "usage.json").read_text()


def test_the_gateway_runs_as_a_non_root_user_and_sends_the_engine_key_it_got_by_reference(world: World) -> None:
    uid = next(ln.split()[1] for ln in Path(f"/proc/{world.gateway_pid()}/status").read_text().splitlines()
               if ln.startswith("Uid:"))  # fmt: skip
    assert uid != "0" and int(uid) == (world.home.stat().st_uid or 65532)
    config = world.client.containers.get(world.gateway_name).attrs["Config"]
    assert config["User"] == f"{uid}:{uid}" and f"GWTEST_ENGINE_KEY={world.engine_key}" in config["Env"]
    engine_port = world.port
    refused = httpx.post(f"http://127.0.0.1:{engine_port}/v1/chat/completions", json={"model": "x"})
    assert refused.status_code == 401  # the engine wants its key; the gateway's answers below came with it
    assert _chat(world.sdk(), stream=False)
    live = json.loads(world.ok("gateway", "status", "--json"))
    assert live["live"]["aliases"]["chat"]["state"] == "ready"  # the admin socket answers the state's owner
    for path in (world.home / "gateway").iterdir():
        assert path.is_socket() or world.engine_key not in path.read_text(errors="replace"), path
    assert world.engine_key not in world.ok("gateway", "logs") + json.dumps(live)


def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.2)


def test_an_edited_gateway_file_is_served_without_a_restart_and_a_bad_edit_is_refused(world: World) -> None:
    original, pid = world.config.read_text(), world.gateway_pid()
    key = world.ok("gateway", "keys", "create", "every-alias").strip()
    try:
        doc = yaml.safe_load(original)
        doc["aliases"]["small"] = [world.a, world.b]  # whichever runs after the swaps
        saved = world.config.with_name(".gateway.yaml.new")  # an editor's save: a new file renamed over it
        saved.write_text(yaml.safe_dump(doc))
        os.replace(saved, world.config)
        _until(lambda: [m.id for m in world.sdk(key).models.list()] == ["chat", "small"])
        assert [m.id for m in world.sdk().models.list()] == ["chat"]  # the laptop key has alias chat only
        with pytest.raises(openai.PermissionDeniedError, match="'laptop' is not granted alias 'small'"):
            world.sdk().chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}])
        answer = world.sdk(key).chat.completions.create(model="small", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=4)  # fmt: skip
        assert answer.model == "small"
        status = json.loads(world.ok("status", "--json"))
        (running,) = [s["profile"] for s in status["services"] if s["profile"] in (world.a, world.b)]  # this world's
        assert status["gateway"]["aliases"]["small"] == {"profiles": [world.a, world.b], "profile": running,
                                                         "state": "ready", "in_flight": 0, "held": 0}  # fmt: skip
        world.config.write_text(yaml.safe_dump(doc) + "limts: {}\n")
        _until(lambda: "configuration edit refused" in world.ok("gateway", "status"))
        refused = [ln for ln in world.ok("gateway", "status").splitlines() if "edit refused" in ln]
        assert len(refused) == 1 and refused[0].endswith(
            f"gateway.yaml:{len(yaml.safe_dump(doc).splitlines()) + 1}: an unknown key; did you mean 'limits'?; "
            "the running configuration is kept (fix the file: servectl validate)"
        )
        logs = world.ok("gateway", "logs")
        assert "configuration edit refused" in logs and "configuration reloaded" in logs
        assert [m.id for m in world.sdk(key).models.list()] == ["chat", "small"]  # the running config kept
        assert world.gateway_pid() == pid  # no restart
    finally:
        world.config.write_text(original)
        world.ok("gateway", "keys", "revoke", "every-alias")
    _until(lambda: "small" not in json.loads(world.ok("gateway", "status", "--json"))["live"]["aliases"])


SECRET_LINES = "root:$6$saltsalt$c2VjcmV0aGFzaA:19000:0:99999:7:::\nOPENAI_API_KEY: sk-leakleakleakleakleak12\n"


def test_a_gateway_file_turned_into_a_secret_link_a_fifo_or_deleted_keeps_the_last_good_configuration(
    world: World,
) -> None:
    """Issue 39 (3, 4, 7) in the gateway container: each is one refusal line in gateway status (no content of the
    file), the running aliases stay (not the defaults), the watcher does not block, a good file is served again."""
    original, pid = world.config.read_text(), world.gateway_pid()
    secret = world.config.with_name("secret.env")
    secret.write_text(SECRET_LINES)
    secret.chmod(0o644)

    def refused() -> str:
        lines = [ln for ln in world.ok("gateway", "status").splitlines() if "edit refused" in ln]
        return lines[0] if lines else ""

    try:
        for damage, said in (
            ("link to a secret", "gateway.yaml:1: an unknown key; allowed keys:"),
            ("fifo", "gateway.yaml: is a FIFO (named pipe), not a regular file"),
            ("deleted", "gateway.yaml: the gateway file is gone (deleted or moved)"),
        ):
            world.config.unlink(missing_ok=True)
            if damage == "link to a secret":
                world.config.symlink_to(secret.name)
            elif damage == "fifo":
                os.mkfifo(world.config, 0o644)
            _until(lambda said=said: said in refused())  # type: ignore[misc]
            assert [m.id for m in world.sdk().models.list()] == ["chat"], damage  # not every profile + default
        shown = world.ok("gateway", "status") + world.ok("gateway", "status", "--json") + world.ok("gateway", "logs")
        assert "saltsalt" not in shown and "sk-leak" not in shown and "OPENAI" not in shown and "99999" not in shown
    finally:
        world.config.unlink(missing_ok=True)
        world.config.write_text(original)
    _until(lambda: refused() == "")
    assert world.gateway_pid() == pid


def test_a_key_folder_the_gateway_container_cannot_read_answers_503_not_500(world: World) -> None:
    """Issue 39 (8): chmod 000 on the key folder (the container runs as uid 65532): a key read before still
    passes, any other gets 503 keys_unreadable in the gateway's shape, and gateway status says why."""
    if os.geteuid() != 0:
        pytest.skip("the gateway container runs as this user; chmod 000 does not lock it out")
    folder = world.home / "gateway"
    mode = folder.stat().st_mode & 0o7777
    # --config: the key's alias is checked against the gateway's file (issue 44), which lives in this test's folder
    fresh = world.ok("gateway", "keys", "create", f"late-{world.tid}", "--alias", "chat", "--config", str(world.config))
    fresh = fresh.strip()
    try:
        folder.chmod(0)
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        late = httpx.post(world.url + "/v1/chat/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {fresh}"})  # fmt: skip
        assert late.status_code == 503, late.text
        assert late.headers["X-Servectl-Reason"] == "keys_unreadable" and "Traceback" not in late.text
        known = httpx.post(world.url + "/v1/chat/completions", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {world.key}"})  # fmt: skip
        assert known.status_code == 200, known.text
        live = json.loads(world.ok("gateway", "status", "--json"))["live"]
        assert "gateway key file" in live["keys_error"] and "Permission denied" in live["keys_error"]
        assert "key file unreadable" in world.ok("gateway", "status")
    finally:
        folder.chmod(mode)
        world.ok("gateway", "keys", "revoke", f"late-{world.tid}")


def test_a_profile_added_to_the_search_path_is_served_without_a_restart(world: World) -> None:
    original, pid = world.config.read_text(), world.gateway_pid()
    key = world.ok("gateway", "keys", "create", "any-alias").strip()
    added = world.profiles / f"gw{world.tid}-c.yaml"
    try:
        doc = yaml.safe_load(original)
        del doc["aliases"]  # no aliases: each profile on the search path is one
        world.config.write_text(yaml.safe_dump(doc))
        _until(lambda: world.a in [m.id for m in world.sdk(key).models.list()])
        assert added.stem not in [m.id for m in world.sdk(key).models.list()]
        profile = yaml.safe_load((world.profiles / f"{world.a}.yaml").read_text())
        profile.update(name=added.stem, model={"served_name": added.stem})
        profile["container"] = {**profile["container"], "name": f"gwtest-{world.tid}-{added.stem}"}
        added.write_text(yaml.safe_dump(profile, sort_keys=False))  # in the folder the container mounts read-only
        _until(lambda: added.stem in [m.id for m in world.sdk(key).models.list()])
        refused = httpx.post(world.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                             json={"model": added.stem, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert refused.status_code == 503 and refused.headers["X-Servectl-Reason"] == "upstream_down"
        assert refused.json()["error"]["message"].startswith(f"alias {added.stem!r}: {added.stem} is not running")
        assert world.gateway_pid() == pid  # no restart
    finally:
        added.unlink(missing_ok=True)
        world.config.write_text(original)
        world.ok("gateway", "keys", "revoke", "any-alias")
    _until(lambda: list(json.loads(world.ok("gateway", "status", "--json"))["live"]["aliases"]) == ["chat"])


def _engine(world: World) -> Any:
    (container,) = [c for c in world.client.containers.list(filters={"label": f"servectl.test-gateway={world.tid}"})
                    if not c.name.startswith("servectl-gateway")]  # fmt: skip
    return container


def _decode_lines(container: Any) -> int:
    return container.logs().decode().count("Decode batch")


def test_a_client_leaving_mid_stream_stops_the_engine_generating(world: World) -> None:
    engine = _engine(world)
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20000, "stream": True}
    with httpx.stream("POST", world.url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {world.key}"}, timeout=30) as response:  # fmt: skip
        assert response.status_code == 200
        start = _decode_lines(engine)
        for n, _ in enumerate(response.iter_lines()):
            if n > 200:
                break
        assert _decode_lines(engine) > start  # it was generating
    time.sleep(1.0)
    before = _decode_lines(engine)
    time.sleep(1.5)  # 600 tokens' time at 400 tok/s: a generating engine logs a decode batch every 40 chunks
    assert _decode_lines(engine) == before


def test_the_engine_dying_mid_stream_gives_the_client_an_error_event_and_a_closed_stream(world: World) -> None:
    engine = _engine(world)
    sdk = world.sdk()
    stream = sdk.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                         max_tokens=20000, stream=True)  # fmt: skip
    it = iter(stream)
    next(it)
    engine.kill(signal="SIGKILL")
    t0 = time.monotonic()
    with pytest.raises(openai.APIError, match="failed mid-answer"):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 10
    world.ok("down", world.b if world.b in engine.name else world.a)
    world.ok("up", world.a)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_mb(pid: int) -> float:
    fields = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()
    return int(fields[0]) / 1024


def test_random_faults_leave_no_open_files_and_flat_memory(world: World) -> None:
    n = int(os.environ.get("SERVECTL_GATEWAY_FAULT_REQUESTS", "1000"))
    rng = random.Random(21)
    pid = world.gateway_pid()
    headers = {"Authorization": f"Bearer {world.key}"}
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

    http = httpx.Client(timeout=30)  # one client with keep-alive, as an SDK is; a client that leaves closes its own

    def one(kind: str) -> None:
        if kind == "ok":
            assert http.post(world.url + "/v1/chat/completions", json=body, headers=headers).status_code == 200
        elif kind == "bad-key":
            assert http.post(world.url + "/v1/chat/completions", json=body,
                              headers={"x-api-key": "sk-servectl-nope"}).status_code == 401  # fmt: skip
        elif kind == "unknown-alias":
            assert http.post(world.url + "/v1/chat/completions", json={**body, "model": "x"},
                              headers=headers).status_code == 404  # fmt: skip
        else:  # a client that leaves mid-stream
            with http.stream("POST", world.url + "/v1/chat/completions", headers=headers,
                              json={**body, "max_tokens": 2000, "stream": True}) as r:  # fmt: skip
                next(r.iter_lines())

    for _ in range(40):  # warm up: pools, caches, the allocator
        one(rng.choice(["ok", "bad-key", "unknown-alias", "leave"]))
    time.sleep(0.5)
    fds0, rss0 = _fds(pid), _rss_mb(pid)
    kinds = [rng.choice(["ok", "bad-key", "unknown-alias", "leave"]) for _ in range(n)]
    for kind in kinds:
        one(kind)
    http.close()
    time.sleep(2.5)  # connections to the engine of abandoned streams close
    assert _fds(pid) <= fds0 + 2, (fds0, _fds(pid))
    assert _rss_mb(pid) <= rss0 + 10, (rss0, _rss_mb(pid))
    metrics = httpx.get(world.url + "/metrics").text
    assert 'servectl_gateway_in_flight{alias="chat"} 0' in metrics


def test_the_gateway_killed_with_sigkill_comes_back_with_its_configuration_and_keys(world: World) -> None:
    pid = world.gateway_pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(world.url + "/healthz", timeout=1).status_code == 200:
                break
        assert time.monotonic() < deadline, "the restart policy did not bring the gateway back"
        time.sleep(0.3)
    assert world.gateway_pid() != pid
    assert [m.id for m in world.sdk().models.list()] == ["chat"]  # the same key, the same aliases
    assert _chat(world.sdk(), stream=True)
    status = json.loads(world.ok("gateway", "status", "--json"))
    assert status["live"]["aliases"]["chat"]["state"] == "ready"
    # issue 39 (14): docker kill leaves the container exited (the restart policy leaves a killed container
    # alone); gateway status says so and how to start it again, and that command does
    world.client.containers.get(world.gateway_name).kill()
    _until(lambda: world.client.containers.get(world.gateway_name).status == "exited", timeout_s=30)
    killed = world.servectl("gateway", "status")
    assert killed.returncode == 1
    assert "  the gateway container is exited, not serving; start it again: servectl gateway up" in killed.stdout
    again = world.ok("gateway", "up", "--config", str(world.config))
    assert "  chat -> " in again and again.rstrip().endswith("-> ready"), again
    assert [m.id for m in world.sdk().models.list()] == ["chat"]
    down = world.ok("gateway", "down")
    assert down.startswith("stopped gateway container")
    assert world.servectl("gateway", "status").returncode == 1
