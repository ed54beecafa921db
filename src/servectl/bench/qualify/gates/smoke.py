"""Smoke: a chat and a streaming chat answer; usage is present and agrees with the text.

Usage agrees when: prompt, completion and total tokens are reported and total = prompt + completion; the
streamed and the plain request of the same prompt report the same prompt tokens; a ``length`` finish reports
exactly ``max_tokens`` completion tokens; and the answer's characters per completion token lie within the
suite's bounds (a tokenizer-free sanity check: English runs about 4 characters per token).
"""

from __future__ import annotations

from servectl.bench.qualify.client import Exchange
from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import SmokeGate

GATE = "smoke"
PROMPT = "Say hello and name one colour, in one short sentence."


def usage_problem(exchange: Exchange, *, max_tokens: int, chars_per_token: tuple[float, float]) -> str | None:
    """Why the usage of an answered request is missing or inconsistent (None when it is fine)."""
    usage = exchange.usage
    if not usage or not all(k in usage for k in ("prompt_tokens", "completion_tokens", "total_tokens")):
        return f"usage missing or incomplete: {dict(usage or {})}"
    prompt, completion, total = usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]
    if prompt <= 0 or completion <= 0:
        return f"usage reports {prompt} prompt and {completion} completion tokens"
    if total != prompt + completion:
        return f"usage total_tokens {total} != prompt {prompt} + completion {completion}"
    if exchange.finish_reason == "length" and completion != max_tokens:
        return f"finish_reason length but usage.completion_tokens {completion} != max_tokens {max_tokens}"
    chars = len(exchange.content) + len(exchange.reasoning)
    low, high = chars_per_token
    ratio = chars / completion
    if not low <= ratio <= high:
        return (
            f"{chars} characters of text for {completion} completion tokens ({ratio:.2f} per token) "
            f"is outside [{low:g}, {high:g}]: usage does not match the text"
        )
    return None


def _case(name: str, exchange: Exchange, spec: SmokeGate) -> CaseResult:
    detail = {"usage": dict(exchange.usage or {}), "finish_reason": exchange.finish_reason, "chunks": exchange.chunks}
    if not exchange.ok:
        return CaseResult(f"smoke {name}", False, f"smoke {name}: {exchange.error}", exchange.latency_s, detail)
    if not (exchange.content.strip() or exchange.reasoning.strip()):
        return CaseResult(f"smoke {name}", False, f"smoke {name}: empty answer", exchange.latency_s, detail)
    problem = usage_problem(exchange, max_tokens=spec.max_tokens, chars_per_token=spec.chars_per_token)
    if problem:
        return CaseResult(f"smoke {name}", False, f"smoke {name}: {problem}", exchange.latency_s, detail)
    return CaseResult(f"smoke {name}", True, clip(exchange.content or exchange.reasoning), exchange.latency_s, detail)


def run(run: GateRun, spec: SmokeGate) -> GateResult:
    """A plain and a streamed chat of the same prompt; both answer with consistent usage."""
    messages = [{"role": "user", "content": PROMPT}]
    body = merged(spec.extra_body)
    plain = run.client.chat(messages, max_tokens=spec.max_tokens, extra_body=body)
    first = _case("chat", plain, spec)
    run.report(GATE, 1, 2, first)
    streamed = run.client.chat(messages, max_tokens=spec.max_tokens, stream=True, extra_body=body)
    second = _case("streaming chat", streamed, spec)
    if second.ok and plain.ok and plain.usage and streamed.usage:
        a, b = plain.usage.get("prompt_tokens"), streamed.usage.get("prompt_tokens")
        if a != b:
            second = CaseResult(
                second.case,
                False,
                f"smoke streaming chat: {b} prompt tokens streamed but {a} for the same prompt unstreamed",
                second.latency_s,
                second.detail,
            )
    if second.ok and streamed.ttft_s is None:
        second = CaseResult(second.case, False, "smoke streaming chat: no chunk carried text", second.latency_s)
    run.report(GATE, 2, 2, second)
    return GateResult.of(GATE, [first, second])
