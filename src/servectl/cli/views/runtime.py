"""Printed forms of services, startup progress and stop results (pure text; the CLI prints them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from servectl.service.health import Progress
    from servectl.service.runtime import StopResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.watch import WatchView

STATUS_COLUMNS = ("PROFILE", "STATE", "PORT", "GPUS", "UPTIME", "PLAN", "DRIFT", "CONTAINER")
#: Drop order at narrow widths (higher first): the container name and plan hash are in ``status --json``.
STATUS_PRIORITIES = (0, 0, 1, 2, 3, 5, 4, 6)


def duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h04m``, ``3d02h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def progress_text(p: Progress) -> str:
    """One line for the current startup phase: ``loading weights 50% (12.3 s)``."""
    parts = [p.phase]
    if p.percent is not None:
        parts.append(f"{p.percent}%")
    if p.detail:
        parts.append(f"- {p.detail}")
    return f"{' '.join(parts)} ({p.elapsed_s:.1f} s)"


def state_text(s: ServiceInfo) -> str:
    """The state, with the exit code and OOM flag of an exited service, and what a standby holds and costs."""
    if s.state == "standby":
        ram = "-" if s.standby_host_ram_bytes is None else f"{s.standby_host_ram_bytes / 2**30:.1f} GiB"
        resume = "not measured" if s.standby_resume_s is None else f"{s.standby_resume_s:.1f} s"
        release = "" if s.standby_release_s is None else f"release {s.standby_release_s:.1f} s, "
        cycles = "" if s.standby_cycles is None else f", {s.standby_cycles} cycle{'' if s.standby_cycles == 1 else 's'}"
        return f"standby (host RAM {ram}, {release}resume {resume}{cycles})"
    if s.state != "exited":
        return s.state
    extras = [f"code {s.exit_code}" if s.exit_code is not None else "code ?"]
    if s.oom_killed:
        extras.append("OOM-killed")
    return f"exited ({', '.join(extras)})"


def status_rows(services: Sequence[ServiceInfo], phases: dict[str, str] | None = None) -> list[tuple[str, ...]]:
    """Rows of ``servectl status`` in :data:`STATUS_COLUMNS` order; a starting service shows its phase."""
    rows: list[tuple[str, ...]] = []
    for s in services:
        drift = "-" if s.drift is None else ("yes" if s.drift else "no")
        rows.append(
            (
                f"{s.profile} (adopted)" if s.adopted else s.profile,
                f"starting: {phases[s.container_id]}" if phases and s.container_id in phases else state_text(s),
                "-" if s.port is None else str(s.port),
                ",".join(str(g) for g in s.gpus) or "-",
                duration(s.uptime_s),
                s.plan_hash[:8] or "-",
                drift,
                s.container_name,
            )
        )
    return rows


def status_text(
    services: Sequence[ServiceInfo], *, width: int, bold_header: bool, phases: dict[str, str] | None = None
) -> str:
    """The ``docker ps``-style table of ``servectl status`` (and of ``--watch``, with a starting service's
    phase), in plain text that fits ``width``: rich's table takes longer to import than the rest of ``status``,
    the command run most."""
    from servectl.cli.views.columns import Col, plain_table

    columns = [Col(h, priority=p) for h, p in zip(STATUS_COLUMNS, STATUS_PRIORITIES, strict=True)]
    return plain_table(columns, status_rows(services, phases), width=width, bold_header=bold_header)


def watch_renderable(view: WatchView, *, width: int) -> RenderableType:
    """One refresh of ``status --watch``: the services (a starting one with its phase), then each card."""
    import datetime as dt

    from rich.console import Group
    from rich.text import Text

    from servectl.cli.views.columns import Col
    from servectl.cli.views.table import fit_table

    stamp = dt.datetime.fromtimestamp(view.taken_at).strftime("%H:%M:%S")
    parts: list[RenderableType] = [Text(f"servectl status --watch  {stamp}  (Ctrl-C to stop)", style="bold")]
    if view.services:
        table = Text(status_text(view.services, width=width, bold_header=False, phases=view.phases))
        table.stylize("bold", 0, table.plain.find("\n"))  # the header line, as status prints it on a terminal
        parts.append(table)
    else:
        parts.append(Text("no servectl services"))
    if view.cards:
        rows = [
            (
                str(c.index),
                c.name or "?",
                f"{_gib(c.memory_used_bytes)} / {_gib(c.memory_total_bytes)} GiB",
                "-" if c.utilization_percent is None else f"{c.utilization_percent}%",
            )
            for c in view.cards
        ]
        columns = [Col("GPU"), Col("NAME", priority=2), Col("MEMORY"), Col("UTIL", justify="right")]
        parts.append(
            fit_table(columns, rows, width=width, box=None, pad_edge=False, show_edge=False, header_style="bold")
        )
    else:
        parts.append(Text(f"cards: {view.cards_problem or 'none'}", style="dim"))
    return Group(*parts)


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / 2**30:.1f}"


def up_text(result: UpResult) -> str:
    """What ``up`` did, in one line."""
    s = result.service
    if result.action == "already-running":
        return f"{s.profile} already runs with the same plan ({s.plan_hash[:8]}) at {result.url}; nothing to do"
    startup = f"{result.startup_s:.1f} s" if result.startup_s is not None else "?"
    return (
        f"{s.profile} is ready at {result.url} (serves {s.served_name!r}); startup took {startup} "
        f"[container {s.container_name}, plan {s.plan_hash[:8]}]"
    )


def stop_text(result: StopResult) -> str:
    """What ``down`` did for one service, in one line."""
    how = "SIGKILL after the grace period" if result.forced else "SIGTERM"
    line = f"{result.profile}: stopped in {result.stop_s:.1f} s ({how}); container {result.container_name} removed"
    if not result.gpus:
        return line
    if not result.gpus_checked:
        return line + "; GPU release not checked (no GPU inventory)"
    if result.leaked_pids:
        return line + f"; processes still on its GPUs: pids {', '.join(map(str, result.leaked_pids))}"
    return line + "; its GPUs are free"


def last_lines_text(profile: str, lines: Sequence[str]) -> list[str]:
    """A failed start's last log lines for stderr (at most 20), each cut as ``swap`` cuts them: SGLang prints
    all its server arguments on one line."""
    from servectl.service.transaction.model import LOG_LINE_CHARS

    if not lines:
        return []
    shown = [line if len(line) <= LOG_LINE_CHARS else line[: LOG_LINE_CHARS - 3] + "..." for line in lines[-20:]]
    return [f"last log lines of {profile}:", *(f"  | {line}" for line in shown)]


def lines_with_phase_notes(name: str, lines: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """For ``logs -f``: each log line with, when it moved startup on, a note of the new phase for stderr."""
    from servectl.service.watch import phases_with_lines

    for line, phase in phases_with_lines(lines):
        yield line, None if phase is None else f"servectl: {name} startup phase: {phase}"
