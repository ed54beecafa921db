"""``Host.run_campaign`` on a fake host: variants written as profiles that extend the base, started through swap
on the fake engine, measured (a fake bench reading the variant's token rate), production put back at the end,
and a second run of the same folder that measures nothing again."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.cli_run import run_cli

from servectl.bench.model import PointResult, Stat
from servectl.errors import UsageError
from servectl.plan.compile import DockerRunSpec
from servectl.service.context import Context
from servectl.testing.engine_script import FakeScript, sglang_like_script
from servectl.testing.host import FakeHost

CAMPAIGN = """\
name: rates
base: demo
variants:
  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "300"}}}}
  - {name: same, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "200"}, max_running_requests: 2}}}
  - {name: crash, overrides: {engine: {env: {STANDIN_CRASH_AT: "weights"}}}}
workload:
  points:
    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 32}
decision: {primary_point: c1, min_repeats: 3, max_repeats: 4}
"""


class RateBench:
    """Measures a point as the profile's ``STANDIN_TOKEN_RATE`` with 1 % seeded noise; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
        rate = float(ctx.resolve(profile).loaded.profile.engine.env["STANDIN_TOKEN_RATE"])
        self.calls.append((profile, out.name))
        value = rate * math.exp(random.Random(f"{profile}/{out.name}").gauss(0, 0.01))
        return PointResult(
            prompt_tokens_target=settings.prompt_tokens[0],
            concurrency=settings.concurrency[0],
            repeats=1,
            prompt_words=100,
            decode_tok_s=Stat(p50=value, min=value, max=value, n=1),
        )


@pytest.fixture
def campaign(tmp_path: Path, profile_dir: Path) -> Path:
    path = tmp_path / "rates.yaml"
    path.write_text(CAMPAIGN)
    return path


def crashing(spec: DockerRunSpec) -> FakeScript:
    """The fake engine's container: SGLang's startup, or an exit while loading weights for STANDIN_CRASH_AT."""
    if ("STANDIN_CRASH_AT", "weights") in spec.environment:
        return FakeScript(
            lines=((0.01, "Load weight begin."), (0.02, "RuntimeError: CUDA out of memory")),
            exit_at_s=0.03,
            exit_code=1,
        )
    return sglang_like_script()


def test_a_campaign_runs_its_variants_through_swap_and_puts_production_back(campaign: Path, tmp_path: Path) -> None:
    bench = RateBench()
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = crashing
        host.up(name="demo-rollback")  # production, on the demo's port: every variant swaps it out
        outcome = host.run_campaign(file=campaign, out_dir=tmp_path / "run", bench_point=bench)
        running = [(s.profile, s.state) for s in host.services()]
    statuses = {row.name: row.status for row in outcome.rows}
    assert statuses["fast"] == "accepted-fast" and statuses["crash"] == "rejected-startup"
    crash = next(row for row in outcome.rows if row.name == "crash")
    assert "CUDA out of memory" in crash.reason  # the failing log lines
    assert statuses["same"] == "inconclusive"
    assert running == [("demo-rollback", "ready")]  # production back, no variant left running
    written = yaml.safe_load((tmp_path / "run" / "profiles" / "rates.fast.yaml").read_text())
    assert written["extends"] == "demo" and written["engine"] == {"env": {"STANDIN_TOKEN_RATE": "300"}}
    record = json.loads((tmp_path / "run" / "campaign.json").read_text())
    assert record["schema"] == "servectl.campaign/v1" and record["winner"] == "fast"
    fast = next(v for v in record["variants"] if v["name"] == "fast")
    assert fast["provenance"]["plan_hash"] and fast["startup_s"] is not None and fast["comparisons"][0]["point"] == "c1"
    assert sum(m["variant"] == "incumbent" for m in record["measurements"]) >= 3
    table = (tmp_path / "run" / "README.md").read_text()
    assert "| fast | accepted-fast | +50." in table and "| crash | rejected-startup | - |" in table
    assert outcome.winner_profile == tmp_path / "run" / "winner" / "rates.fast.yaml"
    winner = yaml.safe_load(outcome.winner_profile.read_text())
    assert {k: winner[k] for k in ("name", "extends", "status")} == {
        "name": "rates.fast",
        "extends": "demo",
        "status": "candidate",
    }
    assert ("demo", "r1-c1") in bench.calls and ("rates.fast", "r3-c1") in bench.calls
    again = RateBench()
    with FakeHost(state_dir=tmp_path / "home") as host:
        second = host.run_campaign(file=campaign, out_dir=tmp_path / "run", bench_point=again)
    assert again.calls == []  # everything was measured and settled: nothing is measured again
    assert [(r.name, r.status) for r in second.rows] == [(r.name, r.status) for r in outcome.rows]


def test_status_reads_a_running_campaign_and_resume_refuses_a_changed_file(campaign: Path, tmp_path: Path) -> None:
    seen: list[Any] = []
    folder = tmp_path / "run"

    class Watching(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            if len(self.calls) == 4:
                with FakeHost(state_dir=tmp_path / "other") as reader:  # as `campaign status` in another process
                    seen.append(reader.campaign_status(folder=folder))
            return super().__call__(ctx, profile, settings, out)

    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = crashing
        host.run_campaign(file=campaign, out_dir=folder, bench_point=Watching())
        done = host.campaign_status(folder=folder)
        (during,) = seen
        assert during.measurements == 4 and not during.finished and during.eta_s is not None
        assert {v.name: v.status for v in during.variants}["fast"] == "measuring"
        assert done.finished and done.settled == 3 and done.eta_s is None
        again = host.resume_campaign(folder=folder, bench_point=RateBench())
        assert [r.status for r in again.rows] == [v.status for v in done.variants]
        campaign.write_text(campaign.read_text().replace("max_repeats: 4", "max_repeats: 5"))
        with pytest.raises(UsageError, match="changed since campaign rates began"):
            host.resume_campaign(folder=folder, bench_point=RateBench())
        with pytest.raises(UsageError, match="no campaign here"):
            host.campaign_status(folder=tmp_path)


def test_campaign_status_and_resume_on_the_command_line(
    campaign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = crashing
        host.run_campaign(file=campaign, out_dir=folder, bench_point=RateBench())
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "status", str(folder))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("campaign rates: 3/3 variants settled, ") and lines[0].endswith("; finished")
    assert lines[1].split()[:3] == ["fast", "accepted-fast", "(3"]
    assert json.loads(run_cli(monkeypatch, capsys, "campaign", "status", str(folder), "--json")[1])["settled"] == 3
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "resume", str(tmp_path / "nowhere"))
    assert code == 2 and out == ""
    missing = f"{tmp_path / 'nowhere'}: no campaign here (campaign.sqlite missing)"
    assert err.strip() == f"error: {missing}; give the folder of `campaign run --out`"


def test_the_gates_are_the_suite_cut_to_the_ids_the_campaign_names(campaign: Path, tmp_path: Path) -> None:
    from servectl.bench.qualify.suite import GATE_ORDER
    from servectl.campaign.lab import gates_suite

    campaign.write_text(campaign.read_text() + "gates: {suite: default, only: [smoke, tools]}\n")
    with FakeHost(state_dir=tmp_path / "home") as host:
        check = host.check_campaign(file=campaign)
    cut = gates_suite(check)
    assert cut is not None and "(only smoke, tools)" in cut.source
    assert [g for g in GATE_ORDER if getattr(cut.suite.gates, g) is not None] == ["smoke", "tools"]
    campaign.write_text(campaign.read_text().replace("only: [smoke, tools]", "only: []"))
    with FakeHost(state_dir=tmp_path / "home") as host:
        whole = gates_suite(host.check_campaign(file=campaign))
    assert whole is not None and whole.suite.gates.endurance is not None


def test_a_run_killed_with_a_variant_up_is_resumed_and_puts_production_back(
    campaign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servectl.campaign.lab import ServiceLab

    class Killed(BaseException):
        """Stands for kill -9: nothing after it runs (the lab's restore is switched off for the first run)."""

    class Dies(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            if len(self.calls) == 5:
                raise Killed
            return super().__call__(ctx, profile, settings, out)

    folder = tmp_path / "run"
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = crashing
        host.up(name="demo-rollback")
        with monkeypatch.context() as patched:
            patched.setattr(ServiceLab, "restore", lambda self: None)
            with pytest.raises(Killed):
                host.run_campaign(file=campaign, out_dir=folder, bench_point=Dies())
        assert [s.profile for s in host.services() if s.state == "ready"] != ["demo-rollback"]  # a variant runs
        outcome = host.resume_campaign(folder=folder, bench_point=RateBench())
        assert {r.name: r.status for r in outcome.rows}["fast"] == "accepted-fast"
        assert [(s.profile, s.state) for s in host.services()] == [("demo-rollback", "ready")]


def test_a_signal_during_a_variants_swap_ends_the_campaign_with_production_back(campaign: Path, tmp_path: Path) -> None:
    """The swap's own guard rolled the interrupted swap back and the campaign took it for a failed start
    (rejected-startup) and ran on; now the campaign stops (exit 130), production back, measurements kept."""
    import os
    import signal

    from servectl.adapters.campaign_db import CampaignDb
    from servectl.errors import CampaignInterrupted

    def ctrl_c_while_fast_starts(spec: DockerRunSpec) -> FakeScript:
        if ("STANDIN_TOKEN_RATE", "300") in spec.environment:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the swap starts the variant
        return sglang_like_script()

    bench = RateBench()
    folder = tmp_path / "run"
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = ctrl_c_while_fast_starts
        host.up(name="demo-rollback")
        with pytest.raises(CampaignInterrupted) as stopped:
            host.run_campaign(file=campaign, out_dir=folder, bench_point=bench)
        running = [(s.profile, s.state) for s in host.services()]
    assert stopped.value.exit_code == 130
    assert "interrupted (SIGINT) in round 1 at fast; demo-rollback is back" in str(stopped.value)
    assert f"servectl campaign resume {folder}" in str(stopped.value)
    assert running == [("demo-rollback", "ready")]
    assert bench.calls == [("demo", "r1-c1")]  # the incumbent's first point, then nothing more
    with CampaignDb(folder, read_only=True) as db:
        assert [kind for _, kind, _, _ in db.events()][-2:] == ["interrupted", "restored"]
        assert {row.name: row.status for row in db.variants()}["fast"] == "measuring"  # not rejected-startup


def test_a_signal_after_a_swap_settled_still_ends_the_campaign_in_the_cli(
    campaign: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the CLI a signal after a transaction settled is only noted (so a finished swap is not cut while it
    reports); a campaign's swaps are inside its own guard, so a Ctrl-C while a variant is measured stops it."""
    import os
    import signal

    from servectl import signals
    from servectl.errors import CampaignInterrupted

    monkeypatch.setattr(signals._STATE, "note_late", True)  # what the CLI's entry sets
    handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    class CtrlC(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            if profile == "rates.fast":
                os.kill(os.getpid(), signal.SIGINT)
            return super().__call__(ctx, profile, settings, out)

    bench = CtrlC()
    try:
        with FakeHost(state_dir=tmp_path / "home") as host:
            host.up(name="demo-rollback")
            with pytest.raises(CampaignInterrupted):
                host.run_campaign(file=campaign, out_dir=tmp_path / "run", bench_point=bench)
            running = [(s.profile, s.state) for s in host.services()]
    finally:  # the CLI's outermost guard leaves its late-signal note installed
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert running == [("demo-rollback", "ready")]
    assert bench.calls == [("demo", "r1-c1")]  # the signal came in the variant's first point: nothing after it


def test_a_second_signal_while_production_is_put_back_stops_the_waiting_and_says_how_to_finish(
    campaign: Path, tmp_path: Path
) -> None:
    """The campaign put production back outside any guard: a second Ctrl-C there cut the swap back halfway (a bare
    KeyboardInterrupt, nothing said). Now the way back runs under a guard as a swap's undo does: the second signal
    stops the waiting, the swap keeps its journal for recover, and the campaign says so in one line (exit 130)."""
    import os
    import signal

    from servectl.adapters.campaign_db import CampaignDb
    from servectl.errors import CampaignInterrupted
    from servectl.plan.compile import LABEL_PROFILE

    first: list[int] = []

    class CtrlC(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            if profile == "rates.fast" and not first:
                first.append(signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # the first: while the variant is measured
            return super().__call__(ctx, profile, settings, out)

    def ctrl_c_again_while_production_starts(spec: DockerRunSpec) -> FakeScript:
        if len(first) == 1 and spec.labels.get(LABEL_PROFILE) == "demo-rollback":
            first.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # the second: while the campaign starts production again
        return sglang_like_script()

    folder = tmp_path / "run"
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = ctrl_c_again_while_production_starts
        host.up(name="demo-rollback")
        with pytest.raises(CampaignInterrupted) as stopped:
            host.run_campaign(file=campaign, out_dir=folder, bench_point=CtrlC())
        message = str(stopped.value)
        assert stopped.value.exit_code == 130 and "\n" not in message
        assert message.startswith("campaign rates: SIGINT while putting back demo-rollback: interrupted (SIGINT)")
        assert "stopped waiting after SIGINT" in message  # the swap's own words: its journal is kept
        assert "`servectl recover` (it starts rates.fast again), then `servectl swap demo-rollback` puts" in message
        assert f"`servectl campaign resume {folder}` continues it" in message
        with CampaignDb(folder, read_only=True) as db:
            assert [kind for _, kind, _, _ in db.events()][-2:] == ["interrupted", "restore-stopped"]
        host.recover()  # what the message says: the unfinished swap is settled, then production comes back
        host.swap(name="demo-rollback", stage=False)
        assert [(s.profile, s.state) for s in host.services()] == [("demo-rollback", "ready")]


def test_a_gateway_in_front_of_production_answers_maintenance_with_the_eta_while_the_campaign_runs(
    campaign: Path, tmp_path: Path
) -> None:
    import httpx

    from servectl.adapters.gateway_admin import gateway_status
    from servectl.gateway.config import GatewayConfig
    from servectl.gateway.keys import create_key
    from servectl.standin.process import free_port
    from servectl.testing.gateway import GatewayThread

    home = tmp_path / "home"
    config = GatewayConfig.model_validate(
        {"listen": f"127.0.0.1:{free_port()}", "aliases": {"chat": ["demo-rollback"]}, "swap": {"hold_s": 5}}
    )
    key, _ = create_key(config.keys_path({"SERVECTL_HOME": str(home)}), name="client", clock=time.time)
    answers: list[httpx.Response] = []

    class Asking(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            if not answers:  # a client of production while the campaign measures
                body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                answers.append(httpx.post(f"{gw.base_url}/v1/chat/completions", json=body, headers=auth, timeout=10))
            return super().__call__(ctx, profile, settings, out)

    auth = {"Authorization": f"Bearer {key}"}
    with (
        FakeHost(state_dir=home) as host,
        GatewayThread(config, upstreams=lambda: [], state_dir=home) as gw,
    ):
        host.up(name="demo-rollback")
        host.run_campaign(file=campaign, out_dir=tmp_path / "run", bench_point=Asking())
        status = gateway_status(home)
    (answer,) = answers
    assert answer.status_code == 503 and answer.headers["X-Servectl-Reason"] == "maintenance"
    assert f"servectl campaign rates ({tmp_path / 'run'})" in answer.json()["error"]["message"]
    assert int(answer.headers["Retry-After"]) > 0
    assert status is not None and status["holds"] == []  # let go once production was back


def test_a_warm_prefix_point_is_measured_with_a_shared_prefix_after_a_warm_up_and_a_cold_one_without(
    tmp_path: Path, profile_dir: Path
) -> None:
    asked: dict[str, tuple[bool, bool]] = {}

    class Recording(RateBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            asked[out.name.split("-", 1)[1]] = (settings.shared_prefix, settings.warmup)
            return super().__call__(ctx, profile, settings, out)

    path = tmp_path / "warm.yaml"
    path.write_text(
        CAMPAIGN.replace(
            "    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 32}\n",
            "    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 32}\n"
            "    - {name: warm, prompt_tokens: 256, concurrency: 1, max_tokens: 32, prefix: warm}\n"
            "  warmup: false\n",
        )
    )
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.run_campaign(file=path, out_dir=tmp_path / "run", bench_point=Recording())
    assert asked == {"c1": (False, False), "warm": (True, True)}


def test_production_is_what_the_campaigns_profiles_displace_not_every_service_on_the_engine(
    campaign: Path, tmp_path: Path, profile_dir: Path
) -> None:
    """A service on another port and card, not in any variant's way, is not the campaign's to put back: it
    runs on untouched (a shared engine listed another user's service as production and the restore swapped
    to it)."""
    from servectl.adapters.campaign_db import CampaignDb

    (profile_dir / "side.yaml").write_text(
        "name: side\nextends: demo\nserve: {port: 18999}\ncontainer: {name: servectl-side}\n"
    )
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.up(name="side")
        side = next(s for s in host.services() if s.profile == "side")
        host.up(name="demo-rollback")
        host.run_campaign(file=campaign, out_dir=tmp_path / "run", bench_point=RateBench())
        running = {s.profile: (s.state, s.container_id) for s in host.services()}
    with CampaignDb(tmp_path / "run", read_only=True) as db:
        assert json.loads(db.meta()["production"]) == ["demo-rollback"]
    assert running["side"] == ("ready", side.container_id)  # never stopped
    assert running["demo-rollback"][0] == "ready" and set(running) == {"side", "demo-rollback"}


def test_the_incumbents_earlier_figures_are_shown_beside_it_and_decide_nothing(campaign: Path, tmp_path: Path) -> None:
    from servectl.cli.views.campaign import outcome_lines

    (tmp_path / "ref.csv").write_text(
        "# name: published\nprompt_tokens,decode_tok_s,concurrency\n250,180,1\n4096,150,1\n"
    )
    with_refs = tmp_path / "refs.yaml"
    with_refs.write_text(CAMPAIGN.replace("workload:", "incumbent: {reference_csv: ref.csv}\nworkload:"))
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.engine.script_for = crashing
        plain = host.run_campaign(file=campaign, out_dir=tmp_path / "plain", bench_point=RateBench())
        shown = host.run_campaign(file=with_refs, out_dir=tmp_path / "refs", bench_point=RateBench())
    assert [(r.name, r.status) for r in shown.rows] == [(r.name, r.status) for r in plain.rows]  # nothing decided
    assert [r.reason for r in shown.rows][:2] == [r.reason for r in plain.rows][:2]  # the same intervals
    (ref,) = shown.references
    assert (ref.label, ref.kind) == ("published", "reference")
    assert ref.points["c1"] is not None and ref.points["c1"]["decode_tok_s"] == 180.0  # 250 tokens: within 64
    record = json.loads((tmp_path / "refs" / "campaign.json").read_text())
    assert record["incumbent"]["references"][0]["points"]["c1"]["decode_tok_s"] == 180.0
    line = next(x for x in outcome_lines(shown) if x.startswith("incumbent's earlier reference published"))
    assert "c1 180.0 (measured here 20" in line and line.endswith("(shown, never decides)")
