"""What a transaction reports: its phases, why a service did not come up, and a swap's result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from servectl.adapters.conflicts import RestoreOutcome, StoppedConflict
from servectl.errors import ServectlError, StartupFailed

LOG_TAIL_LINES = 20
"""Lines of a failed service's log kept in the result and shown in the message."""
LOG_LINE_CHARS = 240
"""Longer log lines (SGLang prints all its server args on one) are cut in the message."""

Outcome = Literal["swapped", "started", "noop", "rolled-back", "failed", "interrupted"]


@dataclass(frozen=True)
class PhaseEvent:
    """Progress for the CLI: a phase ``begin``s, ``end``s (with its duration) or reports ``progress``."""

    phase: str
    kind: Literal["begin", "end", "progress"]
    duration_s: float | None = None
    ok: bool = True
    detail: str = ""
    step: str = ""  # with progress: the startup step (loading weights, capturing CUDA graphs, ...)


@dataclass(frozen=True)
class PhaseTiming:
    """One phase of a transaction and how long it took."""

    phase: str
    duration_s: float
    ok: bool = True
    detail: str = ""


@dataclass
class PhaseMark:
    """Set ``failed`` inside a phase that handled its own failure, so it does not end as ``ok``."""

    failed: bool = False


@dataclass(frozen=True)
class TargetFailure:
    """Why a service did not come up (the target, or the previous one on the way back)."""

    profile: str
    message: str
    last_log_lines: tuple[str, ...] = ()
    exit_code_of_container: int | None = None
    oom_killed: bool = False

    def describe(self) -> str:
        """One line: the reason, with the exit code when there is one."""
        extra = []
        if self.exit_code_of_container is not None and f"code {self.exit_code_of_container}" not in self.message:
            extra.append(f"container exit code {self.exit_code_of_container}")
        if self.oom_killed and "OOM" not in self.message:
            extra.append("killed for lack of memory (OOM)")
        return self.message + (f" ({', '.join(extra)})" if extra else "")


def failure_of(profile: str, err: Exception) -> TargetFailure:
    """``err`` (a failed start, or a bug) as the :class:`TargetFailure` of ``profile``."""
    if not isinstance(err, ServectlError):
        return TargetFailure(profile, f"unexpected {type(err).__name__}: {err} (a servectl bug; please report it)")
    if isinstance(err, StartupFailed):
        # The runtime's wording starts with the profile and ends with the removal; the swap says both itself.
        message = err.message.removeprefix(f"{profile}: ").removesuffix("; the container was removed")
        return TargetFailure(
            profile=profile,
            message=message,
            last_log_lines=tuple(err.last_log_lines[-LOG_TAIL_LINES:]),
            exit_code_of_container=err.exit_code_of_container,
            oom_killed=err.oom_killed,
        )
    return TargetFailure(profile=profile, message=err.message)


def log_tail(failure: TargetFailure) -> str:
    """The failure's last log lines, indented under a heading (empty when it has none)."""
    if not failure.last_log_lines:
        return ""
    lines = [
        line if len(line) <= LOG_LINE_CHARS else line[: LOG_LINE_CHARS - 3] + "..." for line in failure.last_log_lines
    ]
    return f"\n  last log lines of {failure.profile}:\n{_indent(lines)}"


def _indent(lines: Iterable[str]) -> str:
    return "\n".join("    " + line for line in lines)


@dataclass(frozen=True)
class SwapResult:
    """What a swap did.

    Attributes:
        from_profile: the service that ran before (``None``: nothing ran).
        to_profile: the target.
        outcome: ``swapped``, ``started`` (nothing ran before), ``noop`` (target already runs),
            ``rolled-back``, ``failed`` or ``interrupted``.
        phases: each phase with its duration, in order.
        downtime_s: old service stops answering -> the new (or restored) one passes the gate.
        old_stop_s: how long stopping the old service took (or releasing it, when ``old_released``).
        target_startup_s: the target's start, container created -> gate passed (or its resume and trust
            check, when ``target_resumed``).
        old_released: the old service went to warm standby (released, still running), not stopped.
        target_resumed: the target came back from warm standby (resumed), not started.
        forced_stop: the old service ignored SIGTERM and was killed.
        stopped_conflicts: conflicts this swap stopped (still stopped when it succeeded).
        conflicts_restore: what restoring them did, after a failure.
        target_failure: why the target failed, when it did.
        previous_failure: why the previous service did not come back, when it did not.
        message: what happened and what to do.
    """

    from_profile: str | None
    to_profile: str
    outcome: Outcome
    phases: tuple[PhaseTiming, ...] = ()
    downtime_s: float | None = None
    old_stop_s: float | None = None
    target_startup_s: float | None = None
    forced_stop: bool = False
    old_released: bool = False
    target_resumed: bool = False
    stopped_conflicts: tuple[StoppedConflict, ...] = ()
    conflicts_restore: RestoreOutcome | None = None
    target_failure: TargetFailure | None = None
    previous_failure: TargetFailure | None = None
    message: str = ""

    def phase_s(self, phase: str) -> float | None:
        """Duration of the first phase with that name."""
        return next((p.duration_s for p in self.phases if p.phase == phase), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stopped_conflicts"] = [s.to_dict() for s in self.stopped_conflicts]
        return data
