"""Peak VRAM per card and output tokens per minute at each concurrency (bench artifacts v2)."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from bench_fakes import FakeOpenAIServer, ScriptedClock
from rich.console import Console

from servectl.adapters.gpu import MIB, GpuDevice
from servectl.bench import BenchContext, BenchSettings, run_bench, write_artifacts
from servectl.bench.vram import VramWatch, stop_sampler
from servectl.cli.bench import _render_notes, results_table
from servectl.testing.fakes import FakeGpuInventory, make_device


def settings(**kw: object) -> BenchSettings:
    base: dict[str, object] = {"url": "http://fake:8180", "prompt_tokens": (4096,), "repeats": 3, "max_tokens": 40}
    return BenchSettings(**{**base, **kw})  # type: ignore[arg-type]


def cards_of(inventory: FakeGpuInventory, wanted: Sequence[int] = (0, 1)) -> BenchContext:
    """The context bench_target builds: the service's cards, read from the inventory."""
    return BenchContext(used_vram=lambda: [d for d in inventory.snapshot().devices if d.index in wanted])


def test_output_tokens_per_minute_is_the_good_completion_tokens_over_the_rounds_wall_time() -> None:
    server = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=500.0, ttft_s=0.2)
    assert server.clock is not None
    report = run_bench(settings=settings(), transport=server.transport(), clock=server.clock)
    (point,) = report.points
    assert point.output_tokens == 3 * 40
    # the scripted clock moves only while a request streams: three requests of TTFT + 39 token gaps each
    assert point.measured_s == pytest.approx(3 * (0.2 + 39 / 500.0))
    assert point.output_tok_per_min == pytest.approx(60 * 120 / (3 * (0.2 + 39 / 500.0)))


def test_a_flagged_request_adds_no_output_tokens() -> None:
    server = FakeOpenAIServer(clock=ScriptedClock(), shortfall=5, shortfall_every=2)
    assert server.clock is not None
    (point,) = run_bench(settings=settings(), transport=server.transport(), clock=server.clock).points
    assert point.flagged and point.ok_count == 3 - len(point.flagged)
    assert point.output_tokens == 40 * point.ok_count  # the 35 tokens of each short one are not counted


def test_peak_vram_is_the_highest_use_of_each_of_the_service_cards_per_point() -> None:
    used = {0: 30_000, 1: 12_000, 2: 70_000}  # card 2 is not the service's: it is left out
    inventory = FakeGpuInventory.of(*(make_device(i, extra_used_mib=m) for i, m in used.items()))
    server = FakeOpenAIServer(clock=ScriptedClock())
    assert server.clock is not None
    report = run_bench(
        settings=settings(concurrency=(1, 2)),
        context=cards_of(inventory),
        transport=server.transport(),
        clock=server.clock,
    )
    assert [p.concurrency for p in report.points] == [1, 2]
    for point in report.points:
        assert point.peak_vram is not None and point.peak_vram.samples >= 2  # at the start and at the end
        assert [(c.index, c.peak_used_mib) for c in point.peak_vram.cards] == [(0, 30_000), (1, 12_000)]
        assert point.peak_vram.highest_mib == 30_000
        assert point.peak_vram.total_bytes == 42_000 * MIB
    assert report.warnings == ()


def test_each_point_gets_its_own_peak() -> None:
    """Readings belong to the point that took them: a rise during the second point is not the first's."""
    snapshots = [FakeGpuInventory.snapshot_of([make_device(0, extra_used_mib=m)]) for m in (1000, 2000, 9000, 3000)]
    inventory = FakeGpuInventory(snapshots)
    watch = VramWatch(lambda: inventory.snapshot().devices, interval_s=3600)  # only the start and end readings
    first = stop_sampler(watch.point())
    second = stop_sampler(watch.point())
    assert first is not None and second is not None
    assert (first.highest_mib, first.samples) == (2000, 2)
    assert (second.highest_mib, second.samples) == (9000, 2)


def test_the_sampler_reads_in_the_background_and_catches_a_peak_between_start_and_end() -> None:
    calls: list[float] = []
    spiked = threading.Event()

    def read() -> list[GpuDevice]:
        calls.append(time.monotonic())
        if len(calls) == 3:
            spiked.set()
            return [make_device(0, extra_used_mib=50_000)]
        return [make_device(0, extra_used_mib=1_000)]

    sampler = VramWatch(read, interval_s=0.01).point()
    assert spiked.wait(5.0), "the sampler thread took no reading in the background"
    peak = stop_sampler(sampler)
    assert peak is not None and peak.highest_mib == 50_000 and peak.samples >= 4
    count = len(calls)
    time.sleep(0.05)
    assert len(calls) == count, "the sampler thread kept reading after its point ended"


def test_without_nvml_peak_vram_is_unknown_with_one_note_and_the_run_goes_on(tmp_path: Path) -> None:
    inventory = FakeGpuInventory.scenario("no_driver")
    server = FakeOpenAIServer(clock=ScriptedClock())
    assert server.clock is not None
    report = run_bench(
        settings=settings(prompt_tokens=(4096, 8192), concurrency=(1, 2)),
        context=cards_of(inventory),
        transport=server.transport(),
        clock=server.clock,
    )
    assert len(report.points) == 4 and all(p.ok_count == len(p.requests) for p in report.points)
    assert all(p.peak_vram is None for p in report.points)
    notes = [w for w in report.warnings if w.startswith("peak VRAM unknown")]
    assert len(notes) == 1 and "NVML" in notes[0], report.warnings
    assert inventory.calls == 1  # the first failure turned the watch off: no retry per point
    write_artifacts(report, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [p["peak_vram"] for p in summary["points"]] == [None] * 4
    assert all(p["output_tok_per_min"] > 0 for p in summary["points"])


def test_a_reader_that_fails_midway_keeps_what_it_read_and_notes_it_once() -> None:
    calls = 0

    def read() -> list[GpuDevice]:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise RuntimeError("GPU is lost")
        return [make_device(0, extra_used_mib=4_000)]

    watch = VramWatch(read, interval_s=3600)
    first = stop_sampler(watch.point())
    assert first is not None and first.highest_mib == 4_000
    assert watch.point() is not None and watch.broken
    assert watch.point() is None and watch.note == "peak VRAM unknown: the cards could not be read (GPU is lost)"


def test_a_card_whose_use_the_driver_cannot_tell_is_unknown_not_zero() -> None:
    unknown = GpuDevice.unreadable(0, lost=False, problem="not supported")
    peak = stop_sampler(VramWatch(lambda: [unknown, make_device(1, extra_used_mib=500)], interval_s=3600).point())
    assert peak is not None
    assert [(c.index, c.peak_used_mib) for c in peak.cards] == [(0, None), (1, 500)]
    assert peak.highest_mib == 500 and peak.total_bytes is None


def test_v2_artifacts_record_output_tokens_per_minute_and_peak_vram_per_card(tmp_path: Path) -> None:
    inventory = FakeGpuInventory.of(make_device(0, extra_used_mib=30_000), make_device(1, extra_used_mib=29_000))
    server = FakeOpenAIServer(clock=ScriptedClock())
    assert server.clock is not None
    report = run_bench(
        settings=settings(), context=cards_of(inventory), transport=server.transport(), clock=server.clock
    )
    write_artifacts(report, tmp_path)
    point = json.loads((tmp_path / "c1-p4096-r3.json").read_text())
    assert point["schema"] == "servectl.bench/v2"
    (p,) = report.points
    assert point["point"]["output_tokens"] == 120 and point["point"]["output_tok_per_min"] == p.output_tok_per_min
    assert point["point"]["measured_s"] == p.measured_s
    assert point["point"]["peak_vram"]["cards"] == [
        {"index": 0, "peak_used_bytes": 30_000 * MIB, "peak_used_mib": 30_000},
        {"index": 1, "peak_used_bytes": 29_000 * MIB, "peak_used_mib": 29_000},
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["points"][0]["peak_vram"] == point["point"]["peak_vram"]


def test_the_table_shows_output_tokens_per_minute_and_the_fullest_cards_peak() -> None:
    inventory = FakeGpuInventory.of(make_device(0, extra_used_mib=30_000), make_device(1, extra_used_mib=29_000))
    server = FakeOpenAIServer(clock=ScriptedClock(), rate_tok_s=500.0, ttft_s=0.2)
    assert server.clock is not None
    report = run_bench(
        settings=settings(), context=cards_of(inventory), transport=server.transport(), clock=server.clock
    )
    console = Console(file=io.StringIO(), width=160)
    console.print(results_table(report, width=160))
    _render_notes(console, report)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    rate = f"{report.points[0].output_tok_per_min:,.0f}"
    assert "tok/min" in out and f" {rate} " in out and " 30,000 " in out
    assert "peak VRAM 4,096 tokens C1: GPU0 30,000 MiB, GPU1 29,000 MiB" in out
    narrow = Console(file=io.StringIO(), width=80)
    narrow.print(results_table(report, width=80))
    assert all(len(line) <= 80 for line in narrow.file.getvalue().splitlines())  # type: ignore[attr-defined]
