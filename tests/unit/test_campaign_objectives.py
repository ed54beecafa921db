"""Operating points: each objective picks one (variant, point) among the incumbent and the accepted variants from
the medians of what was measured, and an accepted one is written as a profile (the chosen variant's overrides and
the point's max_running_requests) that loads and compiles like any other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servectl.campaign.model import Objective, Point
from servectl.campaign.objectives import PointFigures, choose, point_figures

C1 = Point(name="c1", prompt_tokens=512, concurrency=1, max_tokens=64)
C8 = Point(name="c8", prompt_tokens=512, concurrency=8, max_tokens=64)
C32 = Point(name="c32", prompt_tokens=512, concurrency=32, max_tokens=64)
WARM = Point(name="warm-c8", prompt_tokens=512, concurrency=8, max_tokens=64, prefix="warm")


def figures() -> list[PointFigures]:
    """Speeds that fall and throughput that rises with concurrency, as an engine's do."""
    seen: list[tuple[str, str, dict[str, Any]]] = []
    table = {
        ("incumbent", "c1"): (100.0, 0.05, 6_000.0),
        ("incumbent", "c8"): (70.0, 0.15, 33_600.0),
        ("incumbent", "c32"): (30.0, 0.90, 57_600.0),
        ("fast", "c1"): (120.0, 0.05, 7_200.0),
        ("fast", "c8"): (85.0, 0.12, 40_800.0),
        ("fast", "c32"): (35.0, 1.20, 67_200.0),
        ("fast", "warm-c8"): (85.0, 0.03, 40_800.0),
    }
    for (variant, point), (decode, ttft, tpm) in table.items():
        for noise in (0.99, 1.0, 1.01):  # three repeats; the median is the middle one
            metrics = {"decode_tok_s": decode * noise, "ttft_s": ttft * noise, "output_tok_per_min": tpm * noise}
            seen.append((variant, point, metrics))
    return point_figures([C1, C8, C32, WARM], seen, ["incumbent", "fast"])


OVERRIDES = {"incumbent": {}, "fast": {"engine": {"env": {"STANDIN_TOKEN_RATE": "240"}}}}


def test_each_objective_picks_its_point_from_the_medians() -> None:
    rows = {
        o.name: choose(o, figures(), OVERRIDES, "sweep")
        for o in (
            Objective(name="balanced-latency", kind="lowest_ttft", decode_floor_tok_s=80),
            Objective(name="max-output-tpm", kind="max_output_tpm"),
            Objective(name="budget-c8", kind="latency_budget", ttft_budget_s=0.2, concurrency=8),
            Objective(name="budget", kind="latency_budget", ttft_budget_s=1.0),
        )
    }
    balanced = rows["balanced-latency"]
    assert balanced.status == "accepted-balanced-latency-profile"
    assert balanced.chosen is not None and (balanced.chosen.variant, balanced.chosen.point.name) == ("fast", "warm-c8")
    assert balanced.chosen.ttft_s == pytest.approx(0.03)  # the median of 0.0297, 0.03, 0.0303
    assert balanced.overrides == {"engine": {"env": {"STANDIN_TOKEN_RATE": "240"}, "max_running_requests": 8}}
    assert balanced.profile == "sweep.balanced-latency"
    top = rows["max-output-tpm"].chosen
    assert top is not None and (top.variant, top.point.name) == ("fast", "c32")
    assert rows["max-output-tpm"].overrides["engine"]["max_running_requests"] == 32
    c8 = rows["budget-c8"].chosen
    assert c8 is not None and (c8.variant, c8.point.name) == ("fast", "c8")  # the cold C8 point: same tpm, first
    inc = rows["budget"].chosen
    assert inc is not None and (inc.variant, inc.point.name) == ("incumbent", "c32")  # fast's C32 is over 1 s
    assert rows["budget"].overrides == {"engine": {"max_running_requests": 32}}
    assert OVERRIDES["fast"] == {"engine": {"env": {"STANDIN_TOKEN_RATE": "240"}}}  # not changed in place


def test_an_objective_no_point_meets_is_rejected_naming_the_closest() -> None:
    row = choose(Objective(name="fastest", kind="lowest_ttft", decode_floor_tok_s=500), figures(), OVERRIDES, "s")
    assert row.status == "rejected-fastest-unmet" and row.profile is None and row.chosen is None
    assert row.reason.startswith("no point of the incumbent or an accepted variant decodes at >= 500 tok/s; closest:")
    assert "fast at c1 (C1, cold)" in row.reason
    late = choose(Objective(name="tight", kind="latency_budget", ttft_budget_s=0.01), figures(), OVERRIDES, "s")
    assert late.status == "rejected-tight-unmet" and "closest: fast at warm-c8" in late.reason


CAMPAIGN = """\
name: ops
base: demo
variants:
  - {name: fast, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "300"}}}}
  - {name: slow, overrides: {engine: {env: {STANDIN_TOKEN_RATE: "100"}}}}
workload:
  points:
    - {name: c1, prompt_tokens: 256, concurrency: 1, max_tokens: 32}
    - {name: c4, prompt_tokens: 256, concurrency: 4, max_tokens: 32}
decision: {primary_point: c1, min_repeats: 3, max_repeats: 4}
objectives:
  - {name: balanced-latency, kind: lowest_ttft, decode_floor_tok_s: 250}
  - {name: max-output-tpm, kind: max_output_tpm}
  - {name: impossible, kind: lowest_ttft, decode_floor_tok_s: 5000}
"""


def test_a_campaign_writes_one_profile_per_accepted_objective_that_loads_and_compiles(
    tmp_path: Path, profile_dir: Path
) -> None:
    from servectl.bench.model import PointResult, Stat
    from servectl.service.context import Context
    from servectl.testing.host import FakeHost

    def bench(ctx: Context, profile: str, settings: Any, out: Path) -> PointResult:
        """Decode at the profile's rate, slower by 10 % per extra stream; TTFT grows with concurrency."""
        rate = float(ctx.resolve(profile).loaded.profile.engine.env["STANDIN_TOKEN_RATE"])
        streams = settings.concurrency[0]
        decode = rate * (1 - 0.1 * (streams - 1))
        ttft = 0.02 * streams
        return PointResult(
            prompt_tokens_target=settings.prompt_tokens[0],
            concurrency=streams,
            repeats=1,
            prompt_words=100,
            decode_tok_s=Stat(p50=decode, min=decode, max=decode, n=1),
            ttft_s=Stat(p50=ttft, min=ttft, max=ttft, n=1),
            output_tokens=32 * streams,
            measured_s=32 / decode,
        )

    path = tmp_path / "ops.yaml"
    path.write_text(CAMPAIGN)
    with FakeHost(state_dir=tmp_path / "home") as host:
        outcome = host.run_campaign(file=path, out_dir=tmp_path / "run", bench_point=bench)
        assert {r.name: r.status for r in outcome.rows} == {"fast": "accepted-fast", "slow": "rejected-c1-regression"}
        statuses = {o.name: o.status for o in outcome.objectives}
        assert statuses == {
            "balanced-latency": "accepted-balanced-latency-profile",
            "max-output-tpm": "accepted-max-output-tpm-profile",
            "impossible": "rejected-impossible-unmet",
        }
        written = sorted(p.name for p in (tmp_path / "run" / "winner").iterdir())
        assert written == ["ops.balanced-latency.yaml", "ops.fast.yaml", "ops.max-output-tpm.yaml"]
        balanced = yaml.safe_load((tmp_path / "run" / "winner" / "ops.balanced-latency.yaml").read_text())
        assert balanced["extends"] == "demo" and balanced["status"] == "candidate"
        assert balanced["engine"] == {"env": {"STANDIN_TOKEN_RATE": "300"}, "max_running_requests": 1}  # fast, C1
        tpm = yaml.safe_load((tmp_path / "run" / "winner" / "ops.max-output-tpm.yaml").read_text())
        assert tpm["engine"] == {"env": {"STANDIN_TOKEN_RATE": "300"}, "max_running_requests": 4}  # fast, C4
        # the written profile is one the host loads, validates and compiles as it is
        (profile_dir / "ops.max-output-tpm.yaml").write_text(
            (tmp_path / "run" / "winner" / "ops.max-output-tpm.yaml").read_text()
        )
        (validation,) = host.validate(names=["ops.max-output-tpm"])
        assert validation.error is None, validation.error
    record = json.loads((tmp_path / "run" / "objectives.json").read_text())
    assert [(o["name"], o["variant"], o["point"], o["concurrency"]) for o in record] == [
        ("balanced-latency", "fast", "c1", 1),
        ("max-output-tpm", "fast", "c4", 4),
        ("impossible", None, None, None),
    ]
