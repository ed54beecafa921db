"""The warm standby's trust check: a fingerprint of fixed prompts compared after each resume (issue 38)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from servectl.adapters.standby import StandbyEntry, StandbyRecord, Trust
from servectl.cli.views.runtime import state_text
from servectl.service.fingerprint import (
    LOGPROB_TOLERANCE,
    PROMPTS,
    Fingerprint,
    Sample,
    difference,
    request_body,
    sample_of,
)
from servectl.service.services import ServiceInfo, on_standby

CID = "cd" * 32


@pytest.fixture
def cap(capsys: pytest.CaptureFixture[str]) -> pytest.CaptureFixture[str]:
    return capsys


def chat(tokens: list[tuple[str, float]] | None, text: str = "") -> dict[str, object]:
    logprobs = None if tokens is None else {"content": [{"token": t, "logprob": lp} for t, lp in tokens]}
    return {"choices": [{"message": {"content": text}, "logprobs": logprobs}]}


def fp(*samples: Sample) -> Fingerprint:
    return Fingerprint(samples)


def test_a_sample_reads_tokens_and_logprobs_or_the_text_when_the_engine_returns_none() -> None:
    with_lp = sample_of("p", chat([("Hello", -0.1), ("!", -1.5)]))
    assert (with_lp.tokens, with_lp.logprobs) == (("Hello", "!"), (-0.1, -1.5))
    plain = sample_of("p", chat(None, "Hello!"))
    assert (plain.tokens, plain.logprobs) == (("Hello!",), None)
    body = request_body(PROMPTS[0])
    assert (body["temperature"], body["logprobs"], len(PROMPTS)) == (0, True, 3)


def test_the_same_answers_within_the_tolerance_pass_and_any_departure_is_named() -> None:
    first = fp(Sample("a", ("x", "y"), (-0.1, -0.2)), Sample("b", ("z",), (-0.3,)))
    assert difference(first, first) is None
    near = fp(Sample("a", ("x", "y"), (-0.1, -0.2 + LOGPROB_TOLERANCE / 2)), Sample("b", ("z",), (-0.3,)))
    assert difference(first, near) is None
    drift = fp(Sample("a", ("x", "y"), (-0.1, -0.2)), Sample("b", ("z",), (-0.9,)))
    assert difference(first, drift) == "prompt 2: token 0's logprob is -0.9000 where it was -0.3000 (tolerance 0.05)"
    moved = fp(Sample("a", ("x", "w"), (-0.1, -0.2)), Sample("b", ("z",), (-0.3,)))
    assert difference(first, moved) == "prompt 1: token 1 is 'w' where it was 'y'"
    short = fp(Sample("a", ("x",), (-0.1,)), Sample("b", ("z",), (-0.3,)))
    assert difference(first, short) == "prompt 1: token 1 is missing where it was 'y'"
    no_lp = fp(Sample("a", ("x", "y")), Sample("b", ("z",)))  # an engine without logprobs: tokens only
    assert difference(first, no_lp) is None
    assert Fingerprint.from_list(first.to_list()) == first


def test_status_shows_the_last_release_and_the_cycles_of_a_standby(tmp_path: Path) -> None:
    base = ServiceInfo(
        container_id=CID, container_name="servectl-a", profile="a", plan_hash="p" * 12, state="ready",
        exit_code=None, oom_killed=False, host="127.0.0.1", port=8190, gpus=(0,), started_at=1.0, uptime_s=5.0,
        stop_grace_s=5, drift=False, running=True,
    )  # fmt: skip
    record = StandbyRecord(tmp_path)
    record.mark(StandbyEntry("a", CID, 10.0, 0.8, 2**31, "x"))
    record.note_release("a", 0.84, at=10.0)
    record.note_resume("a", 0.9, at=20.0)
    record.set_trust(CID, Trust([Sample("p", ("x",)).to_dict()], cycles=3))
    seen = on_standby(base, record)
    assert state_text(seen) == "standby (host RAM 2.0 GiB, release 0.8 s, resume 0.9 s, 3 cycles)"
    assert (seen.to_dict()["standby_release_s"], seen.to_dict()["standby_cycles"]) == (0.84, 3)
    record.forget(CID)
    assert record.trust(CID) is None and on_standby(base, record) == replace(base)


def test_swap_prints_a_release_and_a_resume_apart_from_a_stop_and_a_start(cap: pytest.CaptureFixture[str]) -> None:
    from servectl.cli.swap import _render
    from servectl.service.transaction.model import SwapResult

    warm = SwapResult("a", "b", "swapped", downtime_s=2.1, old_stop_s=0.91, target_startup_s=1.19, old_released=True)
    _render(warm, as_json=False, notes=[])
    assert "downtime 2.10 s (release 0.91 s + start 1.19 s)" in cap.readouterr().out
    back = SwapResult("b", "a", "swapped", downtime_s=1.5, old_stop_s=1.0, target_startup_s=0.5, target_resumed=True)
    _render(back, as_json=False, notes=[])
    assert "downtime 1.50 s (stop 1.00 s + resume 0.50 s)" in cap.readouterr().out


def test_rollback_check_and_the_gateway_hold_read_the_last_measured_release_and_resume(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from servectl.adapters.state import History
    from servectl.service import standby

    record = StandbyRecord(tmp_path)
    waiting = replace(_service(), state="standby")
    record.note_release("a", 0.8, at=1.0)
    record.note_resume("a", 0.4, at=2.0)
    record.set_trust(CID, Trust([Sample("p", ("x",)).to_dict()], cycles=2))
    words = standby.way_back_words(tmp_path, "a", [waiting])
    assert words == (
        "a is on warm standby: the way back is a resume (last 0.4 s, 2 cycle(s) behind it), no container start"
    )
    assert standby.way_back_words(tmp_path, "a", [_service()]) is None  # running, not on standby
    History(tmp_path, clock=time.time).record({"event": "up", "profile": "a", "startup_s": 30.0})
    ctx = SimpleNamespace(ctx=SimpleNamespace(state_dir=tmp_path, history=History(tmp_path, clock=time.time)))
    assert standby.expected_swap_s(ctx, None, "a", waiting) == 0.4  # type: ignore[arg-type]  # resume, not start
    assert standby.expected_swap_s(ctx, None, "a", None) == 30.0  # type: ignore[arg-type]  # cold: the last start


def _service() -> ServiceInfo:
    return ServiceInfo(
        container_id=CID, container_name="servectl-a", profile="a", plan_hash="p" * 12, state="ready",
        exit_code=None, oom_killed=False, host="127.0.0.1", port=8190, gpus=(0,), started_at=1.0, uptime_s=5.0,
        stop_grace_s=5, drift=False, running=True,
    )  # fmt: skip


def test_the_gateways_retry_after_for_a_profile_on_standby_is_its_last_resume(tmp_path: Path) -> None:
    from servectl.adapters.gateway_admin import way_back_s
    from servectl.adapters.state import History

    History(tmp_path, clock=time.time).record({"event": "up", "profile": "a", "startup_s": 30.0})
    record = StandbyRecord(tmp_path)
    record.note_resume("a", 0.4, at=2.0)
    assert (
        way_back_s(tmp_path, History(tmp_path, clock=time.time), "a") == 30.0
    )  # running (no standby record): a swap back would start it
    record.mark(StandbyEntry("a", CID, 10.0, 0.8, 0, "x"))
    assert record.on_standby("a") and not record.on_standby("b")
    assert way_back_s(tmp_path, History(tmp_path, clock=time.time), "a") == 0.4  # on standby: a resume
    assert way_back_s(tmp_path, History(tmp_path, clock=time.time), "b") is None
