"""The bench against the stand-in engine at known token rates (host subprocess, no Docker).

Windows are sized so that one sleep's jitter stays well below 0.5 %: ~0.8 s of decode at 50 and 500 tok/s,
0.4 s at 5,000 tok/s; p50 of five requests, so that one scheduling hiccup on a busy 2-core machine does not
decide the result. At 5,000 tok/s in 1-token chunks the stand-in needs about 0.35 of a core and the client
about 0.5 (see benchmarks/bench_client_overhead.py): with other CPU-heavy work on a 2-core machine these
tests can miss 0.5 % because either side gets starved, not because of the measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servectl.bench import BenchSettings, prompt_tolerance_tokens, run_bench

SRC = Path(__file__).resolve().parents[2] / "src"
StartStandin = Callable[..., str]
MAX_TOKENS_AT_RATE = {50: 40, 500: 400, 5000: 2000}


@pytest.mark.parametrize("chunk", [1, 4])
@pytest.mark.parametrize("rate", [50, 500, 5000])
def test_decode_rate_is_within_half_a_percent_of_the_stand_ins_rate(
    start_standin: StartStandin, rate: int, chunk: int
) -> None:
    url = start_standin(STANDIN_TOKEN_RATE=str(rate), STANDIN_CHUNK_TOKENS=str(chunk))
    report = run_bench(
        settings=BenchSettings(
            url=url, prompt_tokens=(2048,), repeats=5, max_tokens=MAX_TOKENS_AT_RATE[rate], warmup=False
        )
    )
    (point,) = report.points
    assert point.ok_count == 5, [r.error for r in point.flagged]
    assert point.decode_tok_s is not None
    assert point.decode_tok_s.p50 == pytest.approx(rate, rel=0.005)
    for r in point.requests:
        assert r.completion_tokens_produced == MAX_TOKENS_AT_RATE[rate]
        assert r.first_chunk_tokens == chunk and r.first_chunk_tokens_source == "usage"
        assert r.token_chunks == MAX_TOKENS_AT_RATE[rate] // chunk
    if chunk > 1:  # the stand-in reports speculative figures when chunks hold several tokens
        assert point.accept_length is not None and point.accept_length.p50 == pytest.approx(chunk)


def test_prompt_lengths_reach_their_targets_within_tolerance(start_standin: StartStandin) -> None:
    url = start_standin(STANDIN_TOKEN_RATE="5000")
    targets = (1000, 4096, 65536, 304491)
    report = run_bench(settings=BenchSettings(url=url, prompt_tokens=targets, repeats=2, max_tokens=8))
    assert [p.prompt_tokens_target for p in report.points] == list(targets)
    for point in report.points:
        assert point.prompt_tokens_within_tolerance is True
        for r in (*point.requests, point.warmup):
            assert r is not None and r.prompt_tokens_actual is not None
            miss = abs(r.prompt_tokens_actual - point.prompt_tokens_target)
            assert miss <= prompt_tolerance_tokens(point.prompt_tokens_target)


def test_a_server_that_returns_fewer_tokens_than_asked_is_flagged(start_standin: StartStandin) -> None:
    url = start_standin(STANDIN_TOKEN_RATE="2000", STANDIN_COMPLETION_SHORTFALL="3")
    report = run_bench(settings=BenchSettings(url=url, prompt_tokens=(1024,), repeats=2, max_tokens=40))
    (point,) = report.points
    assert point.ok_count == 0 and point.decode_tok_s is None
    assert {r.failure for r in point.requests} == {"short_completion"}
    assert point.requests[0].error == (
        "short completion: 37 of 40 tokens asked (finish_reason 'stop'); the server ignored min_tokens/ignore_eos"
    )


def test_a_stream_that_dies_midway_is_reported_not_averaged_in(start_standin: StartStandin) -> None:
    url = start_standin(STANDIN_TOKEN_RATE="2000", STANDIN_DIE_AFTER_TOKENS="10")
    report = run_bench(settings=BenchSettings(url=url, prompt_tokens=(1024,), repeats=2, max_tokens=40))
    (point,) = report.points
    assert point.ok_count == 0 and point.decode_tok_s is None and point.ttft_s is None
    for r in point.requests:
        assert r.failure == "incomplete_stream" and not r.complete
        assert r.completion_tokens_produced == 10
        assert r.error is not None and r.error.startswith("stream broke after 10 token chunks (10 tokens): ")


def test_cli_writes_artifacts_and_a_non_empty_png_plot(start_standin: StartStandin, tmp_path: Path) -> None:
    url = start_standin(STANDIN_TOKEN_RATE="1000", STANDIN_CHUNK_TOKENS="2")
    out_dir, png = tmp_path / "evidence", tmp_path / "taper.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "servectl",
            "bench",
            "--url",
            url,
            "--prompt-tokens",
            "1024,8192",
            "--concurrency",
            "1,2",
            "--repeats",
            "2",
            "--max-tokens",
            "64",
            "--out",
            str(out_dir),
            "--plot",
            str(png),
        ],
        env={"PYTHONPATH": str(SRC), "COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    summary = json.loads((out_dir / "summary.json").read_text())
    assert [(p["prompt_tokens_target"], p["concurrency"]) for p in summary["points"]] == [
        (1024, 1),
        (1024, 2),
        (8192, 1),
        (8192, 2),
    ]
    for p in summary["points"]:
        assert p["requests_ok"] == p["requests"] == 2 * p["concurrency"]
        # a sanity bound only: 0.2 s windows at C2 in a subprocess; precision is tested at C1 above (a loaded
        # 2-core machine measured 1060 here, so the bound allows scheduling noise, not a wrong rate)
        assert p["decode_tok_s"]["p50"] == pytest.approx(1000, rel=0.2)
    assert "standin-model" in result.stdout and "1,024 / 1,024" in result.stdout
