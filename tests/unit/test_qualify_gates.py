"""Every qualification gate passes against a well-behaved stand-in and fails, naming the case, on its fault.

The stand-in runs as a host process (no Docker); each fault is one ``STANDIN_*`` variable
(:mod:`servectl.standin.behaviour`). Suites here are small copies of the default one, so that the tests stay
fast; `servectl qualify demo` runs the shipped default suite (tests/integration/test_qualify_demo.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.unit.gate_runs import gate_run

from servectl.bench.qualify import QualifyReport, QualifySettings, ServiceFacts, run_qualify
from servectl.bench.qualify.suite import LoadedSuite, Suite
from servectl.standin.process import HostStandin

DEMO_MODEL = str(Path(__file__).parents[2] / "examples" / "demo-model")
FAST = {"STANDIN_TOKEN_RATE": "5000", "STANDIN_CHUNK_TOKENS": "2", "STANDIN_STARTUP_DELAY_S": "0"}
PARSERS = ["--reasoning-parser", "glm45", "--tool-call-parser", "glm47"]

GATES: dict[str, dict[str, Any]] = {
    "smoke": {"max_tokens": 16},
    "structured": {"json_object": 1, "json_schema": 4},
    "tools": {"cases": 6, "max_tools_per_case": 3},
    "reasoning": {},
    "long_context": {"targets": [2048], "context_headroom_tokens": 512},
    "endurance": {"requests": 8, "window": 2, "max_tokens": 8},
}


def suite(**gates: dict[str, Any]) -> LoadedSuite:
    return LoadedSuite(Suite.model_validate({"name": "test", "gates": gates}), source="test", sha256="0" * 64)


def qualify(gates: dict[str, dict[str, Any]], *, flags: list[str] = PARSERS, **env: str) -> QualifyReport:
    argv = ["--model-path", DEMO_MODEL, "--context-length", "8192", *flags]
    with HostStandin(argv, env={**FAST, **env}) as engine:
        engine.wait_ready()
        return run_qualify(settings=QualifySettings(url=engine.base_url, suite=suite(**gates)), environ=os.environ)


@pytest.fixture(scope="module")
def healthy() -> Iterator[QualifyReport]:
    yield qualify(GATES)


@pytest.mark.parametrize("gate", list(GATES))
def test_each_gate_passes_on_a_well_behaved_server(healthy: QualifyReport, gate: str) -> None:
    result = next(g for g in healthy.gates if g.gate == gate)
    assert result.verdict == "pass", [c.message for c in result.failures]
    assert result.total > 0 and result.passed == result.total


def test_the_healthy_run_counts_every_case(healthy: QualifyReport) -> None:
    assert healthy.passed
    assert healthy.counts == "smoke 2/2, json 5/5, tools 6/6, reasoning 4/4, needle 2/2, endurance 8/8"
    needles = next(g for g in healthy.gates if g.gate == "long_context").cases
    assert [c.detail["prompt_tokens_target"] for c in needles] == [2048, 8192 - 512 - 64]
    assert all(abs(c.detail["prompt_tokens_actual"] - c.detail["prompt_tokens_target"]) <= 64 for c in needles)
    assert healthy.overhead.requests > 40 and healthy.overhead.client_cpu_s > 0


FAULTS = [
    ("smoke", {"STANDIN_USAGE_SKEW": "5"}, "smoke chat: finish_reason length but usage.completion_tokens 21"),
    ("structured", {"STANDIN_JSON_FAULT": "invalid"}, "structured json_object #1: content is not JSON"),
    (
        "structured",
        {"STANDIN_JSON_FAULT": "schema"},
        "structured json_schema #1 person: answer does not validate against the schema 'name' is a required",
    ),
    (
        "tools",
        {"STANDIN_TOOL_FAULT": "wrong_function"},
        "tools #1 get_weather of 1 tool: called 'get_weather_v2', expected 'get_weather'",
    ),
    (
        "tools",
        {"STANDIN_TOOL_FAULT": "malformed_args"},
        "tools #1 get_weather of 1 tool: get_weather arguments are not valid JSON",
    ),
    ("tools", {"STANDIN_TOOL_FAULT": "schema_args"}, "get_weather arguments do not validate against the tool schema"),
    (
        "tools",
        {"STANDIN_TOOL_FAULT": "stream_mismatch"},
        "tools #1 get_weather of 1 tool: streamed call assembles to other",
    ),
    (
        "tools",
        {"STANDIN_TOOL_FAULT": "no_continue"},
        "tools #1 get_weather of 1 tool: tool-result turn did not continue",
    ),
    ("reasoning", {"STANDIN_REASONING_FAULT": "leak"}, "reasoning thinking on: think tag '<think>' in content"),
    ("long_context", {"STANDIN_NEEDLE_MAX_TOKENS": "1024"}, "needle 2,048 tokens (2,048 actual): answer does not name"),
    ("endurance", {"STANDIN_ERROR_EVERY": "5"}, "endurance request 5: HTTP 500"),
]


@pytest.mark.parametrize(
    ("gate", "env", "message"), FAULTS, ids=[f"{g}-{next(iter(e.values()))}" for g, e, _ in FAULTS]
)
def test_each_gate_fails_on_its_fault_with_a_message_naming_the_case(
    gate: str, env: dict[str, str], message: str
) -> None:
    report = qualify({gate: GATES[gate]}, **env)
    (result,) = report.gates
    assert result.verdict == "fail"
    assert not report.passed
    assert any(message in c.message for c in result.failures), [c.message for c in result.failures]


def test_reasoning_leaks_think_tags_when_the_server_runs_without_a_reasoning_parser() -> None:
    report = qualify({"reasoning": {}}, flags=["--tool-call-parser", "glm47"])
    (result,) = report.gates
    assert result.verdict == "fail"
    assert "reasoning thinking on: think tag '<think>' in content" in result.failures[0].message
    off = [c for c in result.cases if "off" in c.case]
    assert off and all(c.ok for c in off)  # thinking off never leaks


def test_reasoning_thinking_off_fails_when_reasoning_leaks_as_empty_tags() -> None:
    report = qualify({"reasoning": {"streaming": False}}, STANDIN_REASONING_FAULT="leak")
    off = next(c for c in report.gates[0].cases if c.case == "reasoning thinking off")
    assert not off.ok and "think tag '<think>' in content: '<think></think>" in off.message


def test_reasoning_is_skipped_for_a_profile_without_a_reasoning_parser() -> None:
    with HostStandin(["--model-path", DEMO_MODEL], env=FAST) as engine:
        engine.wait_ready()
        report = run_qualify(
            settings=QualifySettings(url=engine.base_url, suite=suite(reasoning={})),
            facts=ServiceFacts(known=True, reasoning_parser=None),
            environ=os.environ,
        )
    assert report.gates[0].verdict == "skipped" and "reasoning-parser" in report.gates[0].note
    assert report.passed and report.counts == ""


def test_drift_ratio_is_the_last_window_over_the_first() -> None:
    from servectl.bench.qualify.gates.endurance import drift

    assert drift([1.0, 1.0, 1.0, 2.0], 2) == (1.5, 1.0, 1.5)
    assert drift([1.0, 1.0, 1.0], 2) is None


class _Scripted:
    """A qualify client whose requests take the scripted latencies (None: the request fails)."""

    def __init__(self, latencies: list[float | None]) -> None:
        self.latencies = iter(latencies)

    def chat(self, messages: object, **kwargs: object) -> object:
        from servectl.bench.qualify.client import Exchange

        latency = next(self.latencies)
        return Exchange(None, latency) if latency is not None else Exchange("HTTP 500: boom", 0.1)


def _endurance(latencies: list[float | None], **spec: Any) -> Any:
    from servectl.bench.qualify.gates import endurance
    from servectl.bench.qualify.suite import EnduranceGate

    run = gate_run(_Scripted(latencies))
    return endurance.run(run, EnduranceGate(requests=len(latencies), **spec))


def test_endurance_fails_on_latency_drift_beyond_the_bound_and_passes_within_it() -> None:
    drifting = _endurance([1.0, 1.0, 1.0, 3.0], window=2, max_drift_ratio=1.5)
    assert drifting.verdict == "fail" and "above the bound" in drifting.note
    assert drifting.detail["drift_ratio"] == 2.0
    steady = _endurance([1.0, 1.0, 1.0, 1.2], window=2, max_drift_ratio=1.5)
    assert steady.verdict == "pass" and "above the bound" not in steady.note


def test_endurance_fails_when_too_few_requests_answer_to_measure_drift() -> None:
    result = _endurance([1.0, None, None, 1.0], window=2, max_drift_ratio=1.5)
    assert result.verdict == "fail" and result.note == "too few answered requests to measure drift"


def test_vram_gate_reads_the_cards_after_the_run_and_fails_below_the_reserve() -> None:
    from servectl.bench.model import CardFreeMemory

    reads: list[int] = []

    def free_vram() -> list[CardFreeMemory]:
        reads.append(1)
        return [CardFreeMemory(0, 4096 * 2**20), CardFreeMemory(1, 1024 * 2**20)]

    with HostStandin(["--model-path", DEMO_MODEL], env=FAST) as engine:
        engine.wait_ready()
        facts = ServiceFacts(known=True, vram_reserve_mib=3072, free_vram=free_vram)
        report = run_qualify(
            settings=QualifySettings(url=engine.base_url, suite=suite(smoke={}, vram={})),
            facts=facts,
            environ=os.environ,
        )
    assert reads == [1]
    smoke_gate, vram_gate = report.gates
    assert smoke_gate.verdict == "pass" and vram_gate.verdict == "fail" and vram_gate.count == "1/2"
    assert vram_gate.failures[0].message == "vram GPU1: 1,024 MiB free after the run, below the reserve of 3,072 MiB"
    assert report.free_vram_after is not None and len(report.free_vram_after) == 2


def test_a_failed_vram_read_fails_the_vram_gate_and_keeps_the_other_gates() -> None:
    """NVML failing after a long run used to raise out of run_qualify: no evidence was written at all."""

    def free_vram() -> list[object]:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    with HostStandin(["--model-path", DEMO_MODEL], env=FAST) as engine:
        engine.wait_ready()
        facts = ServiceFacts(known=True, vram_reserve_mib=3072, free_vram=free_vram)  # type: ignore[arg-type]
        report = run_qualify(
            settings=QualifySettings(url=engine.base_url, suite=suite(smoke={}, vram={})),
            facts=facts,
            environ=os.environ,
        )
    smoke_gate, vram_gate = report.gates
    assert smoke_gate.verdict == "pass" and vram_gate.verdict == "fail"
    assert vram_gate.note == "free VRAM after the run could not be read: NVML_ERROR_GPU_IS_LOST"


class RecordingHttp:
    """An HTTP adapter that records the clients a run opens (and that each block ended)."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.ended = 0

    @contextmanager
    def client(self, url: str) -> Iterator[httpx.Client]:
        self.opened.append(url)
        with httpx.Client() as client:
            yield client
        self.ended += 1

    def status_code(self, url: str, *, timeout_s: float) -> int | None:
        raise AssertionError("a qualify run probes nothing")


def test_the_runs_own_http_client_comes_from_the_adapter_it_is_given() -> None:
    """The routed gate's requests outside the SDK go through the host's HTTP adapter (``Context.http``), one
    client for the run, closed at its end, not an ``httpx.Client`` the runner opened itself."""
    argv = ["--model-path", DEMO_MODEL, "--context-length", "8192", *PARSERS]
    http = RecordingHttp()
    with HostStandin(argv, env=FAST) as engine:
        engine.wait_ready()
        settings = QualifySettings(url=engine.base_url, suite=suite(smoke=GATES["smoke"]))
        report = run_qualify(settings=settings, http=http, environ=os.environ)
    assert report.gates[0].verdict == "pass"
    assert (http.opened, http.ended) == ([engine.base_url], 1)
