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
