"""The campaign's decision rule, measured by simulation: false-accept rate, power, and repeats saved.

Simulated campaigns run the real rule (:func:`servectl.campaign.decide.decide`) on the real schedule
(:func:`servectl.campaign.schedule.round_order`): each round measures the incumbent and every variant still
unsettled once at each point; a variant stops being measured once settled. A measurement is
``true speed x drift(round, slot) x exp(N(0, cv))``: seeded log-normal noise of coefficient of variation
``cv`` per repeat (the stand-in's repeat-to-repeat spread of a p50 decode rate is of this kind) and a slow
random-walk drift of the host along the visit order, which the interleaving must absorb.

Reported (targets of issue 42):

* false-accept rate: variants with no real difference (0 % at every point) accepted, over ``--campaigns``
  null campaigns of ``--variants`` variants each; target <= 5 % (the policy's alpha) with adaptive repeats;
* power: variants with a real +5 % gain at every point accepted; target >= 80 %;
* measurements: repeats used by the adaptive rule against the fixed design (every variant ``max_repeats``
  times), and the fixed design's own false-accept rate and power on the same seeds.

Usage: python benchmarks/bench_campaign_decision.py [--campaigns 400] [--cv 0.02] [--seed 42] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servectl.campaign.decide import decide  # noqa: E402
from servectl.campaign.model import Decision  # noqa: E402
from servectl.campaign.schedule import INCUMBENT, round_order  # noqa: E402

POINTS = ("c1", "c4")


@dataclass
class Outcome:
    accepted: int = 0
    decided: int = 0
    inconclusive: int = 0
    rejected: int = 0
    rejected_c4: int = 0
    repeats: int = 0
    variants: int = 0


def simulate(
    decision: Decision,
    *,
    gains: dict[str, float],
    cv: float,
    drift_cv: float,
    variants: int,
    rng: random.Random,
    outlier_rate: float = 0.0,
    outlier_pct: float = -30.0,
) -> Outcome:
    """One campaign of ``variants`` variants, each ``gains[point]`` percent faster than the incumbent at each
    point; with probability ``outlier_rate`` a visit (incumbent's or variant's) is an outlier repeat, every
    point of it ``outlier_pct`` percent off (a hiccup of the host: the whole repeat slow)."""
    names = [f"v{i}" for i in range(variants)]
    true = {
        INCUMBENT: {p: 100.0 for p in POINTS},
        **{n: {p: 100.0 * (1 + gains[p] / 100) for p in POINTS} for n in names},
    }
    measured: dict[str, dict[str, list[float]]] = {name: {p: [] for p in POINTS} for name in true}
    active = list(names)
    out = Outcome(variants=variants)
    drift = 0.0
    round_index = 0
    while active:
        round_index += 1
        for name in round_order(round_index, active):
            drift += rng.gauss(0.0, drift_cv)
            hiccup = math.log1p(outlier_pct / 100) if rng.random() < outlier_rate else 0.0
            for p in POINTS:
                measured[name][p].append(true[name][p] * math.exp(drift + hiccup + rng.gauss(0.0, cv)))
        for name in list(active):
            verdict = decide(
                decision, variant=name, points=POINTS, measured=measured[name], incumbent=measured[INCUMBENT]
            )
            if verdict.settled:
                active.remove(name)
                out.repeats += verdict.repeats
                out.accepted += verdict.accepted
                out.inconclusive += verdict.status == "inconclusive"
                out.rejected += verdict.status.startswith("rejected-")
                out.rejected_c4 += verdict.status == "rejected-c4-regression"
    return out


def run(
    decision: Decision,
    *,
    campaigns: int,
    gains: dict[str, float],
    cv: float,
    drift_cv: float,
    variants: int,
    seed: int,
    outlier_rate: float,
) -> dict[str, float]:
    total = Outcome()
    rng = random.Random(seed)
    for _ in range(campaigns):
        o = simulate(
            decision, gains=gains, cv=cv, drift_cv=drift_cv, variants=variants, rng=rng, outlier_rate=outlier_rate
        )
        total.accepted += o.accepted
        total.inconclusive += o.inconclusive
        total.rejected += o.rejected
        total.rejected_c4 += o.rejected_c4
        total.repeats += o.repeats
        total.variants += o.variants
    n = total.variants
    return {
        "variants": n,
        "accepted_rate": total.accepted / n,
        "inconclusive_rate": total.inconclusive / n,
        "rejected_rate": total.rejected / n,
        "rejected_c4_regression_rate": total.rejected_c4 / n,
        "mean_repeats": total.repeats / n,
    }


#: The scenarios: per point, the variant's real gain over the incumbent (percent), and which rate is the target.
SCENARIOS: dict[str, dict[str, float]] = {
    "null": {"c1": 0.0, "c4": 0.0},  # no real difference: accepted = false accepts
    "gain": {"c1": 5.0, "c4": 5.0},  # a real +5 % everywhere: accepted = power
    "dflash2": {"c1": 4.0, "c4": -6.0},  # the seed's DFlash2: rejected-c4-regression is right
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=400)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--cv", type=float, default=0.02, help="repeat-to-repeat coefficient of variation")
    parser.add_argument("--drift", type=float, default=0.002, help="random-walk drift per visit (log scale)")
    parser.add_argument("--gain", type=float, default=5.0, help="the real gain of the power run (percent)")
    parser.add_argument("--outlier-rate", type=float, default=0.0, help="share of visits that are an outlier repeat")
    parser.add_argument("--method", choices=("yuen-log", "welch-log"), default="yuen-log")
    parser.add_argument("--min-repeats", type=int, default=3)
    parser.add_argument("--max-repeats", type=int, default=8)
    parser.add_argument("--spending", choices=("obrien-fleming", "pocock"), default="obrien-fleming")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    common = {
        "primary_point": "c1",
        "min_repeats": args.min_repeats,
        "max_repeats": args.max_repeats,
        "regression_tolerance_pct": 3.0,
        "method": args.method,
    }
    designs = {
        "adaptive": Decision(sequential="alpha-spending", spending=args.spending, **common),
        "fixed": Decision(sequential="fixed", **common),
    }
    shape = {
        "campaigns": args.campaigns,
        "cv": args.cv,
        "drift_cv": args.drift,
        "variants": args.variants,
        "outlier_rate": args.outlier_rate,
    }
    scenarios = {**SCENARIOS, "gain": {p: args.gain for p in POINTS}}
    results: dict[str, dict[str, object]] = {
        "settings": {
            **shape,
            "gain_pct": args.gain,
            "seed": args.seed,
            **common,
            "spending": args.spending,
            "alpha": designs["adaptive"].alpha,
            "outlier_pct": -30.0,
        },
    }
    for offset, (scenario, gains) in enumerate(scenarios.items()):
        for design, decision in designs.items():
            results[f"{design}_{scenario}"] = dict(
                run(decision, gains=gains, seed=args.seed + offset, **shape)  # type: ignore[arg-type]
            )
    r = {k: v for k, v in results.items() if k != "settings"}
    fa, power = float(r["adaptive_null"]["accepted_rate"]), float(r["adaptive_gain"]["accepted_rate"])
    dflash = float(r["adaptive_dflash2"]["rejected_c4_regression_rate"])
    saved = {
        s: 1 - float(r[f"adaptive_{s}"]["mean_repeats"]) / float(r[f"fixed_{s}"]["mean_repeats"]) for s in scenarios
    }
    results["summary"] = {
        "false_accept_rate": fa,
        "false_accept_target": 0.05,
        "power": power,
        "power_target": 0.80,
        "dflash2_rejected_c4": dflash,
        "measurements_saved": saved,
        "passed": fa <= 0.05 and power >= 0.80,
    }
    print(
        f"{args.campaigns} campaigns x {args.variants} variants, points {', '.join(POINTS)} (primary c1), "
        f"cv {args.cv:.1%}, drift {args.drift:.2%}/visit, outliers {args.outlier_rate:.0%} of visits at -30 %, "
        f"repeats {args.min_repeats}..{args.max_repeats}, {args.method} + {args.spending} alpha spending, "
        f"alpha {designs['adaptive'].alpha}"
    )
    for name, row in r.items():
        print(
            f"  {name:16} accepted {row['accepted_rate']:6.1%}  rejected {row['rejected_rate']:6.1%} "
            f"(c4-regression {row['rejected_c4_regression_rate']:6.1%})  inconclusive {row['inconclusive_rate']:6.1%}"
            f"  mean repeats {row['mean_repeats']:.2f}"
        )
    print(
        f"false-accept {fa:.1%} (target <= 5 %), power at +{args.gain:g} % {power:.1%} (target >= 80 %), "
        f"DFlash2 rejected-c4-regression {dflash:.1%}, measurements saved vs fixed {args.max_repeats}: "
        + ", ".join(f"{v:.0%} ({k})" for k, v in saved.items())
        + f" -> {'PASS' if results['summary']['passed'] else 'MISS'}"
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
