"""The trust check of a warm standby: a fingerprint of fixed prompts, taken once, compared after every resume.

Weights that come back from the CPU copy can come back wrong after a few release/resume cycles while every
request still answers 200 (torch_memory_saver issue 71). One greedy answer compared with the answer before the
last release misses a slow drift and a corruption that shows on other prompts. So the first time servectl
releases a container it asks :data:`PROMPTS` greedily (``temperature 0``, :data:`MAX_TOKENS` tokens, with
``logprobs`` where the engine returns them) and keeps that fingerprint for the container's life; after each
resume it asks again and :func:`difference` must find nothing: the same tokens for every prompt, and every
logprob within :data:`LOGPROB_TOLERANCE` of the first. A restore that copies the bytes back exactly gives the
same logits, so the tolerance only absorbs kernel nondeterminism between batches; a flipped weight moves
tokens or logprobs far beyond it.

Pure: the requests go through the engine client of :mod:`servectl.service.standby`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Fixed prompts (different lengths and continuations, so a damaged layer shows on at least one).
PROMPTS = (
    "Reply with one word.",
    "Count from one to ten in words, separated by commas.",
    "Complete the sentence: The capital of France is",
)
MAX_TOKENS = 8
#: How far a logprob after a resume may be from the first (nats). Bit-exact restores differ by 0.
LOGPROB_TOLERANCE = 0.05


@dataclass(frozen=True)
class Sample:
    """One prompt's greedy answer: its tokens, and their logprobs when the engine returned them."""

    prompt: str
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "tokens": list(self.tokens), "logprobs": _list(self.logprobs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        raw = data.get("logprobs")
        return cls(
            prompt=str(data["prompt"]),
            tokens=tuple(str(t) for t in data["tokens"]),
            logprobs=None if raw is None else tuple(float(x) for x in raw),
        )


@dataclass(frozen=True)
class Fingerprint:
    """The samples of :data:`PROMPTS`, in order."""

    samples: tuple[Sample, ...]

    def to_list(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.samples]

    @classmethod
    def from_list(cls, data: Sequence[Mapping[str, Any]]) -> Fingerprint:
        return cls(tuple(Sample.from_dict(d) for d in data))


def _list(values: tuple[float, ...] | None) -> list[float] | None:
    return None if values is None else list(values)


def request_body(prompt: str) -> dict[str, Any]:
    """The chat request of one fingerprint prompt (greedy, logprobs asked for)."""
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 0,
    }


def sample_of(prompt: str, answer: Mapping[str, Any]) -> Sample:
    """The sample in an OpenAI chat completion: per-token entries of ``logprobs.content`` when present, else
    the message text as one token.

    Raises:
        KeyError, IndexError, TypeError, ValueError: not a chat completion.
    """
    choice = answer["choices"][0]
    content = (choice.get("logprobs") or {}).get("content")
    if content:
        return Sample(prompt, tuple(str(t["token"]) for t in content), tuple(float(t["logprob"]) for t in content))
    return Sample(prompt, (str(choice["message"]["content"] or ""),))


def difference(reference: Fingerprint, now: Fingerprint, tolerance: float = LOGPROB_TOLERANCE) -> str | None:
    """Where ``now`` departs from ``reference`` (one line), or None when it does not."""
    if [s.prompt for s in reference.samples] != [s.prompt for s in now.samples]:
        return "the fingerprint prompts changed"
    for number, (before, after) in enumerate(zip(reference.samples, now.samples, strict=True), start=1):
        if before.tokens != after.tokens:
            at = next((i for i, (a, b) in enumerate(zip(before.tokens, after.tokens, strict=False)) if a != b), None)
            if at is None:
                at = min(len(before.tokens), len(after.tokens))
            return f"prompt {number}: token {at} is {_token(after.tokens, at)} where it was {_token(before.tokens, at)}"
        if before.logprobs is not None and after.logprobs is not None:
            for i, (a, b) in enumerate(zip(before.logprobs, after.logprobs, strict=True)):  # same tokens: same length
                if abs(a - b) > tolerance:
                    return (
                        f"prompt {number}: token {i}'s logprob is {b:.4f} where it was {a:.4f} "
                        f"(tolerance {tolerance:g})"
                    )
    return None


def _token(tokens: tuple[str, ...], at: int) -> str:
    return repr(tokens[at][:40]) if at < len(tokens) else "missing"


__all__ = [
    "LOGPROB_TOLERANCE",
    "MAX_TOKENS",
    "PROMPTS",
    "Fingerprint",
    "Sample",
    "difference",
    "request_body",
    "sample_of",
]
