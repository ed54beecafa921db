"""``STANDIN_*`` environment variables are read strictly: bad values name the variable."""

from __future__ import annotations

import pytest

from servectl.standin.settings import SettingsError, StandinSettings


def test_defaults_without_variables() -> None:
    settings = StandinSettings.from_environ({})
    assert settings == StandinSettings()
    assert settings.startup_delay_s == 2.0
    assert settings.token_rate_per_s == 50.0
    assert settings.chunk_tokens == 1
    assert settings.crash_exit_code == 1
    assert not settings.reports_accept_length


def test_every_variable_is_read() -> None:
    settings = StandinSettings.from_environ(
        {
            "STANDIN_STARTUP_DELAY_S": "0.5",
            "STANDIN_TOKEN_RATE": "500",
            "STANDIN_CHUNK_TOKENS": "4",
            "STANDIN_PREFILL_RATE": "10000",
            "STANDIN_CRASH_AT": "cuda_graph",
            "STANDIN_CRASH_EXIT_CODE": "137",
            "STANDIN_NEVER_READY": "1",
            "STANDIN_STALL_AT": "weights",
            "STANDIN_FATAL_LINE": "torch.OutOfMemoryError: CUDA out of memory",
            "STANDIN_FATAL_AT": "warmup",
            "STANDIN_IGNORE_SIGTERM": "true",
            "STANDIN_EXTRA_LOG": "first line|second line||",
            "STANDIN_COMPLETION_SHORTFALL": "3",
            "STANDIN_DIE_AFTER_TOKENS": "5",
            "STANDIN_ACCEPT_LENGTH": "3.2",
            "STANDIN_CATALOG_EXTEND": '{"choices": {"quantization": ["exl3"]}}',
            "STANDIN_LISTEN_AT": "uvicorn",
        }
    )
    assert settings.startup_delay_s == 0.5
    assert settings.token_rate_per_s == 500.0
    assert settings.chunk_tokens == 4
    assert settings.prefill_rate_per_s == 10000.0
    assert settings.crash_at == "cuda_graph"
    assert settings.crash_exit_code == 137
    assert settings.never_ready
    assert settings.stall_at == "weights"
    assert settings.fatal_line == "torch.OutOfMemoryError: CUDA out of memory"
    assert settings.fatal_at == "warmup"
    assert settings.ignore_sigterm
    assert settings.extra_log_lines == ("first line", "second line")
    assert settings.completion_shortfall_tokens == 3
    assert settings.die_after_tokens == 5
    assert settings.effective_accept_length == 3.2
    assert settings.catalog_extension == {"choices": {"quantization": ["exl3"]}}
    assert settings.listen_at == "uvicorn"


def test_accept_length_defaults_to_the_chunk_size() -> None:
    settings = StandinSettings.from_environ({"STANDIN_CHUNK_TOKENS": "4"})
    assert settings.reports_accept_length
    assert settings.effective_accept_length == 4.0


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("STANDIN_TOKEN_RATE", "fast", "STANDIN_TOKEN_RATE='fast' is not a number"),
        ("STANDIN_TOKEN_RATE", "0", "STANDIN_TOKEN_RATE='0' must be a finite number >= 0.001"),
        ("STANDIN_STARTUP_DELAY_S", "nan", "STANDIN_STARTUP_DELAY_S='nan' must be a finite number >= 0"),
        ("STANDIN_CHUNK_TOKENS", "0", "STANDIN_CHUNK_TOKENS='0' must be >= 1"),
        ("STANDIN_CHUNK_TOKENS", "2.5", "STANDIN_CHUNK_TOKENS='2.5' is not an integer"),
        ("STANDIN_CRASH_EXIT_CODE", "300", "STANDIN_CRASH_EXIT_CODE='300' must be >= 0 and <= 255"),
        (
            "STANDIN_CRASH_AT",
            "loading",
            "STANDIN_CRASH_AT='loading' is not a startup phase (one of weights, ",
        ),
        ("STANDIN_NEVER_READY", "maybe", "STANDIN_NEVER_READY='maybe' must be 1 or 0"),
        ("STANDIN_CATALOG_EXTEND", "{", "STANDIN_CATALOG_EXTEND is not valid JSON"),
        ("STANDIN_CATALOG_EXTEND", "[1]", "STANDIN_CATALOG_EXTEND must be a JSON object"),
        ("STANDIN_LISTEN_AT", "later", "STANDIN_LISTEN_AT='later' must be one of start, uvicorn"),
        ("STANDIN_TAPER", "4096", "STANDIN_TAPER='4096': '4096' is not PROMPT_TOKENS:TOK_S; give PROMPT_TOKENS:"),
        ("STANDIN_TAPER", "4096:fast", "STANDIN_TAPER='4096:fast': '4096:fast' is not PROMPT_TOKENS:TOK_S"),
        ("STANDIN_TAPER", "4096:0", "STANDIN_TAPER='4096:0': '4096:0' needs tokens >= 1 and tok/s >= 0.001"),
        ("STANDIN_TAPER", "8192:1,4096:2", "STANDIN_TAPER='8192:1,4096:2': prompt tokens must rise from pair to"),
        ("STANDIN_BATCH_RATES", "4:1,1:2", "STANDIN_BATCH_RATES='4:1,1:2': running requests must rise from pair to"),
        ("STANDIN_BATCH_RATES", "0:9", "STANDIN_BATCH_RATES='0:9': '0:9' needs running requests >= 1 and tok/s"),
        ("STANDIN_RATE_NOISE", "1.5", "STANDIN_RATE_NOISE=1.5 must be below 1 (e.g. 0.03 for 3 %)"),
        ("STANDIN_RATE_NOISE_SEED", "-1", "STANDIN_RATE_NOISE_SEED='-1' must be >= 0"),
    ],
)
def test_bad_values_are_errors_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        StandinSettings.from_environ({name: value})
    assert str(caught.value).startswith(message)


def test_empty_values_mean_unset() -> None:
    assert StandinSettings.from_environ({"STANDIN_TOKEN_RATE": "", "STANDIN_CRASH_AT": " "}) == StandinSettings()


def test_qualification_faults_are_read_and_checked() -> None:
    settings = StandinSettings.from_environ(
        {
            "STANDIN_TOOL_FAULT": "wrong_function",
            "STANDIN_JSON_FAULT": "schema",
            "STANDIN_REASONING_FAULT": "leak",
            "STANDIN_NEEDLE_MAX_TOKENS": "4096",
            "STANDIN_ERROR_EVERY": "7",
            "STANDIN_USAGE_SKEW": "3",
        }
    )
    assert (settings.tool_fault, settings.json_fault, settings.reasoning_fault) == ("wrong_function", "schema", "leak")
    assert (settings.needle_max_tokens, settings.error_every, settings.usage_skew_tokens) == (4096, 7, 3)
    assert StandinSettings.from_environ({"STANDIN_TOOL_FAULT": "none"}).tool_fault is None
    with pytest.raises(SettingsError, match="STANDIN_TOOL_FAULT='wrong' must be one of wrong_function"):
        StandinSettings.from_environ({"STANDIN_TOOL_FAULT": "wrong"})
    with pytest.raises(SettingsError, match="STANDIN_ERROR_EVERY='0' must be >= 1"):
        StandinSettings.from_environ({"STANDIN_ERROR_EVERY": "0"})


def test_a_taper_gives_the_decode_rate_per_prompt_length() -> None:
    settings = StandinSettings.from_environ(
        {"STANDIN_TAPER": " 4096:160, 65536:253 ,200000:160", "STANDIN_TOKEN_RATE": "9"}
    )
    assert settings.taper == ((4096, 160.0), (65536, 253.0), (200000, 160.0))
    rates = [settings.decode_rate_for(t) for t in (100, 4096, 16384, 65536, 200000, 10**6)]
    assert rates == pytest.approx([160.0, 160.0, 206.5, 253.0, 160.0, 160.0])  # 16,384: halfway in log tokens
    assert StandinSettings.from_environ({"STANDIN_TOKEN_RATE": "9"}).decode_rate_for(4096) == 9.0


def test_batch_rates_give_the_decode_rate_per_running_requests_and_exclude_a_taper() -> None:
    settings = StandinSettings.from_environ({"STANDIN_BATCH_RATES": "1:208,4:188,16:100", "STANDIN_TOKEN_RATE": "9"})
    rates = [settings.decode_rate_for(4096, running) for running in (0, 1, 2, 4, 8, 16, 64)]
    assert rates == pytest.approx([208.0, 208.0, 198.0, 188.0, 144.0, 100.0, 100.0])  # 2, 8: halfway in log
    with pytest.raises(SettingsError, match="STANDIN_TAPER and STANDIN_BATCH_RATES are both set"):
        StandinSettings.from_environ({"STANDIN_BATCH_RATES": "1:2", "STANDIN_TAPER": "1:2"})
