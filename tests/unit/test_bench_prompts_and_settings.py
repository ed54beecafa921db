"""Prompt construction, calibration math and settings of the bench."""

from __future__ import annotations

import random

import pytest

from servectl.bench import ApiKey, BenchSettings, Stat, prompt_tolerance_tokens
from servectl.bench.prompts import (
    VOCABULARY,
    build_prompt,
    corrected_words,
    fit_calibration,
    probe_word_counts,
)
from servectl.errors import UsageError


def test_prompt_has_the_asked_number_of_salad_words_after_its_nonce() -> None:
    prompt = build_prompt(rng=random.Random(1), words=1000, run_id="abcd", request_number=7, shared_prefix=False)
    assert prompt.startswith("Request abcd-00007: ")
    salad = prompt.split()[2:]
    assert len(salad) == 1000
    assert set(salad) <= set(VOCABULARY)


def test_every_full_pass_of_the_salad_holds_each_word_once() -> None:
    prompt = build_prompt(
        rng=random.Random(2), words=3 * len(VOCABULARY), run_id="r", request_number=1, shared_prefix=False
    )
    salad = prompt.split()[2:]
    for k in range(3):
        block = salad[k * len(VOCABULARY) : (k + 1) * len(VOCABULARY)]
        assert sorted(block) == sorted(VOCABULARY)


def test_prompts_differ_per_request_and_per_run_but_repeat_for_the_same_seed_and_run() -> None:
    a1 = build_prompt(rng=random.Random(0), words=50, run_id="run1", request_number=1, shared_prefix=False)
    a2 = build_prompt(rng=random.Random(0), words=50, run_id="run1", request_number=1, shared_prefix=False)
    other_run = build_prompt(rng=random.Random(0), words=50, run_id="run2", request_number=1, shared_prefix=False)
    rng = random.Random(0)
    first = build_prompt(rng=rng, words=50, run_id="run1", request_number=1, shared_prefix=False)
    second = build_prompt(rng=rng, words=50, run_id="run1", request_number=2, shared_prefix=False)
    assert a1 == a2 == first
    assert other_run != a1 and other_run.split()[2:] == a1.split()[2:]  # only the nonce differs
    assert second.split()[0:2] != first.split()[0:2] and second.split()[2:] != first.split()[2:]


def test_shared_prefix_prompts_share_all_but_their_nonce_at_the_end_whatever_their_length() -> None:
    """A warm-prefix point: what one request sent, the next repeats but for its tail, so a prefix cache holds it;
    a corrected (longer) word count continues the same salad."""
    first = build_prompt(rng=random.Random(3), words=300, run_id="r", request_number=1, shared_prefix=True)
    second = build_prompt(rng=random.Random(3), words=300, run_id="r", request_number=2, shared_prefix=True)
    longer = build_prompt(rng=random.Random(3), words=320, run_id="r", request_number=3, shared_prefix=True)
    assert first.endswith(" Request r-00001:") and second.endswith(" Request r-00002:")
    assert first.split()[:300] == second.split()[:300] == longer.split()[:300]
    assert len(longer.split()) == 322 and first != second


def test_two_probes_recover_the_token_line() -> None:
    cal = fit_calibration(words=[64, 2048], prompt_tokens=[20 + 80, 20 + 2560])
    assert cal.tokens_per_word == pytest.approx(1.25)
    assert cal.overhead_tokens == pytest.approx(20)
    assert cal.words_for(4096) == round((4096 - 20) / 1.25)


def test_calibration_rejects_counts_that_do_not_grow_and_a_single_size() -> None:
    with pytest.raises(ValueError, match="do not grow"):
        fit_calibration(words=[64, 2048], prompt_tokens=[100, 100])
    with pytest.raises(ValueError, match="two probes of different sizes"):
        fit_calibration(words=[64, 64], prompt_tokens=[100, 100])


def test_correction_moves_the_word_count_by_the_miss_over_the_ratio() -> None:
    assert corrected_words(words=1000, target_tokens=4096, actual_tokens=3996, tokens_per_word=1.25) == 1080
    assert corrected_words(words=10, target_tokens=1, actual_tokens=500, tokens_per_word=1.0) == 1


def test_probe_sizes_stay_below_the_smallest_target_and_the_context() -> None:
    assert probe_word_counts(smallest_target_tokens=131072, max_model_len=None) == (64, 4096)
    assert probe_word_counts(smallest_target_tokens=1000, max_model_len=None) == (64, 500)
    assert probe_word_counts(smallest_target_tokens=131072, max_model_len=2048) == (64, 512)


def test_tolerance_is_one_percent_with_a_floor_of_64_tokens() -> None:
    assert prompt_tolerance_tokens(4096) == 64
    assert prompt_tolerance_tokens(304491) == 3045


def test_api_key_never_shows_in_reprs() -> None:
    settings = BenchSettings(url="http://h:1", api_key=ApiKey("sk-secret-123"), api_key_env="MY_KEY")
    assert "sk-secret" not in repr(settings)
    assert "sk-secret" not in repr(settings.api_key) and "sk-secret" not in str(settings.api_key)
    assert settings.api_key is not None and settings.api_key.reveal() == "sk-secret-123"


def test_url_loses_trailing_slash_and_v1() -> None:
    assert BenchSettings(url="http://127.0.0.1:8180/v1/").url == "http://127.0.0.1:8180"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "127.0.0.1:8180"}, "is not an http(s) URL"),
        ({"prompt_tokens": ()}, "prompt_tokens"),
        ({"prompt_tokens": (0,)}, "prompt_tokens"),
        ({"concurrency": (0,)}, "concurrency"),
        ({"repeats": 0}, "repeats: 0 is below 1"),
        ({"max_tokens": 1}, "leaves no decode window"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"extra_body": {"stream": False}}, "set by the bench itself"),
    ],
)
def test_bad_settings_raise_one_line_usage_errors(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"url": "http://h:1"}
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BenchSettings(**{**base, **kwargs})  # type: ignore[arg-type]


def test_stat_is_median_min_max_of_known_values() -> None:
    stat = Stat.of([3.0, None, 1.0, 2.0, 10.0])
    assert stat == Stat(p50=2.5, min=1.0, max=10.0, n=4)
    assert Stat.of([None]) is None
