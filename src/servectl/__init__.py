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

The public names are written once, in ``_EXPORTS`` (name -> defining module): ``lazy_exports`` loads from it,
``__all__`` is derived from it, and the layering test resolves imports through it. The result types and errors
are listed by hand; the module functions' entries are generated from the ``Host``'s methods by
``scripts/gen_api.py``, which also writes the ``TYPE_CHECKING`` block: mypy strict reads neither a table nor a
computed ``__all__``, so that block repeats each entry as an explicit re-export (``from M import N as N``) that
never runs. tests/unit/test_generated_api.py fails when either generated block is stale, and
tests/unit/test_exports.py when the block and the table differ by one name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servectl.lazy import lazy_exports
from servectl.version import __version__

_EXPORTS: dict[str, str] = {
    "AdoptResult": "servectl.service.adopt",
    "BenchFailed": "servectl.errors",
    "BenchReport": "servectl.bench.model",
    "BenchSettings": "servectl.bench.settings",
    "Budget": "servectl.gateway.keys",
    "CardUse": "servectl.service.watch",
    "CampaignInterrupted": "servectl.errors",
    "CatalogError": "servectl.errors",
    "CampaignCheck": "servectl.campaign.variants",
    "CampaignExport": "servectl.campaign.export",
    "CampaignOutcome": "servectl.campaign.output",
    "CampaignProgress": "servectl.campaign.progress",
    "CampaignRow": "servectl.campaign.run",
    "CatalogListing": "servectl.host",
    "CheckedVariant": "servectl.campaign.variants",
    "CheckItem": "servectl.service.rollback",
    "ClaimsFailed": "servectl.errors",
    "Comparison": "servectl.bench.compare",
    "CreatedKey": "servectl.host",
    "DoctorLine": "servectl.preflight.doctor",
    "DoctorReport": "servectl.preflight.doctor",
    "DownResult": "servectl.service.runtime",
    "DryRun": "servectl.adapters.plan_cache",
    "EngineUnavailable": "servectl.errors",
    "EvidenceRecord": "servectl.profile.evidence",
    "ExtractedCatalog": "servectl.service.catalog",
    "FindingLimits": "servectl.bench.finding.publish",
    "FlagCatalog": "servectl.profile.catalog",
    "FlagChange": "servectl.profile.catalog_diff",
    "GatewayContainer": "servectl.gateway.container",
    "GatewayFileCheck": "servectl.host",
    "GatewayClients": "servectl.host",
    "GatewayStatus": "servectl.host",
    "GpuUnavailable": "servectl.errors",
    "Host": "servectl.host",
    "ImageProbeError": "servectl.adapters.engine_image",
    "InImageValidation": "servectl.service.catalog",
    "KeyEntry": "servectl.gateway.keys",
    "LaunchPlan": "servectl.plan.compile",
    "LoadedProfile": "servectl.profile.loader",
    "LockTimeout": "servectl.errors",
    "ObjectiveRow": "servectl.campaign.objectives",
    "ParseVerdict": "servectl.adapters.engine_image",
    "PhaseEvent": "servectl.service.transaction.model",
    "PhaseTiming": "servectl.service.transaction.model",
    "PreflightFailed": "servectl.errors",
    "PreflightReport": "servectl.preflight.model",
    "Problem": "servectl.errors",
    "ProfileBenchResult": "servectl.bench.profile_run",
    "ProfileDiff": "servectl.host",
    "ProfileError": "servectl.errors",
    "ProfileQualifyResult": "servectl.bench.qualify.profile_run",
    "ProfileRow": "servectl.plan.inventory",
    "ProfileTemplate": "servectl.errors",
    "Progress": "servectl.service.health",
    "QualificationFailed": "servectl.errors",
    "QualifyReport": "servectl.bench.qualify.model",
    "QualifySettings": "servectl.bench.qualify.settings",
    "RecoverResult": "servectl.service.recover",
    "RegistryExport": "servectl.bench.finding.registry",
    "RenderSet": "servectl.render.files",
    "RenderUnsupported": "servectl.errors",
    "RenderedFile": "servectl.render.files",
    "ReportResult": "servectl.bench.finding.report",
    "RestoreOutcome": "servectl.adapters.conflicts",
    "RollbackCheck": "servectl.service.rollback",
    "ServectlError": "servectl.errors",
    "ServiceConflict": "servectl.errors",
    "ServiceInfo": "servectl.service.services",
    "ShownProfile": "servectl.host",
    "StartupFailed": "servectl.errors",
    "StateAccessDenied": "servectl.errors",
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
    "VerifyResult": "servectl.bench.finding.verify",
    "WatchView": "servectl.service.watch",
    "from_env": "servectl.host",
    "run_bench": "servectl.bench.runner",
    "run_qualify": "servectl.bench.qualify.runner",
    # --- generated by scripts/gen_api.py (functions): do not edit, run python scripts/gen_api.py ---
    "adopt": "servectl.api",
    "build_standin_image": "servectl.api",
    "campaign_status": "servectl.api",
    "catalogs": "servectl.api",
    "check_campaign": "servectl.api",
    "check_gateway_file": "servectl.api",
    "compare_bench": "servectl.api",
    "compile_plan": "servectl.api",
    "completions": "servectl.api",
    "create_gateway_key": "servectl.api",
    "diff_catalogs": "servectl.api",
    "diff_container": "servectl.api",
    "diff_profiles": "servectl.api",
    "doctor": "servectl.api",
    "down": "servectl.api",
    "dry_run": "servectl.api",
    "export_campaign": "servectl.api",
    "export_registry": "servectl.api",
    "extract_catalog": "servectl.api",
    "flag_catalog": "servectl.api",
    "gateway_clients": "servectl.api",
    "gateway_down": "servectl.api",
    "gateway_keys": "servectl.api",
    "gateway_logs": "servectl.api",
    "gateway_run": "servectl.api",
    "gateway_status": "servectl.api",
    "gateway_up": "servectl.api",
    "init_gateway_file": "servectl.api",
    "load_profile": "servectl.api",
    "logs": "servectl.api",
    "profile_schema": "servectl.api",
    "profiles": "servectl.api",
    "promote": "servectl.api",
    "recover": "servectl.api",
    "render_all": "servectl.api",
    "render_profile": "servectl.api",
    "resume_campaign": "servectl.api",
    "revoke_gateway_key": "servectl.api",
    "rollback": "servectl.api",
    "rollback_check": "servectl.api",
    "run_campaign": "servectl.api",
    "run_preflight": "servectl.api",
    "run_profile_bench": "servectl.api",
    "run_profile_qualify": "servectl.api",
    "services": "servectl.api",
    "show": "servectl.api",
    "status": "servectl.api",
    "swap": "servectl.api",
    "up": "servectl.api",
    "validate": "servectl.api",
    "validate_in_image": "servectl.api",
    "verify_finding": "servectl.api",
    "write_report": "servectl.api",
    # --- end of generated (functions) ---
}

__all__ = ["__version__", *_EXPORTS]

# The one list of public names is _EXPORTS; __all__ is derived from it, and the block below (generated from
# it by scripts/gen_api.py) says the same to type checkers (`X as X`: an explicit re-export).
if TYPE_CHECKING:
    # --- generated by scripts/gen_api.py (typing): do not edit, run python scripts/gen_api.py ---
    from servectl.adapters.conflicts import RestoreOutcome as RestoreOutcome
    from servectl.adapters.engine_image import ImageProbeError as ImageProbeError
    from servectl.adapters.engine_image import ParseVerdict as ParseVerdict
    from servectl.adapters.plan_cache import DryRun as DryRun
    from servectl.api import adopt as adopt
    from servectl.api import build_standin_image as build_standin_image
    from servectl.api import campaign_status as campaign_status
    from servectl.api import catalogs as catalogs
    from servectl.api import check_campaign as check_campaign
    from servectl.api import check_gateway_file as check_gateway_file
    from servectl.api import compare_bench as compare_bench
    from servectl.api import compile_plan as compile_plan
    from servectl.api import completions as completions
    from servectl.api import create_gateway_key as create_gateway_key
    from servectl.api import diff_catalogs as diff_catalogs
    from servectl.api import diff_container as diff_container
    from servectl.api import diff_profiles as diff_profiles
    from servectl.api import doctor as doctor
    from servectl.api import down as down
    from servectl.api import dry_run as dry_run
    from servectl.api import export_campaign as export_campaign
    from servectl.api import export_registry as export_registry
    from servectl.api import extract_catalog as extract_catalog
    from servectl.api import flag_catalog as flag_catalog
    from servectl.api import gateway_clients as gateway_clients
    from servectl.api import gateway_down as gateway_down
    from servectl.api import gateway_keys as gateway_keys
    from servectl.api import gateway_logs as gateway_logs
    from servectl.api import gateway_run as gateway_run
    from servectl.api import gateway_status as gateway_status
    from servectl.api import gateway_up as gateway_up
    from servectl.api import init_gateway_file as init_gateway_file
    from servectl.api import load_profile as load_profile
    from servectl.api import logs as logs
    from servectl.api import profile_schema as profile_schema
    from servectl.api import profiles as profiles
    from servectl.api import promote as promote
    from servectl.api import recover as recover
    from servectl.api import render_all as render_all
    from servectl.api import render_profile as render_profile
    from servectl.api import resume_campaign as resume_campaign
    from servectl.api import revoke_gateway_key as revoke_gateway_key
    from servectl.api import rollback as rollback
    from servectl.api import rollback_check as rollback_check
    from servectl.api import run_campaign as run_campaign
    from servectl.api import run_preflight as run_preflight
    from servectl.api import run_profile_bench as run_profile_bench
    from servectl.api import run_profile_qualify as run_profile_qualify
    from servectl.api import services as services
    from servectl.api import show as show
    from servectl.api import status as status
    from servectl.api import swap as swap
    from servectl.api import up as up
    from servectl.api import validate as validate
    from servectl.api import validate_in_image as validate_in_image
    from servectl.api import verify_finding as verify_finding
    from servectl.api import write_report as write_report
    from servectl.bench.compare import Comparison as Comparison
    from servectl.bench.finding.publish import FindingLimits as FindingLimits
    from servectl.bench.finding.registry import RegistryExport as RegistryExport
    from servectl.bench.finding.report import ReportResult as ReportResult
    from servectl.bench.finding.verify import VerifyResult as VerifyResult
    from servectl.bench.model import BenchReport as BenchReport
    from servectl.bench.profile_run import ProfileBenchResult as ProfileBenchResult
    from servectl.bench.qualify.model import QualifyReport as QualifyReport
    from servectl.bench.qualify.profile_run import ProfileQualifyResult as ProfileQualifyResult
    from servectl.bench.qualify.runner import run_qualify as run_qualify
    from servectl.bench.qualify.settings import QualifySettings as QualifySettings
    from servectl.bench.runner import run_bench as run_bench
    from servectl.bench.settings import BenchSettings as BenchSettings
    from servectl.campaign.export import CampaignExport as CampaignExport
    from servectl.campaign.objectives import ObjectiveRow as ObjectiveRow
    from servectl.campaign.output import CampaignOutcome as CampaignOutcome
    from servectl.campaign.progress import CampaignProgress as CampaignProgress
    from servectl.campaign.run import CampaignRow as CampaignRow
    from servectl.campaign.variants import CampaignCheck as CampaignCheck
    from servectl.campaign.variants import CheckedVariant as CheckedVariant
    from servectl.errors import BenchFailed as BenchFailed
    from servectl.errors import CampaignInterrupted as CampaignInterrupted
    from servectl.errors import CatalogError as CatalogError
    from servectl.errors import ClaimsFailed as ClaimsFailed
    from servectl.errors import EngineUnavailable as EngineUnavailable
    from servectl.errors import GpuUnavailable as GpuUnavailable
    from servectl.errors import LockTimeout as LockTimeout
    from servectl.errors import PreflightFailed as PreflightFailed
    from servectl.errors import Problem as Problem
    from servectl.errors import ProfileError as ProfileError
    from servectl.errors import ProfileTemplate as ProfileTemplate
    from servectl.errors import QualificationFailed as QualificationFailed
    from servectl.errors import RenderUnsupported as RenderUnsupported
    from servectl.errors import ServectlError as ServectlError
    from servectl.errors import ServiceConflict as ServiceConflict
    from servectl.errors import StartupFailed as StartupFailed
    from servectl.errors import StateAccessDenied as StateAccessDenied
    from servectl.errors import StateDamaged as StateDamaged
    from servectl.errors import SwapError as SwapError
    from servectl.errors import SwapFailed as SwapFailed
    from servectl.errors import SwapInterrupted as SwapInterrupted
    from servectl.errors import SwapRolledBack as SwapRolledBack
    from servectl.errors import UnfinishedTransaction as UnfinishedTransaction
    from servectl.errors import UpInterrupted as UpInterrupted
    from servectl.errors import UsageError as UsageError
    from servectl.gateway.container import GatewayContainer as GatewayContainer
    from servectl.gateway.keys import Budget as Budget
    from servectl.gateway.keys import KeyEntry as KeyEntry
    from servectl.host import CatalogListing as CatalogListing
    from servectl.host import CreatedKey as CreatedKey
    from servectl.host import GatewayClients as GatewayClients
    from servectl.host import GatewayFileCheck as GatewayFileCheck
    from servectl.host import GatewayStatus as GatewayStatus
    from servectl.host import Host as Host
    from servectl.host import ProfileDiff as ProfileDiff
    from servectl.host import ShownProfile as ShownProfile
    from servectl.host import Status as Status
    from servectl.host import from_env as from_env
    from servectl.plan.compile import LaunchPlan as LaunchPlan
    from servectl.plan.inventory import ProfileRow as ProfileRow
    from servectl.plan.inventory import Validation as Validation
    from servectl.preflight.doctor import DoctorLine as DoctorLine
    from servectl.preflight.doctor import DoctorReport as DoctorReport
    from servectl.preflight.model import PreflightReport as PreflightReport
    from servectl.profile.catalog import FlagCatalog as FlagCatalog
    from servectl.profile.catalog_diff import FlagChange as FlagChange
    from servectl.profile.evidence import EvidenceRecord as EvidenceRecord
    from servectl.profile.loader import LoadedProfile as LoadedProfile
    from servectl.render.files import RenderedFile as RenderedFile
    from servectl.render.files import RenderSet as RenderSet
    from servectl.service.adopt import AdoptResult as AdoptResult
    from servectl.service.catalog import ExtractedCatalog as ExtractedCatalog
    from servectl.service.catalog import InImageValidation as InImageValidation
    from servectl.service.container import StopResult as StopResult
    from servectl.service.health import Progress as Progress
    from servectl.service.recover import RecoverResult as RecoverResult
    from servectl.service.rollback import CheckItem as CheckItem
    from servectl.service.rollback import RollbackCheck as RollbackCheck
    from servectl.service.runtime import DownResult as DownResult
    from servectl.service.runtime import UpResult as UpResult
    from servectl.service.services import ServiceInfo as ServiceInfo
    from servectl.service.transaction.model import PhaseEvent as PhaseEvent
    from servectl.service.transaction.model import PhaseTiming as PhaseTiming
    from servectl.service.transaction.model import SwapResult as SwapResult
    from servectl.service.transaction.model import TargetFailure as TargetFailure
    from servectl.service.watch import CardUse as CardUse
    from servectl.service.watch import WatchView as WatchView
    # --- end of generated (typing) ---


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
