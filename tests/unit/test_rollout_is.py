"""The sampler/trainer correction: ``rollout_is_weight`` against hand-computed values of TRL 1.16's four
``vllm_importance_sampling_mode`` rules, and ``policy_loss``'s ``is_weight`` against the gradient by hand."""

import math

import pytest
import torch
from torch.testing import assert_close

from grpo_lab.core.losses import ROLLOUT_IS_MODES, policy_loss, rollout_is_weight

# One row of three tokens, the last one padding: log-prob differences (trainer - sampler) +0.5 and -1.0.
TRAIN = torch.tensor([[-1.0, -2.0, 0.0]], dtype=torch.float64)
SAMPLE = torch.tensor([[-1.5, -1.0, -9.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
E_HALF, E_MINUS1, E_MINUS_HALF = math.exp(0.5), math.exp(-1.0), math.exp(-0.5)  # 1.6487, 0.3679, 0.6065


@pytest.mark.parametrize(
    "mode, clip_max, clip_min, expected",
    [
        ("token_truncate", 1.5, None, [[1.5, E_MINUS1, 1.0]]),  # padding: no difference, ratio 1
        ("token_truncate", 1.5, 0.5, [[1.5, 0.5, 1.0]]),
        ("token_mask", 1.5, None, [[0.0, E_MINUS1, 1.0]]),
        ("token_mask", 2.0, 0.5, [[E_HALF, 0.0, 1.0]]),
        ("token_truncate", 3.0, None, [[E_HALF, E_MINUS1, 1.0]]),  # nothing reaches TRL's default C_max
        ("sequence_truncate", 0.5, None, [[0.5]]),  # exp(0.5 - 1.0) = 0.6065, clamped to 0.5
        ("sequence_truncate", 3.0, None, [[E_MINUS_HALF]]),
        ("sequence_mask", 0.5, None, [[0.0]]),
        ("sequence_mask", 3.0, 0.7, [[0.0]]),  # below C_min
        ("sequence_mask", 3.0, 0.5, [[E_MINUS_HALF]]),
    ],
)
def test_weight_matches_hand_values(mode, clip_max, clip_min, expected):
    w = rollout_is_weight(TRAIN, SAMPLE, MASK, mode, clip_max=clip_max, clip_min=clip_min)
    assert_close(w, torch.tensor(expected, dtype=torch.float64))


def test_no_bounds_leaves_the_raw_ratio():
    w = rollout_is_weight(TRAIN, SAMPLE, MASK, "token_truncate", clip_max=None)
    assert_close(w, torch.tensor([[E_HALF, E_MINUS1, 1.0]], dtype=torch.float64))


def test_same_sampler_gives_weight_one_in_every_mode():
    for mode in ROLLOUT_IS_MODES:
        w = rollout_is_weight(TRAIN, TRAIN.clone(), MASK, mode)
        assert torch.equal(w, torch.ones_like(w)), mode


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "token"}, "mode must be one of"),
        ({"mode": "token_mask", "clip_max": -1.0}, "clip_max"),
        ({"mode": "token_mask", "clip_max": 1.0, "clip_min": 2.0}, "clip_min must be <= clip_max"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rollout_is_weight(TRAIN, SAMPLE, MASK, **kwargs)


def test_is_weight_scales_each_tokens_gradient_and_not_the_kl():
    """On-policy with ``token_mean``: d loss / d logp_t = -A_i w_t / N (N valid tokens), and the KL term is added
    after the weight, unweighted (TRL multiplies ``per_token_loss`` before adding ``beta * per_token_kl``)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    w = torch.tensor([[0.5, 2.0, 0.0], [1.0, 3.0, 1.0]], dtype=torch.float64)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, aggregation="token_mean", is_weight=w)
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(-grad, torch.tensor([[0.5, 2.0, 0.0], [-2.0, -6.0, 0.0]], dtype=torch.float64) / 5)

    kl = torch.full_like(logp, 0.1)
    with_kl, _ = policy_loss(logp, logp.detach(), adv, mask, aggregation="token_mean", is_weight=w, kl=kl, beta=1.0)
    assert_close(with_kl - loss, torch.tensor(0.1, dtype=torch.float64))  # every valid token's 0.1, unweighted


def test_sequence_weight_broadcasts_over_its_tokens():
    logp = torch.tensor([[-1.0, -2.0], [-0.3, -0.7]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 2, dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    loss, _ = policy_loss(
        logp, logp.detach(), adv, mask, aggregation="token_mean", is_weight=torch.tensor([[2.0], [0.0]])
    )
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(-grad, torch.tensor([[0.5, 0.5], [0.0, 0.0]], dtype=torch.float64))


def test_is_weight_of_wrong_shape_is_refused():
    logp = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="is_weight must be"):
        policy_loss(logp, logp, torch.ones(2), torch.ones(2, 3), is_weight=torch.ones(2, 2))
