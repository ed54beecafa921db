"""Signals during up/swap: a signal inside a Docker call that the engine finishes anyway is held until the
call returns, so the container it created is known and removed (it once leaked from the swap soak)."""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from servectl import signals
from servectl.adapters.state import History
from servectl.errors import UpInterrupted
from servectl.plan.resolve import resolve
from servectl.service import runtime
from servectl.service.context import Context
from servectl.signals import Interrupt, SignalGuard, critical
from servectl.standin.process import free_port
from servectl.testing.docker import FakeDockerEngine, sglang_like_script, write_test_profile
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe, fake_model_dir
from servectl.testing.http import FakeHttp


def test_a_signal_inside_a_critical_call_is_raised_once_the_call_returned() -> None:
    steps: list[str] = []
    with SignalGuard(True) as guard, pytest.raises(Interrupt) as caught:
        with critical():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after the signal, still inside")  # the handler ran, and held it
        steps.append("after the block")  # not reached: raised on leaving the block
    assert steps == ["after the signal, still inside"]
    assert caught.value.signum == signal.SIGINT and guard.received == [signal.SIGINT]


def test_a_signal_a_nested_guard_only_noted_stops_the_guard_around_it_when_it_exits() -> None:
    """A campaign's guard around one of its swaps: a Ctrl-C while the swap finished its bookkeeping (defer)
    is noted there, then handed on, so the campaign stops instead of running on."""
    steps: list[str] = []
    with SignalGuard(True) as outer, pytest.raises(Interrupt) as caught:
        with SignalGuard(True) as inner:
            inner.mode = "defer"
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("the swap finished its bookkeeping")
        steps.append("not reached")
    assert steps == ["the swap finished its bookkeeping"]
    assert caught.value.signum == signal.SIGINT and inner.deferred == [signal.SIGINT] and outer.received
    with SignalGuard(True) as alone:  # no guard around it: noted only, as before
        alone.mode = "defer"
        os.kill(os.getpid(), signal.SIGINT)
    assert alone.deferred == [signal.SIGINT]


def test_outside_a_guard_or_once_settled_a_critical_block_raises_nothing() -> None:
    with critical():
        pass
    with SignalGuard(True) as guard:
        guard.mode = "defer"
        with critical():
            os.kill(os.getpid(), signal.SIGTERM)
    assert guard.received == [signal.SIGTERM]


class SignalledEngine(FakeDockerEngine):
    """The engine creates and starts the container; SIGINT arrives before its id reaches servectl."""

    def create_and_start(self, spec: Any, *, environ: Any = None) -> str:
        cid = super().create_and_start(spec, environ=environ)
        os.kill(os.getpid(), signal.SIGINT)
        return cid


def test_sigint_while_docker_creates_the_container_removes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("SERVECTL_HOME", str(home))
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    write_test_profile(folder, "a", port=free_port())
    engine = SignalledEngine(
        images={"servectl-standin:latest"}, script_for=lambda s: sglang_like_script(0.1), sleep=lambda s: None
    )
    model = resolve("a", environ=os.environ).plan.docker.mounts[0].source
    host = FakeHostProbe(models={model: fake_model_dir(model, weights_bytes=10**6, weight_files=1)})
    with FakeHttp(engine.http_transport()) as http, pytest.raises(UpInterrupted):
        ctx = Context(
            docker=engine,
            http=http,
            gpus=FakeGpuInventory.scenario("two_free_sm120"),
            probe=host,
            environ={"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)},
            state_dir=home,
            lock_timeout_s=1,
        )
        runtime.up(ctx, name="a")
    assert [call for call, _ in engine.calls].count("create_and_start") == 1
    assert engine.containers == {}, "the container created during the signal was left behind"
    assert not any(e.get("event") == "up" for e in History(home, clock=time.time).events())


LATE = """
import os, signal, sys, time
from servectl.signals import SignalGuard, ignore_late_signals_at_exit, note_late_signals
if sys.argv[1] == "cli":
    note_late_signals()
else:  # a library user's process, with Python's own Ctrl-C handling (whatever this process inherited)
    signal.signal(signal.SIGINT, signal.default_int_handler)
with SignalGuard(True):
    pass  # the transaction settled
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the outcome is being reported
time.sleep(0.05)
print("reported")
ignore_late_signals_at_exit()  # what the CLI's main does last: Python's finalization keeps SIG_IGN
print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
"""


@pytest.mark.parametrize("mode", ["cli", "library"])
def test_in_the_cli_a_signal_after_the_outcome_is_settled_is_noted_not_fatal(mode: str) -> None:
    """The swap soak saw a finished swap die of a late SIGINT (exit -2) while printing its result."""
    import subprocess
    import sys

    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", LATE, mode], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}
    )
    if mode == "cli":
        assert (done.returncode, done.stdout) == (0, "reported\nTrue\n")
        assert done.stderr == "note: SIGINT arrived after the outcome was settled; ignored\n"
    else:  # a library user's process keeps its own handler (Python's: KeyboardInterrupt)
        assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr


def test_a_ctrl_c_wrapped_by_python_is_exit_130_and_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The soak's SIGINT landed while pydantic built a model class: Python wraps it in a RuntimeError."""
    from servectl import signals
    from servectl.cli import app as cli

    monkeypatch.setattr(signals._STATE, "note_late", False)  # main() must leave it as it was

    def building_a_class() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ctrl_c:
            raise RuntimeError("Error calling __set_name__ on 'PydanticDescriptorProxy' instance") from ctrl_c

    monkeypatch.setattr(cli, "app", building_a_class)
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"

    def a_bug() -> None:
        raise RuntimeError("a bug of servectl's own")

    monkeypatch.setattr(cli, "app", a_bug)
    with pytest.raises(RuntimeError, match="a bug"):  # anything else still surfaces as it is
        cli.main()
    assert signals._STATE.note_late is False  # main() leaves the process's signal handling alone (tests call it)


def test_the_console_entry_notes_late_signals_around_main_and_ignores_them_at_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from servectl import signals
    from servectl.cli import app as cli

    monkeypatch.setattr(signals._STATE, "note_late", False)
    during: list[bool] = []
    at_exit: list[bool] = []
    monkeypatch.setattr(cli, "main", lambda: during.append(signals._STATE.note_late))
    monkeypatch.setattr(signals, "ignore_late_signals_at_exit", lambda: at_exit.append(True))
    cli.entry()
    assert during == [True] and at_exit == [True]


def test_sigint_while_the_engine_creates_a_throwaway_container_still_removes_it() -> None:
    """engine.parse's container (preflight): the create returns, then the held signal is raised, then removed."""
    from types import SimpleNamespace

    from servectl.adapters.docker import DockerSdkEngine

    removed: list[bool] = []
    made = SimpleNamespace(remove=lambda force: removed.append(force))

    def create(*args: Any, **kwargs: Any) -> object:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the engine makes the container
        return made

    engine = DockerSdkEngine(environ=os.environ, client=SimpleNamespace(containers=SimpleNamespace(create=create)))
    with SignalGuard(True), pytest.raises(Interrupt):
        engine.run_oneshot("img", ["python3", "-c", "pass"], timeout_s=5)
    assert removed == [True]


def test_the_tests_run_with_pythons_own_signal_handling() -> None:
    """tests/conftest.py sets it, also when the runner started with SIGINT ignored (a background job)."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


class _Watched:
    """An object whose weakref callback is where the signal lands, as in importlib's module-lock callback."""


def test_a_signal_python_drops_inside_a_weakref_callback_still_interrupts(capsys: pytest.CaptureFixture[str]) -> None:
    """The swap soak once lost a Ctrl-C this way: the Interrupt raised in importlib's ``_ModuleLock`` weakref
    callback was printed as "Exception ignored in" with a traceback, and the swap ran on to the end."""
    landed: list[str] = []

    def callback(_ref: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here, inside the callback, where Python drops what it raises
            pass
        landed.append("the callback ended")

    watched = _Watched()
    ref = weakref.ref(watched, callback)
    steps: list[str] = []
    with SignalGuard(True) as guard, pytest.raises(Interrupt) as caught:
        del watched  # the callback runs now
        steps.append("after the callback")
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            time.sleep(0.005)
        steps.append("not reached: the signal came again and interrupted the wait")
    assert ref() is None and landed == []  # the Interrupt did stop the callback, and Python dropped it
    assert steps == ["after the callback"]
    assert caught.value.signum == signal.SIGINT and guard.received == [signal.SIGINT]
    assert "Exception ignored" not in capsys.readouterr().err
    assert sys.unraisablehook is not signals._unraisable  # the guard gave the hook back


def test_the_guard_leaves_other_dropped_exceptions_to_the_hook_it_replaced() -> None:
    seen: list[BaseException | None] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: seen.append(unraisable.exc_value)
    try:

        def callback(_ref: object) -> None:
            raise ValueError("a bug in a callback, not a signal")

        watched = _Watched()
        ref = weakref.ref(watched, callback)
        with SignalGuard(True):
            del watched
        assert ref() is None
        assert len(seen) == 1 and isinstance(seen[0], ValueError)
    finally:
        sys.unraisablehook = previous
