"""servectl's public functions: each builds a :class:`servectl.host.Host` from the environment, calls one method
and closes it (the Docker client and NVML it opened).

Use them through the package (``servectl.up(name="demo")``; see ``servectl/__init__.py``). To run several
commands on one set of adapters, or to pass fakes (:mod:`servectl.testing`), use the host itself::

    with servectl.from_env() as host:
        host.up(name="demo")

A function's signature and docstring are its method's, written once on the ``Host`` mixins: :func:`_function`
copies them (``inspect.signature`` minus ``self``, the docstring), and its ``ParamSpec`` type gives mypy the
same parameters. Only the functions that also take ``environ`` (which a host holds, not its methods) are
written out below. Every function is keyword-only and raises :class:`servectl.errors.ServectlError` subclasses
(one line each, with the exit code the CLI would use).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

from servectl.host import Host, Status, from_env

if TYPE_CHECKING:
    from servectl.adapters.plan_cache import DryRun
    from servectl.bench.finding.publish import FindingLimits
    from servectl.bench.finding.report import ReportResult
    from servectl.bench.model import BenchProgressEvent
    from servectl.bench.profile_run import ProfileBenchResult
    from servectl.bench.qualify.model import QualifyProgressEvent
    from servectl.bench.qualify.profile_run import ProfileQualifyResult
    from servectl.bench.qualify.settings import QualifySettings
    from servectl.bench.settings import BenchSettings
    from servectl.plan.compile import LaunchPlan

__all__ = [
    "Host",
    "Status",
    "adopt",
    "build_standin_image",
    "campaign_status",
    "catalogs",
    "check_campaign",
    "check_gateway_file",
    "compare_bench",
    "compile_plan",
    "completions",
    "create_gateway_key",
    "diff_catalogs",
    "diff_container",
    "diff_profiles",
    "doctor",
    "down",
    "dry_run",
    "export_campaign",
    "export_registry",
    "extract_catalog",
    "flag_catalog",
    "from_env",
    "gateway_clients",
    "gateway_down",
    "gateway_keys",
    "gateway_logs",
    "gateway_run",
    "gateway_status",
    "gateway_up",
    "init_gateway_file",
    "load_profile",
    "logs",
    "profile_schema",
    "profiles",
    "promote",
    "recover",
    "render_all",
    "render_profile",
    "resume_campaign",
    "revoke_gateway_key",
    "rollback",
    "rollback_check",
    "run_campaign",
    "run_preflight",
    "run_profile_bench",
    "run_profile_qualify",
    "services",
    "show",
    "status",
    "swap",
    "up",
    "validate",
    "validate_in_image",
    "verify_finding",
    "write_report",
]

P = ParamSpec("P")
R = TypeVar("R")


def _signed(function: Callable[..., object], method: Callable[..., object], name: str) -> None:
    """Give ``function`` the name, signature (without ``self``) and docstring of the ``Host`` method."""
    signature = inspect.signature(method)
    function.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__
    function.__doc__ = (
        f":meth:`Host.{method.__name__}` on a host built from the environment and closed afterwards.\n\n"
        f"{inspect.getdoc(method) or ''}"
    )


def _function(method: Callable[Concatenate[Host, P], R], name: str | None = None) -> Callable[P, R]:
    """The module function of a ``Host`` method: build a host, call the method, close the host."""
    attribute = method.__name__

    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with Host() as host:  # looked up at each call (the public API test stands a recorder in)
            bound: Callable[P, R] = getattr(host, attribute)
            return bound(*args, **kwargs)

    _signed(call, method, name or attribute)
    return call


def _generator(method: Callable[Concatenate[Host, P], Iterator[R]]) -> Callable[P, Iterator[R]]:
    """As :func:`_function` for a method that yields: the host stays open until the iteration ends."""
    attribute = method.__name__

    def call(*args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        with Host() as host:
            bound: Callable[P, Iterator[R]] = getattr(host, attribute)
            yield from bound(*args, **kwargs)

    _signed(call, method, attribute)
    return call


load_profile = _function(Host.load_profile)
profiles = _function(Host.profiles)
validate = _function(Host.validate)
render_profile = _function(Host.render, "render_profile")
promote = _function(Host.promote)
run_preflight = _function(Host.preflight, "run_preflight")
up = _function(Host.up)
down = _function(Host.down)
services = _function(Host.services)
status = _function(Host.status)
logs = _generator(Host.logs)
swap = _function(Host.swap)
rollback = _function(Host.rollback)
rollback_check = _function(Host.rollback_check)
recover = _function(Host.recover)
doctor = _function(Host.doctor)
adopt = _function(Host.adopt)
diff_container = _function(Host.diff_container)
flag_catalog = _function(Host.flag_catalog)
extract_catalog = _function(Host.extract_catalog)
diff_catalogs = _function(Host.diff_catalogs)
validate_in_image = _function(Host.validate_in_image)
gateway_run = _function(Host.gateway_run)
gateway_up = _function(Host.gateway_up)
gateway_down = _function(Host.gateway_down)
gateway_status = _function(Host.gateway_status)
init_gateway_file = _function(Host.init_gateway_file)
gateway_logs = _generator(Host.gateway_logs)
create_gateway_key = _function(Host.create_gateway_key)
gateway_keys = _function(Host.gateway_keys)
gateway_clients = _function(Host.gateway_clients)
revoke_gateway_key = _function(Host.revoke_gateway_key)
check_gateway_file = _function(Host.check_gateway_file)
check_campaign = _function(Host.check_campaign)
run_campaign = _function(Host.run_campaign)
resume_campaign = _function(Host.resume_campaign)
campaign_status = _function(Host.campaign_status)
show = _function(Host.show)
diff_profiles = _function(Host.diff_profiles)
profile_schema = _function(Host.profile_schema)
render_all = _function(Host.render_all)
catalogs = _function(Host.catalogs)
completions = _function(Host.completions)
build_standin_image = _function(Host.build_standin_image)
compare_bench = _function(Host.compare_bench)
export_registry = _function(Host.export_registry)
export_campaign = _function(Host.export_campaign)
verify_finding = _function(Host.verify_finding)


def compile_plan(*, name: str, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """:meth:`Host.compile_plan`: the launch plan of profile ``name`` (reads ``environ``, default
    ``os.environ``); starts nothing."""
    with Host(environ=environ) as host:
        return host.compile_plan(name=name)


def dry_run(*, name: str, environ: Mapping[str, str] | None = None) -> DryRun:
    """:meth:`Host.dry_run`: what ``up --dry-run`` shows for profile ``name`` (reads ``environ``, default
    ``os.environ``); starts nothing."""
    with Host(environ=environ) as host:
        return host.dry_run(name=name)


def run_profile_bench(
    *,
    name: str | None = None,
    settings: BenchSettings | None = None,
    out_dir: Path | None = None,
    plot: Path | None = None,
    progress: Callable[[BenchProgressEvent], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProfileBenchResult:
    """:meth:`Host.bench`: benchmark profile ``name``'s running service (or the server at ``settings.url``) and
    write the evidence (``environ``: where the key and the state folder are read, default ``os.environ``)."""
    with Host(environ=environ) as host:
        return host.bench(name=name, settings=settings, out_dir=out_dir, plot=plot, progress=progress)


def run_profile_qualify(
    *,
    name: str | None = None,
    suite: str | None = None,
    settings: QualifySettings | None = None,
    out_dir: Path | None = None,
    progress: Callable[[QualifyProgressEvent], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProfileQualifyResult:
    """:meth:`Host.qualify`: qualify profile ``name``'s running service (or the server at ``settings.url``, or
    alias ``name`` through the gateway with ``settings.via_gateway``) and write ``qualify.json`` (``environ``:
    where the key and the state folder are read, default ``os.environ``)."""
    with Host(environ=environ) as host:
        return host.qualify(name=name, suite=suite, settings=settings, out_dir=out_dir, progress=progress)


def write_report(
    *,
    name: str,
    evidence_dir: Path,
    qualification_dir: Path | None = None,
    out_dir: Path | None = None,
    limits: FindingLimits | None = None,
    environ: Mapping[str, str] | None = None,
) -> ReportResult:
    """:meth:`Host.write_report`: write (or correct) the finding of profile ``name`` from its bench and
    qualification evidence (``environ``: the state folder of the default ``out_dir`` and the secrets redaction
    takes out, default ``os.environ``)."""
    with Host(environ=environ) as host:
        return host.write_report(
            name=name, evidence_dir=evidence_dir, qualification_dir=qualification_dir, out_dir=out_dir, limits=limits
        )
