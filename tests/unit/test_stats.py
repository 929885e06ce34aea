"""The lab's statistics (``grpo_lab.study.stats``) against independent values: hand computations
written out in each test, and reference values computed with scipy 1.17 and numpy 2 in a separate
environment and typed in (the lab itself does not depend on scipy).
"""

from __future__ import annotations

import math
import statistics

import pytest

from grpo_lab.study.stats import (
    bootstrap_interval,
    detectable_gap,
    holm,
    mean_and_spread,
    paired_test,
    spread,
    student_t_two_sided_p,
    t_quantile,
    welch_test,
)


def test_mean_and_spread_by_hand():
    s = mean_and_spread([0.70, 0.75, 0.80])
    # mean 0.75; deviations -0.05, 0, 0.05: sample variance 0.005/2 = 0.0025, std 0.05; se 0.05/sqrt(3)
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.75)
    assert s["std"] == pytest.approx(0.05) and s["se"] == pytest.approx(0.05 / math.sqrt(3))
    assert (s["min"], s["max"]) == (0.70, 0.80)


def test_mean_and_spread_skips_missing_values_and_one_value_has_no_spread():
    s = mean_and_spread([2.0, None, float("nan")])
    assert s == {"n": 1, "mean": 2.0, "std": 0.0, "se": 0.0, "min": 2.0, "max": 2.0}
    with pytest.raises(ValueError, match="values must hold at least one number"):
        mean_and_spread([None])


# Reference values from scipy 1.17 (stats.ttest_ind(b, a, equal_var=False) and 2 * stats.t.sf), typed in:
# an implementation independent of the lab's own continued fraction.
def test_welch_test_matches_scipy():
    d = welch_test([0.70, 0.75, 0.80], [0.50, 0.58, 0.61])
    assert d["diff"] == pytest.approx(-0.56 / 3)  # means 0.75 and 1.69 / 3
    assert d["t"] == pytest.approx(-4.2699599693129295, rel=1e-12)
    assert d["df"] == pytest.approx(3.935612611414129, rel=1e-12)
    assert d["p"] == pytest.approx(0.0134096291604444, rel=1e-9)
    # unequal seeds (3 vs 4) and a very clear gap
    d = welch_test([0.755, 0.731, 0.779], [0.369, 0.352, 0.386, 0.40])
    assert d["t"] == pytest.approx(-21.829937700355146, rel=1e-12)
    assert d["df"] == pytest.approx(4.0354344626017875, rel=1e-12)
    assert d["p"] == pytest.approx(2.426825493038784e-05, rel=1e-8)


@pytest.mark.parametrize(
    "t,df,p",
    [(2.5, 3.7, 0.07182202291182678), (0.3, 1.2, 0.8077728113170465), (8.0, 30, 6.265822475700759e-09), (0.0, 4, 1.0)],
)
def test_student_t_tail_matches_scipy(t, df, p):
    assert student_t_two_sided_p(t, df) == pytest.approx(p, rel=1e-9)
    assert student_t_two_sided_p(-t, df) == pytest.approx(p, rel=1e-9)


def test_welch_test_refuses_what_it_cannot_test():
    with pytest.raises(ValueError, match="need >= 2 numbers each"):
        welch_test([0.7], [0.5, 0.6])
    with pytest.raises(ValueError, match="no spread at all"):
        welch_test([0.5, 0.5], [0.6, 0.6])


def test_holm_by_hand():
    # sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> raised to 0.06: monotone)
    assert holm([0.04, 0.01, 0.03, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.03]) == [0.03]  # one comparison: nothing to correct
    with pytest.raises(ValueError, match="p_values must be"):
        holm([])
    with pytest.raises(ValueError, match="p_values must be"):
        holm([1.2])


def test_bootstrap_interval_of_the_median_of_three_values_by_hand():
    # Resampling [1, 2, 3] with replacement: 27 equally likely triples. The median is 1 when at least
    # two draws are 1: 3 * (1 * 1 * 2) + 1 = 7 triples; likewise 3 for 7 triples; 2 for the other 13.
    # Cumulative shares: 7/27 = 0.259 at 1, 20/27 = 0.741 at 2, 1 at 3.
    assert bootstrap_interval([1.0, 2.0, 3.0], level=0.5) | {} == {
        "level": 0.5,
        "low": 1.0,
        "high": 3.0,
        "estimate": 2.0,
        "method": "exact",
    }  # 0.25 -> 1; 0.75 > 0.741 -> 3
    iv = bootstrap_interval([1.0, 2.0, 3.0], level=0.4)  # 0.3 > 0.259 -> 2; 0.7 <= 0.741 -> 2
    assert (iv["low"], iv["high"]) == (2.0, 2.0)
    iv = bootstrap_interval([3.0, 1.0, 2.0], level=0.95)  # order does not matter
    assert (iv["low"], iv["high"]) == (1.0, 3.0)


def test_bootstrap_interval_of_the_mean_of_two_values_by_hand():
    # [1, 5]: resample means 1, 3, 3, 5 (shares 1/4, 3/4, 1). 50%: 0.25 -> 1, 0.75 -> 3.
    iv = bootstrap_interval([1.0, 5.0], level=0.5, stat=statistics.fmean)
    assert (iv["low"], iv["high"], iv["estimate"]) == (1.0, 3.0, 3.0)


def test_bootstrap_interval_by_resampling_above_the_exact_size():
    values = [1.0, 1.1, 1.2, 1.25, 1.3, 1.4, 1.5, 2.0]
    a = bootstrap_interval(values, resamples=2000, seed=1)
    assert a == bootstrap_interval(values, resamples=2000, seed=1)  # seeded: the same interval again
    assert a["method"] == "2000 resamples, seed 1"
    assert min(values) <= a["low"] <= statistics.median(values) <= a["high"] <= max(values)
    assert a["low"] < a["high"]


def test_bootstrap_interval_rejects_one_value_and_a_bad_level():
    with pytest.raises(ValueError, match="values must hold at least 2"):
        bootstrap_interval([1.0])
    with pytest.raises(ValueError, match="level must be in"):
        bootstrap_interval([1.0, 2.0], level=1.0)


def test_spread_quartiles_by_hand():
    # sorted 1 2 3 4 5: median 3; q1 at position 0.25 * 4 = 1 -> 2; q3 at 3 -> 4; (4 - 2) / 3
    s = spread([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s["min"], s["q1"], s["median"], s["q3"], s["max"]) == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert s["iqr_over_median"] == pytest.approx(2 / 3)
    assert spread([7.0]) | {} == {"n": 1, "min": 7.0, "q1": 7.0, "median": 7.0, "q3": 7.0, "max": 7.0,
                                  "iqr_over_median": 0.0}  # fmt: skip
    with pytest.raises(ValueError, match="values must hold at least one"):
        spread([])


def test_spread_quartiles_match_numpy_between_order_statistics():
    # numpy.percentile(v, [25, 50, 75]) (linear, numpy's default), computed in numpy 2 and typed in:
    # positions 1.5 and 4.5 of the sorted 0.29 0.31 0.33 0.35 0.37 0.40 0.52 fall between order statistics.
    s = spread([0.31, 0.35, 0.29, 0.52, 0.40, 0.33, 0.37])
    assert (s["q1"], s["median"], s["q3"]) == pytest.approx((0.32, 0.35, 0.385), rel=1e-12)


def test_paired_test_by_hand():
    # d = [1, 2, 0, 2, 2]: mean 1.4, sd sqrt(3.2 / 4), se 0.4, t = 3.5 on 4 df. For 4 df the t CDF has the
    # closed form F(t) = 1/2 + t / (2 sqrt(t^2 + 4)) * (1 + 2 / (t^2 + 4)).
    r = paired_test([1, 2, 3, 4, 5], [2, 4, 3, 6, 7])
    assert r["d"] == [1, 2, 0, 2, 2] and r["df"] == 4
    assert r["diff"] == pytest.approx(1.4) and r["se"] == pytest.approx(0.4) and r["t"] == pytest.approx(3.5)
    tail = 0.5 - 3.5 / (2 * math.sqrt(16.25)) * (1 + 2 / 16.25)
    assert r["p"] == pytest.approx(2 * tail, rel=1e-9)


def test_paired_test_refuses_what_it_cannot_pair():
    with pytest.raises(ValueError, match="must pair up"):
        paired_test([0.5, 0.6, 0.7], [0.5, 0.6])
    with pytest.raises(ValueError, match="no spread"):
        paired_test([0.5, 0.6], [0.6, 0.7])


@pytest.mark.parametrize(("q", "df", "value"), [(0.975, 4, 2.776445), (0.8, 4, 0.940965), (0.975, 2, 4.302653)])
def test_t_quantile_matches_the_tables(q, df, value):
    assert t_quantile(q, df) == pytest.approx(value, abs=1e-6)


def test_detectable_gap_at_four_df():
    # (2.776445 + 0.940965) x se, the textbook t quantiles at 4 degrees of freedom
    assert detectable_gap(0.01, 4) == pytest.approx(0.0371741, abs=1e-6)
