"""Earlier figures of the incumbent, shown beside the one the campaign measures - never deciding.

``incumbent.bench_runs`` (``servectl bench --out`` folders) and ``incumbent.reference_csv`` (a typed reference CSV,
as ``bench compare`` reads it) are read with ``bench compare``'s readers (:mod:`servectl.bench.compare_inputs`),
paths relative to the campaign file. For each workload point the figure of a series is its point at the same
concurrency (a reference that names none counts as one stream) whose prompt length is within the bench's
tolerance of the point's (:func:`~servectl.bench.model.prompt_tolerance_tokens`); a point it lacks is ``None``.
The decision reads only the incumbent measured in the campaign's own rounds: a published figure is context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servectl.bench.compare import Series
    from servectl.campaign.load import LoadedCampaign
    from servectl.campaign.model import Point
    from servectl.errors import Problem
    from servectl.profile.yaml_locations import PathKey


@dataclass(frozen=True)
class IncumbentReference:
    """One earlier run or reference of the incumbent and its figure at each workload point."""

    label: str
    kind: str  # "run" or "reference"
    path: str
    points: dict[str, dict[str, Any] | None]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "path": self.path, "points": self.points}


def read_references(loaded: LoadedCampaign) -> tuple[list[Series], list[Problem]]:
    """The series ``loaded``'s incumbent names, and one located problem per one that cannot be read."""
    from servectl.bench.compare_inputs import read_reference, read_run
    from servectl.errors import UsageError

    inc = loaded.campaign.incumbent
    here = loaded.path.parent
    found: list[Series] = []
    problems: list[Problem] = []
    asked: list[tuple[PathKey, str, Callable[[Path], Series]]] = [
        (("incumbent", "bench_runs", i), run, read_run) for i, run in enumerate(inc.bench_runs)
    ]
    if inc.reference_csv is not None:
        asked.append((("incumbent", "reference_csv"), inc.reference_csv, read_reference))
    for at, name, read in asked:
        try:
            found.append(read(here / name))
        except UsageError as err:
            problems.append(loaded.problem(at, str(err).splitlines()[0]))
    return found, problems


def at_points(series: Sequence[Series], points: Sequence[Point]) -> list[IncumbentReference]:
    """Each series' figure at each point (see the module docstring)."""
    from servectl.bench.model import prompt_tolerance_tokens

    out = []
    for s in series:
        figures: dict[str, dict[str, Any] | None] = {}
        for point in points:
            near = [
                p
                for p in s.points
                if (p.concurrency or 1) == point.concurrency
                and p.decode_tok_s is not None
                and abs(p.prompt_tokens - point.prompt_tokens) <= prompt_tolerance_tokens(point.prompt_tokens)
            ]
            best = min(near, key=lambda p: abs(p.prompt_tokens - point.prompt_tokens), default=None)
            figures[point.name] = (
                None
                if best is None or best.decode_tok_s is None
                else {
                    "decode_tok_s": best.decode_tok_s.p50,
                    "ttft_s": None if best.ttft_s is None else best.ttft_s.p50,
                    "prompt_tokens": best.prompt_tokens,
                    "source": best.source,
                }
            )
        out.append(IncumbentReference(s.label, str(s.kind), str(s.path), figures))
    return out


def reference_lines(references: Sequence[IncumbentReference], measured: dict[str, float | None]) -> list[str]:
    """One line per reference: its decode tok/s at each point beside the incumbent's measured in the campaign
    (``measured``: the incumbent's median decode tok/s per point)."""
    lines = []
    for ref in references:
        cells = []
        for point, figure in ref.points.items():
            here = measured.get(point)
            mine = f" (measured here {here:,.1f})" if here is not None else ""
            cells.append(f"{point} {figure['decode_tok_s']:,.1f}{mine}" if figure else f"{point} -")
        shown = ", ".join(cells)
        lines.append(f"incumbent's earlier {ref.kind} {ref.label}: decode tok/s {shown} (shown, never decides)")
    return lines


def incumbent_references(loaded: LoadedCampaign) -> list[IncumbentReference]:
    """``loaded``'s earlier figures of the incumbent at its points (read again; the check read them first)."""
    series, _ = read_references(loaded)
    return at_points(series, loaded.campaign.workload.points)


__all__ = ["IncumbentReference", "at_points", "incumbent_references", "read_references", "reference_lines"]
