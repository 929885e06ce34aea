"""Exact expected updates on an answer bandit: no sampling noise, so a mechanism shows by itself.

One prompt has ``K`` possible answers, each a fixed string with a known length and reward, and the
policy is a softmax over them (logits ``theta``, ``[K]``). A group of ``G`` answers is one of
``K**G`` ordered draws; every draw is enumerated with its probability, the lab's own advantages
(``group_advantages``) and aggregation weights (``token_gradient_weights``) are applied to it, and
the results are averaged. What comes out is the expected update the trainer makes, exactly.

Why an answer's weight is its per-token weight: the gradient of ``sum_t W_i log pi(token_t)`` is
``W_i grad log pi(o_i)`` when ``W_i`` is the same on every token of answer ``i`` (it is, for every
aggregation here), and for a softmax over answers ``grad_theta log pi(k) = e_k - pi``.
"""

from __future__ import annotations

import itertools

import torch

from .advantages import group_advantages
from .checks import check_positive_int
from .losses import token_gradient_weights


def draws(K: int, G: int) -> torch.Tensor:
    """Every ordered group of ``G`` answers out of ``K``: ``[K**G, G]`` answer indices."""
    K, G = check_positive_int("K", K), check_positive_int("G", G)
    if K**G > 200_000:
        raise ValueError(f"K**G must be at most 200000 to enumerate, got K={K}, G={G} ({K**G} groups)")
    return torch.tensor(list(itertools.product(range(K), repeat=G)), dtype=torch.long)


def _answers(rewards, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if not (rewards.ndim == 1 and rewards.shape == lengths.shape):
        raise ValueError(
            f"rewards and lengths must be 1-D of one length K, got {tuple(rewards.shape)} and {tuple(lengths.shape)}"
        )
    if (lengths < 1).any():
        raise ValueError(f"lengths must be >= 1 token, got {lengths.tolist()}")
    return rewards, lengths


def group_weights(
    rewards: list[float] | torch.Tensor,
    lengths: list[int] | torch.Tensor,
    G: int,
    aggregation: str = "seq_mean_token_mean",
    scale: str = "group",
    max_len: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(draws [K**G, G], W [K**G, G])``: every ordered group and the weight ``policy_loss`` gives
    each token of each of its answers on-policy (``A_i / (G |o_i|)`` for GRPO's
    ``seq_mean_token_mean``, ``A_i / sum|o|`` for ``token_mean``, ``A_i / (G max_len)`` for Dr. GRPO's
    ``seq_mean_token_sum_norm``), with ``A`` from ``group_advantages(..., scale)``. The weights do
    not depend on the policy, only on which answers the group holds."""
    rewards, lengths = _answers(rewards, lengths)
    max_len = int(lengths.max()) if max_len is None else check_positive_int("max_len", max_len)
    groups = draws(len(rewards), G)
    by_content: dict[tuple[int, ...], torch.Tensor] = {}  # a group's weights follow its answers when reordered
    W = torch.empty(groups.shape, dtype=torch.float64)
    for n, g in enumerate(groups):
        order = torch.argsort(g, stable=True)
        key = tuple(g[order].tolist())
        if key not in by_content:
            sorted_g = g[order]
            A = group_advantages(rewards[sorted_g], G, scale=scale)
            by_content[key] = token_gradient_weights(lengths[sorted_g], A, aggregation, max_len)[:, 0]
        W[n, order] = by_content[key]
    return groups, W


def expected_gradient(theta: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The expected gradient-ascent direction on the logits, ``E[sum_i W_i (e_{k_i} - pi)]``, ``[K]``,
    over every group drawn from ``softmax(theta)``, with ``weights = group_weights(rewards, lengths, G, ...)``
    (they do not depend on the policy, so one table serves every ``theta``)."""
    groups, W = weights
    theta = torch.as_tensor(theta, dtype=torch.float64)
    K = int(groups.max()) + 1
    if tuple(theta.shape) != (K,):
        raise ValueError(f"theta must be 1-D with one logit per answer of weights (K = {K}), got {tuple(theta.shape)}")
    pi = torch.softmax(theta, 0)
    prob = pi[groups].prod(dim=1)  # [K**G]
    onehot = torch.nn.functional.one_hot(groups, K).double()  # [K**G, G, K]
    per_group = (W.unsqueeze(-1) * (onehot - pi)).sum(dim=1)  # [K**G, K]
    return prob @ per_group


def follow(
    theta: torch.Tensor,
    rewards: list[float] | torch.Tensor,
    lengths: list[int] | torch.Tensor,
    G: int,
    steps: int,
    lr: float,
    aggregation: str = "seq_mean_token_mean",
    scale: str = "group",
    max_len: int | None = None,
) -> torch.Tensor:
    """Take ``steps`` exact expected steps ``theta += lr * expected_gradient``: ``[steps + 1, K]`` policies."""
    theta = torch.as_tensor(theta, dtype=torch.float64).clone()
    weights = group_weights(rewards, lengths, G, aggregation, scale, max_len)
    out = [torch.softmax(theta, 0)]
    for _ in range(check_positive_int("steps", steps)):
        theta = theta + lr * expected_gradient(theta, weights)
        out.append(torch.softmax(theta, 0))
    return torch.stack(out)


def entropy(pi: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of a distribution ``[K]`` (or each row of ``[N, K]``), in nats."""
    return -(pi * pi.clamp_min(1e-300).log()).sum(dim=-1)


def entropy_change(pi: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """First-order change of the entropy when the logits move by ``step``: ``grad H . step``, where
    ``dH/dtheta_j = -pi_j (log pi_j + H)``. For an advantage table ``A`` with ``E_pi[A] = 0``, the
    policy-gradient step ``pi * A`` gives ``-Cov_pi(log pi, pi * A)`` and the natural-gradient step
    ``A`` gives ``-Cov_pi(log pi, A)`` (Cui et al. 2025, "The Entropy Mechanism of Reinforcement
    Learning for Reasoning Language Models", for softmax policies): entropy falls when the likely
    answers are the ones pushed up, and rises when unlikely answers are pushed up or likely ones down."""
    H = entropy(pi)
    return -(pi * (pi.log() + H) * step).sum(dim=-1)


def covariance(pi: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``Cov_{a ~ pi}(x(a), y(a))`` for tables ``x, y`` of shape ``[K]``."""
    return (pi * (x - pi @ x) * (y - pi @ y)).sum()
