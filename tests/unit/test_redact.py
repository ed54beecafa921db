"""API keys never reach what servectl prints from an engine's log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servectl.redact import redact
from servectl.service.health import LogWatcher

KEY = "sk-live-4f9a0c2e"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            f"[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/model', api_key='{KEY}', port=8180)",
            "[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/model', api_key='***', port=8180)",
        ),
        (f'{{"api_key": "{KEY}", "tp_size": 2}}', '{"api_key": "***", "tp_size": 2}'),
        (
            f"python3 -m sglang.launch_server --api-key {KEY} --port 1",
            "python3 -m sglang.launch_server --api-key *** --port 1",
        ),
        (f"--api-key={KEY}", "--api-key=***"),
        (f"Authorization: Bearer {KEY}", "Authorization: Bearer ***"),
        ("server_args=ServerArgs(api_key=None, port=8180)", "server_args=ServerArgs(api_key=None, port=8180)"),
        ("Load weight end. mem usage=88.10 GB", "Load weight end. mem usage=88.10 GB"),
    ],
)
def test_key_spellings_are_redacted_and_other_lines_kept(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_a_known_secret_is_redacted_wherever_it_appears() -> None:
    assert redact(f"echo {KEY} | tee", secrets=[KEY]) == "echo *** | tee"


def test_the_gate_keeps_only_redacted_lines_for_error_reports() -> None:
    watcher = LogWatcher()
    watcher.feed(f"server_args=ServerArgs(api_key='{KEY}')")
    watcher.feed(f"torch.OutOfMemoryError: CUDA out of memory (api_key='{KEY}')")
    assert all(KEY not in line for line in watcher.tail)
    assert watcher.fatal is not None and KEY not in watcher.fatal.line


HF = "hf_" + "Ab3" * 10
TOKENS = [HF, "sk-proj-" + "x9" * 12, "ghp_" + "Z" * 36, "github_pat_" + "a1" * 15, "AKIA" + "ABCDEFGH12345678"]


@pytest.mark.parametrize("token", TOKENS)
def test_token_shapes_are_redacted_wherever_an_engine_prints_them(token: str) -> None:
    assert redact(f"INFO downloading with token {token}, done") == "INFO downloading with token ***, done"
    assert redact(f"env: HF_TOKEN={token}") == "env: HF_TOKEN=***"


def test_servectl_logs_redacts_the_secrets_the_profile_references(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API key from its variable, an engine variable named like a secret passed by reference, and the
    shapes, in what ``Host.logs`` shows (the fake engine prints them as an engine might)."""
    from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
    from servectl.testing.host import FakeHost

    api_key, token, plain = "engine-key-0123456789", "opaque-token-value-42", "not-a-secret-value"
    environ = {**os.environ, "MY_ENGINE_KEY": api_key, "VENDOR_TOKEN": token, "SOME_SETTING": plain}
    write_test_profile(
        profile_dir,
        "leaky",
        port=8191,
        serve={"api_key_env": "MY_ENGINE_KEY"},
        engine={"env": {"VENDOR_TOKEN": "${VENDOR_TOKEN}", "SOME_SETTING": "${SOME_SETTING}"}},
    )
    said = [f"token {token} key {api_key}", f"hf {HF} setting {plain}"]
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"},
        script_for=lambda spec: sglang_like_script(0.1, extra_lines=said),
        sleep=lambda s: None,
    )
    with FakeHost(state_dir=profile_dir.parent / "home", engine=engine, environ=environ) as host:
        host.up(name="leaky")
        lines = list(host.logs(name="leaky"))
    assert "token *** key ***" in lines and f"hf *** setting {plain}" in lines
    assert not any(s in line for line in lines for s in (api_key, token, HF))


def test_a_failed_start_shows_its_last_lines_without_the_secrets_the_profile_references(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servectl.errors import StartupFailed
    from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
    from servectl.testing.host import FakeHost

    api_key, token = "engine-key-0123456789", "opaque-token-value-42"
    environ = {**os.environ, "MY_ENGINE_KEY": api_key, "VENDOR_TOKEN": token}
    write_test_profile(
        profile_dir,
        "leaky",
        port=8192,
        serve={"api_key_env": "MY_ENGINE_KEY"},
        engine={"env": {"VENDOR_TOKEN": "${VENDOR_TOKEN}"}},
    )
    fatal = f"torch.OutOfMemoryError: CUDA out of memory (token {token}, key {api_key}, {HF})"
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"},
        script_for=lambda spec: sglang_like_script(0.1, fatal_line=fatal),
        sleep=lambda s: None,
    )
    home = profile_dir.parent / "home"
    with FakeHost(state_dir=home, engine=engine, environ=environ) as host, pytest.raises(StartupFailed) as failed:
        host.up(name="leaky")
    shown = "\n".join([*failed.value.lines(), *failed.value.last_log_lines])
    assert "CUDA out of memory (token ***, key ***, ***)" in shown
    assert api_key not in shown and token not in shown and HF not in shown


def test_the_dashboard_log_tail_redacts_the_secrets_the_engine_container_was_given(profile_dir: Path) -> None:
    """The gateway (in its container) has not the host's environment: it takes the values of the engine
    container's own variables named like secrets out of the tail, as ``servectl logs`` does."""
    from servectl.gateway.dashboard import docker_log_tail
    from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
    from servectl.testing.host import FakeHost

    token, plain = "opaque-token-value-42", "not-a-secret-value"
    environ = {**os.environ, "VENDOR_TOKEN": token, "SOME_SETTING": plain}
    write_test_profile(
        profile_dir,
        "leaky",
        port=8193,
        engine={"env": {"VENDOR_TOKEN": "${VENDOR_TOKEN}", "SOME_SETTING": "${SOME_SETTING}"}},
    )
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"},
        script_for=lambda spec: sglang_like_script(0.1, extra_lines=[f"token {token} setting {plain}"]),
        sleep=lambda s: None,
    )
    with FakeHost(state_dir=profile_dir.parent / "home", engine=engine, environ=environ) as host:
        host.up(name="leaky")
        lines = docker_log_tail(engine)("leaky", 50)
    assert f"token *** setting {plain}" in lines
    assert not any(token in line for line in lines)
    assert token not in repr(engine.inspect(next(iter(engine.containers))))
