"""The log catalog (lines SGLang 0.5.23 can print, from its source) against every log pattern servectl uses."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from servectl.profile.loader import ProfileFolder, ProfileSearch, read_profile
from servectl.profile.logcatalog import LogCatalog
from servectl.profile.rules import check_profile
from servectl.service.health import CUDA_GRAPHS, LogWatcher, log_patterns
from servectl.standin.process import HostStandin

ROOT = Path(__file__).parents[2]
DEMO_MODEL = str(ROOT / "examples" / "demo-model")
SHIPPED = ProfileFolder(ROOT / "profiles", "shipped")
#: ``[2026-11-30 10:00:00 TP0] message`` / ``[2026-11-30 10:00:00] INFO:     message``: SGLang's and uvicorn's prefixes.
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] (?:(?:INFO|WARNING|ERROR):\s+)?")


@pytest.fixture(scope="module")
def logs() -> LogCatalog:
    return LogCatalog.load("sglang-0.5.23")


@pytest.mark.parametrize("role", sorted(log_patterns()))
def test_every_health_gate_pattern_matches_a_line_sglang_prints(logs: LogCatalog, role: str) -> None:
    pattern = log_patterns()[role].pattern
    assert logs.can_match(pattern), f"{role}: nearest {[t.shown() for t in logs.nearest(pattern)]}"


def test_every_shipped_expect_log_pattern_matches_a_line_sglang_prints(logs: LogCatalog) -> None:
    checked = 0
    for path in sorted((ROOT / "profiles").glob("*.yaml")):  # bases too: their patterns reach every child
        data = yaml.safe_load(path.read_text())
        for pattern in (data.get("health") or {}).get("expect_log") or ():
            assert logs.can_match(pattern), f"{path.name}: {pattern!r}"
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize(
    ("pattern", "real"),
    [
        ("sparse-MLA", False),  # printed by no 0.5.23 code path (it was the stand-in's invention)
        ("Capture cuda graph begin", False),  # the pre-0.5.23 wording
        ("decode=flashinfer_sparse_mla", False),  # mostly a value, not the line's own text
        ("Set DSA backends for GLM FP8 KV Cache on SM120/SM121", True),
        ("KV Cache is allocated", True),  # the pool name is a local variable the extractor reads through
        (r"Capture target decode CUDA graph (begin|end)", True),
        (r"Load weight end\. elapsed=[\d.]+ s", True),
    ],
)
def test_patterns_are_judged_by_the_literal_text_of_real_lines(logs: LogCatalog, pattern: str, real: bool) -> None:
    assert logs.can_match(pattern) is real


def test_a_pattern_sglang_never_prints_is_a_validation_error_naming_real_lines(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "name: p\nextends: glm53-393k\nhealth:\n  expect_log: ['sparse-MLA', 'Load weight begin']\n"
    )
    search = ProfileSearch((ProfileFolder(tmp_path, "test"), SHIPPED), catalogs=tmp_path / "catalogs")
    loaded = read_profile("p", folders=search)
    problems = [str(p) for p in check_profile(loaded)]
    flagged = [p for p in problems if "expect_log" in p]
    assert len(flagged) == 1, problems
    assert "'sparse-MLA' matches no line sglang-0.5.23 prints" in flagged[0]
    assert "nearest real lines: '" in flagged[0]


def test_gate_reads_both_the_old_and_the_0_5_23_graph_capture_and_kv_lines() -> None:
    for begin, end, kv in [
        (
            "Capture cuda graph begin. This can take up to several minutes.",
            "Capture cuda graph end. Time elapsed: 1 s.",
            "KV Cache is allocated. #tokens: 524288, K size: 1.00 GB",
        ),
        (
            "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=9.00 GB",
            "Capture target decode CUDA graph end. bs=[1], elapsed=1.00 s, mem usage=1.00 GB, avail mem=8.00 GB.",
            "KV Cache is allocated. dtype: fp8_e4m3, #tokens: 524288, K size: 1.00 GB, V size: 1.00 GB",
        ),
    ]:
        watcher = LogWatcher()
        watcher.feed(kv)
        assert watcher.kv_tokens == 524288
        for line in (begin, end):
            watcher.feed(line)
            assert watcher.phase == CUDA_GRAPHS, line


def test_the_standin_prints_only_lines_sglang_prints(logs: LogCatalog) -> None:
    env = {"STANDIN_STARTUP_DELAY_S": "0.3", "STANDIN_TOKEN_RATE": "2000"}
    flags = [
        "--dsa-decode-backend",
        "flashinfer_sparse_mla",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--decode-log-interval",
        "1",
    ]
    with HostStandin(["--model-path", DEMO_MODEL, *flags], env=env) as proc:
        proc.wait_ready()
        with httpx.Client(base_url=proc.base_url) as client:
            reply = client.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            )
            assert reply.status_code == 200
        # the reader thread collects the engine's lines as they come: under load the decode line may still be
        # on its way when the answer is in (CI stop 37's clean-clone run), so wait for it before reading them all
        proc.wait_for_line("Decode batch")
        lines = list(proc.lines)
    messages = [_PREFIX.sub("", line) for line in lines]
    assert any("Set DSA backends for GLM" in m for m in messages) and any("Decode batch" in m for m in messages)
    unknown = [m for m in messages if logs.line_of(m) is None]
    assert unknown == []


def test_the_fake_docker_engines_sglang_script_prints_only_lines_sglang_prints(logs: LogCatalog) -> None:
    from servectl.testing.docker import sglang_like_script

    lines = [line for _, line in sglang_like_script(1.0).lines]
    lines += [line for _, line in sglang_like_script(1.0, crash_at="cuda_graph").lines]
    messages = [re.sub(r"^(?:INFO|WARNING|ERROR):\s+", "", line) for line in lines]
    assert len(messages) >= 10
    assert [m for m in messages if logs.line_of(m) is None] == []
