"""The lab's one home for statistics: the spread of per-seed values, whether a difference between
two sets of seeds is more than noise (Student t, Welch, Holm), and the median with its quartiles and
a bootstrap interval for repeated timings.

The lab does not depend on scipy; ``tests/unit/test_stats.py`` checks these against values scipy and
numpy computed, typed in.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Callable, Sequence


def mean_and_spread(values: Sequence[float | None]) -> dict:
    """Mean, sample standard deviation (n - 1), standard error of the mean, min and max of per-seed values.

    ``None`` and NaN entries (a metric a run did not record) are left out; ``n`` says how many remained.
    """
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        raise ValueError(f"values must hold at least one number, got {list(values)!r}")
    n = len(vals)
    std = statistics.stdev(vals) if n > 1 else 0.0
    return {
        "n": n,
        "mean": statistics.fmean(vals),
        "std": std,
        "se": std / math.sqrt(n),
        "min": min(vals),
        "max": max(vals),
    }


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz's method,
    as in Numerical Recipes 6.4): the Student t tail below needs it, and the lab does not depend on scipy."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point: use the symmetry
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (not necessarily whole) degrees of freedom."""
    if not df > 0:
        raise ValueError(f"df must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def welch_test(a_values: Sequence[float | None], b_values: Sequence[float | None]) -> dict:
    """Welch's t-test of ``mean(b) - mean(a)`` (unequal variances; Welch 1947).

    Returns ``diff``, its standard error ``se`` = sqrt(s_a^2/n_a + s_b^2/n_b), ``t`` = diff / se, the
    Welch-Satterthwaite degrees of freedom ``df`` and the two-sided ``p``. With 3 seeds a side ``df`` is
    between 2 and 4, so only a difference several standard errors wide reaches p < 0.05.
    """
    a, b = mean_and_spread(a_values), mean_and_spread(b_values)
    if a["n"] < 2 or b["n"] < 2:
        raise ValueError(f"a_values and b_values need >= 2 numbers each to estimate noise, got {a['n']} and {b['n']}")
    va, vb = a["std"] ** 2 / a["n"], b["std"] ** 2 / b["n"]
    diff = b["mean"] - a["mean"]
    se = math.sqrt(va + vb)
    if se == 0.0:
        raise ValueError("a_values and b_values have no spread at all: a t-test needs some noise to compare with")
    df = (va + vb) ** 2 / (va**2 / (a["n"] - 1) + vb**2 / (b["n"] - 1))
    t = diff / se
    return {"diff": diff, "se": se, "t": t, "df": df, "p": student_t_two_sided_p(t, df), "n_a": a["n"], "n_b": b["n"]}


def paired_test(a_values: Sequence[float], b_values: Sequence[float]) -> dict:
    """The paired t-test of ``b - a``, for two arms run on the same seeds (``a_values[i]`` and ``b_values[i]``
    from seed i): the per-seed differences ``d``, their mean ``diff``, its standard error ``se`` = sd(d)/sqrt(n),
    ``t`` = diff / se with ``df`` = n - 1, and the two-sided ``p``. Pairing removes what a seed does to both arms
    alike, so it can see a smaller gap than Welch's test on the same runs."""
    if len(a_values) != len(b_values) or len(a_values) < 2:
        raise ValueError(f"a_values and b_values must pair up, >= 2 each, got {len(a_values)} and {len(b_values)}")
    d = [float(b) - float(a) for a, b in zip(a_values, b_values)]
    m = mean_and_spread(d)
    if m["se"] == 0.0:
        raise ValueError("the paired differences have no spread at all: a t-test needs some noise to compare with")
    t = m["mean"] / m["se"]
    df = m["n"] - 1
    return {"d": d, "diff": m["mean"], "se": m["se"], "t": t, "df": df, "p": student_t_two_sided_p(t, df), "n": m["n"]}


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (0.5 < q < 1), by bisection on the tail."""
    if not 0.5 < q < 1.0:
        raise ValueError(f"q must be in (0.5, 1), got {q}")
    lo, hi = 0.0, 1.0
    while student_t_two_sided_p(hi, df) / 2 > 1 - q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if student_t_two_sided_p(mid, df) / 2 > 1 - q else (lo, mid)
    return (lo + hi) / 2


def detectable_gap(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true difference a two-sided t-test at level ``alpha`` detects with probability ``power``, given
    the difference's standard error ``se`` and ``df``: (t_{1-alpha/2} + t_{power}) x se (the usual normal-theory
    approximation with t quantiles). A gap below it can hide in the noise of this many seeds."""
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979) of ``m`` p-values, in their given order.

    Sorted ascending, the i-th smallest (from 0) is multiplied by ``m - i``, then made non-decreasing
    and capped at 1. Rejecting where the adjusted p is below alpha keeps the chance of *any* false
    "different" among the m comparisons below alpha (Bonferroni multiplies all of them by m).
    """
    ps = [float(p) for p in p_values]
    if not ps or any(not 0.0 <= p <= 1.0 for p in ps):
        raise ValueError(f"p_values must be a non-empty list of numbers in [0, 1], got {p_values!r}")
    m = len(ps)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def spread(values: Sequence[float]) -> dict:
    """Median, quartiles, extremes and the interquartile range relative to the median. The quartiles
    are linear between order statistics (``method="inclusive"``, numpy's default)."""
    if not values:
        raise ValueError("values must hold at least one measurement, got none")
    v = sorted(values)
    q1, med, q3 = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else (v[0],) * 3
    return {
        "n": len(v),
        "min": v[0],
        "q1": q1,
        "median": med,
        "q3": q3,
        "max": v[-1],
        "iqr_over_median": (q3 - q1) / med if med else float("nan"),
    }


EXACT_BOOTSTRAP_MAX = 6
"""Up to this many values the bootstrap enumerates every resample (n**n of them: 46,656 at 6)."""


def bootstrap_interval(
    values: Sequence[float],
    level: float = 0.95,
    stat: Callable = statistics.median,
    resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """Percentile bootstrap interval of ``stat`` over ``values`` (resampled with replacement).

    With at most ``EXACT_BOOTSTRAP_MAX`` values every one of the n**n equally likely resamples is
    enumerated, so the interval is exact and has no randomness; above that, ``resamples`` draws from
    ``random.Random(seed)``. The bounds are order statistics of the bootstrap distribution: the lower
    is the smallest value whose cumulative share reaches ``(1 - level) / 2``, the upper the smallest
    whose share reaches ``(1 + level) / 2``.
    """
    if len(values) < 2:
        raise ValueError(f"values must hold at least 2 measurements for an interval, got {len(values)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = len(values)
    if n <= EXACT_BOOTSTRAP_MAX:
        dist = sorted(stat([values[i] for i in idx]) for idx in itertools.product(range(n), repeat=n))
        method = "exact"
    else:
        rng = random.Random(seed)
        dist = sorted(stat(rng.choices(values, k=n)) for _ in range(resamples))
        method = f"{resamples} resamples, seed {seed}"
    m = len(dist)

    def at_share(share: float) -> float:
        # the smallest k with (k + 1) / m >= share; a tiny tolerance keeps exact fractions exact
        return dist[min(m - 1, max(0, math.ceil(share * m - 1e-9) - 1))]

    return {
        "level": level,
        "low": at_share((1 - level) / 2),
        "high": at_share((1 + level) / 2),
        "estimate": stat(list(values)),
        "method": method,
    }
