"""Warm standby on the fakes: the state folder's records, the read model and the status text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

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
