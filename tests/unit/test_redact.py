"""API keys never reach what servectl prints from an engine's log."""

from __future__ import annotations

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
