"""One benchmark run, as ``servectl bench`` does it: target, key, measurement, artifacts, plot, verdict.

:func:`run_profile_bench` is the library form of the command: it finds what to measure (a profile's running
service, or a URL), reads the API key from the environment, runs :func:`~servectl.bench.runner.run_bench`,
writes the JSON artifacts (and the plot), and returns a result the caller renders. The failure rule (any
flagged request fails the run) is :meth:`ProfileBenchResult.raise_if_failed`, called after rendering so the
table and the artifacts exist when the run fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.bench.artifacts import SUMMARY_FILE, manifest_run, write_artifacts
from servectl.bench.manifest import write_manifest
from servectl.bench.model import (
    BenchProgressEvent,
    BenchReport,
    read_api_key,
    run_folder,
)
from servectl.bench.plot import plot_taper, require_plotting
from servectl.bench.runner import run_bench
from servectl.bench.settings import BenchSettings
from servectl.bench.target import BenchTarget
from servectl.errors import BenchFailed, UsageError

if TYPE_CHECKING:
    from servectl.service.context import Context


@dataclass(frozen=True)
class ProfileBenchResult:
    """A finished run: the report, where its artifacts went, and the plot (or why it is missing)."""

    report: BenchReport
    out_dir: Path
    plot: Path | None = None
    plot_error: str | None = None

    def failure(self) -> BenchFailed | None:
        """The error that fails this run: any flagged request (None when every request counted)."""
        flagged = self.report.flagged_requests
        if not flagged:
            return None
        kinds = ", ".join(sorted({str(r.failure) for r in flagged}))
        return BenchFailed(
            f"bench: {len(flagged)} of {self.report.measured_requests} measured requests were flagged ({kinds}) "
            f"and left out of the results; see {self.out_dir / SUMMARY_FILE}"
        )

    def raise_if_failed(self) -> None:
        """Raise :meth:`failure`, if any."""
        error = self.failure()
        if error is not None:
            raise error


def run_profile_bench(
    ctx: Context,
    *,
    name: str | None = None,
    settings: BenchSettings | None = None,
    out_dir: Path | None = None,
    plot: Path | None = None,
    progress: Callable[[BenchProgressEvent], None] | None = None,
) -> ProfileBenchResult:
    """Benchmark profile ``name``'s running service (or the server at ``settings.url``) and write the evidence.

    Args:
        ctx: the host's context: its environment (the key, the state folder, the profile search path), and for
            ``name`` its runtime (finds the service) and GPU inventory (its provenance);
            :meth:`servectl.Host.bench` passes the host's.
        name: Profile whose running service to measure; its URL, model, key variable and provenance are used
            where ``settings`` leave them empty.
        settings: What to measure and how (default: :class:`~servectl.bench.settings.BenchSettings`'s defaults);
            ``url`` measures that server instead of (or, with ``name``, in place of the URL of) the profile's
            service; ``api_key_env`` defaults to the profile's ``serve.api_key_env``. The key is read here.
        out_dir: Folder for the JSON artifacts (default: ``STATE/bench/<UTC time>``).
        plot: Where to write the taper plot (PNG); None writes none.
        progress: Called with counts after each request, for a progress bar.

    Raises:
        UsageError: neither ``name`` nor a URL; the key variable is unset; ``plot`` without matplotlib
            (checked before any request).
        BenchFailed: the server cannot be reached or serves no such model (see ``run_bench``).
    """
    if plot is not None:  # before anything else: a missing extra must not cost a whole benchmark
        require_plotting()
    asked = settings or BenchSettings()
    env = ctx.environ
    if name is None and not asked.url:
        raise UsageError("bench: give a profile NAME or --url http://HOST:PORT")
    target = BenchTarget(url=asked.url) if name is None else _profile_target(ctx, name)
    key_env = asked.api_key_env or target.api_key_env
    key_file = None if asked.api_key_env else target.api_key_file
    settings = replace(
        asked,
        url=asked.url or target.url,
        model=asked.model or target.model,
        api_key=asked.api_key or read_api_key(key_env, env, key_file=key_file),
        api_key_env=key_env,
    )
    out = out_dir or run_folder(env, "bench")  # named by the start time
    report = run_bench(settings=settings, context=target.context, progress=progress)
    written = write_artifacts(report, out)
    if plot is None:
        return ProfileBenchResult(report=report, out_dir=out)
    try:
        drawn = plot_taper(report, plot)
    except ValueError as err:  # nothing to draw (no point has a decode measurement)
        return ProfileBenchResult(report=report, out_dir=out, plot_error=str(err))
    if drawn.resolve().is_relative_to(out.resolve()):  # the plot is part of the run folder: list it too
        write_manifest(out, run=manifest_run("bench", report.run_id, report.context), written=[*written, drawn])
    return ProfileBenchResult(report=report, out_dir=out, plot=drawn)


def _profile_target(ctx: Context, name: str) -> BenchTarget:
    """The running service of profile ``name``, found through the context's runtime."""
    from servectl.bench.target import bench_target

    return bench_target(ctx, name=name)
