"""servectl: a launcher and serving-profile manager for SGLang.

The public API (docs/api.md), keyword-only and typed; the ``servectl`` command is a thin layer over the same
methods::

    import servectl

    plan = servectl.compile_plan(name="demo")         # validate and compile; starts nothing
    print(plan.docker.image, plan.engine_argv)
    with servectl.from_env() as host:                 # Docker, NVML, host probe, state folder; closed at the end
        host.up(name="demo")                          # preflight, start, wait until it serves
        host.swap(name="demo-rollback")               # all-or-nothing
        host.down(name="demo-rollback")

- :class:`Host` (:mod:`servectl.host`) owns this host's adapters (real ones from :func:`from_env`, fakes from
  :func:`servectl.testing.fake_host`); its methods are the commands.
- The module functions (``servectl.up(name=...)``, :mod:`servectl.api`) each build a host, call one method and
  close it; ``run_bench`` / ``run_qualify`` measure a server at a URL and need no host.
- Every result type a method returns (and the types inside it), and every error class of
  :mod:`servectl.errors`, is importable from here; errors derive from ``ServectlError`` and carry the exit code
  the CLI uses.

Names load on first use (PEP 562), so ``import servectl`` imports no Docker SDK, NVML, httpx or pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports
from servectl.version import __version__

_EXPORTS: dict[str, str] = {
    "AdoptResult": "servectl.service.adopt",
    "BenchFailed": "servectl.errors",
    "BenchReport": "servectl.bench.model",
    "BenchSettings": "servectl.bench.model",
    "CardUse": "servectl.service.watch",
    "CatalogError": "servectl.errors",
    "ClaimsFailed": "servectl.errors",
    "CheckItem": "servectl.service.rollback",
    "DoctorLine": "servectl.preflight.doctor",
    "DoctorReport": "servectl.preflight.doctor",
    "DownResult": "servectl.service.runtime",
    "DryRun": "servectl.adapters.plan_cache",
    "EngineUnavailable": "servectl.errors",
    "EvidenceRecord": "servectl.profile.evidence",
    "ExtractedCatalog": "servectl.service.catalog",
    "FlagCatalog": "servectl.profile.catalog",
    "FlagChange": "servectl.profile.catalog_diff",
    "GpuUnavailable": "servectl.errors",
    "Host": "servectl.host",
    "ImageProbeError": "servectl.adapters.engine_image",
    "InImageValidation": "servectl.service.catalog",
    "LaunchPlan": "servectl.plan.compile",
    "LoadedProfile": "servectl.profile.loader",
    "LockTimeout": "servectl.errors",
    "ParseVerdict": "servectl.adapters.engine_image",
    "PhaseEvent": "servectl.service.transaction.model",
    "PhaseTiming": "servectl.service.transaction.model",
    "PreflightFailed": "servectl.errors",
    "PreflightReport": "servectl.preflight.model",
    "Problem": "servectl.errors",
    "ProfileBenchResult": "servectl.bench.profile_run",
    "ProfileError": "servectl.errors",
    "ProfileQualifyResult": "servectl.bench.qualify.profile_run",
    "ProfileRow": "servectl.plan.inventory",
    "ProfileTemplate": "servectl.errors",
    "Progress": "servectl.service.health",
    "QualificationFailed": "servectl.errors",
    "QualifyReport": "servectl.bench.qualify.model",
    "QualifySettings": "servectl.bench.qualify.model",
    "RecoverResult": "servectl.service.recover",
    "RenderUnsupported": "servectl.errors",
    "RenderedFile": "servectl.render.files",
    "RestoreOutcome": "servectl.adapters.conflicts",
    "RollbackCheck": "servectl.service.rollback",
    "ServectlError": "servectl.errors",
    "ServiceConflict": "servectl.errors",
    "ServiceInfo": "servectl.service.services",
    "StartupFailed": "servectl.errors",
    "StateDamaged": "servectl.errors",
    "Status": "servectl.host",
    "StopResult": "servectl.service.container",
    "SwapError": "servectl.errors",
    "SwapFailed": "servectl.errors",
    "SwapInterrupted": "servectl.errors",
    "SwapResult": "servectl.service.transaction.model",
    "SwapRolledBack": "servectl.errors",
    "TargetFailure": "servectl.service.transaction.model",
    "UnfinishedTransaction": "servectl.errors",
    "UpInterrupted": "servectl.errors",
    "UpResult": "servectl.service.runtime",
    "UsageError": "servectl.errors",
    "Validation": "servectl.plan.inventory",
    "WatchView": "servectl.service.watch",
    "adopt": "servectl.api",
    "compile_plan": "servectl.api",
    "diff_catalogs": "servectl.api",
    "diff_container": "servectl.api",
    "doctor": "servectl.api",
    "dry_run": "servectl.api",
    "down": "servectl.api",
    "extract_catalog": "servectl.api",
    "flag_catalog": "servectl.api",
    "from_env": "servectl.host",
    "load_profile": "servectl.api",
    "logs": "servectl.api",
    "profiles": "servectl.api",
    "promote": "servectl.api",
    "recover": "servectl.api",
    "render_profile": "servectl.api",
    "rollback": "servectl.api",
    "rollback_check": "servectl.api",
    "run_bench": "servectl.bench.runner",
    "run_preflight": "servectl.api",
    "run_profile_bench": "servectl.api",
    "run_profile_qualify": "servectl.api",
    "run_qualify": "servectl.bench.qualify.runner",
    "services": "servectl.api",
    "status": "servectl.api",
    "swap": "servectl.api",
    "up": "servectl.api",
    "validate": "servectl.api",
    "validate_in_image": "servectl.api",
}

__all__ = [
    "AdoptResult",
    "BenchFailed",
    "BenchReport",
    "BenchSettings",
    "CardUse",
    "CatalogError",
    "CheckItem",
    "ClaimsFailed",
    "DoctorLine",
    "DoctorReport",
    "DownResult",
    "DryRun",
    "EngineUnavailable",
    "EvidenceRecord",
    "ExtractedCatalog",
    "FlagCatalog",
    "FlagChange",
    "GpuUnavailable",
    "Host",
    "ImageProbeError",
    "InImageValidation",
    "LaunchPlan",
    "LoadedProfile",
    "LockTimeout",
    "ParseVerdict",
    "PhaseEvent",
    "PhaseTiming",
    "PreflightFailed",
    "PreflightReport",
    "Problem",
    "ProfileBenchResult",
    "ProfileError",
    "ProfileQualifyResult",
    "ProfileRow",
    "ProfileTemplate",
    "Progress",
    "QualificationFailed",
    "QualifyReport",
    "QualifySettings",
    "RecoverResult",
    "RenderUnsupported",
    "RenderedFile",
    "RestoreOutcome",
    "RollbackCheck",
    "ServectlError",
    "ServiceConflict",
    "ServiceInfo",
    "StartupFailed",
    "StateDamaged",
    "Status",
    "StopResult",
    "SwapError",
    "SwapFailed",
    "SwapInterrupted",
    "SwapResult",
    "SwapRolledBack",
    "TargetFailure",
    "UnfinishedTransaction",
    "UpInterrupted",
    "UpResult",
    "UsageError",
    "Validation",
    "WatchView",
    "__version__",
    "adopt",
    "compile_plan",
    "diff_catalogs",
    "diff_container",
    "doctor",
    "down",
    "dry_run",
    "extract_catalog",
    "flag_catalog",
    "from_env",
    "load_profile",
    "logs",
    "profiles",
    "promote",
    "recover",
    "render_profile",
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
    "validate",
    "validate_in_image",
]

if TYPE_CHECKING:
    from servectl.adapters.conflicts import RestoreOutcome
    from servectl.adapters.engine_image import ImageProbeError, ParseVerdict
    from servectl.adapters.plan_cache import DryRun
    from servectl.api import (
        adopt,
        compile_plan,
        diff_catalogs,
        diff_container,
        doctor,
        down,
        dry_run,
        extract_catalog,
        flag_catalog,
        load_profile,
        logs,
        profiles,
        promote,
        recover,
        render_profile,
        rollback,
        rollback_check,
        run_preflight,
        run_profile_bench,
        run_profile_qualify,
        services,
        status,
        swap,
        up,
        validate,
        validate_in_image,
    )
    from servectl.bench.model import BenchReport, BenchSettings
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyReport, QualifySettings
    from servectl.bench.qualify.profile_run import ProfileQualifyResult
    from servectl.bench.qualify.runner import run_qualify
    from servectl.bench.runner import run_bench
    from servectl.errors import (
        BenchFailed,
        CatalogError,
        ClaimsFailed,
        EngineUnavailable,
        GpuUnavailable,
        LockTimeout,
        PreflightFailed,
        Problem,
        ProfileError,
        ProfileTemplate,
        QualificationFailed,
        RenderUnsupported,
        ServectlError,
        ServiceConflict,
        StartupFailed,
        StateDamaged,
        SwapError,
        SwapFailed,
        SwapInterrupted,
        SwapRolledBack,
        UnfinishedTransaction,
        UpInterrupted,
        UsageError,
    )
    from servectl.host import Host, Status, from_env
    from servectl.plan.compile import LaunchPlan
    from servectl.plan.inventory import ProfileRow, Validation
    from servectl.preflight.doctor import DoctorLine, DoctorReport
    from servectl.preflight.model import PreflightReport
    from servectl.profile.catalog import FlagCatalog
    from servectl.profile.catalog_diff import FlagChange
    from servectl.profile.evidence import EvidenceRecord
    from servectl.profile.loader import LoadedProfile
    from servectl.render.files import RenderedFile
    from servectl.service.adopt import AdoptResult
    from servectl.service.catalog import ExtractedCatalog, InImageValidation
    from servectl.service.container import StopResult
    from servectl.service.health import Progress
    from servectl.service.recover import RecoverResult
    from servectl.service.rollback import CheckItem, RollbackCheck
    from servectl.service.runtime import DownResult, UpResult
    from servectl.service.services import ServiceInfo
    from servectl.service.transaction.model import PhaseEvent, PhaseTiming, SwapResult, TargetFailure
    from servectl.service.watch import CardUse, WatchView


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
