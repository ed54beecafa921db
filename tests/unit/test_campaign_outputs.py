"""A campaign folder's outputs drawn from its bench artifacts: the readings, the Pareto frontier, the overlay taper
and Pareto figures, startup times and provenance in the README and campaign.json."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from tests.unit.cli_run import run_cli

from servectl.bench.artifacts import SUMMARY_FILE, point_summary
from servectl.bench.model import PointResult, RequestMeasurement, Stat
from servectl.campaign.plot import pareto_frontier, plot_pareto, plot_taper_overlay, point_series, side_lines
from servectl.campaign.readings import PointAggregate, aggregate, read_readings
from servectl.service.context import Context
from servectl.testing.host import FakeHost

CAMPAIGN = """\
name: taper
base: demo
variants:
  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "300"}}}}
  - {name: wide, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "200", STANDIN_CHUNK_TOKENS: "4"}}}}
workload:
  points:
    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 32}
    - {name: c4, prompt_tokens: 256, concurrency: 4, max_tokens: 32}
decision: {primary_point: c1, min_repeats: 3, max_repeats: 4}
"""


def stat(value: float) -> Stat:
    return Stat(p50=value, min=value, max=value, n=1)


class ArtifactBench:
    """Measures a point from the profile's ``STANDIN_TOKEN_RATE`` (per request: the rate, 0.8 x at C4; total:
    per request x concurrency; ``STANDIN_CHUNK_TOKENS`` 4 doubles the total at C4), 1 % seeded noise, and
    writes the point's ``summary.json`` as bench does (:func:`point_summary`)."""

    def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
        env = ctx.resolve(profile).loaded.profile.engine.env
        c = settings.concurrency[0]
        noise = math.exp(random.Random(f"{profile}/{out.name}").gauss(0, 0.01))
        per_request = float(env["STANDIN_TOKEN_RATE"]) * (0.8 if c > 1 else 1.0) * noise
        total = per_request * c * (2.0 if env.get("STANDIN_CHUNK_TOKENS") == "4" and c > 1 else 1.0)
        point = PointResult(
            prompt_tokens_target=settings.prompt_tokens[0],
            concurrency=c,
            repeats=1,
            prompt_words=100,
            requests=tuple(
                RequestMeasurement("measure", settings.prompt_tokens[0], 100, 32, stream_index=i, complete=True)
                for i in range(c)
            ),
            decode_tok_s=stat(per_request),
            ttft_s=stat(0.1),
            output_tokens=int(total * 10),
            measured_s=10.0,
        )
        out.mkdir(parents=True, exist_ok=True)
        document = {"provenance": {"profile": profile}, "points": [point_summary(point)]}
        (out / SUMMARY_FILE).write_text(json.dumps(document))
        return point


def test_the_pareto_frontier_keeps_only_undominated_points() -> None:
    points = [(100.0, 50.0), (200.0, 40.0), (150.0, 30.0), (200.0, 45.0), (50.0, 60.0), (50.0, 55.0)]
    assert pareto_frontier(points) == [4, 0, 3]  # (150, 30), (200, 40) and (50, 55) are dominated
    assert pareto_frontier([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points dominate neither


def test_a_campaign_folder_has_its_figures_startups_and_provenance(tmp_path: Path, profile_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    file = tmp_path / "taper.yaml"
    file.write_text(CAMPAIGN)
    with FakeHost(state_dir=tmp_path / "home") as host:
        outcome = host.run_campaign(file=file, out_dir=tmp_path / "run", bench_point=ArtifactBench())
        image = host.ctx.docker.image(host.ctx.resolve("demo").plan.docker.image)
        assert image is not None and image.id.startswith("sha256:")
        image_id = image.id
    folder = tmp_path / "run"
    record = json.loads((folder / "campaign.json").read_text())
    statuses = {v["name"]: v["status"] for v in record["variants"]}
    assert statuses["fast"] == "accepted-fast" and outcome.winner == "fast"
    assert record["figures"] == ["taper.png", "pareto.png"]
    for name in record["figures"]:
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (folder / name).stat().st_size > 10_000
    readme = (folder / "README.md").read_text()
    assert "![taper](taper.png)" in readme and "![pareto](pareto.png)" in readme
    assert "| startup s |" in readme and "The incumbent `demo` started in" in readme
    for v in record["variants"]:
        assert v["startup_s"] is not None and v["provenance"]["plan_hash"]
        assert set(v["provenance"]) == {"plan_hash", "image", "image_digest", "image_ids", "model_revision"}
        assert v["provenance"]["image_digest"] is None  # the stand-in's tag is not pinned: the id it ran says which
        assert v["provenance"]["image_ids"] == [image_id]
    assert record["incumbent"]["provenance"]["image_ids"] == [image_id]
    assert "ran on" not in readme  # one image throughout: no warning
    # the readings are the artifacts' numbers, the same values the decision compared
    readings = read_readings(folder, record)
    assert len(readings) == len(record["measurements"])
    assert [r.value for r in readings] == [m["value"] for m in record["measurements"]]
    by_key = {(a.variant, a.point): a for a in aggregate(readings)}
    assert by_key[("fast", "c4")].decode_tok_s == pytest.approx(240, rel=0.02)
    assert by_key[("wide", "c4")].output_tok_s == pytest.approx(200 * 0.8 * 4 * 2, rel=0.02)  # 2 x per request x C


def test_without_artifacts_the_readme_says_why_there_are_no_figures(tmp_path: Path, profile_dir: Path) -> None:
    class Bare(ArtifactBench):
        def __call__(self, ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
            point = super().__call__(ctx, profile, settings, out)
            (out / SUMMARY_FILE).unlink()
            return point

    file = tmp_path / "taper.yaml"
    file.write_text(CAMPAIGN)
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.run_campaign(file=file, out_dir=tmp_path / "run", bench_point=Bare())
    readme = (tmp_path / "run" / "README.md").read_text()
    assert "No figures: " in readme and "![" not in readme
    record = json.loads((tmp_path / "run" / "campaign.json").read_text())
    assert record["figures"] == [] and record["figures_note"]


@pytest.fixture
def ran(tmp_path: Path, profile_dir: Path) -> Path:
    """A finished campaign folder whose every repeat left its bench summary."""
    file = tmp_path / "taper.yaml"
    objectives = (
        "objectives:\n  - {name: most-tokens, kind: max_output_tpm}\n"
        "  - {name: impossible, kind: lowest_ttft, decode_floor_tok_s: 1000000}\n"
    )
    typo = "variants:\n  - {name: typo, overrides: {engine: {args: {tp-sise: 2}}}}\n"
    file.write_text(CAMPAIGN.replace("variants:\n", typo) + objectives)
    with FakeHost(state_dir=tmp_path / "home") as host:
        host.run_campaign(file=file, out_dir=tmp_path / "run", bench_point=ArtifactBench(), skip_invalid=True)
    return tmp_path / "run"


def test_the_export_is_a_schema_checked_speed_sweep_with_the_rows_statuses(ran: Path, tmp_path: Path) -> None:
    from servectl.campaign.export import export_campaign, schema_problems

    out = tmp_path / "sweep.json"
    result = export_campaign(ran, out=out)
    record = json.loads(out.read_text())
    assert record["schema_version"] == "local-ai-registry/v1" and record["source"]["kind"] == "servectl-campaign"
    assert record["source"]["winner"] == "fast" and "yuen-log" in record["source"]["decision"]
    rows = {(r["variant"], r["point"]): r for r in record["rows"] if "objective" not in r}
    assert len(rows) == 4 * 2 and len(record["rows"]) == 4 * 2 + 2  # incumbent, typo, fast, wide; two objectives
    objectives = {r["objective"]: r for r in record["rows"] if "objective" in r}
    most = objectives["most-tokens"]  # the highest output tok/min: fast at C4 (wide's 2x chunks are not accepted)
    assert most["status"] == "accepted-most-tokens-profile" and most["profile"] == "taper.most-tokens"
    assert (most["variant"], most["point"], most["concurrency"]) == ("fast", "c4", 4)
    assert most["decode_tok_s"] == rows[("fast", "c4")]["decode_tok_s"]
    unmet = objectives["impossible"]
    assert unmet["status"] == "rejected-impossible-unmet" and unmet["samples"] is None and unmet["concurrency"] is None
    assert rows[("incumbent", "c1")]["status"] == "measured"
    assert rows[("fast", "c4")]["status"] == "accepted-fast" and rows[("fast", "c4")]["concurrency"] == 4
    assert (
        rows[("fast", "c4")]["gain_pct"] > 40 and rows[("fast", "c4")]["samples"] == 4 * rows[("fast", "c4")]["repeats"]
    )
    assert rows[("typo", "c1")]["status"] == "rejected-invalid" and rows[("typo", "c1")]["samples"] is None
    assert rows[("wide", "c1")]["status"] == "inconclusive" and "more repeats" in rows[("wide", "c1")]["reason"]
    assert rows[("fast", "c1")]["decode_tok_s"] == pytest.approx(300, rel=0.03)
    assert schema_problems(record) == [] and result.notes == ()
    # a status outside the vocabulary, or a row without its status, is refused by the shipped schema
    bad = json.loads(out.read_text())
    bad["rows"][0]["status"] = "great"
    del bad["rows"][1]["status"]
    problems = schema_problems(bad)
    assert any(p.startswith("/rows/0/status") for p in problems) and any(p.startswith("/rows/1:") for p in problems)
    from servectl.errors import UsageError

    with pytest.raises(UsageError, match="exists; pass --force"):
        export_campaign(ran, out=out)


def test_campaign_export_on_the_command_line(
    ran: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "export", str(ran))
    assert code == 0, err
    assert json.loads(out)["rows"][0]["variant"] == "incumbent"
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "export", str(ran), "--out", str(tmp_path / "s.json"))
    assert code == 0 and out.startswith(f"wrote {tmp_path / 's.json'}: 10 rows")
    code, out, err = run_cli(monkeypatch, capsys, "campaign", "export", str(tmp_path))
    assert code == 2 and "campaign.json: not found" in err and len(err.strip().splitlines()) == 1


def test_claims_verify_recounts_the_campaign_table_from_the_artifacts(
    ran: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from servectl.campaign.recount import verify_campaign

    clean = verify_campaign(ran)
    assert clean.ok, clean.problems
    assert clean.recounted > 20 and clean.imported == 1  # typo: rejected-invalid, decided before any measurement
    code, out, err = run_cli(monkeypatch, capsys, "claims", "verify", str(ran))
    assert code == 0 and "claims of the campaign table recounted" in out, err
    # a repeat of the accepted variant edited in its artifact: the value, the interval and the README no longer hold
    record = json.loads((ran / "campaign.json").read_text())
    m = next(m for m in record["measurements"] if m["variant"] == "fast" and m["point"] == "c1")
    summary = ran / m["artifacts"] / "summary.json"
    doc = json.loads(summary.read_text())
    doc["points"][0]["decode_tok_s"]["p50"] *= 1.01
    summary.write_text(json.dumps(doc))
    problems = verify_campaign(ran).problems
    assert any(p.startswith(f"measurement fast round {m['round']} c1:") for p in problems)
    assert any(p.startswith("variant fast at c1: the artifacts give") for p in problems), problems
    assert any(p.startswith("README.md: not the table") for p in problems)
    code, out, err = run_cli(monkeypatch, capsys, "claims", "verify", str(ran))
    assert code != 0 and "variant fast at c1" in err
    doc["points"][0]["decode_tok_s"]["p50"] *= 1.5  # an outlier now: the artifacts no longer settle it
    summary.write_text(json.dumps(doc))
    assert (
        "variant fast: the artifacts leave it unsettled, the record says accepted-fast" in verify_campaign(ran).problems
    )


def test_a_cold_and_a_warm_prefix_point_at_one_concurrency_are_two_lines_not_a_zig_zag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = [
        {"name": "c1", "prompt_tokens": 512, "concurrency": 1, "prefix": "cold"},
        {"name": "c4", "prompt_tokens": 512, "concurrency": 4, "prefix": "cold"},
        {"name": "w1", "prompt_tokens": 512, "concurrency": 1, "prefix": "warm"},
        {"name": "w4", "prompt_tokens": 512, "concurrency": 4, "prefix": "warm"},
    ]
    series = point_series(points)
    assert series == {"c1": "512 tok cold", "c4": "512 tok cold", "w1": "512 tok warm", "w4": "512 tok warm"}
    assert point_series(points[:2]) == {}  # one kind of point: one line per side, unnamed
    speed = {"c1": 100.0, "c4": 80.0, "w1": 300.0, "w4": 250.0}
    aggregates = [
        PointAggregate(side, p["name"], p["concurrency"], 3, speed[p["name"]] * gain, 1000.0 * gain, 0.1)
        for side, gain in (("incumbent", 1.0), ("fast", 1.2))
        for p in points
    ]
    lines = side_lines(aggregates, "fast", series)
    assert [(kind, [(a.concurrency, a.decode_tok_s) for a in run]) for kind, run in lines] == [
        ("512 tok cold", [(1, 120.0), (4, 96.0)]),
        ("512 tok warm", [(1, 360.0), (4, 300.0)]),
    ]  # on one line the cold C1, the warm C1, the cold C4... would alternate 120, 360, 96, 300
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn: list[list[tuple[str, list[float]]]] = []
    save = Figure.savefig

    def savefig(fig: Figure, *args: Any, **kwargs: Any) -> None:  # what each plot drew: (label, y values) per line
        drawn.append([(str(line.get_label()), list(line.get_ydata())) for line in fig.axes[0].get_lines()])
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    path = plot_taper_overlay(
        aggregates, shown=["incumbent", "fast"], incumbent_profile="demo", title="t", path=tmp_path / "t.png",
        series=series,
    )  # fmt: skip
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn[0] == [
        ("incumbent (demo), 512 tok cold", [100.0, 80.0]),
        ("incumbent (demo), 512 tok warm", [300.0, 250.0]),
        ("fast, 512 tok cold", [120.0, 96.0]),
        ("fast, 512 tok warm", [360.0, 300.0]),
    ]
    plot_pareto(aggregates, incumbent_profile="demo", winner="fast", title="t", path=tmp_path / "p.png", series=series)
    lines = drawn[1][:-1]  # the last is the frontier
    assert [y for _, y in lines] == [[100.0, 80.0], [300.0, 250.0], [120.0, 96.0], [360.0, 300.0]]
    assert [label for label, _ in lines][::2] == ["incumbent (demo)", "fast (winner)"]  # a side's label once
    assert drawn[1][-1][0] == "Pareto frontier"
