"""The swap transaction against fakes of the runtime, conflicts, history and lock (no Docker)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.conflicts import load_stopped
from servectl.adapters.gpu import NullGpuInventory
from servectl.adapters.state import GateRecord, previous_profile
from servectl.errors import (
    EngineUnavailable,
    LockTimeout,
    PreflightFailed,
    StartupFailed,
    StateDamaged,
    SwapFailed,
    SwapInterrupted,
    SwapRolledBack,
    UnfinishedTransaction,
    UsageError,
)
from servectl.plan.resolve import Resolved, resolve
from servectl.service.context import Clocks, Context
from servectl.service.journal import JOURNAL_FILE, SwapJournal, read_journal
from servectl.service.recover import recover
from servectl.service.rollback import rollback, rollback_check
from servectl.service.swap import PhaseEvent, SwapOptions, SwapResult, swap
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeGpuInventory
from servectl.testing.swap import FakeClock, FakeConflicts, FakeHistory, FakeLock, FakeRuntime

PROFILE = """\
name: {name}
extends: demo
{rollback}
container:
  name: swaptest-{name}
{extra}
"""


def write_profile(folder: Path, name: str, *, rollback: str | None = None, extra: str = "") -> None:
    text = PROFILE.format(name=name, rollback=f"rollback: {rollback}" if rollback else "rollback: null", extra=extra)
    (folder / f"{name}.yaml").write_text(text, encoding="utf-8")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    profiles = tmp_path / "profiles-under-test"
    profiles.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_PROFILES", str(profiles))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    write_profile(profiles, "alpha", rollback="beta")
    write_profile(profiles, "beta", rollback="alpha")
    write_profile(profiles, "gamma", extra="conflicts:\n  - container: daily-driver\n")
    write_profile(profiles, "delta", extra=f"conflicts:\n  - compose_file: {tmp_path}/daily.yml\n")
    write_profile(profiles, "other", extra="serve:\n  port: 8191\n")
    return tmp_path


class World:
    """Fakes wired together, with a ``swap`` that uses them."""

    def __init__(self, state_dir: Path) -> None:
        self.clock = FakeClock()
        self.clocks = Clocks(monotonic=self.clock, wall=lambda: 1.7e9)
        self.runtime = FakeRuntime(self.clock, stop_s=1.0)
        self.conflicts = FakeConflicts([("container", "daily-driver")])
        self.history = FakeHistory()
        self.lock = FakeLock()
        self.state_dir = state_dir
        self.preflight_calls: list[tuple[str, str | None]] = []
        self.preflight_error: Exception | None = None
        self.preflight_hook: Any = None

    def preflight(
        self,
        *,
        resolved: Resolved,
        replacing: Any,
        skip: frozenset[str],
        docker: Any,
        gpus: Any,
        running: Any = (),
        parses: Any = None,
    ) -> None:
        self.preflight_calls.append((resolved.name, replacing.profile if replacing else None))
        if self.preflight_hook:
            self.preflight_hook()
        if self.preflight_error:
            raise self.preflight_error

    def context(self, **given: Any) -> Context:
        """The context of a transaction over these fakes (``given`` replaces any part)."""
        parts: dict[str, Any] = {
            "docker": FakeDockerEngine(),
            "nvml": False,  # no GPU inventory unless a test gives one: stops wait on no cards
            "runtime": self.runtime,
            "conflicts": self.conflicts,
            "history": self.history,
            "lock": self.lock,
            "state_dir": self.state_dir,
            "clocks": self.clocks,
        }
        return Context(**{**parts, **given})

    def opts(self, **given: Any) -> SwapOptions:
        return SwapOptions(preflight=self.preflight, **given)

    def swap(self, target: str | None) -> SwapResult:
        return swap(self.context(), target=target, opts=self.opts())

    def run(self, name: str, state: str = "ready") -> None:
        service = self.runtime.run(resolve(name, environ=os.environ), state=state)
        if state == "starting":  # servectl created it and its gate has not passed, as runtime.start records
            GateRecord(self.state_dir).mark_pending(service.container_name)


@pytest.fixture
def world(env: Path) -> World:
    return World(env / "home")


def signal_self(signum: int) -> Any:
    def hook(_: Any = None) -> None:
        os.kill(os.getpid(), signum)

    return hook


# -- the happy paths -----------------------------------------------------------------------------------------
def test_swap_stops_the_old_service_then_starts_the_target_and_measures_downtime(world: World) -> None:
    world.run("alpha")
    world.runtime.script("beta", startup_s=2.5)

    result = world.swap("beta")

    assert result.outcome == "swapped"
    assert (result.from_profile, result.to_profile) == ("alpha", "beta")
    assert world.runtime.calls == [("ensure_image", "beta"), ("stop", "alpha"), ("start", "beta")]
    assert world.runtime.profiles() == ["beta"]
    assert result.downtime_s == pytest.approx(1.0 + 2.5)
    assert result.old_stop_s == pytest.approx(1.0)
    assert result.target_startup_s == pytest.approx(2.5)
    assert [p.phase for p in result.phases] == [
        "lock",
        "validate",
        "image",
        "preflight",
        "stop-old",
        "start-target",
    ]
    assert result.phase_s("stop-old") == pytest.approx(1.0)
    assert result.phase_s("start-target") == pytest.approx(2.5)
    assert "beta is up" in result.message and "replacing alpha" in result.message
    assert world.preflight_calls == [("beta", "alpha")]
    [event] = world.history.events()
    assert event["event"] == "swap"
    assert (event["replaced"], event["profile"], event["outcome"]) == ("alpha", "beta", "swapped")
    assert event["container_id"] == world.runtime.running["swaptest-beta"].container_id
    assert event["downtime_s"] == pytest.approx(3.5)
    assert read_journal(world.state_dir) is None


def test_plain_swap_goes_to_the_running_profiles_rollback_target(world: World) -> None:
    world.run("alpha")
    result = world.swap(None)
    assert result.to_profile == "beta"
    assert world.runtime.profiles() == ["beta"]


def test_plain_swap_with_nothing_running_asks_for_a_target(world: World) -> None:
    with pytest.raises(UsageError, match=r"no servectl service runs.*servectl swap NAME"):
        world.swap(None)


def test_plain_swap_from_a_profile_without_rollback_names_the_file(world: World, env: Path) -> None:
    world.run("gamma")
    with pytest.raises(UsageError, match=r"gamma declares no `rollback:` target in .*gamma.yaml"):
        world.swap(None)


def test_swap_to_the_profile_already_running_changes_nothing(world: World) -> None:
    world.run("alpha")
    result = world.swap("alpha")
    assert result.outcome == "noop"
    assert "alpha already runs" in result.message
    assert world.runtime.calls == []
    assert world.runtime.profiles() == ["alpha"]


def test_swap_when_nothing_runs_acts_like_up(world: World) -> None:
    result = world.swap("beta")
    assert result.outcome == "started"
    assert result.from_profile is None and result.downtime_s is None
    assert world.runtime.calls == [("ensure_image", "beta"), ("start", "beta")]
    assert world.preflight_calls == [("beta", None)]


def test_a_service_on_another_port_is_left_alone(world: World) -> None:
    world.run("other")
    world.run("alpha")
    world.swap("beta")
    assert world.runtime.profiles() == ["beta", "other"]


def test_an_exited_previous_service_is_removed_and_not_restored(world: World) -> None:
    world.run("alpha", state="exited")
    world.runtime.script("beta", failure="beta exited during startup", exit_code=1)
    with pytest.raises(StartupFailed, match=r"nothing was serving before, so nothing runs now"):
        world.swap("beta")
    assert world.runtime.profiles() == []
    assert world.runtime.calls == [("ensure_image", "beta"), ("stop", "alpha"), ("start", "beta")]


# -- failures before anything changes ------------------------------------------------------------------------
def test_preflight_failure_changes_nothing(world: World) -> None:
    world.run("alpha")
    world.preflight_error = PreflightFailed("gpu.vram: card 0 has 1,024 MiB free, needs 3,072")
    with pytest.raises(PreflightFailed, match=r"gpu\.vram"):
        world.swap("beta")
    assert world.runtime.calls == [("ensure_image", "beta")]  # nothing stopped or started
    assert world.runtime.profiles() == ["alpha"]
    assert world.history.events() == []


def test_unknown_target_changes_nothing(world: World) -> None:
    world.run("alpha")
    with pytest.raises(UsageError, match=r"profile 'betta' not found.*did you mean beta"):
        world.swap("betta")
    assert world.runtime.calls == []


def test_a_held_lock_refuses_with_the_holder_and_what_to_do(world: World) -> None:
    world.run("alpha")
    world.lock.held_by = 4242
    with pytest.raises(LockTimeout, match=r"pid 4242"):
        world.swap("beta")
    assert world.runtime.calls == []


def test_a_missing_compose_cli_refuses_before_anything_stops(world: World) -> None:
    world.run("alpha")
    world.conflicts.compose_available = False
    with pytest.raises(EngineUnavailable, match="compose"):
        world.swap("delta")
    assert world.runtime.calls == [
        ("ensure_image", "delta")
    ]  # nothing stopped or started and world.conflicts.calls == []
    assert world.runtime.profiles() == ["alpha"]


def test_a_target_that_would_replace_two_services_is_refused(world: World, env: Path) -> None:
    (env / "profiles-under-test" / "wide.yaml").write_text(  # port of alpha, container name of other
        "name: wide\nextends: demo\ncontainer:\n  name: swaptest-other\n", encoding="utf-8"
    )
    world.run("alpha")
    world.run("other")
    with pytest.raises(UsageError, match=r"would replace 2 services"):
        world.swap("wide")
    assert world.runtime.calls == []


# -- target failures and rollback ----------------------------------------------------------------------------
def test_target_crash_brings_the_previous_service_back_and_says_why(world: World) -> None:
    world.run("alpha")
    world.runtime.script(
        "beta",
        startup_s=0.5,
        failure="beta exited with code 3 during startup",
        exit_code=3,
        last_log_lines=("loading weights", "RuntimeError: CUDA out of memory"),
    )
    world.runtime.script("alpha", startup_s=2.0)

    with pytest.raises(SwapRolledBack) as caught:
        world.swap("beta")

    err = caught.value
    assert err.exit_code == 4
    assert world.runtime.profiles() == ["alpha"]
    assert world.runtime.calls == [
        ("ensure_image", "beta"),
        ("stop", "alpha"),
        ("start", "beta"),
        ("ensure_image", "alpha"),  # the previous profile's image, just before its start (start assumes it)
        ("start", "alpha"),
    ]
    assert err.message.startswith("beta failed: beta exited with code 3 during startup; beta was removed")
    assert "previous service alpha is back" in err.message
    assert "RuntimeError: CUDA out of memory" in err.message
    result = err.result
    assert isinstance(result, SwapResult)
    assert result.outcome == "rolled-back"
    assert result.target_failure is not None and result.target_failure.exit_code_of_container == 3
    assert result.downtime_s == pytest.approx(1.0 + 0.5 + 2.0)
    assert [p.phase for p in result.phases][-2:] == ["remove-target", "start-previous"]
    restored, failed = world.history.events()  # the undo records the restored service as it passes its gate
    assert (failed["event"], failed["profile"], failed["replaced"]) == ("swap-failed", "beta", "alpha")
    assert failed["outcome"] == "rolled-back" and "exited with code 3" in failed["reason"]
    assert (restored["event"], restored["profile"], restored["restored_after"]) == ("up", "alpha", "beta")
    assert restored["container_id"] == world.runtime.running["swaptest-alpha"].container_id
    assert read_journal(world.state_dir) is None


def test_both_failing_leaves_nothing_running_and_says_what_to_do(world: World) -> None:
    world.run("alpha")
    world.runtime.script("beta", failure="beta: startup timeout after 5 s", last_log_lines=("still loading",))
    world.runtime.script("alpha", failure="alpha: fatal log line: CUDA error", last_log_lines=("CUDA error",))

    with pytest.raises(SwapFailed) as caught:
        world.swap("beta")

    err = caught.value
    assert err.exit_code == 5
    assert world.runtime.profiles() == []
    assert "beta failed: startup timeout after 5 s" in err.message
    assert "previous service alpha did not come back either: fatal log line: CUDA error" in err.message
    assert "Nothing of servectl runs now" in err.message and "`servectl up alpha`" in err.message
    assert "last log lines of beta" in err.message and "last log lines of alpha" in err.message
    assert world.history.events()[-1]["outcome"] == "failed"


def test_target_failure_when_nothing_ran_is_a_startup_failure_with_the_log(world: World) -> None:
    world.runtime.script("beta", failure="beta never became ready", last_log_lines=("waiting",), exit_code=None)
    with pytest.raises(StartupFailed) as caught:
        world.swap("beta")
    assert caught.value.exit_code == 3
    assert "nothing was serving before, so nothing runs now" in caught.value.message
    assert caught.value.last_log_lines == ("waiting",)
    assert world.runtime.profiles() == []


def test_an_engine_error_during_start_also_rolls_back(world: World) -> None:
    world.run("alpha")
    world.runtime.script("beta", error=EngineUnavailable("image servectl-standin:latest could not be built"))
    with pytest.raises(SwapRolledBack, match=r"could not be built.*alpha is back"):
        world.swap("beta")
    assert world.runtime.profiles() == ["alpha"]


def test_old_service_ignoring_sigterm_is_killed_and_reported(world: World) -> None:
    world.run("alpha")
    world.runtime.ignores_sigterm.add("alpha")
    result = world.swap("beta")
    assert result.forced_stop is True
    assert result.old_stop_s == pytest.approx(6.0)
    assert world.runtime.profiles() == ["beta"]


def test_cards_still_in_use_after_the_stop_keep_the_target_from_starting(world: World) -> None:
    world.run("alpha")
    world.runtime.leaks_pids["alpha"] = (31337,)
    with pytest.raises(SwapRolledBack, match=r"cards are still in use after alpha stopped \(pids 31337\)"):
        world.swap("beta")
    assert ("start", "beta") not in world.runtime.calls
    assert world.runtime.profiles() == ["alpha"]


# -- conflicts -----------------------------------------------------------------------------------------------
def test_conflicts_are_stopped_before_the_target_starts_and_stay_stopped(world: World) -> None:
    world.run("alpha")
    result = world.swap("gamma")
    assert world.conflicts.running == set()
    assert [s.ref for s in result.stopped_conflicts] == ["daily-driver"]
    assert [s.ref for s in load_stopped(world.state_dir)] == ["daily-driver"]
    assert "stopped container daily-driver" in result.message
    assert world.history.events()[-1]["stopped_conflicts"][0]["ref"] == "daily-driver"


def test_a_conflict_that_is_not_running_is_not_recorded(world: World) -> None:
    world.conflicts.running.clear()
    result = world.swap("gamma")
    assert result.stopped_conflicts == ()
    assert load_stopped(world.state_dir) == []


def test_conflicts_are_restored_when_the_target_fails(world: World) -> None:
    world.run("alpha")
    world.runtime.script("gamma", failure="gamma crashed")
    with pytest.raises(SwapRolledBack, match="restored container daily-driver"):
        world.swap("gamma")
    assert world.conflicts.running == {("container", "daily-driver")}
    assert load_stopped(world.state_dir) == []
    assert world.runtime.profiles() == ["alpha"]


def test_a_conflict_that_cannot_be_restored_is_named_with_the_command(world: World) -> None:
    world.runtime.script("gamma", failure="gamma crashed")
    world.conflicts.fail_restore.add("daily-driver")
    with pytest.raises(StartupFailed, match=r"could not restore container daily-driver .*`docker start daily-driver`"):
        world.swap("gamma")
    assert [s.ref for s in load_stopped(world.state_dir)] == ["daily-driver"]


def test_a_conflict_that_cannot_be_stopped_rolls_back(world: World) -> None:
    world.run("alpha")
    world.conflicts.fail_stop.add("daily-driver")
    with pytest.raises(SwapRolledBack, match="stopping the conflicts of gamma failed, so gamma was not started"):
        world.swap("gamma")
    assert ("start", "gamma") not in world.runtime.calls
    assert world.runtime.profiles() == ["alpha"]


# -- signals -------------------------------------------------------------------------------------------------
def test_sigint_while_the_target_starts_removes_it_and_restores_the_previous(world: World) -> None:
    world.run("alpha")
    before = signal.getsignal(signal.SIGINT)
    world.runtime.script("beta", hook=signal_self(signal.SIGINT))
    with pytest.raises(SwapRolledBack) as caught:
        world.swap("beta")
    assert caught.value.exit_code == 4
    assert caught.value.message.startswith("interrupted (SIGINT) during start-target")
    assert "previous service alpha is back" in caught.value.message
    assert world.runtime.profiles() == ["alpha"]
    assert read_journal(world.state_dir) is None
    assert signal.getsignal(signal.SIGINT) is before
    assert world.history.events()[-1]["outcome"] == "interrupted"  # after the restored service's "up"


def test_sigterm_while_the_old_service_stops_restores_it(world: World) -> None:
    world.run("alpha")
    runtime_stop = world.runtime.stop

    def stop_then_signal(**kwargs: Any) -> Any:
        result = runtime_stop(**kwargs)
        if kwargs["service"].profile == "alpha" and ("start", "alpha") not in world.runtime.calls:
            os.kill(os.getpid(), signal.SIGTERM)
        return result

    world.runtime.stop = stop_then_signal  # type: ignore[method-assign]
    with pytest.raises(SwapRolledBack, match=r"interrupted \(SIGTERM\) during stop-old"):
        world.swap("beta")
    assert ("start", "beta") not in world.runtime.calls
    assert world.runtime.profiles() == ["alpha"]


def test_a_signal_before_anything_changed_leaves_the_old_service_untouched(world: World) -> None:
    world.run("alpha")
    world.preflight_hook = signal_self(signal.SIGINT)
    with pytest.raises(SwapInterrupted, match="before anything changed") as caught:
        world.swap("beta")
    assert caught.value.exit_code == 130
    assert world.runtime.calls == [("ensure_image", "beta")]  # nothing stopped or started
    assert world.runtime.profiles() == ["alpha"]


def test_a_second_signal_while_restoring_stops_waiting_and_leaves_a_status_hint(world: World) -> None:
    world.run("alpha")
    world.runtime.script("beta", hook=signal_self(signal.SIGINT))
    world.runtime.script("alpha", hook=signal_self(signal.SIGINT))
    with pytest.raises(SwapInterrupted) as caught:
        world.swap("beta")
    message = caught.value.message
    assert caught.value.exit_code == 130
    assert "stopped waiting after SIGINT" in message
    # a swap would be refused while the journal is kept: the way on is recover
    assert "`servectl status`" in message and "`servectl recover` (it starts alpha again)" in message
    journal = read_journal(world.state_dir)
    assert isinstance(journal, SwapJournal)
    assert (journal.from_profile, journal.to_profile, journal.phase) == ("alpha", "beta", "abandoned")
    assert "running now:" in journal.note


def test_a_signal_after_the_target_passed_the_gate_does_not_undo_the_swap(world: World) -> None:
    world.run("alpha")

    def on_phase(event: PhaseEvent) -> None:
        if event.phase == "start-target" and event.duration_s is not None:
            os.kill(os.getpid(), signal.SIGINT)  # the target is up and acknowledged

    result = swap(world.context(), target="beta", opts=world.opts(on_phase=on_phase))
    assert result.outcome == "swapped"
    assert world.runtime.profiles() == ["beta"]
    assert read_journal(world.state_dir) is None


def test_a_journal_left_by_a_killed_swap_is_kept_until_recover_settles_it(world: World) -> None:
    world.state_dir.mkdir(parents=True)
    stale = SwapJournal(pid=1, from_profile="alpha", to_profile="beta", phase="abandoned", started_at=1.0)
    (world.state_dir / JOURNAL_FILE).write_text(json.dumps(stale.to_dict()), encoding="utf-8")
    world.run("beta")
    with pytest.raises(UnfinishedTransaction, match=r"unfinished swap: a swap from alpha to beta .*`servectl recover`"):
        world.swap("alpha")  # a later swap (or a typo) never erases the note of an unsettled one
    assert read_journal(world.state_dir) == stale


# -- rollback ------------------------------------------------------------------------------------------------
def test_previous_profile_is_what_the_current_profile_replaced_or_the_run_before_it() -> None:
    events = [
        {"event": "up", "profile": "a"},
        {"event": "swap", "profile": "b", "replaced": "a"},
        {"event": "swap-failed", "profile": "c", "replaced": "b", "outcome": "rolled-back"},
        {"event": "up", "profile": "b", "restored_after": "c"},
        {"event": "down", "profile": "b"},
        {"event": "up", "profile": "x"},
    ]
    assert previous_profile(events, "x") == "b"  # no `replaced`: the run before it
    assert previous_profile(events, "b") == "a"  # the restore event has no `replaced`; a ran before b
    assert previous_profile(events, "c") is None  # c never served
    assert previous_profile([{"event": "swap", "profile": "b", "replaced": "a"}], "b") == "a"
    assert previous_profile([], "b") is None


def test_rollback_swaps_back_to_the_profile_that_ran_before(world: World) -> None:
    world.run("alpha")
    world.swap("gamma")
    result = rollback(world.context(), opts=world.opts())
    assert (result.from_profile, result.to_profile, result.outcome) == ("gamma", "alpha", "swapped")
    assert world.history.events()[-1]["event"] == "rollback"
    again = rollback(world.context(), opts=world.opts())  # rolling back twice goes forward again
    assert (again.from_profile, again.to_profile) == ("alpha", "gamma")


def test_rollback_without_history_says_what_to_use(world: World) -> None:
    world.run("alpha")
    with pytest.raises(UsageError, match="the history has no profile that ran before alpha"):
        rollback(world.context(), opts=world.opts())


def test_rollback_with_nothing_running_is_a_usage_error(world: World) -> None:
    with pytest.raises(UsageError, match="nothing of servectl runs"):
        rollback(world.context(), opts=world.opts())


# -- rollback-check ------------------------------------------------------------------------------------------
class Images:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def image_present(self, ref: str) -> bool:
        return ref in self.present


def test_rollback_check_passes_when_the_target_could_start(world: World) -> None:
    world.run("alpha")
    [check] = rollback_check(
        world.context(docker=Images({"servectl-standin:latest"})), names=["alpha"], preflight=world.preflight
    )
    assert check.ok, check.items
    assert check.target == "beta"
    assert [i.check for i in check.items] == ["declared", "validates", "image", "model", "preflight"]
    assert "once alpha is stopped" in check.items[-1].message
    assert world.preflight_calls == [("beta", "alpha")]
    assert world.runtime.calls == []


def test_rollback_check_names_each_problem(world: World, env: Path) -> None:
    folder = env / "profiles-under-test"
    write_profile(folder, "src1", rollback="nomodel")
    write_profile(folder, "nomodel", extra="model:\n  path: /does/not/exist\n")
    write_profile(folder, "src2", rollback="broken")
    (folder / "broken.yaml").write_text("name: broken\nextends: demo\nengine:\n  tp: zero\n", encoding="utf-8")
    world.preflight_error = PreflightFailed("port.free: 127.0.0.1:8190 is in use by pid 77")

    checks = rollback_check(
        world.context(docker=Images(set())), names=["src1", "src2", "gamma"], preflight=world.preflight
    )

    by_name = {c.profile: c for c in checks}
    assert not any(c.ok for c in checks)
    failed = {i.check: i.message for i in by_name["src1"].items if not i.ok}
    assert "does not exist; fix model.path of nomodel" in failed["model"]
    assert "pid 77" in failed["preflight"]
    assert "builds it at start" in next(i.message for i in by_name["src1"].items if i.check == "image")
    broken = {i.check: i.message for i in by_name["src2"].items if not i.ok}
    assert "broken does not validate" in broken["validates"] and "engine.tp" in broken["validates"]
    assert by_name["gamma"].items[0].message == "gamma declares no `rollback:` target"


def test_rollback_check_requires_the_pinned_digest(world: World, env: Path) -> None:
    folder = env / "profiles-under-test"
    digest = "sha256:" + "ab" * 32
    write_profile(folder, "pinsrc", rollback="pinned")
    write_profile(folder, "pinned", extra=f"image:\n  ref: example/engine:1\n  digest: '{digest}'\n  build: null\n")
    [missing] = rollback_check(
        world.context(docker=Images({"example/engine:1"})), names=["pinsrc"], preflight=world.preflight
    )
    image = next(i for i in missing.items if i.check == "image")
    assert not image.ok and digest in image.message and "docker pull example/engine:1@" in image.message
    [present] = rollback_check(
        world.context(docker=Images({f"example/engine:1@{digest}"})), names=["pinsrc"], preflight=world.preflight
    )
    assert next(i for i in present.items if i.check == "image").ok


# -- recover: a transaction killed with kill -9 -----------------------------------------------------------------
class SimulatedKill(BaseException):
    """Stands for SIGKILL: nothing of servectl runs after it (no except clause, no finally of ours)."""


def kill_swap_during_start(world: World, env: Path, target: str, *, orphan_state: str = "starting") -> None:
    """Run a swap to ``target`` and 'kill -9' it while the target starts; the orphaned container remains."""

    def die(runtime: Any) -> None:
        raise SimulatedKill

    world.runtime.script(target, hook=die, times=1)
    with pytest.raises(SimulatedKill):
        world.swap(target)
    world.run(target, state=orphan_state)  # the container kept starting after servectl died


def recover_context(world: World, **given: Any) -> Context:
    """What ``recover`` works with: the fakes, but the state folder's own lock and the real clocks."""
    parts: dict[str, Any] = {
        "docker": FakeDockerEngine(),
        "nvml": False,
        "runtime": world.runtime,
        "conflicts": world.conflicts,
        "history": world.history,
        "state_dir": world.state_dir,
    }
    return Context(**{**parts, **given})


def test_kill_9_during_a_swap_recovers_to_the_previous_service_as_it_ran(world: World, env: Path) -> None:
    world.run("alpha")
    kill_swap_during_start(world, env, "beta")
    journal = read_journal(world.state_dir)
    assert journal is not None and (journal.phase, journal.from_profile) == ("start-target", "alpha")
    assert journal.previous is not None and journal.previous.data["name"] == "alpha"
    ran_hash = journal.previous.plan_hash
    # alpha's file changes after the swap began: recovery must restore what ran, not today's file
    alpha_file = env / "profiles-under-test" / "alpha.yaml"
    alpha_file.write_text(alpha_file.read_text() + "engine:\n  max_running_requests: 2\n")
    assert resolve("alpha", environ=os.environ).plan.plan_hash != ran_hash
    with pytest.raises(UnfinishedTransaction, match="servectl recover"):
        world.swap("alpha")  # every command that changes services refuses until it is settled
    cards = FakeGpuInventory.scenario("two_free_sm120")
    result = recover(recover_context(world, gpus=cards))
    assert result.outcome == "restored" and result.restored == "alpha"
    assert "beta" in result.removed[0] and "it never passed its health gate" in result.message
    assert world.runtime.stop_gpus[-1] is cards  # the orphan's stop waited for the cards, as swap's does
    assert world.runtime.profiles() == ["alpha"]
    assert world.runtime.running["swaptest-alpha"].plan_hash == ran_hash
    assert read_journal(world.state_dir) is None
    restored = [e for e in world.history.events() if e.get("restored_after") == "beta"]
    assert restored and restored[-1]["profile"] == "alpha" and restored[-1]["plan_hash"] == ran_hash


def test_rollback_after_kill_9_uses_the_journal_not_the_history(world: World, env: Path) -> None:
    world.run("alpha")
    kill_swap_during_start(world, env, "beta")
    # the history knows nothing of this swap; rollback must still go back to alpha
    cards = FakeGpuInventory.scenario("two_free_sm120")
    result = rollback(world.context(gpus=cards), opts=world.opts())
    assert result.to_profile == "alpha" and "rolled back from the journal" in result.message
    assert world.runtime.stop_gpus[-1] is cards  # rollback's cards reach recover's stops
    assert world.runtime.profiles() == ["alpha"]
    assert read_journal(world.state_dir) is None


def test_recover_finishes_a_swap_whose_target_had_passed_its_gate(world: World, env: Path) -> None:
    world.run("alpha")
    kill_swap_during_start(world, env, "beta", orphan_state="ready")
    beta = world.runtime.running["swaptest-beta"]
    GateRecord(world.state_dir).mark(beta.container_id)
    result = recover(recover_context(world))
    assert result.outcome == "finished" and "beta passed its health gate and runs" in result.message
    assert world.runtime.profiles() == ["beta"]
    assert world.history.events()[-1]["event"] == "swap" and world.history.events()[-1]["replaced"] == "alpha"


def test_recover_with_nothing_to_settle_says_so(world: World) -> None:
    assert recover(recover_context(world)).outcome == "nothing"


def test_recover_with_a_damaged_journal_removes_only_unproven_services(world: World) -> None:
    world.run("alpha")
    GateRecord(world.state_dir).mark(world.runtime.running["swaptest-alpha"].container_id)
    world.run("other", state="starting")
    (world.state_dir / JOURNAL_FILE).write_bytes(b"\xff\x00 not a journal")
    result = recover(recover_context(world))
    assert result.outcome == "cleared" and result.removed == ("swaptest-other",)
    assert "running now: alpha" in result.message
    assert world.runtime.profiles() == ["alpha"]
    assert not (world.state_dir / JOURNAL_FILE).exists()


def test_damaged_journal_is_one_line_for_swap(world: World) -> None:
    world.state_dir.mkdir(parents=True, exist_ok=True)
    (world.state_dir / JOURNAL_FILE).write_text('{"pid": "x"')
    with pytest.raises(StateDamaged) as info:
        world.swap("alpha")
    (line,) = info.value.lines()
    assert line.startswith(str(world.state_dir / JOURNAL_FILE)) and "not valid JSON" in line


def test_start_previous_phase_is_not_ok_when_the_previous_service_failed(world: World) -> None:
    world.run("alpha")
    world.runtime.script("beta", failure="beta: boom")
    world.runtime.script("alpha", failure="alpha: boom too")
    with pytest.raises(SwapFailed) as info:
        world.swap("beta")
    result = info.value.result
    assert isinstance(result, SwapResult)
    assert [p.ok for p in result.phases if p.phase == "start-previous"] == [False]


def test_after_a_failure_with_nothing_to_restore_the_cards_are_waited_for_with_the_swap_clock(
    world: World, env: Path
) -> None:
    write_profile(env / "profiles-under-test", "epsilon", extra="gpus:\n  devices: [0]")
    world.runtime.script("epsilon", failure="epsilon never became ready")
    lost = FakeGpuInventory.scenario("gpu_lost", card=0)
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the swap's clock moves only when the wait sleeps
        naps.append(seconds)
        world.clock.advance(seconds)

    with pytest.raises(StartupFailed, match=r"cards 0 could not all be read \(card 0\): check them with nvidia-smi"):
        swap(world.context(gpus=lost, clocks=replace(world.clocks, sleep=sleep)), target="epsilon", opts=world.opts())
    assert sum(naps) == pytest.approx(30.0) and world.history.events()[-1]["outcome"] == "failed"


def test_rollback_warns_when_the_previous_profile_changed_since_it_ran(world: World, env: Path) -> None:
    world.run("alpha")
    world.swap("beta")
    world.history.record({"event": "up", "profile": "alpha", "plan_hash": "0000000000000000"})
    world.history.record({"event": "swap", "profile": "beta", "replaced": "alpha"})
    result = rollback(world.context(), opts=world.opts())
    assert result.to_profile == "alpha"
    assert "note: alpha last ran with plan 0000000000000000, its profile now compiles to" in result.message


# -- one undo: a failed swap, a killed swap and rollback end the same way ---------------------------------------
def test_a_failed_swap_and_a_killed_swap_restore_the_same_snapshot(world: World, env: Path) -> None:
    """Both ways back start the previous service from the journal's snapshot, not from today's file."""
    alpha_file = env / "profiles-under-test" / "alpha.yaml"
    original = alpha_file.read_text()

    def edit_alpha(_: Any = None) -> None:  # the file changes while the swap runs
        alpha_file.write_text(original + "engine:\n  max_running_requests: 2\n")

    world.run("alpha")
    ran_hash = world.runtime.running["swaptest-alpha"].plan_hash
    world.runtime.script("beta", hook=edit_alpha, failure="beta exited during startup", times=1)
    with pytest.raises(SwapRolledBack):
        world.swap("beta")
    assert resolve("alpha", environ=os.environ).plan.plan_hash != ran_hash  # today's file compiles to another plan
    after_failure = world.runtime.running["swaptest-alpha"].plan_hash

    alpha_file.write_text(original)
    world.runtime.stop(service=world.runtime.running["swaptest-alpha"], gpus=NullGpuInventory("a test stop"))
    world.run("alpha")
    kill_swap_during_start(world, env, "beta")
    edit_alpha()
    recover(recover_context(world))
    after_kill = world.runtime.running["swaptest-alpha"].plan_hash

    assert after_failure == after_kill == ran_hash


def test_rollback_of_a_killed_swap_that_had_finished_goes_back_from_it(world: World, env: Path) -> None:
    """The killed swap had finished (its target passed the gate): rollback settles it, then rolls back."""
    world.run("alpha")
    kill_swap_during_start(world, env, "beta", orphan_state="ready")
    GateRecord(world.state_dir).mark(world.runtime.running["swaptest-beta"].container_id)
    result = rollback(world.context(), opts=world.opts())
    assert (result.from_profile, result.to_profile, result.outcome) == ("beta", "alpha", "swapped")
    assert result.message.startswith("the swap from alpha to beta had finished")
    assert "rolled back from the journal" not in result.message
    assert world.runtime.profiles() == ["alpha"]
    assert read_journal(world.state_dir) is None


def test_the_undo_is_the_only_way_back_in_the_service_layer() -> None:
    """Restoring conflicts and starting the previous service happen in one module (the undo)."""
    service = Path(__file__).resolve().parents[2] / "src" / "servectl" / "service"
    callers = {
        path.relative_to(service).as_posix()
        for path in service.rglob("*.py")
        if "restore_conflicts(" in path.read_text(encoding="utf-8")
        or "previous_resolved(" in path.read_text(encoding="utf-8")
    }
    assert callers == {"transaction/undo.py", "transaction/snapshot.py"}


def test_rollback_over_history_entries_of_the_wrong_shape_says_so_and_how_to_name_the_target(world: World) -> None:
    from servectl.adapters.state import History

    world.run("alpha")
    world.state_dir.mkdir(parents=True, exist_ok=True)
    history = [{"event": "up", "profile": 5}, {"event": "swap", "profile": "alpha", "replaced": ["beta"]}]
    (world.state_dir / "history.json").write_text(json.dumps(history), encoding="utf-8")
    with pytest.raises(UsageError) as info:
        rollback(world.context(history=History(world.state_dir, clock=time.time)), opts=world.opts())
    assert info.value.message.startswith(
        "the history has no profile that ran before alpha (2 entries of the wrong shape were ignored); "
        "name the target with `servectl swap NAME`"
    )


def test_a_failed_swap_that_replaced_nothing_says_what_still_serves_beside_it(world: World) -> None:
    """Issue 25: not "nothing was serving before" while a service on another port serves on."""
    world.run("other")
    world.runtime.script("beta", failure="beta exited during startup", exit_code=1)
    with pytest.raises(StartupFailed) as caught:
        world.swap("beta")
    message = caught.value.message
    assert "beta was removed; it replaced nothing, so nothing of it runs now; other still serves (not touched)" in (
        message
    )
    assert "nothing was serving before" not in message
    assert world.runtime.profiles() == ["other"]


def test_a_full_disk_while_undoing_is_one_line_and_keeps_what_runs_said(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from servectl.service.transaction import context

    real_write = context.write_journal

    def full_disk(state_dir: Path, journal: SwapJournal) -> None:
        if journal.phase == "remove-target":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(state_dir, journal)

    monkeypatch.setattr(context, "write_journal", full_disk)
    world.run("alpha")
    world.runtime.script("beta", failure="beta exited during startup", exit_code=1)
    with pytest.raises(SwapFailed) as caught:
        world.swap("beta")
    assert "cleanup failed: No space left on device" in caught.value.message
    assert "`servectl recover`" in caught.value.message
    assert read_journal(world.state_dir) is not None  # kept for recover
