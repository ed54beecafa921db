"""What a benchmark asks for: :class:`BenchSettings`, the one home of every bench default, and the key it sends.

Kept apart from the measurements (:mod:`servectl.bench.model`) so that ``servectl bench --help`` reads its
options' defaults off these fields without loading the rest of the bench.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servectl.errors import UsageError

#: Prompt-length targets of the qualification run (tokens): 4K, 64K, 128K and the 304,491 of the seed.
DEFAULT_PROMPT_TOKENS: tuple[int, ...] = (4096, 65536, 131072, 304491)


class ApiKey:
    """An API key value that never shows in a repr, a log line or an artifact (``***``)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The key itself, for the ``Authorization`` header only."""
        return self._value

    def __repr__(self) -> str:
        return "ApiKey('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


@dataclass(frozen=True)
class BenchSettings:
    """What to measure and how to ask for it: the one home of every bench default.

    ``servectl bench`` builds one from its options (each option's default is the field's) and passes it whole
    through :meth:`servectl.Host.bench` to :func:`~servectl.bench.profile_run.run_profile_bench`, which fills
    in what the profile's service tells (URL, model, key) and hands it to the runner.

    Attributes:
        url: Base URL of the OpenAI-compatible server (``http://host:8180``; a trailing ``/v1`` is dropped);
            empty: the profile's running service (a run needs one or the other).
        model: Served model name; ``None`` takes the only model that ``/v1/models`` lists.
        api_key: The key value (never recorded); ``None`` sends no ``Authorization`` header.
        api_key_env: Name of the environment variable the key came from; recorded in artifacts.
        prompt_tokens: Prompt-length targets in tokens; prompts are calibrated to reach them.
        repeats: Measured rounds per (prompt length, concurrency).
        concurrency: Concurrency levels; level N runs N simultaneous streams per round.
        max_tokens: Completion tokens asked for each measured request (at least 2, for a decode window).
        fixed_length: Send ``ignore_eos`` and ``min_tokens`` so that every request produces ``max_tokens``.
        warmup: Send one unmeasured request at each prompt length first.
        timeout_s: Read timeout per request (covers the prefill of the longest prompt).
        seed: Seed of the word salad; a per-run nonce still keeps prompts unique across runs.
        shared_prefix: Every prompt of the run gets the same salad and its nonce at the end, so that all but
            the tail of a prompt is in the server's prefix cache once one was sent (a warm-prefix point; the
            warm-up request fills the cache). Default: the nonce first, no prefix shared (cold).
        temperature: Sampling temperature to send; ``None`` leaves the server's default.
        extra_body: Further request fields sent as they are (e.g. ``chat_template_kwargs``); recorded.
    """

    url: str = ""
    model: str | None = None
    api_key: ApiKey | None = field(default=None, repr=False, compare=False)
    api_key_env: str | None = None
    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT_TOKENS
    repeats: int = 3
    concurrency: tuple[int, ...] = (1,)
    max_tokens: int = 512
    fixed_length: bool = True
    warmup: bool = True
    timeout_s: float = 900.0
    seed: int = 0
    shared_prefix: bool = False
    temperature: float | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", _base_url(self.url))
        object.__setattr__(self, "prompt_tokens", tuple(self.prompt_tokens))
        object.__setattr__(self, "concurrency", tuple(self.concurrency))
        if self.url and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"bench url: {self.url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8180")
        if not self.prompt_tokens or any(t < 1 for t in self.prompt_tokens):
            raise UsageError("bench prompt_tokens: give one or more positive token counts, e.g. 4096,65536")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise UsageError("bench concurrency: give one or more levels >= 1, e.g. 1,2,4")
        if self.repeats < 1:
            raise UsageError(f"bench repeats: {self.repeats} is below 1; use 3 for a p50 of three")
        if self.max_tokens < 2:
            raise UsageError(f"bench max_tokens: {self.max_tokens} leaves no decode window; use at least 2")
        if self.timeout_s <= 0:
            raise UsageError(f"bench timeout_s: {self.timeout_s} must be positive")
        reserved = {"model", "messages", "stream", "stream_options", "max_tokens"} & set(self.extra_body)
        if reserved:
            raise UsageError(f"bench extra_body: {sorted(reserved)} are set by the bench itself; remove them")
