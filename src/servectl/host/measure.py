"""Host methods that measure a running service (bench, qualify) and publish what was measured (a finding, its
recount, the registry's speed-sweep record)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.host.base import HostBase

if TYPE_CHECKING:
    from servectl.bench.compare import Comparison
    from servectl.bench.finding.publish import FindingLimits
    from servectl.bench.finding.registry import RegistryExport
    from servectl.bench.finding.report import ReportResult
    from servectl.bench.finding.verify import VerifyResult
    from servectl.bench.model import BenchProgressEvent
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult
    from servectl.bench.qualify.settings import QualifySettings
    from servectl.bench.settings import BenchSettings
    from servectl.campaign.export import CampaignExport


class MeasureCommands(HostBase):
    """Benchmark and qualify through the host's environment, Docker engine and GPU inventory."""

    # -- measure -------------------------------------------------------------------------------------------
    def bench(
        self,
        *,
        name: str | None = None,
        settings: BenchSettings | None = None,
        out_dir: Path | None = None,
        plot: Path | None = None,
        progress: Callable[[BenchProgressEvent], None] | None = None,
    ) -> ProfileBenchResult:
        """Benchmark profile ``name``'s running service (or the server at ``settings.url``) and write the evidence.

        What ``servectl bench`` does; the arguments are those of
        :func:`servectl.bench.profile_run.run_profile_bench` (``settings`` None: the defaults of
        :class:`~servectl.bench.settings.BenchSettings`), with the host's environment, Docker engine (to find the
        service) and GPU inventory (free VRAM after).
        """
        from servectl.bench.profile_run import run_profile_bench

        return run_profile_bench(self.ctx, name=name, settings=settings, out_dir=out_dir, plot=plot, progress=progress)

    def qualify(
        self,
        *,
        name: str | None = None,
        suite: str | None = None,
        settings: QualifySettings | None = None,
        out_dir: Path | None = None,
        progress: Callable[[QualifyProgressEvent], None] | None = None,
    ) -> ProfileQualifyResult:
        """Qualify profile ``name``'s running service (or the server at ``settings.url``) and write
        ``qualify.json``.

        What ``servectl qualify`` does; the arguments are those of
        :func:`servectl.bench.qualify.profile_run.run_profile_qualify` (``settings`` None: the defaults of
        :class:`~servectl.bench.qualify.settings.QualifySettings`), with the host's environment, Docker engine
        and GPU inventory.
        """
        from servectl.bench.qualify.profile_run import run_profile_qualify

        return run_profile_qualify(
            self.ctx, name=name, suite=suite, settings=settings, out_dir=out_dir, progress=progress
        )

    def compare_bench(
        self,
        *,
        runs: Sequence[Path],
        references: Sequence[Path] = (),
        baseline: str | None = None,
        tolerance: float | None = None,
        plot: Path | None = None,
    ) -> Comparison:
        """Bench runs (``bench --out`` folders) and typed references side by side, with ratios to ``baseline``
        (default: the first run); ``plot``: also draw the overlaid taper plot there (PNG).

        Args:
            tolerance: match prompt lengths whose actual tokens are within this fraction (default 0.05).

        Raises:
            UsageError: a folder without bench artifacts, a bad reference line, an unknown baseline, nothing to
                plot; ``plot`` without matplotlib (said before anything is read).
        """
        from servectl.bench.compare_inputs import compare_bench
        from servectl.bench.plot import require_plotting
        from servectl.errors import UsageError

        if plot is not None:  # before reading anything: a missing extra must be said first
            require_plotting()
        tolerance_kw = {} if tolerance is None else {"tolerance": tolerance}
        comparison = compare_bench(runs=runs, references=references, baseline=baseline, **tolerance_kw)
        if plot is not None:
            from servectl.bench.plot import plot_comparison

            try:
                plot_comparison(comparison, plot)
            except ValueError as err:  # nothing to draw
                raise UsageError(f"--plot {plot}: {err}") from err
        return comparison

    # -- publish -------------------------------------------------------------------------------------------
    def write_report(
        self,
        *,
        name: str,
        evidence_dir: Path,
        qualification_dir: Path | None = None,
        out_dir: Path | None = None,
        limits: FindingLimits | None = None,
    ) -> ReportResult:
        """Write (or correct) the finding of profile ``name`` from its bench and qualification evidence.

        What ``servectl report`` does; the arguments are those of
        :func:`servectl.bench.finding.report.write_report`, with the host's environment (the state folder of
        the default ``out_dir``, the secrets redaction takes out).
        """
        from servectl.bench.finding.report import write_report

        return write_report(
            name=name,
            evidence_dir=evidence_dir,
            qualification_dir=qualification_dir,
            out_dir=out_dir,
            limits=limits,
            environ=self.environ,
        )

    def verify_finding(self, *, folder: Path) -> VerifyResult:
        """Recount every claim of the finding in ``folder`` from its artifacts and check every hash.

        What ``servectl claims verify`` does (:func:`servectl.bench.finding.verify.verify_finding`); a claim that
        no longer holds is a line of ``problems``, not an exception. A campaign folder (``campaign.json``, no
        ``claims.json``) has its table recounted from its bench artifacts instead
        (:func:`servectl.campaign.recount.verify_campaign`).
        """
        from servectl.bench.finding.verify import verify_finding
        from servectl.campaign.recount import is_campaign_folder, verify_campaign

        if is_campaign_folder(folder):
            return verify_campaign(folder)
        return verify_finding(folder)

    def export_campaign(
        self, *, folder: Path, out: Path | None = None, overwrite: bool = False, recipe_id: str | None = None
    ) -> CampaignExport:
        """The campaign in ``folder`` as a ``local-ai-registry/v1`` speed sweep with the rows' statuses, validated
        against the shipped schema and written to ``out`` (None: only returned): ``servectl campaign export``
        (:func:`servectl.campaign.export.export_campaign`)."""
        from servectl.campaign.export import export_campaign

        return export_campaign(folder, out=out, overwrite=overwrite, recipe_id=recipe_id)

    def export_registry(
        self,
        *,
        name: str,
        evidence_dir: Path | None = None,
        out: Path | None = None,
        overwrite: bool = False,
        recipe_id: str | None = None,
        omit_failed: bool = False,
    ) -> RegistryExport:
        """The ``local-ai-registry/v1`` speed-sweep record of promoted profile ``name``, validated, and written
        to ``out`` (None: only returned).

        What ``servectl report NAME --format local-ai-registry`` does; the arguments are those of
        :func:`servectl.bench.finding.registry.export_registry`.
        """
        from servectl.bench.finding.registry import export_registry

        return export_registry(
            name=name,
            evidence_dir=evidence_dir,
            out=out,
            overwrite=overwrite,
            recipe_id=recipe_id,
            omit_failed=omit_failed,
            environ=self.environ,
        )
