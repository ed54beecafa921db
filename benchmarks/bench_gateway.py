"""servectl gateway vs the engine's own port, on the stand-in, paired in one run (issue 21's targets).

* added time to first byte at C1 (streamed chat, p50 and p99 of gateway minus direct, requests alternated), and
  the same for streamed Anthropic Messages (``/v1/messages``; ``--messages-only`` runs just the two);
* streamed decode rate through the gateway as a share of direct, at C1 and C64 (paced stand-in);
* N concurrent streams for D seconds through the gateway: errors, and the gateway's RSS;
* a request sent in the middle of a swap (hold, stop engine A, start engine B, release): its added wait
  beyond the swap's downtime.

    PYTHONPATH=src python benchmarks/bench_gateway.py [--quick] [--out benchmarks/results/gateway-standin.txt]

The gateway runs in its own process (``--serve``) with a key, routing alias ``chat`` to whatever engine the
upstream file names, so the client and the gateway do not share a GIL. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "examples" / "demo-model")


# -- the gateway process -------------------------------------------------------------------------------------
def serve(upstream_file: Path, port: int, home: Path) -> None:
    from servectl.adapters.gpu import NullGpuInventory
    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.dashboard import DashboardSources
    from servectl.gateway.routes import AliasTable, Upstream
    from servectl.gateway.serve import serve_gateway
    from servectl.service.clocks import Clocks

    def upstreams() -> list[Upstream]:
        return [Upstream(**u) for u in json.loads(upstream_file.read_text())]

    config = GatewayConfig.model_validate(
        {
            "listen": f"127.0.0.1:{port}",
            "aliases": {"chat": ["a", "b"]},
            "keys_file": str(home / "keys.json"),
            "limits": {"rate_per_minute": 10**6, "max_concurrency": 4096},
            "upstream": {"pool_size": 512},
        }
    )
    dashboard = DashboardSources(history=lambda: ([], None), gpus=NullGpuInventory("not measured").snapshot)
    asyncio.run(serve_gateway(config, table=AliasTable({"chat": ["a", "b"]}), upstreams=upstreams,
                              keys_path=home / "keys.json", admin_path=home / "gateway" / "admin.sock",
                              dashboard=dashboard, clocks=Clocks()))  # fmt: skip


# -- client side ---------------------------------------------------------------------------------------------
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"


def stream_once(port: int, key: str | None, max_tokens: int, model: str, path: str = CHAT) -> tuple[float, list[float]]:
    """(seconds to the first body byte, arrival time of each SSE event) of a streamed chat or Anthropic message."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ask = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True}
    body = json.dumps(ask if path == MESSAGES else {**ask, "ignore_eos": True})
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    t0 = time.perf_counter()
    conn.request("POST", path, body, headers)
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
    arrivals: list[float] = []
    ttfb = None
    while line := response.readline():
        if ttfb is None:
            ttfb = time.perf_counter() - t0
        if line.startswith(b"data: {"):
            if b'"error"' in line[:30]:  # OpenAI's {"error": ...}, Anthropic's {"type": "error", ...}
                raise RuntimeError(line.decode()[:200])
            arrivals.append(time.perf_counter())
    conn.close()
    return ttfb or 0.0, arrivals


def wait_answering(port: int, key: str) -> None:
    for _ in range(300):
        try:
            stream_once(port, key, 1, "chat")
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the gateway did not answer")


def paired_ttfb(
    direct_port: int, gw_port: int, key: str, n: int, path: str = CHAT
) -> tuple[list[float], list[float], list[float]]:
    """``n`` streamed requests alternated direct / through the gateway after 20 warm-up pairs: the direct and
    gateway times to first byte (ms) and each pair's difference."""
    direct, through = [], []
    for i in range(n + 20):
        d = stream_once(direct_port, None, 1, "served", path)[0]
        g = stream_once(gw_port, key, 1, "chat", path)[0]
        if i >= 20:
            direct.append(d * 1000)
            through.append(g * 1000)
    return direct, through, [g - d for g, d in zip(through, direct, strict=True)]


def decode_rate(arrivals: list[float]) -> float:
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 2 else 0.0


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 2 else values[0]


def concurrent(port: int, key: str | None, n: int, max_tokens: int, model: str) -> list[float]:
    rates: list[float] = []
    errors: list[str] = []

    def one() -> None:
        try:
            rates.append(decode_rate(stream_once(port, key, max_tokens, model)[1]))
        except Exception as err:
            errors.append(str(err))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # the stand-in's listen backlog is 5 (http.server's default): connect a few at a time
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} errors, first: {errors[0]}")
    return rates


def ttfb_batch(port: int, key: str | None, model: str, n: int) -> list[float]:
    """Time to first byte (ms) of ``n`` streamed requests sent at once."""
    out: list[float] = []
    threads = [threading.Thread(target=lambda: out.append(1000 * stream_once(port, key, 1, model)[0]))
               for _ in range(n)]  # fmt: skip
    for t in threads:
        t.start()
        time.sleep(0.01)  # the stand-in's listen backlog
    for t in threads:
        t.join()
    return out


LITELLM_KEY = "sk-bench-master-key-0123456789abcdef"


def litellm_venv(path: Path | None) -> Path:
    """A throwaway venv with LiteLLM's proxy (never a servectl dependency): ``path`` if given, else made now."""
    if path is not None:
        return path
    venv = Path(tempfile.mkdtemp(prefix="litellm-venv-"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True)
    return venv


def compare_litellm(venv: Path, engine_url: str, engine_port: int, gw_port: int, key: str, rounds: int) -> list[str]:
    """Added TTFB of servectl's gateway and of LiteLLM's proxy on the same alias, C1 and C64, paired."""
    port = free_port_here()
    config = Path(tempfile.mkdtemp(prefix="litellm-")) / "config.yaml"
    config.write_text(json.dumps({"model_list": [{"model_name": "chat", "litellm_params": {
        "model": "openai/served", "api_base": engine_url + "/v1", "api_key": "none"}}]}))  # fmt: skip
    env = {**os.environ, "LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    argv = [str(venv / "bin" / "litellm"), "--config", str(config), "--port", str(port), "--host", "127.0.0.1"]
    proxy = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                stream_once(port, LITELLM_KEY, 1, "chat")
                break
            except (OSError, RuntimeError):
                time.sleep(0.1)
        out = []
        direct, ours, theirs = [], [], []
        for i in range(rounds + 10):
            d = stream_once(engine_port, None, 1, "served")[0]
            g = stream_once(gw_port, key, 1, "chat")[0]
            t = stream_once(port, LITELLM_KEY, 1, "chat")[0]
            if i >= 10:
                direct.append(1000 * d)
                ours.append(1000 * g)
                theirs.append(1000 * t)
        batches = {
            name: [ms for _ in range(3) for ms in ttfb_batch(p, k, m, 64)]
            for name, p, k, m in (
                ("direct", engine_port, None, "served"),
                ("servectl", gw_port, key, "chat"),
                ("litellm", port, LITELLM_KEY, "chat"),
            )
        }
        paths = [("C1", direct, ours, theirs), ("C64", batches["direct"], batches["servectl"], batches["litellm"])]
        for label, d_ms, g_ms, t_ms in paths:
            base = statistics.median(d_ms)
            added_g, added_t = statistics.median(g_ms) - base, statistics.median(t_ms) - base
            out.append(
                f"vs LiteLLM {label}: TTFB median direct {base:.2f} ms, servectl {statistics.median(g_ms):.2f} ms "
                f"(+{added_g:.2f}), LiteLLM {statistics.median(t_ms):.2f} ms (+{added_t:.2f}); "
                f"servectl's added time = {added_g / added_t:.3f}x LiteLLM's (target <= 0.25)"
            )
        return out
    finally:
        proxy.terminate()
        proxy.wait(30)


def free_port_here() -> int:
    from servectl.standin.process import free_port

    return free_port()


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", nargs=3, metavar=("UPSTREAM_FILE", "PORT", "HOME"))
    parser.add_argument("--quick", action="store_true", help="fewer requests, 20 s of concurrent streams")
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--messages-only", action="store_true", help="only the two TTFB measures (chat, messages)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--litellm", action="store_true", help="also compare with LiteLLM's proxy (throwaway venv)")
    parser.add_argument("--litellm-venv", type=Path, help="a venv that has litellm[proxy] already")
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), int(args.serve[1]), Path(args.serve[2]))
        return 0

    from servectl.adapters.gateway_admin import GatewayHold
    from servectl.adapters.state import History
    from servectl.gateway.keys import create_key
    from servectl.standin.process import HostStandin, free_port

    lines: list[str] = []
    failed: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    home = Path(tempfile.mkdtemp(prefix="gwbench-"))
    key, _ = create_key(home / "keys.json", name="bench", clock=time.time)
    upstream_file = home / "upstreams.json"
    flags = ["--model-path", DEMO, "--served-model-name", "served"]

    def engine(rate: float) -> HostStandin:
        return HostStandin(flags, env={"STANDIN_TOKEN_RATE": str(rate), "STANDIN_CHUNK_TOKENS": "1"})

    def route_to(profile: str, eng: HostStandin) -> None:
        doc = [{"profile": profile, "url": eng.base_url, "served_name": "served", "ready": True}]
        upstream_file.write_text(json.dumps(doc))

    @contextlib.contextmanager
    def gateway_before(rate: float) -> Iterator[tuple[HostStandin, subprocess.Popen[bytes]]]:
        """A stand-in decoding at ``rate`` tok/s, routed as profile ``a``, and the gateway answering before it."""
        with engine(rate) as eng:
            eng.wait_ready()
            route_to("a", eng)
            gw = subprocess.Popen([sys.executable, __file__, "--serve", str(upstream_file), str(port), str(home)],
                                  env={**os.environ, "PYTHONPATH": str(REPO / "src")})  # fmt: skip
            try:
                wait_answering(port, key)
                yield eng, gw
            finally:
                gw.terminate()
                gw.wait(30)

    port = free_port()
    n_ttfb = 100 if args.quick else 400
    duration = 20.0 if args.quick else 60.0
    with gateway_before(100000) as (fast, _):
        say(f"servectl gateway vs direct, stand-in on this host ({os.cpu_count()} cores), one run, paired")
        # 1. added time to first byte, C1: streamed chat, then streamed Anthropic Messages
        for label, path in (("TTFB C1", CHAT), ("TTFB C1 /v1/messages", MESSAGES)):
            direct, through, added = paired_ttfb(fast.port, port, key, n_ttfb, path)
            p50, p99 = pct(added, 50), pct(added, 99)
            say(f"{label} ({n_ttfb} pairs): direct p50 {pct(direct, 50):.2f} ms p99 {pct(direct, 99):.2f} ms; "
                f"gateway p50 {pct(through, 50):.2f} ms p99 {pct(through, 99):.2f} ms; "
                f"added p50 {p50:.2f} ms (target <= 1) p99 {p99:.2f} ms (target <= 5)")  # fmt: skip
            if p50 > 1:
                failed.append(f"added {label} p50")
            if p99 > 5:
                failed.append(f"added {label} p99")
        if args.messages_only:
            say("missed: " + ", ".join(failed) if failed else "all targets met")
            if args.out:
                args.out.write_text("\n".join(lines) + "\n")
            return 1 if failed else 0
        if args.litellm or args.litellm_venv:
            venv = litellm_venv(args.litellm_venv)
            for line in compare_litellm(venv, fast.base_url, fast.port, port, key, 100 if args.quick else 300):
                say(line)
                if float(line.split("= ")[1].split("x")[0]) > 0.25:
                    failed.append("vs LiteLLM " + line.split(":")[0].split()[-1])

    with gateway_before(100) as (paced, gw):
        # 2. decode rate, C1 and C64
        for c in (1, 64):
            d = statistics.median(concurrent(paced.port, None, c, 200, "served"))
            g = statistics.median(concurrent(port, key, c, 200, "chat"))
            say(f"decode C{c}: direct {d:.2f} tok/s, gateway {g:.2f} tok/s = {100 * g / d:.2f} % (target >= 99.5)")
            if g < 0.995 * d:
                failed.append(f"decode C{c}")
        # 3. N concurrent streams for D seconds
        stop = time.monotonic() + duration
        errors: list[str] = []
        done = [0]
        peak = [rss_mb(gw.pid)]

        def loop() -> None:
            while time.monotonic() < stop:
                try:
                    stream_once(port, key, 50, "chat")
                    done[0] += 1
                except Exception as err:
                    errors.append(str(err))

        workers = [threading.Thread(target=loop) for _ in range(args.streams)]
        for w in workers:
            w.start()
            time.sleep(0.01)
        while any(w.is_alive() for w in workers):
            peak[0] = max(peak[0], rss_mb(gw.pid))
            time.sleep(0.5)
        say(f"{args.streams} concurrent streams for {duration:.0f} s: {done[0]} streams, {len(errors)} errors "
            f"(target 0), gateway RSS peak {peak[0]:.0f} MB (target <= 200)")  # fmt: skip
        if errors or peak[0] > 200:
            failed.append("concurrent streams")

    # 4. a request in the middle of a swap
    with gateway_before(100000) as (first, _):
        extra = []
        for _ in range(3 if args.quick else 5):
            result: list[float] = []
            with GatewayHold(
                home, History(home, clock=time.time), profiles=["a", "b"], reason="swap a -> b", target="b"
            ):
                down = time.monotonic()
                sender = threading.Thread(target=lambda out=result: out.append(stream_once(port, key, 8, "chat")[0]))
                sent = time.monotonic()
                sender.start()
                first.stop()
                second = engine(100000).start()
                second.wait_ready()
                route_to("b", second)
                released = time.monotonic()
            sender.join(30)
            answered = sent + result[0]
            extra.append((answered - released) * 1000)
            say(f"mid-swap request: downtime {released - down:.2f} s, answered {1000 * (answered - released):.1f} "
                "ms after the new engine was up")  # fmt: skip
            first = second
        say(f"mid-swap added wait: median {statistics.median(extra):.1f} ms (target <= 50), no error")
        if statistics.median(extra) > 50:
            failed.append("mid-swap wait")
        first.stop()
    say("missed: " + ", ".join(failed) if failed else "all targets met")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
