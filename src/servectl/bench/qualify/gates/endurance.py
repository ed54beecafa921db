"""Endurance: M sequential requests, none failing, latency not drifting beyond a bound.

Each request is short, unique (a nonce, so no prefix-cache hit) and of fixed length (``ignore_eos`` and
``min_tokens``, SGLang sampling extras), so that latencies are comparable. Drift is the mean latency of the
last ``window`` requests over the mean of the first ``window``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from servectl.bench.qualify.gates.common import GateRun, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import EnduranceGate

GATE = "endurance"


def drift(latencies: Sequence[float], window: int) -> tuple[float, float, float] | None:
    """``(ratio, first mean, last mean)`` over the first and last ``window`` latencies; None with too few."""
    if len(latencies) < 2 * window or window < 1:
        return None
    first = statistics.fmean(latencies[:window])
    last = statistics.fmean(latencies[-window:])
    return (last / first if first > 0 else float("inf")), first, last


def run(run: GateRun, spec: EnduranceGate) -> GateResult:
    """``spec.requests`` requests one after the other."""
    body = merged({"ignore_eos": True, "min_tokens": spec.max_tokens}, spec.extra_body)
    cases = []
    for index in range(spec.requests):
        name = f"endurance request {index + 1}"
        prompt = f"Request {run.run_id}-{index:05d}: count from one to twenty in words."
        exchange = run.client.chat([{"role": "user", "content": prompt}], max_tokens=spec.max_tokens, extra_body=body)
        if exchange.ok:
            result = CaseResult(name, True, "", exchange.latency_s)
        else:
            result = CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s)
        cases.append(result)
        run.report(GATE, index + 1, spec.requests, result)
    latencies = [c.latency_s for c in cases if c.ok and c.latency_s is not None]
    measured = drift(latencies, spec.window)
    if measured is None:
        return GateResult.of(GATE, cases, note="too few answered requests to measure drift", extra_failure=True)
    ratio, first, last = measured
    note = (
        f"latency drift {ratio:.2f}x (first {spec.window}: {first:.3f} s, last {spec.window}: {last:.3f} s; "
        f"bound {spec.max_drift_ratio:g}x)"
    )
    too_much = ratio > spec.max_drift_ratio
    if too_much:
        note = "endurance: " + note.replace("; bound", ", above the bound")
    gate = GateResult.of(GATE, cases, note=note, extra_failure=too_much)
    detail = {
        "drift_ratio": ratio,
        "first_mean_s": first,
        "last_mean_s": last,
        "latency_p50_s": statistics.median(latencies),
    }
    return GateResult(gate.gate, gate.verdict, gate.cases, note, detail)
