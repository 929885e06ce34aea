"""The exact answer bandit against hand computation: a two-answer group worked out on paper, the
entropy's first-order change against a finite difference, and the covariance identities."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.bandit import covariance, draws, entropy, entropy_change, expected_gradient, follow, group_weights

# Two answers: right (reward 1, 1 token) and wrong (reward 0, 2 tokens); a uniform policy; G = 2.
# Only the mixed groups (right, wrong) and (wrong, right), each of probability 1/4, carry a gradient.
R, L = [1.0, 0.0], [1, 2]
A = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO: (1 - 0.5) / (unbiased std of {1, 0} + TRL's eps)


def test_draws_are_every_ordered_group():
    assert draws(2, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    with pytest.raises(ValueError, match="K\\*\\*G must be at most"):
        draws(10, 8)


def test_grpo_expected_gradient_by_hand():
    # per mixed group: right weight A/(2*1), wrong weight -A/(2*2); each times (e_k - pi), pi = (1/2, 1/2)
    per_group = A / 2 * 0.5 + A / 4 * 0.5
    expected = torch.tensor([0.5 * per_group, -0.5 * per_group], dtype=torch.float64)
    got = expected_gradient(torch.zeros(2), group_weights(R, L, 2, "seq_mean_token_mean", "group"))
    assert_close(got, expected)


def test_dr_grpo_expected_gradient_by_hand():
    # A = +-0.5 (no std division), weight A / (G * max_len) = +-0.5 / 4 on both answers
    got = expected_gradient(torch.zeros(2), group_weights(R, L, 2, "seq_mean_token_sum_norm", "none", max_len=2))
    assert_close(got, torch.tensor([0.0625, -0.0625], dtype=torch.float64))


def test_token_mean_expected_gradient_by_hand():
    # A = +-A (std division), weight A / (1 + 2 tokens) on both answers of a mixed group
    per_group = A / 3 * 0.5 + A / 3 * 0.5
    got = expected_gradient(torch.zeros(2), group_weights(R, L, 2, "token_mean", "group"))
    assert_close(got, torch.tensor([0.5 * per_group, -0.5 * per_group], dtype=torch.float64))


def test_following_the_expected_gradient_moves_probability_to_the_right_answer():
    P = follow(torch.zeros(2), R, L, 2, steps=3, lr=1.0)
    assert P.shape == (4, 2)
    assert (P[1:, 0] > P[:-1, 0]).all() and P[0, 0] == 0.5


def test_entropy_change_is_the_first_order_term():
    pi_logits = torch.tensor([1.0, -0.5, 0.3, 2.0], dtype=torch.float64)
    step = torch.tensor([0.2, -1.0, 0.7, 0.1], dtype=torch.float64)
    eps = 1e-6
    H = lambda t: entropy(torch.softmax(t, 0))  # noqa: E731
    finite_difference = (H(pi_logits + eps * step) - H(pi_logits - eps * step)) / (2 * eps)
    assert_close(entropy_change(torch.softmax(pi_logits, 0), step), finite_difference, rtol=1e-6, atol=1e-9)


def test_entropy_change_is_minus_a_covariance_for_a_centred_advantage():
    pi = torch.softmax(torch.tensor([1.0, -0.5, 0.3, 2.0], dtype=torch.float64), 0)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.3], dtype=torch.float64)
    adv = adv - pi @ adv  # E_pi[A] = 0
    assert_close(entropy_change(pi, adv), -covariance(pi, pi.log(), adv))  # natural gradient
    assert_close(entropy_change(pi, pi * adv), -covariance(pi, pi.log(), pi * adv))  # policy gradient


def test_mismatched_tables_are_refused():
    with pytest.raises(ValueError, match="theta must be 1-D with one logit per answer of weights \\(K = 2\\)"):
        expected_gradient(torch.zeros(3), group_weights(R, L, 2))
    with pytest.raises(ValueError, match="rewards and lengths must be 1-D of one length K"):
        group_weights(R, [1, 2, 3], 2)
    with pytest.raises(ValueError, match="lengths must be >= 1"):
        group_weights(R, [0, 2], 2)
