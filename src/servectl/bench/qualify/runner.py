"""Run a qualification suite against an OpenAI-compatible server: :func:`run_qualify`.

Order: model discovery (``/v1/models``), then the suite's gates in :data:`GATE_ORDER` (smoke, structured,
tools, reasoning, long context, endurance), then free VRAM per card, judged by the ``vram`` gate. A gate
records failed cases instead of raising; only an unreachable server or an unknown model stop the run.
"""

from __future__ import annotations

import datetime as _dt
import platform
import secrets
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from servectl.adapters.http import HttpAdapter
from servectl.adapters.sandbox import CodeSandbox
from servectl.bench.model import BenchContext, CardFreeMemory, pick_model, read_free_vram
from servectl.bench.qualify.client import QualifyClient
from servectl.bench.qualify.gates import GateRun
from servectl.bench.qualify.model import (
    ClientOverhead,
    GateResult,
    QualifyProgressEvent,
    QualifyReport,
    ServiceFacts,
)
from servectl.bench.qualify.routed import RouteTarget
from servectl.bench.qualify.settings import QualifySettings
from servectl.bench.qualify.suite import GATE_ORDER, LoadedSuite
from servectl.errors import BenchFailed, UsageError

ProgressCallback = Callable[[QualifyProgressEvent], None]


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("servectl", "openai", "jsonschema"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _discover(client: QualifyClient, settings: QualifySettings) -> tuple[str, int | None]:
    import openai

    if not settings.url:
        raise UsageError("qualify: no server to qualify; give QualifySettings(url='http://HOST:PORT') or a NAME")
    url = f"{settings.url}/v1/models"
    try:
        models = dict(client.list_models())
    except openai.AuthenticationError:
        hint = "the key in --api-key-env was refused" if settings.api_key else "pass --api-key-env NAME"
        raise BenchFailed(f"{url}: HTTP 401; {hint}") from None
    except openai.APIError as err:
        raise BenchFailed(
            f"{url}: cannot list models ({type(err).__name__}: {err}); check --url and that it is up"
        ) from None
    wanted = pick_model(url, models, settings.model)
    return wanted, models[wanted]


GateRunner = Callable[[GateRun, Any], GateResult]


def gate_runners(loaded: LoadedSuite, route: RouteTarget | None = None) -> dict[str, GateRunner]:
    """Each gate's runner, with the inputs it reads from files (case sets, corpora) loaded and checked first.

    Raises:
        ProfileError: a case or corpus file the suite names has problems (nothing has been sent yet).
    """
    from servectl.bench.qualify.gates import (
        clients,
        coding,
        endurance,
        image,
        long_context,
        reasoning,
        routed,
        smoke,
        structured,
        tools,
    )

    runners: dict[str, GateRunner] = {
        "smoke": smoke.run,
        "structured": structured.run,
        "tools": tools.run,
        "reasoning": reasoning.run,
        "long_context": long_context.run,
        "endurance": endurance.run,
        "clients": clients.run,
        "routed": lambda run, spec: routed.run(run, spec, route),
    }
    gates = loaded.suite.gates
    if gates.coding is not None:
        case_set = coding.load_cases(coding.cases_path(gates.coding, loaded.source))
        runners["coding"] = lambda run, spec: coding.run(run, spec, case_set)
    if gates.image is not None:
        corpus = image.load_corpus(image.corpus_path(gates.image, loaded.source))
        runners["image"] = lambda run, spec: image.run(run, spec, corpus)
    return runners


def _require_sandbox(loaded: LoadedSuite, sandbox: CodeSandbox | None) -> None:
    if sandbox is None and loaded.suite.gates.coding is not None:
        raise UsageError(
            f"qualify: suite {loaded.suite.name} has a coding gate and this run has no code sandbox to run the "
            "answers in; pass sandbox= (servectl.Host().qualify() passes the host's)"
        )


def _run_gates(
    run: GateRun, loaded: LoadedSuite, runners: dict[str, GateRunner]
) -> tuple[list[GateResult], tuple[CardFreeMemory, ...] | None]:
    """Each gate of the suite in :data:`GATE_ORDER`, then the VRAM gate on the free VRAM read after them."""
    from servectl.bench.qualify.gates import vram

    gates = loaded.suite.gates
    results = [
        runners[gate](run, spec) for gate in GATE_ORDER if gate != "vram" and (spec := getattr(gates, gate)) is not None
    ]
    cards, unread = read_free_vram(run.facts.free_vram)  # a failed read fails the gate, not the run
    if gates.vram is not None:
        results.append(vram.run(run, gates.vram, list(cards) if cards else None, unread=unread))
    return results, cards


def run_qualify(
    *,
    settings: QualifySettings,
    context: BenchContext | None = None,
    facts: ServiceFacts | None = None,
    progress: ProgressCallback | None = None,
    sandbox: CodeSandbox | None = None,
    http: HttpAdapter | None = None,
    environ: Mapping[str, str],
) -> QualifyReport:
    """Run every gate of ``settings.suite`` against the server and return the verdicts.

    Args:
        settings: Server, suite, key.
        context: Provenance of a managed profile (plan hash, pins), recorded in the evidence.
        facts: What the profile says (reasoning parser, context, VRAM reserve, GPU reader).
        progress: Called after each case.
        sandbox: Where the coding gate runs answers (a suite with a coding gate needs one: the host's
            ``Context.code_sandbox``, a :class:`~servectl.adapters.sandbox.DockerSandbox` on the stand-in image).
        http: The HTTP adapter of the routed gate's requests outside the SDK (the host's ``Context.http``);
            None: the standard one (:func:`servectl.service.context.standard_http`).
        environ: the host's environment (the clients gate's agent clients inherit from it).

    Raises:
        UsageError: ``settings`` name no server or no suite.
        BenchFailed: the server cannot be reached, refuses the key, or does not serve the model.
        ProfileError: a case or corpus file of the suite has problems (nothing is sent then).
    """
    facts = facts or ServiceFacts()
    loaded = settings.loaded_suite
    suite = loaded.suite
    runners = gate_runners(loaded, settings.route)
    _require_sandbox(loaded, sandbox)
    started = _now()
    client = QualifyClient(
        url=settings.url,
        model=settings.model or "",
        api_key=settings.api_key,
        timeout_s=suite.request_timeout_s,
        temperature=suite.temperature,
        extra_body=suite.extra_body,
    )
    from servectl.service.context import standard_http

    try:  # the run's HTTP client, for the routed gate's requests outside the SDK; closed with the SDK's
        with (http if http is not None else standard_http()).client(settings.url) as http_client:
            model, max_model_len = _discover(client, settings)
            client.model = model
            run = GateRun(
                client=client,
                facts=facts,
                run_id=secrets.token_hex(4),
                max_model_len=max_model_len,
                seed=settings.seed,
                environ=environ,
                progress=progress,
                code_sandbox=sandbox,
                http=http_client,
                route=settings.route,
            )
            results, cards = _run_gates(run, loaded, runners)
    finally:
        client.close()
    return QualifyReport(
        settings=settings,
        context=context,
        facts=facts,
        run_id=run.run_id,
        model=model,
        max_model_len=max_model_len,
        gates=tuple(results),
        overhead=ClientOverhead(requests=client.requests, wall_s=client.wall_s, client_cpu_s=client.client_cpu_s),
        started_at=started,
        finished_at=_now(),
        client_versions=_versions(),
        free_vram_after=cards,
    )
