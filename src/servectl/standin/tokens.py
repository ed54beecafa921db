"""Token arithmetic of the stand-in: a deterministic prompt-token count, generated text, and pacing.

Prompt tokens are counted without a real tokenizer, by a rule that tests can reproduce exactly:

* a text counts one token per match of the regular expression ``\\w+|[^\\w\\s]`` (a run of word characters,
  or one punctuation character);
* a chat prompt counts, for every message, the tokens of its content (the ``text`` of each text part when the
  content is a list of parts) plus :data:`MESSAGE_OVERHEAD_TOKENS` for the chat template around it.

Generated text is made of tokens that this same rule counts as one each (``" lorem"``, ``" ipsum"``, ...), so
``count_text_tokens(completion_text) == completion_tokens``.

Pacing: a decode of ``n`` tokens is sent in chunks of ``chunk`` tokens (the last one may be shorter). Chunk
``i`` is due at the absolute time ``t0 + (tokens_through_chunk_i - tokens_of_chunk_0) / rate``, i.e.
``t0 + i * chunk / rate`` for equal chunks. Deadlines are absolute so that sleep overshoot never accumulates:
the decode rate measured from the first to the last chunk is ``rate`` up to one sleep's jitter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")

#: Tokens the chat template adds around each message (role markers and separators).
MESSAGE_OVERHEAD_TOKENS = 4

_WORDS: tuple[str, ...] = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
    "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim",
    "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip",
)  # fmt: skip


def count_text_tokens(text: str) -> int:
    """Tokens in ``text`` under the stand-in's rule (``\\w+`` runs and single punctuation characters)."""
    return len(_TOKEN.findall(text))


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` of each part of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type", "text") == "text"
        ]
        return " ".join(texts)
    return str(content)


def count_chat_prompt_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens of a chat request: per message, its content's tokens plus the template overhead."""
    return sum(count_text_tokens(content_text(m.get("content"))) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def chat_prompt_keys(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tokens of a chat prompt as the prefix cache compares them (one key per counted token): per message
    its role, its content's tokens and the rest of the template's overhead, so that two prompts share a prefix
    exactly as far as their messages and text do."""
    keys: list[str] = []
    for m in messages:
        text = _TOKEN.findall(content_text(m.get("content")))
        keys += [f"<|{m.get('role')}|>", "<|content|>", *text, "<|end|>", "\n"]
    return keys


def generated_token(index: int) -> str:
    """The text of the ``index``-th generated token (0-based); each is one token under the counting rule."""
    return " " + _WORDS[index % len(_WORDS)]


def generated_text(start: int, count: int) -> str:
    """The text of ``count`` generated tokens starting at token ``start``."""
    return "".join(generated_token(i) for i in range(start, start + count))


def chunk_sizes(total_tokens: int, chunk_tokens: int) -> list[int]:
    """Split ``total_tokens`` into chunks of ``chunk_tokens`` (the last one holds the rest)."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be >= 1")
    sizes = [chunk_tokens] * (total_tokens // chunk_tokens)
    if total_tokens % chunk_tokens:
        sizes.append(total_tokens % chunk_tokens)
    return sizes


def chunk_deadlines(start_s: float, sizes: Sequence[int], rate_per_s: float) -> list[float]:
    """Absolute send times of each chunk: the first at ``start_s``, then paced at ``rate_per_s`` tokens/s.

    The deadline of chunk ``i`` is ``start_s + (sum(sizes[:i + 1]) - sizes[0]) / rate_per_s``, so the rate
    measured between the first and the last chunk is exactly ``rate_per_s``.
    """
    if rate_per_s <= 0:
        raise ValueError("rate_per_s must be > 0")
    deadlines: list[float] = []
    emitted = 0
    for size in sizes:
        emitted += size
        deadlines.append(start_s + (emitted - sizes[0]) / rate_per_s)
    return deadlines


def verify_count(completion_tokens: int, accept_length: float) -> int:
    """Speculative verify steps (``spec_verify_ct``) for ``completion_tokens``: tokens / accept length, up."""
    if completion_tokens <= 0:
        return 0
    return max(1, math.ceil(completion_tokens / accept_length))
