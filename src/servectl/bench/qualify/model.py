"""Plain values of a qualification run: service facts, case and gate results (settings: `settings.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servectl.bench.model import BenchContext, CardFreeMemory, CardMemory
from servectl.bench.qualify.settings import QualifySettings

Verdict = Literal["pass", "fail", "skipped"]


@dataclass(frozen=True)
class ServiceFacts:
    """What the profile says about the service, where a profile is known (``known=False`` for a bare URL).

    Attributes:
        known: Whether these facts come from a profile (else every field is unknown).
        reasoning_parser: ``--reasoning-parser`` of the profile (None: not set).
        multimodal: The profile's ``model.multimodal`` (takes images); a text-only profile skips image/OCR.
        context_length: The profile's context length (None: the server's ``max_model_len``).
        vram_reserve_mib: Free MiB each card must keep.
        reserve_waiver: Why the reserve is waived, when it is.
        free_vram: Reads each card's free memory after the run (None: no GPU inventory).
    """

    known: bool = False
    reasoning_parser: str | None = None
    multimodal: bool = False
    context_length: int | None = None
    vram_reserve_mib: int | None = None
    reserve_waiver: str | None = None
    free_vram: Callable[[], Sequence[CardMemory]] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class CaseResult:
    """One case of a gate: its name (e.g. ``tools #7 get_weather of 3 tools``), whether it passed, and why not."""

    case: str
    ok: bool
    message: str = ""
    latency_s: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict over its cases; ``note`` explains a skip or a gate-wide failure (e.g. drift)."""

    gate: str
    verdict: Verdict
    cases: tuple[CaseResult, ...] = ()
    note: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.ok)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def count(self) -> str:
        """``20/20``, or ``skipped``."""
        return "skipped" if self.verdict == "skipped" else f"{self.passed}/{self.total}"

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(c for c in self.cases if not c.ok)

    @staticmethod
    def of(gate: str, cases: Sequence[CaseResult], *, note: str = "", extra_failure: bool = False) -> GateResult:
        """Pass when every case passed (and no gate-wide failure); fail otherwise, or with no case at all."""
        ok = bool(cases) and all(c.ok for c in cases) and not extra_failure
        return GateResult(gate=gate, verdict="pass" if ok else "fail", cases=tuple(cases), note=note)


@dataclass(frozen=True)
class ClientOverhead:
    """The client's own cost: CPU it spent per request against the request's wall time."""

    requests: int
    wall_s: float
    client_cpu_s: float

    @property
    def cpu_fraction(self) -> float | None:
        """Client CPU per wall second of request time (0.01 = 1 %)."""
        return self.client_cpu_s / self.wall_s if self.wall_s > 0 else None


@dataclass(frozen=True)
class QualifyProgressEvent:
    """Sent after each case: the gate, its case count so far, and the case that just finished."""

    gate: str
    done: int
    total: int
    case: str = ""


@dataclass(frozen=True)
class QualifyReport:
    """The result of :func:`servectl.bench.qualify.run_qualify`."""

    settings: QualifySettings
    context: BenchContext | None
    facts: ServiceFacts
    run_id: str
    model: str
    max_model_len: int | None
    gates: tuple[GateResult, ...]
    overhead: ClientOverhead
    started_at: str
    finished_at: str
    client_versions: Mapping[str, str] = field(default_factory=dict)
    free_vram_after: tuple[CardFreeMemory, ...] | None = None

    @property
    def passed(self) -> bool:
        """No gate failed (skipped gates do not fail a run)."""
        return all(g.verdict != "fail" for g in self.gates)

    @property
    def counts(self) -> str:
        """``smoke 2/2, tools 20/20, needle 2/2, endurance 60/60`` (skipped gates left out)."""
        return gate_counts(self.gates)


#: Short names of gates in count lines (the issue's wording: "needle 2/2").
GATE_LABELS: Mapping[str, str] = {"long_context": "needle", "structured": "json", "image": "image/OCR"}


def gate_counts(gates: Sequence[GateResult]) -> str:
    """``tools 20/20, needle 2/2`` for the gates that ran; a failed gate is marked ``(fail)``, a gate skipped
    after some of its cases ran (``clients 2/3 (skipped)``: one client not installed) ``(skipped)``."""
    parts = []
    for g in gates:
        if g.verdict == "skipped" and g.total:  # partly run (a client not installed): the count, marked
            parts.append(f"{GATE_LABELS.get(g.gate, g.gate)} {g.passed}/{g.total} (skipped)")
        if g.verdict == "skipped":
            continue
        mark = " (fail)" if g.verdict == "fail" and g.passed == g.total else ""
        parts.append(f"{GATE_LABELS.get(g.gate, g.gate)} {g.passed}/{g.total}{mark}")
    return ", ".join(parts)
