"""Qualification gates: prove a service works for its clients, not only that it is fast.

Library entry points (keyword-only, typed)::

    suite = load_suite(suite_path("default"))
    report = run_qualify(settings=QualifySettings(url="http://127.0.0.1:8180", suite=suite), environ=os.environ)
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
    "QualifySettings": "servectl.bench.qualify.settings",
    "QualifyProgressEvent": "servectl.bench.qualify.model",
    "ServiceFacts": "servectl.bench.qualify.model",
    "gate_counts": "servectl.bench.qualify.model",
    "load_suite": "servectl.bench.qualify.suite",
    "suite_path": "servectl.bench.qualify.suite",
    "run_qualify": "servectl.bench.qualify.runner",
    "write_evidence": "servectl.bench.qualify.evidence",
    "read_evidence": "servectl.bench.qualify.evidence",
}

__all__ = [*_EXPORTS]

# The one list of public names is _EXPORTS; __all__ is derived from it, and the block below says the same
# to type checkers (`X as X`: an explicit re-export). tests/unit/test_exports.py fails when it drifts.
if TYPE_CHECKING:
    from servectl.bench.qualify.evidence import read_evidence as read_evidence
    from servectl.bench.qualify.evidence import write_evidence as write_evidence
    from servectl.bench.qualify.model import CaseResult as CaseResult
    from servectl.bench.qualify.model import GateResult as GateResult
    from servectl.bench.qualify.model import QualifyProgressEvent as QualifyProgressEvent
    from servectl.bench.qualify.model import QualifyReport as QualifyReport
    from servectl.bench.qualify.model import ServiceFacts as ServiceFacts
    from servectl.bench.qualify.model import gate_counts as gate_counts
    from servectl.bench.qualify.runner import run_qualify as run_qualify
    from servectl.bench.qualify.settings import QualifySettings as QualifySettings
    from servectl.bench.qualify.suite import load_suite as load_suite
    from servectl.bench.qualify.suite import suite_path as suite_path


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
