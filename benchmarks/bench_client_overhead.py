"""Client CPU of ``servectl bench`` per 1,000 streamed chunks, against the stand-in at a high token rate.

Shows that stream parsing is not what limits a measurement: it reports the client's CPU per 1,000 chunks
(whole client: httpx + SSE parsing + metrics) and of the SSE parser alone (replayed offline on the recorded
bytes of one stream), and the headroom = chunks/s the client could absorb on one core / chunks/s offered.

    PYTHONPATH=src python benchmarks/bench_client_overhead.py [--rate 5000] [--tokens 4000]

Exit status 1 when the headroom is below ``--min-headroom`` or the measured decode rate misses the set rate by
more than 0.5 %. Starts ``python -m servectl.standin`` on a free port and stops it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from servectl.bench import BenchSettings, run_bench
from servectl.bench.stream import StreamAccumulator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_standin(model_dir: Path, rate: float, chunk: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {
        **os.environ,
        "STANDIN_STARTUP_DELAY_S": "0",
        "STANDIN_TOKEN_RATE": str(rate),
        "STANDIN_CHUNK_TOKENS": str(chunk),
    }
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "servectl.standin", "--model-path", str(model_dir), "--served-model-name",
            "overhead", "--host", "127.0.0.1", "--port", str(port), "--context-length", "100000",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"stand-in on {url} did not become healthy")


def _record_stream(url: str, tokens: int) -> list[bytes]:
    body = {
        "model": "overhead",
        "messages": [{"role": "user", "content": "overhead " * 200}],
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_tokens": tokens,
        "ignore_eos": True,
        "min_tokens": tokens,
    }
    with httpx.Client(base_url=url) as client, client.stream("POST", "/v1/chat/completions", json=body) as r:
        return list(r.iter_bytes())


def _parser_ms_per_1000(pieces: list[bytes], loops: int = 5) -> tuple[float, int]:
    best = float("inf")
    chunks = 0
    for _ in range(loops):
        acc = StreamAccumulator(sent_at=0.0)
        pending = b""
        cpu0 = time.process_time()
        for i, piece in enumerate(pieces):
            pending = acc.feed_bytes(piece, float(i), pending)
        best = min(best, time.process_time() - cpu0)
        chunks = acc.chunks
    return 1e6 * best / chunks, chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0, help="stand-in tokens/s (1-token chunks)")
    parser.add_argument("--tokens", type=int, default=4000, help="completion tokens per request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-headroom", type=float, default=1.5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        (model_dir / "config.json").write_text(
            json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 8, "vocab_size": 32000, "torch_dtype": "bfloat16"})
        )  # fmt: skip
        proc, url = _start_standin(model_dir, args.rate, 1)
        try:
            report = run_bench(
                settings=BenchSettings(
                    url=url, prompt_tokens=(1024,), repeats=args.repeats, max_tokens=args.tokens, warmup=True
                )
            )
            pieces = _record_stream(url, args.tokens)
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    (point,) = report.points
    client_ms = point.client_cpu_ms_per_1000_chunks or float("nan")
    parser_ms, parsed_chunks = _parser_ms_per_1000(pieces)
    decode = point.decode_tok_s.p50 if point.decode_tok_s else float("nan")
    offered = args.rate  # 1-token chunks: chunks/s == tokens/s
    sustainable = 1e6 / client_ms
    headroom = sustainable / offered
    error_pct = 100 * (decode / args.rate - 1)
    rows = [
        ("stand-in rate", f"{args.rate:,.0f} tok/s, 1-token chunks, {args.tokens:,} tokens x {args.repeats}"),
        ("measured decode p50", f"{decode:,.1f} tok/s ({error_pct:+.3f} % of the set rate)"),
        ("client CPU, whole", f"{client_ms:.1f} ms/1,000 chunks ({point.client_cpu_fraction or 0:.2f} core)"),
        ("client CPU, parser", f"{parser_ms:.1f} ms/1,000 chunks (offline, {parsed_chunks:,} chunks)"),
        ("parser share", f"{100 * parser_ms / client_ms:.0f} % of the client's CPU (rest: httpx, sockets)"),
        ("headroom", f"{headroom:.2f}x (one core absorbs {sustainable:,.0f} chunks/s)"),
    ]
    for label, value in rows:
        print(f"{label:<21} {value}")
    failed = headroom < args.min_headroom or abs(error_pct) > 0.5
    if failed:
        print(f"FAIL: headroom below {args.min_headroom}x or decode off by more than 0.5 %")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
