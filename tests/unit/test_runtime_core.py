"""up / down / status rules on the fake engine: conflicts, idempotence, secrets, history, GPU release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from servectl.adapters.gpu import GpuProcess
from servectl.adapters.plan_cache import PlanCache
from servectl.adapters.state import GateRecord, History
from servectl.errors import LockTimeout, PreflightFailed, ServiceConflict, StartupFailed, UsageError
from servectl.plan.resolve import resolve
from servectl.service import runtime
from servectl.service.clocks import Clocks
from servectl.service.container import DockerRuntime
from servectl.service.context import Context
from servectl.service.logs import follow_logs
from servectl.service.services import ServiceInfo, ServiceRecords, services
from servectl.standin.process import free_port
from servectl.testing.docker import FakeDockerEngine, FakeScript, sglang_like_script, write_test_profile
from servectl.testing.fakes import FakeGpuInventory, FakeHostProbe, fake_model_dir, make_device
from servectl.testing.http import FakeHttp
from servectl.testing.swap import FakeRuntime

SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class Env:
    folder: Path
    home: Path
    engine: FakeDockerEngine
    http: FakeHttp
    environ: dict[str, str]

    def profile(self, name: str, *, port: int | None = None, **sections: Any) -> int:
        port = port or free_port()
        write_test_profile(self.folder, name, port=port, **sections)
        return port

    def host_for(self, name: str) -> FakeHostProbe:
        """A roomy, idle host that has the profile's model folder (preflight's model checks pass)."""
        model = resolve(name, environ=os.environ).plan.docker.mounts[0].source
        return FakeHostProbe(models={model: fake_model_dir(model, weights_bytes=10**6, weight_files=1)})

    def context(self, **given: Any) -> Context:
        """The context a host builds on the fake engine (no GPU inventory unless one is given)."""
        parts: dict[str, Any] = {
            "docker": self.engine,
            "http": self.http,
            "environ": self.environ,
            "state_dir": self.home,
            "lock_timeout_s": 1,
            "nvml": False,
        }
        return Context(**{**parts, **given})

    def up(self, name: str, *, build_image: Any = None, **kwargs: Any) -> runtime.UpResult:
        gpus = kwargs.pop("gpus", FakeGpuInventory.scenario("two_free_sm120"))
        probe = kwargs.pop("host", None) or self.host_for(name)
        kwargs["force"] = tuple(kwargs.get("force", ()))
        rt = DockerRuntime(
            docker=self.engine,
            http=self.http,
            environ=self.environ,
            state_dir=self.home,
            history=History(self.home, clock=time.time),
            clocks=Clocks(),
            build_image=build_image,
        )
        ctx = self.context(gpus=gpus, probe=probe, runtime=rt)
        return runtime.up(ctx, name=name, opts=runtime.UpOptions(**kwargs))

    def down(self, name: str | None, *, gpus: Any = None, free_deadline_s: float = 30.0) -> list[runtime.StopResult]:
        ctx = self.context(gpus=gpus, environ=os.environ, http=None)  # down reads no environment of the test's
        result = runtime.down(ctx, name=name, opts=runtime.DownOptions(free_deadline_s=free_deadline_s))
        return list(result.stopped)

    def services(self, **kwargs: Any) -> list[ServiceInfo]:
        drift = {"plan_hash_of": PlanCache(environ=self.environ).plan_hash}  # as the host's status asks it
        return services(
            docker=self.engine,
            http=self.http,
            records=ServiceRecords(self.home, History(self.home, clock=time.time)),
            clock=time.time,
            **{**drift, **kwargs},
        )

    def created(self) -> int:
        return sum(1 for call, _ in self.engine.calls if call == "create_and_start")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Env]:
    folder, home = tmp_path / "profiles", tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("SERVECTL_HOME", str(home))
    monkeypatch.setenv("SERVECTL_PROFILES", str(folder))
    engine = FakeDockerEngine(
        images={"servectl-standin:latest"}, script_for=lambda s: sglang_like_script(0.1), sleep=lambda s: None
    )
    with FakeHttp(engine.http_transport()) as http:
        environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
        yield Env(folder, home, engine, http, environ)


# -- up -----------------------------------------------------------------------------------------------------
def test_up_starts_the_service_and_records_it_in_the_history(env: Env) -> None:
    port = env.profile("a")
    result = env.up("a")
    assert result.action == "started" and result.url == f"http://127.0.0.1:{port}"
    assert result.startup_s is not None and result.startup_s >= 0.1
    [svc] = env.services()
    assert (svc.profile, svc.state, svc.port, svc.drift) == ("a", "ready", port, False)
    [event] = History(env.home, clock=time.time).events()
    assert event["event"] == "up" and event["profile"] == "a" and event["container_id"] == svc.container_id


def test_up_twice_with_the_same_plan_does_nothing_and_says_so(env: Env) -> None:
    env.profile("a")
    first = env.up("a")
    second = env.up("a")
    assert second.action == "already-running" and second.service.container_id == first.service.container_id
    assert env.created() == 1


def test_up_of_a_changed_profile_that_runs_refuses_and_points_to_swap(env: Env) -> None:
    port = env.profile("a")
    env.up("a")
    env.profile("a", port=port, engine={"env": {"STANDIN_TOKEN_RATE": "999"}})
    with pytest.raises(ServiceConflict, match=r"a already runs with plan .* use servectl swap a"):
        env.up("a")
    [svc] = env.services()
    assert svc.drift is True and svc.state == "ready"


def test_up_refuses_when_another_servectl_service_holds_the_port(env: Env) -> None:
    port = env.profile("a")
    env.profile("b", port=port)
    env.up("a")
    with pytest.raises(
        ServiceConflict, match=f"preflight services: servectl service a holds port {port}; fix: use servectl swap b"
    ):
        env.up("b")
    assert env.created() == 1


def test_up_refuses_when_another_servectl_service_holds_the_gpus(env: Env) -> None:
    env.profile("a", gpus={"devices": [0, 1]}, engine={"tp": 2}, container={"shm_size": "8g"})
    env.profile("b", gpus={"devices": [1]})
    env.up("a")
    with pytest.raises(
        ServiceConflict, match="preflight services: servectl service a holds GPU 1; fix: use servectl swap b"
    ):
        env.up("b")
    assert env.created() == 1
    assert [s.profile for s in env.services()] == ["a"]


def test_foreign_container_on_the_port_fails_preflight_and_is_left_alone(env: Env) -> None:
    port = env.profile("a")
    foreign = env.engine.add_foreign("someone-elses", ports=[port])
    # a box problem (exit 3), as `servectl preflight` reports it: servectl never stops what it did not start
    with pytest.raises(PreflightFailed, match=f"preflight port.free: container someone-elses .* publishes .*:{port}"):
        env.up("a")
    assert env.engine.inspect(foreign) is not None and env.engine.inspect(foreign).running  # type: ignore[union-attr]
    assert env.created() == 0


def test_foreign_container_on_a_gpu_fails_preflight(env: Env) -> None:
    env.profile("a", gpus={"devices": [0]})
    trainer = env.engine.add_foreign("trainer", device_ids=["all"])
    with pytest.raises(
        PreflightFailed, match=r"preflight gpu.exclusive: container trainer .* requests card\(s\) \[0\]"
    ):
        env.up("a")
    assert env.engine.inspect(trainer) is not None and env.engine.inspect(trainer).running  # type: ignore[union-attr]
    assert env.created() == 0


def test_foreign_container_with_our_name_is_never_removed(env: Env) -> None:
    env.profile("a", container={"name": "taken-name"})
    foreign = env.engine.add_foreign("taken-name", running=False)
    with pytest.raises(PreflightFailed, match=r"preflight container\.name: .*servectl did not start it"):
        env.up("a")
    assert env.engine.inspect(foreign) is not None


def test_an_exited_container_of_the_profile_is_cleared_before_starting_again(env: Env) -> None:
    env.profile("a")
    first = env.up("a")
    env.engine.kill(first.service.container_id)
    [svc] = env.services()
    assert svc.state == "exited" and svc.exit_code == 137
    again = env.up("a")
    assert again.action == "started" and again.removed_stale == (first.service.container_name,)
    assert [s.container_id for s in env.services()] == [again.service.container_id]


def test_failed_start_removes_the_container_and_records_the_failure(env: Env) -> None:
    env.profile("a", engine={"env": {"STANDIN_CRASH_AT": "kv_cache"}})
    env.engine.script_for = lambda spec: sglang_like_script(0.1, crash_at="kv_cache")
    with pytest.raises(StartupFailed, match=r"exited with code 1 .*; the container was removed"):
        env.up("a")
    assert env.engine.containers == {}
    assert History(env.home, clock=time.time).events()[-1]["event"] == "failed"


def test_up_builds_the_standin_image_when_it_is_missing(env: Env) -> None:
    env.profile("a")
    env.engine.images.clear()
    built: list[str] = []

    def build(ref: str) -> str:
        built.append(ref)
        env.engine.images.add(ref)
        return ref

    assert env.up("a", build_image=build).action == "started"
    assert built == ["servectl-standin:latest"]


def test_missing_image_that_servectl_cannot_build_is_a_clear_error(env: Env) -> None:
    env.profile("a", image={"ref": "registry.example/sglang:v1", "build": None})
    with pytest.raises(
        PreflightFailed, match=r"registry\.example/sglang:v1 is not on this host .*docker pull .*docker load"
    ):
        env.up("a")
    assert env.created() == 0


def test_bad_profile_fails_before_the_engine_is_asked_anything(env: Env) -> None:
    env.profile("a", engine={"tp": 0})
    with pytest.raises(Exception, match=r"engine\.tp"):
        env.up("a")
    assert env.engine.calls == []


def test_port_taken_by_a_host_process_fails_preflight_naming_it(env: Env) -> None:
    port = env.profile("a")
    host = env.host_for("a")
    host.listen("127.0.0.1", port, pid=4321, name="nginx")
    with pytest.raises(PreflightFailed, match=f"port\\.free: pid 4321 nginx listens on 127\\.0\\.0\\.1:{port}"):
        env.up("a", host=host)
    assert env.created() == 0


def test_a_forced_check_is_skipped_and_recorded_and_the_report_is_handed_over(env: Env) -> None:
    port = env.profile("a")
    host = env.host_for("a")
    host.listen("127.0.0.1", port, pid=4321, name="nginx")
    reports: list[Any] = []
    assert env.up("a", host=host, force=["port.free"], on_report=reports.append).action == "started"
    assert reports[0].check("port.free").forced
    assert any(e.get("event") == "preflight-forced" for e in History(env.home, clock=time.time).events())
    with pytest.raises(UsageError, match=r"--force port\.fre: no such preflight check; did you mean port\.free"):
        env.up("a", force=["port.fre"])


def test_up_preflight_reads_the_gpu_inventory_it_is_given(env: Env) -> None:
    env.profile("a", gpus={"devices": [0, 1]}, engine={"tp": 2}, container={"shm_size": "8g"})
    gpus = FakeGpuInventory.scenario("two_free_sm120")
    env.up("a", gpus=gpus)
    assert gpus.calls == 1  # one snapshot for preflight; no second NVML session


def test_up_and_down_start_and_stop_through_the_contexts_runtime(env: Env) -> None:
    """The ServiceRuntime seam: with a fake runtime in the context, up and down never create or stop a
    container on the engine themselves."""
    env.profile("a")
    fake = FakeRuntime()
    ctx = env.context(gpus=FakeGpuInventory.scenario("two_free_sm120"), probe=env.host_for("a"), runtime=fake)
    result = runtime.up(ctx, name="a")
    assert result.action == "started" and fake.profiles() == ["a"]
    assert fake.calls == [("ensure_image", "a"), ("start", "a")]
    assert env.created() == 0  # the engine was only asked (preflight), never told to start anything
    assert History(env.home, clock=time.time).events()[-1]["event"] == "up"
    [stopped] = runtime.down(ctx, name="a").stopped
    assert stopped.profile == "a" and fake.calls[-1] == ("stop", "a") and fake.profiles() == []
    assert fake.stop_gpus == [ctx.gpus]  # the stop waited on the context's cards


def test_up_waits_for_the_lock_and_gives_up_naming_the_holder(env: Env) -> None:
    env.profile("a")
    code = textwrap.dedent(f"""
        import sys, time, pathlib
        sys.path.insert(0, {SRC!r})
        from servectl.adapters.state import StateLock
        with StateLock(pathlib.Path({str(env.home)!r}), 5, purpose="swap b"):
            print("locked", flush=True); time.sleep(5)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        holder.stdout.close()
        with pytest.raises(LockTimeout, match=f"process, pid {holder.pid} \\(swap b"):
            env.up("a")
        assert env.created() == 0
    finally:
        holder.kill()
        holder.wait()


# -- secrets --------------------------------------------------------------------------------------------
def test_api_key_from_env_is_written_0600_mounted_and_removed_on_down(env: Env) -> None:
    env.profile("a", serve={"api_key_env": "A_KEY"})
    env.environ["A_KEY"] = "sk-very-secret"
    env.up("a")
    key_file = env.home / "generated" / "a" / "api-key"
    assert key_file.read_text() == "sk-very-secret\n" and key_file.stat().st_mode & 0o777 == 0o600
    [container] = env.engine.containers.values()
    assert (str(key_file), "/run/secrets/servectl-api-key") in [(m.source, m.target) for m in container.spec.mounts]
    assert "sk-very-secret" not in json.dumps(History(env.home, clock=time.time).events())
    assert "sk-very-secret" not in repr(container.spec) + repr(container.environment)
    env.down("a")
    assert not key_file.exists()


def test_missing_api_key_variable_is_one_line_before_anything_starts(env: Env) -> None:
    env.profile("a", serve={"api_key_env": "A_KEY"})
    with pytest.raises(PreflightFailed) as info:  # preflight's env.set (issue 44): before anything starts
        env.up("a")
    assert info.value.message == (
        "preflight env.set: not set in servectl's environment: A_KEY (serve.api_key_env names it); "
        "fix: export A_KEY=... in the shell that runs servectl (or remove the reference)"
    )
    assert len(info.value.lines()) == 1 and env.created() == 0


def test_failed_start_removes_the_key_file(env: Env) -> None:
    env.profile("a", serve={"api_key_env": "A_KEY"})
    env.environ["A_KEY"] = "sk-x"
    env.engine.script_for = lambda spec: sglang_like_script(0.1, crash_at="weights")
    with pytest.raises(StartupFailed):
        env.up("a")
    assert not (env.home / "generated" / "a" / "api-key").exists()


# -- down -------------------------------------------------------------------------------------------------
def test_down_stops_gracefully_removes_and_records(env: Env) -> None:
    env.profile("a")
    env.up("a")
    [result] = env.down("a")
    assert (result.profile, result.forced, result.exit_code, result.gpus_checked) == ("a", False, 0, False)
    assert env.engine.containers == {} and env.services() == []
    assert History(env.home, clock=time.time).events()[-1]["event"] == "down"


def test_down_kills_an_engine_that_ignores_sigterm_after_the_grace_period(env: Env) -> None:
    env.profile("a", container={"stop_grace_s": 7})
    env.engine.script_for = lambda spec: sglang_like_script(0.1, ignore_sigterm=True)
    waited: list[float] = []
    env.engine.sleep = waited.append
    env.up("a")
    [result] = env.down("a")
    assert result.forced and result.exit_code == 137 and waited == [7]


def test_down_without_a_name_needs_a_single_service(env: Env) -> None:
    assert env.down(None) == []
    env.profile("a")
    env.profile("b")
    env.up("a")
    env.up("b")
    with pytest.raises(UsageError, match="several services run \\(a, b\\): name the one to stop"):
        env.down(None)
    env.down("b")
    assert [r.profile for r in env.down(None)] == ["a"]


def test_down_restores_the_conflicts_a_swap_stopped_once_no_service_runs(env: Env) -> None:
    from servectl.adapters.conflicts import StoppedConflict, load_stopped, record_stopped
    from servectl.testing.swap import FakeConflicts

    env.profile("a")
    env.profile("b")
    env.up("a")
    env.up("b")
    record_stopped(env.home, StoppedConflict("container", "daily", ("id-daily",), "a", 0.0))
    conflicts = FakeConflicts()
    first = runtime.down(env.context(conflicts=conflicts, environ=os.environ, http=None), name="a")
    assert [s.profile for s in first.stopped] == ["a"] and first.restored is None  # b still runs
    last = runtime.down(env.context(conflicts=conflicts, environ=os.environ, http=None), name="b")
    assert last.restored is not None and last.restored.summary() == "restored container daily"
    assert conflicts.running == {("container", "daily")} and load_stopped(env.home) == []


def test_down_of_a_profile_that_does_not_run_is_a_no_op_but_a_typo_is_an_error(env: Env) -> None:
    env.profile("a")
    assert env.down("a") == []
    with pytest.raises(UsageError, match="no servectl service and no profile named nope"):
        env.down("nope")


def _inventory(busy_snapshots: int) -> FakeGpuInventory:
    """Card 1 keeps process 777 for the first ``busy_snapshots`` snapshots, then both cards are free."""
    busy = FakeGpuInventory.snapshot_of([make_device(0), make_device(1, processes=[GpuProcess(777, 1024)])])
    free = FakeGpuInventory.snapshot_of([make_device(0), make_device(1)])
    return FakeGpuInventory([busy] * busy_snapshots + [free])


def test_down_confirms_the_cards_are_free_or_names_the_leaked_pids(env: Env) -> None:
    env.profile("a", gpus={"devices": [0, 1]}, engine={"tp": 2}, container={"shm_size": "8g"})
    env.up("a")
    [freed] = env.down("a", gpus=_inventory(busy_snapshots=2), free_deadline_s=5)
    assert freed.gpus_checked and freed.leaked_pids == () and freed.unknown_cards == ()
    env.up("a")
    [leaked] = env.down("a", gpus=_inventory(busy_snapshots=1000), free_deadline_s=0.3)
    assert leaked.leaked_pids == (777,)


def test_down_names_a_card_it_cannot_read_instead_of_calling_it_free(env: Env) -> None:
    env.profile("a", gpus={"devices": [0, 1]}, engine={"tp": 2}, container={"shm_size": "8g"})
    env.up("a")
    [result] = env.down("a", gpus=FakeGpuInventory.scenario("gpu_lost", card=1), free_deadline_s=0.3)
    assert result.gpus_checked and result.leaked_pids == () and result.unknown_cards == (1,)
    assert History(env.home, clock=time.time).events()[-1]["unknown_cards"] == [1]


# -- status -------------------------------------------------------------------------------------------
def test_status_forgets_a_container_removed_behind_our_back(env: Env) -> None:
    env.profile("a")
    result = env.up("a")
    env.engine.remove_behind_back(result.service.container_id)
    assert env.services() == []
    assert env.up("a").action == "started"


def test_status_reports_exit_code_and_oom_flag_of_a_dead_service(env: Env) -> None:
    env.profile("a")
    env.engine.script_for = lambda spec: replace(sglang_like_script(0.1), exit_at_s=0.5, exit_code=137, oom_killed=True)
    env.up("a")
    time.sleep(0.5)
    [svc] = env.services()
    assert (svc.state, svc.exit_code, svc.oom_killed, svc.uptime_s) == ("exited", 137, True, None)


def test_status_tells_unhealthy_from_starting(env: Env) -> None:
    env.profile("a")
    env.up("a")
    sick = FakeHttp(httpx.MockTransport(lambda r: httpx.Response(503)))
    [svc] = services(
        docker=env.engine,
        http=sick,
        records=ServiceRecords(env.home, History(env.home, clock=time.time)),
        clock=time.time,
    )
    assert svc.state == "unhealthy"
    env.engine.script_for = lambda spec: FakeScript()
    env.profile("b")
    GateRecord(env.home).mark_pending(
        resolve("b", environ=os.environ).plan.docker.name
    )  # as runtime.start does before creating
    cid = env.engine.create_and_start(resolve("b", environ=os.environ).plan.docker, environ={})
    states = {
        s.profile: s.state
        for s in services(
            docker=env.engine,
            http=sick,
            records=ServiceRecords(env.home, History(env.home, clock=time.time)),
            clock=time.time,
        )
    }
    assert states == {"a": "unhealthy", "b": "starting"}
    assert env.engine.inspect(cid) is not None


def test_status_judges_a_container_servectl_did_not_start_by_its_health(env: Env) -> None:
    """`docker compose up` of a rendered file: servectl labels, no gate record either way."""
    env.engine.script_for = lambda spec: FakeScript()
    env.profile("c")
    env.engine.create_and_start(resolve("c", environ=os.environ).plan.docker, environ={})
    healthy = FakeHttp(httpx.MockTransport(lambda r: httpx.Response(200)))
    sick = FakeHttp(httpx.MockTransport(lambda r: httpx.Response(503)))
    for http, state in ((healthy, "ready"), (sick, "unhealthy")):
        records = ServiceRecords(env.home, History(env.home, clock=time.time))
        seen = services(docker=env.engine, http=http, records=records, clock=time.time)
        assert [s.state for s in seen] == [state]


def test_status_scope_sees_only_labelled_containers(env: Env) -> None:
    env.profile("a", container={"labels": {"servectl.test-session": "one"}})
    env.profile("b")
    env.up("a")
    env.up("b")
    assert [s.profile for s in env.services(scope={"servectl.test-session": "one"})] == ["a"]


def test_follow_logs_prints_a_services_lines(env: Env) -> None:
    env.profile("a")
    env.up("a")
    lines = list(follow_logs(name="a", docker=env.engine, tail=2))
    assert lines[-1].endswith("ready to roll!") and len(lines) == 2
    with pytest.raises(UsageError, match="no servectl service named b"):
        list(follow_logs(name="b", docker=env.engine))


def test_up_refuses_cards_that_run_a_process_when_the_profile_wants_them_exclusively(env: Env) -> None:
    env.profile("a", gpus={"devices": [0, 1]}, engine={"tp": 2}, container={"shm_size": "8g"})
    with pytest.raises(PreflightFailed, match=r"gpu\.exclusive: card 1: pid 777"):
        env.up("a", gpus=_inventory(busy_snapshots=1000))
    assert env.created() == 0
    assert env.up("a", gpus=_inventory(busy_snapshots=0)).action == "started"


def test_up_with_an_engine_that_does_not_answer_is_engine_unavailable_and_starts_nothing(env: Env) -> None:
    from servectl.errors import EngineUnavailable

    env.profile("a")
    env.engine.available = False
    with pytest.raises(EngineUnavailable, match="Docker engine unreachable"):
        env.up("a")
    assert env.created() == 0


def test_a_pinned_stand_in_build_that_is_gone_is_refused_not_built_under_another_id() -> None:
    import pytest

    from servectl.errors import PreflightFailed
    from servectl.service.image import build_standin

    ref = "servectl-standin:abc@sha256:" + "6" * 64
    with pytest.raises(PreflightFailed, match=r"pins a stand-in build .* not on this host; set image.digest"):
        build_standin(ref, docker=FakeDockerEngine())
