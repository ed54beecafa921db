"""The health gate against the fake engine with scripted log lines, and the log reader on its own."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from servectl.errors import StartupFailed
from servectl.plan.compile import LaunchPlan
from servectl.plan.resolve import resolve
from servectl.service.health import (
    CUDA_GRAPHS,
    KV_CACHE,
    LOADING_WEIGHTS,
    READY,
    READY_LINE,
    STARTING,
    VERIFYING,
    WARMING_UP,
    GateOptions,
    LogWatcher,
    Progress,
    wait_until_serving,
)
from servectl.testing.docker import FakeDockerEngine, FakeScript, sglang_like_script
from servectl.testing.http import FakeHttp

SPARSE_MLA = "DSA decode backend: flashinfer_sparse_mla (sparse MLA decode path active)"


@pytest.fixture
def demo_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LaunchPlan:
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path))
    plan = resolve("demo", environ=os.environ).plan
    return replace(plan, startup_timeout_s=5.0, stall_timeout_s=2.0)


def _run(
    plan: LaunchPlan, script: FakeScript, *, api_key: str | None = None, **kwargs: float
) -> tuple[FakeDockerEngine, list[Progress], str]:
    engine = FakeDockerEngine(images={plan.docker.image}, script_for=lambda spec: script)
    cid = engine.create_and_start(plan.docker, environ={})
    seen: list[Progress] = []
    with FakeHttp(engine.http_transport()) as http:
        wait_until_serving(
            plan=plan,
            container_id=cid,
            docker=engine,
            http=http,
            on_phase=seen.append,
            api_key=api_key,
            opts=GateOptions(**{"clock": time.monotonic, "sleep": time.sleep, **kwargs}),  # the pace given, real time
        )
    return engine, seen, cid


def _fails(plan: LaunchPlan, script: FakeScript, **kwargs: float) -> StartupFailed:
    with pytest.raises(StartupFailed) as info:
        _run(plan, script, **kwargs)
    return info.value


# -- passing ---------------------------------------------------------------------------------------------
def test_gate_passes_through_every_phase_in_order_and_reports_weight_progress(demo_plan: LaunchPlan) -> None:
    script = sglang_like_script(0.3)
    t0 = time.monotonic()
    engine, seen, cid = _run(demo_plan, script)
    elapsed = time.monotonic() - t0
    phases = [p.phase for p in seen]
    order = [STARTING, LOADING_WEIGHTS, KV_CACHE, CUDA_GRAPHS, WARMING_UP, VERIFYING, READY]
    assert [p for p in order if p in phases] == order
    assert phases == sorted(phases, key=order.index), "phases only move forward"
    assert any(p.phase == LOADING_WEIGHTS and p.percent == 50 for p in seen)
    assert any(p.phase == KV_CACHE and "524288" in p.detail for p in seen)
    # No noticeable delay: ready within a poll period of the ready line (0.3 s into the script).
    assert elapsed < 0.3 + 0.25 + 0.6
    assert engine.inspect(cid) is not None and engine.inspect(cid).running  # type: ignore[union-attr]


def test_gate_result_lists_phase_start_times(demo_plan: LaunchPlan) -> None:
    engine = FakeDockerEngine(images={demo_plan.docker.image}, script_for=lambda s: sglang_like_script(0.2))
    cid = engine.create_and_start(demo_plan.docker, environ={})
    with FakeHttp(engine.http_transport()) as http:
        result = wait_until_serving(
            plan=demo_plan,
            container_id=cid,
            docker=engine,
            http=http,
            opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
        )
    names = [name for name, _ in result.phases]
    assert names[0] == STARTING and names[-1] == READY
    times = [t for _, t in result.phases]
    assert times == sorted(times) and result.startup_s >= 0.2 and result.kv_tokens == 524288


def test_gate_sends_the_api_key_to_the_openai_endpoints_only(demo_plan: LaunchPlan) -> None:
    engine = FakeDockerEngine(images={demo_plan.docker.image}, script_for=lambda s: sglang_like_script(0.1))
    inner = engine.http_transport()
    auth: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        auth[request.url.path] = request.headers.get("authorization")
        return inner.handle_request(request)

    cid = engine.create_and_start(demo_plan.docker, environ={})
    with FakeHttp(httpx.MockTransport(handler)) as http:
        wait_until_serving(
            plan=demo_plan,
            container_id=cid,
            docker=engine,
            http=http,
            api_key="sk-test",
            opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
        )
    assert auth == {"/health": None, "/v1/models": "Bearer sk-test", "/v1/chat/completions": "Bearer sk-test"}


def test_gate_keeps_one_probe_in_flight_and_polls_at_most_every_quarter_second(demo_plan: LaunchPlan) -> None:
    engine = FakeDockerEngine(
        images={demo_plan.docker.image}, script_for=lambda s: sglang_like_script(0.2, never_ready=True)
    )
    inner = engine.http_transport()
    lock = threading.Lock()
    state = {"in_flight": 0, "max": 0, "health": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        with lock:
            state["in_flight"] += 1
            state["max"] = max(state["max"], state["in_flight"])
            state["health"] += request.url.path == "/health"
        time.sleep(0.02)
        with lock:
            state["in_flight"] -= 1
        return inner.handle_request(request)

    plan = replace(demo_plan, startup_timeout_s=1.0, stall_timeout_s=10.0)
    cid = engine.create_and_start(plan.docker, environ={})
    with FakeHttp(httpx.MockTransport(handler)) as http, pytest.raises(StartupFailed):
        wait_until_serving(
            plan=plan,
            container_id=cid,
            docker=engine,
            http=http,
            opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
        )
    assert state["max"] == 1
    assert 2 <= state["health"] <= 6  # 1 s at one probe per 0.25 s (plus the first)


def test_gate_waits_for_expect_log_lines_and_passes_when_they_appear(demo_plan: LaunchPlan) -> None:
    plan = replace(demo_plan, expect_log=("flashinfer_sparse_mla",))
    _, seen, _ = _run(plan, sglang_like_script(0.2, extra_lines=[SPARSE_MLA]))
    assert seen[-1].phase == READY


# -- failing fast ------------------------------------------------------------------------------------------
def test_crash_fails_with_exit_code_phase_and_the_exception_line(demo_plan: LaunchPlan) -> None:
    t0 = time.monotonic()
    err = _fails(demo_plan, sglang_like_script(0.3, crash_at="kv_cache", exit_code=3))
    assert time.monotonic() - t0 < 2.0
    assert err.exit_code_of_container == 3 and not err.oom_killed
    assert "exited with code 3 while loading weights" in err.message
    assert "Scheduler hit an exception" in err.message
    assert err.last_log_lines[-1].startswith("Scheduler hit an exception")


def test_oom_kill_is_reported_with_the_oom_flag(demo_plan: LaunchPlan) -> None:
    err = _fails(demo_plan, sglang_like_script(0.2, crash_at="cuda_graph", exit_code=137, oom_killed=True))
    assert err.oom_killed and err.exit_code_of_container == 137
    assert "exited with code 137 (OOM-killed) while KV cache allocated" in err.message


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory"),
        ("RuntimeError: NCCL error in: nccl.cpp:12, unhandled system error", "NCCL error"),
        (
            "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8190): address already in use",
            "address already in use",
        ),
        (
            "[2026-11-30 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "scheduler exception",
        ),
    ],
)
def test_fatal_line_fails_fast_while_the_container_still_runs(demo_plan: LaunchPlan, line: str, reason: str) -> None:
    t0 = time.monotonic()
    err = _fails(demo_plan, sglang_like_script(0.2, fatal_line=line), fatal_grace_s=0.1)
    assert time.monotonic() - t0 < 1.5
    assert f"fatal log line while loading weights ({reason})" in err.message
    assert err.exit_code_of_container is None
    assert err.last_log_lines[-1] == line


def test_silent_log_fails_after_the_stall_timeout_naming_the_phase(demo_plan: LaunchPlan) -> None:
    plan = replace(demo_plan, stall_timeout_s=0.4)
    t0 = time.monotonic()
    err = _fails(plan, sglang_like_script(0.2, stall_at="cuda_graph"))
    assert 0.4 <= time.monotonic() - t0 < 1.5
    assert "no new log line for 0.4 s while KV cache allocated (health.stall_timeout_s)" in err.message


def test_our_own_probe_access_lines_do_not_count_as_progress(demo_plan: LaunchPlan) -> None:
    access = '[2026-11-30 10:00:00] INFO:     172.17.0.1:5000 - "GET /health HTTP/1.1" 503 Service Unavailable'
    lines = [(0.0, "Load weight begin. avail mem=94.00 GB")] + [(0.05 * i, access) for i in range(1, 40)]
    plan = replace(demo_plan, stall_timeout_s=0.4)
    t0 = time.monotonic()
    err = _fails(plan, FakeScript(tuple(lines)))
    assert time.monotonic() - t0 < 1.2
    assert "no new log line" in err.message


def test_never_ready_fails_at_the_startup_timeout_naming_what_is_missing(demo_plan: LaunchPlan) -> None:
    plan = replace(demo_plan, startup_timeout_s=0.8, stall_timeout_s=30.0)
    err = _fails(plan, sglang_like_script(0.2, never_ready=True))
    assert "not ready after 0.8 s (health.startup_timeout_s) while warming up" in err.message
    assert "/health 200" in err.message and "the ready line" in err.message


def test_missing_expect_log_pattern_fails_once_everything_else_holds(demo_plan: LaunchPlan) -> None:
    plan = replace(demo_plan, expect_log=("flashinfer_sparse_mla", "Load weight end"))
    t0 = time.monotonic()
    err = _fails(plan, sglang_like_script(0.2), expect_grace_s=0.3)
    assert 0.5 <= time.monotonic() - t0 < 1.5
    assert "never showed health.expect_log pattern(s) 'flashinfer_sparse_mla'" in err.message
    assert "Load weight end'" not in err.message


def test_models_listing_another_name_fails_naming_both(demo_plan: LaunchPlan) -> None:
    script = replace(sglang_like_script(0.1), models=("other-model",))
    err = _fails(demo_plan, script)
    assert "lists ['other-model'], not the profile's served name 'demo'" in err.message


def test_a_failing_chat_completion_fails_with_its_status(demo_plan: LaunchPlan) -> None:
    err = _fails(demo_plan, replace(sglang_like_script(0.1), chat_status=500))
    assert "one-token chat completion answered 500" in err.message


def test_container_removed_behind_our_back_fails_at_once(demo_plan: LaunchPlan) -> None:
    engine = FakeDockerEngine(
        images={demo_plan.docker.image}, script_for=lambda s: sglang_like_script(0.2, stall_at="kv_cache")
    )
    cid = engine.create_and_start(demo_plan.docker, environ={})
    threading.Timer(0.3, engine.remove_behind_back, args=(cid,)).start()
    with FakeHttp(engine.http_transport()) as http, pytest.raises(StartupFailed) as info:
        wait_until_serving(
            plan=demo_plan,
            container_id=cid,
            docker=engine,
            http=http,
            opts=GateOptions(clock=time.monotonic, sleep=time.sleep),
        )
    assert "the container was removed while loading weights" in info.value.message


# -- the log reader ---------------------------------------------------------------------------------------
def test_log_watcher_phases_never_move_back() -> None:
    w = LogWatcher()
    w.feed("KV Cache is allocated. #tokens: 1000, K size: 1 GB")
    assert w.phase == KV_CACHE and w.kv_tokens == 1000
    assert w.feed("Load weight end. type=X") == (True, False)
    assert w.phase == KV_CACHE


def test_log_watcher_reads_cuda_graph_capture_progress() -> None:
    w = LogWatcher()
    w.feed("Capture cuda graph begin. This can take up to several minutes.")
    w.feed("Capturing batches (bs=4 avail_mem=10.00 GB):  75%| 3/4 [00:01<00:00]")
    assert (w.phase, w.percent) == (CUDA_GRAPHS, 75)


def test_log_watcher_keeps_the_first_fatal_line_and_the_last_lines() -> None:
    w = LogWatcher(tail_lines=3)
    for line in ["a", "CUDA out of memory", "NCCL error", "b", "c"]:
        w.feed(line)
    assert w.fatal is not None and w.fatal.reason == "CUDA out of memory"
    assert list(w.tail) == ["NCCL error", "b", "c"]


def test_log_watcher_sees_the_ready_line_with_a_log_prefix() -> None:
    w = LogWatcher()
    w.feed(f"[2026-11-30 10:00:00] {READY_LINE}")
    assert w.ready_line_seen and w.phase == VERIFYING


def test_log_tail_keeps_the_engines_lines_not_our_health_probes() -> None:
    from servectl.service.health import LogWatcher

    watcher = LogWatcher(tail_lines=5)
    watcher.feed("Load weight begin.")
    for _ in range(30):
        watcher.feed('INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 503 Service Unavailable')
    watcher.feed("Loading safetensors checkpoint shards:  50% Completed | 1/2")
    assert list(watcher.tail) == ["Load weight begin.", "Loading safetensors checkpoint shards:  50% Completed | 1/2"]


def test_a_crash_reason_is_the_exception_line_not_the_traceback_header() -> None:
    from servectl.service.health import LogWatcher

    watcher = LogWatcher()
    watcher.feed("[2026-12-01 10:00:00] Scheduler hit an exception: Traceback (most recent call last):")
    watcher.feed('  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2841, in run')
    watcher.feed("    scheduler = Scheduler(server_args, port_args)")
    watcher.feed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert watcher.fatal is not None
    assert watcher.fatal.line.endswith(
        "Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert "Traceback" not in watcher.fatal.line


def test_failed_up_cuts_multi_kilobyte_log_lines_like_swap(capsys: pytest.CaptureFixture[str]) -> None:
    from servectl.cli.service import _print_last_lines

    _print_last_lines("a", ("server_args=ServerArgs(" + "x" * 5000 + ")", "short line"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "last log lines of a:" and lines[2] == "  | short line"
    assert len(lines[1]) <= 4 + 240 and lines[1].endswith("...")
