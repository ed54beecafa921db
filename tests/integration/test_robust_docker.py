"""Issue 15 on the real engine with the stand-in: nothing lost, nothing hung.

A killed ``up`` or ``swap`` leaves nothing unproven behind or says how to settle it; ``servectl recover``
brings back what ran before, as it ran; damaged state files never block ``status`` or ``down``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from test_swap_docker import Bench, bench, settled  # noqa: F401  (the fixture, shared)

from servectl.adapters.state import History
from servectl.service.journal import read_journal
from servectl.service.recover import recover

pytestmark = pytest.mark.integration

# Names unique to this run: CLI commands see every servectl container on the host, not only this test's.
_RUN = uuid.uuid4().hex[:6]
ALPHA, BETA = f"alpha-{_RUN}", f"beta-{_RUN}"


def finish(proc: object, timeout_s: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout_s)  # type: ignore[attr-defined]
    return proc.returncode, out, err  # type: ignore[attr-defined]


def signal_once_created(
    bench: Bench,  # noqa: F811
    proc: subprocess.Popen[str],
    profile: str,
    signum: signal.Signals,
    *,
    after_s: float = 0.0,
) -> tuple[int, str, str]:
    """Send ``signum`` to the CLI ``proc`` ``after_s`` after ``profile``'s container exists; how ``proc`` ended.

    A ``proc`` still alive afterwards (it did not end in time) is killed.
    """
    try:
        bench.wait_for_container(bench.container_name(profile))
        time.sleep(after_s)
        proc.send_signal(signum)
        return finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_up_while_the_engine_loads_removes_it_and_says_so(
    bench: Bench,  # noqa: F811
    signum: signal.Signals,
) -> None:
    bench.profile(ALPHA, env={"STANDIN_STARTUP_DELAY_S": "8"})
    code, _, err = signal_once_created(bench, bench.cli("up", ALPHA), ALPHA, signum, after_s=0.5)  # in the gate
    assert code == 130, err
    assert f"interrupted ({signum.name}) while {ALPHA} was starting; what it started was removed" in err
    assert "Traceback" not in err
    assert settled(bench.containers) == {}
    assert read_journal(bench.home) is None


def test_up_after_kill_9_of_up_replaces_the_unproven_container_instead_of_reporting_it_up(
    bench: Bench,  # noqa: F811
) -> None:
    bench.profile(ALPHA, env={"STANDIN_STARTUP_DELAY_S": "3"})
    signal_once_created(bench, bench.cli("up", ALPHA), ALPHA, signal.SIGKILL)
    orphan = bench.client.containers.get(bench.container_name(ALPHA)).id
    journal = read_journal(bench.home)
    assert journal is not None and (journal.kind, journal.to_profile) == ("up", ALPHA)
    status = bench.cli("status", "--json")
    code, out, err = finish(status)
    mine = [s for s in json.loads(out)["services"] if s["container_id"] == orphan]
    assert mine and mine[0]["state"] == "starting"  # never "ready": it never passed the gate
    assert "unfinished up" in err and "servectl recover" in err
    code, out, err = finish(bench.cli("up", ALPHA))
    assert code == 0, err
    assert "never passed its health gate" in err and "replaced it" in err
    now = bench.client.containers.get(bench.container_name(ALPHA)).id
    assert now != orphan and bench.serves(ALPHA)
    assert read_journal(bench.home) is None


def test_kill_9_mid_swap_then_recover_brings_back_the_previous_service_as_it_ran(
    bench: Bench,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench.profile(ALPHA)
    code, _, err = finish(bench.cli("up", ALPHA))  # from the same folder as the CLI swap below (same paths)
    assert code == 0, err
    ran = bench.client.containers.get(bench.container_name(ALPHA)).labels["servectl.plan-hash"]
    bench.profile(BETA, env={"STANDIN_STARTUP_DELAY_S": "20"})
    signal_once_created(bench, bench.cli("swap", BETA), BETA, signal.SIGKILL)
    assert settled(bench.running) == {bench.container_name(BETA): "running"}  # the orphan keeps starting
    # alpha's file changes after the swap began; recovery restores the alpha that ran
    bench.profile(ALPHA, env={"STANDIN_TOKEN_RATE": "77"})
    code, _, err = finish(bench.cli("swap", ALPHA))
    assert code == 1 and "unfinished swap" in err and "servectl recover" in err and "Traceback" not in err
    monkeypatch.chdir(bench.tmp)
    result = recover(bench.context())
    assert result.outcome == "restored" and result.restored == ALPHA, result.message
    assert bench.containers() == {bench.container_name(ALPHA): "running"} and bench.serves(ALPHA)
    assert bench.client.containers.get(bench.container_name(ALPHA)).labels["servectl.plan-hash"] == ran, result.message
    assert read_journal(bench.home) is None


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe binary", b"", b'[{"event": ["up"]}', b'[{"event": ["up"], "profile": "x"}]', b"folder"],
)
def test_a_damaged_history_never_blocks_status_or_down(bench: Bench, damage: bytes) -> None:  # noqa: F811
    bench.profile(ALPHA)
    bench.swap(ALPHA)
    history = Path(bench.home) / "history.json"
    history.unlink()
    if damage == b"folder":
        history.mkdir()
    else:
        history.write_bytes(damage)
    code, out, err = finish(bench.cli("status"))
    assert code == 0, err
    assert "Traceback" not in out + err
    assert ALPHA in out  # Docker says what runs; the gate record says it passed
    code, out, err = finish(bench.cli("down", ALPHA))
    assert code == 0, err
    assert "Traceback" not in out + err and settled(bench.containers) == {}
    events = [e["event"] for e in History(bench.home, clock=time.time).events()]
    if damage.startswith(b"[{") and damage.endswith(b"]"):  # valid JSON: the odd entry is skipped, not damage
        assert events[-1] == "down"
    else:
        assert set(events) == {"down"}  # a new history (the old one set aside) with only what down did
        assert list(Path(bench.home).glob("history.json.damaged-*"))


def test_up_on_an_empty_history_records_the_service(bench: Bench) -> None:  # noqa: F811
    bench.profile(ALPHA)
    bench.home.mkdir(parents=True, exist_ok=True)
    (bench.home / "history.json").write_text("")
    code, _, err = finish(bench.cli("up", ALPHA))
    assert code == 0, err
    assert "moved it to" in err and "started a new history" in err
    assert [e["event"] for e in History(bench.home, clock=time.time).events()] == ["up"]
    assert bench.serves(ALPHA)


class DockerProxy:
    """A Unix-socket proxy in front of the real engine that the test can kill: "Docker gone" for one client,
    while the engine itself stays up for every other test."""

    def __init__(self, path: Path) -> None:
        import os
        import socket
        import threading

        self.path = path
        self.upstream = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # killed
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(self.upstream)
            with self.lock:
                self.open += [client, engine]
            for a, b in ((client, engine), (engine, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: object, dst: object) -> None:
        try:
            while data := src.recv(65536):  # type: ignore[attr-defined]
                dst.sendall(data)  # type: ignore[attr-defined]
        except OSError:
            pass

    def kill(self) -> None:
        import socket

        self.server.close()
        self.path.unlink(missing_ok=True)
        with self.lock:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def test_docker_gone_during_up_names_the_real_container_claims_nothing_and_recover_settles_it(
    bench: Bench,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 25: the engine goes away (for this `up` only) while the service loads."""
    proxy = DockerProxy(bench.tmp / "docker.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
    bench.profile(ALPHA, env={"STANDIN_STARTUP_DELAY_S": "8"})
    proc = bench.cli("up", ALPHA)
    name = bench.container_name(ALPHA)
    try:
        bench.wait_for_container(name)
        time.sleep(0.5)  # inside the health gate
        proxy.kill()
        code, _, err = finish(proc, 120)
    finally:
        proxy.kill()
        if proc.poll() is None:
            proc.kill()
    assert code == 1 and "Traceback" not in err, err
    assert f"could not make sure {name} is gone" in err and f"`docker rm -f {name}`" in err, err
    assert "`servectl recover` removes it" in err
    assert "nothing of it runs" not in err  # it could not check, so it does not say so
    assert name in bench.containers()  # the engine itself never went away: the container is still there
    journal = read_journal(bench.home)
    assert journal is not None and (journal.kind, journal.to_profile) == ("up", ALPHA)
    settled_by = recover(bench.context())
    assert settled_by.outcome == "cleared" and settled_by.removed == (name,), settled_by.message
    assert settled(bench.containers) == {}
    assert read_journal(bench.home) is None


def test_a_damaged_state_folder_or_hostile_profile_files_never_take_down_a_healthy_service(
    bench: Bench,  # noqa: F811
) -> None:
    """Issue 25 on the real engine (the fake-engine matrix, tests/unit/test_state_folder_matrix.py, walks every
    entry): gate-passed/ replaced by an empty file, a FIFO and a non-UTF-8 file named *.yaml on the search path."""
    import os

    bench.profile(ALPHA)
    bench.profile(BETA)
    bench.swap(ALPHA)
    gates = bench.home / "gate-passed"
    for child in sorted(gates.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    gates.rmdir()
    gates.write_bytes(b"")
    os.mkfifo(bench.profiles / "hang.yaml")
    (bench.profiles / "cafe.yaml").write_bytes(b"name: cafe\nextends: demo\ndescription: caf\xe9 adopted\n")
    code, _, err = finish(bench.cli("swap", BETA), 60)
    assert code == 1 and "Traceback" not in err, err
    assert f"{gates}: is a regular file where servectl keeps a folder; nothing was changed" in err, err
    assert bench.serves(ALPHA) and settled(bench.running) == {bench.container_name(ALPHA): "running"}
    code, _, err = finish(bench.cli("status"), 30)  # reads every profile: neither file blocks or breaks it
    assert code == 0 and "Traceback" not in err, err
