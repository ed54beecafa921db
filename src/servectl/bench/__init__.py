"""Qualification benchmark of an OpenAI-compatible server (SGLang): TTFT, prefill and decode tok/s.

Library entry points (keyword-only, typed)::

    report = run_bench(settings=BenchSettings(url="http://127.0.0.1:8180", prompt_tokens=(4096,)))
    write_artifacts(report, Path("evidence"))
    plot_taper(report, Path("evidence/taper.png"))
    comparison = compare_bench(runs=[Path("runs/old"), Path("runs/new")], references=[Path("ds4-0731.csv")])
    plot_comparison(comparison, Path("compare.png"))

Method, and the pitfalls it avoids:

* streaming ``/v1/chat/completions`` with ``stream_options.include_usage`` and ``continuous_usage_stats``;
  token counts come from ``usage``, never from counting chunks (speculative decoding packs several tokens
  into one chunk);
* fixed output length (``ignore_eos``, ``min_tokens``) and a check that it was produced;
* a unique, calibrated prompt per request (no prefix-cache hits); target and actual length both reported;
* TTFT = first chunk carrying a token; prefill tok/s = prompt tokens / TTFT; decode tok/s = (completion
  tokens - tokens of the first chunk) / (last token chunk time - first token chunk time);
* a warm-up request per prompt length; client CPU measured and reported;
* p50/min/max over the repeats; short, broken and failed streams are flagged and left out.

matplotlib is imported only by :func:`plot_taper`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports

# Exports load on first use: `servectl bench --help` and the CLI start must not import httpx or matplotlib.
_EXPORTS: dict[str, str] = {
    "ApiKey": "servectl.bench.settings",
    "BenchContext": "servectl.bench.model",
    "BenchProgressEvent": "servectl.bench.model",
    "BenchReport": "servectl.bench.model",
    "BenchSettings": "servectl.bench.settings",
    "Calibration": "servectl.bench.model",
    "CompareRow": "servectl.bench.compare",
    "Comparison": "servectl.bench.compare",
    "Series": "servectl.bench.compare",
    "SeriesPoint": "servectl.bench.compare",
    "compare_bench": "servectl.bench.compare_inputs",
    "compare_series": "servectl.bench.compare",
    "comparison_document": "servectl.bench.compare",
    "plot_comparison": "servectl.bench.plot",
    "read_reference": "servectl.bench.compare_inputs",
    "read_run": "servectl.bench.compare_inputs",
    "CardFreeMemory": "servectl.bench.model",
    "CardMemory": "servectl.bench.model",
    "ClientInfo": "servectl.bench.model",
    "DEFAULT_PROMPT_TOKENS": "servectl.bench.settings",
    "FailureKind": "servectl.bench.model",
    "PointResult": "servectl.bench.model",
    "RequestMeasurement": "servectl.bench.model",
    "Stat": "servectl.bench.model",
    "plot_taper": "servectl.bench.plot",
    "prompt_tolerance_tokens": "servectl.bench.model",
    "run_bench": "servectl.bench.runner",
    "write_artifacts": "servectl.bench.artifacts",
}

__all__ = [*_EXPORTS]

# The one list of public names is _EXPORTS; __all__ is derived from it, and the block below says the same
# to type checkers (`X as X`: an explicit re-export). tests/unit/test_exports.py fails when it drifts.
if TYPE_CHECKING:
    from servectl.bench.artifacts import write_artifacts as write_artifacts
    from servectl.bench.compare import CompareRow as CompareRow
    from servectl.bench.compare import Comparison as Comparison
    from servectl.bench.compare import Series as Series
    from servectl.bench.compare import SeriesPoint as SeriesPoint
    from servectl.bench.compare import compare_series as compare_series
    from servectl.bench.compare import comparison_document as comparison_document
    from servectl.bench.compare_inputs import compare_bench as compare_bench
    from servectl.bench.compare_inputs import read_reference as read_reference
    from servectl.bench.compare_inputs import read_run as read_run
    from servectl.bench.model import BenchContext as BenchContext
    from servectl.bench.model import BenchProgressEvent as BenchProgressEvent
    from servectl.bench.model import BenchReport as BenchReport
    from servectl.bench.model import Calibration as Calibration
    from servectl.bench.model import CardFreeMemory as CardFreeMemory
    from servectl.bench.model import CardMemory as CardMemory
    from servectl.bench.model import ClientInfo as ClientInfo
    from servectl.bench.model import FailureKind as FailureKind
    from servectl.bench.model import PointResult as PointResult
    from servectl.bench.model import RequestMeasurement as RequestMeasurement
    from servectl.bench.model import Stat as Stat
    from servectl.bench.model import prompt_tolerance_tokens as prompt_tolerance_tokens
    from servectl.bench.plot import plot_comparison as plot_comparison
    from servectl.bench.plot import plot_taper as plot_taper
    from servectl.bench.runner import run_bench as run_bench
    from servectl.bench.settings import DEFAULT_PROMPT_TOKENS as DEFAULT_PROMPT_TOKENS
    from servectl.bench.settings import ApiKey as ApiKey
    from servectl.bench.settings import BenchSettings as BenchSettings


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
