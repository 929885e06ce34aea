"""The advantage estimators, as plain functions of a step's data (no trainer, no model).

Each expected value is computed here by hand from the definitions in docs/ALGORITHMS.md.
"""

from __future__ import annotations

import math

import pytest
import torch

from grpo_lab.algorithms import get_algorithm
from grpo_lab.train.batch import Sampled
from grpo_lab.train.estimators import ADVANTAGE_ESTIMATORS, EstimatorInput


def test_the_group_estimator_is_grpo_s_group_relative_advantage():
    # Two groups of two: (1, 0) and (0, 0). Group 1: mean 0.5, N-1 std sqrt(0.5); group 2 has no spread.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    out = ADVANTAGE_ESTIMATORS["group"](EstimatorInput(rewards, torch.ones(4, 3), 2), get_algorithm("grpo"))
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert out.advantages.tolist() == pytest.approx([a, -a, 0.0, 0.0])
    assert out.returns is None and out.old_values is None


def test_the_group_estimator_without_scaling_is_dr_grpo_s():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    out = ADVANTAGE_ESTIMATORS["group"](EstimatorInput(rewards, torch.ones(4, 3), 2), get_algorithm("dr_grpo"))
    assert out.advantages.tolist() == [0.5, -0.5, 0.0, 0.0]


def test_the_gfpo_estimator_uses_the_kept_responses_statistics():
    # One group of four sampled, rows 0, 1, 3 kept: rewards (1, 0, 1); mean 2/3, population std sqrt(2)/3.
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    keep = torch.tensor([True, True, False, True])
    sampled = Sampled(rewards, rewards, torch.tensor([3, 4, 5, 6]), ["a"] * 4, keep, 4)
    gfpo = get_algorithm("gfpo", gfpo_group_size=4)
    out = ADVANTAGE_ESTIMATORS["gfpo"](EstimatorInput(rewards[keep], torch.ones(3, 2), 3, sampled=sampled), gfpo)
    mu, sigma = 2 / 3, math.sqrt(2) / 3
    want = [(r - mu) / (sigma + 1e-6) for r in (1.0, 0.0, 1.0)]
    assert out.advantages.tolist() == pytest.approx(want, rel=1e-6)


def test_the_gfpo_estimator_needs_what_was_sampled():
    with pytest.raises(ValueError, match="sampled"):
        ADVANTAGE_ESTIMATORS["gfpo"](EstimatorInput(torch.zeros(2), torch.ones(2, 2), 2), get_algorithm("gfpo"))


def test_the_gae_estimator_by_hand():
    # One row of two tokens, score 1, no KL (beta = 0), gamma = lam = 1, critic values (0.5, 0.25).
    # Token rewards (0, 1). delta_1 = 1 - 0.25 = 0.75; delta_0 = 0 + 0.25 - 0.5 = -0.25.
    # A = (-0.25 + 0.75, 0.75) = (0.5, 0.75); returns = A + V = (1, 1).
    # Whitened: mean 0.625, population std 0.125 -> (-1, 1).
    ppo = get_algorithm("ppo", beta=0.0, gamma=1.0, lam=1.0)
    values = torch.tensor([[0.5, 0.25]])
    data = EstimatorInput(torch.tensor([1.0]), torch.ones(1, 2), 1, old_logp=torch.zeros(1, 2), values=values)
    out = ADVANTAGE_ESTIMATORS["gae"](data, ppo)
    assert out.returns[0].tolist() == pytest.approx([1.0, 1.0])
    assert out.advantages[0].tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)
    assert torch.equal(out.old_values, values)


def test_the_gae_estimator_folds_the_kl_into_the_token_rewards():
    # beta = 0.5, log pi - log ref = (0.2, 0.4): token rewards (-0.1, -0.2 + 1) = (-0.1, 0.8).
    # Critic 0, gamma = lam = 1: A = (0.7, 0.8) = returns.
    ppo = get_algorithm("ppo", beta=0.5, gamma=1.0, lam=1.0)
    data = EstimatorInput(
        torch.tensor([1.0]), torch.ones(1, 2), 1,
        old_logp=torch.tensor([[-1.0, -1.0]]), ref_logp=torch.tensor([[-1.2, -1.4]]), values=torch.zeros(1, 2),
    )  # fmt: skip
    out = ADVANTAGE_ESTIMATORS["gae"](data, ppo)
    assert out.returns[0].tolist() == pytest.approx([0.7, 0.8])
