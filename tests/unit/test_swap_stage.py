"""The staging step in the swap transaction: after preflight, before the stop; a failure changes nothing (fakes)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.host import HostMemory
from servectl.errors import PreflightFailed
from servectl.plan.resolve import Resolved, resolve
from servectl.service.context import Clocks, Context
from servectl.service.health import Progress
from servectl.service.journal import read_journal
from servectl.service.rollback import rollback
from servectl.service.stage import StageReport, stager
from servectl.service.swap import PhaseEvent, SwapOptions, SwapResult, swap
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeHostProbe
from servectl.testing.swap import FakeClock, FakeConflicts, FakeHistory, FakeLock, FakeRuntime

PROFILE = (
    "name: {name}\nextends: demo\nrollback: {rollback}\nmodel:\n  path: {model}\ncontainer:\n  name: stagetx-{name}\n"
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"w" * 3 * 2**20)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_PROFILES", str(profiles))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    for name, back in (("alpha", "beta"), ("beta", "alpha")):
        (profiles / f"{name}.yaml").write_text(PROFILE.format(name=name, rollback=back, model=model), encoding="utf-8")
    return tmp_path


class World:
    def __init__(self, state_dir: Path) -> None:
        self.clock = FakeClock()
        self.runtime = FakeRuntime(self.clock, stop_s=1.0)
        self.history = FakeHistory()
        self.state_dir = state_dir
        self.order: list[str] = []
        self.events: list[PhaseEvent] = []

    def preflight(self, *, resolved: Resolved, **_: Any) -> None:
        self.order.append(f"preflight {resolved.name}")

    def context(self) -> Context:
        return Context(
            docker=FakeDockerEngine(images={"servectl-standin:latest"}),
            nvml=False,
            runtime=self.runtime,
            conflicts=FakeConflicts(),
            history=self.history,
            lock=FakeLock(),
            state_dir=self.state_dir,
            clocks=Clocks(monotonic=self.clock, wall=lambda: 1.7e9),
        )

    def swap(self, target: str, stage: Any) -> SwapResult:
        opts = SwapOptions(preflight=self.preflight, on_phase=self.events.append, stage=stage)
        return swap(self.context(), target=target, opts=opts)

    def recording(self, real: Callable[..., StageReport]) -> Callable[..., StageReport]:
        def stage(**kwargs: Any) -> StageReport:
            self.order.append(f"stage {kwargs['resolved'].name} (running: {','.join(self.runtime.profiles())})")
            return real(**kwargs)

        return stage


@pytest.fixture
def world(env: Path) -> World:
    w = World(env / "home")
    w.runtime.run(resolve("alpha", environ=os.environ))
    return w


def probe() -> FakeHostProbe:
    return FakeHostProbe(host_memory=HostMemory(total_bytes=64 * 2**30, available_bytes=32 * 2**30))


def test_the_target_is_staged_after_preflight_while_the_old_service_still_runs(world: World) -> None:
    result = world.swap("beta", world.recording(stager(probe(), clock=time.monotonic)))
    assert result.outcome == "swapped"
    assert world.order == ["preflight beta", "stage beta (running: alpha)"]
    assert [p.phase for p in result.phases] == [
        "lock",
        "validate",
        "image",
        "preflight",
        "stage",
        "stop-old",
        "start-target",
    ]
    staged = [e for e in world.events if e.phase == "stage" and e.kind == "progress"]
    assert [e.step for e in staged] == ["image", "weights", "weights", "staged"]
    assert "read 3.0 MiB of weights ahead" in (staged[-1].detail or "")
    assert "stand-in image parses" in (staged[-1].detail or "")


def test_a_staging_failure_stops_nothing_and_leaves_no_journal(world: World) -> None:
    def failing(**kwargs: Any) -> StageReport:
        raise PreflightFailed(
            "profiles/beta.yaml: image.digest: staging beta: not the pinned image (nothing was stopped)"
        )

    with pytest.raises(PreflightFailed, match=r"image\.digest: staging beta"):
        world.swap("beta", failing)
    assert world.runtime.calls == [("ensure_image", "beta")]  # nothing stopped or started
    assert world.runtime.profiles() == ["alpha"]
    assert world.history.events() == []
    assert read_journal(world.state_dir) is None
    assert [(e.phase, e.ok) for e in world.events if e.kind == "end"][-1] == ("stage", False)


def test_no_stage_leaves_the_step_out(world: World) -> None:
    result = world.swap("beta", None)
    assert "stage" not in [p.phase for p in result.phases]


def test_rollback_is_staged_too(world: World) -> None:
    world.swap("beta", None)
    seen: list[str] = []

    def stage(**kwargs: Any) -> StageReport:
        seen.append(kwargs["resolved"].name)
        on_progress: Callable[[Progress], None] = kwargs["on_progress"]
        on_progress(Progress("image", "x"))
        return stager(probe(), clock=time.monotonic)(**kwargs)

    result = rollback(world.context(), opts=SwapOptions(preflight=world.preflight, stage=stage))
    assert (result.to_profile, seen) == ("alpha", ["alpha"])


def test_a_swap_hands_its_preflight_and_its_staging_one_parse_memo(env: Path) -> None:
    """The image's verdict on the argv is had once a swap: preflight and staging share the swap's memo."""
    from servectl.adapters.engine_image import ParseMemo

    world = World(env / "home")
    got: list[object] = []

    def preflight(**kwargs: Any) -> None:
        got.append(kwargs["parses"])

    def stage(**kwargs: Any) -> StageReport:
        got.append(kwargs["parses"])
        return stager(
            FakeHostProbe(host_memory=HostMemory(total_bytes=2**40, available_bytes=2**39)), clock=time.monotonic
        )(**kwargs)

    swap(world.context(), target="alpha", opts=SwapOptions(preflight=preflight, stage=stage))
    swap(world.context(), target="beta", opts=SwapOptions(preflight=preflight, stage=stage))
    first, first_stage, second, second_stage = got
    assert isinstance(first, ParseMemo) and first is first_stage
    assert isinstance(second, ParseMemo) and second is second_stage and second is not first  # one memo a swap
