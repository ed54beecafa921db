"""Unique prompts of a calibrated length.

Each prompt starts with a nonce (the run id and the request number), so no two prompts share a prefix beyond
the chat template and no request hits the server's prefix cache; with ``shared_prefix`` (a warm-prefix
point) the nonce comes last and every prompt's salad is the same, so all but the tail is a cache hit. The
body is a word salad drawn from a seeded RNG in whole shuffled passes over a fixed vocabulary: every pass
holds each word once, so the token count per word is nearly the same for every prompt and a linear fit
predicts it well.

Calibration: two ``max_tokens=1`` probes of different sizes give ``tokens = overhead + ratio * words``
(:func:`fit_calibration`); after each batch at a target the word count is corrected with the measured
``usage.prompt_tokens`` (:func:`corrected_words`). The tolerance is
:func:`servectl.bench.model.prompt_tolerance_tokens`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from servectl.bench.model import Calibration

# Common English words; most are one token (with their leading space) for BPE tokenizers.
VOCABULARY: tuple[str, ...] = tuple(
    """
    time year people way day man thing woman life child world school state family student group country
    problem hand part place case week company system program question work government number night point
    home water room mother area money story fact month lot right study book eye job word business issue
    side kind head house service friend father power hour game line end member law car city community name
    president team minute idea kid body information back parent face others level office door health
    person art war history party result change morning reason research girl guy moment air teacher force
    education foot boy age policy music market sense nation plan college interest death experience effect
    class control care field development role effort rate heart drug show leader light voice wife police
    mind price report decision son view relationship town road arm difference value building action model
    season society tax director position player record paper space ground form event official matter
    center couple site project activity star table need court oil situation cost industry figure street
    image phone data picture practice piece land product doctor wall patient worker news test movie north
    love support technology step baby computer type attention film tree source organization hair window
    evidence population truth song river garden stone bridge cloud winter summer autumn spring island
    mountain forest valley ocean desert village castle engine signal battery copper silver orange purple
    """.split()  # noqa: SIM905  # a block of words reads better than 232 quoted strings
)

_NONCE_PREFIX = "Request"


def nonce(*, run_id: str, request_number: int) -> str:
    """The unique opening of one prompt."""
    return f"{_NONCE_PREFIX} {run_id}-{request_number:05d}:"


def build_prompt(*, rng: random.Random, words: int, run_id: str, request_number: int, shared_prefix: bool) -> str:
    """A prompt of ``words`` salad words after the request's nonce (``shared_prefix``: before it).

    Args:
        rng: The run's seeded RNG (advanced by this call); with ``shared_prefix`` a fresh one of the run's
            seed, so that every prompt's salad is the same (a longer one continues a shorter one).
        words: How many salad words.
        run_id: The run's random id; keeps prompts unique across runs with the same seed.
        request_number: Counts the run's requests; keeps prompts unique within the run.
        shared_prefix: Put the nonce last: the prompts share everything before it (a warm prefix).
    """
    parts: list[str] = [] if shared_prefix else [nonce(run_id=run_id, request_number=request_number)]
    vocabulary = list(VOCABULARY)
    remaining = words
    while remaining > 0:
        rng.shuffle(vocabulary)
        take = min(remaining, len(vocabulary))
        parts.extend(vocabulary[:take])
        remaining -= take
    if shared_prefix:
        parts.append(nonce(run_id=run_id, request_number=request_number))
    return " ".join(parts)


def probe_word_counts(*, smallest_target_tokens: int, max_model_len: int | None) -> tuple[int, int]:
    """Sizes of the two calibration probes: small, and as large as is cheap and fits the context."""
    large = min(4096, max(128, smallest_target_tokens // 2))
    if max_model_len is not None:
        large = min(large, max(128, max_model_len // 4))
    return 64, large


def fit_calibration(*, words: Sequence[int], prompt_tokens: Sequence[int]) -> Calibration:
    """Fit ``tokens = overhead + ratio * words`` through two (or more) probes (least squares).

    Raises:
        ValueError: Fewer than two distinct word counts, or a non-positive ratio (the server's counts
            do not grow with the prompt).
    """
    if len(words) != len(prompt_tokens) or len(set(words)) < 2:
        raise ValueError("calibration needs at least two probes of different sizes")
    n = len(words)
    mean_w = sum(words) / n
    mean_t = sum(prompt_tokens) / n
    cov = sum((w - mean_w) * (t - mean_t) for w, t in zip(words, prompt_tokens, strict=True))
    var = sum((w - mean_w) ** 2 for w in words)
    ratio = cov / var
    if ratio <= 0:
        raise ValueError(
            f"prompt tokens do not grow with prompt words (probes {list(words)} words -> {list(prompt_tokens)} tokens)"
        )
    return Calibration(
        probe_words=tuple(words),
        probe_prompt_tokens=tuple(prompt_tokens),
        tokens_per_word=ratio,
        overhead_tokens=mean_t - ratio * mean_w,
    )


def corrected_words(*, words: int, target_tokens: int, actual_tokens: float, tokens_per_word: float) -> int:
    """The word count that moves a prompt measured at ``actual_tokens`` onto ``target_tokens``."""
    return max(1, round(words + (target_tokens - actual_tokens) / tokens_per_word))
