"""Reasoning contracts, with the profile's reasoning parser.

Thinking on (the suite's ``thinking_on`` request fields, e.g. ``chat_template_kwargs: {enable_thinking:
true}`` for GLM and Qwen templates): ``reasoning_content`` holds the thinking and ``content`` holds the answer
without think tags. Thinking off: no ``reasoning_content`` and no think tags in ``content``. SGLang returns
the split as ``message.reasoning_content`` (``delta.reasoning_content`` when streaming) when it runs with
``--reasoning-parser`` (sglang/srt/entrypoints/openai/serving_chat.py, ``_process_reasoning_stream``).
A profile without a reasoning parser skips the gate.
"""

from __future__ import annotations

import re

from servectl.bench.qualify.client import Exchange
from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import ReasoningGate

GATE = "reasoning"
PROMPT = "What is 17 * 24? Answer with the number only."
THINK_TAG = re.compile(r"</?think>|◁/?think▷")


def contract_problem(exchange: Exchange, *, thinking: bool) -> str | None:
    """Why an answer breaks the thinking-on (or -off) contract; None when it keeps it."""
    tag = THINK_TAG.search(exchange.content)
    if tag:
        return f"think tag {tag.group(0)!r} in content: {clip(exchange.content, 60)!r}"
    if thinking:
        if not exchange.reasoning.strip():
            return "thinking on but no reasoning_content"
        if not exchange.content.strip():
            cut = " (finish_reason length: raise max_tokens)" if exchange.finish_reason == "length" else ""
            return f"thinking on but no content after the reasoning{cut}"
        return None
    if exchange.reasoning.strip():
        return f"thinking off but reasoning_content is {clip(exchange.reasoning, 60)!r}"
    if not exchange.content.strip():
        return "thinking off but no content"
    return None


def run(run: GateRun, spec: ReasoningGate) -> GateResult:
    """Thinking on and off, plain and (with ``streaming``) streamed."""
    if run.facts.known and not run.facts.reasoning_parser:
        return GateResult(GATE, "skipped", note="the profile sets no reasoning-parser (engine.args.reasoning-parser)")
    modes = [("on", True, spec.thinking_on), ("off", False, spec.thinking_off)]
    jobs = [(mode, thinking, fields, stream) for mode, thinking, fields in modes for stream in (False, True)]
    jobs = [job for job in jobs if spec.streaming or not job[3]]
    messages = [{"role": "user", "content": PROMPT}]
    cases = []
    for index, (mode, thinking, fields, stream) in enumerate(jobs):
        name = f"reasoning thinking {mode}{' streaming' if stream else ''}"
        exchange = run.client.chat(
            messages, max_tokens=spec.max_tokens, stream=stream, extra_body=merged(spec.extra_body, fields)
        )
        if not exchange.ok:
            result = CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s)
        else:
            problem = contract_problem(exchange, thinking=thinking)
            detail = {"reasoning_chars": len(exchange.reasoning), "content": clip(exchange.content)}
            result = CaseResult(
                name, problem is None, f"{name}: {problem}" if problem else "", exchange.latency_s, detail
            )
        cases.append(result)
        run.report(GATE, index + 1, len(jobs), result)
    return GateResult.of(GATE, cases)
