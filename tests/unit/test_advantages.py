"""Unit tests for ``grpo_lab.core.advantages``.

Where the expected values come from:
- the numeric vectors of ``shared/ALGORITHMS.md`` section 10 (GAE, whitening, RLOO, GRPO and
  Dr. GRPO advantages, process supervision, dynamic sampling, GFPO), which were computed
  independently in float64 Python;
- hand computation written out in the test with plain Python floats (``statistics``, ``math``)
  for everything the sheet does not list.
Nothing here was obtained by running the code under test and pasting its output.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.advantages import (
    adaptive_k,
    dynamic_sampling_keep,
    gae,
    gfpo_advantages,
    gfpo_keep,
    group_advantages,
    process_advantages,
    reward_quartiles,
    rloo_advantages,
    whiten,
)

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def close(actual, expected, atol=1e-6):
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert_close(actual, expected, rtol=0.0, atol=atol)


# --------------------------------------------------------------------------------------------
# GRPO / Dr. GRPO advantages (ALGORITHMS.md section 10, "GRPO and Dr. GRPO advantages")
# --------------------------------------------------------------------------------------------

# rewards -> (GRPO unbiased std, GRPO population std or None, Dr. GRPO or None), from the sheet.
GRPO_VECTORS = [
    ([1, 0, 0, 0], [1.5, -0.5, -0.5, -0.5], [1.732051, -0.57735, -0.57735, -0.57735], [0.75, -0.25, -0.25, -0.25]),
    ([1, 0, 1, 0], [0.866025, -0.866025, 0.866025, -0.866025], [1, -1, 1, -1], [0.5, -0.5, 0.5, -0.5]),
    ([1, 1, 1, 0], [0.5, 0.5, 0.5, -1.5], [0.57735, 0.57735, 0.57735, -1.732051], [0.25, 0.25, 0.25, -0.75]),
    ([1, -1, -1, -1], [1.5, -0.5, -0.5, -0.5], None, [1.5, -0.5, -0.5, -0.5]),
]


@pytest.mark.parametrize("rewards, unbiased, population, _dr", GRPO_VECTORS)
def test_grpo_advantages_unbiased_std_match_sheet(rewards, unbiased, population, _dr):
    # The sheet's values are R - mean over the exact std, so eps=0 here.
    close(group_advantages(t(rewards), 4, eps=0.0), unbiased)


@pytest.mark.parametrize("rewards, _u, population, _dr", [v for v in GRPO_VECTORS if v[2] is not None])
def test_grpo_advantages_population_std_match_sheet(rewards, _u, population, _dr):
    close(group_advantages(t(rewards), 4, eps=0.0, unbiased=False), population)


@pytest.mark.parametrize("rewards, _u, _p, dr", GRPO_VECTORS)
def test_dr_grpo_advantages_are_centred_only(rewards, _u, _p, dr):
    close(group_advantages(t(rewards), 4, scale="none"), dr, atol=1e-12)


def test_grpo_default_is_unbiased_std_plus_trl_eps():
    # [1,0,0,0]: mean 0.25, unbiased std 0.5; default eps = 1e-4 (TRL's constant).
    expected = [0.75 / (0.5 + 1e-4)] + [-0.25 / (0.5 + 1e-4)] * 3
    close(group_advantages(t([1, 0, 0, 0]), 4), expected, atol=1e-12)


def test_dapo_pm1_rewards_give_same_grpo_advantages_as_binary():
    # Sheet: "[1,-1,-1,-1] ... identical to [1,0,0,0], because the normalisation is scale-invariant".
    close(group_advantages(t([1, -1, -1, -1]), 4, eps=0.0), group_advantages(t([1, 0, 0, 0]), 4, eps=0.0), atol=1e-12)


@pytest.mark.parametrize("eps", [1e-6, 1e-4, 0.0])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_all_equal_rewards_give_exactly_zero_advantages(eps, scale):
    adv = group_advantages(t([1.0, 1.0, 1.0, 1.0]), 4, scale=scale, eps=eps)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv, torch.zeros(4, dtype=F64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [0.0, 1e-4])
def test_constant_group_with_inexact_mean_gives_zero_advantages(eps, dtype):
    # A zero-std group carries no signal (ALGORITHMS.md section 3, pitfall 1; the docstring of
    # group_advantages promises "exactly 0, never NaN"). The group mean of e.g. seven 0.1s is not
    # exactly 0.1 in floating point, so R - mean is ~1e-9 and the computed std is ~1e-9, not 0:
    # the advantages must still be 0 (dynamic_sampling_keep treats the same group as all-equal).
    rewards = torch.full((7,), 0.1, dtype=dtype)
    adv = group_advantages(rewards, 7, eps=eps)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv, torch.zeros_like(adv))


def test_zero_std_group_next_to_mixed_group():
    rewards = t([1, 1, 1, 1, 1, 0, 0, 0])
    adv = group_advantages(rewards, 4, eps=0.0)
    assert torch.equal(adv[:4], torch.zeros(4, dtype=F64))
    close(adv[4:], [1.5, -0.5, -0.5, -0.5])


def test_batch_scale_uses_group_mean_and_batch_std():
    rewards = [1, 0, 0, 0, 1, 1, 0, 0]
    std = statistics.stdev(rewards)  # unbiased, over the whole batch (TRL scale_rewards="batch")
    means = [0.25] * 4 + [0.5] * 4
    expected = [(r - m) / (std + 1e-4) for r, m in zip(rewards, means)]
    close(group_advantages(t(rewards), 4, scale="batch"), expected, atol=1e-12)
    pstd = statistics.pstdev(rewards)
    expected_pop = [(r - m) / pstd for r, m in zip(rewards, means)]
    close(group_advantages(t(rewards), 4, scale="batch", eps=0.0, unbiased=False), expected_pop, atol=1e-12)


def test_group_scale_matches_hand_computation_on_random_groups():
    torch.manual_seed(0)
    rewards = torch.randn(12, dtype=F64)
    vals = rewards.tolist()
    expected = []
    for g in range(3):
        grp = vals[4 * g : 4 * g + 4]
        m, s = statistics.fmean(grp), statistics.stdev(grp)
        expected += [(r - m) / (s + 1e-4) for r in grp]
    close(group_advantages(rewards, 4), expected, atol=1e-12)


def test_group_advantages_keep_dtype_and_shape():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2)
    assert adv.shape == (4,) and adv.dtype == torch.float32


# --------------------------------------------------------------------------------------------
# RLOO (sheet section 10, "RLOO")
# --------------------------------------------------------------------------------------------

RLOO_VECTORS = [
    ([1, 0, 0, 1], [0.666667, -0.666667, -0.666667, 0.666667]),
    ([1, 0, 0, 0], [1.0, -1 / 3, -1 / 3, -1 / 3]),
    ([0.2, 0.5, 0.9], [-0.5, -0.05, 0.55]),
    ([1, 1, 1, 1], [0.0, 0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize("rewards, expected", RLOO_VECTORS)
def test_rloo_advantages_match_sheet(rewards, expected):
    close(rloo_advantages(t(rewards), len(rewards)), expected)


def test_rloo_equal_rewards_exactly_zero():
    assert torch.equal(rloo_advantages(t([1, 1, 1, 1]), 4), torch.zeros(4, dtype=F64))


def test_rloo_is_g_over_g_minus_1_times_centred_reward():
    torch.manual_seed(1)
    G = 5
    rewards = torch.randn(3 * G, dtype=F64)
    vals = rewards.tolist()
    expected = []
    for g in range(3):
        grp = vals[G * g : G * g + G]
        m = sum(grp) / G
        expected += [G / (G - 1) * (r - m) for r in grp]
    close(rloo_advantages(rewards, G), expected, atol=1e-12)


def test_rloo_is_leave_one_out_mean():
    rewards = [0.3, 1.2, -0.4, 2.0]
    expected = [r - (sum(rewards) - r) / 3 for r in rewards]
    close(rloo_advantages(t(rewards), 4), expected, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Process supervision (sheet section 10, "GRPO process supervision")
# --------------------------------------------------------------------------------------------


def test_process_advantages_match_sheet():
    # Steps end at tokens 3 and 7 (1-based) in o1 and token 4 in o2: 0-based [2, 6] and [3].
    a1, a2 = process_advantages([[1.0, 0.0], [0.5]], [[2, 6], [3]], [7, 4])
    close(a1, [0, 0, 0, -1, -1, -1, -1], atol=1e-12)
    close(a2, [0, 0, 0, 0], atol=1e-12)


def test_process_advantages_sum_later_steps_by_hand():
    rewards = [[0.2, 0.9, 0.4], [0.0, 1.0]]
    ends = [[0, 2, 4], [1, 2]]
    lengths = [5, 4]
    flat = [r for rs in rewards for r in rs]
    m, s = statistics.fmean(flat), statistics.stdev(flat)
    norm = [[(r - m) / s for r in rs] for rs in rewards]
    expected = []
    for ns, es, n in zip(norm, ends, lengths):
        expected.append([sum(v for v, e in zip(ns, es) if e >= tok) for tok in range(n)])
    out = process_advantages(rewards, ends, lengths)
    assert [o.shape[0] for o in out] == lengths
    for o, e in zip(out, expected):
        close(o, e, atol=1e-12)


def test_process_advantages_equal_step_rewards_give_zero():
    # All steps rewarded alike: std 0, nothing to learn; the advantages must be 0, not 0/0 noise.
    out = process_advantages([[0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1]], [[0, 1, 2], [0, 1, 2, 3]], [3, 4])
    for o in out:
        assert torch.equal(o, torch.zeros_like(o))


# --------------------------------------------------------------------------------------------
# GAE (sheet section 10, "GAE")
# --------------------------------------------------------------------------------------------

GAE_REWARDS = [[0.0, 0.0, 1.0]]
GAE_VALUES = [[0.5, 0.6, 0.7]]


@pytest.mark.parametrize(
    "gamma, lam, expected",
    [
        (1.0, 0.95, [0.46575, 0.385, 0.3]),
        (0.99, 0.95, [0.446829, 0.37515, 0.3]),
        (1.0, 1.0, [0.5, 0.4, 0.3]),
        (1.0, 0.0, [0.1, 0.1, 0.3]),
    ],
)
def test_gae_matches_sheet(gamma, lam, expected):
    adv, _ = gae(t(GAE_REWARDS), t(GAE_VALUES), torch.ones(1, 3), gamma=gamma, lam=lam)
    close(adv[0], expected)


def test_gae_returns_are_advantages_plus_values():
    adv, ret = gae(t(GAE_REWARDS), t(GAE_VALUES), torch.ones(1, 3), gamma=1.0, lam=0.95)
    close(ret[0], [0.96575, 0.985, 1.0])


def test_gae_ignores_padding_and_treats_last_valid_token_as_terminal():
    # Row 0 has 2 valid tokens then padding with garbage values; the value after the last valid
    # token is 0 (terminal). Hand recursion: delta_1 = 1 - 0.6, delta_0 = 0 + 0.6 - 0.5.
    gamma, lam = 0.9, 0.8
    rewards = t([[0.0, 1.0, 5.0, 5.0], [0.0, 0.0, 1.0, 0.5]])
    values = t([[0.5, 0.6, 9.0, 9.0], [0.1, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    d1 = 1.0 - 0.6
    d0 = 0.0 + gamma * 0.6 - 0.5
    close(adv[0], [d0 + gamma * lam * d1, d1, 0.0, 0.0], atol=1e-12)
    close(ret[0], [d0 + gamma * lam * d1 + 0.5, d1 + 0.6, 0.0, 0.0], atol=1e-12)
    r, v = rewards[1].tolist(), values[1].tolist() + [0.0]
    a, expected = 0.0, [0.0] * 4
    for k in reversed(range(4)):
        a = r[k] + gamma * v[k + 1] - v[k] + gamma * lam * a
        expected[k] = a
    close(adv[1], expected, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Whitening (sheet section 10, "Whitening")
# --------------------------------------------------------------------------------------------


def test_whiten_population_variance_matches_sheet():
    close(whiten(t([1, 2, 3, 4])), [-1.341641, -0.447214, 0.447214, 1.341641])


def test_whiten_bessel_variance_matches_sheet():
    close(whiten(t([1, 2, 3, 4]), unbiased=True), [-1.161895, -0.387298, 0.387298, 1.161895])


def test_whiten_shift_mean_false_matches_sheet():
    close(whiten(t([1, 2, 3, 4]), shift_mean=False), [1.158359, 2.052786, 2.947214, 3.841641])


def test_whiten_uses_only_masked_values_and_zeros_padding():
    x = t([[1.0, 2.0, 100.0], [3.0, 4.0, -50.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    vals = [1.0, 2.0, 3.0, 4.0]
    m, var = statistics.fmean(vals), statistics.pvariance(vals)
    expected = [[(v - m) / math.sqrt(var + 1e-8) for v in row] + [0.0] for row in ([1.0, 2.0], [3.0, 4.0])]
    close(whiten(x, mask), expected, atol=1e-12)


# --------------------------------------------------------------------------------------------
# DAPO dynamic sampling (sheet section 10, "DAPO")
# --------------------------------------------------------------------------------------------


def test_dynamic_sampling_keep_rule_matches_sheet():
    G = 16
    rewards = torch.cat([t([1.0] * c + [0.0] * (G - c)) for c in [0, 16, 5, 15, 1]])
    keep = dynamic_sampling_keep(rewards, G)
    assert keep.tolist() == [False, False, True, True, True]


def test_dynamic_sampling_looks_at_variance_only():
    # DAPO pm1 rewards and continuous rewards: a group is dropped only when all rewards are equal.
    rewards = t([-1, -1, -1, -1, 1, 1, 1, 1, 0.3, 0.3, 0.3, 0.31])
    assert dynamic_sampling_keep(rewards, 4).tolist() == [False, False, True]


# --------------------------------------------------------------------------------------------
# GFPO (sheet section 10, "GFPO")
# --------------------------------------------------------------------------------------------

GFPO_R = [1, -1, -1, 1, -1, 1, -1, -1]
GFPO_LEN = [100, 400, 150, 200, 600, 120, 90, 300]


def test_gfpo_shortest_k_retained_set_and_advantages():
    keep = gfpo_keep(t(GFPO_R), torch.tensor(GFPO_LEN), 8, 4, metric="length")
    assert torch.nonzero(keep).flatten().tolist() == [0, 2, 5, 6]
    # The sheet's values use the exact std, so eps=0 here (the default eps=1e-6 is checked below).
    close(gfpo_advantages(t(GFPO_R), keep, 8, eps=0.0), [1, 0, -1, 0, 0, 1, -1, 0])


def test_gfpo_token_efficiency_retained_set_and_advantages():
    keep = gfpo_keep(t(GFPO_R), torch.tensor(GFPO_LEN), 8, 4, metric="token_efficiency")
    assert torch.nonzero(keep).flatten().tolist() == [0, 3, 4, 5]  # 4 is the 600-token wrong answer
    close(gfpo_advantages(t(GFPO_R), keep, 8, eps=0.0), [0.57735, 0, 0, 0.57735, -1.732051, 0.57735, 0, 0])


def test_gfpo_token_efficiency_binary_rewards_pitfall_gives_all_zero():
    rewards = t([1, 1, 0, 1, 0, 1, 0, 0])
    keep = gfpo_keep(rewards, torch.tensor(GFPO_LEN), 8, 4, metric="token_efficiency")
    assert torch.nonzero(keep).flatten().tolist() == [0, 1, 3, 5]
    adv = gfpo_advantages(rewards, keep, 8)
    assert torch.equal(adv, torch.zeros(8, dtype=F64))


def test_gfpo_advantages_use_retained_population_stats_by_hand():
    rewards = [0.2, 0.9, 0.5, 0.1, 0.7, 0.4]
    keep = [1, 0, 1, 1, 0, 1]
    kept = [r for r, k in zip(rewards, keep) if k]
    m, s = statistics.fmean(kept), statistics.pstdev(kept)
    expected = [(r - m) / (s + 1e-6) if k else 0.0 for r, k in zip(rewards, keep)]
    close(gfpo_advantages(t(rewards), torch.tensor(keep, dtype=torch.bool), 6), expected, atol=1e-12)


def test_gfpo_constant_retained_set_gives_zero_advantages():
    # sigma_S = 0 -> all zero (sheet section 7 pitfall 1), also when the mean of 0.1s is inexact.
    rewards = torch.full((7,), 0.1)
    adv = gfpo_advantages(rewards, torch.ones(7, dtype=torch.bool), 7)
    assert torch.equal(adv, torch.zeros(7))


def test_gfpo_keep_ties_go_to_lower_index():
    keep = gfpo_keep(t([1, 1, 1, 1]), torch.tensor([5, 5, 5, 5]), 4, 2)
    assert keep.tolist() == [True, True, False, False]
    keep = gfpo_keep(t([1, 1, 1, 1]), torch.tensor([5, 5, 5, 5]), 4, 2, metric="token_efficiency")
    assert keep.tolist() == [True, True, False, False]


def test_gfpo_keep_per_group_k_tensor():
    rewards = t([1, 0, 1, 0, 1, 0, 1, 0])
    lengths = torch.tensor([4, 3, 2, 1, 1, 2, 3, 4])
    keep = gfpo_keep(rewards, lengths, 4, torch.tensor([1, 3]))
    assert keep.tolist() == [False, False, False, True, True, True, True, False]


def test_adaptive_k_matches_sheet():
    k = adaptive_k(t([0.1, 0.3, 0.6, 0.9]), (0.2, 0.5, 0.8))
    assert k.tolist() == [8, 8, 6, 4]


def test_adaptive_k_bucket_edges():
    # Sheet table: q25 <= mu < q50 is hard (8), q50 <= mu < q75 medium (6), mu >= q75 easy (4).
    k = adaptive_k(t([0.25, 0.5, 0.75]), (0.25, 0.5, 0.75))
    assert k.tolist() == [8, 6, 4]


def test_reward_quartiles_exact_quantiles():
    # Linear interpolation on 0, .25, .5, .75, 1 lands on the data points 1, 2, 3.
    assert reward_quartiles(t([1.0, 0.0, 0.5, 0.25, 0.75])) == pytest.approx((0.25, 0.5, 0.75))


# --------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument
# --------------------------------------------------------------------------------------------


class TestBadInput:
    def test_batch_not_multiple_of_group_size(self):
        for fn in (group_advantages, rloo_advantages, dynamic_sampling_keep):
            with pytest.raises(ValueError, match="group_size"):
                fn(t([1, 0, 1, 0, 1]), 2)
        with pytest.raises(ValueError, match="group_size"):
            gfpo_advantages(t([1, 0, 1]), torch.ones(3), 2)
        with pytest.raises(ValueError, match="group_size"):
            gfpo_keep(t([1, 0, 1]), torch.tensor([1, 2, 3]), 2, 1)

    def test_group_size_not_an_int(self):
        with pytest.raises(ValueError, match="group_size"):
            group_advantages(t([1, 0, 1, 0]), 2.0)

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
    def test_nan_or_inf_rewards(self, bad):
        rewards = t([1.0, bad, 0.0, 1.0])
        for fn in (group_advantages, rloo_advantages, dynamic_sampling_keep):
            with pytest.raises(ValueError, match="rewards"):
                fn(rewards, 2)
        with pytest.raises(ValueError, match="rewards"):
            gfpo_advantages(rewards, torch.ones(4), 2)
        with pytest.raises(ValueError, match="rewards"):
            gfpo_keep(rewards, torch.tensor([1, 2, 3, 4]), 2, 1)

    def test_nan_step_reward(self):
        with pytest.raises(ValueError, match="step_rewards"):
            process_advantages([[1.0, float("nan")], [0.5]], [[2, 6], [3]], [7, 4])

    def test_non_tensor_rewards(self):
        with pytest.raises(ValueError, match="rewards"):
            group_advantages([1.0, 0.0], 2)
        with pytest.raises(ValueError, match="rewards"):
            rloo_advantages([1.0, 0.0], 2)

    def test_integer_rewards_are_taken_as_floats(self):
        # 0/1 correctness typed as integers is a valid input: R_i - R_other within each pair.
        assert rloo_advantages(torch.tensor([1, 0, 0, 1]), 2).tolist() == [1.0, -1.0, -1.0, 1.0]
        assert group_advantages(torch.tensor([True, False]), 2, scale="none").tolist() == [0.5, -0.5]

    def test_two_d_rewards(self):
        with pytest.raises(ValueError, match="rewards"):
            group_advantages(torch.zeros(2, 2), 2)

    def test_unknown_scale_lists_options(self):
        with pytest.raises(ValueError, match="scale") as info:
            group_advantages(t([1, 0, 1, 0]), 2, scale="std")
        for option in ("group", "batch", "none"):
            assert option in str(info.value)

    def test_group_size_one_for_std_scaling(self):
        with pytest.raises(ValueError, match="group_size"):
            group_advantages(t([1, 0]), 1)

    def test_negative_eps(self):
        with pytest.raises(ValueError, match="eps"):
            group_advantages(t([1, 0]), 2, eps=-1e-4)
        with pytest.raises(ValueError, match="eps"):
            gfpo_advantages(t([1, 0]), torch.ones(2), 2, eps=-1.0)

    def test_rloo_group_size_one(self):
        with pytest.raises(ValueError, match="group_size"):
            rloo_advantages(t([1.0, 0.0]), 1)

    def test_process_mismatched_lists(self):
        with pytest.raises(ValueError, match="lengths"):
            process_advantages([[1.0], [0.5]], [[0], [0]], [3])
        with pytest.raises(ValueError, match=r"step_ends\[0\]"):
            process_advantages([[1.0, 0.0], [0.5]], [[2], [3]], [7, 4])

    def test_process_step_end_out_of_range(self):
        # step_ends are 0-based: index 7 does not exist in a 7-token response.
        with pytest.raises(ValueError, match="step_ends"):
            process_advantages([[1.0, 0.0], [0.5]], [[3, 7], [3]], [7, 4])

    def test_gae_shape_mismatch(self):
        with pytest.raises(ValueError, match="values"):
            gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
        with pytest.raises(ValueError, match="mask"):
            gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3, 2))

    def test_gae_mask_with_a_gap(self):
        with pytest.raises(ValueError, match="mask"):
            gae(torch.zeros(1, 4), torch.zeros(1, 4), torch.tensor([[1, 0, 1, 0]]))

    def test_gae_mask_not_binary(self):
        with pytest.raises(ValueError, match="mask"):
            gae(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([[1.0, 0.5, 0.0]]))

    def test_gae_bad_gamma_lambda(self):
        with pytest.raises(ValueError, match="gamma"):
            gae(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), gamma=1.5)
        with pytest.raises(ValueError, match="lam"):
            gae(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3), lam=-0.1)

    def test_gae_integer_and_non_tensor(self):
        with pytest.raises(ValueError, match="rewards"):
            gae(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 3), torch.ones(1, 3))
        with pytest.raises(ValueError, match="values"):
            gae(torch.zeros(1, 3), [[0.0, 0.0, 0.0]], torch.ones(1, 3))

    def test_whiten_bad_inputs(self):
        with pytest.raises(ValueError, match=r"\bx\b"):
            whiten(torch.tensor([1, 2, 3]))
        with pytest.raises(ValueError, match="mask"):
            whiten(t([1, 2, 3]), torch.ones(4))
        with pytest.raises(ValueError, match="mask"):
            whiten(t([1, 2, 3]), torch.tensor([0, 0, 0]))
        with pytest.raises(ValueError, match="mask"):
            whiten(t([1, 2, 3]), torch.tensor([1, 0, 0]), unbiased=True)

    def test_gfpo_k_out_of_range(self):
        rewards, lengths = t(GFPO_R), torch.tensor(GFPO_LEN)
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(rewards, lengths, 8, 9)
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(rewards, lengths, 8, 0)
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(rewards, lengths, 4, torch.tensor([2, 5]))
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(rewards, lengths, 4, torch.tensor([2, 2, 2]))
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(rewards, lengths, 8, 2.0)

    def test_gfpo_k_tensor_with_non_integer_values(self):
        # An int k must be an int (2.0 is refused above); a per-group k of 2.7 must not be silently truncated.
        with pytest.raises(ValueError, match=r"\bk\b"):
            gfpo_keep(t([1, 0, 1, 0]), torch.tensor([1, 2, 3, 4]), 4, torch.tensor([2.7]))

    @pytest.mark.parametrize("metric", ["length", "token_efficiency"])
    def test_gfpo_nan_length(self, metric):
        with pytest.raises(ValueError, match="lengths"):
            gfpo_keep(t([1, 0, 1, 0]), torch.tensor([1.0, float("nan"), 3.0, 4.0]), 4, 2, metric=metric)

    def test_gfpo_unknown_metric_lists_options(self):
        with pytest.raises(ValueError, match="metric") as info:
            gfpo_keep(t(GFPO_R), torch.tensor(GFPO_LEN), 8, 4, metric="shortest")
        assert "length" in str(info.value) and "token_efficiency" in str(info.value)

    def test_gfpo_bad_lengths(self):
        with pytest.raises(ValueError, match="lengths"):
            gfpo_keep(t([1, 0]), torch.tensor([3, 0]), 2, 1)
        with pytest.raises(ValueError, match="lengths"):
            gfpo_keep(t([1, 0]), torch.tensor([3, 4, 5]), 2, 1)
        with pytest.raises(ValueError, match="lengths"):
            gfpo_keep(t([1, 0]), [3, 4], 2, 1)

    def test_gfpo_advantages_bad_keep(self):
        with pytest.raises(ValueError, match="keep"):
            gfpo_advantages(t([1, 0, 1, 0]), torch.ones(3), 2)
        with pytest.raises(ValueError, match="keep"):
            gfpo_advantages(t([1, 0, 1, 0]), torch.tensor([1, 1, 0, 0]), 2)
        with pytest.raises(ValueError, match="keep"):
            gfpo_advantages(t([1, 0, 1, 0]), torch.tensor([1, 2, 1, 1]), 2)

    def test_reward_quartiles_bad_inputs(self):
        with pytest.raises(ValueError, match="mean_rewards_seen"):
            reward_quartiles(torch.zeros(0))
        with pytest.raises(ValueError, match="mean_rewards_seen"):
            reward_quartiles(t([0.1, float("nan")]))

    def test_adaptive_k_bad_inputs(self):
        with pytest.raises(ValueError, match="quartiles"):
            adaptive_k(t([0.5]), (0.8, 0.5, 0.2))
        with pytest.raises(ValueError, match="quartiles"):
            adaptive_k(t([0.5]), (0.2, 0.5))
        with pytest.raises(ValueError, match="k_by_bucket"):
            adaptive_k(t([0.5]), (0.2, 0.5, 0.8), k_by_bucket=(8, 8, 0, 4))
        with pytest.raises(ValueError, match="mean_rewards"):
            adaptive_k(t([float("nan")]), (0.2, 0.5, 0.8))
