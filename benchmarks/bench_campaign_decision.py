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
    repeats: int = 0
    variants: int = 0


def simulate(
    decision: Decision, *, gain_pct: float, cv: float, drift_cv: float, variants: int, rng: random.Random
) -> Outcome:
    """One campaign of ``variants`` variants, each ``gain_pct`` faster than the incumbent at every point."""
    true = {INCUMBENT: 100.0, **{f"v{i}": 100.0 * (1 + gain_pct / 100) for i in range(variants)}}
    measured: dict[str, dict[str, list[float]]] = {name: {p: [] for p in POINTS} for name in true}
    active = [f"v{i}" for i in range(variants)]
    out = Outcome(variants=variants)
    drift = 0.0
    round_index = 0
    while active:
        round_index += 1
        for name in round_order(round_index, active):
            drift += rng.gauss(0.0, drift_cv)
            for p in POINTS:
                measured[name][p].append(true[name] * math.exp(drift + rng.gauss(0.0, cv)))
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
    return out


def run(
    decision: Decision, *, campaigns: int, gain_pct: float, cv: float, drift_cv: float, variants: int, seed: int
) -> dict[str, float]:
    total = Outcome()
    rng = random.Random(seed)
    for _ in range(campaigns):
        o = simulate(decision, gain_pct=gain_pct, cv=cv, drift_cv=drift_cv, variants=variants, rng=rng)
        total.accepted += o.accepted
        total.inconclusive += o.inconclusive
        total.rejected += o.rejected
        total.repeats += o.repeats
        total.variants += o.variants
    n = total.variants
    return {
        "variants": n,
        "accepted_rate": total.accepted / n,
        "inconclusive_rate": total.inconclusive / n,
        "rejected_rate": total.rejected / n,
        "mean_repeats": total.repeats / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=400)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--cv", type=float, default=0.02, help="repeat-to-repeat coefficient of variation")
    parser.add_argument("--drift", type=float, default=0.002, help="random-walk drift per visit (log scale)")
    parser.add_argument("--gain", type=float, default=5.0, help="the real gain of the power run (percent)")
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
    }
    adaptive = Decision(sequential="alpha-spending", spending=args.spending, **common)
    fixed = Decision(sequential="fixed", **common)
    shape = {"campaigns": args.campaigns, "cv": args.cv, "drift_cv": args.drift, "variants": args.variants}
    results = {
        "settings": {
            **shape,
            "gain_pct": args.gain,
            "seed": args.seed,
            **common,
            "spending": args.spending,
            "alpha": adaptive.alpha,
            "method": adaptive.method,
        },
        "adaptive_null": run(adaptive, gain_pct=0.0, seed=args.seed, **shape),
        "adaptive_gain": run(adaptive, gain_pct=args.gain, seed=args.seed + 1, **shape),
        "fixed_null": run(fixed, gain_pct=0.0, seed=args.seed, **shape),
        "fixed_gain": run(fixed, gain_pct=args.gain, seed=args.seed + 1, **shape),
    }
    fa, power = results["adaptive_null"]["accepted_rate"], results["adaptive_gain"]["accepted_rate"]
    saved_null = 1 - results["adaptive_null"]["mean_repeats"] / args.max_repeats
    saved_gain = 1 - results["adaptive_gain"]["mean_repeats"] / args.max_repeats
    results["summary"] = {
        "false_accept_rate": fa,
        "false_accept_target": 0.05,
        "power": power,
        "power_target": 0.80,
        "repeats_saved_null": saved_null,
        "repeats_saved_gain": saved_gain,
        "passed": fa <= 0.05 and power >= 0.80,
    }
    s = results["settings"]
    print(
        f"{args.campaigns} campaigns x {args.variants} variants, points {', '.join(POINTS)} (primary c1), "
        f"cv {args.cv:.1%}, drift {args.drift:.2%}/visit, repeats {args.min_repeats}..{args.max_repeats}, "
        f"{s['method']} + {args.spending} alpha spending, alpha {s['alpha']}"
    )
    for name in ("adaptive_null", "fixed_null", "adaptive_gain", "fixed_gain"):
        r = results[name]
        print(
            f"  {name:14} accepted {r['accepted_rate']:6.1%}  rejected {r['rejected_rate']:6.1%}  "
            f"inconclusive {r['inconclusive_rate']:6.1%}  mean repeats {r['mean_repeats']:.2f}"
        )
    print(
        f"false-accept {fa:.1%} (target <= 5 %), power at +{args.gain:g} % {power:.1%} (target >= 80 %), "
        f"repeats saved vs fixed {args.max_repeats}: {saved_null:.0%} (null), {saved_gain:.0%} (gain) -> "
        f"{'PASS' if results['summary']['passed'] else 'MISS'}"
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
