"""Run preflight: gather the facts once, run every check, and raise when one failed."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from servectl.adapters.docker import DockerEngine
from servectl.adapters.gpu import GpuInventory
from servectl.adapters.host import HostProbe
from servectl.errors import PreflightFailed, ServiceConflict
from servectl.preflight.checks import run_checks, validate_skip
from servectl.preflight.checks.services import SERVECTL_HOLDER
from servectl.preflight.facts import gather_facts
from servectl.preflight.model import PreflightReport, PreflightRequest

if TYPE_CHECKING:
    from servectl.adapters.engine_image import ParseMemo


def run_preflight(
    *,
    request: PreflightRequest,
    gpus: GpuInventory,
    host: HostProbe,
    docker: DockerEngine,
    skip: Iterable[str] = frozenset(),
    parses: ParseMemo | None = None,
) -> PreflightReport:
    """Measure the box and run every check for one request.

    Args:
        request: what the service needs (filled in from the profile).
        gpus: GPU inventory (NVML on a real host).
        host: host probe (psutil on a real host).
        docker: the Docker engine (its facts, and the throwaway container of ``engine.parse``).
        skip: check ids forced to ``skipped`` (``--force CHECK-ID``).
        parses: the transaction's memo of the image's parser verdicts (``engine.parse``); None: ask the image.

    Returns:
        The report; ``report.failed`` says whether a start must not happen.

    Raises:
        UsageError: ``skip`` names a check that does not exist.
    """
    skipped = validate_skip(skip)
    started_at = time.time()
    started = time.perf_counter()
    facts = gather_facts(request=request, gpus=gpus, host=host, docker=docker, skipped=skipped, parses=parses)
    checks = run_checks(request, facts, skipped)
    return PreflightReport(
        profile_name=request.profile_name,
        source_file=request.source_file,
        checks=checks,
        started_at=started_at,
        duration_seconds=time.perf_counter() - started,
        gpu_query_seconds=facts.gpu_seconds,
    )


def raise_if_failed(report: PreflightReport) -> None:
    """Raise when a check failed; ``up`` and ``swap`` call this before starting anything.

    Raises:
        ServiceConflict: another servectl service holds the container name, the port or a card (exit 1: the
            fix is ``swap`` or ``down``); every failed check is listed, one line each, the report attached.
        PreflightFailed: any other check failed (exit 3).
    """
    if not report.failed:
        return
    if any(c.result == "fail" and c.facts.get(SERVECTL_HOLDER) for c in report.checks):
        raise ServiceConflict(report.failure_summary(), report=report)
    raise PreflightFailed(report.failure_summary(), report=report)
