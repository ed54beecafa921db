"""The taper curve: decode tok/s and TTFT against prompt tokens, one line per concurrency (``plot_taper``)
or one per compared run and reference (``plot_comparison``).

matplotlib is imported only here, lazily, and drawn through its Agg canvas (no global backend switch, no
display needed). It is an optional extra (``servectl[bench]``): it and its compiled dependencies (numpy,
pillow, fonttools, kiwisolver; ~60 MB) have no place on a serving host that only runs ``up`` and ``swap``, so
``bench --plot`` checks for it with :func:`require_plotting` before any request is sent.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from servectl.bench.compare import Comparison, Series, SeriesPoint, describe_differences
from servectl.bench.model import BenchReport, PointResult, Stat
from servectl.errors import UsageError

PLOT_EXTRA_HINT = "pip install 'servectl[bench]'"


def require_plotting() -> None:
    """Refuse at once when matplotlib is missing, before a benchmark spends minutes on requests.

    Raises:
        UsageError: matplotlib is not installed; the message names the extra to install.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"--plot needs matplotlib, which is not installed; run: {PLOT_EXTRA_HINT}")


def _series(points: list[PointResult], attr: str) -> tuple[list[float], list[float], list[float], list[float]]:
    xs: list[float] = []
    p50: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for point in sorted(points, key=lambda p: p.prompt_tokens_target):
        stat: Stat | None = getattr(point, attr)
        if stat is None:
            continue
        actual = point.prompt_tokens_actual
        xs.append(actual.p50 if actual is not None else float(point.prompt_tokens_target))
        p50.append(stat.p50)
        lo.append(stat.min)
        hi.append(stat.max)
    return xs, p50, lo, hi


def plot_taper(report: BenchReport, path: Path) -> Path:
    """Draw decode tok/s and TTFT (p50 lines, min-max bands) against actual prompt tokens into a PNG.

    Returns:
        ``path``, written.

    Raises:
        ValueError: No point has a decode measurement to draw.
        UsageError: matplotlib is not installed.
    """
    require_plotting()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    drawable = [p for p in report.points if p.decode_tok_s is not None]
    if not drawable:
        raise ValueError("no point has a decode measurement; nothing to plot")
    fig = Figure(figsize=(9, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax_decode, ax_ttft = fig.subplots(2, 1, sharex=True)
    for concurrency in sorted({p.concurrency for p in drawable}):
        points = [p for p in drawable if p.concurrency == concurrency]
        for ax, attr, scale in ((ax_decode, "decode_tok_s", 1.0), (ax_ttft, "ttft_s", 1.0)):
            xs, p50, lo, hi = _series(points, attr)
            if not xs:
                continue
            (line,) = ax.plot(xs, [v * scale for v in p50], marker="o", label=f"C{concurrency} p50")
            ax.fill_between(xs, lo, hi, alpha=0.2, color=line.get_color(), label=f"C{concurrency} min-max")
    title = report.model
    if report.context is not None and report.context.profile_name:
        title = f"{report.context.profile_name} ({report.model})"
    ax_decode.set_title(f"{title}: decode taper, {report.settings.max_tokens} output tokens per request")
    ax_decode.set_ylabel("decode tok/s per stream")
    ax_ttft.set_ylabel("TTFT (s)")
    ax_ttft.set_xlabel("prompt tokens (actual, p50)")
    ax_ttft.set_xscale("log")
    ax_ttft.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    for ax in (ax_decode, ax_ttft):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    ax_decode.set_ylim(bottom=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path


def _lines(comparison: Comparison) -> list[tuple[str, Series, list[SeriesPoint]]]:
    """One line per series (per concurrency level where a series has several): label, series, points."""
    out: list[tuple[str, Series, list[SeriesPoint]]] = []
    for s in comparison.series:
        levels = sorted({p.concurrency for p in s.points}, key=lambda c: (c is not None, c or 0))
        for level in levels:
            points = sorted(
                (p for p in s.points if p.concurrency == level and p.decode_tok_s is not None),
                key=lambda p: p.prompt_tokens,
            )
            label = s.label if len(levels) == 1 else f"{s.label} C{level}"
            if s.label == comparison.baseline:
                label += " (baseline)"
            if points:
                out.append((label, s, points))
    return out


def plot_comparison(comparison: Comparison, path: Path) -> Path:
    """Overlay the decode taper (and TTFT, where known) of every run and reference into a PNG.

    One line per series, a min-max band for runs with repeats, references dashed; actual prompt tokens on a
    log axis with plain thousands labels; titled with what differs between the runs.

    Returns:
        ``path``, written.

    Raises:
        ValueError: No series has a decode measurement to draw.
        UsageError: matplotlib is not installed.
    """
    require_plotting()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    lines = _lines(comparison)
    if not lines:
        raise ValueError("no run or reference has a decode measurement; nothing to plot")
    with_ttft = any(p.ttft_s is not None for _, _, points in lines for p in points)
    fig = Figure(figsize=(9, 7.5 if with_ttft else 5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, sharex=True) if with_ttft else [fig.subplots(1, 1)]
    for number, (label, series, points) in enumerate(lines):
        style = {"linestyle": "--", "marker": "s"} if series.kind == "reference" else {"marker": "o"}
        style["color"] = f"C{number % 10}"  # one colour per line in both panels
        for ax, attr in zip(axes, ("decode_tok_s", "ttft_s"), strict=False):
            drawn = [(p.prompt_tokens, s) for p in points if (s := getattr(p, attr)) is not None]
            if not drawn:
                continue
            xs = [x for x, _ in drawn]
            ax.plot(xs, [s.p50 for _, s in drawn], label=label, **style)
            if any(s.n > 1 and s.max > s.min for _, s in drawn):
                lo, hi = [s.min for _, s in drawn], [s.max for _, s in drawn]
                ax.fill_between(xs, lo, hi, alpha=0.15, color=style["color"])
    marked = [
        (r.point.prompt_tokens, r.point.decode_tok_s.p50)
        for r in comparison.rows
        if r.unfair and r.point.decode_tok_s is not None
    ]
    if marked:  # the table says why; the plot shows where
        xs, ys = [x for x, _ in marked], [y for _, y in marked]
        axes[0].scatter(xs, ys, s=160, facecolors="none", edgecolors="red", label="not comparable (see the table)")
    title = "\n".join(["decode taper", *describe_differences(comparison).split("; ")])
    axes[0].set_title(title, fontsize="medium")
    axes[0].set_ylabel("decode tok/s per stream (p50)")
    axes[0].set_ylim(bottom=0)
    if with_ttft:
        axes[1].set_ylabel("TTFT (s)")
    axes[-1].set_xlabel(f"prompt tokens (actual; matched within {100 * comparison.tolerance:g} %)")
    axes[-1].set_xscale("log")
    anchors = sorted({round(row.anchor_tokens) for row in comparison.rows})
    spread = all(b / a >= 1.3 for a, b in itertools.pairwise(anchors))
    if anchors and len(anchors) <= 10 and spread:  # label the matched lengths themselves: 2,969 and 304,491
        axes[-1].xaxis.set_major_locator(FixedLocator(anchors))
    else:
        axes[-1].xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes[-1].xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    axes[-1].xaxis.set_minor_formatter(NullFormatter())
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path
