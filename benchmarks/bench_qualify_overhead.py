"""The qualify client's own overhead per request, as ratios measured in one run against the stand-in.

`servectl qualify` records request latencies (endurance drift, per-case p50) through the openai SDK; this
shows the SDK client does not distort them. Against one stand-in (fixed decode rate, so every request takes
the same server time), it alternates the same chat request sent by :class:`QualifyClient` (openai SDK,
streamed and plain) and by a bare ``http.client`` baseline that only reads the bytes, and reports:

* latency ratio = p50 latency through the qualify client / p50 latency of the bare baseline (1.00 = no
  distortion) and the difference in ms per request;
* client CPU fraction = CPU the qualify client's thread spent / the requests' wall time.

    PYTHONPATH=src python benchmarks/bench_qualify_overhead.py [--requests 40] [--tokens 64] [--rate 400]

Exit status 1 when a latency ratio exceeds ``--max-ratio`` (default 1.05) or the client CPU fraction exceeds
``--max-cpu`` (default 0.25: the SDK builds a pydantic object per streamed chunk, ~0.3 ms on a busy
2-core host; at 400 one-token chunks/s that is a tenth of a core).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from servectl.bench.qualify.client import QualifyClient
from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).resolve().parents[1] / "src" / "servectl" / "data" / "examples" / "demo-model")


def _bare(url: str, body: dict[str, object]) -> float:
    """One request over a fresh connection (as the SDK's pool would reuse one, this favours the SDK a little)."""
    parts = urlsplit(url)
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", body=data, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    while response.read(65536):
        pass
    conn.close()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, help="requests per client and mode")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per request")
    parser.add_argument("--rate", type=float, default=400.0, help="stand-in decode rate, tokens/s")
    parser.add_argument("--max-ratio", type=float, default=1.05)
    parser.add_argument("--max-cpu", type=float, default=0.25)
    args = parser.parse_args()

    env = {"STANDIN_STARTUP_DELAY_S": "0", "STANDIN_TOKEN_RATE": str(args.rate), "STANDIN_CHUNK_TOKENS": "1"}
    messages = [{"role": "user", "content": "Count from one to twenty in words."}]
    fixed = {"ignore_eos": True, "min_tokens": args.tokens}
    results: dict[str, tuple[list[float], list[float], float, float]] = {}
    with HostStandin(["--model-path", DEMO_MODEL, "--served-model-name", "overhead"], env=env) as engine:
        engine.wait_ready()
        client = QualifyClient(url=engine.base_url, model="overhead", extra_body=fixed)
        for stream in (False, True):
            body: dict[str, object] = {
                "model": "overhead",
                "messages": messages,
                "max_tokens": args.tokens,
                "stream": stream,
            }
            body.update(fixed)
            if stream:
                body["stream_options"] = {"include_usage": True}
            sdk, bare = [], []
            client.chat(messages, max_tokens=args.tokens, stream=stream)  # warm-up: connection, imports
            _bare(engine.base_url, body)
            cpu0, wall0 = client.client_cpu_s, client.wall_s
            for _ in range(args.requests):  # alternate, so that drift on the host hits both alike
                exchange = client.chat(messages, max_tokens=args.tokens, stream=stream)
                if not exchange.ok:
                    print(f"request failed: {exchange.error}")
                    return 1
                sdk.append(exchange.latency_s)
                bare.append(_bare(engine.base_url, body))
            results["streamed" if stream else "plain"] = (sdk, bare, client.client_cpu_s - cpu0, client.wall_s - wall0)
        client.close()

    server_s = args.tokens / args.rate
    print(f"stand-in: {args.tokens} tokens at {args.rate:g} tok/s = {server_s:.3f} s of decode per request")
    failed = False
    for mode, (sdk, bare, cpu, wall) in results.items():
        ratio = statistics.median(sdk) / statistics.median(bare)
        extra_ms = 1000 * (statistics.median(sdk) - statistics.median(bare))
        cpu_fraction = cpu / wall
        print(
            f"{mode:<9} qualify p50 {statistics.median(sdk):.4f} s, bare p50 {statistics.median(bare):.4f} s: "
            f"ratio {ratio:.3f} ({extra_ms:+.1f} ms/request); client CPU {100 * cpu_fraction:.1f} % of wall "
            f"({1000 * cpu / len(sdk):.2f} ms/request)"
        )
        if ratio > args.max_ratio or cpu_fraction > args.max_cpu:
            failed = True
    if failed:
        print(f"FAIL: a latency ratio above {args.max_ratio} or client CPU above {100 * args.max_cpu:.0f} % of wall")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
