"""The taper curve: decode tok/s and TTFT against prompt tokens, one line per concurrency.

matplotlib is imported only here, lazily, and drawn through its Agg canvas (no global backend switch, no
display needed). It is an optional extra (``servectl[bench]``): it and its compiled dependencies (numpy,
pillow, fonttools, kiwisolver; ~60 MB) have no place on a serving host that only runs ``up`` and ``swap``, so
``bench --plot`` checks for it with :func:`require_plotting` before any request is sent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
