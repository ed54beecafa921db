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
    "ApiKey": "servectl.bench.model",
    "BenchContext": "servectl.bench.model",
    "BenchProgressEvent": "servectl.bench.model",
    "BenchReport": "servectl.bench.model",
    "BenchSettings": "servectl.bench.model",
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
    "DEFAULT_PROMPT_TOKENS": "servectl.bench.model",
    "FailureKind": "servectl.bench.model",
    "PointResult": "servectl.bench.model",
    "RequestMeasurement": "servectl.bench.model",
    "Stat": "servectl.bench.model",
    "plot_taper": "servectl.bench.plot",
    "prompt_tolerance_tokens": "servectl.bench.model",
    "run_bench": "servectl.bench.runner",
    "write_artifacts": "servectl.bench.artifacts",
}

__all__ = [
    "DEFAULT_PROMPT_TOKENS",
    "ApiKey",
    "BenchContext",
    "BenchProgressEvent",
    "BenchReport",
    "BenchSettings",
    "Calibration",
    "CardFreeMemory",
    "CardMemory",
    "ClientInfo",
    "CompareRow",
    "Comparison",
    "FailureKind",
    "PointResult",
    "RequestMeasurement",
    "Series",
    "SeriesPoint",
    "Stat",
    "compare_bench",
    "compare_series",
    "comparison_document",
    "plot_comparison",
    "plot_taper",
    "prompt_tolerance_tokens",
    "read_reference",
    "read_run",
    "run_bench",
    "write_artifacts",
]

if TYPE_CHECKING:
    from servectl.bench.artifacts import write_artifacts
    from servectl.bench.compare import CompareRow, Comparison, Series, SeriesPoint, compare_series, comparison_document
    from servectl.bench.compare_inputs import compare_bench, read_reference, read_run
    from servectl.bench.model import (
        DEFAULT_PROMPT_TOKENS,
        ApiKey,
        BenchContext,
        BenchProgressEvent,
        BenchReport,
        BenchSettings,
        Calibration,
        CardFreeMemory,
        CardMemory,
        ClientInfo,
        FailureKind,
        PointResult,
        RequestMeasurement,
        Stat,
        prompt_tolerance_tokens,
    )
    from servectl.bench.plot import plot_comparison, plot_taper
    from servectl.bench.runner import run_bench


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
