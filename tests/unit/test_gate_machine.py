"""The health gate's decisions (GateMachine), driven by hand: log lines, container states and probe results
with made-up times; no thread, no clock, no engine."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from servectl.adapters.docker import ContainerState
from servectl.errors import StartupFailed
from servectl.plan.compile import LaunchPlan
from servectl.plan.resolve import resolve
from servectl.service.health import READY, READY_LINE, GateMachine


@pytest.fixture
def plan() -> LaunchPlan:
    return replace(
        resolve("demo", environ=os.environ).plan, startup_timeout_s=100.0, stall_timeout_s=10.0, expect_log=()
    )


def all_probes_pass(gate: GateMachine) -> None:
    gate.checks.health = gate.checks.models = gate.checks.chat = True


def test_it_passes_once_probes_and_the_ready_line_hold_and_records_each_phase(plan: LaunchPlan) -> None:
    gate = GateMachine(plan, t0=0.0)
    assert gate.feed(1.0, "Load weight begin. avail mem=94.00 GB")
    assert gate.feed(2.0, "KV Cache is allocated. #tokens: 524288, K size: 1.00 GB")
    all_probes_pass(gate)
    assert gate.passed(3.0) is None  # no ready line yet
    gate.feed(4.0, READY_LINE)
    result = gate.passed(4.5)
    assert result is not None and result.startup_s == 4.5 and result.kv_tokens == 524288
    assert [p for p, _ in result.phases][-1] == READY and result.phases[1][1] == 1.0


def test_a_fatal_line_fails_only_after_its_grace_and_names_the_reason(plan: LaunchPlan) -> None:
    gate = GateMachine(plan, t0=0.0, fatal_grace_s=0.5)
    gate.feed(1.0, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert gate.fatal_pending
    gate.check(1.0)  # within the grace: keep reading (the traceback, the exit code)
    with pytest.raises(StartupFailed, match=r"fatal log line while .*\(CUDA out of memory\)"):
        gate.check(1.6)


def test_startup_and_stall_timeouts_say_what_is_missing(plan: LaunchPlan) -> None:
    gate = GateMachine(plan, t0=0.0)
    gate.feed(5.0, "Load weight begin. avail mem=94.00 GB")
    gate.check(14.0)
    with pytest.raises(StartupFailed, match=r"no new log line for 10 s while .*health\.stall_timeout_s"):
        gate.check(15.5)
    slow = GateMachine(replace(plan, stall_timeout_s=1000.0), t0=0.0)
    with pytest.raises(StartupFailed, match=r"not ready after 100 s .*still missing: /health 200, the ready line"):
        slow.check(100.5)


def test_an_exit_carries_the_code_the_oom_flag_and_the_fatal_line(plan: LaunchPlan) -> None:
    gate = GateMachine(plan, t0=0.0)
    gate.feed(2.0, "Scheduler hit an exception: RuntimeError: injected")
    state = ContainerState(id="c" * 64, name="x", image="i", status="exited", exit_code=137, oom_killed=True)
    err = gate.container_exited(state, 3.0)
    assert err.exit_code_of_container == 137 and err.oom_killed
    assert "exited with code 137 (OOM-killed)" in err.message and "RuntimeError: injected" in err.message
    assert err.last_log_lines[-1].startswith("Scheduler hit an exception")


def test_a_missing_expect_log_line_fails_after_its_grace_once_all_else_holds(plan: LaunchPlan) -> None:
    gate = GateMachine(replace(plan, expect_log=("flashinfer",)), t0=0.0, expect_grace_s=1.0)
    gate.feed(1.0, READY_LINE)
    all_probes_pass(gate)
    assert gate.passed(2.0) is None
    with pytest.raises(StartupFailed, match=r"never showed health\.expect_log pattern\(s\) 'flashinfer'"):
        gate.passed(3.0)
    seen = GateMachine(replace(plan, expect_log=("flashinfer",)), t0=0.0)
    seen.feed(0.5, "Using flashinfer attention backend")
    seen.feed(1.0, READY_LINE)
    all_probes_pass(seen)
    assert seen.passed(2.0) is not None
