"""swap through the real runtime (start, stop, health gate, history) on the fake Docker engine.

These pin that swap and :mod:`servectl.service.runtime` agree: the history events make the runtime count the new
container as ready, a crash's log lines reach the message, containers are gone after a failure. The
transaction's own branches are covered with lighter fakes in test_swap.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.adapters.docker import ContainerState, ImageInfo, PublishedPort
from servectl.adapters.http import StandardHttp
from servectl.adapters.state import History
from servectl.errors import PreflightFailed, SwapFailed, SwapRolledBack
from servectl.paths import state_dir
from servectl.plan.compile import DockerRunSpec
from servectl.plan.resolve import Resolved, resolve
from servectl.service.clocks import Clocks
from servectl.service.container import DockerRuntime
from servectl.service.context import Context
from servectl.service.services import ServiceInfo, ServiceRecords, services
from servectl.service.swap import PhaseEvent, SwapOptions, profile_preflight, swap
from servectl.testing.docker import FakeDockerEngine, FakeScript, sglang_like_script
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe, fake_model_dir
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeConflicts, FakeHistory

PROFILE = "name: {name}\nextends: demo\nrollback: {rollback}\ncontainer:\n  name: fake-{name}\n"


def on_engine(engine: FakeDockerEngine) -> Context:
    """A context on the fake engine: the real runtime with the engine's HTTP transport bound in (the gate probes
    through it), with environment {} for the engine, and conflicts in memory."""
    http = FakeHttp(engine.http_transport())
    rt = DockerRuntime(
        docker=engine,
        http=http,
        environ={},
        state_dir=state_dir(environ=os.environ),
        history=History(state_dir(environ=os.environ), clock=time.time),
        clocks=Clocks(),
    )
    return Context(docker=engine, http=http, runtime=rt, conflicts=FakeConflicts(), nvml=False)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    for name, rollback in (("alpha", "beta"), ("beta", "alpha")):
        (folder / f"{name}.yaml").write_text(PROFILE.format(name=name, rollback=rollback), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    monkeypatch.setenv("SERVECTL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def engine_with(scripts: dict[str, FakeScript]) -> FakeDockerEngine:
    def script_for(spec: DockerRunSpec) -> FakeScript:
        return scripts.get(spec.name, sglang_like_script(0.1))

    return FakeDockerEngine(images={"servectl-standin:latest"}, script_for=script_for, sleep=lambda s: None)


@pytest.fixture
def started(home: Path) -> Iterator[Any]:
    """Run a swap on a fresh fake engine where alpha already serves (started through the runtime)."""

    def run(scripts: dict[str, FakeScript], target: str = "beta") -> tuple[FakeDockerEngine, Any]:
        engine = engine_with(scripts)
        rt = on_engine(engine)
        first = swap(rt, target="alpha", opts=NO_PREFLIGHT)
        assert first.outcome == "started"
        try:
            return engine, swap(rt, target=target, opts=NO_PREFLIGHT)
        except (SwapRolledBack, SwapFailed) as err:
            return engine, err

    yield run


def no_preflight(**kwargs: Any) -> None:
    return None


NO_PREFLIGHT = SwapOptions(preflight=no_preflight)


def names(engine: FakeDockerEngine) -> list[str]:
    return sorted(c.spec.name for c in engine.containers.values())


def services_seen(engine: Any, home: Path) -> list[ServiceInfo]:
    """The services status would list, read from the history (no health probe, no plan hashes)."""
    records = ServiceRecords(home, History(home, clock=time.time))
    return services(
        docker=engine, http=StandardHttp(), probe=False, plan_hash_of=None, records=records, clock=time.time
    )


def test_a_swap_through_the_runtime_leaves_the_target_ready_in_the_runtimes_eyes(started: Any, home: Path) -> None:
    engine, result = started({})
    assert result.outcome == "swapped"
    assert names(engine) == ["fake-beta"]
    [service] = services_seen(engine, home)
    assert (service.profile, service.state) == ("beta", "ready")  # the history says it passed the gate
    assert History(home, clock=time.time).previous_profile() == "alpha"
    assert result.downtime_s is not None and result.downtime_s >= result.target_startup_s


def test_a_crashing_target_through_the_runtime_brings_alpha_back_with_the_crash_in_the_message(
    started: Any, home: Path
) -> None:
    engine, err = started({"fake-beta": sglang_like_script(0.1, crash_at="kv_cache", exit_code=3)})
    assert isinstance(err, SwapRolledBack)
    assert err.message.startswith("beta failed: the engine exited with code 3 while loading weights")
    assert "the container was removed" not in err.message  # said once, by swap: "beta was removed"
    assert "    Scheduler hit an exception: RuntimeError: injected" in err.message.splitlines()
    assert names(engine) == ["fake-alpha"]
    [service] = services_seen(engine, home)
    assert (service.profile, service.state) == ("alpha", "ready")


def test_both_failing_through_the_runtime_leaves_no_container(started: Any, home: Path) -> None:
    crash = sglang_like_script(0.1, crash_at="weights", exit_code=7)
    engine = engine_with({"fake-beta": crash})
    rt = on_engine(engine)
    swap(rt, target="alpha", opts=NO_PREFLIGHT)
    engine.script_for = lambda spec: crash  # from now on alpha crashes too
    with pytest.raises(SwapFailed, match="did not come back either") as caught:
        swap(rt, target="beta", opts=NO_PREFLIGHT)
    assert names(engine) == []
    assert "last log lines of alpha" in caught.value.message


def test_an_old_service_that_ignores_sigterm_is_reported_as_forced(started: Any) -> None:
    engine = engine_with({"fake-alpha": FakeScript(sglang_like_script(0.1).lines, ignore_sigterm=True)})
    rt = on_engine(engine)
    swap(rt, target="alpha", opts=NO_PREFLIGHT)
    result = swap(rt, target="beta", opts=NO_PREFLIGHT)
    assert result.forced_stop is True
    assert names(engine) == ["fake-beta"]


# -- the preflight swap runs ---------------------------------------------------------------------------
def adapters_with(resolved: Resolved, *containers: ContainerState) -> tuple[Any, Any, Any]:
    model_dir = resolved.plan.docker.mounts[0].source
    host = FakeHostProbe(models={model_dir: fake_model_dir(model_dir, weights_bytes=10**6, weight_files=1)})
    facts = FakeDockerEngine(
        images=[ImageInfo(id="sha256:" + "1" * 64, repo_digests=(), tags=("servectl-standin:latest",))],
        running=list(containers),
    )
    return FakeGpuInventory.of(), host, facts


def on_port(name: str, container_id: str, port: int, **labels: str) -> ContainerState:
    return ContainerState(
        id=container_id,
        name=name,
        image="other:1",
        status="running",
        labels=labels,
        ports=(PublishedPort("127.0.0.1", port, port),),
    )


@pytest.fixture
def resolved(home: Path) -> Resolved:
    return resolve("beta", environ=os.environ)


def run_check(resolved: Resolved, adapters: Any, *, replacing: Any = None, skip: frozenset[str] = frozenset()) -> Any:
    """swap's preflight with the given (GPU inventory, host probe, Docker engine): one client for everything."""
    gpus, host, docker = adapters
    reports: list[Any] = []
    check = profile_preflight(history=FakeHistory(), host=host, on_report=reports.append)
    check(resolved=resolved, replacing=replacing, skip=skip, docker=docker, gpus=gpus)
    return reports[0]


def test_preflight_refuses_a_container_servectl_did_not_start_on_the_port(resolved: Resolved) -> None:
    adapters = adapters_with(resolved, on_port("someone-elses", "f" * 64, 8190))
    # a container servectl did not start: a box problem (exit 3), named by the measured port check
    with pytest.raises(PreflightFailed, match=r"port\.free.*container someone-elses .*publishes 127\.0\.0\.1:8190"):
        run_check(resolved, adapters)
    report = run_check(resolved, adapters, skip=frozenset({"port.free"}))
    assert report.check("port.free").forced and report.check("services").result == "pass"


def test_preflight_counts_the_replaced_service_port_as_free(resolved: Resolved) -> None:
    alpha = on_port("fake-alpha", "a" * 64, 8190, **{"servectl.managed": "1", "servectl.profile": "alpha"})

    class Replaced:
        container_id, container_name, profile, plan_hash, state, port, gpus = (
            "a" * 64,
            "fake-alpha",
            "alpha",
            "",
            "ready",
            8190,
            (),
        )

    with pytest.raises(PreflightFailed, match=r"port\.free"):
        run_check(resolved, adapters_with(resolved, alpha))
    report = run_check(resolved, adapters_with(resolved, alpha), replacing=Replaced())
    assert report.check("port.free").result == "pass"
    assert "replaced" in report.check("port.free").message


def test_preflight_refuses_a_foreign_container_with_the_target_name(resolved: Resolved) -> None:
    gpus, host, engine = adapters_with(resolved)
    engine.add_foreign("fake-beta", running=False)
    reports: list[Any] = []
    history = FakeHistory()
    check = profile_preflight(history=history, host=host, on_report=reports.append)
    with pytest.raises(PreflightFailed, match=r"container\.name: a container named fake-beta exists"):
        check(resolved=resolved, replacing=None, skip=frozenset(), docker=engine, gpus=gpus)
    check(resolved=resolved, replacing=None, skip=frozenset({"container.name"}), docker=engine, gpus=gpus)
    # the name check is one of preflight's: its report says so; forced past it, the rest passes
    assert [r.check("container.name").result for r in reports] == ["fail", "skipped"]
    assert not reports[1].failed
    assert [e["event"] for e in history.events()] == ["preflight-forced"]  # in the history it was given


def test_the_target_is_recorded_as_passed_before_ready_is_announced(home: Path) -> None:
    """kill -9 right as swap prints "start-target: ready" must find the target recorded as passed (issue 25)."""
    engine = engine_with({})
    rt = on_engine(engine)
    swap(rt, target="alpha", opts=NO_PREFLIGHT)
    seen: list[str] = []

    def at_announcement(event: PhaseEvent) -> None:
        if event.phase == "start-target" and event.kind == "progress" and event.step == "ready":
            # what `servectl status` / `recover` would read if servectl died this instant
            now = services(
                docker=engine,
                http=StandardHttp(),  # no probe: nothing is asked
                probe=False,
                plan_hash_of=None,
                records=ServiceRecords(home, History(home, clock=time.time)),
                clock=time.time,
                adopted=None,
            )
            seen.extend(f"{s.profile}:{s.state}" for s in now)

    swap(rt, target="beta", opts=SwapOptions(preflight=no_preflight, on_phase=at_announcement))
    assert seen == ["beta:ready"]
