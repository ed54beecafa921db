"""The engine image's own verdict on the plan's argv (``engine.parse``)."""

from __future__ import annotations

from servectl.preflight.checks.base import make_result
from servectl.preflight.facts import ENGINE_PARSE, STANDIN_LABEL, Facts
from servectl.preflight.model import CheckResult, PreflightRequest


def check_engine_parse(request: PreflightRequest, facts: Facts) -> CheckResult:
    """The image's own SGLang parses the argv (and resolves it as far as it can without a GPU)."""
    local = facts.image or facts.image_by_digest
    if request.image_built_here or (local is not None and STANDIN_LABEL in local.labels):
        problem = _standin_settings_problem(request.standin_env)
        if problem is not None:  # the stand-in would exit at once with this line in its log
            return make_result(
                ENGINE_PARSE, "fail", f"the stand-in refuses engine.env: {problem}", "fix that value in engine.env"
            )
        return make_result(
            ENGINE_PARSE, "skipped", "the stand-in image parses with servectl's own catalog", reason="stand-in image"
        )
    if facts.engine is None:
        return make_result(ENGINE_PARSE, "unknown", "Docker unreachable, see docker.engine")
    if facts.image is None and facts.image_by_digest is None:
        return make_result(
            ENGINE_PARSE, "skipped", f"image {request.image_ref} is not on this host; checked by the flag catalog only"
        )
    if facts.engine_parse_error is not None:
        return make_result(
            ENGINE_PARSE,
            "warn",
            f"could not ask the image: {facts.engine_parse_error}",
            "set image.entrypoint to the image's Python, or --force engine.parse",
        )
    verdict = facts.engine_parse
    if verdict is None:
        return make_result(ENGINE_PARSE, "skipped", "not run by this command")
    out = {
        "image": verdict.image,
        "sglang_version": verdict.sglang_version,
        "python": verdict.python,
        "seconds": round(verdict.seconds, 2),
        "resolved": verdict.resolved,
        "resolve_error": verdict.resolve_error,
    }
    where = f"SGLang {verdict.sglang_version} in {verdict.image}"
    if not verdict.parsed:
        return make_result(
            ENGINE_PARSE,
            "fail",
            f"{where} rejects the argv: {verdict.error}",
            "fix that setting in the profile (servectl validate NAME --in-image), or --force engine.parse",
            error=verdict.error,
            **out,
        )
    if verdict.memory_saver_error is not None:
        return make_result(
            ENGINE_PARSE,
            "fail",
            f"{where} cannot import torch_memory_saver, which --enable-memory-saver (swap.standby: warm) needs: "
            f"{verdict.memory_saver_error}; SGLang raises that at start (sglang/srt/utils/"
            "torch_memory_saver_adapter.py TorchMemorySaverAdapter.create)",
            "install torch-memory-saver in the image (pip3 install torch-memory-saver), or set swap.standby: none",
            memory_saver_error=verdict.memory_saver_error,
            **out,
        )
    if verdict.resolved:
        return make_result(
            ENGINE_PARSE, "pass", f"{where} parsed and resolved the argv ({verdict.seconds:.1f} s)", **out
        )
    return make_result(
        ENGINE_PARSE,
        "pass",
        f"{where} parsed the argv ({verdict.seconds:.1f} s); its resolution needs the GPU or model: "
        f"{verdict.resolve_error}",
        **out,
    )


def _standin_settings_problem(env: tuple[tuple[str, str], ...]) -> str | None:
    """What the stand-in's strict ``STANDIN_*`` reader says about ``env`` (None: it starts)."""
    from servectl.standin.settings import SettingsError, StandinSettings

    try:
        StandinSettings.from_environ(dict(env))
    except SettingsError as err:
        return str(err)
    return None


def check_image_standby_env(request: PreflightRequest, facts: Facts) -> CheckResult:
    """A warm profile's image sets none of the variables its memory saver refuses or a release/resume kills
    (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` with the breakable
    graph backend, ``NCCL_GRAPH_REGISTER`` with tp > 1), unless the profile's ``engine.env`` overrides it: the
    image decides those defaults, rule ``swap.standby_engine`` sees only the profile's."""
    from servectl.profile.standby_rules import standby_env_problems

    check = "image.standby_env"
    if not request.standby_warm:
        return make_result(check, "pass", "no warm standby (swap.standby: none)")
    image = facts.image or facts.image_by_digest
    if image is None:
        return make_result(check, "unknown", "the image is not on this host: its environment cannot be read")
    env = {k: v for k, v in image.env.items() if k not in request.engine_env_names}
    problems = list(standby_env_problems(env, tp=request.tp, breakable=request.standby_breakable_graph))
    out = {
        "image_env": {k: env[k] for k, _ in problems},
        "overridden": sorted(request.engine_env_names & set(image.env)),
    }
    if problems:
        text = "; ".join(f"the image sets {k}={env[k]}: {why}" for k, why in problems)
        names = ", ".join(k for k, _ in problems)
        return make_result(
            check,
            "fail",
            text,
            f"override {names} in the profile's engine.env (its value wins over the image's), or swap.standby: none",
            **out,
        )
    return make_result(check, "pass", "the image sets nothing a warm standby's memory saver refuses", **out)
