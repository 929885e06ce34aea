"""Reward shaping that belongs to the algorithms, not to a task: DAPO's soft overlong penalty and
the RLHF reward with the KL folded in. Task rewards (is the answer right?) live in ``tasks.py``.
"""

from __future__ import annotations

import torch

from .checks import check_float, check_mask, check_number, check_positive_int, check_same_shape, check_tensor


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), ``[B] -> [B]``, added to the reward.

    ``0`` up to ``max_len - cache_len`` tokens, then a linear ramp down to ``-1`` at ``max_len``,
    and ``-1`` beyond it.
    """
    lengths = check_tensor("lengths", lengths, ndim=1)
    if lengths.is_floating_point() and not torch.isfinite(lengths).all():
        raise ValueError("lengths must be finite")
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got min {lengths.min().item()}")
    check_positive_int("max_len", max_len)
    check_positive_int("cache_len", cache_len, maximum=max_len)  # at most max_len: the ramp starts at >= 0 tokens
    n = lengths.to(torch.float64)
    expected = max_len - cache_len
    ramp = (expected - n) / cache_len
    penalty = torch.where(n <= expected, torch.zeros_like(n), torch.where(n <= max_len, ramp, -torch.ones_like(n)))
    return penalty.to(torch.get_default_dtype())


def kl_shaped_rewards(
    scores: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """The RLHF per-token reward with the KL folded in (Ziegler et al. 2019; InstructGPT): ``[B, T]``.

    ``r_t = -beta * (logp_t - ref_logp_t) + 1[t = last] * score``. The KL term is k1 at rollout time
    (no gradient); the score lands on the last valid token of each row. PPO feeds this to GAE, so
    every token's advantage carries the KL paid by the tokens after it.
    """
    scores = check_float("scores", scores, ndim=1)
    logp = check_float("logp", logp, ndim=2)
    ref_logp = check_float("ref_logp", ref_logp, ndim=2)
    check_same_shape("ref_logp", ref_logp, "logp", logp)
    mask = check_mask("mask", mask, "logp", logp)
    beta = check_number("beta", beta, low=0.0)
    if scores.shape[0] != logp.shape[0]:
        raise ValueError(f"scores must have shape ({logp.shape[0]},), got {tuple(scores.shape)}")
    lengths = mask.sum(dim=1).long()
    if (lengths == 0).any():
        raise ValueError("mask must select at least one token per row: the score needs a last token to land on")
    rewards = -beta * (logp - ref_logp).detach() * mask
    rows = torch.arange(logp.shape[0])
    rewards[rows, lengths - 1] += scores.to(rewards.dtype)
    return rewards
