"""run_bench against a scripted OpenAI-compatible server (httpx.MockTransport, scripted clock)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench_fakes import FakeOpenAIServer, ScriptedClock

from servectl.bench import (
    ApiKey,
    BenchContext,
    BenchProgressEvent,
    BenchSettings,
    plot_taper,
    prompt_tolerance_tokens,
    run_bench,
    write_artifacts,
)
from servectl.errors import BenchFailed


def settings(**kw: object) -> BenchSettings:
    base: dict[str, object] = {
        "url": "http://fake:8180",
        "prompt_tokens": (4096, 16384),
        "repeats": 3,
        "max_tokens": 40,
    }
    return BenchSettings(**{**base, **kw})  # type: ignore[arg-type]


def scripted(**kw: object) -> FakeOpenAIServer:
    return FakeOpenAIServer(clock=ScriptedClock(), **kw)  # type: ignore[arg-type]


def run(server: FakeOpenAIServer, s: BenchSettings, **kw: object):  # type: ignore[no-untyped-def]
    assert server.clock is not None
    return run_bench(settings=s, transport=server.transport(), clock=server.clock, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rate", "chunk"), [(50.0, 1), (500.0, 4), (5000.0, 4)])
def test_decode_ttft_and_prefill_match_the_scripted_server(rate: float, chunk: int) -> None:
    server = scripted(rate_tok_s=rate, chunk_tokens=chunk, ttft_s=0.25)
    report = run(server, settings())
    assert [(p.prompt_tokens_target, p.concurrency) for p in report.points] == [(4096, 1), (16384, 1)]
    for point in report.points:
        assert point.ok_count == 3 and not point.flagged
        assert point.decode_tok_s is not None and point.decode_tok_s.p50 == pytest.approx(rate)
        assert point.ttft_s is not None and point.ttft_s.p50 == pytest.approx(0.25)
        assert point.prompt_tokens_actual is not None
        assert point.prefill_tok_s is not None
        assert point.prefill_tok_s.p50 == pytest.approx(point.prompt_tokens_actual.p50 / 0.25)
        assert all(r.first_chunk_tokens == chunk for r in point.requests)


@pytest.mark.parametrize("tokens_per_word", [0.75, 1.0, 1.37, 2.9])
def test_prompts_land_within_tolerance_of_each_target(tokens_per_word: float) -> None:
    server = scripted(tokens_per_word=tokens_per_word, overhead_tokens=37)
    report = run(server, settings(prompt_tokens=(4096, 65536, 131072), repeats=2))
    for point in report.points:
        assert point.prompt_tokens_within_tolerance is True
        for r in point.requests:
            assert r.prompt_tokens_actual is not None
            assert abs(r.prompt_tokens_actual - point.prompt_tokens_target) <= prompt_tolerance_tokens(
                point.prompt_tokens_target
            )
            # in practice much closer than the tolerance: a couple of words' worth of tokens
            assert abs(r.prompt_tokens_actual - point.prompt_tokens_target) <= 2 * tokens_per_word + 1
    assert report.calibration.tokens_per_word == pytest.approx(tokens_per_word, rel=0.01)


def test_requests_ask_for_streamed_usage_fixed_length_and_carry_unique_prompts() -> None:
    server = scripted()
    run(server, settings(temperature=0.0, extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
    measured = [b for b in server.bodies if b["max_tokens"] == 40]
    assert len(server.bodies) == 2 + 2 * (1 + 3)  # probes, then warm-up + 3 repeats per target
    for body in measured:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert body["ignore_eos"] is True and body["min_tokens"] == 40
        assert body["temperature"] == 0.0
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert body["model"] == "fake-model"
    prompts = [b["messages"][0]["content"] for b in server.bodies]
    assert len(set(prompts)) == len(prompts)
    assert len({p.split()[1] for p in prompts}) == len(prompts)  # unique nonce at the very start
    assert [b["max_tokens"] for b in server.bodies[:2]] == [1, 1]


def test_api_key_is_sent_as_bearer_and_never_written_to_artifacts(tmp_path: Path) -> None:
    server = scripted(required_key="sk-live-abc")
    report = run(server, settings(api_key=ApiKey("sk-live-abc"), api_key_env="BENCH_KEY"))
    paths = write_artifacts(report, tmp_path)
    for path in paths:
        text = path.read_text()
        assert "sk-live-abc" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["request_settings"]["api_key_env"] == "BENCH_KEY"
    assert summary["request_settings"]["api_key"] == "***"


def test_refused_key_and_unreachable_server_raise_bench_failed_with_a_hint() -> None:
    with pytest.raises(BenchFailed, match=r"http://fake:8180/v1/models: HTTP 401; pass --api-key-env NAME"):
        run(scripted(required_key="k"), settings())
    with pytest.raises(BenchFailed, match=r"serves 3 models \[.a., .b., .fake-model.\]; pick one with --model"):
        run(scripted(models=("a", "b")), settings())
    with pytest.raises(BenchFailed, match="model 'nope' is not served"):
        run(scripted(), settings(model="nope"))
    with pytest.raises(BenchFailed, match="cannot reach the server"):
        run_bench(settings=BenchSettings(url="http://127.0.0.1:9", prompt_tokens=(100,)))


def test_calibration_probe_failure_is_one_clear_error() -> None:
    with pytest.raises(BenchFailed, match="calibration probe of 64 words failed: HTTP 503"):
        run(scripted(status=503), settings())


def test_short_completions_are_flagged_and_left_out_of_the_statistics() -> None:
    # every 2nd chat request is 3 tokens short (request numbers count probes and warm-ups too)
    server = scripted(shortfall=3, shortfall_every=2, rate_tok_s=100.0)
    report = run(server, settings(prompt_tokens=(4096,), repeats=4))
    (point,) = report.points
    short = [r for r in point.requests if r.failure == "short_completion"]
    assert len(short) == 2 and point.ok_count == 2
    assert all(r.completion_tokens_produced == 37 and r.complete for r in short)
    assert point.decode_tok_s is not None and point.decode_tok_s.n == 2
    assert any("2 of 4 requests flagged (short_completion)" in w for w in point.warnings)
    assert report.flagged_requests == tuple(short)


def test_a_stream_that_dies_midway_is_reported_and_not_averaged_in(tmp_path: Path) -> None:
    server = scripted(die_after_tokens=10, die_every=2, rate_tok_s=100.0)
    report = run(server, settings(prompt_tokens=(4096,), repeats=4))
    (point,) = report.points
    dead = [r for r in point.requests if not r.ok]
    assert {r.failure for r in dead} == {"incomplete_stream"}
    assert all(r.completion_tokens_produced == 10 and not r.complete for r in dead)
    assert point.decode_tok_s is not None and point.decode_tok_s.n == point.ok_count == 2
    write_artifacts(report, tmp_path)
    doc = json.loads((tmp_path / "c1-p4096-r4.json").read_text())
    assert doc["point"]["requests_flagged"] == 2
    assert sorted(r["failure"] or "" for r in doc["requests"]) == [
        "",
        "",
        "incomplete_stream",
        "incomplete_stream",
    ]


def test_http_errors_on_measured_requests_are_flagged() -> None:
    server = scripted(status=500, status_from_request=4)  # probes and the warm-up pass, then 500s
    report = run(server, settings(prompt_tokens=(4096,)))
    (point,) = report.points
    assert point.ok_count == 0 and point.decode_tok_s is None
    assert {r.failure for r in point.requests} == {"http_error"}
    assert point.warmup is not None and point.warmup.ok  # request 3 passed; the warning list says so
    assert not any(w.startswith("warm-up") for w in point.warnings)
    assert point.requests[0].error == 'HTTP 500 from /v1/chat/completions: {"error":{"message":"engine overloaded"}}'


def test_targets_beyond_the_served_context_are_skipped_with_the_reason() -> None:
    server = scripted(max_model_len=32768)
    report = run(server, settings(prompt_tokens=(4096, 65536)))
    skipped = [p for p in report.points if p.skipped]
    assert [p.prompt_tokens_target for p in skipped] == [65536]
    assert skipped[0].skipped == (
        "65,536 prompt + 40 completion tokens exceed the served context of 32,768 tokens; skipped"
    )
    assert report.points[0].ok_count == 3


def test_progress_counts_every_request_up_to_the_total() -> None:
    events: list[BenchProgressEvent] = []
    run(scripted(), settings(concurrency=(1,), repeats=2), progress=events.append)
    assert events[-1].done == events[-1].total == 2 + 2 * (1 + 2)
    assert [e.role for e in events[:3]] == ["probe", "probe", "warmup"]
    assert all(b.done > a.done for a, b in itertools.pairwise(events))


@dataclass(frozen=True)
class Card:
    index: int
    memory_free_bytes: int | None


def test_context_and_free_vram_after_the_run_are_recorded(tmp_path: Path) -> None:
    calls: list[int] = []

    def free_vram() -> list[Card]:
        calls.append(1)
        return [Card(0, 2101 * 2**20), Card(1, 2543 * 2**20), Card(2, None)]

    context = BenchContext(
        profile_name="glm53-393k",
        plan_hash="ph-1",
        image_digest="sha256:0c06",
        model_revision="c3cb",
        free_vram_after=free_vram,
    )
    report = run(scripted(), settings(prompt_tokens=(4096,)), context=context)
    assert calls == [1]
    write_artifacts(report, tmp_path)
    for name in ("summary.json", "c1-p4096-r3.json"):
        doc = json.loads((tmp_path / name).read_text())
        assert doc["provenance"] == {
            "profile": "glm53-393k",
            "plan_hash": "ph-1",
            "image_digest": "sha256:0c06",
            "model_revision": "c3cb",
        }
        assert doc["run_id"] == report.run_id and doc["started_at"] and doc["finished_at"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["memory_free_mib"] for c in summary["free_vram_after"]] == [2101, 2543, None]


def test_a_failing_vram_reader_becomes_a_warning_not_a_lost_run() -> None:
    def broken() -> list[Card]:
        raise RuntimeError("NVML: GPU is lost")

    report = run(scripted(), settings(prompt_tokens=(4096,)), context=BenchContext(free_vram_after=broken))
    assert report.free_vram_after is None
    assert report.warnings == ("free VRAM after the run could not be read: NVML: GPU is lost",)
    assert report.points[0].ok_count == 3


def test_accept_length_is_taken_from_the_stream_and_from_server_info() -> None:
    server = scripted(
        accept_length=3.4,
        server_info={"internal_states": [{"avg_spec_accept_length": 3.1}]},
    )
    report = run(server, settings(prompt_tokens=(4096,)))
    (point,) = report.points
    assert point.accept_length is not None and point.accept_length.p50 == pytest.approx(3.4)
    assert point.server_accept_length == pytest.approx(3.1)


def test_no_accept_length_when_the_server_reports_none() -> None:
    (point,) = run(scripted(), settings(prompt_tokens=(4096,))).points
    assert point.accept_length is None and point.server_accept_length is None


def test_concurrency_runs_simultaneous_streams_and_reports_round_throughput() -> None:
    server = FakeOpenAIServer(clock=None, rate_tok_s=1000.0, ttft_s=0.02)  # real time: threads overlap
    report = run_bench(
        settings=settings(prompt_tokens=(512,), concurrency=(1, 3), repeats=2, max_tokens=20),
        transport=server.transport(),
    )
    assert server.max_in_flight == 3
    c1, c3 = report.points
    assert (c1.concurrency, len(c1.requests)) == (1, 2)
    assert (c3.concurrency, len(c3.requests)) == (3, 6)
    assert sorted((r.round_index, r.stream_index) for r in c3.requests) == [(i, j) for i in range(2) for j in range(3)]
    assert c3.round_output_tok_s is not None and c3.round_output_tok_s.n == 2
    assert c3.client_cpu_s > 0 and c3.chunks == 6 * 20


def test_artifacts_hold_one_file_per_point_and_a_summary(tmp_path: Path) -> None:
    report = run(scripted(), settings(prompt_tokens=(4096, 16384), repeats=3))
    paths = write_artifacts(report, tmp_path / "evidence")
    names = ["artifact-manifest.json", "c1-p16384-r3.json", "c1-p4096-r3.json", "summary.json"]
    assert sorted(p.name for p in paths) == names
    doc = json.loads((tmp_path / "evidence" / "c1-p4096-r3.json").read_text())
    assert doc["schema"] == "servectl.bench/v2" and doc["kind"] == "point"
    assert doc["request_settings"]["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
    assert doc["request_settings"]["ignore_eos"] is True and doc["request_settings"]["min_tokens"] == 40
    assert doc["point"]["prompt_tokens_target"] == 4096
    assert doc["point"]["decode_tok_s"]["n"] == 3 and len(doc["requests"]) == 3
    assert doc["warmup"]["role"] == "warmup"
    summary = json.loads((tmp_path / "evidence" / "summary.json").read_text())
    assert [p["file"] for p in summary["points"]] == ["c1-p4096-r3.json", "c1-p16384-r3.json"]
    assert summary["requests_flagged"] == 0


def test_taper_plot_is_a_non_empty_png(tmp_path: Path) -> None:
    report = run(scripted(), settings(prompt_tokens=(4096, 16384, 65536), repeats=2))
    path = plot_taper(report, tmp_path / "taper.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_refuses_a_report_without_decode_numbers(tmp_path: Path) -> None:
    report = run(scripted(status=500, status_from_request=4), settings(prompt_tokens=(4096,)))
    with pytest.raises(ValueError, match="no point has a decode measurement"):
        plot_taper(report, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_a_failed_warm_up_is_a_warning_on_its_point() -> None:
    server = scripted(status=500, status_from_request=3)  # the warm-up is the third chat request
    (point,) = run(server, settings(prompt_tokens=(4096,))).points
    assert point.warmup is not None and point.warmup.failure == "http_error"
    expected = "warm-up request failed (http_error): HTTP 500 from /v1/chat/completions"
    assert any(w.startswith(expected) for w in point.warnings), point.warnings
