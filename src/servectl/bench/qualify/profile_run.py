"""One qualification, as ``servectl qualify`` does it: target, suite, key, gates, evidence, verdict.

:func:`run_profile_qualify` is the library form of the command: it finds the service (a profile's running
service, or a URL), picks the suite (``suite`` argument, else the profile's ``qualify:``, else ``default``),
reads the API key from the environment, runs :func:`~servectl.bench.qualify.runner.run_qualify`, writes
``qualify.json`` and returns a result the caller renders; :meth:`ProfileQualifyResult.raise_if_failed` then
fails the run when a gate failed (after rendering, so the table and the evidence exist).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from servectl.bench.model import read_api_key, run_folder
from servectl.bench.qualify.evidence import write_evidence
from servectl.bench.qualify.model import QualifyProgressEvent, QualifyReport
from servectl.bench.qualify.runner import run_qualify
from servectl.bench.qualify.settings import QualifySettings
from servectl.bench.qualify.suite import LoadedSuite, load_suite, suite_path
from servectl.errors import QualificationFailed, UsageError

if TYPE_CHECKING:
    from servectl.bench.qualify.target import QualifyTarget
    from servectl.service.context import Context


@dataclass(frozen=True)
class ProfileQualifyResult:
    """A finished qualification: the report and where its evidence went."""

    report: QualifyReport
    evidence: Path

    def failure(self) -> QualificationFailed | None:
        """The error that fails this run: any failed gate (None when every gate passed or was skipped)."""
        failed = [g for g in self.report.gates if g.verdict == "fail"]
        if not failed:
            return None
        what = ", ".join(f"{g.gate} {g.count}" for g in failed)
        return QualificationFailed(
            f"qualify: {len(failed)} of {len(self.report.gates)} gates failed ({what}); see {self.evidence}"
        )

    def raise_if_failed(self) -> None:
        """Raise :meth:`failure`, if any."""
        error = self.failure()
        if error is not None:
            raise error


def run_profile_qualify(
    ctx: Context,
    *,
    name: str | None = None,
    suite: str | None = None,
    settings: QualifySettings | None = None,
    out_dir: Path | None = None,
    progress: Callable[[QualifyProgressEvent], None] | None = None,
) -> ProfileQualifyResult:
    """Qualify profile ``name``'s running service (or the server at ``settings.url``) and write ``qualify.json``.

    Args:
        ctx: the host's context: its environment (the key, the state folder, the profile search path), for
            ``name`` its runtime (finds the service) and GPU inventory (the VRAM gate), and the code sandbox of
            a coding gate; :meth:`servectl.Host.qualify` passes the host's.
        name: Profile whose running service to qualify; its URL, model, key variable, provenance, reasoning
            parser, context, VRAM reserve and suite are used where ``settings`` leave them empty. With
            ``settings.via_gateway``: a gateway alias, run through the gateway (its file gives the address),
            with the gateway key from ``settings.api_key_env`` or ``api_key_file``; provenance and facts come
            from the alias's first profile, which must be the one answering.
        suite: Suite file (relative to the working folder) or shipped suite name; default: ``settings.suite``,
            else the profile's ``qualify:``, else ``default``.
        settings: Server, model, key and seed (default: :class:`~servectl.bench.qualify.settings.QualifySettings`'s
            defaults); ``api_key_env`` defaults to the profile's ``serve.api_key_env``. The key is read here.
        out_dir: Folder for ``qualify.json`` (default: ``STATE/qualify/<UTC time>``).
        progress: Called after each case, for a progress bar.

    Raises:
        UsageError: neither ``name`` nor a URL; an unknown suite; the key variable is unset.
        ProfileError: the suite file has problems (one line each).
        BenchFailed: the server cannot be reached or serves no such model.
    """
    asked = settings or QualifySettings()
    env = ctx.environ
    url, model, via_gateway = asked.url, asked.model, asked.via_gateway
    api_key_env, api_key_file = asked.api_key_env, asked.api_key_file
    if name is None and not url:
        raise UsageError("qualify: give a profile NAME or --url http://HOST:PORT")
    route = asked.route
    if via_gateway:
        if name is None:
            raise UsageError("qualify --via-gateway: give the ALIAS to qualify")
        if not (api_key_env or api_key_file or asked.api_key):
            raise UsageError("qualify --via-gateway: give the gateway key with --api-key-env NAME or --api-key-file")
        from servectl.bench.qualify.routed import gateway_route

        gateway_url, route = gateway_route(ctx, name)
        url, model, name = url or gateway_url, model or name, route.profile
    # through the gateway, name was an alias: its profile's cards are not read (as before)
    target = _profile_target(ctx, name, read_cards=not via_gateway) if name is not None else None
    loaded = _suite(suite, asked, target)
    key_env = api_key_env or (target.bench.api_key_env if target and not via_gateway else None)
    profile_key_file = target.bench.api_key_file if target and not (api_key_env or via_gateway) else None
    key = asked.api_key or read_api_key(
        None if api_key_file else key_env, env, key_file=str(api_key_file or "") or profile_key_file
    )
    settings = replace(
        asked,
        url=url or (target.bench.url if target else ""),
        suite=loaded,
        model=model or (target.bench.model if target else None),
        api_key=key,
        api_key_env=key_env if not api_key_file else f"file:{api_key_file}",
        route=route,
    )
    out = out_dir or run_folder(env, "qualify")
    report = run_qualify(
        settings=settings,
        context=target.bench.context if target else None,
        facts=target.facts if target else None,
        progress=progress,
        sandbox=ctx.code_sandbox if loaded.suite.gates.coding is not None else None,
        http=ctx.http,
        environ=env,
    )
    return ProfileQualifyResult(report=report, evidence=write_evidence(report, out))


def _suite(suite: str | None, asked: QualifySettings, target: QualifyTarget | None) -> LoadedSuite:
    """The suite asked for by name or path, else the settings', else the profile's ``qualify:``, else ``default``."""
    if suite:
        return load_suite(suite_path(suite, relative_to=Path.cwd()))
    if asked.suite is not None:
        return asked.suite
    return load_suite(target.suite_file if target else suite_path(None))


def _profile_target(ctx: Context, name: str, *, read_cards: bool) -> QualifyTarget:
    """The running service of profile ``name``, found through the context's runtime."""
    from servectl.bench.qualify.target import qualify_target

    return qualify_target(ctx, name=name, read_cards=read_cards)
