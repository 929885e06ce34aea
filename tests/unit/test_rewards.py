"""Unit tests for ``grpo_lab.core.rewards``: DAPO's soft overlong penalty and the KL-shaped RLHF reward.

Where the expected values come from:
- ``shared/ALGORITHMS.md`` section 10 ("KL-shaped reward", "DAPO" soft overlong punishment,
  including TRL's docstring example L_max = 100, L_cache = 20, 90 tokens -> -0.5);
- hand computation of DAPO eq. 13 and of ``-beta * (logp - ref) + 1[last] * score`` in plain
  Python floats.
Nothing here was obtained by running the code under test and pasting its output.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.advantages import gae
from grpo_lab.core.kl import kl_estimate
from grpo_lab.core.rewards import kl_shaped_rewards, soft_overlong_penalty

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Soft overlong penalty (DAPO eq. 13)
# --------------------------------------------------------------------------------------------


def test_soft_overlong_penalty_matches_sheet():
    lengths = torch.tensor([16384, 16385, 18432, 20480, 20481])
    out = soft_overlong_penalty(lengths, max_len=20480, cache_len=4096)
    assert_close(out.double(), t([0.0, -0.000244, -0.5, -1.0, -1.0]), rtol=0.0, atol=1e-6)


def test_soft_overlong_penalty_trl_docstring_example():
    assert soft_overlong_penalty(torch.tensor([90]), max_len=100, cache_len=20).item() == pytest.approx(-0.5, abs=1e-7)


def test_soft_overlong_penalty_by_hand_over_all_lengths():
    L_max, L_cache = 30, 8

    def eq13(n):
        if n <= L_max - L_cache:
            return 0.0
        if n <= L_max:
            return ((L_max - L_cache) - n) / L_cache
        return -1.0

    lengths = list(range(0, 40))
    out = soft_overlong_penalty(torch.tensor(lengths), max_len=L_max, cache_len=L_cache)
    assert out.shape == (40,)
    assert_close(out.double(), t([eq13(n) for n in lengths]), rtol=0.0, atol=1e-7)


def test_soft_overlong_penalty_cache_equal_to_max_len():
    out = soft_overlong_penalty(torch.tensor([0, 5, 10, 11]), max_len=10, cache_len=10)
    assert_close(out.double(), t([0.0, -0.5, -1.0, -1.0]), rtol=0.0, atol=1e-7)


# --------------------------------------------------------------------------------------------
# KL-shaped reward
# --------------------------------------------------------------------------------------------


def test_kl_shaped_rewards_match_sheet():
    logp, ref = t([[-1.0, -2.0, -0.5]]), t([[-1.2, -1.5, -0.5]])
    assert_close(kl_estimate(logp, ref, "k1"), t([[0.2, -0.5, 0.0]]), rtol=0.0, atol=1e-12)
    out = kl_shaped_rewards(t([2.0]), logp, ref, torch.ones(1, 3), beta=0.1)
    assert_close(out, t([[-0.02, 0.05, 2.0]]), rtol=0.0, atol=1e-12)


def test_kl_shaped_rewards_score_lands_on_last_valid_token_and_padding_is_zero():
    logp = t([[-1.0, -2.0, -0.5, -3.0], [-0.1, -0.2, -0.3, -0.4]])
    ref = t([[-1.2, -1.5, -0.5, -9.0], [-0.3, -0.2, -0.1, -0.4]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    beta = 0.2
    expected = [
        [-beta * (-1.0 + 1.2), -beta * (-2.0 + 1.5) + 1.0, 0.0, 0.0],
        [-beta * (-0.1 + 0.3), 0.0, -beta * (-0.3 + 0.1), 0.0 - 3.0],
    ]
    out = kl_shaped_rewards(t([1.0, -3.0]), logp, ref, mask, beta=beta)
    assert_close(out, t(expected), rtol=0.0, atol=1e-12)


def test_kl_shaped_rewards_carry_no_gradient():
    logp = t([[-1.0, -2.0]]).requires_grad_()
    out = kl_shaped_rewards(t([1.0]), logp, t([[-1.5, -1.0]]), torch.ones(1, 2), beta=0.1)
    assert not out.requires_grad


def test_kl_in_reward_flows_through_gae_to_earlier_tokens():
    # Sheet section 1: "every token's advantage carries the KL paid by later tokens".
    # V = 0, gamma = lambda = 1: A_t = sum of rewards from t on.
    rewards = kl_shaped_rewards(t([2.0]), t([[-1.0, -2.0, -0.5]]), t([[-1.2, -1.5, -0.5]]), torch.ones(1, 3), beta=0.1)
    adv, _ = gae(rewards, torch.zeros(1, 3, dtype=F64), torch.ones(1, 3), gamma=1.0, lam=1.0)
    assert_close(adv, t([[-0.02 + 0.05 + 2.0, 0.05 + 2.0, 2.0]]), rtol=0.0, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


class TestBadInput:
    def test_cache_len_greater_than_max_len(self):
        with pytest.raises(ValueError, match="cache_len"):
            soft_overlong_penalty(torch.tensor([10]), max_len=100, cache_len=120)

    @pytest.mark.parametrize("cache_len", [0, -5, 2.0])
    def test_cache_len_not_a_positive_int(self, cache_len):
        with pytest.raises(ValueError, match="cache_len"):
            soft_overlong_penalty(torch.tensor([10]), max_len=100, cache_len=cache_len)

    @pytest.mark.parametrize("max_len", [0, -1, 100.0])
    def test_max_len_not_a_positive_int(self, max_len):
        with pytest.raises(ValueError, match="max_len"):
            soft_overlong_penalty(torch.tensor([10]), max_len=max_len, cache_len=1)

    def test_bad_lengths(self):
        with pytest.raises(ValueError, match="lengths"):
            soft_overlong_penalty(torch.tensor([10, -1]), max_len=100, cache_len=20)
        with pytest.raises(ValueError, match="lengths"):
            soft_overlong_penalty([10, 20], max_len=100, cache_len=20)
        with pytest.raises(ValueError, match="lengths"):
            soft_overlong_penalty(torch.tensor([[10, 20]]), max_len=100, cache_len=20)
        with pytest.raises(ValueError, match="lengths"):
            soft_overlong_penalty(torch.tensor([10.0, float("nan")]), max_len=100, cache_len=20)

    def good(self):
        return dict(
            scores=t([1.0, 2.0]),
            logp=torch.zeros(2, 3, dtype=F64),
            ref_logp=torch.zeros(2, 3, dtype=F64),
            mask=torch.ones(2, 3),
            beta=0.1,
        )

    def test_kl_shaped_shapes(self):
        with pytest.raises(ValueError, match="ref_logp"):
            kl_shaped_rewards(**{**self.good(), "ref_logp": torch.zeros(2, 4, dtype=F64)})
        with pytest.raises(ValueError, match="scores"):
            kl_shaped_rewards(**{**self.good(), "scores": t([1.0, 2.0, 3.0])})
        with pytest.raises(ValueError, match="mask"):
            kl_shaped_rewards(**{**self.good(), "mask": torch.ones(2, 2)})

    def test_kl_shaped_empty_row(self):
        with pytest.raises(ValueError, match="mask"):
            kl_shaped_rewards(**{**self.good(), "mask": torch.tensor([[1, 1, 0], [0, 0, 0]])})

    def test_kl_shaped_mask_not_binary(self):
        with pytest.raises(ValueError, match="mask"):
            kl_shaped_rewards(**{**self.good(), "mask": torch.tensor([[1, 1, 2], [1, 1, 1]])})

    def test_kl_shaped_types_and_values(self):
        with pytest.raises(ValueError, match="scores"):
            kl_shaped_rewards(**{**self.good(), "scores": t([1.0, float("nan")])})
        with pytest.raises(ValueError, match="scores"):
            kl_shaped_rewards(**{**self.good(), "scores": [1.0, 2.0]})
        with pytest.raises(ValueError, match=r"\blogp\b"):
            kl_shaped_rewards(**{**self.good(), "logp": torch.zeros(2, 3, dtype=torch.long)})
        with pytest.raises(ValueError, match="beta"):
            kl_shaped_rewards(**{**self.good(), "beta": -0.1})
