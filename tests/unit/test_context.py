"""The one Context: each adapter opened on first use and kept, closed only when the context opened it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from servectl.adapters.gpu import NullGpuInventory, reads_cards
from servectl.errors import GpuUnavailable, UsageError
from servectl.service.container import DockerRuntime
from servectl.service.context import Context, lock_timeout_default
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.fakes import FakeGpuInventory


class Opened:
    """Stands in for the Docker SDK engine and NVML: records opening and closing."""

    log: ClassVar[list[str]] = []

    def __init__(self, what: str, *, answers: bool = True) -> None:
        self.what, self.answers = what, answers
        Opened.log.append(f"open {what}")

    def snapshot(self) -> Any:
        if not self.answers:
            raise GpuUnavailable("no driver (test)")
        return ()

    def close(self) -> None:
        Opened.log.append(f"close {self.what}")


@pytest.fixture
def real_adapters(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import servectl.adapters.docker as docker_adapter
    import servectl.adapters.gpu as gpu_adapter

    Opened.log = []
    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", lambda **_: Opened("docker"))
    monkeypatch.setattr(gpu_adapter, "NvmlInventory", lambda: Opened("nvml", answers=False))
    return Opened.log


def test_nothing_opens_until_used_each_part_is_kept_and_close_closes_what_it_opened(
    real_adapters: list[str], tmp_path: Path
) -> None:
    ctx = Context(environ={"SERVECTL_HOME": str(tmp_path)})
    assert ctx.state_dir == tmp_path and real_adapters == []
    runtime = ctx.runtime
    assert isinstance(runtime, DockerRuntime) and runtime.docker is ctx.docker and runtime.state_dir == tmp_path
    assert ctx.runtime is runtime and real_adapters == ["open docker"]  # built once
    cards = ctx.gpus  # the one door: NVML is opened at the first read, not here
    assert ctx.gpus is cards and real_adapters == ["open docker"]
    assert not reads_cards(cards) and real_adapters == ["open docker", "open nvml"]  # no driver: no wait on a card
    with pytest.raises(GpuUnavailable, match=r"no driver \(test\)"):  # NVML's reason, each read; asked once
        cards.snapshot()
    assert real_adapters == ["open docker", "open nvml"]
    ctx.close()
    assert real_adapters == ["open docker", "open nvml", "close docker", "close nvml"]
    with pytest.raises(UsageError, match="closed"):
        _ = ctx.docker
    with pytest.raises(UsageError, match="closed"):
        _ = ctx.runtime


def test_given_adapters_are_used_as_they_are_and_stay_open(real_adapters: list[str], tmp_path: Path) -> None:
    engine, gpus = FakeDockerEngine(), FakeGpuInventory.scenario("two_free_sm120")
    ctx = Context(docker=engine, gpus=gpus, state_dir=tmp_path)
    assert ctx.docker is engine and ctx.gpus is gpus
    ctx.close()
    assert real_adapters == []  # nothing of its own was opened, nothing closed


def test_without_nvml_the_inventory_is_a_null_one_that_reads_no_card(tmp_path: Path) -> None:
    ctx = Context(docker=FakeDockerEngine(), nvml=False, state_dir=tmp_path)
    assert isinstance(ctx.gpus, NullGpuInventory) and ctx.gpus is ctx.gpus and not reads_cards(ctx.gpus)
    with pytest.raises(GpuUnavailable, match="reads no GPUs"):
        ctx.gpus.snapshot()


def test_the_inventory_opens_nvml_at_its_first_read_and_asks_a_driver_that_answers_again(
    real_adapters: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servectl.adapters.gpu as gpu_adapter

    monkeypatch.setattr(gpu_adapter, "NvmlInventory", lambda: Opened("nvml"))
    ctx = Context(docker=FakeDockerEngine(), state_dir=tmp_path)
    cards = ctx.gpus
    assert real_adapters == [] and reads_cards(cards) and real_adapters == ["open nvml"]
    assert cards.snapshot() == () and cards.snapshot() == () and real_adapters == ["open nvml"]  # opened once
    ctx.close()
    assert real_adapters == ["open nvml", "close nvml"]


def test_the_lock_waits_the_given_time_else_the_environments(tmp_path: Path) -> None:
    ctx = Context(environ={"SERVECTL_LOCK_TIMEOUT_S": "3.5"}, state_dir=tmp_path)
    assert ctx.lock_timeout_s == 3.5
    assert ctx.lock("up demo", timeout_s=0.5).timeout_s == 0.5  # type: ignore[attr-defined]
    assert Context(lock_timeout_s=2.0, state_dir=tmp_path).lock("x").timeout_s == 2.0  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="SERVECTL_LOCK_TIMEOUT_S='soon' is not a number"):
        lock_timeout_default({"SERVECTL_LOCK_TIMEOUT_S": "soon"})


def test_doctor_checks_a_short_lived_engine_unless_the_context_has_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import servectl.adapters.docker as docker_adapter
    from servectl.service.context import CHECK_DOCKER_TIMEOUT_S

    Opened.log = []
    timeouts: list[float] = []

    def engine(*, environ: object, timeout_s: float) -> Opened:
        timeouts.append(timeout_s)
        return Opened("docker")

    monkeypatch.setattr(docker_adapter, "DockerSdkEngine", engine)
    ctx = Context(environ={"SERVECTL_HOME": str(tmp_path)})
    with ctx.docker_to_check() as checked:
        assert isinstance(checked, Opened) and Opened.log == ["open docker"]
    assert Opened.log == ["open docker", "close docker"] and timeouts == [CHECK_DOCKER_TIMEOUT_S]
    given = FakeDockerEngine()
    with Context(docker=given, state_dir=tmp_path).docker_to_check() as checked:
        assert checked is given
    assert Opened.log == ["open docker", "close docker"]  # the given one is neither opened nor closed
