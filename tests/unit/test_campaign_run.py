"""Running a campaign on a simulated lab: each status from its cause, the incumbent interleaved, production put
back however the run ends, and a resumed run that measures nothing twice and ends with the same table."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from servectl.adapters.campaign_db import CampaignDb
from servectl.campaign.model import CampaignBudget, Point
from servectl.campaign.output import write_outputs
from servectl.campaign.run import CampaignRow, Measured, Started, run_campaign
from servectl.campaign.schedule import INCUMBENT
from servectl.campaign.variants import CampaignCheck, CheckedVariant
from servectl.errors import StartupFailed
from servectl.profile.yaml_locations import display_path
from servectl.service.context import Clocks
from servectl.testing.host import FakeHost

CAMPAIGN = """\
name: six
base: demo
variants:
  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "240"}}}}
  - {name: dflash, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "209"}}}}
  - {name: typo, overrides: {engine: {args: {speculative-num-stepz: 3}}}}
  - {name: gatefail, overrides: {engine: {env: {STANDIN_TOOL_FAULT: "none"}}}}
  - {name: nostart, overrides: {engine: {env: {STANDIN_CRASH_AT: "weights"}}}}
  - {name: noise, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "201"}}}}
  - {name: hungry, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "230"}}}}
workload:
  points:
    - {name: c1, prompt_tokens: 512, concurrency: 1, max_tokens: 64}
    - {name: c4, prompt_tokens: 512, concurrency: 4, max_tokens: 64}
gates: {suite: default, only: [smoke]}
decision: {primary_point: c1, min_repeats: 3, max_repeats: 6}
constraints: {vram_reserve_mib: 3072}
"""

#: The simulated speed of each variant at each point (decode tok/s), relative noise 1 %.
SPEED = {
    INCUMBENT: {"c1": 100.0, "c4": 100.0},
    "fast": {"c1": 120.0, "c4": 118.0},
    "dflash": {"c1": 104.3, "c4": 94.5},  # the seed's DFlash2: +4.3 % at C1, -5.5 % at C4
    "noise": {"c1": 100.2, "c4": 100.0},
    "hungry": {"c1": 115.0, "c4": 115.0},
    "gatefail": {"c1": 130.0, "c4": 130.0},
}


class SimLab:
    """A lab whose measurements are a seeded function of (variant, round, point): a replay measures the same."""

    def __init__(self, *, interrupt_after: int | None = None) -> None:
        self.calls: list[tuple[str, int, str]] = []
        self.started: list[str] = []
        self.restored = 0
        self.interrupt_after = interrupt_after
        self.running: str | None = None

    def start(self, variant: CheckedVariant) -> Started:
        self.started.append(variant.name)
        self.running = variant.name
        if variant.name == "nostart":
            return Started(None, ("[2026-12-07 10:00:00 TP0] Loading weights", "Scheduler hit an exception: crash"))
        return Started(2.0)

    def qualify(self, variant: CheckedVariant) -> str | None:
        return "smoke" if variant.name == "gatefail" else None

    def measure(self, variant: CheckedVariant, point: Point, round_index: int) -> Measured:
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append((variant.name, round_index, point.name))
        rng = random.Random(f"{variant.name}/{round_index}/{point.name}")
        return Measured(SPEED[variant.name][point.name] * math.exp(rng.gauss(0, 0.01)))

    def free_vram_mib(self) -> list[int] | None:
        return [2048, 2048] if self.running == "hungry" else [9000, 9000]

    def restore(self) -> None:
        self.restored += 1


@pytest.fixture
def check(tmp_path: Path, profile_dir: Path) -> CampaignCheck:
    path = tmp_path / "six.yaml"
    path.write_text(CAMPAIGN)
    with FakeHost(state_dir=tmp_path / "home") as host:
        return host.check_campaign(file=path, skip_invalid=True)


def run(check: CampaignCheck, folder: Path, lab: SimLab) -> list[CampaignRow]:
    clock = iter(range(10**6))
    clocks = Clocks(monotonic=lambda: 0.0, wall=lambda: float(next(clock)), sleep=lambda s: None)
    with CampaignDb(folder) as db:
        return run_campaign(check, db=db, lab=lab, clocks=clocks)


def test_each_variant_gets_the_status_of_its_cause(check: CampaignCheck, tmp_path: Path) -> None:
    lab = SimLab()
    rows = {r.name: r for r in run(check, tmp_path / "out", lab)}
    assert {name: r.status for name, r in rows.items()} == {
        "fast": "accepted-fast",
        "dflash": "rejected-c4-regression",
        "typo": "rejected-invalid",
        "gatefail": "rejected-gate-smoke",
        "nostart": "rejected-startup",
        "noise": "inconclusive",
        "hungry": "rejected-vram",
    }
    assert "Scheduler hit an exception" in rows["nostart"].reason
    assert "typo" not in lab.started  # no container for an invalid variant
    assert lab.restored == 1
    assert lab.started[0] == INCUMBENT  # round 1 runs forwards
    visits = [name for name in lab.started if name in (INCUMBENT, "noise")]
    assert visits.count(INCUMBENT) >= 6 and visits.count("noise") == 6  # interleaved every round
    assert len(set(lab.calls)) == len(lab.calls)  # nothing measured twice


def test_a_resumed_campaign_measures_nothing_twice_and_ends_with_the_same_table(
    check: CampaignCheck, tmp_path: Path
) -> None:
    whole = run(check, tmp_path / "whole", SimLab())
    first = SimLab(interrupt_after=17)
    with pytest.raises(KeyboardInterrupt):
        run(check, tmp_path / "killed", first)
    assert first.restored == 1  # production back although the run was interrupted
    with CampaignDb(tmp_path / "killed", read_only=True) as reader:  # what `campaign status` reads
        assert len(reader.measurements()) == 17
    second = SimLab()
    resumed = run(check, tmp_path / "killed", second)
    assert not set(first.calls) & set(second.calls)
    assert [(r.name, r.status, r.reason) for r in resumed] == [(r.name, r.status, r.reason) for r in whole]


def test_a_variant_under_the_reserve_is_rejected_unless_the_file_waives_it_and_the_row_says_so(
    check: CampaignCheck, tmp_path: Path, profile_dir: Path
) -> None:
    rows = {r.name: r for r in run(check, tmp_path / "strict", SimLab())}
    assert rows["hungry"].status == "rejected-vram"
    assert rows["hungry"].reason == "2,048 MiB free on a card after its measurements, under the 3,072 MiB reserve"
    path = tmp_path / "waived.yaml"
    why = "KV cache sized for C64 on purpose; the host runs nothing beside it"
    path.write_text(
        CAMPAIGN.replace(
            "constraints: {vram_reserve_mib: 3072}", f"constraints: {{vram_reserve_mib: 3072, reserve_waiver: {why}}}"
        )
    )
    with FakeHost(state_dir=tmp_path / "home") as host:
        waived = host.check_campaign(file=path, skip_invalid=True)
    rows = {r.name: r for r in run(waived, tmp_path / "waived", SimLab())}
    assert rows["hungry"].status == "accepted-hungry"
    assert rows["hungry"].reason.endswith(
        "; 2,048 MiB free on a card after its measurements, under the 3,072 MiB reserve, "
        f"waived ({display_path(path)}:17: {why})"
    )
    with CampaignDb(tmp_path / "waived", read_only=True) as db:
        detail = next(row.detail for row in db.variants() if row.name == "hungry")
    assert detail["vram_waiver"].endswith(f"waived ({display_path(path)}:17: {why})")


def test_an_incumbent_that_does_not_start_aborts_and_restores(check: CampaignCheck, tmp_path: Path) -> None:
    class Broken(SimLab):
        def start(self, variant: CheckedVariant) -> Started:
            return Started(None, ("exit 1", "boom")) if variant.name == INCUMBENT else super().start(variant)

    lab = Broken()
    with pytest.raises(StartupFailed, match=r"the incumbent demo did not start \(exit 1\)") as err:
        run(check, tmp_path / "out", lab)
    assert err.value.last_log_lines == ("boom",)
    assert lab.restored == 1


# -- the database --------------------------------------------------------------------------------------------
def test_a_reader_sees_committed_rows_while_a_writer_holds_a_transaction(tmp_path: Path) -> None:
    with CampaignDb(tmp_path) as writer:
        writer.record_measurement("fast", 1, "c1", 120.0, flagged=False, detail={"n": 1}, at=1.0)
        writer._db.execute("BEGIN IMMEDIATE")  # a write in progress (WAL: readers are not blocked)
        writer._db.execute(
            "INSERT INTO measurements (variant, round, point, value, flagged, detail, measured_at) "
            "VALUES ('fast', 2, 'c1', 121.0, 0, '{}', 2.0)"
        )
        with CampaignDb(tmp_path, read_only=True) as reader:
            assert [(m.variant, m.round, m.value, m.detail) for m in reader.measurements()] == [
                ("fast", 1, 120.0, {"n": 1})
            ]
        writer._db.commit()
        assert writer.measured("fast", 2) == {"c1"}


def test_rows_committed_before_a_kill_9_are_all_there(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from servectl.adapters.campaign_db import CampaignDb\n"
        "db = CampaignDb(Path(sys.argv[1]))\n"
        "for i in range(1, 100000):\n"
        "    db.record_measurement('v', i, 'c1', float(i), flagged=False, detail=None, at=float(i))\n"
        "    print(i, flush=True)\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    with subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    ) as child:
        assert child.stdout is not None
        seen = 0
        for line in child.stdout:
            seen = int(line)
            if seen >= 25:
                break
        child.send_signal(signal.SIGKILL)
        child.wait()
    with CampaignDb(tmp_path) as db:  # reopened for writing: recovers the WAL
        rounds = sorted(m.round for m in db.measurements())
    assert rounds[:seen] == list(range(1, seen + 1))  # every commit acknowledged before the kill survived


def test_the_budget_ends_the_campaign_with_the_open_variants_inconclusive(check: CampaignCheck, tmp_path: Path) -> None:
    limited = check.loaded.campaign.model_copy(update={"budget": CampaignBudget(wall_time_s=5.0)})
    budgeted = replace(check, loaded=replace(check.loaded, campaign=limited))
    times = iter([0.0, 1.0, 100.0, 100.0, 100.0])
    clocks = Clocks(monotonic=lambda: next(times), wall=lambda: 0.0, sleep=lambda s: None)
    lab = SimLab()
    with CampaignDb(tmp_path / "out") as db:
        rows = {r.name: r for r in run_campaign(budgeted, db=db, lab=lab, clocks=clocks)}
        stored = {row.name: row.status for row in db.variants()}
    assert rows["noise"].status == "inconclusive" and rows["noise"].reason == "the budget of 5 s ended after 1 repeats"
    assert rows["typo"].status == "rejected-invalid" and stored["noise"] == "inconclusive"
    assert {name for name, _, _ in lab.calls} <= {INCUMBENT, "fast", "dflash", "noise", "hungry"}
    assert lab.restored == 1


class RebuiltLab(SimLab):
    """A lab whose tag ``fast`` runs is rebuilt after its second visit: the same tag, another image."""

    def start(self, variant: CheckedVariant) -> Started:
        started = super().start(variant)
        if started.failure:
            return started
        visits = self.started.count(variant.name)
        rebuilt = variant.name == "fast" and visits > 2
        return replace(started, image_id="sha256:" + ("b" if rebuilt else "a") * 64)


def test_the_record_names_the_images_each_side_ran_and_warns_when_a_tag_was_rebuilt_midway(
    check: CampaignCheck, tmp_path: Path
) -> None:
    folder = tmp_path / "out"
    rows = run(check, folder, RebuiltLab())
    with CampaignDb(folder) as db:
        outcome = write_outputs(folder, check, rows, db)
    record = json.loads((folder / "campaign.json").read_text())
    ids = {v["name"]: v["provenance"]["image_ids"] for v in record["variants"]}
    assert ids["fast"] == ["sha256:" + "a" * 64, "sha256:" + "b" * 64]  # in the order first seen
    assert ids["noise"] == ["sha256:" + "a" * 64] and ids["nostart"] == [] and ids["typo"] == []
    assert record["incumbent"]["provenance"]["image_ids"] == ["sha256:" + "a" * 64]
    readme = (folder / "README.md").read_text()
    warnings = [line for line in readme.splitlines() if line.startswith("Warning:")]
    assert warnings == [
        "Warning: `fast` ran on 2 different images (aaaaaaaaaaaa, bbbbbbbbbbbb): its image changed during the "
        "campaign, so its rounds mix builds; pin image.digest and run it again."
    ]
    assert outcome.folder == folder


def test_a_signal_while_production_is_put_back_stops_the_waiting_with_one_line(
    check: CampaignCheck, tmp_path: Path
) -> None:
    """The way back runs under a guard as a swap's undo does: a signal there raises Abandon in the lab (not a
    KeyboardInterrupt halfway), and the campaign says in one line that production may not be back (exit 130)."""
    import os
    import signal

    from servectl.errors import CampaignInterrupted

    class CtrlCWhileRestoring(SimLab):
        def restore(self) -> None:
            super().restore()
            os.kill(os.getpid(), signal.SIGINT)  # while production comes back

    lab = CtrlCWhileRestoring()
    with pytest.raises(CampaignInterrupted) as stopped:
        run(check, tmp_path / "run", lab)
    message = str(stopped.value)
    assert lab.restored == 1 and stopped.value.exit_code == 130 and "\n" not in message
    assert message.startswith("campaign six: SIGINT while putting back the stop of its variants: stopped waiting.")
    assert "`servectl recover` if a swap was left unfinished" in message
    with CampaignDb(tmp_path / "run", read_only=True) as db:
        assert [kind for _, kind, _, _ in db.events()][-1] == "restore-stopped"
