"""A campaign's two figures, drawn from its bench artifacts (:mod:`servectl.campaign.readings`).

* ``taper.png``: the overlay taper - per-request decode speed (tok/s per request) against concurrency, one line
  per side: the incumbent and each accepted variant (geometric mean of the repeats, a marker per point); where
  the workload has points of several prompt sizes or prefixes, one line per side and kind of point (a cold and a
  warm-prefix point at the same concurrency are two lines, not a zig-zag of one).
* ``pareto.png``: per-request decode speed against total output throughput (tok/s, all streams) for every
  variant at every concurrency; the Pareto frontier (no other (variant, point) is faster per request *and* in
  total) drawn as a line through its points, the incumbent and the winner named.

matplotlib is the bench extra's (``servectl[bench]``), imported here only and drawn through its Agg canvas, as
:mod:`servectl.bench.plot` does; :func:`can_plot` tells the caller whether it is there.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servectl.campaign.readings import PointAggregate
from servectl.campaign.schedule import INCUMBENT

TAPER_FILE = "taper.png"
PARETO_FILE = "pareto.png"


def can_plot() -> bool:
    """Whether matplotlib (the bench extra) is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """The indices of the points no other point dominates (at least as high in both coordinates and higher in
    one), in order of the first coordinate."""
    frontier = [
        i
        for i, (x, y) in enumerate(points)
        if not any((ox >= x and oy >= y) and (ox > x or oy > y) for j, (ox, oy) in enumerate(points) if j != i)
    ]
    return sorted(frontier, key=lambda i: points[i][0])


def _label(variant: str, incumbent_profile: str) -> str:
    return f"incumbent ({incumbent_profile})" if variant == INCUMBENT else variant


def point_series(points: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each workload point's kind (``512 tok cold``...), by point name: the points of one kind are one line
    against concurrency. All of one kind: no name (one line per side, as before)."""
    kinds = {str(p["name"]): f"{p['prompt_tokens']} tok {p.get('prefix', 'cold')}" for p in points}
    return kinds if len(set(kinds.values())) > 1 else {}


def side_lines(
    aggregates: Sequence[PointAggregate], variant: str, series: Mapping[str, str]
) -> list[tuple[str, list[PointAggregate]]]:
    """``variant``'s points as lines: one per kind of point (``series``), each in order of concurrency."""
    lines: dict[str, list[PointAggregate]] = {}
    for a in aggregates:
        if a.variant == variant:
            lines.setdefault(series.get(a.point, ""), []).append(a)
    return [(kind, sorted(mine, key=lambda a: a.concurrency)) for kind, mine in lines.items()]


_STYLES = ("-", "--", ":", "-.")


def plot_taper_overlay(
    aggregates: Sequence[PointAggregate],
    *,
    shown: Sequence[str],
    incumbent_profile: str,
    title: str,
    path: Path,
    series: Mapping[str, str] | None = None,
) -> Path:
    """Per-request decode speed against concurrency for the sides in ``shown`` (the incumbent and the accepted
    variants), into ``path``; ``series`` (:func:`point_series`) splits a side's points into one line per kind.

    Raises:
        ValueError: none of them has a decode measurement.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    drawn = 0
    kinds = sorted(set((series or {}).values()))
    measured = [a for a in aggregates if a.decode_tok_s is not None]
    for variant in shown:
        incumbent = variant == INCUMBENT
        color: Any = "black" if incumbent else None
        for kind, mine in side_lines(measured, variant, series or {}):
            drawn += 1
            (line,) = ax.plot(
                [a.concurrency for a in mine],
                [a.decode_tok_s or 0.0 for a in mine],
                marker="o",
                linestyle=_STYLES[kinds.index(kind) % len(_STYLES)] if kind in kinds else "-",
                linewidth=2.5 if incumbent else 1.5,
                color=color,
                label=_label(variant, incumbent_profile) + (f", {kind}" if kind else ""),
            )
            color = line.get_color()  # a side keeps its colour over its kinds of point
    if not drawn:
        raise ValueError("no decode measurement of the incumbent or an accepted variant; nothing to plot")
    ax.set_xscale("log", base=2)
    ticks = sorted({a.concurrency for a in aggregates if a.variant in shown})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("decode tok/s per request (geometric mean of repeats)")
    ax.set_title(f"{title}: taper of the incumbent and the accepted variants")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110)
    return path


def plot_pareto(
    aggregates: Sequence[PointAggregate],
    *,
    incumbent_profile: str,
    winner: str | None,
    title: str,
    path: Path,
    series: Mapping[str, str] | None = None,
) -> Path:
    """Per-request decode speed against total throughput for every (variant, point), the frontier marked and
    the incumbent and ``winner`` named, into ``path``.

    Raises:
        ValueError: no (variant, point) has both numbers.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    usable = [a for a in aggregates if a.decode_tok_s is not None and a.output_tok_s is not None]
    if not usable:
        raise ValueError("no point has both a decode speed and a total throughput; nothing to plot")
    coords = [(float(a.output_tok_s or 0.0), float(a.decode_tok_s or 0.0)) for a in usable]
    fig = Figure(figsize=(8, 6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for variant in dict.fromkeys(a.variant for a in usable):
        named = variant in (INCUMBENT, winner)
        color: Any = "black" if variant == INCUMBENT else None
        runs = side_lines(usable, variant, series or {})
        label = _label(variant, incumbent_profile) + (" (winner)" if variant == winner else "")
        for i, (_kind, run) in enumerate(runs):  # a line per kind of point; the side's label once
            (line,) = ax.plot(
                [a.output_tok_s or 0.0 for a in run],
                [a.decode_tok_s or 0.0 for a in run],
                marker="o",
                linestyle="-" if named else ":",
                linewidth=2.0 if named else 1.0,
                alpha=1.0 if named else 0.6,
                color=color,
                label=label if i == 0 else None,
            )
            color = line.get_color()
        mine = [a for _, run in runs for a in run]
        if named:
            for a in mine:
                ax.annotate(
                    f"C{a.concurrency}",
                    (a.output_tok_s or 0.0, a.decode_tok_s or 0.0),
                    fontsize=8,
                    textcoords="offset points",
                    xytext=(4, 4),
                )
    front = pareto_frontier(coords)
    ax.plot(
        [coords[i][0] for i in front],
        [coords[i][1] for i in front],
        color="red",
        linewidth=1.0,
        linestyle="--",
        marker="s",
        markerfacecolor="none",
        markersize=11,
        label="Pareto frontier",
    )
    ax.set_xlabel("total output tok/s (all streams)")
    ax.set_ylabel("decode tok/s per request")
    ax.set_title(f"{title}: per-request speed against total throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path
