"""servectl: a launcher and serving-profile manager for SGLang.

The public API, keyword-only and typed; the ``servectl`` command is a thin layer over the same functions::

    import servectl

    plan = servectl.compile_plan(profile="demo")       # validate and compile; starts nothing
    print(plan.docker.image, plan.engine_argv)
    servectl.up(name="demo")                            # preflight, start, wait until it serves
    servectl.down(name="demo")

Functions (from :mod:`servectl.api` unless noted): ``load_profile``, ``compile_plan``, ``run_preflight``,
``up``, ``down``, ``services``, ``status``, ``logs``, ``swap``, ``rollback``, ``rollback_check``,
``recover``, ``doctor``, ``adopt``, ``diff_container``; ``flag_catalog``, ``extract_catalog`` (an image's
own parser as a flag catalog), ``diff_catalogs``, ``validate_in_image`` (an argv parsed by the image's own
SGLang); ``run_bench`` (measure a server, :mod:`servectl.bench.runner`) and ``run_profile_bench`` (what
``servectl bench`` does, :mod:`servectl.bench.profile_run`); ``run_qualify`` (the qualification gates
against a server, :mod:`servectl.bench.qualify.runner`) and ``run_profile_qualify`` (what ``servectl
qualify`` does, :mod:`servectl.bench.qualify.profile_run`). Their results and settings: ``LoadedProfile``,
``LaunchPlan``, ``PreflightReport``, ``ExtractedCatalog``, ``InImageValidation``, ``AdoptResult``,
``UpResult``, ``DownResult``, ``ServiceInfo``, ``Status``, ``SwapResult``, ``BenchSettings``,
``BenchReport``, ``ProfileBenchResult``, ``QualifySettings``, ``QualifyReport``, ``ProfileQualifyResult``.
Errors derive from ``ServectlError`` (:mod:`servectl.errors`), each with the exit code the CLI uses.

Names load on first use (PEP 562), so ``import servectl`` imports no Docker SDK, NVML, httpx or pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AdoptResult": "servectl.service.adopt",
    "BenchReport": "servectl.bench.model",
    "BenchSettings": "servectl.bench.model",
    "DownResult": "servectl.service.runtime",
    "ExtractedCatalog": "servectl.preflight.engine_image",
    "InImageValidation": "servectl.preflight.engine_image",
    "LaunchPlan": "servectl.plan.compile",
    "LoadedProfile": "servectl.profile.loader",
    "PreflightReport": "servectl.preflight.model",
    "ProfileBenchResult": "servectl.bench.profile_run",
    "ProfileQualifyResult": "servectl.bench.qualify.profile_run",
    "QualifyReport": "servectl.bench.qualify.model",
    "QualifySettings": "servectl.bench.qualify.model",
    "ServectlError": "servectl.errors",
    "ServiceInfo": "servectl.service.services",
    "Status": "servectl.api",
    "SwapResult": "servectl.service.swap",
    "UpResult": "servectl.service.runtime",
    "adopt": "servectl.api",
    "compile_plan": "servectl.api",
    "diff_catalogs": "servectl.api",
    "diff_container": "servectl.api",
    "doctor": "servectl.api",
    "down": "servectl.api",
    "extract_catalog": "servectl.api",
    "flag_catalog": "servectl.api",
    "load_profile": "servectl.api",
    "logs": "servectl.api",
    "recover": "servectl.api",
    "rollback": "servectl.api",
    "rollback_check": "servectl.api",
    "run_bench": "servectl.bench.runner",
    "run_preflight": "servectl.api",
    "run_profile_bench": "servectl.bench.profile_run",
    "run_profile_qualify": "servectl.bench.qualify.profile_run",
    "run_qualify": "servectl.bench.qualify.runner",
    "services": "servectl.api",
    "status": "servectl.api",
    "swap": "servectl.api",
    "up": "servectl.api",
    "validate_in_image": "servectl.api",
}

__all__ = [
    "AdoptResult",
    "BenchReport",
    "BenchSettings",
    "DownResult",
    "ExtractedCatalog",
    "InImageValidation",
    "LaunchPlan",
    "LoadedProfile",
    "PreflightReport",
    "ProfileBenchResult",
    "ProfileQualifyResult",
    "QualifyReport",
    "QualifySettings",
    "ServectlError",
    "ServiceInfo",
    "Status",
    "SwapResult",
    "UpResult",
    "__version__",
    "adopt",
    "compile_plan",
    "diff_catalogs",
    "diff_container",
    "doctor",
    "down",
    "extract_catalog",
    "flag_catalog",
    "load_profile",
    "logs",
    "recover",
    "rollback",
    "rollback_check",
    "run_bench",
    "run_preflight",
    "run_profile_bench",
    "run_profile_qualify",
    "run_qualify",
    "services",
    "status",
    "swap",
    "up",
    "validate_in_image",
]

if TYPE_CHECKING:
    from servectl.api import (
        Status,
        adopt,
        compile_plan,
        diff_catalogs,
        diff_container,
        doctor,
        down,
        extract_catalog,
        flag_catalog,
        load_profile,
        logs,
        recover,
        rollback,
        rollback_check,
        run_preflight,
        services,
        status,
        swap,
        up,
        validate_in_image,
    )
    from servectl.bench.model import BenchReport, BenchSettings
    from servectl.bench.profile_run import ProfileBenchResult, run_profile_bench
    from servectl.bench.qualify.model import QualifyReport, QualifySettings
    from servectl.bench.qualify.profile_run import ProfileQualifyResult, run_profile_qualify
    from servectl.bench.qualify.runner import run_qualify
    from servectl.bench.runner import run_bench
    from servectl.errors import ServectlError
    from servectl.plan.compile import LaunchPlan
    from servectl.preflight.engine_image import ExtractedCatalog, InImageValidation
    from servectl.preflight.model import PreflightReport
    from servectl.profile.loader import LoadedProfile
    from servectl.service.adopt import AdoptResult
    from servectl.service.runtime import DownResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.swap import SwapResult


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
