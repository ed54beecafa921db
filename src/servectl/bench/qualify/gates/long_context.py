"""Long context: a needle ("The secret code is K7Q-2931.") in a word-salad prompt, retrieved at target lengths.

Prompts are calibrated as ``servectl bench`` calibrates them (:mod:`servectl.bench.prompts`: two
``max_tokens=1`` probes fit tokens per word, then a correction from the measured ``usage.prompt_tokens``), and
each case records the target and the actual prompt tokens. A case passes when the prompt is within the bench's
tolerance of its target and the answer names the code. Targets are the suite's list plus the context length
minus the headroom; targets beyond that ceiling are skipped (and listed in the gate's note).
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from typing import Any

from servectl.bench.model import Calibration, prompt_tolerance_tokens
from servectl.bench.prompts import build_prompt, corrected_words, fit_calibration, probe_word_counts
from servectl.bench.qualify.gates.common import GateRun, clip, merged
from servectl.bench.qualify.model import CaseResult, GateResult
from servectl.bench.qualify.suite import LongContextGate

GATE = "long_context"
QUESTION = "What is the secret code in the text above? Answer with the code only."


def targets_for(spec: LongContextGate, context_tokens: int | None) -> tuple[list[int], list[int]]:
    """``(targets to run, targets skipped)``: the suite's targets up to the ceiling, plus the ceiling itself."""
    if context_tokens is None:
        return sorted(set(spec.targets)), []
    ceiling = context_tokens - (spec.context_headroom_tokens or 0) - spec.max_tokens
    run = {t for t in spec.targets if t <= ceiling}
    if spec.context_headroom_tokens is not None and ceiling > 0:
        run.add(ceiling)
    return sorted(run), sorted(t for t in set(spec.targets) if t > ceiling)


def needle_prompt(*, rng: random.Random, words: int, run_id: str, number: int, code: str, depth: float) -> str:
    """A calibrated word salad with the needle sentence at ``depth`` (0 = start, 1 = end), then the question."""
    parts = build_prompt(rng=rng, words=words, run_id=run_id, request_number=number, shared_prefix=False).split(" ")
    at = 1 + round(depth * (len(parts) - 1))
    parts.insert(at, f"The secret code is {code}.")
    return " ".join(parts) + "\n\n" + QUESTION


def _code(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(3))
    return f"{letters}-{rng.randrange(1000, 10000)}"


class _Needles:
    def __init__(self, run: GateRun, spec: LongContextGate, body: Mapping[str, Any]) -> None:
        self.run, self.spec, self.body = run, spec, body
        self.rng = random.Random(run.seed)
        self.number = 0

    def send(self, words: int, *, code: str, max_tokens: int) -> tuple[Any, int]:
        self.number += 1
        prompt = needle_prompt(
            rng=self.rng, words=words, run_id=self.run.run_id, number=self.number, code=code, depth=self.spec.depth
        )
        exchange = self.run.client.chat(
            [{"role": "user", "content": prompt}], max_tokens=max_tokens, extra_body=self.body
        )
        actual = (exchange.usage or {}).get("prompt_tokens", 0) if exchange.ok else 0
        return exchange, actual

    def calibrate(self, smallest_target: int) -> Calibration | str:
        sizes = probe_word_counts(smallest_target_tokens=smallest_target, max_model_len=self.run.max_model_len)
        measured = []
        for words in sizes:
            exchange, actual = self.send(words, code=_code(self.rng), max_tokens=1)
            if not exchange.ok or not actual:
                return f"calibration probe of {words} words: {exchange.error or 'no usage.prompt_tokens'}"
            measured.append(actual)
        try:
            return fit_calibration(words=list(sizes), prompt_tokens=measured)
        except ValueError as err:
            return f"calibration: {err}"

    def case(self, target: int, calibration: Calibration) -> CaseResult:
        name = f"needle {target:,} tokens"
        tolerance = prompt_tolerance_tokens(target)
        words = calibration.words_for(target)
        code = _code(self.rng)
        for attempt in (1, 2):
            exchange, actual = self.send(words, code=code, max_tokens=self.spec.max_tokens)
            if not exchange.ok:
                return CaseResult(name, False, f"{name}: {exchange.error}", exchange.latency_s, {"target": target})
            if abs(actual - target) <= tolerance or attempt == 2:
                break
            words = corrected_words(
                words=words, target_tokens=target, actual_tokens=actual, tokens_per_word=calibration.tokens_per_word
            )
        detail = {
            "prompt_tokens_target": target,
            "prompt_tokens_actual": actual,
            "prompt_tokens_tolerance": tolerance,
            "words": words,
            "code": code,
            "answer": clip(exchange.content),
        }
        if abs(actual - target) > tolerance:
            message = f"{name}: prompt was {actual:,} tokens, outside {target:,} ± {tolerance:,}"
            return CaseResult(name, False, message, exchange.latency_s, detail)
        if code not in exchange.content:
            message = (
                f"{name} ({actual:,} actual): answer does not name the code {code}: {clip(exchange.content, 60)!r}"
            )
            return CaseResult(name, False, message, exchange.latency_s, detail)
        return CaseResult(name, True, f"{actual:,} actual tokens", exchange.latency_s, detail)


def run(run: GateRun, spec: LongContextGate) -> GateResult:
    """Calibrate, then one needle case per target."""
    context = run.facts.context_length or run.max_model_len
    targets, skipped = targets_for(spec, context)
    note = (
        f"targets above context {context:,} - headroom skipped: {', '.join(f'{t:,}' for t in skipped)}"
        if skipped
        else ""
    )
    if not targets:
        return GateResult(GATE, "skipped", note=note or "no target fits the context")
    needles = _Needles(run, spec, merged(spec.extra_body))
    calibration = needles.calibrate(min(targets))
    if isinstance(calibration, str):
        return GateResult(GATE, "fail", (CaseResult("needle calibration", False, f"needle {calibration}"),), note=note)
    cases = []
    for index, target in enumerate(targets):
        result = needles.case(target, calibration)
        cases.append(result)
        run.report(GATE, index + 1, len(targets), result)
    gate = GateResult.of(GATE, cases, note=note)
    return GateResult(gate.gate, gate.verdict, gate.cases, note, {"calibration": calibration.__dict__})
