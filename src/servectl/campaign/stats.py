"""The statistics of a campaign's decision, pure and dependency-free: Yuen's trimmed Welch t on log values, and
alpha spending.

**The comparison.** Each repeat of a variant at a point gives one value of the campaign's metric (e.g. the p50
decode tok/s of that repeat's requests). Speeds are compared as ratios, so the values are compared on the log
scale: the estimate is the ratio of the geometric means (variant / incumbent, or the inverse for a metric
where less is better, so that a positive gain is always better), and its confidence bounds come from Welch's
t interval for the difference of the mean logs (unequal variances and sample sizes: the incumbent is measured
more often than each variant; Welch-Satterthwaite degrees of freedom). Both one-sided bounds are taken at the
level of the look (below), which makes ``[low, high]`` a two-sided interval of coverage ``1 - 2 * level``.

**Outliers.** A repeat the host hiccuped through (the whole repeat 30 % slow) would widen Welch's interval
until nothing settles: the DFlash2-style variant (+4 % at C1, -6 % at C4) then ends ``inconclusive`` instead of
``rejected-c4-regression``. The default method ``yuen-log`` is Yuen's trimmed Welch t (Yuen 1974): each side's
``floor(0.2 n)`` lowest and highest logs are trimmed from its mean and winsorized in its variance, with
Welch-Satterthwaite degrees of freedom on the kept counts (exactly Welch's t below five repeats, where nothing
is trimmed). The benchmark measures it with and without outlier repeats.

**Adaptive repeats.** A variant is looked at after every repeat from ``min_repeats`` on, and stops being
measured once its decision is settled. Looking often inflates the false-accept rate unless the looks share
``alpha``: Lan and DeMets' alpha spending gives the look after ``n`` repeats the share
``spend(n / max) - spend((n - 1) / max)`` (all of ``spend(min / max)`` at the first look), with the
O'Brien-Fleming-type ``spend(t) = 2 - 2 * Phi(z_{1 - alpha/2} / sqrt(t))`` (little early, most at the end) or
the Pocock-type ``alpha * ln(1 + (e - 1) t)``. Each look's boundary is the group-sequential one that spends
exactly its share given that the earlier looks did not cross (:func:`nominal_levels`, by recursive numerical
integration), and the rule applies it as a nominal level to Welch's t. The sequential false-accept rate is then
``alpha`` for a normal statistic; for Welch's t on a few repeats it is an approximation, which
``benchmarks/bench_campaign_decision.py`` measures by simulation (false-accept rate, power, repeats saved)
rather than assuming.

The Student t distribution is computed here (regularized incomplete beta, Numerical Recipes' continued
fraction) so that servectl needs no SciPy; the unit tests check it against SciPy where that is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

Spending = Literal["obrien-fleming", "pocock"]


# -- the t distribution -----------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (``inf``: the normal distribution)."""
    if math.isinf(df):
        return 1.0 - NormalDist().cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t with ``df`` degrees of freedom."""
    if math.isinf(df):
        return math.exp(-t * t / 2.0) / math.sqrt(2.0 * math.pi)
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom: Newton's method on :func:`t_sf` from
    the normal quantile, kept inside a bracket that bisection narrows when a step would leave it."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    z = NormalDist().inv_cdf(p)
    if math.isinf(df):
        return z
    low, high = -1.0, 1.0
    while 1.0 - t_sf(low, df) > p:
        low *= 2.0
    while 1.0 - t_sf(high, df) < p:
        high *= 2.0
    x = min(max(z, low), high)
    for _ in range(100):
        error = (1.0 - t_sf(x, df)) - p
        if error > 0:
            high = x
        else:
            low = x
        density = t_pdf(x, df)
        step = error / density if density > 0 else math.inf
        if abs(step) <= 1e-12 * max(1.0, abs(x)):
            return x - step if low <= x - step <= high else x
        nxt = x - step
        x = nxt if low < nxt < high else (low + high) / 2.0
    return x


# -- Welch's interval on log values ----------------------------------------------------------------------
@dataclass(frozen=True)
class LogWelch:
    """The variant against the incumbent on the log scale: the difference of mean logs and its spread.

    ``diff`` is oriented so that positive is better (a gain), whatever the metric's direction.
    """

    diff: float
    se: float
    df: float
    n_variant: int
    n_incumbent: int
    var_variant: float  # the (winsorized, when trimmed) variance of the variant's logs
    var_incumbent: float
    trim: float = 0.0  # the fraction trimmed from each end of each side (0: Welch's t)

    @property
    def gain_pct(self) -> float:
        """The estimated gain in percent (ratio of geometric means, minus one)."""
        return to_pct(self.diff)

    def p_above(self, threshold_pct: float) -> float:
        """One-sided p-value of "the gain is at most ``threshold_pct``" (small: the gain is above it)."""
        return self._p(self.diff - from_pct(threshold_pct))

    def p_below(self, threshold_pct: float) -> float:
        """One-sided p-value of "the gain is at least ``threshold_pct``" (small: the gain is below it)."""
        return self._p(from_pct(threshold_pct) - self.diff)

    def _p(self, distance: float) -> float:
        if self.se == 0.0:
            return 0.0 if distance > 0 else 1.0
        return t_sf(distance / self.se, self.df)

    def bounds_pct(self, level: float) -> tuple[float, float]:
        """The one-sided lower and upper bounds of the gain (percent), each at ``level``."""
        if self.se == 0.0:
            return self.gain_pct, self.gain_pct
        half = t_ppf(1.0 - level, self.df) * self.se
        return to_pct(self.diff - half), to_pct(self.diff + half)

    def repeats_to_settle(self, threshold_pct: float, level: float, *, cap: int = 1000) -> int | None:
        """How many more repeats of both sides would put the bound at ``level`` clear of ``threshold_pct``,
        were the estimate and the spreads to stay as they are; None when not even ``cap`` more would."""
        distance = abs(self.diff - from_pct(threshold_pct))
        if distance == 0.0:
            return None
        for more in range(0, cap + 1):
            dv = _share(self.var_variant, self.n_variant + more, self.trim)
            di = _share(self.var_incumbent, self.n_incumbent + more, self.trim)
            se = math.sqrt(dv[0] + di[0])
            df = _yuen_df(dv, di)
            if se == 0.0 or t_ppf(1.0 - level, df) * se < distance:
                return more
        return None


def to_pct(log_ratio: float) -> float:
    return (math.exp(log_ratio) - 1.0) * 100.0


def from_pct(pct: float) -> float:
    return math.log1p(pct / 100.0)


def log_welch(
    variant: Sequence[float], incumbent: Sequence[float], *, higher_is_better: bool = True, trim: float = 0.0
) -> LogWelch:
    """Welch's comparison of the logs of ``variant``'s and ``incumbent``'s values (each at least two, all > 0).

    ``trim`` > 0 is Yuen's trimmed Welch t (Yuen 1974): each side's ``floor(trim * n)`` lowest and highest
    logs are left out of its mean, its spread is the winsorized variance (those values pulled in to the nearest
    kept one), ``d = (n - 1) s_w^2 / (h (h - 1))`` with ``h`` the values kept, and the degrees of freedom are
    Welch-Satterthwaite's on the ``d``. With nothing trimmed (``trim`` 0, or too few values to trim one) it is
    exactly Welch's t. One outlier repeat of a side then moves neither the estimate nor the interval once the
    side has ``1 / trim`` repeats, where it widens Welch's interval until nothing settles.

    Raises:
        ValueError: fewer than two values on a side, a value that is not positive, or ``trim`` outside [0, 0.5).
    """
    if len(variant) < 2 or len(incumbent) < 2:
        raise ValueError(f"need two values a side, have {len(variant)} and {len(incumbent)}")
    if any(v <= 0 or not math.isfinite(v) for v in (*variant, *incumbent)):
        raise ValueError("every value must be a positive finite number")
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), not {trim}")
    mv, vv = trimmed_mean_and_winsorized_var([math.log(v) for v in variant], trim)
    mi, vi = trimmed_mean_and_winsorized_var([math.log(v) for v in incumbent], trim)
    diff = (mv - mi) if higher_is_better else (mi - mv)
    dv, di = _share(vv, len(variant), trim), _share(vi, len(incumbent), trim)
    return LogWelch(diff, math.sqrt(dv[0] + di[0]), _yuen_df(dv, di), len(variant), len(incumbent), vv, vi, trim)


def trimmed_count(n: int, trim: float) -> int:
    """How many values a trim of ``trim`` leaves out at each end of ``n`` values (``floor(trim * n)``, leaving
    at least two)."""
    return max(0, min(math.floor(trim * n + 1e-9), (n - 2) // 2))


def trimmed_mean_and_winsorized_var(values: Sequence[float], trim: float) -> tuple[float, float]:
    """The ``trim``-trimmed mean of ``values`` and their ``trim``-winsorized variance (``n - 1`` denominator)."""
    xs = sorted(values)
    n = len(xs)
    g = trimmed_count(n, trim)
    kept = xs[g : n - g]
    mean = sum(kept) / len(kept)
    winsorized = [kept[0]] * g + kept + [kept[-1]] * g
    wmean = sum(winsorized) / n
    return mean, sum((x - wmean) ** 2 for x in winsorized) / (n - 1)


def _share(var: float, n: int, trim: float) -> tuple[float, int]:
    """A side's share of the squared standard error, ``(n - 1) s_w^2 / (h (h - 1))``, and its kept count ``h``."""
    h = n - 2 * trimmed_count(n, trim)
    return (n - 1) * var / (h * (h - 1)), h


def _yuen_df(a: tuple[float, int], b: tuple[float, int]) -> float:
    """Welch-Satterthwaite degrees of freedom on the sides' shares (``inf`` when both are zero); Yuen's when
    trimmed, Welch's when not."""
    denominator = a[0] * a[0] / (a[1] - 1) + b[0] * b[0] / (b[1] - 1)
    return math.inf if denominator == 0.0 else (a[0] + b[0]) ** 2 / denominator


# -- alpha spending -----------------------------------------------------------------------------------------
def spent(alpha: float, fraction: float, spending: Spending) -> float:
    """The part of ``alpha`` spent by information fraction ``fraction`` (Lan-DeMets spending functions)."""
    t = min(max(fraction, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(t))


def look_level(alpha: float, repeats: int, *, min_repeats: int, max_repeats: int, spending: Spending | None) -> float:
    """The one-sided nominal level of the look after ``repeats`` repeats (0 when that is no look).

    ``spending`` None is the fixed design: one look, at ``max_repeats``, with all of ``alpha``.
    """
    if repeats < min_repeats or repeats > max_repeats:
        return 0.0
    if spending is None:
        return alpha if repeats == max_repeats else 0.0
    return nominal_levels(alpha, min_repeats, max_repeats, spending)[repeats - min_repeats]


@lru_cache(maxsize=64)
def nominal_levels(alpha: float, min_repeats: int, max_repeats: int, spending: Spending) -> tuple[float, ...]:
    """The nominal one-sided level of each look, ``min_repeats`` to ``max_repeats``: the group-sequential
    boundary that spends ``spend(n / max) - spend((n - 1) / max)`` at the look after ``n`` repeats (all of
    ``spend(min / max)`` at the first), given that the earlier looks did not cross.

    The boundaries are those of the standardized statistic of a sum of independent repeats (information ``n``;
    looks correlated as ``sqrt(n_j / n_k)``), found by recursive numerical integration (Armitage, McPherson and
    Rowe 1969) on a grid: the density of the partial sum among the paths that have not crossed is carried from
    look to look, and each boundary puts exactly the look's share of ``alpha`` above it. A look's nominal level
    is ``1 - Phi(boundary)``; the rule applies it to Welch's t (its quantile at the Welch degrees of freedom).
    """
    normal = NormalDist()
    looks = list(range(min_repeats, max_repeats + 1))
    levels: list[float] = []
    grid: list[float] = []
    weights: list[float] = []  # density x grid step of the partial sum among paths not crossed yet
    for index, n in enumerate(looks):
        before = 0.0 if index == 0 else spent(alpha, (n - 1) / max_repeats, spending)
        share = spent(alpha, n / max_repeats, spending) - before
        sd = math.sqrt(n)
        gap = math.sqrt(n - looks[index - 1]) if index else 0.0

        def tail(
            b: float, sd: float = sd, gap: float = gap, weights: list[float] = weights, grid: list[float] = grid
        ) -> float:
            """P(the partial sum at this look exceeds ``b`` and no earlier look crossed)."""
            if not grid:
                return 1.0 - normal.cdf(b / sd)
            return sum(w * (1.0 - normal.cdf((b - s) / gap)) for w, s in zip(weights, grid, strict=True))

        boundary = _solve_decreasing(tail, share, -10.0 * sd, 10.0 * sd) if share > 0.0 else math.inf
        levels.append(1.0 - normal.cdf(boundary / sd) if math.isfinite(boundary) else 0.0)
        top = min(boundary, 10.0 * sd)
        points = [-10.0 * sd + (top + 10.0 * sd) * i / _GRID_STEPS for i in range(_GRID_STEPS + 1)]
        if not grid:
            density = [normal.pdf(x / sd) / sd for x in points]
        else:
            density = [
                sum(w * normal.pdf((x - s) / gap) for w, s in zip(weights, grid, strict=True)) / gap for x in points
            ]
        step = points[1] - points[0]
        grid = points
        weights = [d * step * (0.5 if i in (0, _GRID_STEPS) else 1.0) for i, d in enumerate(density)]  # trapezoid
    return tuple(levels)


#: Grid intervals of the numerical integration: boundaries within 1e-4 of their exact level at 3..8 looks.
_GRID_STEPS = 240


def _solve_decreasing(f: Callable[[float], float], target: float, low: float, high: float) -> float:
    """The ``x`` in [low, high] where the decreasing ``f`` equals ``target`` (bisection)."""
    for _ in range(80):
        mid = (low + high) / 2.0
        if f(mid) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0
