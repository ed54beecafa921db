"""Warm standby on the fakes: the state folder's records, the read model and the status text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from servectl.adapters.standby import StandbyEntry, StandbyRecord
from servectl.cli.views.runtime import state_text
from servectl.service.services import ALIVE_STATES, ServiceInfo, on_standby

CID = "ab" * 32


def service(**changes: object) -> ServiceInfo:
    base = ServiceInfo(
        container_id=CID,
        container_name="servectl-a",
        profile="a",
        plan_hash="p" * 12,
        state="ready",
        exit_code=None,
        oom_killed=False,
        host="127.0.0.1",
        port=8190,
        gpus=(0,),
        started_at=1.0,
        uptime_s=5.0,
        stop_grace_s=5,
        drift=False,
        running=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def entry(**changes: object) -> StandbyEntry:
    base = StandbyEntry("a", CID, released_at=10.0, release_s=0.4, host_ram_bytes=3 * 2**30, reference_answer="x")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_released_container_reads_as_standby_with_its_host_ram_and_last_resume(tmp_path: Path) -> None:
    record = StandbyRecord(tmp_path)
    assert on_standby(service(), record) == service()
    record.mark(entry())
    record.note_resume("a", 1.234, at=20.0)
    seen = on_standby(service(), record)
    assert (seen.state, seen.standby_host_ram_bytes, seen.standby_resume_s) == ("standby", 3 * 2**30, 1.234)
    assert seen.state not in ALIVE_STATES  # in nobody's way, and never routed to
    assert state_text(seen) == "standby (host RAM 3.0 GiB, resume 1.2 s)"
    assert seen.to_dict()["standby_host_ram_bytes"] == 3 * 2**30
    record.clear(CID)
    assert on_standby(service(), record).state == "ready"


def test_a_damaged_or_foreign_record_counts_as_none(tmp_path: Path) -> None:
    record = StandbyRecord(tmp_path)
    (tmp_path / "standby").mkdir()
    (tmp_path / "standby" / f"{CID}.json").write_text("{not json")
    assert record.entry(CID) is None
    record.mark(entry(container_id="../../etc"))  # not a container id: never a path
    assert sorted(p.name for p in (tmp_path / "standby").iterdir()) == [f"{CID}.json"]
    assert record.last_resume_s("a") is None
    assert state_text(on_standby(service(), record)) == "ready"


def test_the_journal_keeps_the_standby_step_and_reads_older_journals_without_it() -> None:
    from servectl.service.journal import SwapJournal

    journal = SwapJournal(pid=1, from_profile="a", to_profile="b", phase="stop-old", started_at=1.0, standby="released")
    assert SwapJournal.from_dict(journal.to_dict()).standby == "released"
    older = {k: v for k, v in journal.to_dict().items() if k != "standby"}
    assert SwapJournal.from_dict(older).standby == ""


def test_a_warm_services_cpu_copy_reaches_preflight_as_held_or_to_be_pinned(tmp_path: Path) -> None:
    """The trust record (written at a warm service's first start) says how its CPU copy takes host RAM; the
    services listing carries it to preflight's ``services`` (running_refs)."""
    from servectl.adapters.standby import Trust
    from servectl.service.services import running_refs

    record = StandbyRecord(tmp_path)
    assert running_refs([on_standby(service(), record)])[0].backup_hold is None  # no record: no copy known
    record.set_trust(CID, Trust([], backup_bytes=16 * 2**30, retained=True))
    (ref,) = running_refs([on_standby(service(), record)])
    assert (ref.backup_bytes, ref.backup_hold) == (16 * 2**30, "to-pin")  # pinned at its first release
    record.set_trust(CID, Trust([], backup_bytes=16 * 2**30, retained=True, pinned=True))
    assert running_refs([on_standby(service(), record)])[0].backup_hold == "held"
    record.set_trust(CID, Trust([], backup_bytes=16 * 2**30))
    assert on_standby(service(), record).backup_hold == "on-release"  # not retained: only while released
    record.mark(entry())
    seen = on_standby(service(), record)
    assert (seen.state, seen.backup_bytes, seen.backup_hold) == ("standby", 3 * 2**30, "held")
    assert seen.to_dict()["backup_hold"] == "held"


def warm_host(tmp_path: Path, **swap: object) -> tuple[Any, Path]:
    """A FakeHost whose profile ``w`` (the stand-in demo) is a warm standby; its chats go to the fake engine."""
    from servectl.standin.process import free_port
    from servectl.testing import FakeHost
    from servectl.testing.docker import write_test_profile

    folder, home = tmp_path / "profiles", tmp_path / "home"
    write_test_profile(folder, "w", port=free_port(), swap={"standby": "warm", **swap})
    environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
    return FakeHost(state_dir=home, environ=environ), home


def test_a_warm_service_gets_its_fingerprint_at_its_first_start_before_any_release(tmp_path: Path) -> None:
    """The first resume has a fingerprint to be held to even when the service was never primed: it is taken
    right after the first start passed its gate (through the context's HTTP client: the fake engine answers),
    with the host RAM its CPU copy will take."""
    from servectl.service.fingerprint import PROMPTS

    host, home = warm_host(tmp_path, standby_retain_backup=True)
    with host:
        started = host.up(name="w")
        trust = StandbyRecord(home).trust(started.service.container_id)
        assert trust is not None, "no fingerprint after the first start"
        assert [s["prompt"] for s in trust.fingerprint] == list(PROMPTS)
        assert [s["tokens"] for s in trust.fingerprint] == [["OK"]] * len(PROMPTS)  # the fake engine's answer
        assert (trust.cycles, trust.retained, trust.pinned) == (0, True, False)
        assert StandbyRecord(home).entry(started.service.container_id) is None  # fingerprinted, not released
        (seen,) = host.status().services
        assert seen.backup_hold == "to-pin"  # what preflight counts for the next start on this host


def test_a_service_that_is_not_warm_gets_no_fingerprint(tmp_path: Path) -> None:
    from servectl.standin.process import free_port
    from servectl.testing import FakeHost
    from servectl.testing.docker import write_test_profile

    folder, home = tmp_path / "profiles", tmp_path / "home"
    write_test_profile(folder, "p", port=free_port())
    environ = {"HOME": str(tmp_path), "SERVECTL_HOME": str(home), "SERVECTL_PROFILES": str(folder)}
    with FakeHost(state_dir=home, environ=environ) as host:
        started = host.up(name="p")
        assert StandbyRecord(home).trust(started.service.container_id) is None
        assert host.status().services[0].backup_hold is None


def _post(host: Any, path: str, body: object) -> Any:
    (container,) = host.engine.containers.values()
    url = f"http://127.0.0.1:{container.spec.ports[0].host_port}"
    with host.ctx.http.client(url) as http:
        return http.post(f"{url}{path}", json=body)


def test_the_fake_engine_answers_the_memory_saver_by_the_stand_ins_rules(tmp_path: Path) -> None:
    """What the warm swap on a FakeHost (tests/unit/test_resolve_once.py) stands on: the load shows no request, a
    release frees the tags and garbles the answers, a resume takes them back, and a second release or a resume of
    what was not released kills the server without an answer (SGLang's scheduler does; the stand-in too)."""
    import httpx
    import pytest

    tags, chat = {"tags": ["weights", "kv_cache"]}, {"messages": [{"role": "user", "content": "hi"}]}
    for kills in ("resume", "release"):
        host, _home = warm_host(tmp_path / kills)
        with host:
            host.up(name="w")
            (container,) = host.engine.containers.values()
            port = container.spec.ports[0].host_port
            with host.ctx.http.client(f"http://127.0.0.1:{port}") as http:
                loads = http.get(f"http://127.0.0.1:{port}/v1/loads", params={"include": "core"}).json()
            assert [(r["num_running_reqs"], r["num_waiting_reqs"]) for r in loads["loads"]] == [(0, 0)]
            if kills == "release":
                assert _post(host, "/release_memory_occupation", tags).status_code == 200
                assert container.released == {"weights", "kv_cache"}
                assert _post(host, "/v1/chat/completions", chat).json()["choices"][0]["message"]["content"] == "!!"
                assert _post(host, "/resume_memory_occupation", tags).status_code == 200
                assert _post(host, "/v1/chat/completions", chat).json()["choices"][0]["message"]["content"] == "OK"
                assert _post(host, "/release_memory_occupation", tags).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                _post(host, f"/{kills}_memory_occupation", tags)
            assert container.exit_code == 137
