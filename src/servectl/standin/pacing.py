"""How long a completion is and when its tokens leave: the generation plan, paced chunks and ``usage``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from servectl.standin.state import EngineState, RequestError
from servectl.standin.tokens import chunk_deadlines, chunk_sizes, verify_count

#: Completion length when a request sets no ``max_tokens`` (the simulated model then stops at EOS).
NATURAL_COMPLETION_TOKENS = 16


@dataclass(frozen=True)
class GenerationPlan:
    """How many tokens a request gets and how it ends."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "length" or "stop"
    cut_after_tokens: int | None  # STANDIN_DIE_AFTER_TOKENS: drop the connection after this many
    cached_tokens: int = 0  # the prompt's leading tokens the prefix cache held (no prefill for them)


def plan_generation(
    state: EngineState,
    *,
    prompt_tokens: int,
    max_tokens: int | None,
    min_tokens: int,
    ignore_eos: bool,
) -> GenerationPlan:
    """Decide the completion length for one request, or refuse it like SGLang.

    ``max_tokens`` set: exactly that many (finish ``length``). Unset: :data:`NATURAL_COMPLETION_TOKENS` (at
    least ``min_tokens``; finish ``stop``), or the rest of the context with ``ignore_eos``.
    ``STANDIN_COMPLETION_SHORTFALL`` then removes tokens (finish ``stop``).

    Raises:
        RequestError: the prompt, or prompt plus ``max_tokens``, does not fit the context length.
    """
    context = state.context_length
    if prompt_tokens >= context:
        raise RequestError(
            400,
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context} tokens).",
        )
    if max_tokens is not None:
        if prompt_tokens + max_tokens > context:
            total = prompt_tokens + max_tokens
            raise RequestError(
                400,
                f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                f"You requested a total of {total} tokens: {prompt_tokens} tokens from the input messages "
                f"and {max_tokens} tokens for the completion. Please reduce the number of tokens in the "
                "input messages or the completion to fit within the limit.",
            )
        count, finish = max_tokens, "length"
    elif ignore_eos:
        count, finish = context - prompt_tokens, "length"
    else:
        count, finish = min(max(NATURAL_COMPLETION_TOKENS, min_tokens), context - prompt_tokens), "stop"
    shortfall = state.settings.completion_shortfall_tokens
    if shortfall:
        count, finish = max(0, count - shortfall), "stop"
    return GenerationPlan(prompt_tokens, count, finish, state.settings.die_after_tokens)


class ConnectionCut(Exception):
    """``STANDIN_DIE_AFTER_TOKENS`` was reached: drop the connection without finishing the response."""


def paced_chunks(state: EngineState, plan: GenerationPlan) -> Iterator[tuple[int, int]]:
    """Yield ``(first_token_index, token_count)`` per chunk, each at its absolute deadline.

    Sleeps for the prefill of the tokens the prefix cache did not hold first (``STANDIN_PREFILL_RATE``;
    ``plan.cached_tokens``), then paces chunks of ``STANDIN_CHUNK_TOKENS`` at ``STANDIN_TOKEN_RATE``, or the
    ``STANDIN_TAPER`` rate at this prompt length, or the ``STANDIN_BATCH_RATES`` rate at the requests running as
    each chunk is paced, times this request's ``STANDIN_RATE_NOISE`` factor (see
    :func:`servectl.standin.tokens.chunk_deadlines`). Logs SGLang's prefill and
    decode batch lines. Raises :class:`ConnectionCut` once ``cut_after_tokens`` tokens have been yielded.
    """
    settings = state.settings
    start = time.perf_counter()
    new_tokens = plan.prompt_tokens - plan.cached_tokens
    if settings.prefill_rate_per_s > 0:
        _sleep_until(start + new_tokens / settings.prefill_rate_per_s)
    running = state.running_requests
    usage = plan.prompt_tokens / max(1, state.kv_tokens)
    state.log.tp(
        f"Prefill batch, #new-seq: 1, #new-token: {new_tokens}, #cached-token: {plan.cached_tokens}, "
        f"token usage: {usage:.2f}, #running-req: {running - 1}, #queue-req: 0, #pending-token: 0, "
    )
    sizes = chunk_sizes(plan.completion_tokens, settings.chunk_tokens)
    cut = plan.cut_after_tokens
    if cut is not None and cut < plan.completion_tokens:
        sizes = chunk_sizes(cut, settings.chunk_tokens)
    factor = state.rate_factor()  # STANDIN_RATE_NOISE: this request's own speed
    # STANDIN_TAPER: slower (or faster) with long prompts; STANDIN_BATCH_RATES: with more requests running
    rate = settings.decode_rate_for(plan.prompt_tokens, running) * factor
    deadlines = chunk_deadlines(time.perf_counter(), sizes, rate)
    interval = max(1, int(state.args.get("decode_log_interval") or 40))
    emitted = 0
    due = deadlines[0] if deadlines else 0.0
    for index, (size, deadline) in enumerate(zip(sizes, deadlines, strict=True)):
        if settings.batch_rates and index:  # the rate follows the requests running now, chunk by chunk
            rate = settings.decode_rate_for(plan.prompt_tokens, state.running_requests) * factor
            due += size / rate
            deadline = due
        _sleep_until(deadline)
        yield emitted, size
        emitted += size
        if (index + 1) % interval == 0:
            _log_decode_batch(state, plan.prompt_tokens + emitted, rate)
    if cut is not None and cut < plan.completion_tokens:
        raise ConnectionCut()


def _log_decode_batch(state: EngineState, tokens_in_use: int, rate: float) -> None:
    settings = state.settings
    accept = f"accept len: {settings.effective_accept_length:.2f}, " if settings.reports_accept_length else ""
    state.log.tp(
        f"Decode batch, #running-req: {state.running_requests}, #token: {tokens_in_use}, "
        f"token usage: {tokens_in_use / max(1, state.kv_tokens):.2f}, {accept}cuda graph: True, "
        f"gen throughput (token/s): {rate:.2f}, #queue-req: 0, "
    )


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def usage_body(state: EngineState, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The ``usage`` object; with speculative figures when chunks are larger than one token.

    Speculative figures: ``completion_tokens_details`` (accepted/rejected draft tokens, as SGLang reports
    them) plus the extra fields ``spec_accept_length`` and ``spec_verify_ct`` (as in SGLang's ``meta_info``).
    """
    reported = completion_tokens + state.settings.usage_skew_tokens  # STANDIN_USAGE_SKEW misreports on purpose
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + reported,
        "completion_tokens": reported,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    spec = spec_figures(state, completion_tokens)
    if spec:
        accepted = completion_tokens - spec["spec_verify_ct"]
        drafts = int(state.args.get("speculative_num_draft_tokens") or 0) or max(
            state.settings.chunk_tokens, round(spec["spec_accept_length"] + 0.4999)
        )
        usage["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": max(0, spec["spec_verify_ct"] * (drafts - 1) - accepted),
        }
        usage.update(spec)
    return usage


def spec_figures(state: EngineState, completion_tokens: int) -> dict[str, Any]:
    """``spec_accept_length``/``spec_verify_ct`` as in SGLang's ``meta_info``; empty without speculation."""
    if not state.settings.reports_accept_length:
        return {}
    accept = state.settings.effective_accept_length
    return {"spec_accept_length": accept, "spec_verify_ct": verify_count(completion_tokens, accept)}


__all__ = [
    "NATURAL_COMPLETION_TOKENS",
    "ConnectionCut",
    "GenerationPlan",
    "paced_chunks",
    "plan_generation",
    "spec_figures",
    "usage_body",
]
