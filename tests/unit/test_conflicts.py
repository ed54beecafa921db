"""Declared conflicts: stop/restore containers and compose files, compose CLI detection, the record."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from servectl.adapters.conflicts import (
    STOPPED_CONFLICTS_FILE,
    DockerConflicts,
    StoppedConflict,
    SubprocessCompose,
    detect_compose,
    load_stopped,
    record_stopped,
    restore_conflicts,
    restore_recorded,
)
from servectl.adapters.docker import ContainerState
from servectl.errors import EngineUnavailable, ServectlError
from servectl.profile.models import ConflictSpec
from servectl.testing.docker import FakeDockerEngine
from servectl.testing.swap import FakeConflicts


class Runner:
    """A fake subprocess runner: answers by the argv's words, records every call."""

    def __init__(self, answers: dict[str, tuple[int, str, str]] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        for key, (code, out, err) in self.answers.items():
            if key in " ".join(argv):
                return subprocess.CompletedProcess(list(argv), code, out, err)
        return subprocess.CompletedProcess(list(argv), 0, "", "")


def container_spec(name: str) -> ConflictSpec:
    return ConflictSpec(container=name)


def compose_spec(path: Path) -> ConflictSpec:
    return ConflictSpec(compose_file=str(path))


def engine(*containers: tuple[str, str, str]) -> FakeDockerEngine:
    """A fake engine with prepared containers (id, name, status)."""
    return FakeDockerEngine(running=[ContainerState(id=i, name=n, image="x", status=s) for i, n, s in containers])


def status_of(docker: FakeDockerEngine, container_id: str) -> str | None:
    state = docker.inspect(container_id)
    return None if state is None else state.status


def changes(docker: FakeDockerEngine) -> list[tuple[str, str]]:
    """The calls that change a container (what conflicts must keep to a minimum)."""
    return [c for c in docker.calls if c[0] in ("stop", "start", "kill", "remove")]


# -- containers by name -------------------------------------------------------------------------------------
def test_a_running_conflict_container_is_stopped_and_started_again() -> None:
    docker = engine(("id1", "daily", "running"), ("id2", "else", "running"))
    handler = DockerConflicts(docker=docker, compose=False, clock=lambda: 5.0)

    stopped = handler.stop(container_spec("daily"), stopped_by="glm")

    assert stopped == StoppedConflict("container", "daily", ("id1",), "glm", 5.0)
    assert status_of(docker, "id1") == "exited" and status_of(docker, "id2") == "running"
    handler.restore(stopped)
    assert status_of(docker, "id1") == "running"
    assert changes(docker) == [("stop", "id1"), ("start", "id1")]


def test_a_conflict_container_that_is_not_running_is_left_alone() -> None:
    docker = engine(("id1", "daily", "exited"))
    assert (
        DockerConflicts(docker=docker, compose=False, clock=time.time).stop(container_spec("daily"), stopped_by="x")
        is None
    )
    assert (
        DockerConflicts(docker=docker, compose=False, clock=time.time).stop(container_spec("absent"), stopped_by="x")
        is None
    )
    assert changes(docker) == []


# -- compose files -------------------------------------------------------------------------------------------
def test_a_running_compose_file_is_brought_down_and_up_again(tmp_path: Path) -> None:
    compose_file = tmp_path / "daily.yml"
    compose_file.write_text("services: {}\n", encoding="utf-8")
    runner = Runner({"ps -q -a": (0, "id1\nid2\n", "")})
    docker = engine(("id1", "daily-1", "running"), ("id2", "daily-2", "exited"))
    handler = DockerConflicts(docker=docker, compose=SubprocessCompose(("docker", "compose"), runner), clock=time.time)

    stopped = handler.stop(compose_spec(compose_file), stopped_by="glm")

    assert stopped is not None
    assert (stopped.kind, stopped.ref, stopped.container_ids) == ("compose", str(compose_file), ("id1",))
    handler.restore(stopped)
    file = str(compose_file)
    assert runner.calls == [
        ["docker", "compose", "-f", file, "ps", "-q", "-a"],
        ["docker", "compose", "-f", file, "down"],
        ["docker", "compose", "-f", file, "up", "-d"],
    ]


def test_a_compose_file_with_nothing_running_is_not_brought_down(tmp_path: Path) -> None:
    compose_file = tmp_path / "daily.yml"
    compose_file.write_text("services: {}\n", encoding="utf-8")
    runner = Runner({"ps -q -a": (0, "", "")})
    handler = DockerConflicts(docker=engine(), compose=SubprocessCompose(("docker-compose",), runner), clock=time.time)
    assert handler.stop(compose_spec(compose_file), stopped_by="glm") is None
    assert [c[-1] for c in runner.calls] == ["-a"]


def test_a_missing_compose_file_is_named(tmp_path: Path) -> None:
    handler = DockerConflicts(
        docker=engine(), compose=SubprocessCompose(("docker", "compose"), Runner()), clock=time.time
    )
    with pytest.raises(ServectlError, match=r"daily\.yml does not exist; fix conflicts\[\]\.compose_file"):
        handler.stop(compose_spec(tmp_path / "daily.yml"), stopped_by="glm")


def test_a_failing_compose_command_says_which_command_and_why(tmp_path: Path) -> None:
    compose_file = tmp_path / "daily.yml"
    compose_file.write_text("services: {}\n", encoding="utf-8")
    runner = Runner({"ps -q -a": (0, "id1\n", ""), "down": (1, "", "line1\nError: network in use\n")})
    docker = engine(("id1", "daily-1", "running"))
    handler = DockerConflicts(docker=docker, compose=SubprocessCompose(("docker", "compose"), runner), clock=time.time)
    with pytest.raises(ServectlError, match=r"`docker compose -f .*daily\.yml down` failed \(exit 1\): .*network"):
        handler.stop(compose_spec(compose_file), stopped_by="glm")


def test_without_a_compose_cli_the_check_names_what_to_install(tmp_path: Path) -> None:
    handler = DockerConflicts(docker=engine(), compose=False, clock=time.time)
    handler.check_available([container_spec("daily")])  # containers need no compose
    with pytest.raises(EngineUnavailable, match=r"no compose CLI.*docker-compose-plugin.*Nothing was stopped"):
        handler.check_available([compose_spec(tmp_path / "daily.yml")])


def test_compose_paths_expand_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "daily.yml").write_text("services: {}\n", encoding="utf-8")
    runner = Runner({"ps -q -a": (0, "", "")})
    handler = DockerConflicts(
        docker=engine(), compose=SubprocessCompose(("docker", "compose"), runner), clock=time.time
    )
    handler.stop(ConflictSpec(compose_file="~/daily.yml"), stopped_by="x")
    assert runner.calls[0][3] == str(tmp_path / "daily.yml")


# -- detecting the compose CLI -------------------------------------------------------------------------------
def test_detect_prefers_the_docker_compose_plugin() -> None:
    runner = Runner()
    found = detect_compose(which=lambda name: f"/usr/bin/{name}", run=runner)
    assert found is not None and found.command == ("docker", "compose")


def test_detect_falls_back_to_the_docker_compose_binary() -> None:
    runner = Runner({"compose version": (1, "", "docker: 'compose' is not a docker command.")})
    found = detect_compose(which=lambda name: f"/usr/bin/{name}", run=runner)
    assert found is not None and found.command == ("/usr/bin/docker-compose",)


def test_detect_finds_nothing_when_neither_exists() -> None:
    runner = Runner({"compose version": (1, "", "unknown command")})
    assert detect_compose(which=lambda name: "/usr/bin/docker" if name == "docker" else None, run=runner) is None


# -- the record ----------------------------------------------------------------------------------------------
def test_the_record_survives_a_round_trip_and_replaces_entries_for_the_same_conflict(tmp_path: Path) -> None:
    first = StoppedConflict("container", "daily", ("id1",), "a", 1.0)
    again = StoppedConflict("container", "daily", ("id9",), "b", 2.0)
    compose = StoppedConflict("compose", "/srv/ds4.yml", ("c1", "c2"), "b", 3.0)
    record_stopped(tmp_path, first)
    record_stopped(tmp_path, compose)
    record_stopped(tmp_path, again)
    assert load_stopped(tmp_path) == [compose, again]


def test_a_damaged_record_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / STOPPED_CONFLICTS_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(ServectlError, match=r"stopped-conflicts\.json: .* not valid JSON .*restore each by hand"):
        load_stopped(tmp_path)


def test_restore_attempts_every_conflict_and_keeps_the_failed_ones_recorded(tmp_path: Path) -> None:
    good = StoppedConflict("container", "good", ("g",), "a", 1.0)
    bad = StoppedConflict("compose", "/srv/bad.yml", ("b",), "a", 2.0)
    record_stopped(tmp_path, good)
    record_stopped(tmp_path, bad)
    handler = FakeConflicts()
    handler.fail_restore.add("/srv/bad.yml")

    outcome = restore_conflicts([good, bad], handler=handler, state_dir=tmp_path)

    assert outcome.restored == (good,)
    assert [s for s, _ in outcome.failed] == [bad]
    assert handler.calls == [("restore", "/srv/bad.yml"), ("restore", "good")]  # newest first
    assert load_stopped(tmp_path) == [bad]
    assert "restored container good" in outcome.summary()
    assert "run `docker compose -f /srv/bad.yml up -d`" in outcome.summary()


def test_restore_recorded_restores_everything_and_empties_the_record(tmp_path: Path) -> None:
    record_stopped(tmp_path, StoppedConflict("container", "daily", ("id1",), "a", 1.0))
    handler = FakeConflicts()
    outcome = restore_recorded(handler=handler, state_dir=tmp_path)
    assert [s.ref for s in outcome.restored] == ["daily"]
    assert not (tmp_path / STOPPED_CONFLICTS_FILE).exists()
