"""The printed form of a doctor report: one line per part, its fix indented under it (pure text)."""

from __future__ import annotations

from servectl.preflight.doctor import DoctorReport

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def doctor_text(report: DoctorReport) -> str:
    """``ok   docker.engine       Docker 27.5.1 ...`` lines, a ``fix:`` line under each that is not ok, a verdict."""
    width = max(len(line.id) for line in report.lines)
    out = []
    for line in report.lines:
        out.append(f"{_MARK[line.outcome]}  {line.id:<{width}}  {line.found}")
        if line.fix and line.outcome != "ok":
            out.append(f"{'':4}  {'':<{width}}  fix: {line.fix}")
    failed = [line.id for line in report.lines if line.outcome == "fail"]
    out.append(f"required part failing: {', '.join(failed)}" if failed else "servectl can run here")
    return "\n".join(out) + "\n"
