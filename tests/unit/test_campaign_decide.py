"""The campaign's statistics and decision rule, pure: Student's t as SciPy computes it, Welch's interval on log
values, alpha spending that adds up to alpha, and each status of the rule on constructed repeats."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest

from servectl.campaign.decide import decide
from servectl.campaign.model import Decision
from servectl.campaign.schedule import INCUMBENT, round_order
from servectl.campaign.stats import Spending, log_welch, look_level, spent, t_ppf, t_sf

POINTS = ("c1", "c4")


def around(center: float, n: int, spread: float = 0.01, seed: int = 0) -> list[float]:
    """``n`` values spread symmetrically around ``center`` (relative ``spread``), deterministic."""
    rng = random.Random(seed)
    return [center * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def policy(**overrides: object) -> Decision:
    return Decision.model_validate({"primary_point": "c1", "min_repeats": 3, "max_repeats": 6, **overrides})


# -- the t distribution and Welch's interval -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.975, 4, 2.7764451052), (0.95, 10, 1.8124611228), (0.995, 2, 9.9248432009), (0.025, 30, -2.0422724563)],
)
def test_t_quantiles_match_the_printed_tables(p: float, df: float, expected: float) -> None:
    assert t_ppf(p, df) == pytest.approx(expected, abs=1e-8)
    assert t_sf(expected, df) == pytest.approx(1 - p, abs=1e-10)


def test_t_distribution_matches_scipy_across_degrees_of_freedom() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1.0, 1.7, 2.0, 3.3, 7.0, 29.5, 400.0):
        for p in (1e-5, 0.0014, 0.025, 0.3, 0.5, 0.9, 0.999):
            assert t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8, abs=1e-9)
        for t in (-6.0, -1.0, 0.0, 0.5, 2.2, 12.0):
            assert t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-15)


def test_welch_on_logs_compares_geometric_means_and_orients_the_gain() -> None:
    faster = [110.0, 112.0, 108.0]
    base = [100.0, 101.0, 99.0]
    w = log_welch(faster, base)
    geometric = math.prod(faster) ** (1 / 3) / math.prod(base) ** (1 / 3) - 1
    assert w.gain_pct == pytest.approx(geometric * 100)
    low, high = w.bounds_pct(0.025)
    assert low < w.gain_pct < high and low > 0
    ttft = log_welch([0.9, 0.91, 0.89], [1.0, 1.01, 0.99], higher_is_better=False)
    assert ttft.gain_pct == pytest.approx((1 / 0.9 - 1) * 100, rel=1e-3)  # less TTFT is a gain
    with pytest.raises(ValueError, match="two values a side"):
        log_welch([1.0], base)
    with pytest.raises(ValueError, match="positive"):
        log_welch([1.0, 0.0], base)


def test_welch_degrees_of_freedom_and_bounds_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    a, b = [math.log(v) for v in (101.0, 104.0, 99.0, 103.0)], [math.log(v) for v in (98.0, 100.0, 97.0, 99.5, 96.0)]
    w = log_welch([math.exp(x) for x in a], [math.exp(x) for x in b])
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert w.diff / w.se == pytest.approx(reference.statistic)
    assert w.df == pytest.approx(reference.df)
    assert 2 * min(w.p_above(0.0), w.p_below(0.0)) == pytest.approx(reference.pvalue)


def test_yuen_trimmed_welch_matches_scipy_and_is_welch_when_nothing_is_trimmed() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(5)
    for n_variant, n_incumbent in ((3, 4), (5, 8), (8, 8), (10, 7)):
        a = [math.exp(rng.gauss(0.01, 0.03)) for _ in range(n_variant)]
        b = [math.exp(rng.gauss(0.0, 0.03)) for _ in range(n_incumbent)]
        w = log_welch(a, b, trim=0.2)
        reference = stats.ttest_ind([math.log(x) for x in a], [math.log(x) for x in b], equal_var=False, trim=0.2)
        assert w.diff / w.se == pytest.approx(reference.statistic)
        assert w.df == pytest.approx(reference.df)
        if n_variant < 5 and n_incumbent < 5:  # floor(0.2 n) = 0: nothing trimmed, Welch's t exactly
            plain = log_welch(a, b)
            assert (w.diff, w.se, w.df) == (plain.diff, plain.se, plain.df)


def test_one_outlier_repeat_moves_yuen_but_not_welch_off_a_settled_interval() -> None:
    steady = [100.0, 101.0, 99.5, 100.5, 99.0, 100.2, 100.8, 99.7]
    hiccup = [*steady[:3], 70.0, *steady[4:]]  # one repeat 30 % slow (a hiccup of the host)
    base = [110.0, 111.0, 109.5, 110.5, 109.0, 110.2, 110.8, 109.7]
    welch, yuen = log_welch(hiccup, base), log_welch(hiccup, base, trim=0.2)
    assert welch.se > 3 * yuen.se  # the outlier alone makes Welch's interval several times wider
    assert yuen.bounds_pct(0.01)[1] < -5 < welch.bounds_pct(0.01)[1]
    with pytest.raises(ValueError, match="trim"):
        log_welch(steady, base, trim=0.5)


# -- alpha spending ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_the_looks_spend_alpha_over_a_random_walk_of_repeats(spending: Spending) -> None:
    """The nominal levels, applied to the standardized sum of independent repeats at each look, give a
    false-positive rate of alpha over all looks (checked on 40,000 simulated null sequences)."""
    levels = [look_level(0.05, n, min_repeats=3, max_repeats=8, spending=spending) for n in range(1, 11)]
    assert levels[:2] == [0.0, 0.0] and levels[8:] == [0.0, 0.0]  # no look before min or after max
    assert spent(0.05, 1.0, spending) == pytest.approx(0.05)
    shares = [spent(0.05, n / 8, spending) - spent(0.05, (n - 1) / 8, spending) for n in range(4, 9)]
    assert all(level >= share for level, share in zip(levels[3:8], shares, strict=True))  # earlier looks' paths
    bounds = [NormalDist().inv_cdf(1 - level) for level in levels[2:8]]
    rng = random.Random(7)
    crossed = 0
    for _ in range(40_000):
        total = 0.0
        for n in range(1, 9):
            total += rng.gauss(0, 1)
            if n >= 3 and total / math.sqrt(n) > bounds[n - 3]:
                crossed += 1
                break
    assert crossed / 40_000 == pytest.approx(0.05, abs=0.005)
    assert sum(levels) > 0.05  # more than a union bound would allow: the looks are correlated


def test_the_fixed_design_looks_once_with_all_of_alpha() -> None:
    levels = [look_level(0.05, n, min_repeats=3, max_repeats=8, spending=None) for n in range(1, 9)]
    assert levels == [0.0] * 7 + [0.05]


# -- the rule ---------------------------------------------------------------------------------------------------
def test_a_clearly_faster_variant_is_accepted_early() -> None:
    verdict = decide(
        policy(),
        variant="fast",
        points=POINTS,
        measured={"c1": around(120, 3), "c4": around(118, 3, seed=1)},
        incumbent={"c1": around(100, 3, seed=2), "c4": around(100, 3, seed=3)},
    )
    assert verdict.status == "accepted-fast" and verdict.settled and verdict.repeats == 3
    assert (
        verdict.reason.startswith("decode_tok_s at c1: +1") and "above +0 %; other points within -3 %" in verdict.reason
    )
    assert [c.point for c in verdict.comparisons] == ["c1", "c4"]
    assert [c.verdict for c in verdict.comparisons] == ["gain", "non-inferior"]


def test_a_gain_at_c1_and_a_loss_at_c4_is_rejected_naming_c4() -> None:
    """The seed's DFlash2 case: +4.3 % at C1, -5.5 % at the C4 operating point."""
    verdict = decide(
        policy(),
        variant="dflash2",
        points=POINTS,
        measured={"c1": around(104.3, 6, 0.005), "c4": around(94.5, 6, 0.005, seed=1)},
        incumbent={"c1": around(100, 6, 0.005, seed=2), "c4": around(100, 6, 0.005, seed=3)},
    )
    assert verdict.status == "rejected-c4-regression"
    assert "at c4: -5." in verdict.reason and "wholly below the tolerated -3 %" in verdict.reason


def run_rounds(
    decision: Decision, true: dict[str, dict[str, float]], *, cv: float, seed: int, hiccups: set[tuple[str, int]]
) -> str:
    """A campaign of one variant on the real schedule, each visit's values ``true x exp(N(0, cv))`` (seeded),
    the visits in ``hiccups`` ((side, round)) 30 % slow at every point; returns the variant's final status."""
    rng = random.Random(seed)
    measured: dict[str, dict[str, list[float]]] = {side: {p: [] for p in POINTS} for side in true}
    round_index = 0
    while True:
        round_index += 1
        for side in round_order(round_index, ["dflash2"]):
            slow = 0.7 if (side, round_index) in hiccups else 1.0
            for p in POINTS:
                measured[side][p].append(true[side][p] * slow * math.exp(rng.gauss(0, cv)))
        verdict = decide(
            decision, variant="dflash2", points=POINTS, measured=measured["dflash2"], incumbent=measured[INCUMBENT]
        )
        if verdict.settled:
            return verdict.status


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("hiccup", [("dflash2", 2), (INCUMBENT, 3), ("dflash2", 6)])
def test_the_dflash2_case_with_an_outlier_repeat_is_rejected_at_c4_not_inconclusive(
    seed: int, hiccup: tuple[str, int]
) -> None:
    """+4 % at C1, -6 % at C4, 1 % seeded noise and one visit 30 % slow (the variant's or the incumbent's):
    Yuen's trimmed Welch (the default method) rejects it naming C4; Welch's t on all repeats is left
    inconclusive by the one outlier (the old rule)."""
    true = {INCUMBENT: {"c1": 100.0, "c4": 100.0}, "dflash2": {"c1": 104.0, "c4": 94.0}}
    decision = policy(max_repeats=8)
    assert decision.method == "yuen-log"
    assert run_rounds(decision, true, cv=0.01, seed=seed, hiccups={hiccup}) == "rejected-c4-regression"
    welch = run_rounds(policy(max_repeats=8, method="welch-log"), true, cv=0.01, seed=seed, hiccups={hiccup})
    assert welch in ("inconclusive", "rejected-c4-regression")


def test_welch_on_all_repeats_leaves_the_dflash2_case_inconclusive_after_an_outlier() -> None:
    true = {INCUMBENT: {"c1": 100.0, "c4": 100.0}, "dflash2": {"c1": 104.0, "c4": 94.0}}
    statuses = [
        run_rounds(policy(max_repeats=8, method="welch-log"), true, cv=0.01, seed=s, hiccups={("dflash2", 2)})
        for s in range(6)
    ]
    assert statuses.count("inconclusive") >= 4


def test_a_variant_within_noise_is_never_accepted_and_says_what_would_settle_it() -> None:
    measured = {"c1": around(100.3, 6, 0.02), "c4": around(100, 6, 0.02, seed=1)}
    incumbent = {"c1": around(100, 6, 0.02, seed=2), "c4": around(100, 6, 0.02, seed=3)}
    early = decide(
        policy(),
        variant="noise",
        points=POINTS,
        measured={k: v[:4] for k, v in measured.items()},
        incumbent={k: v[:4] for k, v in incumbent.items()},
    )
    assert early.status == "measuring" and not early.settled
    final = decide(policy(), variant="noise", points=POINTS, measured=measured, incumbent=incumbent)
    assert final.status == "inconclusive" and final.settled
    assert "straddles" in final.reason and "after 6 repeats" in final.reason
    assert final.more_repeats is None or final.more_repeats > 0
    assert "more repeats would settle it" in final.reason or "no practical number" in final.reason


def test_inconclusive_counts_the_repeats_that_would_settle_a_real_but_small_gain() -> None:
    final = decide(
        policy(),
        variant="small",
        points=("c1",),
        measured={"c1": [102.5, 103.5, 101.0, 104.0, 102.0, 103.0]},
        incumbent={"c1": [100.0, 101.5, 99.0, 101.0, 100.5, 98.5]},
    )
    if final.status == "inconclusive":
        assert final.more_repeats is not None and 0 < final.more_repeats < 100
        assert f"about {final.more_repeats} more repeats" in final.reason
    else:  # the data may already settle it; then it must be the gain
        assert final.status == "accepted-small"


def test_before_min_repeats_nothing_is_decided() -> None:
    verdict = decide(
        policy(),
        variant="fast",
        points=POINTS,
        measured={"c1": [200.0, 201.0], "c4": [200.0, 199.0]},
        incumbent={"c1": [100.0, 101.0], "c4": [100.0, 99.0]},
    )
    assert verdict.status == "measuring" and verdict.reason == "2 of at least 3 repeats"


def test_a_settled_small_gain_under_the_minimum_is_rejected_no_gain() -> None:
    verdict = decide(
        policy(min_gain_pct=10),
        variant="meh",
        points=("c1",),
        measured={"c1": around(102, 6, 0.003)},
        incumbent={"c1": around(100, 6, 0.003, seed=1)},
    )
    assert verdict.status == "rejected-no-gain" and "below the minimum gain +10 %" in verdict.reason


def test_a_lower_is_better_metric_accepts_a_faster_first_token() -> None:
    verdict = decide(
        policy(metric="ttft_s"),
        variant="snappy",
        points=("c1",),
        measured={"c1": around(0.5, 4)},
        incumbent={"c1": around(1.0, 4, seed=1)},
    )
    assert verdict.status == "accepted-snappy" and verdict.comparisons[0].gain_pct == pytest.approx(100, rel=0.05)


def test_the_fixed_design_decides_only_at_max_repeats() -> None:
    data = {"measured": {"c1": around(120, 5)}, "incumbent": {"c1": around(100, 5, seed=1)}}
    assert decide(policy(sequential="fixed"), variant="v", points=("c1",), **data).status == "measuring"  # type: ignore[arg-type]
    data = {"measured": {"c1": around(120, 6)}, "incumbent": {"c1": around(100, 6, seed=1)}}
    assert decide(policy(sequential="fixed"), variant="v", points=("c1",), **data).status == "accepted-v"  # type: ignore[arg-type]


def test_rounds_alternate_direction_so_the_incumbent_is_interleaved() -> None:
    assert round_order(1, ["a", "b"]) == [INCUMBENT, "a", "b"]
    assert round_order(2, ["a", "b"]) == ["b", "a", INCUMBENT]
    assert round_order(3, ["b"]) == [INCUMBENT, "b"]
    with pytest.raises(ValueError):
        round_order(0, ["a"])
