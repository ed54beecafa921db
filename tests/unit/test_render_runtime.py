"""Printed forms of services, progress and stop results."""

from __future__ import annotations

from service_samples import sample_service

from servectl.cli.views.runtime import duration, progress_text, status_rows, stop_text
from servectl.service.health import Progress
from servectl.service.runtime import StopResult


def test_durations_are_short_and_readable() -> None:
    assert [duration(s) for s in (None, 5, 125, 7300, 90000)] == ["-", "5s", "2m05s", "2h01m", "1d01h"]


def test_status_row_of_a_ready_service() -> None:
    row = ("demo", "ready", "8190", "0,1", "2m05s", "01234567", "no", "servectl-demo")
    assert status_rows([sample_service()]) == [row]


def test_status_row_of_an_oom_killed_service_shows_code_and_flag_and_unknown_drift() -> None:
    oom = sample_service(state="exited", exit_code=137, oom_killed=True, uptime_s=None, drift=None, gpus=())
    row = status_rows([oom])[0]
    assert row[1:5] == ("exited (code 137, OOM-killed)", "8190", "-", "-") and row[6] == "-"


def test_progress_line_shows_phase_percent_and_detail() -> None:
    assert progress_text(Progress("loading weights", "", 50, 12.34)) == "loading weights 50% (12.3 s)"
    assert progress_text(Progress("KV cache allocated", "#tokens 1000", None, 1.0)) == (
        "KV cache allocated - #tokens 1000 (1.0 s)"
    )


def test_stop_line_says_how_it_stopped_and_what_is_known_of_the_gpus() -> None:
    plain = StopResult(profile="demo", container_name="c", stop_s=0.4, forced=False)
    assert stop_text(plain) == "demo: stopped in 0.4 s (SIGTERM); container c removed"
    unchecked = StopResult(profile="g", container_name="c", stop_s=5.1, forced=True, gpus=(0,))
    assert stop_text(unchecked).endswith(
        "(SIGKILL after the grace period); container c removed; GPU release not checked (no GPU inventory)"
    )
    leaked = StopResult(
        profile="g",
        container_name="c",
        stop_s=1,
        forced=False,
        gpus=(0,),
        gpus_checked=True,
        leaked_pids=(11, 12),
    )
    assert stop_text(leaked).endswith("processes still on its GPUs: pids 11, 12")
