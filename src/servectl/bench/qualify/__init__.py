"""Qualification gates: prove a service works for its clients, not only that it is fast.

Library entry points (keyword-only, typed)::

    suite = load_suite(suite_path("default"))
    report = run_qualify(settings=QualifySettings(url="http://127.0.0.1:8180", suite=suite))
    write_evidence(report, Path("evidence"))

Gates (each with a count and a verdict; see :mod:`servectl.bench.qualify.gates`): smoke, structured output,
tool calling, reasoning contracts, long-context needle, endurance, free VRAM after the run. The client is the
openai SDK (imported when a run starts), as real clients use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "GateResult": "servectl.bench.qualify.model",
    "CaseResult": "servectl.bench.qualify.model",
    "QualifyReport": "servectl.bench.qualify.model",
    "QualifySettings": "servectl.bench.qualify.model",
    "QualifyProgressEvent": "servectl.bench.qualify.model",
    "ServiceFacts": "servectl.bench.qualify.model",
    "gate_counts": "servectl.bench.qualify.model",
    "load_suite": "servectl.bench.qualify.suite",
    "suite_path": "servectl.bench.qualify.suite",
    "run_qualify": "servectl.bench.qualify.runner",
    "write_evidence": "servectl.bench.qualify.evidence",
    "read_evidence": "servectl.bench.qualify.evidence",
}

__all__ = [
    "CaseResult",
    "GateResult",
    "QualifyProgressEvent",
    "QualifyReport",
    "QualifySettings",
    "ServiceFacts",
    "gate_counts",
    "load_suite",
    "read_evidence",
    "run_qualify",
    "suite_path",
    "write_evidence",
]

if TYPE_CHECKING:
    from servectl.bench.qualify.evidence import read_evidence, write_evidence
    from servectl.bench.qualify.model import (
        CaseResult,
        GateResult,
        QualifyProgressEvent,
        QualifyReport,
        QualifySettings,
        ServiceFacts,
        gate_counts,
    )
    from servectl.bench.qualify.runner import run_qualify
    from servectl.bench.qualify.suite import load_suite, suite_path


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
