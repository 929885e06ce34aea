"""Edge inputs the math layer must take as a learner gives them: padding that holds -inf or NaN,
a vocabulary masked with -inf, integer rewards, NumPy integers, and tensors that hold no data.

Expected values are computed here by hand (plain Python ``math``), not read from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from grpo_lab.core.advantages import group_advantages
from grpo_lab.core.losses import entropy_from_logits, masked_mean, masked_sum, policy_loss

NAN, INF = float("nan"), float("inf")


def test_masked_mean_ignores_minus_inf_and_nan_under_the_mask():
    x = torch.tensor([[1.0, 2.0, -INF], [3.0, 4.0, NAN]])
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 0]])
    assert masked_mean(x, mask).item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert masked_sum(x, mask).item() == pytest.approx(10.0)
    assert masked_mean(x, mask, dim=1).tolist() == pytest.approx([1.5, 3.5])


def test_entropy_of_a_masked_vocabulary_is_the_entropy_of_the_rest():
    # softmax over {0, 1}: p = (1, e) / (1 + e); H = -sum p log p.
    p = [1 / (1 + math.e), math.e / (1 + math.e)]
    want = -sum(q * math.log(q) for q in p)
    got = entropy_from_logits(torch.tensor([[0.0, -INF, 1.0]]))
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_entropy_of_a_masked_vocabulary_has_a_finite_gradient():
    # dH/dz_i = -p_i (z_i - E_p[z]) over the unmasked logits {0, 1}; a masked logit gets 0.
    p = [1 / (1 + math.e), math.e / (1 + math.e)]
    mean = p[1]
    want = [-p[0] * (0 - mean), 0.0, -p[1] * (1 - mean)]
    logits = torch.tensor([[0.0, -INF, 1.0]], dtype=torch.float64, requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    assert logits.grad[0].tolist() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("pad", [-INF, NAN])
@pytest.mark.parametrize("ratio_level", ["token", "sequence", "sequence_token"])
def test_policy_loss_ignores_what_padding_holds(pad, ratio_level):
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -0.9]], dtype=torch.float64)
    old = torch.tensor([[-1.1, -1.9, -0.6], [-0.2, -0.8, -0.9]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    want, want_stats = policy_loss(lp, old, adv, mask, ratio_level=ratio_level)
    padded = lp.clone().requires_grad_(True)
    with torch.no_grad():
        padded[1, 2] = pad
    old_padded = old.clone()
    old_padded[1, 2] = pad
    got, got_stats = policy_loss(padded, old_padded, adv, mask, ratio_level=ratio_level)
    assert got.item() == pytest.approx(want.item(), abs=1e-12)
    assert got_stats == pytest.approx(want_stats)
    got.backward()
    assert torch.isfinite(padded.grad).all() and padded.grad[1, 2] == 0


def test_policy_loss_still_refuses_a_non_finite_value_under_the_mask():
    lp = torch.zeros(1, 2, dtype=torch.float64)
    lp[0, 0] = -INF
    with pytest.raises(ValueError, match=r"^logp must be finite"):
        policy_loss(lp, torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, dtype=torch.float64), torch.ones(1, 2))


def test_meta_tensors_are_refused_with_a_value_error_naming_the_argument():
    lp = torch.zeros(2, 3, device="meta")
    with pytest.raises(ValueError, match=r"^logp .*meta"):
        policy_loss(lp, lp, torch.zeros(2, device="meta"), torch.ones(2, 3, device="meta"))


def _by_hand(rewards: list[float], g: int) -> list[float]:
    out = []
    for i in range(0, len(rewards), g):
        grp = rewards[i : i + g]
        mean = sum(grp) / g
        std = math.sqrt(sum((r - mean) ** 2 for r in grp) / (g - 1))
        out += [(r - mean) / (std + 1e-4) for r in grp]
    return out


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_group_advantages_take_integer_rewards(dtype):
    got = group_advantages(torch.tensor([1, 0, 0, 1]).to(dtype), 2)
    assert got.is_floating_point()
    assert got.tolist() == pytest.approx(_by_hand([1, 0, 0, 1], 2))


def test_group_advantages_take_a_numpy_group_size():
    got = group_advantages(torch.tensor([1.0, 0, 0, 1]), np.int64(2))
    assert got.tolist() == pytest.approx(_by_hand([1, 0, 0, 1], 2))


def test_a_numpy_bool_is_still_not_a_group_size():
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.tensor([1.0, 0, 0, 1]), np.bool_(True))
