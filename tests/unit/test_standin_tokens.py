"""Prompt-token counting and the pacing arithmetic of the stand-in engine."""

from __future__ import annotations

import pytest

from servectl.standin.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    chunk_deadlines,
    chunk_sizes,
    count_chat_prompt_tokens,
    count_text_tokens,
    generated_text,
    verify_count,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("Hello, world!", 4),  # Hello , world !
        ("don't stop", 4),  # don ' t stop
        ("  spaced   out\n\tnewlines ", 3),
        ("x=1+2", 5),
        ("naïve café", 2),  # \w is Unicode-aware
    ],
)
def test_text_tokens_are_word_runs_and_single_punctuation(text: str, tokens: int) -> None:
    assert count_text_tokens(text) == tokens


def test_chat_prompt_adds_template_overhead_per_message() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},  # 3
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {}}],
        },  # 1
        {"role": "assistant", "content": None},  # 0
    ]
    assert MESSAGE_OVERHEAD_TOKENS == 4
    assert count_chat_prompt_tokens(messages) == 3 + 1 + 0 + 3 * 4


@pytest.mark.parametrize("count", [0, 1, 7, 30, 31, 100])
def test_generated_text_counts_back_to_the_number_of_tokens(count: int) -> None:
    assert count_text_tokens(generated_text(0, count)) == count


def test_generated_text_continues_where_the_previous_chunk_stopped() -> None:
    assert generated_text(0, 10) == generated_text(0, 4) + generated_text(4, 4) + generated_text(8, 2)


@pytest.mark.parametrize(
    ("total", "chunk", "sizes"),
    [(10, 4, [4, 4, 2]), (8, 4, [4, 4]), (3, 1, [1, 1, 1]), (0, 4, []), (2, 4, [2])],
)
def test_chunk_sizes_split_the_total_with_a_short_last_chunk(total: int, chunk: int, sizes: list[int]) -> None:
    assert chunk_sizes(total, chunk) == sizes


def test_chunk_deadlines_are_absolute_multiples_of_chunk_over_rate() -> None:
    deadlines = chunk_deadlines(100.0, [4] * 5, 500.0)
    assert deadlines == pytest.approx([100.0 + i * 4 / 500.0 for i in range(5)], abs=1e-12)


@pytest.mark.parametrize(("total", "chunk", "rate"), [(500, 1, 50.0), (500, 4, 500.0), (1001, 4, 5000.0)])
def test_rate_between_first_and_last_chunk_is_exactly_the_set_rate(total: int, chunk: int, rate: float) -> None:
    sizes = chunk_sizes(total, chunk)
    deadlines = chunk_deadlines(0.0, sizes, rate)
    measured = (total - sizes[0]) / (deadlines[-1] - deadlines[0])
    assert measured == pytest.approx(rate, rel=1e-12)


def test_deadlines_do_not_depend_on_when_earlier_chunks_were_sent() -> None:
    # Absolute schedule: chunk i's deadline is fixed at start, so a late chunk cannot push later ones back.
    deadlines = chunk_deadlines(10.0, [1] * 1000, 50.0)
    assert deadlines[999] == pytest.approx(10.0 + 999 / 50.0, abs=1e-9)


def test_chunk_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunk_sizes(10, 0)
    with pytest.raises(ValueError, match="rate_per_s"):
        chunk_deadlines(0.0, [1], 0.0)


@pytest.mark.parametrize(("tokens", "accept", "steps"), [(10, 4.0, 3), (12, 4.0, 3), (100, 3.2, 32), (0, 4.0, 0)])
def test_verify_count_is_tokens_over_accept_length_rounded_up(tokens: int, accept: float, steps: int) -> None:
    assert verify_count(tokens, accept) == steps
